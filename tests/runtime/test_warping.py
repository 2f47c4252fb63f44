"""Warping (runtime/warping.py): orientation warp of the pose and the query, play rate and stride,
fractional-frame sampling, slope helpers, and the warp scenario files; on the real jlpm22 database."""
import json
import math
from pathlib import Path

import numpy as np
import pytest

from motionmatch.maths.kinematics import forward_kinematics
from motionmatch.maths.rotations import quat_angle, quat_from_yaw, quat_inv, quat_mul, quat_rotate
from motionmatch.runtime.controller import ControllerSettings, desired_goals
from motionmatch.world.terrain import Heightfield
from motionmatch.runtime.playback import advance_frame, lerp_frames, slerp_frames
from motionmatch.world.terrain import normal_at
from motionmatch.runtime.touchups import slope_warp_into
from motionmatch.runtime.warping import (
                                         ANGLE, BACKWARD, ROOT_GOAL_YAW, SIDE, SIDE_OK, TARGET, WEIGHT, OrientationLimits, PoseWarpRig, WarpSettings, clip_speeds,
                                         new_warp_table, orientation_offsets, orientation_plan, orientation_query_rotations, orientation_update,
                                         playback_rate, query_scale, speed_update, spine_chain, stride_scale, warp_pose_orientation)
from motionmatch.motion.metrics import held_fraction, shoulder_facing_yaw, twist_deg
from motionmatch.runtime.character import CharacterSettings
from motionmatch.offline.scenario import load_scenario
from motionmatch.offline.synth import change_frames, run_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
UP = np.array([0.0, 1.0, 0.0])


def _yaw_of(q, axis):
    v = quat_rotate(q, np.asarray(axis, dtype=np.float64))
    return math.atan2(v[0], v[2])


def _wrapd(a):
    return (a + 180.0) % 360.0 - 180.0


@pytest.fixture(scope="module")
def walk_pose(jlpm_db):
    """A mid-walk pose (local), with the root placed in the world."""
    db = jlpm_db
    f = int(db.range_starts[2]) + 600
    lp = db.positions[f].astype(np.float64)
    lr = db.rotations[f].astype(np.float64)
    lp[0] = (1.0, 0.0, 2.0)
    lr[0] = quat_from_yaw(0.4)
    return lp, lr


# ----------------------------------------------------------------------------------------------
# pose warp


def test_spine_chain_runs_from_spine_to_chest(jlpm_db):
    roles, parents = jlpm_db.roles, jlpm_db.skeleton.parents
    chain = spine_chain(roles, parents)
    assert chain[0] == roles["spine"] and chain[-1] == roles["chest"]
    for a, b in zip(chain[:-1], chain[1:]):
        assert parents[b] == a


@pytest.mark.parametrize("deg", [35.0, -60.0, 90.0])
def test_pose_warp_turns_lower_body_and_keeps_upper_body(jlpm_db, walk_pose, deg):
    db = jlpm_db
    roles, parents = db.roles, db.skeleton.parents
    lp, lr = walk_pose
    a = math.radians(deg)
    out = warp_pose_orientation(lr, roles, parents, a)
    gp0, gr0 = forward_kinematics(lp, lr, parents)
    gp1, gr1 = forward_kinematics(lp, out, parents)
    # Lower body: hips and feet turn by the angle (the hips' forward axis is -Z on this skeleton, any
    # horizontal axis shows the yaw).
    for j in (roles["hips"], roles["left_foot"], roles["right_upper_leg"]):
        turned = math.degrees(_yaw_of(gr1[j], (0, 0, -1)) - _yaw_of(gr0[j], (0, 0, -1)))
        assert abs(_wrapd(turned - deg)) < 0.5, (j, turned)
    # Feet are carried about the vertical through the root: same height, same distance from the axis.
    for j in (roles["left_foot"], roles["right_foot"]):
        r0, r1 = gp0[j] - lp[0], gp1[j] - lp[0]
        assert abs(r0[1] - r1[1]) < 1e-6
        assert abs(math.hypot(r0[0], r0[2]) - math.hypot(r1[0], r1[2])) < 1e-6
        ang = math.degrees(math.atan2(r1[0], r1[2]) - math.atan2(r0[0], r0[2]))
        assert abs(_wrapd(ang - deg)) < 0.5
    # Upper body keeps its world rotations exactly.
    for j in (roles["chest"], roles["head"], roles["left_hand"], roles["right_hand"]):
        assert float(quat_angle(quat_mul(gr1[j], quat_inv(gr0[j])))) < 1e-5, db.skeleton.names[j]
    # The twist is shared along the chain: the spine's yaw sits between the hips' and the chest's.
    sp = math.degrees(_yaw_of(gr1[roles["spine"]], (0, 0, -1)) - _yaw_of(gr0[roles["spine"]], (0, 0, -1)))
    assert 0.0 < _wrapd(sp) / deg < 1.0


def test_pose_warp_zero_angle_is_identity_and_out_buffer(jlpm_db, walk_pose):
    lp, lr = walk_pose
    rig = PoseWarpRig(jlpm_db.roles, jlpm_db.skeleton.parents)
    out = np.empty_like(lr)
    res = warp_pose_orientation(lr, None, None, 0.0, rig, out=out)
    assert res is out
    np.testing.assert_allclose(res, lr, atol=1e-12)


def test_displayed_facing_composition(jlpm_db, walk_pose):
    """The character's use: root at the desired facing, lower body turned back by -angle onto the
    root's own (travel-matched) yaw; the upper body then faces root_yaw + angle."""
    roles, parents = jlpm_db.roles, jlpm_db.skeleton.parents
    lp, lr = walk_pose
    root_yaw, angle = 0.4, math.radians(70.0)
    base = lr.copy()
    base[0] = quat_from_yaw(root_yaw)
    shown = lr.copy()
    shown[0] = quat_from_yaw(root_yaw + angle)
    out = warp_pose_orientation(shown, roles, parents, -angle)
    np.testing.assert_allclose(np.abs((out[0] * base[0]).sum()), 1.0, atol=1e-9)
    gp_b, gr_b = forward_kinematics(lp, base, parents)
    gp_o, gr_o = forward_kinematics(lp, out, parents)
    np.testing.assert_allclose(gp_o[roles["left_foot"]], gp_b[roles["left_foot"]], atol=1e-9)
    turned = math.degrees(_yaw_of(gr_o[roles["chest"]], (0, 0, -1)) - _yaw_of(gr_b[roles["chest"]], (0, 0, -1)))
    assert abs(_wrapd(turned - 70.0)) < 0.5


@pytest.mark.parametrize("deg", [60.0, -100.0])
def test_pose_warp_split_between_hips_and_spine(jlpm_db, walk_pose, deg):
    """Hip limit 35, spine limit 40 degrees: the legs turn by the whole angle, the pelvis by what the
    hip joints do not give back, the chest by what neither gives back (the lag beyond 75 degrees)."""
    roles, parents = jlpm_db.roles, jlpm_db.skeleton.parents
    lp, lr = walk_pose
    rig = PoseWarpRig(roles, parents)
    assert rig.pelvis == roles["hips"]
    out = warp_pose_orientation(lr, None, None, math.radians(deg), rig, hip_limit_rad=math.radians(35.0),
                                spine_limit_rad=math.radians(40.0))
    gr0, gr1 = forward_kinematics(lp, lr, parents)[1], forward_kinematics(lp, out, parents)[1]

    def turned(j):
        return _wrapd(math.degrees(_yaw_of(gr1[j], (0, 0, -1)) - _yaw_of(gr0[j], (0, 0, -1))))
    sign = math.copysign(1.0, deg)
    for j in (roles["left_upper_leg"], roles["right_foot"]):
        assert abs(turned(j) - deg) < 0.5, jlpm_db.skeleton.names[j]
    assert abs(turned(roles["hips"]) - (deg - sign * 35.0)) < 0.5
    assert abs(turned(roles["chest"]) - sign * max(abs(deg) - 75.0, 0.0)) < 0.5
    assert abs(turned(roles["head"]) - sign * max(abs(deg) - 75.0, 0.0)) < 0.5


def test_twist_limits_hold_on_a_strafe_box(jlpm_db):
    """Strafing a box with the look held forward: the pelvis-to-shoulder twist stays within human range
    and the shoulders still face the look; with the hip joints left out the spine alone twists ~90."""
    scen = load_scenario(SCENARIOS / "strafe_box.json")
    changes = change_frames(scen, jlpm_db.fps)

    def measure(settings):
        rec = run_scenario(jlpm_db, scen, settings)
        body = rec["body_positions"]
        err = np.degrees(np.abs(np.remainder(shoulder_facing_yaw(body, (2, 3)) - rec["desired_yaw"] + np.pi,
                                             2 * np.pi) - np.pi))
        return twist_deg(body, (0, 1), (2, 3)), held_fraction(changes, err <= 25.0, jlpm_db.fps)["mean"]

    twist, facing = measure(CharacterSettings())
    # The limits bound the twist the warp adds; the peaks are the animation's own turning steps on top.
    assert np.percentile(twist, 95) <= 50.0 and twist.max() <= 70.0
    assert facing >= 0.8
    spine_only = CharacterSettings()
    spine_only.warp.hip_twist_limit_deg, spine_only.warp.spine_twist_limit_deg = 0.0, 90.0
    spine_only.warp.side_step_angle_deg = 180.0      # warp every strafe (no side-steps from the data)
    twist, _ = measure(spine_only)
    assert np.percentile(twist, 95) > 75.0


# ----------------------------------------------------------------------------------------------
# orientation warper


def test_orientation_offsets_forward_limit_and_backward():
    lim = math.radians(90.0)
    # Strafing right (travel +X, yaw 90) while facing +Z: ask for facing +X, twist -90.
    q, w = orientation_offsets(0.0, math.radians(90.0), lim, False)
    assert abs(math.degrees(q) - 90.0) < 1e-9 and abs(math.degrees(w) + 90.0) < 1e-9
    # A smaller limit leaves part of the sideways request in the query.
    q, w = orientation_offsets(0.0, math.radians(90.0), math.radians(60.0), False)
    assert abs(math.degrees(q) - 60.0) < 1e-9 and abs(math.degrees(w) + 60.0) < 1e-9
    # Backward mode: straight back keeps the facing (a backward request); back-right asks for the
    # back-facing diagonal and twists the rest.
    q, w = orientation_offsets(0.0, math.pi, lim, True)
    assert abs(q) < 1e-9 and abs(w) < 1e-9
    q, w = orientation_offsets(0.0, math.radians(135.0), lim, True)
    assert abs(math.degrees(q) + 45.0) < 1e-9 and abs(math.degrees(w) - 45.0) < 1e-9


def _predicted(direction_deg, speed=1.1, facing_deg=0.0, times=(1 / 3, 2 / 3, 1.0)):
    d = math.radians(direction_deg)
    pos = np.array([[math.sin(d) * speed * t, 0.0, math.cos(d) * speed * t] for t in times])
    rot = np.repeat(quat_from_yaw(math.radians(facing_deg))[None], len(times), axis=0)
    return pos, rot, list(times)


class _Orient:
    """Row 0 of a warp table driven like the runtime drives it (settings from WarpSettings)."""

    def __init__(self, s: WarpSettings):
        self.s, self.wt = s, new_warp_table(1)

    def plan(self, *args):
        s = self.s
        orientation_plan(self.wt, 0, *args, True, OrientationLimits(
            math.radians(s.orientation_limit_deg), math.radians(s.backward_angle_deg), s.min_travel_speed,
            math.radians(s.side_step_angle_deg), math.radians(s.side_step_backward_deg)))

    def query_rotations(self, pos, rot, origin, times):
        rot = np.array(rot, dtype=np.float64)
        orientation_query_rotations(self.wt, 0, np.asarray(pos, np.float64), rot, float(origin[0]), float(origin[2]),
                                    np.asarray(times, np.float64), math.radians(self.s.orientation_limit_deg),
                                    self.s.min_travel_speed)
        return rot

    def update(self, sim_yaw, root_yaw, speed, dt):
        s = self.s
        return orientation_update(self.wt, 0, sim_yaw, root_yaw, speed, dt, math.radians(s.orientation_limit_deg),
                                  s.min_travel_speed, s.orientation_halflife)

    weight = property(lambda self: self.wt[0, WEIGHT])
    backward = property(lambda self: bool(self.wt[0, BACKWARD]))
    root_goal_yaw = property(lambda self: self.wt[0, ROOT_GOAL_YAW])
    target = property(lambda self: self.wt[0, TARGET])
    angle = property(lambda self: self.wt[0, ANGLE])


def test_query_rotations_follow_travel_only_when_strafing():
    ow = _Orient(WarpSettings(orientation_limit_deg=90.0, side_step_angle_deg=180.0))
    # Normal locomotion: the goal facing is the travel direction -> nothing changes.
    ow.plan(math.radians(90.0), 1.3, 0.0, math.radians(60.0), 1.0, 0.5)
    pos, rot, times = _predicted(90.0, facing_deg=60.0)
    assert ow.weight == 0.0
    np.testing.assert_allclose(ow.query_rotations(pos, rot, np.zeros(3), times), rot)
    assert ow.root_goal_yaw == pytest.approx(math.radians(60.0))
    # Strafing right while facing +Z: the query faces +X, the root is asked to turn to +X.
    ow.plan(0.0, 1.1, 0.0, 0.0, 1.1, 0.0)
    pos, rot, times = _predicted(90.0)
    q = ow.query_rotations(pos, rot, np.zeros(3), times)
    for qi in q:
        assert abs(math.degrees(_yaw_of(qi, (0, 0, 1))) - 90.0) < 1e-6
    assert abs(math.degrees(ow.root_goal_yaw) - 90.0) < 1e-6
    # Walking backward: beyond the backward angle the backward request stays.
    ow.plan(0.0, 0.0, -0.9, 0.0, 0.0, -0.9)
    assert ow.backward
    pos, rot, times = _predicted(180.0, speed=0.9)
    np.testing.assert_allclose(ow.query_rotations(pos, rot, np.zeros(3), times), rot, atol=1e-9)
    # Too slow a prediction has no travel direction: unchanged.
    ow.plan(0.0, 1.1, 0.0, 0.0, 0.0, 0.0)
    pos, rot, times = _predicted(90.0, speed=0.01)
    for qi in ow.query_rotations(pos, rot, np.zeros(3), times):
        assert abs(math.degrees(_yaw_of(qi, (0, 0, 1)))) < 1.0


def test_backward_mode_has_hysteresis():
    ow = _Orient(WarpSettings(backward_angle_deg=120.0, side_step_angle_deg=180.0))     # no side-step mode
    for deg, expect in ((130, True), (118, True), (112, False), (122, False), (126, True)):
        d = math.radians(deg)
        ow.plan(0.0, math.sin(d), math.cos(d), 0.0, math.sin(d), math.cos(d))
        assert ow.backward is expect, deg


def test_twist_is_limited_and_smoothed():
    s = WarpSettings(orientation_limit_deg=60.0, orientation_halflife=0.1, min_travel_speed=0.3)
    ow = _Orient(s)
    ow.plan(0.0, 1.1, 0.0, 0.0, 1.1, 0.0)
    dt = 1 / 60
    angles = [ow.update(0.0, math.radians(90.0), 1.1, dt) for _ in range(120)]
    assert math.degrees(ow.target) == pytest.approx(-60.0)
    # Smooth: no jump at the start, never overshoots (critically damped), settles on the limit.
    assert abs(math.degrees(angles[0])) < 5.0
    assert all(math.degrees(a) >= -60.0 - 1e-6 for a in angles)
    assert np.all(np.diff(angles) <= 1e-12)
    half = angles[int(round(0.1 / dt)) - 1]
    assert 0.3 < half / math.radians(-60.0) < 0.8
    assert abs(math.degrees(angles[-1]) + 60.0) < 0.5
    # Standing still fades the twist out.
    for _ in range(120):
        a = ow.update(0.0, math.radians(90.0), 0.0, dt)
    assert abs(math.degrees(a)) < 0.5


# ----------------------------------------------------------------------------------------------
# play rate and stride


def test_playback_rate_and_stride_scale_bounds():
    assert playback_rate(0.5, 1.0, 0.8, 1.2, 1.0) == pytest.approx(0.8)
    assert playback_rate(1.1, 1.0, 0.8, 1.2, 1.0) == pytest.approx(1.1)
    assert playback_rate(3.0, 1.0, 0.8, 1.2, 1.0) == pytest.approx(1.2)
    assert playback_rate(0.05, 1.0, 0.8, 1.2, 1.0) == 1.0 and playback_rate(1.0, 0.02, 0.8, 1.2, 1.0) == 1.0
    # The stride takes the rest of the ratio, within its own bounds.
    assert stride_scale(0.6, 1.0, 0.8, 0.5, 1.2) == pytest.approx(0.75)
    assert stride_scale(0.3, 1.0, 0.8, 0.5, 1.2) == pytest.approx(0.5)
    assert stride_scale(3.0, 1.0, 1.2, 0.5, 1.2) == pytest.approx(1.2)
    r = playback_rate(0.7, 1.0, 0.8, 1.2, 0.5)
    assert r == pytest.approx(math.sqrt(0.7))
    assert r * stride_scale(0.7, 1.0, r, 0.5, 1.2) == pytest.approx(0.7)


def test_speed_warp_converges_and_query_scale():
    s = WarpSettings(play_rate=True, rate_min=0.8, rate_max=1.2)
    wt = new_warp_table(1)

    def update(desired, anim):
        return speed_update(wt, 0, desired, desired, anim, 1 / 60, s.play_rate, (s.rate_min, s.rate_max, s.rate_share),
                            s.stride, (s.stride_min, s.stride_max), s.speed_halflife)
    for _ in range(120):
        rate, scale = update(0.45, 0.9)
    assert rate == pytest.approx(0.8, abs=1e-3) and scale == pytest.approx(0.625, abs=1e-3)
    assert 0.9 * rate * scale == pytest.approx(0.45, abs=1e-3)
    for _ in range(120):
        rate, scale = update(0.0, 0.9)
    assert rate == pytest.approx(1.0, abs=1e-3) and scale == pytest.approx(1.0, abs=1e-3)
    # A 0.4 m/s request asks the matcher for the 0.8 m/s floor; never beyond what rate x stride undo.

    def qs(v):
        return query_scale(v, s.query_speed_floor, s.play_rate, s.rate_min, s.stride, s.stride_min)
    assert qs(0.4) == pytest.approx(2.0)
    assert qs(0.2) == pytest.approx(1.0 / (0.8 * 0.5))
    assert qs(1.2) == 1.0 and qs(0.0) == 1.0


def test_clip_speeds_and_advance_frame(jlpm_db):
    db = jlpm_db
    v = np.zeros((10, 3))
    v[:, 2] = [1, 1, 1, 1, 1, 2, 2, 2, 2, 2]
    sp = clip_speeds(v, [0, 5], [5, 10], 60.0, window_s=0.05)
    np.testing.assert_allclose(sp, v[:, 2])          # a window never crosses clips
    rv = np.diff(db.positions[:, 0], axis=0, append=db.positions[-1:, 0]) * db.fps
    sp = clip_speeds(rv, db.range_starts, db.range_stops, db.fps)
    assert sp.shape == (db.num_frames,) and np.isfinite(sp).all()
    assert 0.5 < np.percentile(sp, 75) < 4.0
    assert advance_frame(10, 0.5, 0.8, 100) == (11, pytest.approx(0.3))
    assert advance_frame(10, 0.9, 1.2, 100) == (12, pytest.approx(0.1))
    assert advance_frame(98, 0.5, 1.0, 100) == (99, 0.0)


def sample_pose(positions, rotations, f, stop):
    i = int(math.floor(f))
    i, j, t = (stop - 1, stop - 1, 0.0) if i >= stop - 1 else (i, i + 1, f - i)
    p, r = np.empty(positions.shape[1:]), np.empty(rotations.shape[1:])
    slerp_frames(positions, rotations, i, j, t, p, r)
    return p, r


def test_sample_pose_between_frames(jlpm_db):
    db = jlpm_db
    f = int(db.range_starts[0]) + 300
    stop = int(db.range_stops[0])
    p, r = sample_pose(db.positions, db.rotations, float(f), stop)
    np.testing.assert_allclose(p, db.positions[f], atol=1e-6)
    np.testing.assert_allclose(r, db.rotations[f], atol=1e-6)
    p, r = sample_pose(db.positions, db.rotations, f + 0.5, stop)
    np.testing.assert_allclose(p, 0.5 * (db.positions[f] + db.positions[f + 1]), atol=1e-6)
    a = quat_angle(quat_mul(db.rotations[f + 1].astype(np.float64), quat_inv(db.rotations[f].astype(np.float64))))
    a0 = quat_angle(quat_mul(r, quat_inv(db.rotations[f].astype(np.float64))))
    a1 = quat_angle(quat_mul(db.rotations[f + 1].astype(np.float64), quat_inv(r)))
    moving = a > 1e-3
    assert moving.any()
    np.testing.assert_allclose(a0[moving], 0.5 * a[moving], rtol=1e-3, atol=1e-6)
    np.testing.assert_allclose(a1[moving], 0.5 * a[moving], rtol=1e-3, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(r, axis=-1), 1.0, atol=1e-9)
    # Never blends across the clip end.
    p, r = sample_pose(db.positions, db.rotations, stop - 1 + 0.5, stop)
    np.testing.assert_allclose(p, db.positions[stop - 1], atol=1e-6)
    v = np.empty(db.positions.shape[1:])
    lerp_frames(db.positions, f, f + 1, 0.25, v)
    np.testing.assert_allclose(v, 0.75 * db.positions[f] + 0.25 * db.positions[f + 1], atol=1e-6)


# ----------------------------------------------------------------------------------------------
# slope


def slope_warp(foot, n, weight=1.0, max_angle_rad=math.radians(30.0)):
    q = np.array(foot, dtype=np.float64)
    slope_warp_into(q, float(n[0]), float(n[1]), float(n[2]), weight, max_angle_rad)
    return q


def test_slope_warp_tilts_feet_to_the_normal():
    foot = quat_from_yaw(0.7)
    np.testing.assert_allclose(slope_warp(foot, (0.0, 1.0, 0.0)), foot)
    n = np.array([0.2, 1.0, -0.1])
    n /= np.linalg.norm(n)
    out = slope_warp(foot, n)
    tilt = quat_mul(out, quat_inv(foot))
    np.testing.assert_allclose(quat_rotate(tilt, UP), n, atol=1e-9)
    # The tilt has no twist about the vertical: the foot's heading is kept.
    fwd = quat_rotate(out, np.array([0.0, 0.0, 1.0]))
    assert abs(math.atan2(fwd[0], fwd[2]) - 0.7) < math.radians(3.0)
    # Limited and weighted.
    steep = np.array([1.0, 1.0, 0.0]) / math.sqrt(2.0)
    lim = quat_mul(slope_warp(foot, steep, max_angle_rad=math.radians(30.0)), quat_inv(foot))
    assert math.degrees(float(quat_angle(lim))) == pytest.approx(30.0)
    half = quat_mul(slope_warp(foot, steep, weight=0.5, max_angle_rad=math.radians(90.0)), quat_inv(foot))
    assert math.degrees(float(quat_angle(half))) == pytest.approx(22.5)


def test_terrain_normal():
    x, z = np.meshgrid(np.arange(11) * 0.5 - 2.5, np.arange(11) * 0.5 - 2.5)
    hf = Heightfield(0.2 * x + 0.1 * z, origin=(-2.5, -2.5), cell=0.5)
    n = np.array(normal_at(hf.heights, hf.origin[0], hf.origin[1], hf.cell, 0.3, -0.4))
    np.testing.assert_allclose(n, hf.normal(0.3, -0.4), atol=1e-9)


# ----------------------------------------------------------------------------------------------
# scenario files


def test_warp_scenarios_parse_and_ask_for_what_they_say():
    cs = ControllerSettings()
    s8 = load_scenario(SCENARIOS / "warp_strafe8.json")
    dirs = set()
    for t, inp in s8.inputs:
        if inp.strafe and inp.move != (0.0, 0.0):
            vx, vz, yaw, moving = desired_goals(inp, 0.0, cs)
            assert moving and yaw == 0.0
            dirs.add(round(math.degrees(math.atan2(*inp.move))) % 360)
            # The travel direction is the stick's, squeezed by the side/forward/backward speeds.
            assert abs(_wrapd(math.degrees(math.atan2(vx, vz) - math.atan2(*inp.move)))) < 10.0
    assert dirs == {0, 45, 90, 135, 180, 225, 270, 315}
    back = load_scenario(SCENARIOS / "warp_backward.json")
    assert any(i.strafe and i.move[1] < -0.9 for _, i in back.inputs)
    slow = load_scenario(SCENARIOS / "warp_slow.json")
    speeds = [math.hypot(*desired_goals(i, 0.0, cs)[:2]) for _, i in slow.inputs]
    moving = [s for s in speeds if s > 0]
    assert len(moving) >= 4 and all(0.29 <= s <= 0.71 for s in moving), speeds
    for name in ("warp_strafe8", "warp_backward", "warp_slow"):
        assert json.loads((SCENARIOS / f"{name}.json").read_text())["description"]


def test_side_step_mode_asks_for_the_data_side_steps():
    lim = math.radians(90.0)
    # Strafing right (travel +X) while facing +Z: side-step mode keeps the facing, nothing to warp.
    q, w = orientation_offsets(0.0, math.radians(90.0), lim, False, True)
    assert abs(q) < 1e-9 and abs(w) < 1e-9
    # 60 degrees off: a side-step whose travel is 90 degrees off its facing, the 30 left warped.
    q, w = orientation_offsets(0.0, math.radians(60.0), lim, False, True)
    assert abs(math.degrees(q) + 30.0) < 1e-9 and abs(math.degrees(w) - 30.0) < 1e-9
    q, w = orientation_offsets(0.0, math.radians(-100.0), lim, False, True)
    assert abs(math.degrees(q) + 10.0) < 1e-9 and abs(math.degrees(w) - 10.0) < 1e-9
    # Backward mode wins over side-step mode.
    q, w = orientation_offsets(0.0, math.radians(135.0), lim, True, True)
    assert abs(math.degrees(q) + 45.0) < 1e-9
    # Side-step mode from 60 degrees (hysteresis 5), off at 180; a diagonal stays a warped forward walk.
    for side, cases in ((60.0, ((45, False), (90, True), (58, True), (54, False), (64, False), (66, True))),
                        (180.0, ((90, False), (100, False)))):
        ow = _Orient(WarpSettings(side_step_angle_deg=side))
        for deg, expect in cases:
            d = math.radians(deg)
            ow.plan(0.0, math.sin(d), math.cos(d), 0.0, math.sin(d), math.cos(d))
            assert bool(ow.wt[0, SIDE]) is expect, (side, deg)
    # With side-steps a back diagonal up to side_step_backward_deg plays a turned side-step; without them
    # (SIDE_OK 0) the backward walk from backward_angle_deg, and no side-step mode.
    for side_ok, deg, backward, side in ((True, 130, False, True), (True, 150, True, True),
                                         (False, 130, True, False), (False, 90, False, False)):
        ow = _Orient(WarpSettings(side_step_angle_deg=60.0, side_step_backward_deg=140.0, backward_angle_deg=120.0))
        ow.wt[0, SIDE_OK] = float(side_ok)
        d = math.radians(deg)
        ow.plan(0.0, math.sin(d), math.cos(d), 0.0, math.sin(d), math.cos(d))
        assert (ow.backward, bool(ow.wt[0, SIDE])) == (backward, side), (side_ok, deg)
    ow = _Orient(WarpSettings(side_step_angle_deg=60.0))
    ow.plan(0.0, 1.1, 0.0, 0.0, 1.1, 0.0)
    assert ow.root_goal_yaw == pytest.approx(0.0)
    pos, rot, times = _predicted(90.0)
    np.testing.assert_allclose(ow.query_rotations(pos, rot, np.zeros(3), times), rot, atol=1e-9)

