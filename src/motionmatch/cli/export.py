"""`motionmatch export`: a BVH motion as glTF binary (.glb), optionally with a skinned body."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..export import EXPORT_FPS, export_gltf
from ..io.bvh import read_bvh


def add_export_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("motion", help="motion file (.bvh)")
    parser.add_argument("-o", "--out", required=True, help="glTF binary to write (.glb)")
    parser.add_argument("--mesh", default=None, metavar="auto|MODEL.glb",
                        help="add a skinned body: 'auto' (generated for the skeleton) or a rigged humanoid .glb")
    parser.add_argument("--unit", default="auto", help="BVH length unit: auto, m, cm (default auto)")


def run_export(args) -> int:
    src = Path(args.motion)
    if not src.is_file():
        raise FileNotFoundError(f"{src}: no such file")
    if src.suffix.lower() != ".bvh":
        raise ValueError(f"{src}: only BVH motion can be exported (got {src.suffix or 'no extension'})")
    if args.mesh not in (None, "auto") and not Path(args.mesh).is_file():
        raise FileNotFoundError(f"{args.mesh}: no such model file (--mesh takes 'auto' or a .glb)")
    anim = read_bvh(src, unit=args.unit)
    out = export_gltf(anim, args.out, args.mesh)
    print(f"wrote {out} ({anim.num_frames / anim.fps:.1f} s of motion at {EXPORT_FPS:g} fps"
          f"{', mesh ' + str(args.mesh) if args.mesh else ''})")
    return 0


def register(sub) -> None:
    p = sub.add_parser("export", help="write a motion as glTF binary (.glb), optionally with a skinned body")
    add_export_args(p)
    p.set_defaults(func=run_export)
