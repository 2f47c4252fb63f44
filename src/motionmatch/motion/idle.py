"""Idle figures of a run: for every stretch where the move stick rests (no velocity goal, the facing goal
unchanged) for REST_S seconds or more, how long the character takes to stand (settle), how alive it
stands (head and hands moving against the hips) and whether its standing pose plays in a short loop.

Positions in metres (Y up), velocities in m/s; outputs in the units their keys name.
"""
from __future__ import annotations

import numpy as np

from .posture import POSTURE_ROLES

REST_S = 4.0              # s: shorter rests are not idle
SETTLE_SPEED = 0.1        # m/s: settled once the root stays below this for the rest of the stretch
LOOP_TOLERANCE = 0.001    # m: a pose "repeats" when every posture joint is back within this
MAX_LOOP_S = 10.0         # s: longest period looked for
_REST_SPEED = 1e-3        # m/s of velocity goal that counts as none
_REST_TURN = 1e-6         # rad per frame of facing goal that counts as none
_HIPS = POSTURE_ROLES.index("hips")
_ALIVE = [POSTURE_ROLES.index(r) for r in ("head", "left_hand", "right_hand")]


def rest_stretches(desired_vel: np.ndarray, desired_yaw: np.ndarray, fps: float,
                   min_s: float = REST_S) -> list[tuple[int, int]]:
    """Frame ranges [a, b) of at least `min_s` seconds where the velocity goal (F, 3) is zero and the
    facing goal (F,) radians does not turn."""
    turn = np.abs(np.remainder(np.diff(desired_yaw, prepend=desired_yaw[:1]) + np.pi, 2 * np.pi) - np.pi)
    rest = (np.linalg.norm(desired_vel[:, [0, 2]], axis=1) < _REST_SPEED) & (turn < _REST_TURN)
    edges = np.flatnonzero(np.diff(np.r_[0, rest.astype(np.int8), 0]))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2]) if b - a >= min_s * fps]


def shortest_loop_frames(pose: np.ndarray, max_lag: int, tol: float = LOOP_TOLERANCE) -> int | None:
    """The shortest lag L (frames, up to max_lag and half the frames) at which the poses (T, K, 3) repeat:
    for L consecutive frames t, the pose at t + L is within `tol` of the pose at t (every joint) while
    between them it went further than `tol` away (a pose that merely holds still does not loop). None
    when no lag does."""
    T = len(pose)
    excursion = np.zeros(T)          # per t: max over s < L of the distance from pose t to pose t + s
    for L in range(1, min(max_lag, T // 2) + 1):
        d = np.linalg.norm(pose[L:] - pose[:-L], axis=2).max(axis=1)
        rep = (d < tol) & (excursion[:T - L] > tol)
        if rep.sum() >= L and _longest_run(rep) >= L:
            return L
        np.maximum(excursion[:T - L], d, out=excursion[:T - L])
    return None


def _longest_run(mask: np.ndarray) -> int:
    edges = np.flatnonzero(np.diff(np.r_[0, mask.astype(np.int8), 0]))
    return int((edges[1::2] - edges[::2]).max()) if len(edges) else 0


def idle_figures(desired_vel: np.ndarray, desired_yaw: np.ndarray, root_vel: np.ndarray, root_pos: np.ndarray,
                 posture: np.ndarray, fps: float) -> list[dict]:
    """The `idle` list of metrics.json, one entry per rest stretch (rest_stretches): "settle_s", seconds
    from the stick's release until the root's horizontal speed stays below SETTLE_SPEED; "alive_cm_s",
    the RMS speed (cm/s) of head and hands relative to the hips after settling; "shortest_loop_s", the
    shortest period (s) at which the pose (posture joints relative to the root, (F, K, 3) posture
    positions of POSTURE_ROLES) repeats within 1 mm after settling, or None. alive_cm_s and
    shortest_loop_s are None when the stretch ends less than REST_S / 2 after settling."""
    out = []
    for a, b in rest_stretches(desired_vel, desired_yaw, fps):
        moving = np.flatnonzero(np.linalg.norm(root_vel[a:b, [0, 2]], axis=1) >= SETTLE_SPEED)
        s = a + (int(moving[-1]) + 1 if len(moving) else 0)
        entry = {"settle_s": round((s - a) / fps, 3), "alive_cm_s": None, "shortest_loop_s": None}
        if b - s >= REST_S / 2 * fps:
            rel = posture[s:b, _ALIVE] - posture[s:b, _HIPS][:, None]
            speed = np.linalg.norm(np.diff(rel, axis=0), axis=2) * fps
            entry["alive_cm_s"] = round(float(np.sqrt(np.mean(speed ** 2))) * 100.0, 3)
            loop = shortest_loop_frames(posture[s:b] - root_pos[s:b, None], int(MAX_LOOP_S * fps))
            entry["shortest_loop_s"] = None if loop is None else round(loop / fps, 3)
        out.append(entry)
    return out
