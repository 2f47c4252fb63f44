"""Motion matching decisions for every character: when to search (the character's own 0.1 s phase,
sharp input changes, the clip running out), the query (the playing frame's pose features and the
desired trajectory relative to the character root) and which search results become transitions.

The tick's queries go to the search back-end as one batch per (weights, tag filter) group; see
runtime/crowd.py. Conventions: metres, seconds, radians; Y up; yaw 0 faces +Z; quaternions (w, x, y, z).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np

from . import settings as S
from .controller import GOAL_VX, GOAL_VZ, GOAL_YAW, PX, PZ, VX, VZ, YAW, predict_state
from .playback import remainder_2pi
from .warping import orientation_plan, orientation_query_rotations, query_scale

# Search state: one row per character.
TIMER, FORCE, HAS_LAST, LAST_VX, LAST_VZ, LAST_YAW = range(6)
SEARCH_COLUMNS = 6


class Desired(NamedTuple):
    """The desired trajectories of n characters and where the query takes them."""

    pos: np.ndarray            # (n, K, 3) world positions at `times`, m
    rot: np.ndarray            # (n, K, 4) world facing rotations at `times`
    times: np.ndarray          # (K,) seconds ahead
    layout: np.ndarray         # (D, 3) int64 trajectory_layout: (feature column, point, component)


@numba.njit(cache=True)
def plan_agent(i, dt, ctrl, wt, search, settings, frame, stop_of, clip_hold, out_search):
    """Orientation-warp plan and the search decision of character i (out_search[i] = 1 to search).
    A character with clip_hold[i] set (play_clip) does not search until its clip is about to end."""
    s = settings[i]
    if clip_hold[i]:
        if frame[i] + 1 < stop_of[frame[i]] - 1:
            out_search[i] = 0
            return
        clip_hold[i] = False
        search[i, FORCE] = 1.0
    if s[S.W_ORIENTATION] != 0.0:
        orientation_plan(wt, i, ctrl[i, GOAL_YAW], ctrl[i, GOAL_VX], ctrl[i, GOAL_VZ], ctrl[i, YAW], ctrl[i, VX],
                         ctrl[i, VZ], True, s[S.W_LIMIT], s[S.W_BACKWARD_ANGLE], s[S.W_MIN_TRAVEL])
    search[i, TIMER] -= dt
    gx, gz, gyaw = ctrl[i, GOAL_VX], ctrl[i, GOAL_VZ], ctrl[i, GOAL_YAW]
    force = search[i, FORCE] != 0.0 or search[i, TIMER] <= 0.0
    sharp = False
    if search[i, HAS_LAST] != 0.0 and not force:
        dx, dz = gx - search[i, LAST_VX], gz - search[i, LAST_VZ]
        v = s[S.SHARP_SPEED]
        sharp = math.sqrt(dx * dx + dz * dz) > v
        if not sharp:
            dyaw = abs(remainder_2pi(gyaw - search[i, LAST_YAW]))
            sharp = math.degrees(dyaw) > s[S.SHARP_ANGLE_DEG]
    if force or sharp:
        search[i, HAS_LAST] = 1.0
        search[i, LAST_VX], search[i, LAST_VZ], search[i, LAST_YAW] = gx, gz, gyaw
        out_search[i] = 1
    else:
        out_search[i] = 1 if frame[i] + 1 >= stop_of[frame[i]] - 1 else 0   # about to run out of clip


@numba.njit(cache=True, parallel=True)
def plan_stage(dt, ctrl, wt, search, settings, frame, stop_of, clip_hold, out_search):
    """plan_agent for every character, in parallel."""
    for i in numba.prange(frame.shape[0]):
        plan_agent(i, dt, ctrl, wt, search, settings, frame, stop_of, clip_hold, out_search)


@numba.njit(cache=True)
def plan_serial(dt, ctrl, wt, search, settings, frame, stop_of, clip_hold, out_search):
    """plan_agent for every character on the calling thread (small crowds: no thread hand-off)."""
    for i in range(frame.shape[0]):
        plan_agent(i, dt, ctrl, wt, search, settings, frame, stop_of, clip_hold, out_search)


@numba.njit(cache=True)
def query_agent(a, agents, raw_features, frame, desired, ctrl, wt, settings, root, out):
    """Raw queries (len(agents), F) float64 of the searching characters.

    desired: Desired, the trajectory (world) and the layout of its feature columns (component 0/1 the
    position x/z and 2/3 the facing direction x/z, in the character root's frame); root:
    playback.Root. The other columns are the playing frame's pose features. This is row a of out, for
    agents[a]."""
    traj_pos, times, layout = desired.pos, desired.times, desired.layout
    root_pos, root_yaw = root.pos, root.yaw
    i = agents[a]
    s = settings[i]
    f = frame[i]
    for c in range(raw_features.shape[1]):
        out[a, c] = raw_features[f, c]
    ox, oz = ctrl[i, PX], ctrl[i, PZ]
    rot = desired.rot[i]
    if s[S.W_ORIENTATION] != 0.0:
        # Strafing: ask for motion facing the travel direction; the pose warp turns it back.
        orientation_query_rotations(wt, i, traj_pos[i], rot, ox, oz, times, s[S.W_LIMIT], s[S.W_MIN_TRAVEL])
    factor = 1.0
    if s[S.W_PLAY_RATE] != 0.0 or s[S.W_STRIDE] != 0.0:
        # Slow requests ask for the slowest well-covered speed; play rate and stride slow it down.
        factor = query_scale(math.hypot(ctrl[i, GOAL_VX], ctrl[i, GOAL_VZ]), s[S.W_QUERY_FLOOR],
                                s[S.W_PLAY_RATE] != 0.0, s[S.W_RATE_MIN], s[S.W_STRIDE] != 0.0, s[S.W_STRIDE_MIN])
    yaw = root_yaw[i]
    c, sn = math.cos(yaw), math.sin(yaw)
    rx, rz = root_pos[i, 0], root_pos[i, 2]
    for d in range(layout.shape[0]):
        col, k, comp = layout[d, 0], layout[d, 1], layout[d, 2]
        if comp < 2:
            px, pz = traj_pos[i, k, 0], traj_pos[i, k, 2]
            if factor != 1.0:
                px = ox + (px - ox) * factor
                pz = oz + (pz - oz) * factor
            dx, dz = px - rx, pz - rz
            out[a, col] = dx * c - dz * sn if comp == 0 else dx * sn + dz * c
        else:
            fy = 2.0 * math.atan2(rot[k, 2], rot[k, 0]) - yaw
            out[a, col] = math.sin(fy) if comp == 2 else math.cos(fy)


@numba.njit(cache=True, parallel=True)
def query_stage(agents, raw_features, frame, desired, ctrl, wt, settings, root, out):
    """Raw queries (len(agents), F) of the searching characters (query_agent), in parallel."""
    for a in numba.prange(agents.shape[0]):
        query_agent(a, agents, raw_features, frame, desired, ctrl, wt, settings, root, out)


@numba.njit(cache=True)
def query_serial(agents, raw_features, frame, desired, ctrl, wt, settings, root, out):
    """query_stage on the calling thread (a few searching characters: no thread hand-off)."""
    for a in range(agents.shape[0]):
        query_agent(a, agents, raw_features, frame, desired, ctrl, wt, settings, root, out)


@numba.njit(cache=True)
def predict_stage(agents, ctrl, offsets, fps, rot_halflife, traj_pos, traj_rot):
    """The controller's constant-goal prediction of each searching character, into traj_pos / traj_rot."""
    for a in range(agents.shape[0]):
        i = agents[a]
        predict_state(ctrl, i, offsets, fps, rot_halflife, traj_pos[i], traj_rot[i])


def trajectory_layout(schema, slices) -> tuple[np.ndarray, np.ndarray]:
    """(trajectory frame offsets (K,) sorted, layout (D, 3) int64) for query_stage from a feature schema.
    The offsets include trajectory_height channels' (their columns: trajectory_heights.height_layout)."""
    channels = [c for c in schema.channels if c.kind.startswith("trajectory")]
    offsets = sorted({o for c in channels for o in c.offsets})
    rows = []
    for c in channels:
        if c.kind == "trajectory_height":
            continue
        col = slices[c.name].start
        for o in c.offsets:
            base = 0 if c.kind == "trajectory_position" else 2
            for comp in (base, base + 1):
                rows.append((col, offsets.index(o), comp))
                col += 1
    return np.array(offsets, dtype=np.int64), np.array(rows, dtype=np.int64).reshape(-1, 3)
