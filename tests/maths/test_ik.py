"""Two-joint IK, toe re-aim, foot locking and the whole-pose leg IK."""
import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))

from conftest import MOCAP
from motionmatch.io.bvh import read_bvh
from motionmatch.maths.kinematics import forward_kinematics
from motionmatch.maths.rotations import quat_between, quat_from_angle_axis, quat_mul, quat_normalize, quat_rotate
from motionmatch.maths.ik import (apply_leg_ik, globals_to_locals, toe_ground_fix,
                                  two_joint_ik)
from motionmatch.runtime.touchups import FOOT_LOCK, foot_lock_update
from motionmatch.motion.skeleton import find_roles

JLPM = MOCAP / "jlpm22-locomotion" / "locomotion_take1.bvh"
DOWN = np.array([0.0, -1.0, 0.0])


def _leg(rng, bend=0.3):
    """A random leg: hip, knee, ankle positions and world rotations whose local 'bone' axis is -Y
    (plus a random twist so the rotations are not just swings)."""
    a = rng.normal(size=3) * 0.2 + np.array([0.0, 1.0, 0.0])
    up_dir = quat_rotate(quat_from_angle_axis(rng.uniform(-0.5, 0.5), np.array([1.0, 0.0, 0.0])), DOWN)
    lab, lbc = rng.uniform(0.35, 0.5), rng.uniform(0.35, 0.5)
    b = a + lab * up_dir
    lo_dir = quat_rotate(quat_from_angle_axis(-bend - rng.uniform(0, 0.5), np.array([1.0, 0.0, 0.0])), up_dir)
    c = b + lbc * lo_dir
    twist_a = quat_from_angle_axis(rng.uniform(-np.pi, np.pi), DOWN)
    twist_b = quat_from_angle_axis(rng.uniform(-np.pi, np.pi), DOWN)
    a_gr = quat_mul(quat_between(DOWN, b - a), twist_a)
    b_gr = quat_mul(quat_between(DOWN, c - b), twist_b)
    return a, b, c, a_gr, b_gr


def _chain(a, b, c, a_gr, b_gr, a_new, b_new):
    """Knee and ankle positions after replacing the world rotations (bones are rigid in local space)."""
    ab_local = quat_rotate(np.array([a_gr[0], -a_gr[1], -a_gr[2], -a_gr[3]]), b - a)
    bc_local = quat_rotate(np.array([b_gr[0], -b_gr[1], -b_gr[2], -b_gr[3]]), c - b)
    knee = a + quat_rotate(a_new, ab_local)
    return knee, knee + quat_rotate(b_new, bc_local)


def _normal(a, b, c):
    n = np.cross(b - a, c - a)
    return n / np.linalg.norm(n)


def test_reachable_targets_are_reached_exactly():
    rng = np.random.default_rng(1)
    for _ in range(200):
        a, b, c, a_gr, b_gr = _leg(rng)
        L = np.linalg.norm(b - a) + np.linalg.norm(c - b)
        d = rng.normal(size=3)
        d /= np.linalg.norm(d)
        target = a + d * rng.uniform(abs(np.linalg.norm(b - a) - np.linalg.norm(c - b)) + 0.05, 0.97 * L)
        a_new, b_new, end = two_joint_ik(a, b, c, target, a_gr, b_gr)
        knee, ankle = _chain(a, b, c, a_gr, b_gr, a_new, b_new)
        assert np.linalg.norm(ankle - target) < 1e-6
        assert np.linalg.norm(end - target) < 1e-6
        assert abs(np.linalg.norm(knee - a) - np.linalg.norm(b - a)) < 1e-9
        assert abs(np.linalg.norm(quat_normalize(a_new)) - 1) < 1e-9


def test_unreachable_target_keeps_knee_bent():
    rng = np.random.default_rng(2)
    for _ in range(50):
        a, b, c, a_gr, b_gr = _leg(rng)
        L = np.linalg.norm(b - a) + np.linalg.norm(c - b)
        target = a + np.array([0.1, -1.0, 0.2]) / np.linalg.norm([0.1, -1.0, 0.2]) * L * 1.5
        a_new, b_new, end = two_joint_ik(a, b, c, target, a_gr, b_gr, buffer=0.01)
        knee, ankle = _chain(a, b, c, a_gr, b_gr, a_new, b_new)
        reach = np.linalg.norm(ankle - a)
        assert reach == pytest.approx(0.99 * L, abs=1e-9)
        # Ankle on the hip->target line, and the knee still bent (> 10 degrees off straight).
        d = (target - a) / np.linalg.norm(target - a)
        assert np.linalg.norm(np.cross(ankle - a, d)) < 1e-9
        u, v = knee - a, ankle - knee
        straightness = np.degrees(np.arccos(np.dot(u, v) / np.linalg.norm(u) / np.linalg.norm(v)))
        assert straightness > 10.0
        # Too close: the knee cannot fold through itself either.
        a_new, b_new, _ = two_joint_ik(a, b, c, a.copy(), a_gr, b_gr)
        assert np.all(np.isfinite(a_new)) and np.all(np.isfinite(b_new))


def test_bend_plane_is_kept():
    rng = np.random.default_rng(3)
    for _ in range(50):
        a, b, c, a_gr, b_gr = _leg(rng)
        n0 = _normal(a, b, c)
        # A target inside the current bend plane: the plane must not turn at all.
        target = a + 0.8 * (c - a) + 0.05 * np.cross(n0, c - a)
        a_new, b_new, _ = two_joint_ik(a, b, c, target, a_gr, b_gr)
        knee, ankle = _chain(a, b, c, a_gr, b_gr, a_new, b_new)
        n1 = _normal(a, knee, ankle)
        assert np.dot(n0, n1) > 1 - 1e-9
        # Out of plane: the new plane contains the target and turned only by the angle the
        # hip->ankle line did (shortest rotation), with the knee on the same side.
        target = c + rng.normal(size=3) * 0.1
        a_new, b_new, _ = two_joint_ik(a, b, c, target, a_gr, b_gr)
        knee, ankle = _chain(a, b, c, a_gr, b_gr, a_new, b_new)
        n1 = _normal(a, knee, ankle)
        turn = np.arccos(np.clip(np.dot((c - a) / np.linalg.norm(c - a), (ankle - a) / np.linalg.norm(ankle - a)), -1, 1))
        assert np.arccos(np.clip(np.dot(n0, n1), -1, 1)) <= turn + 1e-7


def test_straight_leg_bends_towards_pole():
    a, b, c = np.array([0.0, 1.0, 0.0]), np.array([0.0, 0.55, 0.0]), np.array([0.0, 0.1, 0.0])
    q = np.array([1.0, 0.0, 0.0, 0.0])
    a_new, b_new, _ = two_joint_ik(a, b, c, np.array([0.0, 0.3, 0.0]), q, q, pole=np.array([0.0, 0.0, 1.0]))
    knee, ankle = _chain(a, b, c, q, q, a_new, b_new)
    assert knee[2] > 0.1 and abs(knee[0]) < 1e-9
    assert np.allclose(ankle, [0.0, 0.3, 0.0], atol=1e-9)


def test_toe_ground_fix():
    foot = np.array([0.0, 0.1, 0.0])
    q = np.array([1.0, 0.0, 0.0, 0.0])
    toe = np.array([0.0, 0.0, 0.15])
    q_new, toe_new = toe_ground_fix(foot, q, toe, 0.05)
    assert toe_new[1] == pytest.approx(0.05, abs=1e-9)
    assert np.linalg.norm(toe_new - foot) == pytest.approx(np.linalg.norm(toe - foot), abs=1e-9)
    assert np.allclose(foot + quat_rotate(q_new, toe - foot), toe_new, atol=1e-9)
    assert toe_new[0] == pytest.approx(0.0, abs=1e-12) and toe_new[2] > 0
    # Already above the ground: untouched.
    q_same, toe_same = toe_ground_fix(foot, q, toe, -0.1)
    assert np.allclose(q_same, q) and np.allclose(toe_same, toe)


class FootLocker:
    """One foot's lock record driven through touchups.foot_lock_update."""

    def __init__(self, unlock_radius, halflife, glide_halflife=0.01, relock_speed=0.0):
        self.state = np.zeros(1, FOOT_LOCK)[0]
        self.unlock_radius, self.halflife, self.glide_halflife = unlock_radius, halflife, glide_halflife
        self.relock_speed = relock_speed

    def update(self, contact, p, dt):
        return np.array(foot_lock_update(self.state, contact, float(p[0]), float(p[1]), float(p[2]), dt,
                                         self.unlock_radius, self.halflife, self.glide_halflife, self.relock_speed))

    locked = property(lambda self: bool(self.state["locked"]))


def test_foot_locker_holds_then_blends_out():
    dt = 1.0 / 60.0
    fl = FootLocker(unlock_radius=0.2, halflife=0.1)
    out = []
    anim = []
    for i in range(120):
        t = i * dt
        # Sliding slowly while in contact for 0.5 s, then lifting off and moving fast.
        if t < 0.5:
            p = np.array([0.1 * t, 0.0, 0.0])
            contact = True
        else:
            s = t - 0.5                                            # smooth lift-off
            p = np.array([0.05 + 0.1 * s + 3.0 * s * s, 0.1 * min(1.0, s * s * 25), 0.0])
            contact = False
        anim.append(p)
        out.append(fl.update(contact, p, dt))
    out = np.array(out)
    anim = np.array(anim)
    held = out[:30]
    assert np.abs(held - held[0]).max() < 1e-12                  # planted while contact holds
    assert np.linalg.norm(anim[29] - held[0]) < 0.2
    steps = np.linalg.norm(np.diff(out, axis=0), axis=1)
    anim_steps = np.linalg.norm(np.diff(anim, axis=0), axis=1)
    assert steps.max() < anim_steps.max() * 1.5                  # no pop on release
    assert np.linalg.norm(out[-1] - anim[-1]) < 1e-3              # offset decayed
    # Velocity continuous at release: the displayed foot starts from rest, then accelerates smoothly.
    assert steps[29] < 0.5 * anim_steps[29]
    accel = np.linalg.norm(np.diff(out, 2, axis=0), axis=1)
    anim_accel = np.linalg.norm(np.diff(anim[29:], 2, axis=0), axis=1)
    assert accel.max() < 2.0 * anim_accel.max()


def test_a_locking_foot_glides_to_rest_instead_of_stopping_dead():
    dt = 1.0 / 60.0
    glide = 0.01
    fl = FootLocker(unlock_radius=0.35, halflife=0.1, glide_halflife=glide)
    out = []
    for i in range(40):
        # Swinging at 0.5 m/s, contact from frame 20 on while the animated foot slows down to rest.
        t = i * dt
        x = 0.5 * t if i <= 20 else 0.5 * 20 * dt + 0.5 * (1.0 - np.exp(-(t - 20 * dt) / 0.05)) * 0.05
        out.append(fl.update(i >= 20, np.array([x, 0.0, 0.0]), dt))
    out = np.array(out)
    v = np.diff(out[:, 0]) / dt                  # v[k]: from frame k to k + 1
    assert fl.locked
    assert v[18] == pytest.approx(0.5, abs=1e-9) and v[19] == pytest.approx(0.5, abs=1e-9)
    # Into the lock (frame 20) at 0.5 m/s, out of it at 0.2 m/s (1 - e^(-y dt)) / (y dt) (the old lock
    # dropped to 0 in one frame); then the speed only decays: no overshoot and return ...
    assert v[20] == pytest.approx(0.5 * (1 - np.exp(-2.31)) / 2.31, rel=0.01) and np.all(np.diff(v[19:]) <= 1e-12) and np.all(v[19:] >= -1e-12)
    # ... and the foot is at rest (< 2 cm/s) within 2 frames, v / y ~ 3.6 mm past where it locked.
    assert v[22:].max() < 0.02
    rest = 0.5 * glide / (2.0 * np.log(2.0))
    assert out[-1, 0] - out[20, 0] == pytest.approx(rest, abs=1e-4)


def test_foot_locker_unlocks_on_drift_and_waits_for_next_contact():
    dt = 1.0 / 60.0
    fl = FootLocker(unlock_radius=0.2, halflife=0.1)
    outs, locked = [], []
    for i in range(200):
        p = np.array([0.6 * i * dt, 0.0, 0.0])                   # slides 0.6 m/s, contact always on
        outs.append(fl.update(True, p, dt))
        locked.append(fl.locked)
    outs = np.array(outs)
    first_unlock = locked.index(False)
    assert 15 <= first_unlock <= 22                                # 0.2 m at 0.6 m/s = 20 frames
    assert not any(locked[first_unlock:])                          # no relock during the same contact
    # The 0.2 m catch-up is spread over frames: no step beyond a fifth of it (a pop would be 0.2 m).
    steps = np.linalg.norm(np.diff(outs, axis=0), axis=1)
    assert steps.max() < 0.04
    assert np.linalg.norm(outs[-1] - np.array([0.6 * 199 * dt, 0, 0])) < 1e-3
    fl.update(False, outs[-1], dt)
    fl.update(True, outs[-1], dt)
    assert fl.locked


def _jlpm_pose(frame=100):
    anim = read_bvh(JLPM)
    gpos, grot = forward_kinematics(anim.positions[frame], anim.rotations[frame], anim.skeleton.parents)
    return anim, gpos, grot


@pytest.mark.usefixtures("jlpm_dir")     # fails loudly when the data is missing
def test_apply_leg_ik_on_real_pose():
    anim, gpos, grot = _jlpm_pose()
    P = anim.skeleton.parents
    roles = find_roles(anim.skeleton.names)
    lf, rf = roles["left_foot"], roles["right_foot"]
    lt = gpos[lf] + np.array([0.03, 0.05, -0.02])
    rt = gpos[rf] + np.array([-0.02, 0.04, 0.03])
    local = apply_leg_ik(gpos, grot, P, roles, lt, rt, toe_ground=(None, None))
    gp2, gr2 = forward_kinematics(anim.positions[100], local, P)
    assert np.linalg.norm(gp2[lf] - lt) < 1e-6 and np.linalg.norm(gp2[rf] - rt) < 1e-6
    assert np.allclose(gp2[roles["hips"]], gpos[roles["hips"]])
    # Feet keep their animated world rotation; the upper body is untouched.
    assert np.allclose(np.abs((gr2[lf] * grot[lf]).sum()), 1.0, atol=1e-9)
    assert np.allclose(gp2[roles["head"]], gpos[roles["head"]], atol=1e-9)
    # Unchanged pose round-trips through globals_to_locals.
    assert np.allclose(np.abs((globals_to_locals(grot, P) * anim.rotations[100]).sum(-1)), 1.0, atol=1e-9)
    # Toe fix: ground raised above the toe lifts it to the ground height.
    lt_toe = roles["left_toe"]
    ground = gp2[lt_toe, 1] + 0.03
    local = apply_leg_ik(gpos, grot, P, roles, lt, None, toe_ground=(ground, None))
    gp3, _ = forward_kinematics(anim.positions[100], local, P)
    assert gp3[lt_toe, 1] == pytest.approx(ground, abs=1e-6)
    assert np.linalg.norm(gp3[lf] - lt) < 1e-6


def test_in_place_leg_ik_matches_the_reference_path(jlpm_db):
    """The compiled whole-pose path the runtime uses equals apply_leg_ik followed by FK."""
    from motionmatch.maths.kinematics import forward_kinematics
    from motionmatch.maths.ik import apply_leg_ik, apply_leg_ik_in_place, leg_chains
    db = jlpm_db
    parents = np.asarray(db.skeleton.parents, dtype=np.int64)
    legs = leg_chains(db.roles)
    rng = np.random.default_rng(4)
    for f in rng.integers(0, db.num_frames, 12):
        lp = db.positions[f].astype(np.float64).copy()
        lr = db.rotations[f].astype(np.float64).copy()
        gp, gr = forward_kinematics(lp, lr, parents)
        lt = gp[db.roles["left_foot"]] + rng.normal(0, 0.05, 3)
        rt = gp[db.roles["right_foot"]] + rng.normal(0, 0.05, 3)
        ground = (float(rng.uniform(-0.05, 0.05)), None)
        ref_lr = apply_leg_ik(gp, gr, parents, db.roles, lt, rt, ground, local_rot=lr)
        ref_gp, ref_gr = forward_kinematics(lp, ref_lr, parents)
        gp2, gr2, lr2 = gp.copy(), gr.copy(), lr.copy()
        apply_leg_ik_in_place(lp.copy(), lr2, gp2, gr2, parents, legs, lt, rt, ground)
        assert np.allclose(lr2, ref_lr, atol=1e-12)
        assert np.allclose(gp2, ref_gp, atol=1e-12) and np.allclose(gr2, ref_gr, atol=1e-12)


@pytest.mark.parametrize("relock_speed", [0.0, 0.2])
def test_foot_drifted_out_of_its_lock_relocks_when_slow_only_with_relock_speed(relock_speed):
    """A contact held through a whole step (a learned model's): the foot slides 0.5 m at 1 m/s, which
    unlocks it, then stands still with the contact still on. Without a relock speed it stays free until
    the contact ends (database contacts end at every step); with one it locks again once it is slow."""
    dt = 1.0 / 60.0
    fl = FootLocker(unlock_radius=0.2, halflife=0.05, relock_speed=relock_speed)
    state = []
    for i in range(90):
        t = i * dt
        p = np.array([min(t, 0.5), 0.0, 0.0])        # 1 m/s for 0.5 s, then standing
        fl.update(True, p, dt)
        state.append(fl.locked)
    assert state[0] and not state[29]                  # locked at first, unlocked by the drift
    assert state[-1] == (relock_speed > 0.0)


def test_keep_leaves_a_straighter_leg_its_extension():
    """legs_pose's keep (the touch-ups): a leg posed straighter than the IK's buffer, asked for its own ankle,
    stays as it is; without keep the buffer bends it (every played knee straighter than 164 degrees, at 1 %)."""
    from motionmatch.maths.ik import _two_joint_ik_core
    a, b = (0.0, 1.0, 0.0), (0.0, 0.55, 0.02)
    c = (0.0, 0.1, 0.0)                                  # knee about 175 degrees: 0.998 of the leg's length
    rot = (1.0, 0.0, 0.0, 0.0)
    _, _, bent = _two_joint_ik_core(a, b, c, c, (0.0, 0.0, 1.0), rot, rot, 0.01)
    _, _, kept = _two_joint_ik_core(a, b, c, c, (0.0, 0.0, 1.0), rot, rot, 0.01, True)
    assert np.allclose(kept, c, atol=1e-9)
    assert np.linalg.norm(np.subtract(bent, c)) > 5e-3
    # A target beyond reach: the kept leg goes no straighter than it was.
    _, _, far = _two_joint_ik_core(a, b, c, (0.0, -0.2, 0.0), (0.0, 0.0, 1.0), rot, rot, 0.01, True)
    assert abs(math.dist(far, a) - math.dist(c, a)) < 1e-9
