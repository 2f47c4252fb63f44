"""The round trips through other tools (`motionmatch bench interop`, tests/io/test_blender.py,
tests/io/test_usd.py): our glTF and USD exports opened by Blender's own importers, FBX files Blender makes
from a BVH read back by io/fbx.py, and our USD checked and read back by Pixar's own library.

Each read-back compares joint world positions (metres) by joint name; the figures are the largest error in
millimetres over the compared frames (ERROR_BOUND_MM is what the issue asks for). Blender runs in its own
environment (io.fbx.blender_python), so its checks need it installed; the USD checks need the `usd` extra.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..motion.animation import Animation
from ..io.bvh import read_bvh
from ..io.fbx import Z_UP_TO_Y_UP, clips_from_sample, read_blender_armatures, read_blender_sample, read_fbx_clips, run_blender
from ..io.usd import UsdCharacter, joint_paths, prim_name, require_usd, write_usd
from ..body.export import export_gltf, usd_characters
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


def _sampled(num_frames: int) -> np.ndarray:
    return np.unique(np.linspace(0, num_frames - 1, SAMPLED_FRAMES).round().astype(int))


def usd_checker_findings(path) -> list[tuple[str, str]]:
    """(kind, message) for every finding of Pixar's checker on a USD file, kind "error", "warning" or
    "info". usd-core 26.11's `usdchecker` runs Pixar's validation framework (its Python ComplianceChecker
    is gone from that release); this runs the same validators, the .usdz package rules of its --arkit mode
    included (every registered validator but the root-package-only one)."""
    require_usd(path)
    from pxr import Tf, Usd, UsdValidation
    registry = UsdValidation.ValidationRegistry()
    validators = registry.GetOrLoadValidatorsByName(
        [m.name for m in registry.GetAllValidatorMetadata() if m.name != "usdUtilsValidators:RootPackageValidator"])
    try:
        stage = Usd.Stage.Open(str(path))
    except Tf.ErrorException as e:
        return [("error", f"{path}: Pixar's library cannot open it: {str(e).strip()}")]
    kinds = {UsdValidation.ValidationErrorType.Error: "error", UsdValidation.ValidationErrorType.Warn: "warning"}
    return [(kinds.get(e.GetType(), "info"), e.GetErrorAsString())
            for e in UsdValidation.ValidationContext(validators).Validate(stage) if not e.HasNoError()]


def pxr_joint_positions(path) -> dict[str, tuple[list[str], np.ndarray]]:
    """Per SkelRoot (by prim name): its skeleton's jointNames and the joints' world positions (F, J, 3)
    in metres at every time code of the stage, as Pixar's UsdSkel computes them (UsdSkel.Cache,
    SkeletonQuery.ComputeJointWorldTransforms) and scaled by the stage's metersPerUnit."""
    require_usd(path)
    from pxr import Usd, UsdGeom, UsdSkel
    stage = Usd.Stage.Open(str(path))
    metres = UsdGeom.GetStageMetersPerUnit(stage)
    cache, out = UsdSkel.Cache(), {}
    times = range(int(stage.GetStartTimeCode()), int(stage.GetEndTimeCode()) + 1)
    for prim in stage.Traverse():
        if not prim.IsA(UsdSkel.Skeleton):
            continue
        query = cache.GetSkelQuery(UsdSkel.Skeleton(prim))
        xforms = UsdGeom.XformCache()
        world = []
        for t in times:
            xforms.SetTime(Usd.TimeCode(t))
            world.append(np.array(query.ComputeJointWorldTransforms(xforms))[:, 3, :3])
        out[prim.GetParent().GetName()] = (list(UsdSkel.Skeleton(prim).GetJointNamesAttr().Get()),
                                           np.array(world) * metres)
    return out


def _ours(chars: list[UsdCharacter]) -> dict[str, np.ndarray]:
    return {prim_name(c.name): c.anim.global_transforms()[0] for c in chars}


def pxr_reads_usd(path, chars: list[UsdCharacter], what: str) -> dict:
    """Pixar's UsdSkel reading `path` (written from `chars`) against the characters' own joint positions at
    SAMPLED_FRAMES frames of each."""
    theirs, ours = pxr_joint_positions(path), _ours(chars)
    err, frames = 0.0, []
    for c in chars:
        name = prim_name(c.name)
        if name not in theirs or theirs[name][0] != list(c.anim.skeleton.names):
            err = None
            break
        f = _sampled(c.anim.num_frames)
        err = max(err, float(np.abs(theirs[name][1][f] - ours[name][f]).max() * 1000))
        frames.append(len(theirs[name][1]))
    want = max(c.anim.num_frames for c in chars)
    return {"check": f"Pixar's UsdSkel reads our USD ({what})", "skeletons": len(theirs),
            "frames": [max(frames, default=0), want], "error_mm": err,
            "ok": len(theirs) == len(chars) and err is not None and err < ERROR_BOUND_MM}


def blender_reads_usd(path, chars: list[UsdCharacter], out_dir, what: str) -> dict:
    """Blender's USD importer reading `path` (written from `chars`): an armature per character with an action
    as long as its motion, the meshes bound to it, joints (by name) against ours at SAMPLED_FRAMES frames."""
    sample = Path(out_dir) / (Path(path).name + ".npz")
    run_blender("usd", str(Path(path).resolve()), str(sample), what=str(path))
    arms = {a["armature"]: a for a in read_blender_armatures(sample)}
    ours = _ours(chars)
    err, lengths, meshes = 0.0, [], []
    for c in chars:
        a = arms.get(prim_name(c.name))
        leaves = [p.rsplit("/", 1)[-1] for p in joint_paths(c.anim.skeleton.names, c.anim.skeleton.parents)]
        if a is None or not set(leaves) <= set(str(n) for n in a["names"]):
            err = None
            break
        names = [str(n) for n in a["names"]]
        world = (Z_UP_TO_Y_UP @ a["clip_0"])[..., :3, 3][:, [names.index(n) for n in leaves]]
        lengths.append(len(world))
        meshes.append(a["meshes"])
        if len(world) != c.anim.num_frames:
            err = None
            break
        f = _sampled(c.anim.num_frames)
        err = max(err, float(np.abs(world[f] - ours[prim_name(c.name)][f]).max() * 1000))
    want = [len(c.parts) for c in chars]
    return {"check": f"Blender's USD importer opens our USD ({what})", "armatures": len(arms),
            "skinned_meshes": meshes, "frames": [min(lengths, default=0), min(c.anim.num_frames for c in chars)],
            "error_mm": err,
            "ok": len(arms) == len(chars) and meshes == want and err is not None and err < ERROR_BOUND_MM}


def usd_round_trips(chars: list[UsdCharacter], path, out_dir, what: str, blender: bool = True) -> list[dict]:
    """Write `chars` to `path` (.usda, .usdc or .usdz) and check it three ways: Pixar's checker finds no
    error, Pixar's UsdSkel and Blender (when `blender`) read the joints back within ERROR_BOUND_MM."""
    write_usd(path, chars)
    found = usd_checker_findings(path)
    errors = [m for k, m in found if k == "error"]
    rows = [{"check": f"Pixar's checker on our USD ({what})", "errors": len(errors),
             "warnings": sum(k == "warning" for k, _ in found), "findings": [m for _, m in found][:10],
             "frames": None, "error_mm": None, "ok": not errors}, pxr_reads_usd(path, chars, what)]
    if blender:
        rows.append(blender_reads_usd(path, chars, out_dir, what))
    return rows


CROWD_AGENTS = 20
CROWD_SPACING_M = 1.5


def crowd_of(anim: Animation, n: int = CROWD_AGENTS) -> list[Animation]:
    """n copies of `anim` on a grid CROWD_SPACING_M apart (five a row), each a different stretch of it (the
    clip rolled by 5 frames an agent): a crowd's USD without running a crowd."""
    out = []
    for i in range(n):
        a = Animation(skeleton=anim.skeleton, positions=np.roll(anim.positions, 5 * i, axis=0).copy(),
                      rotations=np.roll(anim.rotations, 5 * i, axis=0).copy(), fps=anim.fps, name=f"agent_{i:03d}")
        a.positions[:, 0] += CROWD_SPACING_M * np.array([i % 5, 0.0, i // 5])
        out.append(a)
    return out


def interop_report(bvh_path, out_dir, model=None, agents: int = CROWD_AGENTS) -> list[dict]:
    """Every round trip on one BVH (its first 2 s when longer): the rows `bench interop` prints. USD: the
    default body (.usda), `agents` copies of the clip as a crowd (.usdc, one skeleton each, the default
    body) and, with `model` (a rigged .glb), the clip on that character (.usdz)."""
    anim = read_bvh(bvh_path)
    anim = resample(anim, 60.0)
    if anim.num_frames > 120:
        anim.positions, anim.rotations = anim.positions[:120], anim.rotations[:120]
    clip = Path(out_dir) / "interop_clip.bvh"
    write_bvh(clip, anim)
    anim = read_bvh(clip)
    rows = [blender_reads_export(anim, out_dir, None), blender_reads_export(anim, out_dir, "auto"),
            fbx_reads_back(clip, out_dir)]
    out_dir = Path(out_dir)
    rows += usd_round_trips(usd_characters([anim], ["walk"], "auto"), out_dir / "walk.usda", out_dir,
                            "default body")
    crowd = crowd_of(anim, agents)
    rows += usd_round_trips(usd_characters(crowd, [a.name for a in crowd], "auto"), out_dir / "crowd.usdc", out_dir,
                            f"a {agents}-agent crowd")
    if model is not None:
        rows += usd_round_trips(usd_characters([anim], ["walk"], model), out_dir / "model.usdz", out_dir,
                                f"onto {Path(model).name}")
    return rows
