"""The Blender round trips (`motionmatch bench interop`, tests/io/test_blender.py): our glTF exports opened
by Blender's own importer, and FBX files Blender makes from a BVH read back by io/fbx.py.

Each check compares joint world positions (metres) by joint name; the figures are the largest error in
millimetres over the compared frames (ERROR_BOUND_MM is what the issue asks for). Blender runs in its own
environment (io.fbx.blender_python), so these checks need it installed.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..motion.animation import Animation
from ..io.bvh import read_bvh
from ..io.fbx import clips_from_sample, read_blender_sample, read_fbx_clips, run_blender
from ..body.export import export_gltf
from ..body.rigged_model import load_rigged_model, retarget_to_model
from ..motion.preprocess import resample
from ..io.bvh import write_bvh

ERROR_BOUND_MM = 1.0
SAMPLED_FRAMES = 10


def _positions_by_name(anim: Animation, names: list[str]) -> np.ndarray:
    gpos, _ = anim.global_transforms()
    return gpos[:, [anim.skeleton.index(n) for n in names]]


def blender_reads_export(anim: Animation, out_dir, mesh: str | None) -> dict:
    """Export `anim` (60 fps) as a .glb (mesh None or "auto"), open it with Blender's glTF importer and
    compare its armature's joints with ours at SAMPLED_FRAMES frames spread over the clip."""
    out_dir = Path(out_dir)
    glb = export_gltf(anim, out_dir / f"interop_{mesh or 'skeleton'}.glb", mesh=mesh)
    sample = out_dir / f"interop_{mesh or 'skeleton'}.npz"
    run_blender("glb", str(glb.resolve()), str(sample), what=str(glb))
    d = read_blender_sample(sample)
    theirs = clips_from_sample(d, str(glb))
    ours = _positions_by_name(anim, anim.skeleton.names)
    frames = np.unique(np.linspace(0, anim.num_frames - 1, SAMPLED_FRAMES).round().astype(int))
    row = {"check": f"Blender opens our export ({'with --mesh auto' if mesh else 'skeleton only'})",
           "armatures": int(d["armatures"]), "skinned_meshes": int(d["meshes"]),
           "frames": [int(theirs[0].num_frames) if theirs else 0, int(anim.num_frames)],
           "error_mm": None}
    if theirs and set(anim.skeleton.names) <= set(theirs[0].skeleton.names) \
            and theirs[0].num_frames == anim.num_frames:
        got = _positions_by_name(theirs[0], anim.skeleton.names)
        row["error_mm"] = float(np.abs(got[frames] - ours[frames]).max() * 1000)
    row["ok"] = (row["armatures"] == 1 and row["skinned_meshes"] == (1 if mesh else 0)
                 and row["frames"][0] == row["frames"][1] and row["error_mm"] is not None
                 and row["error_mm"] < ERROR_BOUND_MM)
    return row


def blender_reads_model_export(anim: Animation, model_path, out_dir) -> dict:
    """Export `anim` onto a rigged model (`export --mesh MODEL.glb`: the model's file whole), open it
    with Blender and compare its armature's joints with the retargeted motion's at SAMPLED_FRAMES frames;
    skinned_meshes counts the meshes Blender binds to the armature (every mesh of the model)."""
    out_dir = Path(out_dir)
    glb = export_gltf(anim, out_dir / "interop_model.glb", mesh=str(model_path))
    sample = out_dir / "interop_model.npz"
    run_blender("glb", str(glb.resolve()), str(sample), what=str(glb))
    d = read_blender_sample(sample)
    model = load_rigged_model(model_path)
    ours = retarget_to_model(anim, model)
    theirs = clips_from_sample(d, str(glb))[0]
    frames = np.unique(np.linspace(0, ours.num_frames - 1, SAMPLED_FRAMES).round().astype(int))
    names = model.skeleton.names
    err = float(np.abs(_positions_by_name(theirs, names)[frames] - _positions_by_name(ours, names)[frames]).max()
                * 1000) if theirs.num_frames == ours.num_frames else None
    return {"check": f"Blender opens our export onto {Path(model_path).name}", "armatures": int(d["armatures"]),
            "skinned_meshes": int(d["meshes"]), "frames": [int(theirs.num_frames), int(ours.num_frames)],
            "error_mm": err, "ok": int(d["armatures"]) == 1 and err is not None and err < ERROR_BOUND_MM}


def make_fbx(bvh_path, out_fbx) -> Path:
    """A Blender-made FBX of a BVH (Blender's BVH importer, then its FBX exporter, keys baked unsimplified)."""
    run_blender("fbx", str(Path(bvh_path).resolve()), str(Path(out_fbx).resolve()), what=str(bvh_path))
    return Path(out_fbx)


def fbx_reads_back(bvh_path, out_dir) -> dict:
    """A Blender-made FBX of `bvh_path` read by io/fbx.py against the BVH itself, every frame."""
    src = read_bvh(bvh_path)
    fbx = make_fbx(bvh_path, Path(out_dir) / (Path(bvh_path).stem + ".fbx"))
    clips = read_fbx_clips(fbx)
    got = _positions_by_name(clips[0], src.skeleton.names)
    want = _positions_by_name(src, src.skeleton.names)
    n = min(len(got), len(want))
    err = float(np.abs(got[:n] - want[:n]).max() * 1000)
    return {"check": "a Blender-made FBX read back", "clips": len(clips), "frames": [len(got), len(want)],
            "error_mm": err, "ok": len(got) == len(want) and err < ERROR_BOUND_MM}


def interop_report(bvh_path, out_dir) -> list[dict]:
    """Every round trip on one BVH (its first 2 s when longer): the rows `bench interop` prints."""
    anim = read_bvh(bvh_path)
    anim = resample(anim, 60.0)
    if anim.num_frames > 120:
        anim.positions, anim.rotations = anim.positions[:120], anim.rotations[:120]
    clip = Path(out_dir) / "interop_clip.bvh"
    write_bvh(clip, anim)
    anim = read_bvh(clip)
    return [blender_reads_export(anim, out_dir, None), blender_reads_export(anim, out_dir, "auto"),
            fbx_reads_back(clip, out_dir)]
