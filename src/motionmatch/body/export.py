"""`motionmatch export`: motion (BVH) to glTF binary at 60 fps, or to USD at its own frame rate, with an
optional skinned body.

mesh=None writes the skeleton and its animation only; mesh="auto" adds the default body generated for
the motion's skeleton (mesh.body_mesh); mesh=PATH to a rigged humanoid .glb puts the motion on that
character (retargeted with rigged_model.retarget_to_model). glTF writes the character's own file whole:
every mesh and skin, materials, UVs and textures, its animations replaced by the motion (io.gltf_graft).
USD writes the model's skeleton, every skinned mesh with its UVs and material, and the motion
(io.usd); several motions (a crowd) become one stage with one skeleton per motion.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..motion.animation import Animation
from ..io.gltf import BODY_MATERIAL, MeshPart, write_gltf
from ..motion.preprocess import resample
from ..io.gltf import read_glb
from ..io.gltf_graft import graft_motion
from ..io.usd import UsdCharacter, write_usd
from ..maths.rotations import quat_identity
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


def usd_characters(anims: list[Animation], names: list[str], mesh: str | Path | None = "auto") -> list[UsdCharacter]:
    """The characters a USD export writes: each motion named, with no mesh, the default body (built once
    per distinct skeleton) or the rigged model's meshes and materials (the motion retargeted onto it)."""
    if mesh is not None and str(mesh) != "auto":
        model = load_rigged_model(mesh)
        return [UsdCharacter(name=n, anim=retarget_to_model(a, model), bind_positions=model.skeleton.offsets,
                             bind_rotations=model.bind_rotations, parts=model.parts) for a, n in zip(anims, names)]
    out, bodies = [], {}
    for a, n in zip(anims, names):
        sk = a.skeleton
        if mesh is None:
            out.append(UsdCharacter(name=n, anim=a, bind_positions=np.asarray(sk.offsets, np.float64),
                                    bind_rotations=quat_identity((sk.num_joints,))))
            continue
        key = (tuple(sk.names), tuple(int(p) for p in sk.parents), np.asarray(sk.offsets, np.float64).tobytes())
        if key not in bodies:
            bodies[key] = MeshPart(name="Body", mesh=body_mesh(sk), material=BODY_MATERIAL)
        body = bodies[key]
        out.append(UsdCharacter(name=n, anim=a, bind_positions=body.mesh.bind_positions,
                                bind_rotations=body.mesh.bind_rotations, parts=[body]))
    return out


def export_usd(anims: list[Animation], out, names: list[str], mesh: str | Path | None = "auto") -> Path:
    """Write the motions (one frame rate, kept) as one USD stage, .usda/.usdc/.usdz by out's suffix, one
    skeleton each named by `names`; see the module docstring for `mesh`."""
    return write_usd(out, usd_characters(anims, names, mesh))
