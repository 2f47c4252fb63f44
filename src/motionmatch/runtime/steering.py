"""The steering stage of the tick: controllers whose velocity goal heads into a static obstacle
(world/obstacles.py) take the nearest clear direction instead, so the simulation, and with it the predicted
trajectory the search matches, bends around what is ahead (docs/OBSTACLES.md).

The stage runs after the goals are set (gamepad, driver): a steered row is put back to its state before
the tick, given the steered goal (and the facing of it, unless strafing held another facing) and
advanced again, so the tick moves the simulation exactly as if the input had asked for the steered
velocity. Only crowds with obstacles run it. Conventions: metres, seconds, radians; yaw 0 faces +Z.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from ..world.obstacles import STEER_LOOKAHEAD_S, STEER_MIN_LOOKAHEAD, STEER_RADIUS, steer
from .controller import GOAL_VX, GOAL_VZ, GOAL_YAW, PX, PZ, advance_state, wrap_angle


@numba.njit(cache=True)
def steer_stage(ctrl, before, agents, obs, radius, lookahead_s, min_lookahead, dt, rot_halflife, gait_halflife,
                steered):
    """Steer the goals of the controller rows `agents` (int64) of ctrl around obs; before: the rows'
    state before this tick's advance (a copy of ctrl). steered (n,) bool: set for the rows whose goal
    changed."""
    for a in range(agents.shape[0]):
        i = agents[a]
        wx, wz = ctrl[i, GOAL_VX], ctrl[i, GOAL_VZ]
        vx, vz = steer(obs, ctrl[i, PX], ctrl[i, PZ], wx, wz, radius, lookahead_s, min_lookahead)
        if vx == wx and vz == wz:
            steered[i] = False
            continue
        steered[i] = True
        # Not strafing, the facing goal is the velocity's direction; it turns with it.
        follows = abs(wrap_angle(ctrl[i, GOAL_YAW] - math.atan2(wx, wz))) < 1e-6
        goals = ctrl[i, GOAL_VX:].copy()
        ctrl[i, :] = before[i, :]
        ctrl[i, GOAL_VX:] = goals
        ctrl[i, GOAL_VX], ctrl[i, GOAL_VZ] = vx, vz
        if follows:
            ctrl[i, GOAL_YAW] = math.atan2(vx, vz)
        advance_state(ctrl, i, dt, rot_halflife, gait_halflife)


def steer_controllers(ctrl: np.ndarray, before: np.ndarray, agents, obstacles, dt: float, rot_halflife: float,
                      gait_halflife: float, steered: np.ndarray, radius: float = STEER_RADIUS) -> np.ndarray:
    """steer_stage over `agents` with the module's lookahead; returns `steered` (n,) bool."""
    steer_stage(ctrl, before, np.ascontiguousarray(agents, dtype=np.int64), obstacles, float(radius),
                STEER_LOOKAHEAD_S, STEER_MIN_LOOKAHEAD, float(dt), float(rot_halflife), float(gait_halflife), steered)
    return steered
