"""`motionmatch retarget IN.bvh --to TARGET.bvh [--map MAP.toml] -o OUT.bvh`."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .outputs import output_suffix


def add_retarget_args(parser: argparse.ArgumentParser) -> None:
    """Arguments of `motionmatch retarget IN.bvh --to TARGET.bvh [--map MAP.toml] -o OUT.bvh`."""
    parser.add_argument("input", help="source motion (BVH)")
    parser.add_argument("--to", required=True, dest="target", help="target skeleton BVH (a frame of it is its bind pose)")
    parser.add_argument("-o", "--output", required=True, help="output BVH on the target skeleton")
    parser.add_argument("--map", dest="mapping", default=None,
                        help="TOML mapping: [joints] target_name = \"source_name\" (optional [source_roles], "
                             "[target_roles]); default pairs the detected roles and the joints between them")
    parser.add_argument("--target-bind-frame", type=int, default=0, help="frame of TARGET.bvh that is its bind pose (default 0)")
    parser.add_argument("--source-bind-frame", "--source-bind", type=int, default=None, dest="source_bind_frame",
                        help="frame of IN.bvh used as the source bind pose (any upright frame; default: the rest "
                             "pose when it shows a standing body, else the clip's most upright frame)")
    parser.add_argument("--no-fit-ground", action="store_true", help="do not shift the hips to keep the feet on the ground")
    parser.add_argument("--unit", default="m", choices=("m", "cm", "mm"), help="length unit of the output BVH")


def run_retarget(args) -> int:
    output_suffix(args.output, (".bvh",), "-o", "retarget")
    for path in (args.input, args.target):
        if not Path(path).is_file():
            print(f"motionmatch retarget: {path}: no such file", file=sys.stderr)
            return 1
    from ..io.bvh import BVHError, read_bvh, write_bvh
    from ..motion.retarget import RetargetError, retarget_animation
    try:
        src = read_bvh(args.input)
        tgt = read_bvh(args.target)
        out = retarget_animation(src, tgt, mapping=args.mapping, target_bind_frame=args.target_bind_frame,
                                 source_bind_frame=args.source_bind_frame, fit_ground=not args.no_fit_ground)
        write_bvh(args.output, out, unit=args.unit)
    except (BVHError, RetargetError, OSError) as e:
        print(f"motionmatch retarget: {e}", file=sys.stderr)
        return 1
    print(f"retargeted {out.num_frames} frames of {args.input} onto {args.target} -> {args.output}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("retarget", help="retarget a BVH to another skeleton")
    add_retarget_args(p)
    p.set_defaults(func=run_retarget)
