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
import copy
import math
from dataclasses import dataclass, field

import numpy as np

from .springs import halflife_to_damping

_TWO_PI = 2.0 * math.pi


def _wrap(a: float) -> float:
    """Wrap radians to [-pi, pi)."""
    return (a + math.pi) % _TWO_PI - math.pi


@dataclass
class GamepadInput:
    """One frame of input. move/look: stick (x right, z forward), magnitude 0..1; look None = idle."""
    move: tuple[float, float] = (0.0, 0.0)
    look: tuple[float, float] | None = None
    run: bool = False
    strafe: bool = False


@dataclass
class ControllerSettings:
    """Speeds in m/s, halflives in s (spring convention of springs.py), angles in radians."""
    dead_zone: float = 0.2            # radial stick dead zone, rescaled so the response starts at 0
    response_exponent: float = 1.0    # speed fraction = ((|stick| - dead_zone) / (1 - dead_zone)) ** exponent
    look_dead_zone: float = 0.2
    walk_forward_speed: float = 1.3
    walk_side_speed: float = 1.1
    walk_backward_speed: float = 0.9
    run_forward_speed: float = 3.2
    run_side_speed: float = 2.4
    run_backward_speed: float = 2.0
    velocity_halflife: float = 0.15          # tuned for responsiveness <= 0.4 s on the jlpm22 data
    stop_halflife: float | None = 0.12  # halflife while the stick is released (quick stop); None = same
    rotation_halflife: float = 0.2
    gait_halflife: float = 0.1
    camera_yaw: float = 0.0

    def speeds(self, run: bool) -> tuple[float, float, float]:
        """(forward, side, backward) speeds of the gait."""
        if run:
            return self.run_forward_speed, self.run_side_speed, self.run_backward_speed
        return self.walk_forward_speed, self.walk_side_speed, self.walk_backward_speed


def stick_response(x: float, z: float, dead_zone: float, exponent: float = 1.0) -> float:
    """Fraction 0..1 of full speed for a stick deflection (x, z): radial dead zone, then a power curve."""
    m = math.hypot(x, z)
    if m <= dead_zone:
        return 0.0
    f = min((m - dead_zone) / max(1.0 - dead_zone, 1e-9), 1.0)
    return f ** exponent if exponent != 1.0 else f


def desired_goals(inp: GamepadInput, held_yaw: float, settings: ControllerSettings) -> tuple[float, float, float, bool]:
    """Velocity goal (vx, vz, m/s, world) and facing goal yaw for an input; the last value says whether
    the move stick is active.

    Not strafing: the character faces where it moves, at the forward speed. Strafing: the facing comes
    from the look stick or is held, and the stick direction relative to that facing is scaled by the
    side / forward / backward speeds (as in desired_velocity_update of seed 004).
    """
    s = settings
    mx, mz = float(inp.move[0]), float(inp.move[1])
    frac = stick_response(mx, mz, s.dead_zone, s.response_exponent)
    cam_c, cam_s = math.cos(s.camera_yaw), math.sin(s.camera_yaw)
    yaw = held_yaw
    if inp.strafe and inp.look is not None:
        lx, lz = float(inp.look[0]), float(inp.look[1])
        if math.hypot(lx, lz) > s.look_dead_zone:
            yaw = math.atan2(lx * cam_c + lz * cam_s, -lx * cam_s + lz * cam_c)
    if frac == 0.0:
        return 0.0, 0.0, yaw, False
    m = math.hypot(mx, mz)
    # Stick direction in the world: rotate by the camera yaw about +Y.
    dx = (mx * cam_c + mz * cam_s) / m
    dz = (-mx * cam_s + mz * cam_c) / m
    fwd, side, back = s.speeds(inp.run)
    if not inp.strafe:
        return dx * fwd * frac, dz * fwd * frac, math.atan2(dx, dz), True
    fc, fs = math.cos(yaw), math.sin(yaw)
    lx = dx * fc - dz * fs           # local to the facing goal: x right, z forward
    lz = dx * fs + dz * fc
    lx *= side * frac
    lz *= (fwd if lz > 0.0 else back) * frac
    return lx * fc + lz * fs, -lx * fs + lz * fc, yaw, True


@dataclass
class _State:
    px: float = 0.0
    py: float = 0.0
    pz: float = 0.0
    vx: float = 0.0
    vz: float = 0.0
    ax: float = 0.0
    az: float = 0.0
    yaw: float = 0.0
    yaw_rate: float = 0.0
    gait: float = 0.0
    gait_rate: float = 0.0
    goal_vx: float = 0.0
    goal_vz: float = 0.0
    goal_yaw: float = 0.0
    goal_gait: float = 0.0
    halflife: float = 0.27


def _advance(st: _State, dt: float, rot_halflife: float, gait_halflife: float) -> None:
    """Advance the springs of st by dt seconds toward its goals (exact closed forms, in place)."""
    y = halflife_to_damping(st.halflife) * 0.5
    e = math.exp(-y * dt)
    iy, iy2 = 1.0 / y, 1.0 / (y * y)
    j0x, j0z = st.vx - st.goal_vx, st.vz - st.goal_vz
    j1x, j1z = st.ax + j0x * y, st.az + j0z * y
    st.px += e * (-j1x * iy2 - (j0x + j1x * dt) * iy) + j1x * iy2 + j0x * iy + st.goal_vx * dt
    st.pz += e * (-j1z * iy2 - (j0z + j1z * dt) * iy) + j1z * iy2 + j0z * iy + st.goal_vz * dt
    st.vx = e * (j0x + j1x * dt) + st.goal_vx
    st.vz = e * (j0z + j1z * dt) + st.goal_vz
    st.ax = e * (st.ax - j1x * y * dt)
    st.az = e * (st.az - j1z * y * dt)
    # Yaw spring: the quaternion spring restricted to rotations about +Y is this scalar spring on the
    # wrapped angle difference.
    y = halflife_to_damping(rot_halflife) * 0.5
    e = math.exp(-y * dt)
    j0 = _wrap(st.yaw - st.goal_yaw)
    j1 = st.yaw_rate + j0 * y
    st.yaw = _wrap(st.goal_yaw + e * (j0 + j1 * dt))
    st.yaw_rate = e * (st.yaw_rate - j1 * y * dt)
    y = halflife_to_damping(gait_halflife) * 0.5
    e = math.exp(-y * dt)
    j0 = st.gait - st.goal_gait
    j1 = st.gait_rate + j0 * y
    st.gait = min(max(st.goal_gait + e * (j0 + j1 * dt), 0.0), 1.0)
    st.gait_rate = e * (st.gait_rate - j1 * y * dt)


def _yaw_quat(yaw: float) -> np.ndarray:
    return np.array([math.cos(0.5 * yaw), 0.0, math.sin(0.5 * yaw), 0.0])


class Controller:
    """The simulation character: ground position, velocity, acceleration, yaw and gait blend
    (0 walk .. 1 run), advanced by exact springs toward goals from a gamepad or a path follower."""

    def __init__(self, settings: ControllerSettings | None = None, position=(0.0, 0.0, 0.0), yaw: float = 0.0):
        self.settings = settings if settings is not None else ControllerSettings()
        self.reset(position, yaw)

    def reset(self, position=(0.0, 0.0, 0.0), yaw: float = 0.0) -> None:
        """Stand still at position (3,) facing yaw (radians)."""
        p = [float(c) for c in position]
        self._s = _State(px=p[0], py=p[1], pz=p[2], yaw=_wrap(float(yaw)), goal_yaw=_wrap(float(yaw)),
                         halflife=self.settings.velocity_halflife)

    def copy(self) -> "Controller":
        c = Controller.__new__(Controller)
        c.settings = self.settings
        c._s = copy.copy(self._s)
        return c

    # --- driving -------------------------------------------------------------------------------
    def update(self, inp: GamepadInput, dt: float) -> None:
        """Set the goals from a gamepad input and advance dt seconds."""
        s = self.settings
        vx, vz, yaw, moving = desired_goals(inp, self._s.goal_yaw, s)
        halflife = s.velocity_halflife if moving or s.stop_halflife is None else s.stop_halflife
        self._set_goals(vx, vz, yaw, 1.0 if inp.run else 0.0, halflife)
        _advance(self._s, float(dt), s.rotation_halflife, s.gait_halflife)

    def update_velocity_goal(self, v_goal, facing_goal: float | None, dt: float, *, run: bool | None = None,
                             halflife: float | None = None) -> None:
        """Advance dt seconds toward a world velocity goal (vx, vz) or (vx, vy, vz) in m/s.

        facing_goal: yaw in radians, None = keep the current facing goal. run: gait goal; None infers it
        from the goal speed between the walk and run forward speeds. halflife: velocity halflife,
        None = the settings' one (the stop halflife when the goal is zero).
        """
        s = self.settings
        vx, vz = float(v_goal[0]), float(v_goal[-1])
        speed = math.hypot(vx, vz)
        if run is None:
            gait = (speed - s.walk_forward_speed) / max(s.run_forward_speed - s.walk_forward_speed, 1e-6)
            gait = min(max(gait, 0.0), 1.0)
        else:
            gait = 1.0 if run else 0.0
        if halflife is None:
            halflife = s.velocity_halflife if speed > 0.0 or s.stop_halflife is None else s.stop_halflife
        yaw = self._s.goal_yaw if facing_goal is None else _wrap(float(facing_goal))
        self._set_goals(vx, vz, yaw, gait, halflife)
        _advance(self._s, float(dt), s.rotation_halflife, s.gait_halflife)

    def _set_goals(self, vx, vz, yaw, gait, halflife):
        st = self._s
        st.goal_vx, st.goal_vz, st.goal_yaw, st.goal_gait, st.halflife = vx, vz, yaw, gait, halflife

    # --- prediction ------------------------------------------------------------------------------
    def predict(self, frame_offsets=(20, 40, 60), fps: float = 60.0, with_velocities: bool = False):
        """Future simulation positions (K, 3) and rotations (K, 4) (world space) at frame_offsets / fps
        seconds ahead, assuming the goals of the last update stay constant (closed-form springs).
        With with_velocities, also the future velocities (K, 3)."""
        st = self._s
        y = halflife_to_damping(st.halflife) * 0.5
        iy, iy2 = 1.0 / y, 1.0 / (y * y)
        j0x, j0z = st.vx - st.goal_vx, st.vz - st.goal_vz
        j1x, j1z = st.ax + j0x * y, st.az + j0z * y
        yr = halflife_to_damping(self.settings.rotation_halflife) * 0.5
        r0 = _wrap(st.yaw - st.goal_yaw)
        r1 = st.yaw_rate + r0 * yr
        pos, rot, vel = [], [], []
        for f in frame_offsets:
            t = f / fps
            e = math.exp(-y * t)
            pos.append((st.px + e * (-j1x * iy2 - (j0x + j1x * t) * iy) + j1x * iy2 + j0x * iy + st.goal_vx * t,
                        st.py,
                        st.pz + e * (-j1z * iy2 - (j0z + j1z * t) * iy) + j1z * iy2 + j0z * iy + st.goal_vz * t))
            if with_velocities:
                vel.append((e * (j0x + j1x * t) + st.goal_vx, 0.0, e * (j0z + j1z * t) + st.goal_vz))
            h = 0.5 * (st.goal_yaw + math.exp(-yr * t) * (r0 + r1 * t))
            rot.append((math.cos(h), 0.0, math.sin(h), 0.0))
        if with_velocities:
            return np.array(pos), np.array(rot), np.array(vel)
        return np.array(pos), np.array(rot)

    # --- state -----------------------------------------------------------------------------------
    @property
    def position(self) -> np.ndarray:
        return np.array([self._s.px, self._s.py, self._s.pz])

    @position.setter
    def position(self, p) -> None:
        self._s.px, self._s.py, self._s.pz = float(p[0]), float(p[1]), float(p[2])

    @property
    def velocity(self) -> np.ndarray:
        return np.array([self._s.vx, 0.0, self._s.vz])

    @velocity.setter
    def velocity(self, v) -> None:
        self._s.vx, self._s.vz = float(v[0]), float(v[-1])

    @property
    def acceleration(self) -> np.ndarray:
        return np.array([self._s.ax, 0.0, self._s.az])

    @property
    def yaw(self) -> float:
        """Facing yaw in radians, [-pi, pi)."""
        return self._s.yaw

    @yaw.setter
    def yaw(self, value: float) -> None:
        self._s.yaw = _wrap(float(value))

    @property
    def rotation(self) -> np.ndarray:
        """Facing as a quaternion (4,) about +Y."""
        return _yaw_quat(self._s.yaw)

    @property
    def angular_velocity(self) -> np.ndarray:
        """(3,) rad/s, about +Y."""
        return np.array([0.0, self._s.yaw_rate, 0.0])

    @property
    def gait(self) -> float:
        """Gait blend, 0 walk .. 1 run."""
        return self._s.gait

    @property
    def desired_velocity(self) -> np.ndarray:
        return np.array([self._s.goal_vx, 0.0, self._s.goal_vz])

    @property
    def desired_yaw(self) -> float:
        return self._s.goal_yaw

    @property
    def desired_rotation(self) -> np.ndarray:
        return _yaw_quat(self._s.goal_yaw)


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
        st = controller._s
        vx, vz, yaw, self.progress, self.done = self.goal((st.px, st.pz))
        controller.update_velocity_goal((vx, vz), yaw, dt)

    def predict(self, controller: Controller, frame_offsets=(20, 40, 60), fps: float = 60.0):
        """Future positions (K, 3) and rotations (K, 4) following the path: the controller is stepped
        on a copy from offset to offset, re-aiming at the path at each (the goal changes with position,
        so the constant-goal closed form alone would run straight past corners)."""
        c = controller.copy()
        st = c._s
        s = self.progress
        prev = 0.0
        pos, rot = [], []
        for f in frame_offsets:
            t = f / fps
            vx, vz, yaw, s, _ = self.goal((st.px, st.pz), s)
            c.update_velocity_goal((vx, vz), yaw, t - prev)
            prev = t
            pos.append((st.px, st.py, st.pz))
            rot.append((math.cos(0.5 * st.yaw), 0.0, math.sin(0.5 * st.yaw), 0.0))
        return np.array(pos), np.array(rot)
