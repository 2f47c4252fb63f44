"""Dead blending (Holden, "Dead Blending", 2023): a transition that extrapolates the pose that was on
screen with its velocities decaying, and cross-fades from that extrapolation to the new animation.

Unlike inertialization, which adds a decaying offset to the new animation, dead blending never asks
the new animation to carry the old pose's difference: it fades between two plausible poses (the old
one coasting to rest and the new one), so a large offset cannot overshoot or spin, while position and
velocity stay continuous at the switch:

- extrapolation, per joint, from the shown position x0, velocity v0, rotation q0 and angular velocity
  w0: x(t) = x0 + v0 (1 - e^(-l t)) / l, q(t) = exp(w0 (1 - e^(-l t)) / l) q0, velocities decaying as
  e^(-l t), with l = ln 2 / decay_halflife (the velocity halves every decay_halflife); joint 0, the
  root motion in the runtime's convention (pose held, velocities integrated by the caller), only
  cross-fades its velocities: the character coasts, it does not brake;
- blend weight a(t) = smoothstep(t / blend_time) (zero slope at both ends: no velocity jump when the
  blend starts or ends); output = lerp / slerp(extrapolation, new animation, a).

The runtime keeps inertialization's contract: the blend is written as offsets from the new animation
(off = (1 - a) (extrapolation - new), and their velocities), so `apply_offsets` shows it and a
following transition starts from what is on screen (inertialization.apply_offsets shows the offsets). The per-joint start state lives in the offset
parameter rows (positions: x0, v0; rotations: q0, w0). Angular velocities follow springs.py
(q' = 1/2 w q, rotation vectors per second); conventions: metres, seconds, quaternions (w, x, y, z).
"""
from __future__ import annotations

import math

import numba

from ..maths.scalar_quat import qexp, qlog, qmul, qrot
from ..maths.springs import LN2


@numba.njit(cache=True)
def dead_blend_setup(shown_p, shown_v, shown_r, shown_w, pos_params, rot_params):
    """Store the start state from the pose on screen (inertialization.apply_offsets of the running
    offsets to the source animation's pose), per joint: pos_params[j] = (x0, v0), rot_params[j] = (q0, w0)."""
    for j in range(shown_p.shape[0]):
        for k in range(3):
            pos_params[j, k] = shown_p[j, k]
            pos_params[j, 3 + k] = shown_v[j, k]
            rot_params[j, 4 + k] = shown_w[j, k]
        for k in range(4):
            rot_params[j, k] = shown_r[j, k]


@numba.njit(cache=True, inline="always")
def blend_weight(t, blend_time):
    """(a, da/dt): smoothstep of t / blend_time, 0 at the switch and 1 from blend_time on."""
    if t >= blend_time:
        return 1.0, 0.0
    u = max(t, 0.0) / blend_time
    return u * u * (3.0 - 2.0 * u), 6.0 * u * (1.0 - u) / blend_time


@numba.njit(cache=True)
def dead_blend_offsets(pos_params, rot_params, t, decay_halflife, blend_time, dst, off):
    """The blend t seconds after the switch as offsets from the new animation's pose dst = (positions,
    velocities, rotations, angular velocities) (J joints each) into off = (the same four offsets;
    apply_offsets shows them). All zero from blend_time on, and while no blend was set up (parameters
    all zero, as after a reset)."""
    dst_p, dst_v, dst_r, dst_w = dst
    off_p, off_v, off_r, off_w = off
    a, da = blend_weight(t, blend_time)
    J = dst_p.shape[0]
    idle = rot_params[0, 0] == 0.0 and rot_params[0, 1] == 0.0 and rot_params[0, 2] == 0.0 and rot_params[0, 3] == 0.0
    if a >= 1.0 or idle:
        for j in range(J):
            for k in range(3):
                off_p[j, k] = 0.0
                off_v[j, k] = 0.0
                off_r[j, k] = 0.0
                off_w[j, k] = 0.0
        return
    lam = LN2 / max(decay_halflife, 1e-4)
    decay = math.exp(-lam * t)
    coast = (1.0 - decay) / lam       # integral of e^(-l s) ds over [0, t]
    keep = 1.0 - a
    for j in range(J):
        # Joint 0 is the root motion, integrated from its velocity by the caller: its pose is held and its
        # velocities cross-fade at full strength (decaying them, or the fade's pull on the held pose,
        # slowed the character during every blend: 10 cm more trajectory error).
        root = j == 0
        e, travel, pull = (1.0, 0.0, 0.0) if root else (decay, coast, da)
        for k in range(3):
            x = pos_params[j, k] + pos_params[j, 3 + k] * travel
            d = x - dst_p[j, k]
            off_p[j, k] = keep * d
            off_v[j, k] = keep * (pos_params[j, 3 + k] * e - dst_v[j, k]) - pull * d
        w0x, w0y, w0z = rot_params[j, 4], rot_params[j, 5], rot_params[j, 6]
        ew, ex, ey, ez = qexp(w0x * travel, w0y * travel, w0z * travel)
        qw, qx, qy, qz = qmul(ew, ex, ey, ez, rot_params[j, 0], rot_params[j, 1], rot_params[j, 2], rot_params[j, 3])
        # Rotation from the new pose to the extrapolated one (short way), scaled down by the blend.
        nw, nx, ny, nz = qmul(qw, qx, qy, qz, dst_r[j, 0], -dst_r[j, 1], -dst_r[j, 2], -dst_r[j, 3])
        rx, ry, rz = qlog(nw, nx, ny, nz)
        off_r[j, 0], off_r[j, 1], off_r[j, 2] = keep * rx, keep * ry, keep * rz
        # Angular velocity offset: at a = 0 the output turns exactly at the extrapolated rate; the fade
        # toward the new pose adds -da * r (the approximation inertialization makes too).
        sw, sx, sy, sz = qexp(off_r[j, 0], off_r[j, 1], off_r[j, 2])
        dx, dy, dz = qrot(sw, sx, sy, sz, dst_w[j, 0], dst_w[j, 1], dst_w[j, 2])
        off_w[j, 0] = keep * (w0x * e - dx) - pull * rx
        off_w[j, 1] = keep * (w0y * e - dy) - pull * ry
        off_w[j, 2] = keep * (w0z * e - dz) - pull * rz

