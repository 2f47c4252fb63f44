"""Turning a live tracker stream into what the runtime character controller needs (seed 002, 4.2.1):
the spring-smoothed HMD floor velocity (the desired velocity), the spring-smoothed predicted body
facing (the desired facing), the trajectory built from them, the root target, and the database
choice by HMD height.

State is a structure of arrays (VRDriverState) updated by free functions, one frame at a time.
Metres, seconds, quaternions (w, x, y, z), Y up, yaw 0 faces +Z.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..maths.rotations import quat_from_yaw, quat_mul_inv, quat_to_scaled_angle_axis
from ..runtime.settings import CharacterSettings
from ..maths.springs import simple_spring_damper_exact, simple_spring_damper_exact_quat
from .orientation import OrientationNetwork, network_step, rotate_facing
from .trackers import features_from
from .upper_body import ROOT_ALPHA_LOOSE, clamp_root, hmd_floor_target

# Thesis trajectory samples: 20, 40 and 60 frames ahead at 60 fps.
TRAJECTORY_TIMES = np.array([20.0, 40.0, 60.0]) / 60.0


@dataclass
class VRDriverSettings:
    """velocity_halflife / facing_halflife (s): smoothing of the HMD velocity and of the predicted
    facing; alpha (m): root clamp radius (upper_body.ROOT_ALPHA_TIGHT or _LOOSE). At 0.2 s the
    character's facing lagged the body's by a quarter second on a held-out walk (orientation error
    22 degrees mean, 10 at 0.1 s).

    Database switching by HMD height (seed 002, 4.2.3): height_databases ((low, high, tag filter), ...)
    gives each range of HMD height / standing height the clips to search (a tag expression; None: the
    character's own filter), empty for one database; the standing height is the median HMD height
    over the stream's first calibration_seconds; the current range is kept until the ratio leaves it
    by more than height_hysteresis (no flicker at a threshold)."""

    velocity_halflife: float = 0.1
    facing_halflife: float = 0.1
    alpha: float = ROOT_ALPHA_LOOSE
    height_databases: tuple = ()
    calibration_seconds: float = 2.0
    height_hysteresis: float = 0.03


# How fast the root may catch up with the simulation, as a share of its own speed. A tracked person's
# floor point is the target here, not a stick's: the gamepad-tuned 0.43 left the root 15.8 cm from it on
# average on held-out take 2 (alpha 0.3; goal <= 15), 0.5 14.6 cm with less foot sliding (6.1 -> 5.2 cm/s).
VR_ADJUSTMENT_MAX_RATIO = 0.5


def vr_character_settings() -> CharacterSettings:
    """The default CharacterSettings of a tracker-driven character (VR_ADJUSTMENT_MAX_RATIO)."""
    return CharacterSettings(adjustment_max_ratio=VR_ADJUSTMENT_MAX_RATIO)


def crouch_databases(tags: str, below: float = 0.8) -> tuple:
    """height_databases for two databases: clips matching `tags` while the HMD is under `below` of the
    standing height, the character's own clips above."""
    if not 0.0 < below < 1.0:
        raise ValueError(f"crouch threshold: expected a ratio of the standing height in (0, 1), got {below}")
    return ((0.0, below, tags), (below, np.inf, None))


@dataclass
class VRDriverState:
    """Last device poses (3, 3) / (3, 4), smoothed floor velocity (3,) with its rate (3,), smoothed
    facing (4,) with its angular velocity (3,), and the network's last facing (2,) in the HMD floor frame
    of the last frame with that frame's HMD yaw."""

    positions: np.ndarray
    rotations: np.ndarray
    velocity: np.ndarray
    acceleration: np.ndarray
    facing: np.ndarray
    facing_velocity: np.ndarray
    network_facing: np.ndarray
    hmd_yaw: float


def driver_start(positions, rotations) -> VRDriverState:
    """State at the first tracker frame: at rest, facing the HMD's floor forward."""
    positions = np.asarray(positions, np.float64)
    rotations = np.asarray(rotations, np.float64)
    yaw = _hmd_yaw(rotations[0])
    return VRDriverState(positions.copy(), rotations.copy(), np.zeros(3), np.zeros(3), quat_from_yaw(yaw),
                         np.zeros(3), np.array([0.0, 1.0]), yaw)


def _hmd_yaw(rotation) -> float:
    # Forward (+Z) of the device rotated to the world: the matrix's third column.
    w, x, y, z = rotation
    fx, fz = 2 * (x * z + w * y), 1 - 2 * (x * x + y * y)
    return float(np.arctan2(fx, fz))


def driver_step(state: VRDriverState, network: OrientationNetwork, positions, rotations, dt: float,
                settings: VRDriverSettings | None = None) -> VRDriverState:
    """Advance by one tracker frame of dt seconds with device poses positions (3, 3) / rotations (3, 4)
    (trackers.DEVICES order): predict the body facing, then move both springs toward the new goals."""
    settings = settings or VRDriverSettings()
    positions = np.asarray(positions, np.float64)
    rotations = np.asarray(rotations, np.float64)
    vel = (positions - state.positions) / dt
    ang = quat_to_scaled_angle_axis(quat_mul_inv(rotations, state.rotations)) / dt
    yaw = _hmd_yaw(rotations[0])
    x = features_from(rotations, vel, ang, yaw)
    prev = rotate_facing(state.network_facing, state.hmd_yaw - yaw)
    d = network_step(network, x[None], prev[None])[0]
    goal_facing = quat_from_yaw(yaw + np.arctan2(d[0], d[1]))
    floor_vel = np.array([vel[0, 0], 0.0, vel[0, 2]])
    v, a = simple_spring_damper_exact(state.velocity, state.acceleration, floor_vel, settings.velocity_halflife, dt)
    q, w = simple_spring_damper_exact_quat(state.facing, state.facing_velocity, goal_facing,
                                           settings.facing_halflife, dt)
    return VRDriverState(positions, rotations, v, a, q, w, d, yaw)


def driver_goal_facing(state: VRDriverState) -> np.ndarray:
    """The network's latest body facing (4,), world yaw rotation (the springs' goal)."""
    return quat_from_yaw(state.hmd_yaw + np.arctan2(state.network_facing[0], state.network_facing[1]))


def desired_trajectory(state: VRDriverState, settings: VRDriverSettings | None = None,
                       times=TRAJECTORY_TIMES) -> tuple[np.ndarray, np.ndarray]:
    """Future root positions (K, 3) and facings (K, 4) in world space at `times` seconds ahead (seed
    002 eq. 4.3-4.4): from the HMD floor target along the smoothed velocity (p + t v), and the facing
    spring continued toward the network's facing."""
    settings = settings or VRDriverSettings()
    times = np.asarray(times, np.float64)
    target = hmd_floor_target(state.positions[0], state.rotations[0])
    pos = target[None] + times[:, None] * state.velocity[None]
    goal = np.broadcast_to(driver_goal_facing(state), (len(times), 4))
    q, _ = simple_spring_damper_exact_quat(np.broadcast_to(state.facing, (len(times), 4)),
                                           np.broadcast_to(state.facing_velocity, (len(times), 3)),
                                           goal, settings.facing_halflife, times)
    return pos, q


def select_database(hmd_height: float, standing_height: float, ranges, current: int | None = None,
                    hysteresis: float = 0.0) -> int:
    """Index of the database whose (low, high) range of height ratios holds HMD height / standing
    height (calibrated while the user stands), e.g. [(0.0, 0.7) crouch, (0.7, 0.93) bent knees,
    (0.93, 10.0) upright]; the nearest range when none holds it. The `current` one is kept while the
    ratio is within `hysteresis` of its range."""
    ratio = hmd_height / max(standing_height, 1e-6)
    if current is not None:
        low, high = ranges[current]
        if low - hysteresis <= ratio < high + hysteresis:
            return current
    best, best_gap = 0, np.inf
    for i, (low, high) in enumerate(ranges):
        if low <= ratio < high:
            return i
        gap = min(abs(ratio - low), abs(ratio - high))
        if gap < best_gap:
            best, best_gap = i, gap
    return best


def facing_yaw(facing) -> float:
    """Yaw (radians, 0 faces +Z) of a rotation about +Y (4,)."""
    w, y = float(facing[0]), float(facing[2])
    return float(2.0 * np.arctan2(y, w))


class VRDriver:
    """Drives a runtime Character's controller from a tracker stream (Character.set_driver): the
    desired velocity is the spring-smoothed HMD floor velocity, the desired facing the spring-smoothed
    predicted body facing, the trajectory desired_trajectory's (from the HMD floor target); the
    simulation stands on the HMD floor target (the character's root is clamped within settings.alpha
    of it by the synthesis touch-up, vr/synth.py).

    `index` is the stream frame consumed so far: the frame the character's current pose answers."""

    def __init__(self, stream, network: OrientationNetwork, settings: VRDriverSettings | None = None):
        self.stream = stream
        self.network = network
        self.settings = settings or VRDriverSettings()
        self.start(stream.positions[0], stream.rotations[0])

    def start(self, positions, rotations) -> None:
        """State at the first tracker frame; the standing height is calibrated from here on."""
        self.state = driver_start(positions, rotations)
        self.index = 0
        self.calibration: list[float] = []          # HMD heights (m) while calibrating
        self.standing_height: float | None = None
        ranges = [(low, high) for low, high, _ in self.settings.height_databases]
        self.database = select_database(1.0, 1.0, ranges) if ranges else None
        self.switches = 0

    def consume(self, positions, rotations, dt: float) -> None:
        """One tracker frame dt seconds after the last: the springs, then the database by HMD height."""
        self.state = driver_step(self.state, self.network, positions, rotations, dt, self.settings)
        self.index += 1
        hs = self.settings.height_databases
        if not hs:
            return
        height = float(self.state.positions[0, 1])
        if self.standing_height is None:
            self.calibration.append(height)
            if len(self.calibration) * dt >= self.settings.calibration_seconds:
                self.standing_height = float(np.median(self.calibration))
            return
        choice = select_database(height, self.standing_height, [(low, high) for low, high, _ in hs], self.database,
                                 self.settings.height_hysteresis)
        self.switches += choice != self.database
        self.database = choice

    def tag_filter(self, own: str | None) -> str | None:
        """The tag filter the character should search with now: the current height database's, or
        `own` (the character's filter) for a database without one or without height switching."""
        if self.database is None:
            return own
        expr = self.settings.height_databases[self.database][2]
        return own if expr is None else expr

    def target(self) -> np.ndarray:
        """The HMD floor target (3,) of the frame consumed last."""
        return hmd_floor_target(self.state.positions[0], self.state.rotations[0])

    def step(self, controller, t: float, dt: float) -> None:
        """Consume the stream up to time t + dt (seconds) and move the controller toward its goals."""
        s = self.stream
        last = min(int(round((t + dt) * s.fps)), s.num_frames - 1)
        while self.index < last:
            self.consume(s.positions[self.index + 1], s.rotations[self.index + 1], 1.0 / s.fps)
        self.steer(controller, dt)

    def steer(self, controller, dt: float) -> None:
        """Move the controller toward the state of the tracker frames consumed so far."""
        yaw = facing_yaw(self.state.facing)
        controller.update_velocity_goal(self.state.velocity, yaw, dt)
        # The driver's springs already smooth the devices: a second spring in the controller would
        # only add lag (half a second measured), so the simulation takes their state directly.
        controller.yaw, controller.velocity = yaw, self.state.velocity
        # The simulation stands on the target itself (the character's root, clamped within alpha,
        # follows it): root error 14.6 cm mean on held-out take2 at alpha 0.3, 18.5 cm when the
        # simulation too was only clamped within alpha.
        controller.position = clamp_root(controller.position, self.target(), 0.0)

    def predict(self, controller, frame_offsets=(20, 40, 60), fps: float = 60.0):
        """Future positions (K, 3) and rotations (K, 4), world, frame_offsets / fps seconds ahead."""
        return desired_trajectory(self.state, self.settings, np.asarray(frame_offsets, np.float64) / fps)
