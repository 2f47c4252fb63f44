"""Spine pitch bending on slopes (seed 003, "Spine Pitch Bending: keep whole upper body in sync"): on
terrain the upper body leans with the ground's slope along the character's facing, forward uphill and
back downhill, so a flat-ground walk looks like it climbs.

The slope is read from the same ground the root rides on (the heights under the character, a metre
either side along its facing) and smoothed with the same halflife as the root's height, so the lean
and the root move together. The lean is `share` of the slope angle, at most `max_angle`, given to the
spine chain (spine .. chest) in equal parts, each a turn about the world axis across the facing; the
arms and head follow as children. The legs are untouched (the leg IK places them on the ground).

Conventions: radians, metres, seconds; Y up; yaw 0 faces +Z; quaternions (w, x, y, z).
"""
from __future__ import annotations

import math

import numba

from ..maths.scalar_quat import qmul
from ..maths.springs import spring_exact
from ..world.terrain import height_at

REACH = 1.0        # m either side of the root along the facing: the slope under a step or two


@numba.njit(cache=True)
def facing_slope(heights, ox, oz, cell, x, z, yaw):
    """Slope angle (radians) of the ground at x, z along the facing `yaw`: positive uphill."""
    fx, fz = math.sin(yaw), math.cos(yaw)
    up = height_at(heights, ox, oz, cell, x + REACH * fx, z + REACH * fz)
    down = height_at(heights, ox, oz, cell, x - REACH * fx, z - REACH * fz)
    return math.atan2(up - down, 2.0 * REACH)


@numba.njit(cache=True)
def smoothed_lean(state, target, halflife, dt):
    """Spring the lean state (angle, rate) (2,) toward target over dt; returns the angle."""
    if dt > 0.0:
        state[0], state[1] = spring_exact(state[0], state[1], target, halflife, dt)
    return state[0]


@numba.njit(cache=True)
def bend_spine(lr, gr, parents, chain, yaw, angle):
    """Pitch the spine chain (parent first, contiguous) forward by `angle` (radians; negative leans
    back) about the world axis across the facing `yaw`, in equal shares, in the local rotations lr
    (J, 4) in place. gr (J, 4): world rotations before the bend (read for the chain's parent)."""
    n = chain.shape[0]
    if n == 0 or angle == 0.0:
        return
    # Forward along +Z turned by yaw; leaning forward turns the up axis toward it: about right = up x fwd.
    ax, az = math.cos(yaw), -math.sin(yaw)
    h = 0.5 * angle / n
    s = math.sin(h)
    rw, rx, ry, rz = math.cos(h), s * ax, 0.0, s * az
    p = parents[chain[0]]
    gw, gx, gy, gz = gr[p, 0], gr[p, 1], gr[p, 2], gr[p, 3]
    for c in range(n):
        j = chain[c]
        # The share about the world axis, moved into the parent's frame: inv(g) * r * g.
        tw, tx, ty, tz = qmul(rw, rx, ry, rz, gw, gx, gy, gz)
        lw_, lx_, ly_, lz_ = qmul(gw, -gx, -gy, -gz, tw, tx, ty, tz)
        nw, nx, ny, nz = qmul(lw_, lx_, ly_, lz_, lr[j, 0], lr[j, 1], lr[j, 2], lr[j, 3])
        inv = 1.0 / math.sqrt(nw * nw + nx * nx + ny * ny + nz * nz)
        lr[j, 0], lr[j, 1], lr[j, 2], lr[j, 3] = nw * inv, nx * inv, ny * inv, nz * inv
        gw, gx, gy, gz = qmul(gw, gx, gy, gz, lr[j, 0], lr[j, 1], lr[j, 2], lr[j, 3])
