"""T-pose retargeting between skeletons (seed 002 eq. 3.20-3.23) on real clips."""
import argparse
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from bvh_fixtures import lafan1_bvh_text  # noqa: E402

from motionmatch.animation import Animation, Skeleton
from motionmatch.io.bvh import parse_bvh_text, read_bvh, write_bvh
from motionmatch.retarget import (RetargetError, add_retarget_args, auto_mapping, name_key,
                                  retarget_animation, run_retarget)
from motionmatch.rotations import quat_from_scaled_angle_axis, quat_from_yaw, quat_inv, quat_mul, quat_rotate
from motionmatch.skeleton import find_roles

MOCAP = Path("/work/shared/mocap")
BANDAI = MOCAP / "bandai-namco/dataset-1/dataset-1_walk_normal_002.bvh"
JLPM = MOCAP / "jlpm22-locomotion/locomotion_take1.bvh"
pytestmark = pytest.mark.skipif(not (BANDAI.exists() and JLPM.exists()), reason="mocap not available")

# A made-up rig in T-pose (world positions in metres, facing +Z, left = +X): longer thighs, shorter
# shins and arms than the captures, an extra spine joint and twist bones in the chains.
_RIG = [
    ("Hips", None, (0.0, 1.0, 0.0)),
    ("Spine", "Hips", (0.0, 1.12, 0.0)),
    ("Spine1", "Spine", (0.0, 1.24, 0.0)),
    ("Spine2", "Spine1", (0.0, 1.36, 0.0)),
    ("Spine3", "Spine2", (0.0, 1.46, 0.0)),
    ("Neck", "Spine3", (0.0, 1.58, 0.0)),
    ("Head", "Neck", (0.0, 1.68, 0.0)),
]
for _s, _x in (("Left", 1.0), ("Right", -1.0)):
    _RIG += [
        (f"{_s}UpLeg", "Hips", (0.1 * _x, 0.95, 0.0)),
        (f"{_s}UpLegTwist", f"{_s}UpLeg", (0.1 * _x, 0.72, 0.0)),
        (f"{_s}Leg", f"{_s}UpLegTwist", (0.1 * _x, 0.49, 0.0)),
        (f"{_s}Foot", f"{_s}Leg", (0.1 * _x, 0.09, 0.0)),
        (f"{_s}Toe", f"{_s}Foot", (0.1 * _x, 0.09, 0.14)),
        (f"{_s}Shoulder", "Spine3", (0.04 * _x, 1.5, 0.0)),
        (f"{_s}Arm", f"{_s}Shoulder", (0.17 * _x, 1.5, 0.0)),
        (f"{_s}ArmTwist", f"{_s}Arm", (0.3 * _x, 1.5, 0.0)),
        (f"{_s}ForeArm", f"{_s}ArmTwist", (0.43 * _x, 1.5, 0.0)),
        (f"{_s}ForeArmRoll", f"{_s}ForeArm", (0.55 * _x, 1.5, 0.0)),
        (f"{_s}Hand", f"{_s}ForeArmRoll", (0.66 * _x, 1.5, 0.0)),
    ]

def authored_target(yaw=1.2, seed=0) -> Animation:
    """The rig above, turned by `yaw`, with random joint frames: its rest pose (identity rotations) is
    scrambled and only frame 0 (the bind pose) is a T-pose."""
    rig = _dfs_order()
    names = [r[0] for r in rig]
    parents = np.array([-1 if r[1] is None else names.index(r[1]) for r in rig])
    yq = quat_from_yaw(yaw)
    pos = quat_rotate(yq, np.array([r[2] for r in rig], dtype=np.float64))
    rng = np.random.default_rng(seed)
    G = quat_from_scaled_angle_axis(rng.normal(size=(len(names), 3)) * 1.5)
    offsets = np.zeros((len(names), 3))
    lrot = np.zeros((len(names), 4))
    for j, p in enumerate(parents):
        if p < 0:
            offsets[j] = pos[j]
            lrot[j] = G[j]
        else:
            offsets[j] = quat_rotate(quat_inv(G[p]), pos[j] - pos[p])
            lrot[j] = quat_mul(quat_inv(G[p]), G[j])
    ends = {}
    leaf_dir = {"Head": (0, 0.1, 0), "LeftToe": (0, 0, 0.05), "RightToe": (0, 0, 0.05),
                "LeftHand": (0.08, 0, 0), "RightHand": (-0.08, 0, 0)}
    for n, d in leaf_dir.items():
        j = names.index(n)
        ends[j] = quat_rotate(quat_inv(G[j]), quat_rotate(yq, np.array(d, dtype=np.float64)))
    channels = [("Xposition", "Yposition", "Zposition", "Zrotation", "Xrotation", "Yrotation") if p < 0
                else ("Zrotation", "Xrotation", "Yrotation") for p in parents]
    skel = Skeleton(names, parents, offsets, ends, channels)
    return Animation(skel, offsets[None].copy(), lrot[None], fps=60.0)


def _dfs_order():
    """The rig's joints depth first (as a BVH file lists them)."""
    out = []

    def visit(name):
        out.append(next(r for r in _RIG if r[0] == name))
        for r in _RIG:
            if r[1] == name:
                visit(r[0])
    visit("Hips")
    return out


def _clip(path, frames=None):
    a = read_bvh(path)
    if frames:
        a.positions, a.rotations = a.positions[:frames], a.rotations[:frames]
    return a


def _direction_errors(src: Animation, tgt: Animation, out: Animation) -> dict[str, float]:
    """Worst angle (deg) over frames between each mapped target bone and its source bone. A bone runs
    from a mapped joint to the nearest mapped joint below it (skipping unmapped ones such as twist
    bones); the hips and the chest's branches to the shoulders (rigid offsets) are left out."""
    rs, rt = find_roles(src.skeleton.names), find_roles(tgt.skeleton.names)
    pairs = auto_mapping(src.skeleton, rs, tgt.skeleton, rt)
    sp, _ = src.global_transforms()
    tp, _ = out.global_transforms()
    ts, ss = tgt.skeleton, src.skeleton

    def mapped_below(j):
        out_ = []
        for k in ts.children(j):
            out_ += [k] if k in pairs else mapped_below(k)
        return out_

    def mapped_above_src(j):
        j = ss.parents[j]
        while j >= 0 and j not in pairs.values():
            j = ss.parents[j]
        return j

    errors = {}
    for tj, sj in pairs.items():
        if tj == rt["hips"]:
            continue
        for tk in mapped_below(tj):
            sk = pairs[tk]
            if mapped_above_src(sk) != sj or (tj == rt["chest"] and "Shoulder" in ts.names[tk]):
                continue
            a, b = tp[:, tk] - tp[:, tj], sp[:, sk] - sp[:, sj]
            c = (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)
            errors[ts.names[tk]] = float(np.degrees(np.arccos(np.clip(c, -1, 1))).max())
    return errors


def _lowest_toe(anim):
    r = find_roles(anim.skeleton.names)
    gp, _ = anim.global_transforms()
    return gp[:, [r["left_toe"], r["right_toe"]], 1].min()


@pytest.mark.parametrize("source_path,frames", [(BANDAI, None), (JLPM, 400)])
def test_retarget_to_authored_rig(source_path, frames):
    src = _clip(source_path, frames)
    tgt = authored_target()
    out = retarget_animation(src, tgt, source_bind_frame=0)
    assert out.skeleton is tgt.skeleton and out.num_frames == src.num_frames
    errors = _direction_errors(src, tgt, out)
    # Legs, feet, toes, arms (through the twist bones), spine, neck, head are all compared.
    for name in ("LeftLeg", "LeftFoot", "LeftToe", "RightLeg", "RightFoot", "RightToe",
                 "LeftForeArm", "LeftHand", "RightForeArm", "Spine2", "Neck", "Head"):
        assert name in errors, name
    assert max(errors.values()) < 2.0, errors
    # Twist bones ride along their parent: collinear with the limb.
    gp, _ = out.global_transforms()
    n = tgt.skeleton.names
    up, tw, lo = n.index("LeftUpLeg"), n.index("LeftUpLegTwist"), n.index("LeftLeg")
    u, v = gp[:, tw] - gp[:, up], gp[:, lo] - gp[:, tw]
    assert np.all((u * v).sum(-1) / np.linalg.norm(u, axis=-1) / np.linalg.norm(v, axis=-1) > 1 - 1e-9)
    # Feet on the ground like the source's.
    assert abs(_lowest_toe(out) - _lowest_toe(src)) < 0.015
    assert abs(_lowest_toe(out)) < 0.04   # toe joints, not soles: the captures have them at -3..+3 cm
    # Root travel scaled by the leg ratio (rig legs 0.91 m above the ankles).
    hs, ht = find_roles(src.skeleton.names)["hips"], find_roles(n)["hips"]
    sp, _ = src.global_transforms()
    travel_s = np.linalg.norm(sp[-1, hs, [0, 2]] - sp[0, hs, [0, 2]])
    travel_t = np.linalg.norm(gp[-1, ht, [0, 2]] - gp[0, ht, [0, 2]])
    assert 0.9 < travel_t / travel_s < 1.25


def test_retarget_between_real_skeletons_and_lafan_layout():
    bandai, jlpm = _clip(BANDAI), _clip(JLPM, 300)
    lafan = parse_bvh_text(lafan1_bvh_text())
    for src, tgt in ((bandai, jlpm), (jlpm, bandai), (jlpm, lafan), (bandai, lafan)):
        out = retarget_animation(src, tgt, source_bind_frame=0)
        errors = _direction_errors(src, tgt, out)
        assert len(errors) >= 14
        assert max(errors.values()) < 2.0, errors
        assert abs(_lowest_toe(out) - _lowest_toe(src)) < 0.015
        assert abs(_lowest_toe(out)) < 0.04   # toe joints, not soles: the captures have them at -3..+3 cm
    # The LAFAN-layout fixture's rest pose is a T-pose: usable as a source without a bind frame.
    out = retarget_animation(lafan, authored_target(), source_bind_frame=None)
    assert max(_direction_errors(lafan, authored_target(), out).values()) < 2.0


def test_source_rest_pose_must_be_tpose():
    with pytest.raises(RetargetError, match="source-bind-frame"):
        retarget_animation(_clip(BANDAI), authored_target())


def test_auto_mapping_pairs_arm_chains_by_name():
    bandai, jlpm = _clip(BANDAI), _clip(JLPM, 2)
    tgt = authored_target()
    pairs = auto_mapping(bandai.skeleton, find_roles(bandai.skeleton.names), tgt.skeleton, find_roles(tgt.skeleton.names))
    named = {tgt.skeleton.names[t]: bandai.skeleton.names[s] for t, s in pairs.items()}
    assert named["LeftArm"] == "UpperArm_L" and named["LeftForeArm"] == "LowerArm_L"
    assert named["LeftShoulder"] == "Shoulder_L" and named["Neck"] == "Neck"
    assert "LeftArmTwist" not in named and "LeftUpLegTwist" not in named and "Spine3" not in named
    assert name_key("mixamorig:LeftForeArm") == name_key("LowerArm_L") == "lowerarm"


def test_explicit_mapping_and_cli(tmp_path):
    src = _clip(BANDAI)
    tgt = authored_target()
    tgt_path = tmp_path / "rig.bvh"
    write_bvh(tgt_path, tgt)
    # Only the legs and the spine: arms stay in their bind pose relative to the chest.
    joints = {"Hips": "Hips", "Spine": "Spine", "Spine2": "Chest", "Head": "Head"}
    for s, b in (("Left", "L"), ("Right", "R")):
        joints.update({f"{s}UpLeg": f"UpperLeg_{b}", f"{s}Leg": f"LowerLeg_{b}", f"{s}Foot": f"Foot_{b}",
                       f"{s}Toe": f"Toes_{b}", f"{s}Hand": f"Hand_{b}"})
    toml = "[joints]\n" + "".join(f'{k} = "{v}"\n' for k, v in joints.items())
    (tmp_path / "map.toml").write_text(toml)
    parser = argparse.ArgumentParser()
    add_retarget_args(parser)
    args = parser.parse_args([str(BANDAI), "--to", str(tgt_path), "--map", str(tmp_path / "map.toml"),
                              "--source-bind-frame", "0", "-o", str(tmp_path / "out.bvh")])
    assert run_retarget(args) == 0
    out = read_bvh(tmp_path / "out.bvh")
    assert out.skeleton.names == tgt.skeleton.names and out.num_frames == src.num_frames
    gp, gr = out.global_transforms()
    sp, _ = src.global_transforms()
    n, sn = out.skeleton.names, src.skeleton.names
    a = gp[:, n.index("LeftFoot")] - gp[:, n.index("LeftLeg")]
    b = sp[:, sn.index("Foot_L")] - sp[:, sn.index("LowerLeg_L")]
    cos = (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)
    assert np.degrees(np.arccos(np.clip(cos, -1, 1))).max() < 2.0
    # Unmapped arm joint keeps its bind rotation relative to the parent.
    j = n.index("LeftForeArm")
    assert np.allclose(np.abs((out.rotations[:, j] * tgt.rotations[0, j]).sum(-1)), 1.0, atol=1e-5)

    (tmp_path / "bad.toml").write_text('[joints]\nHips = "Pelvis"\n')
    args.mapping = str(tmp_path / "bad.toml")
    assert run_retarget(args) == 1
    with pytest.raises(RetargetError, match="source joint 'Pelvis'"):
        retarget_animation(src, tgt, mapping=tmp_path / "bad.toml", source_bind_frame=0)
