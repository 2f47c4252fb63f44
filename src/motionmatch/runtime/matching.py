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
from .warping import FIXED_RATE, OrientationLimits, orientation_plan, orientation_query_rotations, query_scale

# Search state: one row per character. HOLD_LEFT: seconds left of the idle hold playing (0: none).
TIMER, FORCE, HAS_LAST, LAST_VX, LAST_VZ, LAST_YAW, HOLD_LEFT = range(7)
SEARCH_COLUMNS = 7


class Desired(NamedTuple):
    """The desired trajectories of n characters and where the query takes them."""

    pos: np.ndarray            # (n, K, 3) world positions at `times`, m
    rot: np.ndarray            # (n, K, 4) world facing rotations at `times`
    times: np.ndarray          # (K,) seconds ahead
    layout: np.ndarray         # (D, 3) int64 trajectory_layout: (feature column, point, component)


# Idle hold: a frame is still when its root moves slower than this (m/s) and turns slower than this (rad/s).
STILL_SPEED = 0.15
STILL_TURN = 0.35
# A held still stretch is left this long (s) before it starts to move: the next search still finds
# the whole of its playing pose's own stillness ahead.
STILL_MARGIN_S = 0.25


def still_stretch_ends(root_velocities: np.ndarray, root_angular_velocities: np.ndarray, range_stops: np.ndarray,
                       fps: float) -> np.ndarray:
    """(N,) int64: per database frame, the frame until which an idle character keeps playing its clip
    (plan_agent's idle hold): STILL_MARGIN_S before the clip's root next moves or turns (STILL_SPEED,
    STILL_TURN) or its clip ends; at or before the frame itself when the frame is not still.
    root_velocities, root_angular_velocities (N, 3): the simulation bone's, m/s and rad/s."""
    v, w = np.asarray(root_velocities), np.asarray(root_angular_velocities)
    still = (np.hypot(v[:, 0], v[:, 2]) < STILL_SPEED) & (np.abs(w[:, 1]) < STILL_TURN)
    n = len(still)
    stops = np.asarray(range_stops, dtype=np.int64)
    stop_of = np.repeat(stops, np.diff(np.concatenate([[0], stops])))
    # The next frame at or after f that moves (or the clip's stop), scanning backwards.
    nxt = np.empty(n, dtype=np.int64)
    after = n
    for f in range(n - 1, -1, -1):
        if f + 1 == stop_of[f] or not still[f]:
            after = f if not still[f] else stop_of[f]
        nxt[f] = after
    return nxt - int(round(STILL_MARGIN_S * fps))


# ... and only where the actor stands alive: head and hands move at least this fast against the hips (RMS, cm/s)
# over the still stretch ahead. The takes open with the actor standing before the first step at 0.7-0.9 cm/s
# (take1 frames 0-105, take2 0-120: nearly frozen); the other still stretches move 5.8-6.6 cm/s.
IDLE_MIN_ALIVE_CM_S = 2.0
ALIVE_ROLES = ("head", "left_hand", "right_hand")


def lively_holds(db, holdable: np.ndarray, still_to: np.ndarray) -> np.ndarray:
    """(N,) bool: the `holdable` frames whose still stretch ahead (to still_to[frame]) moves the head and hands
    against the hips by IDLE_MIN_ALIVE_CM_S or more (RMS speed); `holdable` itself when the skeleton lacks
    those roles or no stretch is that alive."""
    roles = db.roles
    if not all(r in roles for r in (*ALIVE_ROLES, "hips")) or not holdable.any():
        return holdable
    out = np.zeros_like(holdable)
    idx = np.flatnonzero(holdable)
    joints = [roles[r] for r in ALIVE_ROLES]
    for run in np.split(idx, np.flatnonzero(np.diff(idx) > 1) + 1):
        a, b = int(run[0]), int(still_to[run].max())
        gp = db.global_transforms(slice(a, b + 1))[0]
        rel = gp[:, joints] - gp[:, [roles["hips"]]]
        sq = (np.linalg.norm(np.diff(rel, axis=0), axis=2) ** 2).mean(axis=1) * (db.fps * 100.0) ** 2
        tail = np.concatenate([np.cumsum(sq[::-1])[::-1], [0.0]])      # tail[k]: sum of sq[k:]
        for f in run:
            k, e = int(f) - a, int(still_to[f]) - a
            out[f] = e > k and (tail[k] - tail[e]) / (e - k) >= IDLE_MIN_ALIVE_CM_S ** 2
    return out if out.any() else holdable


# While idle a search may not land this close (s) to the playing frame: it would replay the still stretch
# just shown (the takes' stretches last 0.9-2.3 s; replaying one looped a 0.8 s pose cycle).
IDLE_NO_REWIND_S = 2.5
# ... and lands only where at least this much (s) of still stretch is left to hold.
IDLE_MIN_HOLD_S = 1.0
# An idle hold lasts at least IDLE_HOLD_S: a shorter still stretch plays slower, down to IDLE_RATE_MIN
# (the jlpm22 takes stand still in stretches of 1.15-2.05 s; played as captured, the search moved on
# every 1-2 s, more than one transition per 2 s of rest). Half speed still breathes and shifts weight.
IDLE_HOLD_S = 2.0
IDLE_RATE_MIN = 0.5


@numba.njit(cache=True)
def idle_hold_rate(search, i, ahead_frames, dt):
    """Play rate (frames per tick) of character i's idle hold with `ahead_frames` of still stretch left:
    a hold starting now is given max(stretch, min(IDLE_HOLD_S, stretch / IDLE_RATE_MIN)) seconds
    (search[i, HOLD_LEFT]); the rate spreads what is left of the stretch over what is left of that time."""
    ahead_s = ahead_frames * dt
    if search[i, HOLD_LEFT] <= 0.0:
        search[i, HOLD_LEFT] = max(ahead_s, min(IDLE_HOLD_S, ahead_s / IDLE_RATE_MIN))
    rate = min(1.0, max(IDLE_RATE_MIN, ahead_s / search[i, HOLD_LEFT]))
    search[i, HOLD_LEFT] = max(search[i, HOLD_LEFT] - dt, dt)
    return rate


@numba.njit(cache=True)
def resting(ctrl, agents):
    """(len(agents),) bool: the stick rests (no velocity goal) and the simulation stands (plan_agent's
    idle hold condition). ctrl: the controller table; agents: int64 rows."""
    out = np.empty(agents.shape[0], dtype=np.bool_)
    for a in range(agents.shape[0]):
        i = agents[a]
        out[a] = (math.hypot(ctrl[i, GOAL_VX], ctrl[i, GOAL_VZ]) < 1e-3
                  and math.hypot(ctrl[i, VX], ctrl[i, VZ]) < STILL_SPEED)
    return out


@numba.njit(cache=True)
def plan_agent(i, dt, ctrl, wt, search, settings, frame, stop_of, clip_hold, still_to, out_search):
    """Orientation-warp plan and the search decision of character i (out_search[i] = 1 to search).
    A character with clip_hold[i] set (play_clip) does not search until its clip is about to end.
    Idle hold: with the stick at rest and the character standing, a character playing a still stretch
    keeps playing it until `still_to[frame]` (still_stretch_ends) instead of searching on its timer,
    so it breathes and shifts its weight as the actor did rather than hopping between similar poses
    (a sharp input change or a forced search still searches), slowed to last IDLE_HOLD_S (idle_hold_rate).
    A held clip plays as captured (rate 1: the debug player steps a frame per tick, an action keeps its
    timing); both fix wt[i, FIXED_RATE] for the playback stage."""
    s = settings[i]
    if clip_hold[i]:
        if frame[i] + 1 < stop_of[frame[i]] - 1:
            wt[i, FIXED_RATE] = 1.0
            out_search[i] = 0
            return
        clip_hold[i] = False
        search[i, FORCE] = 1.0
    wt[i, FIXED_RATE] = 0.0
    if s[S.W_ORIENTATION] != 0.0:
        orientation_plan(wt, i, ctrl[i, GOAL_YAW], ctrl[i, GOAL_VX], ctrl[i, GOAL_VZ], ctrl[i, YAW], ctrl[i, VX],
                         ctrl[i, VZ], True, OrientationLimits(s[S.W_LIMIT], s[S.W_BACKWARD_ANGLE], s[S.W_MIN_TRAVEL],
                                                              s[S.W_SIDE_ANGLE], s[S.W_SIDE_BACKWARD]))
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
    if (search[i, FORCE] == 0.0 and not sharp and frame[i] < still_to[frame[i]]
            and math.hypot(gx, gz) < 1e-3 and math.hypot(ctrl[i, VX], ctrl[i, VZ]) < STILL_SPEED):
        wt[i, FIXED_RATE] = idle_hold_rate(search, i, still_to[frame[i]] - frame[i], dt)
        out_search[i] = 0
        return
    search[i, HOLD_LEFT] = 0.0
    if force or sharp:
        search[i, HAS_LAST] = 1.0
        search[i, LAST_VX], search[i, LAST_VZ], search[i, LAST_YAW] = gx, gz, gyaw
        out_search[i] = 1
    else:
        out_search[i] = 1 if frame[i] + 1 >= stop_of[frame[i]] - 1 else 0   # about to run out of clip


@numba.njit(cache=True, parallel=True)
def plan_stage(dt, ctrl, wt, search, settings, frame, stop_of, clip_hold, still_to, out_search):
    """plan_agent for every character, in parallel; returns how many search."""
    for i in numba.prange(frame.shape[0]):
        plan_agent(i, dt, ctrl, wt, search, settings, frame, stop_of, clip_hold, still_to, out_search)
    return np.count_nonzero(out_search)


@numba.njit(cache=True)
def plan_serial(dt, ctrl, wt, search, settings, frame, stop_of, clip_hold, still_to, out_search):
    """plan_agent for every character on the calling thread (small crowds: no thread hand-off); returns how
    many search."""
    searching = 0
    for i in range(frame.shape[0]):
        plan_agent(i, dt, ctrl, wt, search, settings, frame, stop_of, clip_hold, still_to, out_search)
        searching += out_search[i] != 0
    return searching


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
        # Strafing: ask for motion facing the travel direction (or side-steps, or a backward walk); the pose
        # warp turns it back.
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
