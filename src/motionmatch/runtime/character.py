"""The runtime character: controller + matcher loop + inertialization + synchronization + touch-ups.

Each `step` (one frame, normally 1/60 s):
1. the controller (gamepad or path) advances the simulation object and predicts its trajectory;
2. every `search_interval`, at once on a sharp input change, and before the clip runs out, the
   database is searched with a query made of the playing frame's pose features and the desired
   trajectory expressed relative to the character; a jump starts an inertialized transition;
3. the database plays one frame; the inertializer adds the decaying offsets;
4. the character root integrates the (inertialized) root velocity of the animation, then is adjusted
   toward the simulation (limited by its own speed) and the simulation is clamped to a radius around it;
5. forward kinematics, then touch-ups (foot locking + leg IK).
Seeds: 000 sections 3.3-3.6, 001, 002 section 3.3, 004.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, asdict

import numba
import numpy as np

from ..kinematics import forward_kinematics
from ..scalar_quat import qlog, qmul, qrot
from ..rotations import (quat_from_scaled_angle_axis, quat_inv, quat_mul, quat_rotate,
                         quat_to_scaled_angle_axis, quat_normalize, quat_from_yaw)
from ..search import Searcher, frame_mask
from ..search.common import searchable_frames
from .controller import Controller, ControllerSettings, GamepadInput, PathFollower
from .inertialization import Inertializer
from .ik import FootLocker, _legs_pose_kernel, leg_chains
from .warping import (OrientationWarper, PoseWarpRig, SpeedWarper, WarpSettings, _frame_pose_kernel, advance_frame,
                      clip_speeds, output_pose, sample_pose, sample_values, scale_trajectory, slope_warp,
                      terrain_normal)

INERTIALIZATION_METHODS = ("spring", "quintic", "off")


def _shared(db, key, build):
    """A value computed once per database and shared by its characters."""
    cache = db.__dict__.setdefault("_runtime_cache", {})
    if key not in cache:
        cache[key] = build()
    return cache[key]


@numba.njit(cache=True)
def _velocity_kernel(pos, rot, last, fps, vel, ang, root_vel, root_ang):
    n, J = pos.shape[0], pos.shape[1]
    for f in range(n):
        # Forward difference inside the clip; backward at its last frame.
        a, b = (max(f - 1, 0), f) if last[f] else (f, f + 1)
        for j in range(J):
            for k in range(3):
                vel[f, j, k] = (pos[b, j, k] - pos[a, j, k]) * fps
            w, x, y, z = qmul(rot[b, j, 0], rot[b, j, 1], rot[b, j, 2], rot[b, j, 3],
                              rot[a, j, 0], -rot[a, j, 1], -rot[a, j, 2], -rot[a, j, 3])
            rx, ry, rz = qlog(w, x, y, z)
            ang[f, j, 0], ang[f, j, 1], ang[f, j, 2] = rx * fps, ry * fps, rz * fps
        # Root (simulation bone) motion in its own frame: what the character root integrates.
        qw, qx, qy, qz = rot[f, 0, 0], -rot[f, 0, 1], -rot[f, 0, 2], -rot[f, 0, 3]
        root_vel[f, 0], root_vel[f, 1], root_vel[f, 2] = qrot(qw, qx, qy, qz, vel[f, 0, 0], vel[f, 0, 1], vel[f, 0, 2])
        root_ang[f, 0], root_ang[f, 1], root_ang[f, 2] = qrot(qw, qx, qy, qz, ang[f, 0, 0], ang[f, 0, 1], ang[f, 0, 2])


def database_velocities(db):
    """Local linear (N,J,3) m/s and angular (N,J,3) rad/s velocities of every database frame, and the
    simulation bone's velocity and angular velocity in its own frame (N,3), float32."""
    n, J = db.positions.shape[:2]
    last = np.zeros(n, dtype=np.bool_)
    last[np.asarray(db.range_stops) - 1] = True
    vel = np.empty((n, J, 3), dtype=np.float32)
    ang = np.empty((n, J, 3), dtype=np.float32)
    root_vel = np.empty((n, 3), dtype=np.float32)
    root_ang = np.empty((n, 3), dtype=np.float32)
    _velocity_kernel(np.asarray(db.positions), np.asarray(db.rotations), last, float(db.fps), vel, ang,
                     root_vel, root_ang)
    return vel, ang, root_vel, root_ang


@dataclass
class CharacterSettings:
    """Live-tunable settings. Times in seconds, distances in metres, angles in degrees."""

    weights: dict = field(default_factory=dict)     # channel name -> weight (missing: schema default)
    search_interval: float = 0.1
    bias: float = 0.1                                # continuing-pose bias, in normalized cost units
    inertialization: str = "spring"                  # "spring" | "quintic" | "off"
    halflife: float = 0.1                            # spring inertialization halflife
    blend_time: float = 0.3                          # quintic inertialization blend time
    adjustment: bool = True
    adjustment_position_halflife: float = 0.1
    adjustment_rotation_halflife: float = 0.2
    adjustment_max_ratio: float = 0.5                # adjust at most this fraction of the root's own speed
    clamping: bool = True
    clamp_radius: float = 0.15
    clamp_angle_deg: float = 90.0
    foot_locking: bool = True
    foot_unlock_radius: float = 0.35                 # m; 0.2 let transitions unlock most Bandai steps
    foot_lock_halflife: float = 0.1
    ik: bool = True                                  # leg IK when foot locking or terrain needs it
    tag_filter: str | None = None
    end_exclude: int = 20
    search_backend: str = "aabb"
    no_rewind_frames: int = 30                       # never jump 1..N frames back in the playing clip
    sharp_change_speed: float = 0.6                  # m/s change of desired velocity forcing a search
    sharp_change_angle_deg: float = 35.0             # change of desired facing forcing a search
    # Orientation, stride and slope warping on; play-rate warping off by default: on the jlpm22 data it
    # raised foot sliding on runs (11 -> 16 cm/s) without better velocity tracking.
    warp: WarpSettings = field(default_factory=lambda: WarpSettings(play_rate=False))


def _warp_flag(name: str, doc: str):
    """A flat alias of a WarpSettings field, so UIs and command lines can set it like the others."""
    return property(lambda self: getattr(self.warp, name), lambda self, v: setattr(self.warp, name, v), doc=doc)


CharacterSettings.warp_orientation = _warp_flag("orientation", "orientation warping (strafe, backward)")
CharacterSettings.warp_stride = _warp_flag("stride", "stride warping (speed between the data's speeds)")
CharacterSettings.warp_play_rate = _warp_flag("play_rate", "play-rate warping")
CharacterSettings.warp_slope = _warp_flag("slope", "feet tilted to the ground normal on terrain")
CharacterSettings.warp_limit_deg = _warp_flag("orientation_limit_deg", "largest upper-body twist (degrees)")


class Character:
    """One motion-matched character over a Database (see module docstring)."""

    def __init__(self, db, settings: CharacterSettings | None = None,
                 controller_settings: ControllerSettings | None = None, start_frame: int | None = None):
        self.db = db
        self.settings = settings or CharacterSettings()
        self.controller = Controller(controller_settings)
        self.skeleton = db.skeleton
        self.channel_names = db.features.schema.names
        self.known_tags = sorted(db.known_tags)
        self._precompute()
        self._applied = {}
        self.apply_settings()
        self.reset(start_frame)

    # ------------------------------------------------------------------------------------------
    # set-up

    def _precompute(self):
        """Per-frame arrays the loop reads: local velocities and the root's own-frame motion."""
        db = self.db
        fps = db.fps
        # Shared by every character on this database (the app runs one per tab).
        self.vel, self.angvel, self.root_vel_local, self.root_angvel_local = _shared(
            db, "velocities", lambda: database_velocities(db))
        self._parents = np.asarray(db.skeleton.parents, dtype=np.int64)
        self._range_of = np.repeat(np.arange(len(db.range_starts)), db.range_stops - db.range_starts)
        self.slices = db.features.channel_slices
        self._traj = [(n_, s) for n_, s in self.slices.items() if n_.startswith("trajectory")]
        chans = {c.name: c for c in db.features.schema.channels}
        self._traj_offsets = sorted({o for c in chans.values() if c.kind.startswith("trajectory") for o in c.offsets})
        self._schema_channels = chans
        self.orient_warper = OrientationWarper(self.settings.warp)
        self.speed_warper = SpeedWarper(self.settings.warp)
        self.pose_rig = PoseWarpRig(db.roles, db.skeleton.parents)
        self.clip_speed = _shared(db, "clip_speed",
                                  lambda: clip_speeds(self.root_vel_local, db.range_starts, db.range_stops, fps))

    def apply_settings(self) -> None:
        """Apply changed settings (weights re-normalize the features and rebuild the search index)."""
        s = self.settings
        if s.inertialization not in INERTIALIZATION_METHODS:
            raise ValueError(f"inertialization: expected one of {INERTIALIZATION_METHODS}, got {s.inertialization!r}")
        fs = self.db.features
        weights = {c.name: float(s.weights.get(c.name, c.weight)) for c in fs.schema.channels}
        unknown = set(s.weights) - set(weights)
        if unknown:
            raise ValueError(f"unknown feature channel(s) {sorted(unknown)}; channels are {sorted(weights)}")
        key = (tuple(sorted(weights.items())), s.search_backend, int(s.end_exclude))
        if self._applied.get("key") != key:
            # Each character normalizes with its own weights (the database's FeatureSet is shared and
            # left alone); characters with the same weights share the normalized matrix and searcher.
            self._norm_scale, self._features_norm, self.searcher = _shared(
                self.db, ("search",) + key, lambda: self._build_search(weights, s.search_backend, s.end_exclude))
            self._norm_offset = fs.offset
            self._applied["tag_filter"] = object()  # force the mask below
        if self._applied.get("tag_filter") != s.tag_filter:
            self._mask = frame_mask(s.tag_filter, self.db.range_tags, self.db.range_starts, self.db.range_stops,
                                    self.db.num_frames) if s.tag_filter else None
            self._prepared = None if self._mask is None else self.searcher.prepare(self._mask)
            self._force_search = True
        method = s.inertialization if s.inertialization != "off" else "spring"
        old = getattr(self, "inertializer", None)
        if old is None or old.method != method:
            self.inertializer = Inertializer(self.db.num_joints, method, max(s.halflife, 1e-3), max(s.blend_time, 1e-3))
        else:
            old.halflife, old.blend_time = max(s.halflife, 1e-3), max(s.blend_time, 1e-3)
        self.orient_warper.settings = self.speed_warper.settings = s.warp
        self._applied.update(key=key, tag_filter=s.tag_filter)
        self._setup_touchups()

    def _build_search(self, weights: dict, backend: str, end_exclude: int):
        """(scale per dimension, normalized features (N,F) float32, Searcher) for channel weights."""
        fs = self.db.features
        w = np.empty(fs.raw.shape[1])
        for name, sl in fs.channel_slices.items():
            w[sl] = weights[name]
        scale = fs.std / w
        normalized = ((fs.raw - fs.offset) / scale).astype(np.float32)
        return scale, normalized, Searcher(normalized, self.db.range_starts, self.db.range_stops,
                                           backend=backend, end_exclude=end_exclude)

    def _normalize(self, raw: np.ndarray) -> np.ndarray:
        return ((raw - self._norm_offset) / self._norm_scale).astype(np.float32)

    def _setup_touchups(self):
        from .terrain import GroundSmoother
        s = self.settings
        old = getattr(self, "foot_lockers", None)
        if old is None or (old[0].unlock_radius, old[0].halflife) != (s.foot_unlock_radius, s.foot_lock_halflife):
            self.foot_lockers = [FootLocker(s.foot_unlock_radius, s.foot_lock_halflife) for _ in range(2)]
        if not s.foot_locking:
            for fl in self.foot_lockers:
                fl.reset()
        self.terrain = getattr(self, "terrain", None)
        # Per leg: upper leg, foot, toe joints and the reach (with a small buffer) from bone lengths.
        roles, off = self.db.roles, self.db.skeleton.offsets
        self._legs = []
        for side in ("left", "right"):
            up, lo, ft = roles[f"{side}_upper_leg"], roles[f"{side}_lower_leg"], roles[f"{side}_foot"]
            reach = 0.995 * float(np.linalg.norm(self.db.positions[0, lo]) + np.linalg.norm(self.db.positions[0, ft]))
            self._legs.append((up, ft, roles[f"{side}_toe"], reach))
        self._leg_chains = leg_chains(roles)
        if getattr(self, "_hips_drop", None) is None:
            self._hips_drop = GroundSmoother(0.08, 0.0)
            self._ground = GroundSmoother(0.15)

    def reset(self, start_frame: int | None = None, position=(0.0, 0.0, 0.0), yaw: float = 0.0) -> None:
        """Stand at `position` facing `yaw`, playing `start_frame` (default: the first searchable frame)."""
        db = self.db
        if start_frame is None:
            searchable = np.flatnonzero(searchable_frames(db.range_starts, db.range_stops, db.num_frames,
                                                          self.settings.end_exclude, self._mask))
            start_frame = int(searchable[0]) if len(searchable) else 0
        self.frame = int(start_frame)
        self.frame_frac = 0.0        # fractional playback position (play-rate warping)
        self.rate, self.stride, self.warp_angle = 1.0, 1.0, 0.0
        self.root_velocity = np.zeros(3)
        self._root_vxz = (0.0, 0.0)
        self._slope_weight = [0.0, 0.0]
        self.orient_warper.reset()
        self.speed_warper.reset()
        self.time = 0.0
        self.controller.reset(position, yaw)
        self.driver = None
        self.root_pos = np.array(position, dtype=np.float64)
        self.root_yaw = float(yaw)
        self.local_pos = db.positions[self.frame].astype(np.float64)
        self.local_rot = db.rotations[self.frame].astype(np.float64)
        self.local_vel = self.vel[self.frame].astype(np.float64)
        self.local_angvel = self.angvel[self.frame].astype(np.float64)
        self.inertializer.reset()
        self._search_timer = 0.0
        self._force_search = True
        self._last_goal = None
        self.last_transition = None
        self.transitions = 0
        self.last_search_us = 0.0
        self.last_frame_us = 0.0
        self.channel_costs = {}
        self.last_cost = float("nan")
        self.last_search = None
        self._playing_clip = None
        self.contacts = np.zeros(2, dtype=bool)
        self.locked = np.zeros(2, dtype=bool)
        for fl in self.foot_lockers:
            fl.reset()
        self._hips_drop.height, self._hips_drop.velocity = 0.0, 0.0
        self._ground.height, self._ground.velocity = None, 0.0
        self._pose_output()

    def set_path(self, points, speed: float, loop: bool = False) -> None:
        """Follow a path of (x, z) waypoints in metres at `speed` m/s instead of the gamepad."""
        self.driver = PathFollower(points, speed, loop)

    def set_driver(self, driver) -> None:
        """Drive the controller from an object with step(controller, t, dt) and
        predict(controller, offsets, fps) (a scenario's driver or a PathFollower); None = gamepad."""
        self.driver = driver

    def set_tag_filter(self, expr: str | None) -> None:
        """Switch the allowed clips at runtime (e.g. a style); the change is inertialized."""
        self.settings.tag_filter = expr or None
        self.apply_settings()

    # ------------------------------------------------------------------------------------------
    # the loop

    def _query(self) -> np.ndarray:
        """Raw query: the playing frame's pose features, trajectory from the controller relative to the
        character root (so a lagging character asks to catch up). Plain-float maths: it runs at 10 Hz+
        per character and numpy calls on 3-vectors cost more than the search."""
        q = self.db.features.raw[self.frame].astype(np.float64)
        if self.driver is not None:
            pos, rot = self.driver.predict(self.controller, self._traj_offsets, self.db.fps)
        else:
            pos, rot = self.controller.predict(self._traj_offsets, self.db.fps)
        self.desired_trajectory = pos
        w = self.settings.warp
        qpos = pos
        if w.orientation:
            # Strafing: ask for motion facing the travel direction; the pose warp turns it back.
            rot = self.orient_warper.query_rotations(pos, rot, self.controller.position,
                                                     [o / self.db.fps for o in self._traj_offsets])
        if w.play_rate or w.stride:
            # Slow requests ask for the slowest well-covered speed; play rate and stride slow it down.
            st = self.controller._s
            qpos = scale_trajectory(pos, self.controller.position,
                                    self.speed_warper.query_scale(math.hypot(st.goal_vx, st.goal_vz)))
        root_yaw = self.root_yaw
        c, sn = math.cos(root_yaw), math.sin(root_yaw)
        rx, rz = float(self.root_pos[0]), float(self.root_pos[2])
        rel, fwd = {}, {}
        qp, qr = np.asarray(qpos, dtype=np.float64).tolist(), np.asarray(rot, dtype=np.float64).tolist()
        for i, o in enumerate(self._traj_offsets):
            p, r = qp[i], qr[i]
            dx, dz = p[0] - rx, p[2] - rz
            rel[o] = (dx * c - dz * sn, dx * sn + dz * c)          # into the root's frame
            yaw = 2.0 * math.atan2(r[2], r[0]) - root_yaw
            fwd[o] = (math.sin(yaw), math.cos(yaw))
        for name, sl in self._traj:
            ch = self._schema_channels[name]
            src = rel if ch.kind == "trajectory_position" else fwd
            vals = [v for o in ch.offsets for v in src[o]]
            q[sl] = vals
        return q

    def _needs_search(self, dt) -> bool:
        s = self.settings
        if self._playing_clip is not None:
            # play_clip: no searches until the clip is about to run out.
            if self.frame + 1 < self.db.range_stops[self._playing_clip] - 1:
                return False
            self._playing_clip = None
            self._force_search = True
        self._search_timer -= dt
        st = self.controller._s
        goal = (st.goal_vx, st.goal_vz, st.goal_yaw)    # desired velocity (x, z) and facing
        sharp = False
        if self._last_goal is not None and not (self._force_search or self._search_timer <= 0.0):
            last = self._last_goal
            dx, dz = goal[0] - last[0], goal[1] - last[1]
            # |dv| exactly as numpy's norm, computed only near the threshold (rounding differs).
            d2, v = dx * dx + dz * dz, s.sharp_change_speed
            if v > 0.0 and d2 > 1.01 * v * v:
                sharp = True
            elif v <= 0.0 or d2 >= 0.99 * v * v:
                sharp = float(np.linalg.norm(np.array((dx, 0.0, dz)))) > v
            if not sharp:
                dyaw = abs(math.remainder(goal[2] - last[2], 2 * math.pi))
                sharp = math.degrees(dyaw) > s.sharp_change_angle_deg
        if self._force_search or sharp or self._search_timer <= 0.0:
            self._last_goal = goal
            return True
        r = self._range_of[self.frame]
        return self.frame + 1 >= self.db.range_stops[r] - 1   # about to run out of clip

    def _search(self):
        s = self.settings
        t0 = time.perf_counter()
        raw = self._query()
        q = self._normalize(raw)
        self.last_query = q
        best, cost = self.searcher.search(q, current=self.frame, bias=s.bias, mask=self._prepared)
        self.last_search_us = (time.perf_counter() - t0) * 1e6
        self._search_timer = s.search_interval
        self._force_search = False
        if best < 0:
            return
        d = q - self._features_norm[best]
        d *= d
        self.channel_costs = {n: float(d[sl].sum()) for n, sl in self.slices.items()}
        self.last_cost = cost
        # A small jump back in the same clip replays what was just shown: a stutter loop (seen on
        # slow walks, where a decelerating clip keeps matching its own earlier frames).
        rewind = 0 < self.frame - best <= s.no_rewind_frames and self._range_of[best] == self._range_of[self.frame]
        jumped = best != self.frame and not rewind
        self._record_search(q, best, cost, jumped)
        if jumped:
            self._transition(best)

    def _record_search(self, q: np.ndarray, best: int, cost: float, jumped: bool) -> None:
        """What debug()["search"] reports about the search just made (for inspectors)."""
        s = self.settings
        cur = self.frame
        searchable = self.searcher.searchable if self._prepared is None else self._prepared.valid
        cont = None
        if searchable[cur]:
            dc = q - self._features_norm[cur]
            # Sequential float32 sum: the search's own (canonical) cost of continuing.
            cont = float(np.cumsum(dc * dc, dtype=np.float32)[-1])
        self.last_search = {"query": q.tolist(), "frame": int(best), "cost": float(cost), "current": int(cur),
                            "continue_cost": cont, "bias": float(s.bias), "tag_filter": s.tag_filter,
                            "jumped": bool(jumped), "t": float(self.time)}

    def _transition(self, to: int):
        # Source and destination as they would play: fractional frame, velocities at the play rate.
        src_pos, src_rot, src_vel, src_ang = self._anim_pose(self.frame + self.frame_frac, self.rate)
        dst_pos, dst_rot, dst_vel, dst_ang = self._anim_pose(float(to), self.rate)
        if self.settings.inertialization == "off":
            self.inertializer.reset()
        else:
            # The inertializer carries running offsets over, so the output continues from the screen.
            self.inertializer.transition(src_pos, src_vel, src_rot, src_ang, dst_pos, dst_vel, dst_rot, dst_ang)
        self.last_transition = {"time": round(self.time, 4), "from": int(self.frame), "to": int(to)}
        self.transitions += 1
        self.frame = int(to)
        self.frame_frac = 0.0

    def _anim_pose(self, f: float, rate: float = 1.0):
        """Local pose at (fractional) database frame f, with the root expressed as motion in its own
        frame (position 0, identity rotation, local velocities) so clips far apart in the world blend.
        Velocities are scaled by the play rate."""
        i = int(f)
        if f == i:
            J = self.db.num_joints
            pos, rot, vel, ang = np.empty((J, 3)), np.empty((J, 4)), np.empty((J, 3)), np.empty((J, 3))
            _frame_pose_kernel(self.db.positions, self.db.rotations, self.vel, self.angvel, self.root_vel_local,
                               self.root_angvel_local, i, float(rate), pos, rot, vel, ang)
            return pos, rot, vel, ang
        stop = int(self.db.range_stops[self._range_of[i]])
        pos, rot = sample_pose(self.db.positions, self.db.rotations, f, stop)
        vel = sample_values(self.vel, f, stop)
        ang = sample_values(self.angvel, f, stop)
        vel[0] = sample_values(self.root_vel_local, f, stop)
        ang[0] = sample_values(self.root_angvel_local, f, stop)
        pos[0] = 0.0
        rot[0] = (1.0, 0.0, 0.0, 0.0)
        if rate != 1.0:
            vel *= rate
            ang *= rate
        return pos, rot, vel, ang

    def step(self, inp: GamepadInput | None = None, dt: float = 1.0 / 60.0) -> None:
        """Advance one frame: controller, matching, playback, inertialization, root, touch-ups."""
        t0 = time.perf_counter()
        s = self.settings
        ctrl = self.controller
        tc0 = time.perf_counter()
        if self.driver is not None:
            self.driver.step(ctrl, self.time, dt)
        else:
            ctrl.update(inp or GamepadInput(), dt)
        st = ctrl._s
        w = s.warp
        if w.orientation:
            self.orient_warper.plan(st.goal_yaw, st.goal_vx, st.goal_vz, st.yaw, st.vx, st.vz)
        self.t_controller_us = (time.perf_counter() - tc0) * 1e6

        self.t_search_us = 0.0
        if self._needs_search(dt):
            self._search()
            self.t_search_us = self.last_search_us

        # Play forward at the play rate (stay on the last frame of a clip; the search above moves on).
        ti0 = time.perf_counter()
        sim_speed = math.hypot(st.vx, st.vz)
        if w.play_rate or w.stride:
            rate, stride = self.speed_warper.update(sim_speed, float(self.clip_speed[self.frame]), dt)
            self.rate = rate if w.play_rate else 1.0
            self.stride = stride if w.stride else 1.0
        else:
            self.rate = self.stride = 1.0
        stop = int(self.db.range_stops[self._range_of[self.frame]])
        self.frame, self.frame_frac = advance_frame(self.frame, self.frame_frac, self.rate, stop)
        pos, rot, vel, ang = self._anim_pose(self.frame + self.frame_frac, self.rate)
        if s.inertialization == "off":
            out_p, out_v, out_r, out_w = pos, vel, rot, ang
        else:
            out_p, out_v, out_r, out_w = self.inertializer.update(pos, vel, rot, ang, dt)
        self.t_inertialize_us = (time.perf_counter() - ti0) * 1e6

        # Root: integrate the animation's own root motion from the character's current transform.
        # The root is yaw-only (the simulation bone), so this is scalar maths: numpy calls on 3-vectors
        # would cost more than the rest of the frame.
        tp0 = time.perf_counter()
        c, sn = math.cos(self.root_yaw), math.sin(self.root_yaw)
        lvx, lvz = float(out_v[0, 0]) * self.stride, float(out_v[0, 2]) * self.stride
        vx, vz = lvx * c + lvz * sn, -lvx * sn + lvz * c
        yaw_rate = float(out_w[0, 1])
        rp = self.root_pos
        rx, ry, rz = rp.tolist()
        rx += vx * dt
        rz += vz * dt
        self.root_yaw = math.remainder(self.root_yaw + yaw_rate * dt, 2 * math.pi)
        self.root_velocity = np.array((vx, 0.0, vz))
        self._root_vxz = (vx, vz)
        rx, rz = self._synchronize(math.hypot(vx, vz), yaw_rate, dt, rx, rz)
        rp[0], rp[2] = rx, rz
        self.warp_angle = self.orient_warper.update(st.yaw, self.root_yaw, sim_speed, dt) if w.orientation else 0.0

        self.local_pos, self.local_rot = out_p, out_r
        self.local_vel, self.local_angvel = out_v, out_w
        self.contacts = self.db.contacts[self.frame]
        self._pose_output(dt)
        self.t_output_us = (time.perf_counter() - tp0) * 1e6
        self.time += dt
        self.last_frame_us = (time.perf_counter() - t0) * 1e6

    def _synchronize(self, speed: float, yaw_rate: float, dt: float, rx: float, rz: float) -> tuple[float, float]:
        """Adjustment of the character toward the simulation (limited by the root's own speed, so a
        standing character is never dragged) and clamping of the simulation to a radius around it.
        rx, rz: the root's ground position (metres); returns the adjusted one (plain floats: this runs
        every frame and numpy scalars cost more than the maths)."""
        s = self.settings
        st = self.controller._s   # scalar state of the simulation object
        # The root turns toward the travel-matched facing when strafing (the warp shows the rest).
        goal = self.orient_warper.root_goal_yaw if s.warp.orientation else st.yaw
        if s.adjustment:
            dx, dz = st.px - rx, st.pz - rz
            k = 1.0 - 0.5 ** (dt / max(s.adjustment_position_halflife, 1e-4))
            sx, sz = dx * k, dz * k
            n = math.hypot(sx, sz)
            limit = s.adjustment_max_ratio * speed * dt
            if n > limit:
                sx, sz = sx * limit / n, sz * limit / n
            rx += sx
            rz += sz
            dyaw = math.remainder(goal - self.root_yaw, 2 * math.pi)
            kr = 1.0 - 0.5 ** (dt / max(s.adjustment_rotation_halflife, 1e-4))
            ylimit = s.adjustment_max_ratio * (abs(yaw_rate) + speed) * dt
            self.root_yaw = math.remainder(self.root_yaw + max(-ylimit, min(ylimit, dyaw * kr)), 2 * math.pi)
        if s.clamping:
            dx, dz = st.px - rx, st.pz - rz
            dist = math.hypot(dx, dz)
            if dist > s.clamp_radius:
                st.px = rx + dx * s.clamp_radius / dist
                st.pz = rz + dz * s.clamp_radius / dist
            dyaw = math.remainder(goal - self.root_yaw, 2 * math.pi)
            lim = math.radians(s.clamp_angle_deg)
            if abs(dyaw) > lim:
                st.yaw = math.remainder(st.yaw - (dyaw - math.copysign(lim, dyaw)), 2 * math.pi)
        return rx, rz

    @property
    def facing_yaw(self) -> float:
        """The displayed facing (radians): the root's yaw plus the orientation warp (the upper body)."""
        return math.remainder(self.root_yaw + self.warp_angle, 2 * math.pi)

    @property
    def root_rot(self) -> np.ndarray:
        """Character root rotation (4,), about +Y."""
        h = 0.5 * self.root_yaw
        return np.array((math.cos(h), 0.0, math.sin(h), 0.0))

    # ------------------------------------------------------------------------------------------
    # output

    def _pose_output(self, dt: float = 0.0):
        rp = self.root_pos
        if self.terrain is not None:
            # The root (and so the whole body) rides on the smoothed ground height under it.
            rp[1] = self._ground.update(float(self.terrain.height(rp[0], rp[2])), dt)
        angle = self.warp_angle
        # Orientation warp: the lower body turns to the displayed facing + travel offset, the spine
        # twists back so the upper body keeps the desired facing. One compiled call with the FK.
        if angle != 0.0:
            lp, lr, gp, gr = output_pose(self.local_pos, self.local_rot, rp, 0.5 * (self.root_yaw + angle),
                                         angle, self.pose_rig, self._parents)
        else:
            lp, lr, gp, gr = output_pose(self.local_pos, self.local_rot, rp, 0.5 * self.root_yaw, None,
                                         self.pose_rig, self._parents)
        self.locked = np.zeros(2, dtype=bool)
        striding = abs(self.stride - 1.0) > 1e-3
        self._before_touchups = gp
        if self.settings.ik and (self.settings.foot_locking or self.terrain is not None or striding):
            self._before_touchups = gp.copy()     # the touch-ups below work in place
            lp, lr, gp, gr = self._touchups(lp, lr, gp, gr, dt)
        self.out_local_pos, self.out_local_rot = lp, lr
        self.global_positions, self.global_rotations = gp, gr

    def set_terrain(self, terrain, halflife: float = 0.15) -> None:
        """Walk on a Heightfield (None = flat ground): the root follows its smoothed height and the
        leg IK puts the feet on it."""
        from .terrain import GroundSmoother
        self.terrain = terrain
        self._ground = GroundSmoother(halflife)

    def _touchups(self, lp, lr, gp, gr, dt):
        """Foot locking and terrain: ankle targets for the leg IK, hips lowered when a leg cannot reach.

        The lock holds the toe (the joint the contact labels and the sliding metric look at); the
        ankle target keeps the animated foot's shape: ankle + (toe target - toe).
        lp, lr, gp, gr are this frame's own arrays: they are updated in place and returned."""
        base = float(lp[0, 1])              # the root's height: the animation's ground level now
        terrain = self.terrain
        locking = self.settings.foot_locking
        targets, ground = [], []
        drop = 0.0
        shift = None
        # Scalar maths on plain lists on purpose: numpy calls and indexing on 3-vectors cost more
        # than the IK itself.
        P = gp.tolist()
        vx, vz = self._root_vxz
        if abs(self.stride - 1.0) > 1e-3 and math.hypot(vx, vz) > 0.05:
            # Stride warping: feet displacement along the travel scaled about the root (as
            # stride_warp_targets, on floats).
            yaw = math.atan2(vx, vz)
            tx, tz = math.sin(yaw), math.cos(yaw)
            cx, cz = self.root_pos[[0, 2]].tolist()
            k = self.stride - 1.0
            shift = []
            for leg in self._legs:
                fx, _, fz = P[leg[1]]
                along = (fx - cx) * tx + (fz - cz) * tz
                shift.append(((fx + k * along * tx) - fx, (fz + k * along * tz) - fz))
        contacts = self.contacts.tolist()
        for i, (up, ft, toe_j, reach) in enumerate(self._legs):
            ax, ay, az = P[toe_j]
            tx, ty, tz = ax, ay, az
            sx = sz = 0.0
            if shift is not None:
                sx, sz = shift[i]
                tx, tz = tx + sx, tz + sz
            g_toe = None
            if terrain is not None:
                # Animated heights are relative to flat ground at the root's height; move each foot
                # onto the terrain under it instead.
                g_toe = float(terrain.height(tx, tz))
                ty += g_toe - base
            if locking:
                locker = self.foot_lockers[i]
                t = locker.update_xyz(contacts[i], tx, ty, tz, dt)
                self.locked[i] = locker.locked
                dx, dy, dz = t[0] - ax, t[1] - ay, t[2] - az
            else:
                dx, dy, dz = sx, ty - ay, sz
            fx, fy, fz = P[ft]
            target = (fx + dx, fy + dy, fz + dz)
            targets.append(target)
            ground.append(g_toe)
            # Hips come down when a target is out of reach (never hyper-extend a knee).
            ux, uy, uz = P[up]
            hx, hy, hz = target[0] - ux, target[1] - uy, target[2] - uz
            horiz = hx * hx + hz * hz
            if hx * hx + hy * hy + hz * hz > reach * reach and horiz < reach * reach:
                drop = max(drop, -hy - math.sqrt(reach * reach - horiz))
        drop = self._hips_drop.update(max(drop, 0.0), dt) if dt > 0 else (self._hips_drop.height or 0.0)
        drop = drop if drop > 1e-5 else 0.0
        w = self.settings.warp
        if terrain is not None and w.slope:
            if drop:
                lp[0, 1] -= drop
                gp, gr = forward_kinematics(lp, lr, self._parents)
                drop = 0.0
            # Slope warping: planted feet tilt to the ground normal (blended in and out with contact).
            k = 1.0 - 0.5 ** (dt / 0.05) if dt > 0 else 1.0
            for i, (_, ft, toe_j, _) in enumerate(self._legs):
                self._slope_weight[i] += (float(self.contacts[i]) - self._slope_weight[i]) * k
                n = terrain_normal(terrain.height, float(targets[i][0]), float(targets[i][2]))
                gr[ft] = slope_warp(gr[ft], n, self._slope_weight[i], math.radians(w.slope_max_deg))
                # Keep the toe where it was aimed (locked or on the ground): the tilt pivots about it.
                toe_target = np.asarray(targets[i]) + (gp[toe_j] - gp[ft])
                targets[i] = (toe_target - quat_rotate(gr[ft], lp[toe_j])).tolist()
        # Both legs' IK and the pose's forward kinematics (after the hips drop) in one compiled call.
        (lx, ly, lz), (rx, ry, rz) = targets
        lg, rg = ground
        _legs_pose_kernel(lp, lr, gp, gr, self._parents, self._leg_chains, lx, ly, lz, rx, ry, rz,
                          (lg is not None) | ((rg is not None) << 1), 0.0 if lg is None else lg,
                          0.0 if rg is None else rg, drop)
        return lp, lr, gp, gr

    def pose_before_touchups(self) -> np.ndarray:
        """(J, 3) world joint positions (m) after inertialization and warping of the pose, before foot
        locking, leg IK and the terrain's hips drop."""
        return self._before_touchups.copy()

    def pose_before_inertialization(self) -> np.ndarray:
        """(J, 3) world joint positions (m) of the raw database pose now playing (no inertialization
        offsets, no touch-ups), placed at the character root."""
        pos, rot, _, _ = self._anim_pose(self.frame + self.frame_frac)
        pos[0] = self.root_pos
        rot[0] = self.root_rot
        gp, _ = forward_kinematics(pos, rot, self._parents)
        return gp

    def play_clip(self, range_index: int | None, offset_frames: int = 0) -> None:
        """Jump (inertialized) to frame `offset_frames` of clip `range_index` and play it: searches are
        suspended until the clip is about to end. None resumes searching at once."""
        if range_index is None:
            self._playing_clip = None
            self._force_search = True
            return
        r = int(range_index)
        if not 0 <= r < len(self.db.range_starts):
            raise ValueError(f"clip index {r} outside [0, {len(self.db.range_starts)})")
        start, stop = int(self.db.range_starts[r]), int(self.db.range_stops[r])
        off = int(offset_frames)
        if not 0 <= off < stop - start - 1:
            raise ValueError(f"offset {off} outside clip {self.db.range_names[r]!r} (0..{stop - start - 2} frames)")
        self._transition(start + off)
        self._playing_clip = r

    def local_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """Output local pose (J,3)/(J,4) with joint 0 the character root in the world."""
        return self.out_local_pos.copy(), self.out_local_rot.copy()

    def debug(self) -> dict:
        """State for overlays and HUDs (lists of floats, JSON-ready). Called every frame by the app,
        so it is plain-float maths."""
        db = self.db
        roles = db.roles
        ctrl = self.controller
        st = ctrl._s
        c, sn = math.cos(self.root_yaw), math.sin(self.root_yaw)
        rx, ry, rz = (float(v) for v in self.root_pos)

        def to_world(x, y, z):
            return [round(rx + x * c + z * sn, 4), round(ry + y, 4), round(rz - x * sn + z * c, 4)]

        raw = db.features.raw[self.frame].tolist()
        matched = []
        for name, sl in self._traj:
            if self._schema_channels[name].kind == "trajectory_position":
                v = raw[sl]
                matched = [to_world(v[k], 0.0, v[k + 1]) for k in range(0, len(v), 2)]
        feet = {}
        for i, side in enumerate(("left", "right")):
            sl = self.slices.get(f"{side}_foot_velocity")
            if sl is not None:
                vx, vy, vz = raw[sl]
                vel = [round(vx * c + vz * sn, 3), round(vy, 3), round(-vx * sn + vz * c, 3)]
            else:
                vel = [0.0, 0.0, 0.0]
            feet[side] = {"position": [round(float(x), 4) for x in self.global_positions[roles[f"{side}_foot"]]],
                          "velocity": vel, "contact": bool(self.contacts[i]), "locked": bool(self.locked[i])}
        desired = getattr(self, "desired_trajectory", None)
        r = int(self._range_of[self.frame])
        return {
            "sim_position": [round(st.px, 4), round(st.py, 4), round(st.pz, 4)],
            "sim_direction": [round(math.sin(st.yaw), 4), 0.0, round(math.cos(st.yaw), 4)],
            "desired_trajectory": [] if desired is None else [[round(float(x), 4) for x in p] for p in desired],
            "matched_trajectory": matched,
            "feet": feet,
            "clip": db.range_names[r],
            "frame": int(self.frame),
            "clip_frame": int(self.frame - db.range_starts[r]),
            "style": self.settings.tag_filter,
            "tags": db.range_tags[r],
            "search_us": round(self.last_search_us, 1),
            "frame_us": round(self.last_frame_us, 1),
            "channel_costs": {k: round(v, 4) for k, v in self.channel_costs.items()},
            "last_transition": self.last_transition,
            "search": self.last_search,
        }


def warm_up(db, frames: int = 120) -> None:
    """Compile (or load from numba's cache) every kernel a character uses, so the first live frame
    does not stall: walk, strafe, run and stop for `frames` frames on a throw-away character."""
    ch = Character(db)
    moves = (GamepadInput(move=(0.0, 1.0)), GamepadInput(move=(1.0, 0.0), strafe=True),
             GamepadInput(move=(0.0, 0.5)), GamepadInput(move=(-1.0, 0.0), run=True), GamepadInput())
    for k in range(frames):
        ch.step(moves[(k * len(moves)) // frames])
    ch.debug()
