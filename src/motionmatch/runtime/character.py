"""The runtime character: a crowd of one (runtime/crowd.py runs the per-frame logic), with the
single-character conveniences: gamepad input objects, scenario/path drivers, timings and debug state.
"""
from __future__ import annotations

import math
import time

import numpy as np

from ..maths.kinematics import forward_kinematics
from .controller import PX, PY, PZ, YAW, ControllerSettings, GamepadInput, Sticks
from .crowd import Crowd
from .input_log import InputLog, obstacles_dict, settings_dict, terrain_dict
from .playback import animation_pose
from . import settings as S
from .settings import CharacterSettings  # noqa: F401  (callers import it from here)


def _agent0(array: str, kind, doc: str) -> property:
    """A read-only Character property: agent 0's row of the crowd array `array`, as `kind` (int,
    float; np.copy for a copy; None for a view of the crowd's state)."""
    if kind is None:
        return property(lambda self: getattr(self.crowd, array)[0], doc=doc)
    return property(lambda self: kind(getattr(self.crowd, array)[0]), doc=doc)


# name: (crowd array, kind, doc). Views change with the next step; copies do not.
_STATE = {
    "frame": ("frame", int, "Database frame playing."),
    "frame_frac": ("frame_frac", float, "Fraction (0..1) of the way to the next database frame."),
    "rate": ("rate", float, "Play rate (1 = the database's speed)."),
    "stride": ("stride", float, "Stride warping scale (1 = none)."),
    "warp_angle": ("warp_angle", float, "Orientation warp between lower and upper body, radians."),
    "transitions": ("transitions", int, "Transitions since the last reset."),
    "last_cost": ("last_cost", float, "Cost of the last search's best frame."),
    "last_query": ("last_query", None, "(F,) float32 normalized query of the last search (a view)."),
    "root_pos": ("root_pos", None, "(3,) character root, metres (a view of the crowd's state)."),
    "root_yaw": ("root_yaw", float, "Root yaw, radians (0 faces +Z)."),
    "root_velocity": ("root_vel", np.copy, "(3,) root velocity, m/s."),
    "contacts": ("contacts", np.copy, "(2,) bool: left, right foot contact of the playing frame."),
    "locked": ("locked", np.copy, "(2,) bool: left, right foot locked."),
    "global_positions": ("global_positions", None, "(J, 3) world joint positions after touch-ups (float32)."),
    "global_rotations": ("global_rotations", None,
                         "(J, 4) world joint rotations (w, x, y, z) after touch-ups (float32)."),
}


# The stick at rest (step(None)), read only.
_NO_INPUT = GamepadInput()


class Character:
    """One motion-matched character over a Database: a Crowd of one agent."""

    def __init__(self, db, settings: CharacterSettings | None = None,
                 controller_settings: ControllerSettings | None = None, start_frame: int | None = None):
        self.db = db
        self.settings = settings or CharacterSettings()
        self.crowd = Crowd(db, 1, self.settings, None if start_frame is None else [start_frame], controller_settings)
        self.controller = self.crowd.controller(0)
        # The gamepad's input as the crowd's sticks: one row, written each step.
        self._sticks = Sticks(np.zeros((1, 2)), np.zeros(1, dtype=np.bool_), np.zeros(1, dtype=np.bool_),
                              np.zeros((1, 2)))
        self.skeleton = db.skeleton
        self.channel_names = db.features.schema.names
        self.known_tags = sorted(db.known_tags)
        self.slices = db.features.channel_slices
        self.vel, self.angvel = self.crowd.velocities[0], self.crowd.velocities[1]
        self.driver = None
        self.input_log: InputLog | None = None     # start_input_log()
        self._reset_counters()

    def _reset_counters(self):
        self.last_transition = None
        self.last_search_us = self.last_frame_us = 0.0
        self.t_controller_us = self.t_search_us = self.t_inertialize_us = self.t_output_us = 0.0
        self.t_search_calls_us = 0.0
        self._matched = None        # (best frame, normalized query, SearchSet) of the last search that found a frame
        self.desired_trajectory = None

    # ------------------------------------------------------------------------------------------
    # set-up

    @property
    def searcher(self):
        """The Searcher of this character's weights (shared with characters of the same weights)."""
        return self.crowd.search_sets[0].searcher

    @property
    def features_norm(self) -> np.ndarray:
        """(N, F) float32 database features normalized with this character's weights."""
        return self.crowd.search_sets[0].features

    def apply_settings(self) -> None:
        """Apply changed settings (weights re-normalize the features and rebuild the search index)."""
        self.crowd.apply_settings()
        log = self.input_log
        if log is not None:
            d = settings_dict(self.settings)
            if d != self._logged_settings:
                self._logged_settings = d
                log.event("settings", d)

    def start_input_log(self, seed=None, start_frame: int | None = None, position=(0.0, 0.0, 0.0),
                        yaw: float = 0.0) -> InputLog:
        """Reset (as reset()) and record every input and call from now on, for `motionmatch synth
        --replay` (docs/REPLAY.md). A later reset() starts a new log from that reset. seed: stored
        with the log for drivers that draw random numbers (the runtime draws none)."""
        self.reset(start_frame, position, yaw)
        start = {"frame": start_frame, "position": [float(c) for c in position], "yaw": float(yaw)}
        self.input_log = InputLog(self.db, "character", 1, [self.settings], self.crowd.controller_settings, start,
                                  seed)
        self._logged_settings = settings_dict(self.settings)
        return self.input_log

    def stop_input_log(self) -> InputLog | None:
        """Stop recording; returns the log (None if none was running)."""
        log, self.input_log = self.input_log, None
        return log

    def _logged(self, name: str, value) -> None:
        if self.input_log is not None:
            self.input_log.event(name, value)

    def reset(self, start_frame: int | None = None, position=(0.0, 0.0, 0.0), yaw: float = 0.0) -> None:
        """Stand at `position` facing `yaw`, playing `start_frame` (default: the first searchable frame)."""
        self.crowd.apply_settings()
        self.crowd.reset_agent(0, position, yaw, start_frame)
        self.crowd.reset_clock()
        self.set_driver(None)
        self._reset_counters()
        log = self.input_log
        if log is not None:         # the state after a reset depends on its arguments only: a new log
            self.input_log = None
            self.start_input_log(log.seed, start_frame, position, yaw)

    def set_driver(self, driver) -> None:
        """Drive the controller from an object with step(controller, t, dt) and, if it knows the trajectory
        ahead, predict(controller, offsets, fps) (a scenario's driver or a PathFollower: Crowd.set_driver);
        None = gamepad.
        An input log holds drivers with a replay_spec() method (replay.ScenarioDriver)."""
        self.driver = driver
        self.crowd.set_driver(0, driver)
        if self.input_log is not None:
            if driver is None or hasattr(driver, "replay_spec"):
                self._logged("driver", None if driver is None else driver.replay_spec())
            else:
                self.input_log.refuse(f"a {type(driver).__name__} driver has no replay_spec()")

    def set_tag_filter(self, expr: str | None) -> None:
        """Switch the allowed clips at runtime (e.g. a style); the change is inertialized."""
        self.settings.tag_filter = expr or None
        self.apply_settings()       # logged as a settings change

    def use_set(self, spec, interrupt: bool = True) -> None:
        """Search another set of the database (database_sets.SetSpec); interrupt: now, else at the next
        search (Crowd.use_set)."""
        self.crowd.use_set(0, spec, interrupt)
        self.settings = self.crowd.settings[0]
        if self.input_log is not None:      # one use_set entry: replaying it makes the same settings
            self._logged_settings = settings_dict(self.settings)
            self._logged("use_set", [{"name": spec.name, "tags": spec.tags, "weights": dict(spec.weights)},
                                     bool(interrupt)])

    def set_obstacles(self, obstacles) -> None:
        """Static obstacles (obstacles.Obstacles, None = none) the controller steers around."""
        self.crowd.set_obstacles(obstacles)
        self._logged("obstacles", obstacles_dict(obstacles) if self.input_log is not None else None)

    def set_terrain(self, terrain, halflife: float = 0.15) -> None:
        """Walk on a Heightfield (None = flat ground): the root follows its smoothed height and the
        leg IK puts the feet on it."""
        self.crowd.set_terrain(terrain, halflife)
        self._logged("terrain", terrain_dict(terrain, halflife) if self.input_log is not None else None)

    @property
    def terrain(self):
        return self.crowd.terrain_field

    def play_clip(self, range_index: int | None, offset_frames: int = 0) -> None:
        """Jump (inertialized) to frame `offset_frames` of clip `range_index` and keep playing it, searches
        suspended until the clip ends or play_clip(None)."""
        self.crowd.play_clip(0, range_index, offset_frames)
        self._logged("play_clip", [range_index if range_index is None else int(range_index), int(offset_frames)])

    def request_action(self, event: str, event_in: float) -> None:
        """Perform the action whose clips carry `event` marks (e.g. "bow") with its event `event_in` seconds
        from now (docs/ACTIONS.md)."""
        self.crowd.request_action(0, event, event_in)
        self._logged("request_action", [event, float(event_in)])

    def request_stop_at(self, point) -> None:
        """Stop with the root at rest at `point` (x, z) metres; held there until cancel_request()."""
        self.crowd.request_stop_at(0, point)
        self._logged("request_stop_at", [float(point[0]), float(point[1])])

    def request_plant_at(self, point, side: str = "left") -> None:
        """Plant the `side` foot at `point` (x, z) metres on the way there (docs/ACTIONS.md)."""
        self.crowd.request_plant_at(0, point, side)
        self._logged("request_plant_at", [float(point[0]), float(point[1]), side])

    def cancel_request(self) -> None:
        self.crowd.cancel_request(0)
        self._logged("cancel_request", None)

    @property
    def request_log(self) -> list[dict]:
        """Delivered requests (runtime/requests.py Requests.log)."""
        return self.crowd.requests.log

    # ------------------------------------------------------------------------------------------
    # the loop

    def step(self, inp: GamepadInput | None = None, dt: float = 1.0 / 60.0) -> None:
        """Advance one frame, the crowd's tick: controller (by the gamepad `inp`, or the driver), matching,
        playback, inertialization, root, touch-ups."""
        t0 = time.perf_counter()
        crowd = self.crowd
        g = inp or _NO_INPUT
        if self.input_log is not None:
            self.input_log.tick({"move": [float(g.move[0]), float(g.move[1])],
                                 "look": None if g.look is None else [float(g.look[0]), float(g.look[1])],
                                 "run": bool(g.run), "strafe": bool(g.strafe)}, dt)
        sticks = None
        if self.driver is None:
            sticks = self._sticks
            sticks.move[0] = float(g.move[0]), float(g.move[1])
            sticks.look[0] = (np.nan, np.nan) if g.look is None else (float(g.look[0]), float(g.look[1]))
            sticks.run[0], sticks.strafe[0] = bool(g.run), bool(g.strafe)
        crowd.tick(dt, sticks)
        us = crowd.stage_us
        self.t_controller_us = us["controller"]
        self.t_search_us = us["search"] if crowd.searches_last_tick else 0.0
        self.t_search_calls_us = us["search_calls"]
        self.t_inertialize_us, self.t_output_us = us["playback"], us["output"]
        if crowd.searches_last_tick:
            self.last_search_us = self.t_search_us
            self.desired_trajectory = crowd.traj_pos[0].copy()
            b = int(crowd.last_best[0])
            if b >= 0:
                self._matched = (b, crowd.last_query[0].copy(), crowd.search_sets[0])
            if crowd.jumped[0]:
                self.last_transition = {"time": round(float(crowd.last_search_time[0]), 4),
                                        "from": int(crowd.last_current[0]), "to": b}
        self.last_frame_us = (time.perf_counter() - t0) * 1e6

    # ------------------------------------------------------------------------------------------
    # state

    @property
    def time(self) -> float:
        return self.crowd.time

    @property
    def channel_costs(self) -> dict:
        """{channel: its share of the last search's cost (squared normalized distance)} of the last search that
        found a frame ({} before one); computed when asked (the app's HUD), not by every search."""
        if self._matched is None:
            return {}
        b, q, search_set = self._matched
        d = q - search_set.features[b]
        d *= d
        return {n: float(d[sl].sum()) for n, sl in self.slices.items()}

    @property
    def facing_yaw(self) -> float:
        """The displayed facing (radians): the root's yaw plus the orientation warp (the upper body)."""
        return math.remainder(self.root_yaw + self.warp_angle, 2 * math.pi)

    @property
    def root_rot(self) -> np.ndarray:
        """Character root rotation (4,), about +Y."""
        h = 0.5 * self.root_yaw
        return np.array((math.cos(h), 0.0, math.sin(h), 0.0))

    def local_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """Output local pose (J,3)/(J,4) with joint 0 the character root in the world."""
        return self.crowd.local_pose(0)

    def _placed(self, lp, lr) -> np.ndarray:
        lp, lr = np.array(lp, dtype=np.float64), np.array(lr, dtype=np.float64)
        lp[0] = self.root_pos
        lr[0] = self.root_rot
        return forward_kinematics(lp, lr, self.crowd.rig.parents)[0]

    def pose_before_inertialization(self) -> np.ndarray:
        """(J, 3) world joint positions of the raw database pose playing now, placed at the root."""
        anim = animation_pose(*self.crowd.pose_source(), 0)
        return self._placed(anim.pos[0], anim.rot[0])

    def pose_before_touchups(self) -> np.ndarray:
        """(J, 3) world joint positions after inertialization, before warping, foot locking and IK."""
        return self._placed(self.crowd.local.pos[0], self.crowd.local.rot[0])

    def debug(self) -> dict:
        """State for overlays and HUDs (lists of floats, JSON-ready). Called every frame by the app,
        so it is plain-float maths."""
        db, crowd = self.db, self.crowd
        roles = db.roles
        st = crowd.ctrl[0]
        root_yaw = self.root_yaw
        c, sn = math.cos(root_yaw), math.sin(root_yaw)
        rx, ry, rz = (float(v) for v in self.root_pos)

        def to_world(x, y, z):
            return [round(rx + x * c + z * sn, 4), round(ry + y, 4), round(rz - x * sn + z * c, 4)]

        frame = self.frame
        raw = db.features.raw[frame].tolist()
        matched = []
        for ch in db.features.schema.channels:
            if ch.kind == "trajectory_position":
                v = raw[self.slices[ch.name]]
                matched = [to_world(v[k], 0.0, v[k + 1]) for k in range(0, len(v), 2)]
        feet = {}
        gp = self.global_positions
        for i, side in enumerate(("left", "right")):
            sl = self.slices.get(f"{side}_foot_velocity")
            if sl is not None:
                vx, vy, vz = raw[sl]
                vel = [round(vx * c + vz * sn, 3), round(vy, 3), round(-vx * sn + vz * c, 3)]
            else:
                vel = [0.0, 0.0, 0.0]
            feet[side] = {"position": [round(float(x), 4) for x in gp[roles[f"{side}_foot"]]],
                          "velocity": vel, "contact": bool(crowd.contacts[0, i]), "locked": bool(crowd.locked[0, i])}
        desired = self.desired_trajectory
        r = int(crowd.range_of[frame])
        search = None
        if crowd.last_current[0] >= 0 or crowd.last_best[0] >= 0:
            b = int(crowd.last_best[0])
            cur = int(crowd.last_current[0])
            ss = crowd.search_sets[0]
            cont = None
            if cur >= 0 and ss.searcher.searchable[cur]:
                d = crowd.last_query[0] - ss.features[cur]
                cont = float(np.dot(d, d))
            search = {"query": [float(x) for x in crowd.last_query[0]], "frame": b, "cost": float(crowd.last_cost[0]),
                      "current": cur, "continue_cost": cont, "bias": float(crowd.packed[0, S.BIAS]),
                      "tag_filter": self.settings.tag_filter, "jumped": bool(crowd.jumped[0]),
                      "t": float(crowd.last_search_time[0])}
        return {
            "sim_position": [round(float(st[PX]), 4), round(float(st[PY]), 4), round(float(st[PZ]), 4)],
            "sim_direction": [round(math.sin(st[YAW]), 4), 0.0, round(math.cos(st[YAW]), 4)],
            "desired_trajectory": [] if desired is None else [[round(float(x), 4) for x in p] for p in desired],
            "matched_trajectory": matched,
            "feet": feet,
            "clip": db.range_names[r],
            "frame": frame,
            "clip_frame": int(frame - db.range_starts[r]),
            "style": self.settings.tag_filter,
            "tags": db.range_tags[r],
            "search_us": round(self.last_search_us, 1),
            "frame_us": round(self.last_frame_us, 1),
            "channel_costs": {k: round(v, 4) for k, v in self.channel_costs.items()},
            "last_transition": self.last_transition,
            "search": search,
        }


for _name, (_array, _kind, _doc) in _STATE.items():
    setattr(Character, _name, _agent0(_array, _kind, _doc))


def warm_up(db, frames: int = 120) -> None:
    """Compile (or load from numba's cache) every kernel a character uses, so the first live frame
    does not stall: walk, strafe, run and stop for `frames` frames on a throw-away character."""
    ch = Character(db)
    moves = (GamepadInput(move=(0.0, 1.0)), GamepadInput(move=(1.0, 0.0), strafe=True),
             GamepadInput(move=(0.0, 0.5)), GamepadInput(move=(-1.0, 0.0), run=True), GamepadInput())
    for k in range(frames):
        ch.step(moves[(k * len(moves)) // frames])
    ch.debug()
    ch.pose_before_inertialization()   # the app's ghosts
    ch.pose_before_touchups()
