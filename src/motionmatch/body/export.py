"""`motionmatch export`: motion (BVH) to glTF binary, at 60 fps, with an optional skinned body.

mesh=None writes the skeleton and its animation only; mesh="auto" adds the default body generated for
the motion's skeleton (mesh.body_mesh); mesh=PATH to a rigged humanoid .glb puts the motion on that
character (retargeted with rigged_model.retarget_to_model) and writes the character's own file whole:
every mesh and skin, materials, UVs and textures, its animations replaced by the motion
(io.gltf_graft).
"""
from __future__ import annotations

from pathlib import Path

from ..motion.animation import Animation
from ..io.gltf import write_gltf
from ..motion.preprocess import resample
from ..io.gltf import read_glb
from ..io.gltf_graft import graft_motion
from .rigged_model import load_rigged_model, retarget_to_model
from .mesh import body_mesh

EXPORT_FPS = 60.0


def export_gltf(anim: Animation, out, mesh: str | Path | None = "auto") -> Path:
    """Write `anim` as a .glb at 60 fps (resampled if needed); see the module docstring for `mesh`."""
    if abs(anim.fps - EXPORT_FPS) > 1e-6:
        anim = resample(anim, EXPORT_FPS)
    if mesh is None:
        return write_gltf(out, anim)
    if str(mesh) == "auto":
        return write_gltf(out, anim, body_mesh(anim.skeleton))
    model = load_rigged_model(mesh)
    gpos, grot = retarget_to_model(anim, model).global_transforms()
    return graft_motion(read_glb(mesh), model.node_of, gpos, grot, anim.fps, out)
