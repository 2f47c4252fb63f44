"""`motionmatch vr train` and `motionmatch vr eval`: the body-orientation network from the command line."""
from __future__ import annotations

import json
import time
from pathlib import Path

from .outputs import PLOT_SUFFIXES, output_suffix

# Attachment jitter for training (docs/VR.md): 15 degrees cut the held-out error from 7.0 to 6.0 degrees.
JITTER_DEG = 15.0


def register(sub) -> None:
    vr = sub.add_parser("vr", help="VR avatar from three trackers: the body-orientation network")
    vsub = vr.add_subparsers(dest="vr_command", metavar="VR_COMMAND")
    vr.set_defaults(func=lambda args: vr.print_help() or 2)

    t = vsub.add_parser("train", help="train the body-orientation network (needs the `learn` extra)")
    t.add_argument("data", nargs="*", help="BVH files or folders (default: both shared sets); the "
                                           "held-out clips are always left out")
    t.add_argument("-o", "--out", required=True, help="model file to write (.npz)")
    t.add_argument("--data", dest="data_root", help="data root (else $MOTIONMATCH_DATA, else ../shared/mocap)")
    t.add_argument("--rollout", type=int, default=50, help="steps fed their own output per sample (default 50)")
    t.add_argument("--iterations", type=int, default=None, help="iterations per network (default 9000)")
    t.add_argument("--batch", type=int, default=None, help="windows per iteration (default 256)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--no-mirror", action="store_true", help="do not add mirrored clips")
    t.add_argument("--jitter-deg", type=float, default=JITTER_DEG,
                   help=f"per-clip random device attachment rotation, degrees per axis (default {JITTER_DEG:g})")
    t.add_argument("--restart", action="store_true", help="ignore a checkpoint of an earlier run")
    t.add_argument("--plot", help="loss curves PNG (default: OUT with -loss.png)")
    t.add_argument("--quiet", action="store_true", help="no progress bars")
    t.set_defaults(func=run_train)

    e = vsub.add_parser("eval", help="facing error on the held-out clips: HMD forward vs the networks")
    e.add_argument("--model", required=True, help="model file from `vr train`")
    e.add_argument("data", nargs="*", help="BVH files or folders (default: both shared sets); only their "
                                           "held-out clips are used")
    e.add_argument("--data", dest="data_root", help="data root (else $MOTIONMATCH_DATA, else ../shared/mocap)")
    e.add_argument("--json", action="store_true", help="print the JSON document only")
    e.add_argument("--quiet", action="store_true", help="no progress bars")
    e.set_defaults(func=run_eval)


def _parts(args, held_out: bool):
    from ..posedb.datapaths import list_bvh_files
    from ..vr.dataset import default_files, split_held_out
    files = list_bvh_files([Path(d) for d in args.data]) if args.data else default_files(args.data_root)
    train, held = split_held_out(files)
    parts = held if held_out else train
    if not parts:
        raise ValueError(f"no {'held-out' if held_out else 'training'} clips among the {len(files)} BVH files given")
    return parts


def run_train(args) -> int:
    output_suffix(args.out, (".npz",), "-o", "vr train")
    if args.plot:
        output_suffix(args.plot, PLOT_SUFFIXES, "--plot", "vr train")
    try:
        from ..vr.train import TrainSettings, plot_loss_curves, train_orientation
    except ImportError as exc:
        raise ValueError(f"training needs the `learn` extra (pip install 'motionmatch[learn]'): {exc}") from None
    from ..vr.dataset import load_sequences

    t0 = time.perf_counter()
    parts = _parts(args, held_out=False)
    sequences = load_sequences(parts, mirrored=not args.no_mirror, progress=not args.quiet,
                               attachment_jitter_deg=args.jitter_deg, seed=args.seed)
    settings = TrainSettings(rollout=args.rollout, seed=args.seed, progress=not args.quiet)
    if args.iterations is not None:
        settings.iterations = args.iterations
    if args.batch is not None:
        settings.batch = args.batch
    if args.restart:
        Path(str(args.out) + ".ckpt.npz").unlink(missing_ok=True)
    result = train_orientation(sequences, args.out, settings, meta={"clips": len(parts)})
    plot = args.plot or str(Path(args.out).with_suffix("")) + "-loss.png"
    plot_loss_curves(result.history, plot)
    frames = sum(len(s.body_yaw) for s in sequences)
    print(f"wrote {args.out} and {plot}: {len(sequences)} clips, {frames} frames"
          f"{' (resumed from checkpoint)' if result.resumed else ''}; training "
          + ", ".join(f"{k} {v:.0f} s" for k, v in result.seconds.items())
          + f"; total {time.perf_counter() - t0:.0f} s")
    return 0


def run_eval(args) -> int:
    from ..vr.dataset import load_sequences
    from ..vr.orientation import evaluate, load_networks

    networks = load_networks(args.model)
    sequences = load_sequences(_parts(args, held_out=True), progress=not (args.quiet or args.json))
    doc = evaluate(networks, sequences)
    if args.json:
        print(json.dumps(doc))
        return 0
    print(f"held-out frames: {doc['frames']} at 60 fps ({len(sequences)} clips)")
    print(f"{'body facing from':<22} {'mean':>8} {'std':>8}  (degrees)")
    for name, label in (("hmd_forward", "HMD forward"), ("network_r1", "network, r = 1"),
                        ("network", f"network, r = {networks['network'].rollout}")):
        if name in doc:
            print(f"{label:<22} {doc[name]['mean_deg']:8.2f} {doc[name]['std_deg']:8.2f}")
    return 0
