"""Inertialization: hide pose discontinuities at animation transitions by decaying offsets.

At a transition the offset between the pose the character was showing and the new animation's pose is
stored per joint (positions/velocities as vectors, rotations as scaled-angle-axis offsets applied on the
left, q_out = exp(offset) * q_new, angular velocities as vectors); every frame the offsets decay to zero
and are added to the new animation's pose. Two decay laws:

- "spring" (default): critically damped spring decay with a halflife (seed 001, Ponton 3.4);
- "quintic": Bollo's quintic polynomial along the offset direction, reaching zero offset, velocity and
  acceleration at the blend time (seed 000 section 3.4). Velocities across the offset direction are
  dropped, and an initial velocity that would grow the offset is ignored, as in Bollo's method;
- "dead_blending": not a decay law but Holden's dead blending (dead_blending.py), written as the same
  offsets: the shown pose coasts on its velocity (halving every halflife) and is cross-faded to the
  new animation over blend_time.

`start` (at a transition) and `step` (every tick) dispatch on the method for one character of a crowd
(runtime/playback.py); all joints are processed in one compiled loop. Angular velocities follow the
convention of springs.py (q' = 1/2 w q).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np

from ..maths.scalar_quat import qexp as _qexp, qexp_series, qlog as _qlog, qmul as _qmul, qrot as _qrot
from .dead_blending import dead_blend_offsets, dead_blend_setup
from .settings import INERTIALIZATION_METHODS
from ..maths.springs import decay_exact, half_damping

# The methods as packed in a settings row (their index in settings.INERTIALIZATION_METHODS).
SPRING, QUINTIC, OFF, DEAD_BLENDING = (INERTIALIZATION_METHODS.index(m)
                                       for m in ("spring", "quintic", "off", "dead_blending"))


class Offsets(NamedTuple):
    """The running inertialization of n characters (J joints), one row each."""

    pos: np.ndarray          # (n, J, 3) position offsets, m
    vel: np.ndarray          # (n, J, 3) their velocities, m/s
    rot: np.ndarray          # (n, J, 3) rotation offsets, scaled angle axis applied on the left
    angvel: np.ndarray       # (n, J, 3) angular velocity offsets, rad/s
    pos_params: np.ndarray   # (n, J, 10) quintic coefficients / dead blending start state of positions
    rot_params: np.ndarray   # (n, J, 10) the same of rotations
    time: np.ndarray         # (n,) seconds since the transition


def new_offsets(n: int, num_joints: int) -> Offsets:
    """No offsets running for n characters."""
    J = num_joints
    return Offsets(np.zeros((n, J, 3)), np.zeros((n, J, 3)), np.zeros((n, J, 3)), np.zeros((n, J, 3)),
                   np.zeros((n, J, 10)), np.zeros((n, J, 10)), np.zeros(n))


@numba.njit(cache=True, error_model="numpy")
def transition_offsets(off_p, off_v, off_r, off_w, src_p, src_v, src_r, src_w, dst_p, dst_v, dst_r, dst_w):
    """New offsets = (what was shown: src + current offsets) - dst, in place."""
    for j in range(off_p.shape[0]):
        for k in range(3):
            off_p[j, k] = src_p[j, k] + off_p[j, k] - dst_p[j, k]
            off_v[j, k] = src_v[j, k] + off_v[j, k] - dst_v[j, k]
        # Shown rotation and angular velocity of the source: exp(off) * src.
        ow, ox, oy, oz = _qexp(off_r[j, 0], off_r[j, 1], off_r[j, 2])
        sw, sx, sy, sz = _qmul(ow, ox, oy, oz, src_r[j, 0], src_r[j, 1], src_r[j, 2], src_r[j, 3])
        rx, ry, rz = _qrot(ow, ox, oy, oz, src_w[j, 0], src_w[j, 1], src_w[j, 2])
        wx, wy, wz = off_w[j, 0] + rx, off_w[j, 1] + ry, off_w[j, 2] + rz
        # New offset: shown * dst^-1.
        nw, nx, ny, nz = _qmul(sw, sx, sy, sz, dst_r[j, 0], -dst_r[j, 1], -dst_r[j, 2], -dst_r[j, 3])
        inv = 1.0 / math.sqrt(nw * nw + nx * nx + ny * ny + nz * nz)
        nw, nx, ny, nz = nw * inv, nx * inv, ny * inv, nz * inv
        off_r[j, 0], off_r[j, 1], off_r[j, 2] = _qlog(nw, nx, ny, nz)
        rx, ry, rz = _qrot(nw, nx, ny, nz, dst_w[j, 0], dst_w[j, 1], dst_w[j, 2])
        off_w[j, 0], off_w[j, 1], off_w[j, 2] = wx - rx, wy - ry, wz - rz


@numba.njit(cache=True, error_model="numpy")
def quintic_setup(off, off_vel, blend_time, params):
    """Bollo's coefficients per joint from vector offsets: params[j] = (dir x3, x0, v0, a0, A, B, C, t1)."""
    for j in range(off.shape[0]):
        x0 = math.sqrt(off[j, 0] ** 2 + off[j, 1] ** 2 + off[j, 2] ** 2)
        if x0 < 1e-9:
            for k in range(10):
                params[j, k] = 0.0
            params[j, 9] = 1.0
            continue
        dx, dy, dz = off[j, 0] / x0, off[j, 1] / x0, off[j, 2] / x0
        v0 = off_vel[j, 0] * dx + off_vel[j, 1] * dy + off_vel[j, 2] * dz
        if v0 > 0.0:            # moving away from the new pose: ignore, the blend must shrink the offset
            v0 = 0.0
        t1 = blend_time
        if v0 < 0.0:            # limit the blend time so the polynomial cannot overshoot
            t1 = min(t1, -5.0 * x0 / v0)
        a0 = (-8.0 * v0 * t1 - 20.0 * x0) / (t1 * t1)
        if a0 < 0.0:            # only an acceleration that brakes the (negative) velocity is kept
            a0 = 0.0
        t12, t13 = t1 * t1, t1 * t1 * t1
        A = -(a0 * t12 + 6.0 * v0 * t1 + 12.0 * x0) / (2.0 * t13 * t12)
        B = (3.0 * a0 * t12 + 16.0 * v0 * t1 + 30.0 * x0) / (2.0 * t12 * t12)
        C = -(3.0 * a0 * t12 + 12.0 * v0 * t1 + 20.0 * x0) / (2.0 * t13)
        params[j, 0], params[j, 1], params[j, 2] = dx, dy, dz
        params[j, 3], params[j, 4], params[j, 5] = x0, v0, a0
        params[j, 6], params[j, 7], params[j, 8], params[j, 9] = A, B, C, t1


@numba.njit(cache=True, error_model="numpy")
def quintic_eval(params, t, off, off_vel):
    for j in range(params.shape[0]):
        t1 = params[j, 9]
        if t >= t1 or params[j, 3] == 0.0:
            for k in range(3):
                off[j, k] = 0.0
                off_vel[j, k] = 0.0
            continue
        x0, v0, a0, A, B, C = params[j, 3], params[j, 4], params[j, 5], params[j, 6], params[j, 7], params[j, 8]
        x = (((((A * t + B) * t + C) * t + 0.5 * a0) * t + v0) * t) + x0
        v = ((((5.0 * A * t + 4.0 * B) * t + 3.0 * C) * t + a0) * t) + v0
        for k in range(3):
            off[j, k] = x * params[j, k]
            off_vel[j, k] = v * params[j, k]


@numba.njit(cache=True, error_model="numpy")
def spring_decay(off, off_vel, y, dt):
    """Decay (J, 3) offsets and their velocities in place (springs.decay_exact, half damping y)."""
    for j in range(off.shape[0]):
        for k in range(3):
            off[j, k], off_vel[j, k] = decay_exact(off[j, k], off_vel[j, k], y, dt)


@numba.njit(cache=True, error_model="numpy")
def apply_offsets(off_p, off_v, off_r, off_w, dst_p, dst_v, dst_r, dst_w, out_p, out_v, out_r, out_w):
    """The shown pose (out_*) from the animation's (dst_*) and the offsets (off_*), per joint (J, 3 or 4);
    the velocities of the first len(out_v) joints only (a shown pose keeps the root's alone)."""
    nv = out_v.shape[0]
    for j in range(off_p.shape[0]):
        for k in range(3):
            out_p[j, k] = dst_p[j, k] + off_p[j, k]
        # Every joint of every agent, every tick: the series spares a sine, a cosine and a square root per joint.
        ow, ox, oy, oz = qexp_series(off_r[j, 0], off_r[j, 1], off_r[j, 2])
        qw, qx, qy, qz = _qmul(ow, ox, oy, oz, dst_r[j, 0], dst_r[j, 1], dst_r[j, 2], dst_r[j, 3])
        inv = 1.0 / math.sqrt(qw * qw + qx * qx + qy * qy + qz * qz)
        out_r[j, 0], out_r[j, 1], out_r[j, 2], out_r[j, 3] = qw * inv, qx * inv, qy * inv, qz * inv
        if j < nv:
            for k in range(3):
                out_v[j, k] = dst_v[j, k] + off_v[j, k]
            rx, ry, rz = _qrot(ow, ox, oy, oz, dst_w[j, 0], dst_w[j, 1], dst_w[j, 2])
            out_w[j, 0], out_w[j, 1], out_w[j, 2] = off_w[j, 0] + rx, off_w[j, 1] + ry, off_w[j, 2] + rz


@numba.njit(cache=True, error_model="numpy")
def start(off, i, method, halflife, blend_time, src, dst):
    """A transition of character i: its offsets (Offsets) take over the difference between src, the
    pose it was playing, and dst, the new one (row i of two playback.Pose records, both as they would
    play now). method: SPRING, QUINTIC, OFF or DEAD_BLENDING; halflife, blend_time in seconds.
    Dead blending overwrites src's row with the pose on screen."""
    op, ov, orr, ow = off.pos[i], off.vel[i], off.rot[i], off.angvel[i]
    sp, sr, sv, sw = src.pos[i], src.rot[i], src.vel[i], src.angvel[i]
    dp, dr, dv, dw = dst.pos[i], dst.rot[i], dst.vel[i], dst.angvel[i]
    if method == OFF:
        op[:] = 0.0
        ov[:] = 0.0
        orr[:] = 0.0
        ow[:] = 0.0
        off.pos_params[i] = 0.0
        off.rot_params[i] = 0.0
    elif method == DEAD_BLENDING:
        # The pose on screen (source + running offsets), in place of the source pose.
        apply_offsets(op, ov, orr, ow, sp, sv, sr, sw, sp, sv, sr, sw)
        dead_blend_setup(sp, sv, sr, sw, off.pos_params[i], off.rot_params[i])
        dead_blend_offsets(off.pos_params[i], off.rot_params[i], 0.0, halflife, blend_time, (dp, dv, dr, dw),
                           (op, ov, orr, ow))
    else:
        transition_offsets(op, ov, orr, ow, sp, sv, sr, sw, dp, dv, dr, dw)
        if method == QUINTIC:
            quintic_setup(op, ov, blend_time, off.pos_params[i])
            quintic_setup(orr, ow, blend_time, off.rot_params[i])
            quintic_eval(off.pos_params[i], 0.0, op, ov)
            quintic_eval(off.rot_params[i], 0.0, orr, ow)
    off.time[i] = 0.0


@numba.njit(cache=True, error_model="numpy", inline="always")
def needs_joint_velocities(method):
    """Whether `step` reads the animation's velocities of every joint (dead blending's offsets follow
    them), not only the root's (the other methods decay the offsets' velocities by themselves)."""
    return method == DEAD_BLENDING


@numba.njit(cache=True, error_model="numpy")
def step(off, i, method, halflife, blend_time, dt, anim, out):
    """Character i's offsets dt seconds on, applied to its animation pose anim = (positions, rotations,
    velocities, angular velocities) (J, 3 or 4) into row i of the playback.Pose `out` (velocities of
    as many joints as it keeps: needs_joint_velocities says when anim must have them all). method and
    times as in `start`."""
    op, ov, orr, ow = off.pos[i], off.vel[i], off.rot[i], off.angvel[i]
    ap, ar, av, aw = anim
    if method == OFF:
        nv = out.vel.shape[1]
        out.pos[i] = ap
        out.vel[i] = av[:nv]
        out.rot[i] = ar
        out.angvel[i] = aw[:nv]
        return
    if method == SPRING:
        y = half_damping(halflife)
        spring_decay(op, ov, y, dt)
        spring_decay(orr, ow, y, dt)
    elif method == DEAD_BLENDING:
        off.time[i] += dt
        dead_blend_offsets(off.pos_params[i], off.rot_params[i], off.time[i], halflife, blend_time,
                           (ap, av, ar, aw), (op, ov, orr, ow))
    else:
        off.time[i] += dt
        quintic_eval(off.pos_params[i], off.time[i], op, ov)
        quintic_eval(off.rot_params[i], off.time[i], orr, ow)
    apply_offsets(op, ov, orr, ow, ap, av, ar, aw, out.pos[i], out.vel[i], out.rot[i], out.angvel[i])
