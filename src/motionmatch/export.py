"""`motionmatch export`: motion (BVH) to glTF binary, at 60 fps, with an optional skinned body.

mesh=None writes the skeleton and its animation only; mesh="auto" adds the default body generated for
the motion's skeleton (mesh.body_mesh); mesh=PATH to a rigged humanoid .glb puts the motion on that
character (retargeted with rigged_model.retarget_to_model) and writes the character's own mesh and skin.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .animation import Animation
from .io.gltf import write_gltf

EXPORT_FPS = 60.0


def export_gltf(anim: Animation, out, mesh: str | Path | None = "auto") -> Path:
    """Write `anim` as a .glb at 60 fps (resampled if needed); see the module docstring for `mesh`."""
    from .preprocess import resample
    if abs(anim.fps - EXPORT_FPS) > 1e-6:
        anim = resample(anim, EXPORT_FPS)
    if mesh is None:
        return write_gltf(out, anim)
    if str(mesh) == "auto":
        from .mesh import body_mesh
        return write_gltf(out, anim, body_mesh(anim.skeleton))
    from .rigged_model import load_rigged_model, retarget_to_model
    model = load_rigged_model(mesh)
    return write_gltf(out, retarget_to_model(anim, model), model.mesh)


def add_export_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("motion", help="motion file (.bvh)")
    parser.add_argument("-o", "--out", required=True, help="glTF binary to write (.glb)")
    parser.add_argument("--mesh", default=None, metavar="auto|MODEL.glb",
                        help="add a skinned body: 'auto' (generated for the skeleton) or a rigged humanoid .glb")
    parser.add_argument("--unit", default="auto", help="BVH length unit: auto, m, cm (default auto)")


def run_export(args) -> int:
    from .io.bvh import read_bvh
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
