"""Device poses arriving one at a time (a headset streaming to the app over WebXR): resampled to the
stream rate as they come, and a VRDriver that consumes them instead of a recorded stream.

Times in seconds (any origin, increasing), metres, quaternions (w, x, y, z), Y up; device frames as in
trackers.py (+Z forward, +Y up), devices in trackers.DEVICES order.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from ..maths.rotations import quat_abs, quat_normalize, quat_slerp
from .driver import VRDriver, VRDriverSettings, driver_start
from .orientation import OrientationNetwork
from .trackers import DEVICES, STREAM_FPS, TrackerFileError

# A longer silence (tracking lost, page hidden) restarts the stream instead of interpolating across it:
# the velocities of one interpolated second would be meaningless.
MAX_GAP_S = 0.5
# A clock that runs backward by more than this is a new stream (a reloaded page, a restarted tracker
# app): restart instead of refusing every later message. Smaller steps back are refused.
RESTART_BACKWARD_S = 2.0
# Time stamps beyond this (s; Unix time in seconds fits until 2286) are refused: at 1e300 adding a
# frame's 1/60 s changes nothing and resampling would never reach the next sample.
MAX_TIME_S = 1e10
# Samples a paused character lets pile up before the oldest are dropped (one second at 60 fps).
MAX_PENDING = 60
# Without new samples for this long the devices count as still (their poses held, as a lost device's
# are): the body comes to rest instead of walking on. Shorter silences are network jitter.
HOLD_AFTER_S = 0.1


class LiveTrackerFeed:
    """Device poses pushed with their time stamps, resampled to `fps` as they arrive (linear positions,
    slerp rotations: what read_trackers does to a file). A device reported lost (None) holds its last
    pose. Samples wait in `pending` as (positions (3, 3), rotations (3, 4), fresh) where fresh marks the
    first sample after the start or a gap longer than MAX_GAP_S."""

    def __init__(self, fps: float = STREAM_FPS):
        self.fps = fps
        self.t: float | None = None          # time of the last pose pushed
        self.positions: np.ndarray | None = None
        self.rotations: np.ndarray | None = None
        self.next_t = 0.0                    # time of the next resampled frame
        self.pending: deque = deque(maxlen=MAX_PENDING)
        self.received = 0

    def push(self, t: float, positions, rotations) -> None:
        """Add the poses of time t: positions / rotations are per device (3,) / (4,) or None (lost).
        Raises TrackerFileError naming the field (`t`, or a device lost before its first pose)."""
        if not -MAX_TIME_S <= t <= MAX_TIME_S:
            raise TrackerFileError(f"t: expected seconds within +-{MAX_TIME_S:g}, got {t:g}")
        if self.t is not None and self.t - t > RESTART_BACKWARD_S:
            self.t = None                    # a new clock: its first sample starts afresh
        if self.t is not None and not t > self.t:
            raise TrackerFileError(f"t: times must increase ({self.t:g} then {t:g})")
        pos, rot = np.zeros((3, 3)), np.zeros((3, 4))
        for d, name in enumerate(DEVICES):
            if positions[d] is None:
                if self.positions is None:
                    raise TrackerFileError(f"{name}: null (lost) before its first tracked pose")
                pos[d], rot[d] = self.positions[d], self.rotations[d]
            else:
                pos[d], rot[d] = positions[d], quat_normalize(np.asarray(rotations[d], np.float64))
        if self.t is None or t - self.t > MAX_GAP_S:
            self.pending.append((pos, quat_abs(rot), True))
            self.next_t = t + 1.0 / self.fps
        else:
            while self.next_t <= t + 1e-9:
                a = (self.next_t - self.t) / (t - self.t)
                self.pending.append((self.positions + a * (pos - self.positions),
                                     quat_abs(quat_slerp(self.rotations, rot, a)), False))
                self.next_t += 1.0 / self.fps
        self.t, self.positions, self.rotations = t, pos, rot
        self.received += 1


class LiveVRDriver(VRDriver):
    """A VRDriver over a LiveTrackerFeed: every step consumes the samples that arrived since the last
    one (whatever the character's clock says), so the body lags the devices by under a frame plus the
    network's latency. Needs a feed with at least one pending sample."""

    def __init__(self, feed: LiveTrackerFeed, network: OrientationNetwork, settings: VRDriverSettings | None = None):
        if not feed.pending:
            raise ValueError("a live VR driver needs at least one tracker sample")
        self.stream, self.feed, self.network = None, feed, network
        self.settings = settings or VRDriverSettings()
        pos, rot, _ = feed.pending.popleft()
        self.start(pos, rot)
        self.silent = 0.0       # seconds without a new sample

    def step(self, controller, t: float, dt: float) -> None:
        self.silent = 0.0 if self.feed.pending else self.silent + dt
        while self.feed.pending:
            pos, rot, fresh = self.feed.pending.popleft()
            if fresh:       # after a gap: the springs start again (the calibration stays)
                self.state = driver_start(pos, rot)
                self.index += 1
            else:
                self.consume(pos, rot, 1.0 / self.feed.fps)
        if self.silent > HOLD_AFTER_S:
            self.consume(self.state.positions, self.state.rotations, dt)
        self.steer(controller, dt)
