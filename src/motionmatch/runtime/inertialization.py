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

All joints are processed in one compiled loop (numba) so update costs a few microseconds. Angular
velocities follow the convention of springs.py (q' = 1/2 w q).
"""
from __future__ import annotations

import math

import numba
import numpy as np

from .springs import decay_exact, halflife_to_damping

from ..scalar_quat import qexp as _qexp, qlog as _qlog, qmul as _qmul, qrot as _qrot
from .dead_blending import dead_blend_offsets, dead_blend_setup

METHODS = ("spring", "quintic", "dead_blending")


@numba.njit(cache=True)
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


@numba.njit(cache=True)
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


@numba.njit(cache=True)
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


@numba.njit(cache=True)
def spring_decay(off, off_vel, y, dt):
    """Decay (J, 3) offsets and their velocities in place (springs.decay_exact, half damping y)."""
    for j in range(off.shape[0]):
        for k in range(3):
            off[j, k], off_vel[j, k] = decay_exact(off[j, k], off_vel[j, k], y, dt)


@numba.njit(cache=True)
def apply_offsets(off_p, off_v, off_r, off_w, dst_p, dst_v, dst_r, dst_w, out_p, out_v, out_r, out_w):
    for j in range(off_p.shape[0]):
        for k in range(3):
            out_p[j, k] = dst_p[j, k] + off_p[j, k]
            out_v[j, k] = dst_v[j, k] + off_v[j, k]
        ow, ox, oy, oz = _qexp(off_r[j, 0], off_r[j, 1], off_r[j, 2])
        qw, qx, qy, qz = _qmul(ow, ox, oy, oz, dst_r[j, 0], dst_r[j, 1], dst_r[j, 2], dst_r[j, 3])
        inv = 1.0 / math.sqrt(qw * qw + qx * qx + qy * qy + qz * qz)
        out_r[j, 0], out_r[j, 1], out_r[j, 2], out_r[j, 3] = qw * inv, qx * inv, qy * inv, qz * inv
        rx, ry, rz = _qrot(ow, ox, oy, oz, dst_w[j, 0], dst_w[j, 1], dst_w[j, 2])
        out_w[j, 0], out_w[j, 1], out_w[j, 2] = off_w[j, 0] + rx, off_w[j, 1] + ry, off_w[j, 2] + rz


@numba.njit(cache=True)
def _spring_update_kernel(off_p, off_v, off_r, off_w, y, dt, dst_p, dst_v, dst_r, dst_w, out_p, out_v, out_r, out_w):
    """Spring decay of all offsets and their application in one call (one character frame)."""
    spring_decay(off_p, off_v, y, dt)
    spring_decay(off_r, off_w, y, dt)
    apply_offsets(off_p, off_v, off_r, off_w, dst_p, dst_v, dst_r, dst_w, out_p, out_v, out_r, out_w)


class Inertializer:
    """Per-joint inertialization of local positions, rotations and their velocities.

    transition(src..., dst...) at an animation switch: src_* is the pose the source animation would
    show now without inertialization (the raw database pose), dst_* the new animation's pose at the
    same instant. The offsets already running are carried over, so the output continues from what
    was on screen (with no offsets running: offsets = src - dst). Then every frame
    update(dst..., dt) decays the offsets by dt and returns the inertialized pose
    (pos (J,3), vel (J,3), rot (J,4), angvel (J,3), float64). update(..., dt=0) right after a
    transition returns exactly the shown source pose.

    method: "spring" (halflife, s), "quintic" (blend_time, s) or "dead_blending" (velocity decay
    halflife and blend_time, s). Joint 0 (the simulation bone) or the
    root can be included or left out by the caller: the arrays are used as given.
    """

    def __init__(self, num_joints: int, method: str = "spring", halflife: float = 0.1, blend_time: float = 0.3):
        if method not in METHODS:
            raise ValueError(f"inertialization method: expected one of {METHODS}, got {method!r}")
        if halflife <= 0.0 or blend_time <= 0.0:
            raise ValueError("inertialization halflife and blend_time must be positive")
        self.num_joints = int(num_joints)
        self.method = method
        self.halflife = float(halflife)
        self.blend_time = float(blend_time)
        self.reset()

    def reset(self) -> None:
        """Drop all offsets."""
        J = self.num_joints
        self.off_pos = np.zeros((J, 3))
        self.off_vel = np.zeros((J, 3))
        self.off_rot = np.zeros((J, 3))      # scaled angle axis, applied on the left
        self.off_angvel = np.zeros((J, 3))
        self._pos_params = np.zeros((J, 10))
        self._rot_params = np.zeros((J, 10))
        self._time = 0.0

    @property
    def active(self) -> bool:
        """Whether any offset is still noticeably non-zero."""
        return bool(np.abs(self.off_pos).max() > 1e-6 or np.abs(self.off_rot).max() > 1e-6)

    def transition(self, src_pos, src_vel, src_rot, src_angvel, dst_pos, dst_vel, dst_rot, dst_angvel) -> None:
        """Start a transition from the source pose to the destination pose (all (J,3) / (J,4))."""
        if self.method == "dead_blending":
            J = self.num_joints
            shown = (np.empty((J, 3)), np.empty((J, 3)), np.empty((J, 4)), np.empty((J, 3)))
            apply_offsets(self.off_pos, self.off_vel, self.off_rot, self.off_angvel,
                          *(np.asarray(a) for a in (src_pos, src_vel, src_rot, src_angvel)), *shown)
            dead_blend_setup(*shown, self._pos_params, self._rot_params)
            dead_blend_offsets(self._pos_params, self._rot_params, 0.0, self.halflife, self.blend_time,
                               *(np.asarray(a) for a in (dst_pos, dst_vel, dst_rot, dst_angvel)),
                               self.off_pos, self.off_vel, self.off_rot, self.off_angvel)
            self._time = 0.0
            return
        transition_offsets(self.off_pos, self.off_vel, self.off_rot, self.off_angvel,
                           *(np.asarray(a) for a in (src_pos, src_vel, src_rot, src_angvel,
                                                     dst_pos, dst_vel, dst_rot, dst_angvel)))
        if self.method == "quintic":
            quintic_setup(self.off_pos, self.off_vel, self.blend_time, self._pos_params)
            quintic_setup(self.off_rot, self.off_angvel, self.blend_time, self._rot_params)
            # The offsets now hold the polynomials at t = 0 (velocity only along the offset direction).
            quintic_eval(self._pos_params, 0.0, self.off_pos, self.off_vel)
            quintic_eval(self._rot_params, 0.0, self.off_rot, self.off_angvel)
        self._time = 0.0

    def update(self, dst_pos, dst_vel, dst_rot, dst_angvel, dt: float):
        """Decay the offsets by dt seconds and return the inertialized (pos, vel, rot, angvel)."""
        dt = float(dt)
        J = self.num_joints
        out_p, out_v, out_w = np.empty((J, 3)), np.empty((J, 3)), np.empty((J, 3))
        out_r = np.empty((J, 4))
        if self.method == "spring":
            y = halflife_to_damping(self.halflife) * 0.5
            _spring_update_kernel(self.off_pos, self.off_vel, self.off_rot, self.off_angvel, y, dt,
                                  np.asarray(dst_pos), np.asarray(dst_vel), np.asarray(dst_rot),
                                  np.asarray(dst_angvel), out_p, out_v, out_r, out_w)
            return out_p, out_v, out_r, out_w
        self._time += dt
        if self.method == "dead_blending":
            dead_blend_offsets(self._pos_params, self._rot_params, self._time, self.halflife, self.blend_time,
                               np.asarray(dst_pos), np.asarray(dst_vel), np.asarray(dst_rot),
                               np.asarray(dst_angvel), self.off_pos, self.off_vel, self.off_rot, self.off_angvel)
        else:
            quintic_eval(self._pos_params, self._time, self.off_pos, self.off_vel)
            quintic_eval(self._rot_params, self._time, self.off_rot, self.off_angvel)
        apply_offsets(self.off_pos, self.off_vel, self.off_rot, self.off_angvel,
                      np.asarray(dst_pos), np.asarray(dst_vel), np.asarray(dst_rot), np.asarray(dst_angvel),
                      out_p, out_v, out_r, out_w)
        return out_p, out_v, out_r, out_w
