"""Exact critically damped springs (closed forms) and the exponential damper, for trajectories, gaits,
inertialization and the touch-ups' smoothing.

Halflife convention (as in the reference code, seed 001): damping = 4 ln2 / halflife and the spring's
exponential rate is y = damping / 2 = 2 ln2 / halflife. A spring released from rest with offset x0
therefore sits at (1 + 2 ln2) / 4 ~ 0.60 x0 after one halflife, 0.5 x0 after ~1.21 halflife, and its
exponential envelope e^(-y t) halves every halflife / 2. Tuned values in the references (e.g. 0.27 s for
the simulation velocity) assume this convention.

The compiled scalar forms (half_damping, damper_factor, spring_exact, decay_exact, character_spring) are
what every runtime stage uses; simple_spring_damper_exact(_quat) work on numpy arrays that broadcast (the
VR driver's vectors and rotations). Angular velocities are rotation vectors per second in the
frame the quaternions are expressed in (q' = 1/2 w q), as log(q[t+1] q[t]^-1) / dt gives them.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from .rotations import (
                        quat_abs,
                        quat_from_scaled_angle_axis,
                        quat_mul,
                        quat_mul_inv,
                        quat_normalize,
                        quat_to_scaled_angle_axis,
                        )

LN2 = math.log(2.0)
# (1 + u) e^-u = 1/2: a spring released from rest halves when y t equals this.
HALF_DECAY_YT = 1.6783469900166608


@numba.njit(cache=True, error_model="numpy", inline="always")
def half_damping(halflife):
    """Half the damping (1/s) of a critically damped spring with the given halflife (s): the y of
    the closed forms below (halflife_to_damping(halflife) * 0.5, eps 1e-5)."""
    return (4.0 * LN2) / (halflife + 1e-5) * 0.5


@numba.njit(cache=True, error_model="numpy", inline="always")
def damper_factor(halflife, dt):
    """The share (0..1) of its distance to the goal an exponential damper (no velocity) closes in dt
    seconds: the distance halves every `halflife` seconds. damper(x, goal) = x + (goal - x) * this."""
    return 1.0 - 0.5 ** (dt / halflife)


@numba.njit(cache=True, error_model="numpy")
def spring_exact(x, v, goal, halflife, dt):
    """Critically damped spring pulling x (velocity v) to goal; (x, v) after dt seconds. The compiled
    scalar form every runtime stage uses (same arithmetic as simple_spring_damper_exact)."""
    y = half_damping(halflife)
    j0 = x - goal
    j1 = v + j0 * y
    e = math.exp(-y * dt)
    return e * (j0 + j1 * dt) + goal, e * (v - j1 * y * dt)


@numba.njit(cache=True, error_model="numpy")
def spring_moving_goal_exact(x, v, goal, goal_vel, halflife, dt):
    """spring_exact toward a goal moving at goal_vel (units per second): the offset from the goal
    decays as spring_exact's does, so a goal on a steady ramp is followed without the lag of a fixed
    goal (2 goal_vel / y behind it: 5 cm for a 0.15 s halflife walking up a 10 degree slope)."""
    y = half_damping(halflife)
    j0 = x - goal
    j1 = (v - goal_vel) + j0 * y
    e = math.exp(-y * dt)
    return e * (j0 + j1 * dt) + goal + goal_vel * dt, e * ((v - goal_vel) - j1 * y * dt) + goal_vel


@numba.njit(cache=True, error_model="numpy")
def decay_exact(x, v, y, dt):
    """Critically damped decay of an offset x (velocity v) to zero with half damping y (see
    half_damping); (x, v) after dt seconds."""
    j1 = v + x * y
    e = math.exp(-y * dt)
    return e * (x + j1 * dt), e * (v - j1 * y * dt)


@numba.njit(cache=True, error_model="numpy")
def character_spring(x, v, a, v_goal, halflife, dt):
    """Character spring on velocity: v tends to v_goal critically damped, x integrates it exactly;
    (x, v, a) after dt seconds (metres, m/s, m/s^2 or any consistent units)."""
    y = half_damping(halflife)
    e = math.exp(-y * dt)
    iy, iy2 = 1.0 / y, 1.0 / (y * y)
    j0 = v - v_goal
    j1 = a + j0 * y
    return (x + (e * (-j1 * iy2 - (j0 + j1 * dt) * iy) + j1 * iy2 + j0 * iy + v_goal * dt),
            e * (j0 + j1 * dt) + v_goal, e * (a - j1 * y * dt))


def halflife_to_damping(halflife, eps: float = 1e-5):
    """Damping (1/s) of a critically damped spring with the given halflife (s)."""
    return (4.0 * LN2) / (halflife + eps)


def _negexp(x):
    # math.exp is ~20x cheaper than np.exp on a Python float; arrays go through numpy.
    if type(x) is float:
        return math.exp(-x)
    return np.exp(-x)


def simple_spring_damper_exact(x, v, x_goal, halflife, dt):
    """Critically damped spring pulling x (velocity v) to x_goal; returns (x, v) after dt seconds."""
    y = halflife_to_damping(halflife) * 0.5
    j0 = x - x_goal
    j1 = v + j0 * y
    eydt = _negexp(y * dt)
    return eydt * (j0 + j1 * dt) + x_goal, eydt * (v - j1 * y * dt)


def simple_spring_damper_exact_quat(q, w, q_goal, halflife, dt):
    """Critically damped spring on rotations: q (..., 4) with angular velocity w (..., 3, rad/s)
    pulled toward q_goal. Returns (q, w) after dt seconds; the offset is taken the short way round."""
    y = halflife_to_damping(halflife) * 0.5
    j0 = quat_to_scaled_angle_axis(quat_abs(quat_mul_inv(q, q_goal)))
    j1 = w + j0 * y
    if not np.isscalar(dt):
        dt = np.asarray(dt, dtype=np.float64)[..., None]  # several times at once: (..., 1)
    eydt = _negexp(float(y * dt) if np.isscalar(dt) else y * dt)
    q_next = quat_mul(quat_from_scaled_angle_axis(eydt * (j0 + j1 * dt)), q_goal)
    return quat_normalize(q_next), eydt * (w - j1 * y * dt)
