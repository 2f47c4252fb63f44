import numpy as np
import pytest

from motionmatch.maths.rotations import (
                                         quat_angle, quat_from_angle_axis, quat_from_scaled_angle_axis, quat_mul, quat_mul_inv, quat_normalize,
                                         quat_rotate,
                                         )
from motionmatch.runtime.inertialization import new_offsets, start, step
from motionmatch.runtime.playback import Pose
from motionmatch.runtime.settings import INERTIALIZATION_METHODS, CharacterSettings
from motionmatch.maths.springs import decay_exact, half_damping

J = 23
DT = 1 / 60


def as_pose(p, r, v, w):
    """A one-character playback.Pose (float64, like the crowd's buffers)."""
    return Pose(*(np.array(a, dtype=np.float64)[None] for a in (p, r, v, w)))


class RuntimeOffsets:
    """One character's offsets driven through the runtime's compiled dispatch, as playback calls it:
    inertialization.start at a transition, inertialization.step every tick. Poses in and out are
    (positions, velocities, rotations, angular velocities)."""

    def __init__(self, method="spring", halflife=0.1, blend_time=0.3):
        self.method = INERTIALIZATION_METHODS.index(method)
        self.halflife, self.blend_time = halflife, blend_time
        self.off = new_offsets(1, J)

    off_pos = property(lambda self: self.off.pos[0])
    off_vel = property(lambda self: self.off.vel[0])
    off_rot = property(lambda self: self.off.rot[0])
    off_angvel = property(lambda self: self.off.angvel[0])
    active = property(lambda self: bool(np.abs(self.off_pos).max() > 1e-6 or np.abs(self.off_rot).max() > 1e-6))

    def transition(self, sp, sv, sr, sw, dp, dv, dr, dw):
        start(self.off, 0, self.method, self.halflife, self.blend_time, as_pose(sp, sr, sv, sw), as_pose(dp, dr, dv, dw))

    def update(self, p, v, r, w, dt):
        out = as_pose(np.zeros((J, 3)), np.zeros((J, 4)), np.zeros((J, 3)), np.zeros((J, 3)))
        anim = tuple(np.array(a, dtype=np.float64) for a in (p, r, v, w))
        step(self.off, 0, self.method, self.halflife, self.blend_time, float(dt), anim, out)
        return out.pos[0], out.vel[0], out.rot[0], out.angvel[0]


def pose(seed):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(J, 3)) * 0.3, rng.normal(size=(J, 3)), quat_normalize(rng.normal(size=(J, 4))),
            rng.normal(size=(J, 3)) * 2)


def same_rot(a, b, tol=1e-9):
    return np.all(quat_angle(quat_mul_inv(a, b)) < tol)


def check_equal(out, ref, tol=1e-9, velocities=True):
    np.testing.assert_allclose(out[0], ref[0], atol=tol)
    assert same_rot(out[2], ref[2], tol)
    if velocities:
        np.testing.assert_allclose(out[1], ref[1], atol=tol)
        np.testing.assert_allclose(out[3], ref[3], atol=tol)


@pytest.mark.parametrize("method", INERTIALIZATION_METHODS)
def test_no_transition_passes_pose_through(method):
    inert = RuntimeOffsets(method)
    dst = pose(1)
    check_equal(inert.update(*dst, DT), dst)
    assert not inert.active


def test_spring_continuity_then_decay():
    inert = RuntimeOffsets("spring", halflife=0.1)
    src, dst = pose(1), pose(2)
    inert.transition(*src, *dst)
    np.testing.assert_allclose(inert.off_pos, src[0] - dst[0])
    check_equal(inert.update(*dst, 0.0), src)       # output starts exactly at the source pose
    err = []
    for _ in range(120):
        out = inert.update(*dst, DT)
        err.append(np.abs(out[0] - dst[0]).max())
    check_equal(out, dst, tol=1e-4)
    assert err[-1] < 1e-5 and err[30] < err[5] < err[0]


def test_spring_offsets_follow_the_spring_closed_form():
    inert = RuntimeOffsets("spring", halflife=0.15)
    src, dst = pose(3), pose(4)
    inert.transition(*src, *dst)
    off_p, off_v = inert.off_pos.copy(), inert.off_vel.copy()
    off_r, off_w = inert.off_rot.copy(), inert.off_angvel.copy()
    out = inert.update(*dst, 0.2)
    y = half_damping(0.15)
    p = np.vectorize(lambda x, v: decay_exact(x, v, y, 0.2)[0])(off_p, off_v)
    np.testing.assert_allclose(out[0], dst[0] + p, atol=1e-12)
    # Rotation offsets decay as vectors in scaled angle axis, applied on the left.
    r, w = np.vectorize(lambda x, v: decay_exact(x, v, y, 0.2))(off_r, off_w)
    q = quat_from_scaled_angle_axis(r)
    assert same_rot(out[2], quat_mul(q, dst[2]))
    np.testing.assert_allclose(out[3], w + quat_rotate(q, dst[3]), atol=1e-9)


@pytest.mark.parametrize("method", ["spring", "quintic", "dead_blending"])
def test_chained_transitions_stay_continuous(method):
    inert = RuntimeOffsets(method, halflife=0.1, blend_time=0.3)
    a, b, c = pose(5), pose(6), pose(7)
    inert.transition(*a, *b)
    for _ in range(7):
        shown = inert.update(*b, DT)
    inert.transition(*b, *c)                       # src: the raw pose of the animation we leave
    check_equal(inert.update(*c, 0.0), shown, velocities=(method != "quintic"))


def test_quintic_continuity_and_exact_end():
    inert = RuntimeOffsets("quintic", blend_time=0.3)
    src, dst = pose(8), pose(9)
    inert.transition(*src, *dst)
    out0 = inert.update(*dst, 0.0)
    check_equal(out0, src, velocities=False)
    prev, steps = out0, []
    for i in range(int(0.3 / DT) + 1):
        out = inert.update(*dst, DT)
        steps.append(np.abs(out[0] - prev[0]).max())
        prev = out
    check_equal(out, dst, tol=1e-12)               # reaches the new pose exactly at the blend time
    assert not inert.active
    # No jump: per-frame changes stay far below the initial offset.
    assert max(steps) < 0.2 * np.abs(src[0] - dst[0]).max()


@pytest.mark.parametrize("method", ["spring", "quintic"])
def test_output_velocity_is_derivative_of_output_position(method):
    inert = RuntimeOffsets(method, halflife=0.1, blend_time=0.3)
    rng = np.random.default_rng(10)
    p0, vd = rng.normal(size=(J, 3)), rng.normal(size=(J, 3))
    rot, w = quat_normalize(rng.normal(size=(J, 4))), np.zeros((J, 3))
    # Source moving toward the destination so the quintic keeps the velocity along the offset.
    src_p = p0 + rng.normal(size=(J, 3)) * 0.2
    src_v = vd + (p0 - src_p) * 2.0
    inert.transition(src_p, src_v, rot, w, p0, vd, rot, w)
    t, h = 0.05, 1e-5
    inert.update(p0 + vd * t, vd, rot, w, t)
    a = inert.update(p0 + vd * (t + h), vd, rot, w, h)
    b = inert.update(p0 + vd * (t + 2 * h), vd, rot, w, h)
    np.testing.assert_allclose((b[0] - a[0]) / h, b[1], atol=1e-3)


@pytest.mark.parametrize("method", ["spring", "quintic"])
def test_large_rotation_offset_decays_the_short_way(method):
    axis = np.array([0.0, 0.0, 1.0])
    src_r = np.tile(quat_from_angle_axis(1.5, axis), (J, 1))
    dst_r = np.tile(quat_from_angle_axis(-1.5, axis), (J, 1))   # 3 rad apart: short way is 3 rad, not 3.28
    z = np.zeros((J, 3))
    inert = RuntimeOffsets(method, halflife=0.1, blend_time=0.3)
    inert.transition(z, z, src_r, z, z, z, dst_r, z)
    np.testing.assert_allclose(np.linalg.norm(inert.off_rot, axis=1), 3.0, atol=1e-9)
    angles = []
    for _ in range(60):
        out = inert.update(z, z, dst_r, z, DT)
        angles.append(quat_angle(quat_mul_inv(out[2][0], dst_r[0])))
    assert angles[-1] < 1e-3
    assert np.all(np.diff(angles) <= 1e-12)       # monotone toward the new pose, no spin-around


def test_bad_method():
    with pytest.raises(ValueError, match="inertialization"):
        CharacterSettings(inertialization="cubic").packed()


def test_dead_blending_starts_at_the_source_coasts_and_ends_on_the_destination():
    inert = RuntimeOffsets("dead_blending", halflife=0.1, blend_time=0.2)
    src, dst = pose(13), pose(14)
    inert.transition(*src, *dst)
    check_equal(inert.update(*dst, 0.0), src)     # position, rotation and both velocities continue
    out = inert.update(*dst, 2 * DT)
    # The documented closed form: the source coasting (velocity halving every 0.1 s) faded toward the
    # destination with smoothstep weights; the root (joint 0) is held, its velocity cross-faded.
    u, lam = 2 * DT / 0.2, np.log(2) / 0.1
    a = u * u * (3 - 2 * u)
    coast = src[0] + src[1] * (1 - np.exp(-lam * 2 * DT)) / lam
    coast[0] = src[0][0]
    np.testing.assert_allclose(out[0], (1 - a) * coast + a * dst[0], atol=1e-12)
    np.testing.assert_allclose(out[1][0], (1 - a) * src[1][0] + a * dst[1][0], atol=1e-12)
    for _ in range(int(0.2 / DT)):
        out = inert.update(*dst, DT)
    check_equal(out, dst, tol=1e-12)              # exactly the new pose from the blend time on
    assert not inert.active


def test_dead_blending_velocity_is_derivative_of_position_except_the_root():
    inert = RuntimeOffsets("dead_blending", halflife=0.1, blend_time=0.3)
    src, dst = pose(15), pose(16)
    inert.transition(*src, *dst)
    t, h = 0.1, 1e-5
    inert.update(*dst, t)                         # a still destination: its velocities are not integrated
    z = np.zeros((J, 3))
    a = inert.update(dst[0], z, dst[2], z, h)
    b = inert.update(dst[0], z, dst[2], z, h)
    np.testing.assert_allclose(((b[0] - a[0]) / h)[1:], b[1][1:], atol=1e-3)
