"""`motionmatch export`: a BVH motion as glTF binary (.glb), optionally with a skinned body;
`motionmatch convert`: any motion file the library reads (BVH, glTF, FBX) as BVH or glTF, a file per clip."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from .inputs import existing_file



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
    from ..body.export import EXPORT_FPS, export_gltf
    from ..io.bvh import read_bvh
    anim = read_bvh(src, unit=args.unit)
    out = export_gltf(anim, args.out, args.mesh)
    print(f"wrote {out} ({anim.num_frames / anim.fps:.1f} s of motion at {EXPORT_FPS:g} fps"
          f"{', mesh ' + str(args.mesh) if args.mesh else ''})")
    return 0


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._")[:60] or "clip"


def run_convert(args) -> int:
    existing_file(args.motion, "", "motion file")
    from ..io.bvh import write_bvh
    from ..io.clips import read_clips
    from ..io.gltf import write_gltf
    src, out = Path(args.motion), Path(args.out)
    kind = out.suffix.lower()
    if kind not in (".bvh", ".glb"):
        raise ValueError(f"{out}: convert writes .bvh or .glb (got {out.suffix or 'no extension'})")
    clips = read_clips(src, unit=args.unit)
    if args.clip is not None:
        clips = [c for c in clips if c.name == args.clip]
        if not clips:
            raise ValueError(f"{src}: no clip named {args.clip!r}")
    for c in clips:
        # Several clips: one file each, the clip's name after the output's stem.
        path = out if len(clips) == 1 else out.with_name(f"{out.stem}_{_safe(c.name)}{out.suffix}")
        if kind == ".bvh":
            write_bvh(path, c)
        else:
            write_gltf(path, c)
        print(f"wrote {path} ({c.name or src.name}: {c.num_frames} frames at {c.fps:g} fps, "
              f"{c.skeleton.num_joints} joints)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("export", help="write a motion as glTF binary (.glb), optionally with a skinned body")
    add_export_args(p)
    p.set_defaults(func=run_export)
    p = sub.add_parser("convert", help="convert a motion file (.bvh, .glb, .fbx) to .bvh or .glb, one file per clip")
    p.add_argument("motion", help="motion file (.bvh, .glb; .fbx with the Blender environment, docs/IMPORTING.md)")
    p.add_argument("out", help="file to write (.bvh or .glb); with several clips, OUT_<clip name>.EXT each")
    p.add_argument("--clip", default=None, help="convert only the clip (animation) of this name")
    p.add_argument("--unit", default="auto", help="BVH length unit of the input: auto, m, cm (default auto)")
    p.set_defaults(func=run_convert)
