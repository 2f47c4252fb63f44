"""T-pose retargeting between skeletons (seed 002 eq. 3.20-3.23) on real clips."""
import argparse
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))

from bvh_fixtures import lafan1_bvh_text, write_lafan1_bvh  # noqa: E402
from conftest import MOCAP  # noqa: E402

from motionmatch.motion.animation import Animation, Skeleton
from motionmatch.io.bvh import parse_bvh_text, read_bvh, write_bvh
from motionmatch.cli.retarget import add_retarget_args, run_retarget
from motionmatch.motion.retarget import (RetargetError, auto_mapping, find_source_bind, name_key, pose_uprightness,
                                         rest_pose_is_standing, retarget_animation)
from motionmatch.maths.rotations import quat_from_scaled_angle_axis, quat_from_yaw, quat_inv, quat_mul, quat_rotate
from motionmatch.motion.skeleton import find_roles

BANDAI = MOCAP / "bandai-namco/dataset-1/dataset-1_walk_normal_002.bvh"
JLPM = MOCAP / "jlpm22-locomotion/locomotion_take1.bvh"

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


CMU = MOCAP / "cmu-locomotion/143_40.bvh"


def test_bind_pose_found_from_roles():
    """Rest poses that show a body are used as they are; rests that do not (jlpm22, Bandai: every bone
    along one local axis) fall back to the clip's most upright frame."""
    bandai, jlpm, cmu = _clip(BANDAI), _clip(JLPM, 300), _clip(CMU, 60)
    lafan = parse_bvh_text(lafan1_bvh_text())
    for anim, standing in ((bandai, False), (jlpm, False), (cmu, True), (lafan, True)):
        roles = find_roles(anim.skeleton.names)
        assert rest_pose_is_standing(anim.skeleton, roles) is standing
        bind = find_source_bind(anim, roles)
        assert (bind is None) is standing
        if bind is not None:
            gp, _ = anim.global_transforms()
            body, _ = pose_uprightness(anim.skeleton, roles, gp)
            assert body[bind] == body.min() or body[bind] < 30.0
    # A-pose and arms-down rests count as standing; a rest lying on its back with the legs bent forward
    # does not, and with no other frame there is nothing to bind to.
    for arm_y in (-0.3, -0.62):
        rig = rest_rig(arm_drop=arm_y)
        assert rest_pose_is_standing(rig, find_roles(rig.names))
    bent = rest_rig(knee_forward=True)
    assert not rest_pose_is_standing(bent, find_roles(bent.names))
    one = Animation(bent, bent.offsets[None].copy(), quat_from_scaled_angle_axis(np.zeros((1, bent.num_joints, 3))), 60.0)
    with pytest.raises(RetargetError, match="source-bind-frame"):
        retarget_animation(one, authored_target())


def rest_rig(arm_drop=0.0, knee_forward=False) -> Skeleton:
    """The made-up rig as a rest pose (identity rotations, offsets = bone vectors): arms lowered by
    `arm_drop` metres at the hands (an A-pose, or hanging down), or the shins pointing forward."""
    rig = _dfs_order()
    names = [r[0] for r in rig]
    parents = np.array([-1 if r[1] is None else names.index(r[1]) for r in rig])
    pos = np.array([r[2] for r in rig], dtype=np.float64)
    for j, n in enumerate(names):
        if any(k in n for k in ("Arm", "Hand")):
            reach = abs(pos[j, 0]) - 0.17
            if reach > 0:   # rotate the arm about the shoulder, keeping its length
                a = np.arcsin(min(1.0, -arm_drop / 0.49 * 0.999)) if arm_drop else 0.0
                pos[j, 0] = np.sign(pos[j, 0]) * (0.17 + reach * np.cos(a))
                pos[j, 1] = 1.5 - reach * np.sin(a)
        if knee_forward and ("Foot" in n or "Toe" in n):
            pos[j, 1] += 0.4
            pos[j, 2] += 0.4
    offsets = np.array([pos[j] if p < 0 else pos[j] - pos[p] for j, p in enumerate(parents)])
    ends = {names.index(n): np.array(d, dtype=np.float64) for n, d in
            {"Head": (0, 0.1, 0), "LeftToe": (0, 0, 0.05), "RightToe": (0, 0, 0.05)}.items()}
    channels = [("Xposition", "Yposition", "Zposition", "Zrotation", "Xrotation", "Yrotation") if p < 0
                else ("Zrotation", "Xrotation", "Yrotation") for p in parents]
    return Skeleton(names, parents, offsets, ends, channels)


def test_round_trip_without_bind_frames_jlpm_lafan_bandai():
    """jlpm22 -> LAFAN1 layout -> Bandai layout with no bind frame given anywhere: every mapped bone
    points like the jlpm22 original within 3 degrees, the feet stay on the ground."""
    jlpm = _clip(JLPM, 400)
    lafan_t, bandai_t = parse_bvh_text(lafan1_bvh_text()), _clip(BANDAI, 2)
    mid = retarget_animation(jlpm, lafan_t)
    out = retarget_animation(mid, bandai_t)
    assert out.skeleton is bandai_t.skeleton
    for a, t, b in ((jlpm, lafan_t, mid), (mid, bandai_t, out), (jlpm, bandai_t, out)):
        errors = _direction_errors(a, t, b)
        assert len(errors) >= 14
        assert max(errors.values()) < 3.0, errors
    assert abs(_lowest_toe(out) - _lowest_toe(jlpm)) < 0.015
    assert abs(_lowest_toe(out)) < 0.04
    # An arms-down rest as a source: no bind frame either.
    rig = rest_rig(arm_drop=-0.62)
    posed = retarget_animation(jlpm, Animation(rig, rig.offsets[None].copy(),
                                               quat_from_scaled_angle_axis(np.zeros((1, rig.num_joints, 3))), 60.0))
    back = retarget_animation(posed, jlpm)
    assert max(_direction_errors(posed, jlpm, back).values()) < 3.0


def test_cli_retargets_database_output_without_bind_frame(jlpm_db, tmp_path):
    """The project's own output (the database skeleton with its simulation bone, as `synth` writes it)
    retargets onto the LAFAN1 layout with no bind frame."""
    frames = slice(int(jlpm_db.range_starts[1]) + 200, int(jlpm_db.range_starts[1]) + 500)
    own = Animation(jlpm_db.skeleton, jlpm_db.positions[frames].astype(np.float64),
                    jlpm_db.rotations[frames].astype(np.float64), jlpm_db.fps)
    write_bvh(tmp_path / "motion.bvh", own)
    write_lafan1_bvh(tmp_path / "lafan_layout.bvh")
    parser = argparse.ArgumentParser()
    add_retarget_args(parser)
    args = parser.parse_args([str(tmp_path / "motion.bvh"), "--to", str(tmp_path / "lafan_layout.bvh"),
                              "-o", str(tmp_path / "out.bvh")])
    assert run_retarget(args) == 0
    src, out = read_bvh(tmp_path / "motion.bvh"), read_bvh(tmp_path / "out.bvh")
    assert out.num_frames == 300
    assert max(_direction_errors(src, parse_bvh_text(lafan1_bvh_text()), out).values()) < 3.0
    assert abs(_lowest_toe(out) - _lowest_toe(src)) < 0.015


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


def _planted_toe_height(anim):
    """Median height (m) of toe joints where the metrics see contact, both feet."""
    from motionmatch.motion.metrics import toe_contacts
    roles = find_roles(anim.skeleton.names)
    gp, _ = anim.global_transforms()
    hs = []
    for side in ("left", "right"):
        toe = gp[:, roles[f"{side}_toe"]]
        contact, _ = toe_contacts(toe, anim.fps)
        hs.append(toe[1:, 1][contact])
    return float(np.median(np.concatenate(hs)))


def test_retargeted_feet_plant_like_the_target_rig():
    """A Bandai-Namco walk on the jlpm22 skeleton, retargeted as the mixed database does (floor and foot
    pitch of the jlpm22 take): its planted feet take the jlpm22 rig's pitch, so its planted toes sit
    within 1 cm of the jlpm22 actor's own (the mixed database's Bandai clips: 1.5 vs 2.0 cm; 0.7 without
    the pitch) and not below the floor; knees keep the source's angles."""
    from motionmatch.motion.retarget import Stance, bind_pose_of, foot_floor, planted_foot_pitch, retarget_onto
    jl = read_bvh(JLPM)
    roles = find_roles(jl.skeleton.names)
    gp, _ = jl.global_transforms()
    pitch = planted_foot_pitch(gp, roles, jl.fps)
    assert 25.0 < pitch < 37.0, pitch                 # measured 31.3 degrees
    src = read_bvh(BANDAI)
    assert planted_foot_pitch(src.global_transforms()[0], find_roles(src.skeleton.names), src.fps) > pitch + 5.0
    target = bind_pose_of(jl, roles)
    actor = _planted_toe_height(jl)
    plain = retarget_onto(src, target, foot_floor(gp, roles))
    fixed = retarget_onto(src, target, foot_floor(gp, roles), Stance(pitch, None, None, None))
    assert abs(_planted_toe_height(fixed) - actor) < 0.01, (_planted_toe_height(fixed), actor)
    assert abs(_planted_toe_height(fixed) - actor) < abs(_planted_toe_height(plain) - actor)
    assert _planted_toe_height(fixed) > 0.0
    gs, _ = src.global_transforms()
    gf, _ = fixed.global_transforms()
    rs = find_roles(src.skeleton.names)

    def knee(g, r):
        u = g[:, r["left_upper_leg"]] - g[:, r["left_lower_leg"]]
        v = g[:, r["left_foot"]] - g[:, r["left_lower_leg"]]
        return np.degrees(np.arccos(np.clip((u * v).sum(-1) / np.linalg.norm(u, axis=-1) / np.linalg.norm(v, axis=-1),
                                            -1, 1)))
    np.testing.assert_allclose(knee(gf, roles), knee(gs, rs), atol=1.0)


def test_retargeted_walk_takes_the_target_actors_stance():
    """Bandai-Namco's backward walk (knees ~153 degrees while moving, hands 32 cm apart, toes planted
    first, trunk leaning 4.6 degrees forward) on the jlpm22 skeleton with the jlpm22 actor's stance (both
    takes): knees within 2 degrees of the actor's at the same gait (backward walking, ~163; not the actor's
    pooled ~144, which bent them), hands as far apart within 1 cm, planted toes at the actor's height within
    0.5 cm, the trunk's median lean within 1 degree of the actor's walking backward (-0.7 forward, -1.0 to
    the side; measured -0.6, -0.9) and 35 % -> 3 % of the frames outside the actor's lean and hand range at
    the gait; leg IK keeps the feet's placement within 1 cm (horizontally: the floor fit moves them only
    vertically)."""
    from motionmatch.motion.posture import gait_figures, posture_joints, travel_velocity
    from motionmatch.motion.retarget import (actor_stance, bind_pose_of, foot_floor, median_hand_spread, planted_toe_height,
                                             retarget_onto)
    from motionmatch.motion.trunk import trunk_angles_deg
    jl = read_bvh(JLPM)
    roles = find_roles(jl.skeleton.names)
    gp, _ = jl.global_transforms()
    takes = [gp] + [read_bvh(f).global_transforms()[0] for f in sorted(JLPM.parent.glob("*.bvh")) if f != JLPM]
    stance = actor_stance(takes, roles, jl.fps)
    assert 135.0 < stance.knee_deg < 150.0 and 0.4 < stance.hand_spread < 0.6, stance
    src = read_bvh(MOCAP / "bandai-namco/dataset-1/dataset-1_walk-back_normal_001.bvh")
    target, floor = bind_pose_of(jl, roles), foot_floor(gp, roles)
    plain = retarget_onto(src, target, floor, stance._replace(knee_deg=None, hand_spread=None, planted_toe=None,
                                                              trunk=None))
    plain = plain.global_transforms()[0]
    matched = retarget_onto(src, target, floor, stance).global_transforms()[0]

    def gait(g):
        return gait_figures(g[:, posture_joints(roles)], travel_velocity(g[:, roles["hips"]], jl.fps), stance.gaits)
    assert gait(plain)["knee_actor_deg"] > stance.knee_deg + 15.0           # the actor walks backward straighter
    assert gait(plain)["knee_gap_deg"] < -5.0 and abs(gait(matched)["knee_gap_deg"]) < 2.0
    assert median_hand_spread(plain, roles) < stance.hand_spread - 0.1
    assert abs(median_hand_spread(matched, roles) - stance.hand_spread) < 0.01
    assert abs(planted_toe_height(matched, roles, jl.fps) - stance.planted_toe) < 0.005
    backward = 3                                        # posture.gait_bins: 0.5-1 m/s, backward
    lean = lambda g: np.median(trunk_angles_deg(g[:, posture_joints(roles)]), axis=0)
    assert lean(plain)[0] > stance.trunk[backward][0] + 4.0, (lean(plain), stance.trunk[backward])
    np.testing.assert_allclose(lean(matched), stance.trunk[backward], atol=1.0)
    assert gait(plain)["outside_source"] > 0.25 and gait(matched)["outside_source"] < 0.08
    ankles = [roles["left_foot"], roles["right_foot"]]
    # Raised hips: on the straightest frames the leg no longer reaches (measured up to 6.3 mm).
    np.testing.assert_allclose(matched[:, ankles][..., [0, 2]], plain[:, ankles][..., [0, 2]], atol=0.01)
