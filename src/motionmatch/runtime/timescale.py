"""Timescale by predicted error (seed 003, "Procedural Touchups: timescale the animation according to
error ratio"): the play rate (and the stride scale) follow the ratio between how far the character is
asked to go and how far the playing animation will go over the same horizon.

The default play-rate warping (warping.speed_update fed by clip_speeds) compares speeds now: the
simulation's and the clip's, averaged over half a second. Here both sides are predictions over the
schema's nearest future trajectory point (20 frames, 0.33 s, by default): the desired side is the
controller's closed-form prediction (constant goals), the animation side is how far the playing clip
travels along its path in that time. (Over the furthest point, 1 s, a clip's coming slow-down, which
the next search skips anyway, pushed the rate to its bound and the root 7 cm from the simulation.) A request that is about to slow down,
or a clip that is about to stop, changes the rate before the speeds do. The ratio goes through the
same bounds, rate/stride split and smoothing as speed warping (`WarpSettings.rate_min` .. `rate_max`,
`stride_min` .. `stride_max`, `speed_halflife`).

Conventions: metres, seconds; Y up; the plane is x, z.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from . import settings as S
from .controller import AX, AZ, GOAL_VX, GOAL_VZ, HALFLIFE, PX, PZ, VX, VZ
from ..maths.springs import character_spring
from .warping import FIXED_RATE, speed_update

SAMPLES = 6          # points of the predicted speed average (the springs are smooth: 6 are within 1 %)


def horizon_frames(schema) -> int:
    """The schema's nearest future trajectory_position offset (frames; 0 without one)."""
    return min((o for c in schema.channels if c.kind == "trajectory_position" for o in c.offsets if o > 0), default=0)


def future_speeds(root_velocities: np.ndarray, range_stops: np.ndarray, horizon: int, fps: float
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(speeds (N,) float32 m/s, horizons (N,) float32 s): the distance each frame's clip travels along
    its path over the next `horizon` frames (or what is left of the clip), over that time: the
    animation's predicted average speed. root_velocities (N, 3): the simulation bone's, m/s (only
    the x-z norm is used). Zero speed and horizon on a clip's last frame."""
    v = np.asarray(root_velocities, dtype=np.float64)
    speed = np.hypot(v[:, 0], v[:, 2])
    n = len(speed)
    stops = np.asarray(range_stops, dtype=np.int64)
    stop_of = np.repeat(stops, np.diff(np.concatenate([[0], stops])))
    idx = np.arange(n)
    ahead = np.clip(stop_of - 1 - idx, 0, max(int(horizon), 0))
    # Path length from frame f over `ahead` frames: the speeds of frames f .. f + ahead - 1, each 1/fps long.
    c = np.concatenate([[0.0], np.cumsum(speed)])
    dist = (c[idx + ahead] - c[idx]) / fps
    horizons = ahead / float(fps)
    speeds = np.where(ahead > 0, dist / np.maximum(horizons, 1e-9), 0.0)
    return speeds.astype(np.float32), horizons.astype(np.float32)


@numba.njit(cache=True)
def desired_future_speed(ctrl, i, horizon):
    """The simulation's predicted average speed (m/s) over the next `horizon` seconds under constant
    goals (the controller's closed-form springs), by the midpoint rule on SAMPLES points."""
    hl = ctrl[i, HALFLIFE]
    total = 0.0
    for k in range(SAMPLES):
        t = (k + 0.5) * horizon / SAMPLES
        vx = character_spring(ctrl[i, PX], ctrl[i, VX], ctrl[i, AX], ctrl[i, GOAL_VX], hl, t)[1]
        vz = character_spring(ctrl[i, PZ], ctrl[i, VZ], ctrl[i, AZ], ctrl[i, GOAL_VZ], hl, t)[1]
        total += math.hypot(vx, vz)
    return total / SAMPLES


@numba.njit(cache=True)
def timescale_stage(dt, ctrl, wt, settings, frame, speeds, horizons, rate, stride):
    """Play rate and stride scale of every character whose settings ask for timescale by predicted
    error (the playback stage keeps them); the others are left to the playback stage. speeds, horizons:
    future_speeds of the database."""
    for i in range(frame.shape[0]):
        s = settings[i]
        if s[S.W_TIMESCALE] == 0.0:
            continue
        # A rate the matcher fixed (playback_agent applies it) leaves the ratio to the stride.
        play_rate, strides = s[S.W_PLAY_RATE] != 0.0 and wt[i, FIXED_RATE] <= 0.0, s[S.W_STRIDE] != 0.0
        h = float(horizons[frame[i]])
        desired = desired_future_speed(ctrl, i, h) if h > 0.0 else 0.0
        r, k = speed_update(wt, i, desired, desired, float(speeds[frame[i]]), dt, play_rate,
                            (s[S.W_RATE_MIN], s[S.W_RATE_MAX], s[S.W_RATE_SHARE]), strides,
                            (s[S.W_STRIDE_MIN], s[S.W_STRIDE_MAX]), s[S.W_SPEED_HALFLIFE])
        rate[i] = r if play_rate else 1.0
        stride[i] = k if strides else 1.0
