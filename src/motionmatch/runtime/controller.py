"""Gamepad/path controller driving the simulation character with exact critically damped springs.

The simulation character lives on the ground plane (Y up): position, velocity and acceleration follow
the character spring on velocity (seed 000 section 3.1, seed 001), the facing is a yaw spring. Yaw 0
faces +Z and positive yaw turns +Z toward +X; the stick plane is x right, z forward, seen through a
fixed camera (camera_yaw 0 looks along +Z, so pushing the stick forward walks along +Z).

The velocity and facing goals depend only on the input (and the held facing), never on the current
simulation state, so under a constant input `predict` is the exact closed form of stepping `update`.
The state is kept as Python floats: a full update + predict costs a few microseconds.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import NamedTuple

import numba
import numpy as np

from .settings_schema import defaults, packed_rows
from ..maths.springs import character_spring, half_damping, spring_exact

_TWO_PI = 2.0 * math.pi

# Controller state: one row per character, one column per quantity (structure-of-arrays over the
# crowd, float64). Ground position, velocity and acceleration (m, m/s, m/s^2), facing yaw and its
# rate (rad, rad/s), gait blend (0 walk .. 1 run) and its rate, the goals and the velocity halflife.
PX, PY, PZ, VX, VZ, AX, AZ, YAW, YAW_RATE, GAIT, GAIT_RATE, GOAL_VX, GOAL_VZ, GOAL_YAW, GOAL_GAIT, HALFLIFE = range(16)
STATE_COLUMNS = 16


@numba.njit(cache=True, error_model="numpy", inline="always")
def wrap_angle(a):
    """Wrap radians to [-pi, pi)."""
    return (a + math.pi) % _TWO_PI - math.pi


# The packed controller settings (ControllerSettings.packed): one column per controller row of the settings
# schema with a `column` (C_DEAD_ZONE, ...), in schema order. A released stick's stop halflife of None is -1.
# The column constants are written out so linters and readers resolve them (tests/runtime/test_settings_columns.py
# holds them to the schema).
_PACKED_KEYS = tuple(s.key for s in packed_rows("controller"))
C_DEAD_ZONE = 0
C_RESPONSE_EXPONENT = 1
C_LOOK_DEAD_ZONE = 2
C_WALK_FORWARD = 3
C_WALK_SIDE = 4
C_WALK_BACKWARD = 5
C_RUN_FORWARD = 6
C_RUN_SIDE = 7
C_RUN_BACKWARD = 8
C_VELOCITY_HALFLIFE = 9
C_STOP_HALFLIFE = 10
C_ROTATION_HALFLIFE = 11
C_GAIT_HALFLIFE = 12
C_CAMERA_YAW = 13
_D = defaults("controller")


@dataclass
class GamepadInput:
    """One frame of input. move/look: stick (x right, z forward), magnitude 0..1; look None = idle."""
    move: tuple[float, float] = (0.0, 0.0)
    look: tuple[float, float] | None = None
    run: bool = False
    strafe: bool = False


class Sticks(NamedTuple):
    """One tick's stick input of n agents (gamepad_step)."""

    move: np.ndarray       # (n, 2) float64 x right, z forward (world frame), magnitude 0..1
    run: np.ndarray        # (n,) bool
    strafe: np.ndarray     # (n,) bool
    look: np.ndarray       # (n, 2) float64 facing stick; NaN rows: no look input


@dataclass
class ControllerSettings:
    """Speeds in m/s, halflives in s (spring convention of springs.py), angles in radians
    (settings_schema.py: bounds, docs)."""
    dead_zone: float = _D["dead_zone"]
    response_exponent: float = _D["response_exponent"]
    look_dead_zone: float = _D["look_dead_zone"]
    walk_forward_speed: float = _D["walk_forward_speed"]
    walk_side_speed: float = _D["walk_side_speed"]
    walk_backward_speed: float = _D["walk_backward_speed"]
    run_forward_speed: float = _D["run_forward_speed"]
    run_side_speed: float = _D["run_side_speed"]
    run_backward_speed: float = _D["run_backward_speed"]
    velocity_halflife: float = _D["velocity_halflife"]
    stop_halflife: float | None = _D["stop_halflife"]
    rotation_halflife: float = _D["rotation_halflife"]
    gait_halflife: float = _D["gait_halflife"]
    camera_yaw: float = _D["camera_yaw"]

    def speeds(self, run: bool) -> tuple[float, float, float]:
        """(forward, side, backward) speeds of the gait."""
        if run:
            return self.run_forward_speed, self.run_side_speed, self.run_backward_speed
        return self.walk_forward_speed, self.walk_side_speed, self.walk_backward_speed

    def __setattr__(self, name, value):
        # Any change drops the row packed() keeps.
        object.__setattr__(self, name, value)
        object.__setattr__(self, "_packed_row", None)

    def packed(self) -> np.ndarray:
        """The settings as the float64 vector the compiled kernels read (see _gamepad_goals). Read every tick,
        so it is packed once and kept until a setting changes: the same array, to read and not to write."""
        row = self._packed_row
        if row is None:
            row = np.array([getattr(self, k) for k in _PACKED_KEYS], dtype=np.float64)
            if self.stop_halflife is None:
                row[C_STOP_HALFLIFE] = -1.0
            object.__setattr__(self, "_packed_row", row)
        return row


@numba.njit(cache=True, error_model="numpy")
def _stick_response(x, z, dead_zone, exponent):
    m = math.hypot(x, z)
    if m <= dead_zone:
        return 0.0
    f = min((m - dead_zone) / max(1.0 - dead_zone, 1e-9), 1.0)
    return f ** exponent if exponent != 1.0 else f


def stick_response(x: float, z: float, dead_zone: float, exponent: float = 1.0) -> float:
    """Fraction 0..1 of full speed for a stick deflection (x, z): radial dead zone, then a power curve."""
    return _stick_response(float(x), float(z), float(dead_zone), float(exponent))


@numba.njit(cache=True, error_model="numpy")
def _gamepad_goals(mx, mz, has_look, lx, lz, run, strafe, held_yaw, cs):
    """(goal vx, goal vz, goal yaw, moving) for one input; cs: ControllerSettings.packed(). Sticks
    longer than 1 (gamepads report the square, up to 1.41) count as full deflection."""
    m = math.hypot(mx, mz)
    if m > 1.0:
        mx, mz = mx / m, mz / m
    frac = _stick_response(mx, mz, cs[C_DEAD_ZONE], cs[C_RESPONSE_EXPONENT])
    cam_c, cam_s = math.cos(cs[C_CAMERA_YAW]), math.sin(cs[C_CAMERA_YAW])
    yaw = held_yaw
    if strafe and has_look:
        if math.hypot(lx, lz) > cs[C_LOOK_DEAD_ZONE]:
            yaw = math.atan2(lx * cam_c + lz * cam_s, -lx * cam_s + lz * cam_c)
    if frac == 0.0:
        return 0.0, 0.0, yaw, False
    m = math.hypot(mx, mz)
    # Stick direction in the world: rotate by the camera yaw about +Y.
    dx = (mx * cam_c + mz * cam_s) / m
    dz = (-mx * cam_s + mz * cam_c) / m
    if run:
        fwd, side, back = cs[C_RUN_FORWARD], cs[C_RUN_SIDE], cs[C_RUN_BACKWARD]
    else:
        fwd, side, back = cs[C_WALK_FORWARD], cs[C_WALK_SIDE], cs[C_WALK_BACKWARD]
    if not strafe:
        return dx * fwd * frac, dz * fwd * frac, math.atan2(dx, dz), True
    fc, fs = math.cos(yaw), math.sin(yaw)
    lx = dx * fc - dz * fs           # local to the facing goal: x right, z forward
    lz = dx * fs + dz * fc
    lx *= side * frac
    lz *= (fwd if lz > 0.0 else back) * frac
    return lx * fc + lz * fs, -lx * fs + lz * fc, yaw, True


def desired_goals(inp: GamepadInput, held_yaw: float, settings: ControllerSettings) -> tuple[float, float, float, bool]:
    """Velocity goal (vx, vz, m/s, world) and facing goal yaw for an input; the last value says whether
    the move stick is active.

    Not strafing: the character faces where it moves, at the forward speed. Strafing: the facing comes
    from the look stick or is held, and the stick direction relative to that facing is scaled by the
    side / forward / backward speeds (as in desired_velocity_update of seed 004).
    """
    look = inp.look
    vx, vz, yaw, moving = _gamepad_goals(float(inp.move[0]), float(inp.move[1]), look is not None,
                                         0.0 if look is None else float(look[0]),
                                         0.0 if look is None else float(look[1]), bool(inp.run), bool(inp.strafe),
                                         float(held_yaw), settings.packed())
    return vx, vz, yaw, bool(moving)


@numba.njit(cache=True, error_model="numpy")
def advance_state(st, i, dt, rot_halflife, gait_halflife):
    """Advance row i of the state table by dt seconds toward its goals (exact closed forms, in place)."""
    hl = st[i, HALFLIFE]
    st[i, PX], st[i, VX], st[i, AX] = character_spring(st[i, PX], st[i, VX], st[i, AX], st[i, GOAL_VX], hl, dt)
    st[i, PZ], st[i, VZ], st[i, AZ] = character_spring(st[i, PZ], st[i, VZ], st[i, AZ], st[i, GOAL_VZ], hl, dt)
    # Yaw spring: the quaternion spring restricted to rotations about +Y is this scalar spring on the
    # wrapped angle difference.
    j0, st[i, YAW_RATE] = spring_exact(wrap_angle(st[i, YAW] - st[i, GOAL_YAW]), st[i, YAW_RATE], 0.0, rot_halflife, dt)
    st[i, YAW] = wrap_angle(st[i, GOAL_YAW] + j0)
    gait, st[i, GAIT_RATE] = spring_exact(st[i, GAIT], st[i, GAIT_RATE], st[i, GOAL_GAIT], gait_halflife, dt)
    st[i, GAIT] = min(max(gait, 0.0), 1.0)


@numba.njit(cache=True, error_model="numpy")
def _gamepad_agent(st, i, mx, mz, has_look, lx, lz, run, strafe, dt, cs):
    vx, vz, yaw, moving = _gamepad_goals(mx, mz, has_look, lx, lz, run, strafe, st[i, GOAL_YAW], cs)
    halflife = cs[C_VELOCITY_HALFLIFE] if moving or cs[C_STOP_HALFLIFE] < 0.0 else cs[C_STOP_HALFLIFE]
    st[i, GOAL_VX], st[i, GOAL_VZ], st[i, GOAL_YAW] = vx, vz, yaw
    st[i, GOAL_GAIT], st[i, HALFLIFE] = 1.0 if run else 0.0, halflife
    advance_state(st, i, dt, cs[C_ROTATION_HALFLIFE], cs[C_GAIT_HALFLIFE])


@numba.njit(cache=True, error_model="numpy", parallel=True)
def gamepad_step(st, move, run, strafe, look, dt, cs):
    """Every row of the state table: goals from its input, then advance dt seconds.

    move / look (n, 2) float64 sticks (look rows NaN = no look input), run / strafe (n,) bool;
    cs: ControllerSettings.packed()."""
    for i in numba.prange(st.shape[0]):
        lx, lz = look[i, 0], look[i, 1]
        has_look = not (math.isnan(lx) or math.isnan(lz))
        _gamepad_agent(st, i, move[i, 0], move[i, 1], has_look, lx, lz, run[i], strafe[i], dt, cs)


@numba.njit(cache=True, error_model="numpy")
def gamepad_serial(st, move, run, strafe, look, dt, cs):
    """gamepad_step on the calling thread (small crowds: no thread hand-off)."""
    for i in range(st.shape[0]):
        lx, lz = look[i, 0], look[i, 1]
        has_look = not (math.isnan(lx) or math.isnan(lz))
        _gamepad_agent(st, i, move[i, 0], move[i, 1], has_look, lx, lz, run[i], strafe[i], dt, cs)


@numba.njit(cache=True, error_model="numpy")
def predict_state(st, i, offsets, fps, rot_halflife, out_pos, out_rot):
    """Future positions (K, 3) and yaw rotations (K, 4) of row i at offsets / fps seconds ahead under
    constant goals (the closed-form springs), into out_pos / out_rot."""
    hl = st[i, HALFLIFE]
    r0 = wrap_angle(st[i, YAW] - st[i, GOAL_YAW])
    for k in range(offsets.shape[0]):
        t = offsets[k] / fps
        out_pos[k, 0] = character_spring(st[i, PX], st[i, VX], st[i, AX], st[i, GOAL_VX], hl, t)[0]
        out_pos[k, 1] = st[i, PY]
        out_pos[k, 2] = character_spring(st[i, PZ], st[i, VZ], st[i, AZ], st[i, GOAL_VZ], hl, t)[0]
        h = 0.5 * (st[i, GOAL_YAW] + spring_exact(r0, st[i, YAW_RATE], 0.0, rot_halflife, t)[0])
        out_rot[k, 0], out_rot[k, 1], out_rot[k, 2], out_rot[k, 3] = math.cos(h), 0.0, math.sin(h), 0.0


def new_state(n: int, settings: "ControllerSettings") -> np.ndarray:
    """A state table for n characters standing at the origin facing +Z."""
    st = np.zeros((n, STATE_COLUMNS))
    st[:, HALFLIFE] = settings.velocity_halflife
    return st


def reset_state(st: np.ndarray, i: int, settings: "ControllerSettings", position=(0.0, 0.0, 0.0),
                yaw: float = 0.0) -> None:
    """Row i stands still at position (3,) facing yaw (radians)."""
    st[i] = 0.0
    st[i, PX], st[i, PY], st[i, PZ] = (float(c) for c in position)
    st[i, YAW] = st[i, GOAL_YAW] = wrap_angle(float(yaw))
    st[i, HALFLIFE] = settings.velocity_halflife


def _yaw_quat(yaw: float) -> np.ndarray:
    return np.array([math.cos(0.5 * yaw), 0.0, math.sin(0.5 * yaw), 0.0])


class Controller:
    """The simulation character: ground position, velocity, acceleration, yaw and gait blend
    (0 walk .. 1 run), advanced by exact springs toward goals from a gamepad or a path follower.

    It is a view of one row of a state table (`table`, `row`): a crowd's characters share one table,
    a lone controller owns a table of one row.
    """

    def __init__(self, settings: ControllerSettings | None = None, position=(0.0, 0.0, 0.0), yaw: float = 0.0,
                 table: np.ndarray | None = None, row: int = 0):
        self.settings = settings if settings is not None else ControllerSettings()
        self.table = new_state(1, self.settings) if table is None else table
        self.row = int(row)
        if table is None:
            self.reset(position, yaw)

    def reset(self, position=(0.0, 0.0, 0.0), yaw: float = 0.0) -> None:
        """Stand still at position (3,) facing yaw (radians)."""
        reset_state(self.table, self.row, self.settings, position, yaw)

    def copy(self) -> "Controller":
        """An independent controller (its own one-row table) in the same state."""
        return Controller(self.settings, table=self.table[self.row:self.row + 1].copy())

    # --- driving -------------------------------------------------------------------------------
    def update(self, inp: GamepadInput, dt: float) -> None:
        """Set the goals from a gamepad input and advance dt seconds."""
        look = inp.look
        _gamepad_agent(self.table, self.row, float(inp.move[0]), float(inp.move[1]), look is not None,
                       0.0 if look is None else float(look[0]), 0.0 if look is None else float(look[1]),
                       bool(inp.run), bool(inp.strafe), float(dt), self.settings.packed())

    def update_velocity_goal(self, v_goal, facing_goal: float | None, dt: float, *, run: bool | None = None,
                             halflife: float | None = None) -> None:
        """Advance dt seconds toward a world velocity goal (vx, vz) or (vx, vy, vz) in m/s.

        facing_goal: yaw in radians, None = keep the current facing goal. run: gait goal; None infers it
        from the goal speed between the walk and run forward speeds. halflife: velocity halflife,
        None = the settings' one (the stop halflife when the goal is zero).
        """
        s = self.settings
        st, i = self.table, self.row
        vx, vz = float(v_goal[0]), float(v_goal[-1])
        speed = math.hypot(vx, vz)
        if run is None:
            gait = (speed - s.walk_forward_speed) / max(s.run_forward_speed - s.walk_forward_speed, 1e-6)
            gait = min(max(gait, 0.0), 1.0)
        else:
            gait = 1.0 if run else 0.0
        if halflife is None:
            halflife = s.velocity_halflife if speed > 0.0 or s.stop_halflife is None else s.stop_halflife
        if facing_goal is not None:
            st[i, GOAL_YAW] = wrap_angle(float(facing_goal))
        st[i, GOAL_VX], st[i, GOAL_VZ], st[i, GOAL_GAIT], st[i, HALFLIFE] = vx, vz, gait, halflife
        advance_state(st, i, float(dt), s.rotation_halflife, s.gait_halflife)

    # --- prediction ------------------------------------------------------------------------------
    def predict(self, frame_offsets=(20, 40, 60), fps: float = 60.0, with_velocities: bool = False):
        """Future simulation positions (K, 3) and rotations (K, 4) (world space) at frame_offsets / fps
        seconds ahead, assuming the goals of the last update stay constant (closed-form springs).
        With with_velocities, also the future velocities (K, 3)."""
        offsets = np.asarray(frame_offsets, dtype=np.float64)
        pos, rot = np.empty((len(offsets), 3)), np.empty((len(offsets), 4))
        predict_state(self.table, self.row, offsets, float(fps), self.settings.rotation_halflife, pos, rot)
        if not with_velocities:
            return pos, rot
        r = self.table[self.row]
        y = half_damping(r[HALFLIFE])
        t = offsets / fps
        e = np.exp(-y * t)
        j0x, j0z = r[VX] - r[GOAL_VX], r[VZ] - r[GOAL_VZ]
        j1x, j1z = r[AX] + j0x * y, r[AZ] + j0z * y
        vel = np.stack([e * (j0x + j1x * t) + r[GOAL_VX], np.zeros_like(t), e * (j0z + j1z * t) + r[GOAL_VZ]], 1)
        return pos, rot, vel

    # --- state -----------------------------------------------------------------------------------
    @property
    def position(self) -> np.ndarray:
        return self.table[self.row, [PX, PY, PZ]]

    @position.setter
    def position(self, p) -> None:
        self.table[self.row, [PX, PY, PZ]] = [float(p[0]), float(p[1]), float(p[2])]

    @property
    def velocity(self) -> np.ndarray:
        return np.array([self.table[self.row, VX], 0.0, self.table[self.row, VZ]])

    @velocity.setter
    def velocity(self, v) -> None:
        self.table[self.row, VX], self.table[self.row, VZ] = float(v[0]), float(v[-1])

    @property
    def acceleration(self) -> np.ndarray:
        return np.array([self.table[self.row, AX], 0.0, self.table[self.row, AZ]])

    @property
    def yaw(self) -> float:
        """Facing yaw in radians, [-pi, pi)."""
        return float(self.table[self.row, YAW])

    @yaw.setter
    def yaw(self, value: float) -> None:
        self.table[self.row, YAW] = wrap_angle(float(value))

    @property
    def rotation(self) -> np.ndarray:
        """Facing as a quaternion (4,) about +Y."""
        return _yaw_quat(self.yaw)

    @property
    def gait(self) -> float:
        """Gait blend, 0 walk .. 1 run."""
        return float(self.table[self.row, GAIT])

    @property
    def desired_velocity(self) -> np.ndarray:
        return np.array([self.table[self.row, GOAL_VX], 0.0, self.table[self.row, GOAL_VZ]])

    @property
    def desired_yaw(self) -> float:
        return float(self.table[self.row, GOAL_YAW])


class PathFollower:
    """Turns a polyline on the ground (points [[x, z], ...] in metres) into velocity goals so the
    simulation character walks it at `speed` m/s, facing where it goes.

    The progress along the path (arc length) only moves forward, found by projecting the character
    onto the next stretch of path; the goal points at the path `lookahead` metres further. Without
    loop the goal speed ramps down over `brake_distance` before the last point and `done` turns true
    once the character is within `stop_distance` of it. With loop the last point joins the first.
    """

    def __init__(self, points, speed: float, loop: bool = False, lookahead: float = 0.6,
                 brake_distance: float | None = None, stop_distance: float = 0.05):
        pts = np.asarray(points, dtype=np.float64)
        if pts.ndim != 2 or pts.shape[1] != 2 or len(pts) < 2:
            raise ValueError("path points: expected a list of at least two [x, z] pairs")
        if loop and np.linalg.norm(pts[-1] - pts[0]) > 1e-9:
            pts = np.vstack([pts, pts[:1]])
        keep = np.concatenate([[True], np.linalg.norm(np.diff(pts, axis=0), axis=1) > 1e-9])
        pts = pts[keep]
        if len(pts) < 2:
            raise ValueError("path points: the path has zero length")
        self.points = pts
        self.speed = float(speed)
        self.loop = bool(loop)
        self.lookahead = float(lookahead)
        self.brake_distance = float(brake_distance) if brake_distance is not None else max(0.5, 0.6 * self.speed)
        self.stop_distance = float(stop_distance)
        seg = np.diff(pts, axis=0)
        self._seg = [(float(a[0]), float(a[1]), float(d[0]), float(d[1])) for a, d in zip(pts[:-1], seg)]
        self._len = [float(n) for n in np.linalg.norm(seg, axis=1)]
        self._start = [0.0] + list(np.cumsum(self._len)[:-1].astype(float))
        self.length = float(sum(self._len))
        self._end = (float(pts[-1, 0]), float(pts[-1, 1]))
        self.progress = 0.0
        self.done = False

    def _segment_of(self, s_mod: float) -> int:
        i = bisect.bisect_right(self._start, s_mod) - 1
        return min(max(i, 0), len(self._seg) - 1)

    def point_at(self, s: float) -> tuple[float, float]:
        """Point (x, z) at arc length s (wrapped when looping, clamped otherwise)."""
        s = s % self.length if self.loop else min(max(s, 0.0), self.length)
        i = self._segment_of(s)
        ax, az, dx, dz = self._seg[i]
        t = (s - self._start[i]) / self._len[i]
        return ax + t * dx, az + t * dz

    def project(self, x: float, z: float, progress: float) -> float:
        """Arc length of the closest path point to (x, z) not behind `progress` and at most
        lookahead + 0.5 m ahead of it (so corners and self-crossings cannot make it jump)."""
        window = self.lookahead + 0.5
        if self.loop:
            lap = math.floor(progress / self.length)
            s_in = progress - lap * self.length
            base = lap * self.length
        else:
            s_in = min(progress, self.length)
            base = 0.0
        i = self._segment_of(s_in)
        best_d2, best_s = math.inf, progress
        seg_start = base + self._start[i]
        n = len(self._seg)
        while True:
            ax, az, dx, dz = self._seg[i]
            ln = self._len[i]
            t = ((x - ax) * dx + (z - az) * dz) / (ln * ln)
            t_min = max((progress - seg_start) / ln, 0.0)
            t_max = min((progress + window - seg_start) / ln, 1.0)
            t = min(max(t, t_min), t_max)
            qx, qz = ax + t * dx - x, az + t * dz - z
            d2 = qx * qx + qz * qz
            if d2 < best_d2:
                best_d2, best_s = d2, seg_start + t * ln
            seg_start += ln
            if seg_start >= progress + window:
                break
            i += 1
            if i == n:
                if not self.loop:
                    break
                i = 0
        return best_s

    def goal(self, position, progress: float | None = None) -> tuple[float, float, float | None, float, bool]:
        """(vx, vz, facing yaw or None, new progress, done) for a character at position (3,) or (x, z)."""
        x, z = float(position[0]), float(position[-1])
        s = self.project(x, z, self.progress if progress is None else progress)
        tx, tz = self.point_at(s + self.lookahead)
        speed = self.speed
        done = False
        if not self.loop:
            ex, ez = self._end
            to_end = math.hypot(ex - x, ez - z)
            remaining = max(self.length - s, to_end)
            if remaining <= self.stop_distance:
                return 0.0, 0.0, None, s, True
            speed *= min(remaining / self.brake_distance, 1.0)
        dx, dz = tx - x, tz - z
        d = math.hypot(dx, dz)
        if d < 1e-9:
            return 0.0, 0.0, None, s, done
        yaw = math.atan2(dx, dz) if speed > 0.2 * self.speed else None
        return dx / d * speed, dz / d * speed, yaw, s, done

    def step(self, controller: Controller, t: float, dt: float) -> None:
        """Advance the controller dt seconds along the path (t, the scenario time, is unused)."""
        p = controller.position
        vx, vz, yaw, self.progress, self.done = self.goal((p[0], p[2]))
        controller.update_velocity_goal((vx, vz), yaw, dt)

    def predict(self, controller: Controller, frame_offsets=(20, 40, 60), fps: float = 60.0):
        """Future positions (K, 3) and rotations (K, 4) following the path: the controller is stepped
        on a copy from offset to offset, re-aiming at the path at each (the goal changes with position,
        so the constant-goal closed form alone would run straight past corners)."""
        c = controller.copy()
        st, i = c.table, c.row
        s = self.progress
        prev = 0.0
        pos, rot = [], []
        for f in frame_offsets:
            t = f / fps
            vx, vz, yaw, s, _ = self.goal((st[i, PX], st[i, PZ]), s)
            c.update_velocity_goal((vx, vz), yaw, t - prev)
            prev = t
            pos.append((st[i, PX], st[i, PY], st[i, PZ]))
            rot.append((math.cos(0.5 * st[i, YAW]), 0.0, math.sin(0.5 * st[i, YAW]), 0.0))
        return np.array(pos), np.array(rot)
