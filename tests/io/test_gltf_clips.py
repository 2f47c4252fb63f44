"""glTF clips in: `motionmatch build` on .glb files (alone or mixed with BVH), their animations as clips,
key times resampled to 60 fps with glTF's interpolation rules, and the round trip BVH -> export -> build."""
from __future__ import annotations

import json
import struct

import numpy as np
import pygltflib
import pytest

from motionmatch.cli import main
from motionmatch.posedb.database import load_database
from motionmatch.io.bvh import read_bvh
from motionmatch.io.clips import read_clips
from motionmatch.io.gltf import GLTFError
from motionmatch.io.gltf_clips import read_gltf_clips, sample_channel
from motionmatch.maths.rotations import quat_from_angle_axis, quat_slerp
from rig_fixtures import write_animated_mixamo_rig

MM = 1e-3



def _build(tmp_path, name, *data):
    out = tmp_path / f"{name}.npz"
    assert main(["build", *map(str, data), "-o", str(out), "--quiet", "--no-mirror"]) == 0
    return load_database(out)


def _joint_positions(db):
    """World positions (F, J, 3) of the clip joints (the simulation bone, index 0, left out) by name."""
    gpos, _ = db.global_transforms()
    return gpos[:, 1:], db.skeleton.names[1:]


@pytest.mark.parametrize("mesh", [None, "auto"])
def test_bvh_exported_to_glb_builds_the_same_database(walk_bvh, tmp_path, mesh):
    glb = tmp_path / "walk.glb"
    assert main(["export", str(walk_bvh), "-o", str(glb)] + (["--mesh", "auto"] if mesh else [])) == 0
    a, b = _build(tmp_path, "from_bvh", walk_bvh), _build(tmp_path, "from_glb", glb)
    assert b.range_names == ["walk.glb:motion"]
    assert a.skeleton.names == b.skeleton.names and a.num_frames == b.num_frames == 120
    pa, _ = _joint_positions(a)
    pb, _ = _joint_positions(b)
    # Measured 0.0006 mm (float32 storage); the bound is 1 mm.
    assert np.abs(pa - pb).max() < 0.01 * MM


def test_a_folder_mixing_bvh_and_glb_builds_every_clip(walk_bvh, tmp_path):
    folder = tmp_path / "clips"
    folder.mkdir()
    (folder / "walk.bvh").write_bytes(walk_bvh.read_bytes())
    assert main(["export", str(walk_bvh), "-o", str(folder / "walk_copy.glb")]) == 0
    db = _build(tmp_path, "mixed", folder)
    assert db.range_names == ["walk.bvh", "walk_copy.glb:motion"]
    p, _ = _joint_positions(db)
    first, second = p[:120], p[120:]
    assert np.abs(first - second).max() < 0.01 * MM


def test_a_mixamo_style_rig_in_centimetres_under_a_turned_armature_builds_in_metres(tmp_path):
    path, names, world = write_animated_mixamo_rig(tmp_path / "mixamo_walk.glb", keys=31, fps=30.0)
    clips = read_clips(path)
    assert [c.name for c in clips] == ["Walk"] and clips[0].fps == 60.0 and clips[0].num_frames == 61
    db = _build(tmp_path, "mixamo", path)
    assert db.range_names == ["mixamo_walk.glb:Walk"]
    p, db_names = _joint_positions(db)
    p = p[:, [db_names.index(n) for n in names]]
    # Keys every other 60 fps frame: there the clip is the source exactly (measured 0.0001 mm).
    assert np.abs(p[::2] - world).max() < 0.01 * MM
    # Between keys LINEAR interpolation puts the hips halfway between their keyed positions.
    hips = names.index("mixamorig:Hips")
    assert np.abs(p[1::2, hips] - 0.5 * (world[:-1, hips] + world[1:, hips])).max() < 0.01 * MM


def test_every_animation_is_a_clip_named_after_it(tmp_path):
    path, _, _ = write_animated_mixamo_rig(tmp_path / "two.glb")
    g = pygltflib.GLTF2().load(str(path))
    second = pygltflib.Animation(name="Idle", samplers=g.animations[0].samplers[:1],
                                 channels=[pygltflib.AnimationChannel(sampler=0, target=g.animations[0].channels[0].target)])
    g.animations.append(second)
    g.save_binary(str(path))
    clips = read_gltf_clips(path)
    assert [c.name for c in clips] == ["Walk", "Idle"]
    # Idle moves one joint; the others keep their rest transforms.
    assert np.allclose(clips[1].positions[:, 1:], clips[1].skeleton.offsets[1:], atol=1e-9)


def test_samplers_follow_gltfs_interpolation_rules():
    times = np.array([0.0, 1.0, 3.0])
    values = np.array([[0.0], [2.0], [4.0]])
    t = np.array([-1.0, 0.0, 0.5, 1.0, 2.0, 3.0, 4.0])
    assert np.allclose(sample_channel(times, values, "LINEAR", t, False)[:, 0], [0, 0, 1, 2, 3, 4, 4])
    assert np.allclose(sample_channel(times, values, "STEP", t, False)[:, 0], [0, 0, 0, 2, 2, 4, 4])
    # CUBICSPLINE: (in-tangent, value, out-tangent) per key; tangents of slope 2 on a line of slope 2 over
    # [0, 1] give the line back, and the Hermite curve meets every key.
    cubic = np.array([[0.0], [0.0], [2.0], [2.0], [2.0], [0.0], [0.0], [4.0], [0.0]])
    out = sample_channel(times, cubic, "CUBICSPLINE", t, False)[:, 0]
    assert np.allclose(out[[1, 3, 5]], [0, 2, 4]) and np.isclose(out[2], 1.0)
    # Rotations: slerp, the short way round even when the file stores the far sign.
    a = quat_from_angle_axis(np.array(0.0), np.array([0.0, 1.0, 0.0]))
    b = -quat_from_angle_axis(np.array(1.0), np.array([0.0, 1.0, 0.0]))
    mid = sample_channel(np.array([0.0, 1.0]), np.stack([a, b]), "LINEAR", np.array([0.5]), True)[0]
    assert np.allclose(np.abs(mid), np.abs(quat_slerp(a, -b, 0.5)))


def _glb_with(path, edit):
    """Rewrite a .glb's JSON chunk through `edit(doc)` (its binary chunk kept)."""
    data = path.read_bytes()
    n = struct.unpack_from("<I", data, 12)[0]
    doc = json.loads(data[20:20 + n])
    edit(doc)
    js = json.dumps(doc).encode()
    js += b" " * (-len(js) % 4)
    rest = data[20 + n:]
    body = struct.pack("<II", len(js), 0x4E4F534A) + js + rest
    path.write_bytes(b"glTF" + struct.pack("<II", 2, 12 + len(body)) + body)
    return path


def test_files_that_are_not_clips_are_refused_by_name(tmp_path):
    path, _, _ = write_animated_mixamo_rig(tmp_path / "rig.glb")
    gltf = tmp_path / "rig.gltf"
    gltf.write_text("{}")
    with pytest.raises(GLTFError, match=r"rig\.gltf.*binary form \(\.glb\)"):
        read_clips(gltf)
    still = tmp_path / "still.glb"
    still.write_bytes(path.read_bytes())
    _glb_with(still, lambda d: d.pop("animations"))
    with pytest.raises(GLTFError, match=r"still\.glb: no animation"):
        read_clips(still)
    back = tmp_path / "back.glb"
    back.write_bytes(path.read_bytes())

    def bad_interpolation(d):
        d["animations"][0]["samplers"][0]["interpolation"] = "BEZIER"
    with pytest.raises(GLTFError, match=r"back\.glb: animations\[0\] \('Walk'\).*'BEZIER' is not a glTF"):
        read_clips(_glb_with(back, bad_interpolation))
    two_roots = tmp_path / "roots.glb"
    two_roots.write_bytes(path.read_bytes())

    def detach(d):
        hips = d["nodes"][0]
        hips["children"] = hips["children"][1:]
    with pytest.raises(GLTFError, match=r"roots\.glb: the skeleton has 2 root joints"):
        read_clips(_glb_with(two_roots, detach))
    # A build names the bad file and goes on with the good ones.
    ok = tmp_path / "ok"
    ok.mkdir()
    (ok / "rig.glb").write_bytes(path.read_bytes())
    (ok / "still.glb").write_bytes(still.read_bytes())
    db = _build(tmp_path, "partly", ok)
    assert db.range_names == ["rig.glb:Walk"] and db.meta["skipped"] == [str(ok / "still.glb")]


def test_convert_writes_each_clip_as_bvh_or_glb(walk_bvh, tmp_path):
    path, names, world = write_animated_mixamo_rig(tmp_path / "rig.glb")
    assert main(["convert", str(path), str(tmp_path / "walk.bvh")]) == 0
    back = read_bvh(tmp_path / "walk.bvh")
    gpos, _ = back.global_transforms()
    gpos = gpos[:, [back.skeleton.index(n) for n in names]]
    assert np.abs(gpos[::2] - world).max() < 0.01 * MM
    assert main(["convert", str(walk_bvh), str(tmp_path / "walk.glb")]) == 0
    src, glb = read_bvh(walk_bvh), read_clips(tmp_path / "walk.glb")[0]
    assert np.abs(src.global_transforms()[0] - glb.global_transforms()[0]).max() < 0.01 * MM
    # FBX is read, not written: a usage error (cli/outputs.py), tests/cli/test_output_extensions.py has the rest.
    assert main(["convert", str(walk_bvh), str(tmp_path / "walk.fbx")]) == 2


VROID = {"Hips": "J_Bip_C_Hips", "Spine": "J_Bip_C_Spine", "Spine1": "J_Bip_C_Chest", "Spine2": "J_Bip_C_UpperChest",
         "Neck": "J_Bip_C_Neck", "Head": "J_Bip_C_Head", **{f"{s}{a}": f"J_Bip_{s[0]}_{b}" for s in ("Left", "Right")
         for a, b in (("Shoulder", "Shoulder"), ("Arm", "UpperArm"), ("ForeArm", "LowerArm"), ("Hand", "Hand"),
                      ("UpLeg", "UpperLeg"), ("Leg", "LowerLeg"), ("Foot", "Foot"), ("ToeBase", "ToeBase"))}}


@pytest.mark.parametrize("naming", ["unreal", "vroid"])
def test_unreal_and_vroid_named_clips_find_their_roles(tmp_path, naming):
    from rig_fixtures import UNREAL
    rename = UNREAL if naming == "unreal" else VROID
    path, _, world = write_animated_mixamo_rig(tmp_path / f"{naming}.glb")

    def names(d):
        for n in d["nodes"]:
            short = n.get("name", "").removeprefix("mixamorig:")
            if short in rename:
                n["name"] = rename[short]
    db = _build(tmp_path, naming, _glb_with(path, names))
    feet = [db.skeleton.names[db.roles[r]] for r in ("left_foot", "right_toe")]
    assert feet == ([UNREAL["LeftFoot"], UNREAL["RightToeBase"]] if naming == "unreal"
                    else ["J_Bip_L_Foot", "J_Bip_R_ToeBase"])
