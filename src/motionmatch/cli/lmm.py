"""`motionmatch lmm train` (decompressor, stepper and projector from a database) and `motionmatch bench
lmm` (the learned model against classic matching: memory, and with --scenarios the metrics)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .inputs import database_file, existing_file
from .outputs import output_suffix

EXTRA_HINT = "pip install 'motionmatch[learn]'"


class TrainingFrameworkMissing(ImportError):
    """JAX / optax are not installed (they come with the `learn` extra)."""


def require_trainer():
    """The training module; a clear error naming the extra when its framework is missing."""
    try:
        from ..lmm import train
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] in ("jax", "jaxlib", "optax"):
            raise TrainingFrameworkMissing(
                f"training a learned model needs JAX and optax, which are not installed (missing module "
                f"{e.name!r}); install the `learn` extra: {EXTRA_HINT}") from None
        raise
    return train


def database_pose_bytes(db) -> int:
    """Bytes of the arrays a classic motion matching character reads: poses, contacts and features."""
    return int(db.positions.nbytes + db.rotations.nbytes + db.contacts.nbytes + db.features.raw.nbytes)


def register(sub) -> None:
    p = sub.add_parser("lmm", help="learned motion matching: networks that replace the pose database")
    lsub = p.add_subparsers(dest="lmm_cmd", metavar="WHAT")
    pt = lsub.add_parser("train", help="train decompressor, stepper and projector from a database")
    pt.add_argument("--db", required=True, help="pose database (.npz) to learn")
    pt.add_argument("-o", "--out", required=True, help="model file to write (.npz); loss curves go beside it")
    budget = pt.add_mutually_exclusive_group()
    budget.add_argument("--minutes", type=float, default=None,
                        help="total training time, split over the three stages (default 28; set-up adds about a minute)")
    budget.add_argument("--iterations", type=int, default=None, help="iterations per stage instead of a time budget")
    pt.add_argument("--seed", type=int, default=0)
    pt.add_argument("--frames", type=int, default=None, help="train on the database's first frames only")
    pt.add_argument("--hidden", type=int, default=128, help="width of the hidden layers (default 128)")
    pt.add_argument("--projector-noise", type=float, default=None,
                    help="largest noise of the projector's training queries, normalized units (default 0.5; "
                         "a database of a few hundred frames needs 1.0 to answer queries far from its data)")
    pt.add_argument("--quiet", action="store_true", help="no progress bars")
    pt.set_defaults(func=run_lmm_train)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])


def run_lmm_train(args) -> int:
    output_suffix(args.out, (".npz",), "-o", "lmm train")
    database_file(args.db)
    from ..posedb.database import load_database
    try:
        train = require_trainer()
    except TrainingFrameworkMissing as e:
        print(f"motionmatch: error: {e}", file=sys.stderr)
        return 1
    for name, v in (("--minutes", args.minutes), ("--iterations", args.iterations), ("--frames", args.frames),
                    ("--hidden", args.hidden)):
        if v is not None and v <= 0:
            raise ValueError(f"{name} must be positive, got {v}")
    if args.projector_noise is not None and args.projector_noise < 0:
        raise ValueError(f"--projector-noise must be >= 0, got {args.projector_noise}")
    db = load_database(args.db)
    noise = {} if args.projector_noise is None else {"projector_noise": args.projector_noise}
    settings = train.TrainSettings(minutes=args.minutes, iterations=args.iterations, seed=args.seed,
                                   max_frames=args.frames, hidden=args.hidden, progress=not args.quiet, **noise)
    try:
        result = train.train_model(db, args.out, settings)
    except FloatingPointError as e:
        print(f"motionmatch: error: {e}", file=sys.stderr)
        return 1
    m = result.model
    db_bytes = database_pose_bytes(db)
    print(f"wrote {args.out} ({m.nbytes / 1e6:.2f} MB of weights; the database's poses and features take "
          f"{db_bytes / 1e6:.2f} MB: {100.0 * m.nbytes / db_bytes:.1f} %)")
    print(f"loss curves: {train.curves_path(args.out)}")
    for stage, losses in m.info["final_losses"].items():
        print(f"  {stage:13s} {m.info['iterations'][stage]:7d} it  {m.info['seconds'].get(stage, 0):7.1f} s  "
              f"loss {losses['total']:.4g}")
    return 0


def add_bench_lmm_args(p) -> None:
    p.add_argument("--db", required=True, help="pose database the model was trained on")
    p.add_argument("--model", required=True, help="learned model (.npz)")
    p.add_argument("--scenarios", nargs="+", default=None, help="scenario files or folders")
    p.add_argument("--json", action="store_true")


def run_bench_lmm(args) -> int:
    """Memory of the learned model against the classic character's database arrays and, with
    --scenarios, each scenario's metrics for a classic and a learned character (same settings)."""
    database_file(args.db)
    existing_file(args.model, "--model", "learned model file")
    from ..devtools.machine import machine_info
    machine = machine_info()
    from ..posedb.database import load_database
    from ..offline.quality import scenario_files, scenario_metrics
    from ..offline.scenario import load_scenario
    from ..runtime.settings_file import settings_from_dict
    from ..lmm.model import check_model_fits, load_model
    db = load_database(args.db)
    model = load_model(args.model)
    check_model_fits(model, db, args.model)
    out = {"database_bytes": database_pose_bytes(db), "model_bytes": int(model.nbytes), "scenarios": {}}
    classic = settings_from_dict({})
    learned = settings_from_dict({})
    learned.character.mode, learned.character.model = "lmm", str(args.model)
    for path in scenario_files(args.scenarios) if args.scenarios else []:
        scen = load_scenario(path)
        out["scenarios"][path.stem] = {"classic": scenario_metrics(db, scen, classic),
                                       "lmm": scenario_metrics(db, scen, learned)}
    if args.json:
        print(json.dumps({**out, "machine": machine}, indent=1))
        return 0
    ratio = 100.0 * out["model_bytes"] / out["database_bytes"]
    print(f"database: {db.num_frames} frames, poses + contacts + features {out['database_bytes'] / 1e6:.2f} MB")
    print(f"model:    {out['model_bytes'] / 1e6:.2f} MB of arrays ({ratio:.2f} % of the database); "
          f"file {Path(args.model).stat().st_size / 1e6:.2f} MB")
    if out["scenarios"]:
        print("| scenario | mode | NaN frames | foot sliding cm/s | trajectory error mean cm | responsiveness s | "
              "pops p99 m/s^2 (source) | frame us median |")
        print("|---|---|---|---|---|---|---|---|")
    for name, both in out["scenarios"].items():
        for mode, m in both.items():
            r = m["responsiveness_s"]
            print(f"| {name} | {mode} | {m['nan_frames']} | {m['foot_sliding_cm_s']:.1f} | "
                  f"{m['trajectory_error_cm']['mean']:.1f} | {'-' if r is None else f'{r:.2f}'} | "
                  f"{m['pops']['acc_p99_m_s2']:.0f} ({m['pops']['source_acc_p99_m_s2']:.0f}) | "
                  f"{m['frame_us']['median']:.0f} |")
    return 0
