"""N motion-matched characters over one Database, state as structure-of-arrays, stepped by batched
stages (a single Character is a crowd of one).

Each `step` (one tick, normally 1/60 s) runs, for all characters at once:
1. controller (controller.gamepad_step): goals from the sticks, springs advanced;
2. plan (matching.plan_stage): orientation-warp plan and who searches now (each character's own
   search phase, sharp input changes, the clip running out);
3. queries (matching.predict_stage + query_stage), normalized per weight set, searched as one batch per
   (weights, tag filter, bias) group; results that are not a small rewind become transitions
   (playback.transition_stage);
4. playback (playback.playback_stage): play rate and stride, advance, sample, inertialize, root
   integration and synchronization with the simulation, orientation twist;
5. output (touchups.output_stage): root placement, orientation warp, forward kinematics, ground,
   foot locking, hips drop, slope warping and leg IK.
Seeds: 000 sections 3.3-3.6, 001, 002 section 3.3, 003, 004.
"""
from __future__ import annotations

import copy
import time
from operator import attrgetter

import numba
import numpy as np

from ..search.common import searchable_frames
from . import learned
from . import settings as S
from .crowd_state import new_crowd_state, record_search, reset_row
from .controller import GOAL_VX, GOAL_VZ, PX, PY, PZ, VX, VZ, ControllerSettings, gamepad_serial, gamepad_step
from .input_log import InputLog, obstacles_dict, settings_dict, terrain_dict
from .matching import (FORCE, IDLE_NO_REWIND_S, plan_serial, plan_stage, predict_stage, query_serial, query_stage,
                       resting)
from .playback import (Clips, Frames, Playhead, playback_serial, playback_stage, transition_parallel,
                       transition_stage)
from .requests import Requests, follow_root
from .annotation_play import hold_blocked, loop_wraps
from .collision_term import apply_collision_term, candidate_paths, collision_world
from .search_sets import search_set, shared
from .settings import CharacterSettings
from .stage_calls import StageCalls
from .steering import steer_controllers
from .threads import ThreadChooser
from .timescale import timescale_stage
from .trajectory_heights import height_query
from .touchups import HAS_GROUND, Terrain, output_serial, output_stage
from .warping import FIXED_RATE


# Below this many characters a stage runs on the calling thread: handing a loop to the thread pool
# costs more than a few characters' work.
PARALLEL_FROM = 32


def crowd_mode(settings) -> tuple[str, str | None]:
    """(mode, model path) shared by every agent's settings: a crowd is all classic or all one learned model."""
    kinds = {(s.mode, str(s.model) if s.mode == "lmm" else None) for s in settings}
    for mode, model in kinds:
        if mode not in S.MODES:
            raise ValueError(f"mode: expected one of {S.MODES}, got {mode!r}")
        if mode == "lmm" and model in (None, "None", ""):
            raise ValueError("mode 'lmm' needs model=PATH (a model file from `motionmatch lmm train`)")
    if len(kinds) > 1:
        raise ValueError(f"a crowd's agents must share one mode and model, got {sorted(kinds, key=str)}")
    return kinds.pop()


class Crowd:
    """N motion-matched characters over one Database, state as structure-of-arrays (see module docstring).

    settings: one CharacterSettings for all agents or a list of n (weights, tag filter, touch-ups may
    differ per agent); after changing a settings object call apply_settings(). threads: "auto" (each tick
    on one thread or all, whichever measures faster: runtime/threads.py; threads_last_tick tells) or a
    fixed count (set_threads changes it). Outputs after each step
    (arrays owned by the crowd, valid until the next step): global_positions (n, J, 3) float32,
    global_rotations (n, J, 4) float32, root_positions (n, 3), root_yaws (n,) radians, sim_positions,
    sim_velocities, desired_velocities (n, 3), searches_last_tick.
    """

    def __init__(self, db, n: int, settings=None, start_frames=None,
                 controller_settings: ControllerSettings | None = None, threads="auto"):
        n = int(n)
        if n < 1:
            raise ValueError(f"a crowd needs at least one character, got n={n}")
        self.db, self.n = db, n
        self.input_log: InputLog | None = None     # start_input_log()
        self.ticks = 0
        self._start_frames = None if start_frames is None else [int(f) for f in start_frames]
        if settings is None or isinstance(settings, CharacterSettings):
            settings = [settings or CharacterSettings()] * n
        settings = list(settings)
        if len(settings) != n:
            raise ValueError(f"settings: expected one CharacterSettings or a list of {n}, got {len(settings)}")
        self.settings = settings
        self.controller_settings = controller_settings or ControllerSettings()
        self.num_joints = db.num_joints
        self.state = new_crowd_state(db, n, self.controller_settings)
        # The compiled stages are called through `calls`: the records below are typed once, not every tick.
        self.calls = StageCalls()
        self.set_terrain(None)
        self.time = 0.0
        self.searches_last_tick = 0
        self.everyone = np.arange(n)
        self.set_threads(threads)
        self.set_base, self.active_set = {}, [None] * n   # database sets (use_set)

        # Static obstacles the controllers steer around (set_obstacles), but not `routed` agents
        # (world/obstacle_routes.py)
        self.obstacles = None
        # The collision term of the search (runtime/collision_term.py): with obstacles, and against the other
        # agents when they avoid each other (set_collision_agents); `settled_last_tick` searches paid for it.
        self.collide_agents, self.settled_last_tick = False, 0
        self.mode, self.model_path = crowd_mode(settings)
        self.requests = Requests(db, n)
        # Learned agents (mode "lmm"): the model replaces the database as the pose source (runtime/learned.py).
        self._set_learned(None if self.mode != "lmm" else learned.new_source(self._model(), db, n))
        self.apply_settings()
        for i in range(n):
            self.reset_agent(i, start_frame=None if start_frames is None else int(start_frames[i]))

    # ------------------------------------------------------------------------------------------
    # set-up

    def set_threads(self, threads="auto") -> None:
        """Threads of each tick: "auto" (the faster of one and all, measured tick by tick: runtime/threads.py)
        or a fixed count (1 = the calling thread only). Crowds under PARALLEL_FROM agents use one thread."""
        self.thread_chooser = ThreadChooser.of_setting(threads, small=self.n < PARALLEL_FROM)
        self.threads_last_tick, self.parallel, self._ticking = 1, False, False

    def _tick(self, body) -> None:
        """Run body() with the thread count the chooser picks, and time it for the chooser."""
        if self._ticking:
            body()
            return
        k = self.thread_chooser.pick()
        before = numba.get_num_threads()
        self.parallel = k > 1
        self._ticking = True
        t0 = time.perf_counter()
        try:
            numba.set_num_threads(k)
            body()
        finally:
            numba.set_num_threads(before)
            self._ticking = False
        self.thread_chooser.record(k, time.perf_counter() - t0)
        self.threads_last_tick = k

    def apply_settings(self) -> None:
        """Repack every agent's settings (after changing them): weights pick the shared normalized
        features and searcher, a changed tag filter forces a search, a changed inertialization method
        drops the running offsets, a changed mode (all agents at once) switches classic/learned live."""
        mode = crowd_mode(self.settings)
        old = getattr(self, "packed", None)
        old_filters = getattr(self, "tag_filters", None)
        # Agents sharing one settings object (a crowd made from one) check and pack it once.
        rows = {id(s): s.packed() for s in {id(s): s for s in self.settings}.values()}
        packed = np.stack([rows[id(s)] for s in self.settings])
        if self.mode == "lmm" and packed[:, S.W_TIMESCALE].any():
            raise ValueError("warp.timescale (timescale by predicted error) reads database frames: classic mode only")
        search_sets = [search_set(self.db, s) for s in self.settings]
        # A database may name the locomotion filter that keeps requested-only clips out (the action database:
        # `!action`).
        tag_filters = [s.tag_filter or self.db.meta.get("default_tag_filter") for s in self.settings]
        masks = [ss.mask(self.db, tf) for ss, tf in zip(search_sets, tag_filters)]
        # Nothing changes before every check passed: a refused change (the app puts the old settings back)
        # leaves the state as it was, so an input log, which holds only applied settings, replays it.
        self.packed, self.search_sets, self.tag_filters, self.masks = packed, search_sets, tag_filters, masks
        for i in range(self.n):
            if old_filters is not None and old_filters[i] != self.tag_filters[i]:
                self.state.search.timers[i, FORCE] = 1.0
            if old is not None and old[i, S.INERTIALIZATION] != self.packed[i, S.INERTIALIZATION]:
                for a in self.state.inertialization.offsets:
                    a[i] = 0.0
            if not self.settings[i].foot_locking:
                self.state.touchups.feet.locks[i] = 0
        # Agents searched together: same searcher, mask and bias.
        groups = {}
        for i in range(self.n):
            key = (id(self.search_sets[i]), self.tag_filters[i], float(self.packed[i, S.BIAS]),
                   int(self.packed[i, S.NO_REWIND]))
            groups.setdefault(key, []).append(i)
        self.group_of = np.empty(self.n, dtype=np.int64)
        self.groups = []
        for g, members in enumerate(groups.values()):
            self.group_of[members] = g
            i = members[0]
            m = self.masks[i]
            self.groups.append((self.search_sets[i], None if m is None else m[1], float(self.packed[i, S.BIAS]),
                                int(self.packed[i, S.NO_REWIND])))
        if self.input_log is not None:
            self._log_settings()
        if mode != (self.mode, self.model_path):
            # A live switch between classic and learned (or another model): inertialized per agent.
            self.mode, self.model_path = mode
            self._switch_mode(None if mode[0] == "classic" else self._model())

    def start_input_log(self, seed=None) -> InputLog:
        """Record every input and call from now on (before the first step), for `motionmatch synth --replay`
        (docs/REPLAY.md). seed: stored with the log for callers that draw random numbers."""
        if self.ticks:
            raise ValueError("start the input log before the crowd's first step")
        self.input_log = InputLog(self.db, "crowd", self.n, self.settings, self.controller_settings,
                                  {"frames": self._start_frames}, seed)
        self._logged_settings = (self.input_log.settings, self.input_log.settings_of)
        return self.input_log

    def _log_settings(self) -> None:
        if self._log_settings_quietly():
            now = self._logged_settings
            self.input_log.event("settings", {"settings": now[0], "settings_of": now[1]})

    def _log_settings_quietly(self) -> bool:
        """Take the settings' snapshot; True when they changed since the last one."""
        uniq = {id(s): s for s in self.settings}
        order = list(uniq)
        now = ([settings_dict(s) for s in uniq.values()], [order.index(id(s)) for s in self.settings])
        changed = now != self._logged_settings
        self._logged_settings = now
        return changed

    def _logged(self, name: str, value) -> None:
        if self.input_log is not None:
            self.input_log.event(name, value)

    def _switch_mode(self, model) -> None:
        """Switch every agent to learned motion matching with `model`, or back to classic with None. Each
        agent takes an inertialized transition, like a search jump: to the projection of its database
        frame's features, or to the database frame nearest its learned features; it searches on the next
        tick."""
        n = self.n
        if model is not None:
            src = learned.new_source(model, self.db, n)
            for i in range(n):
                f = int(self.state.playback.play.frame[i])
                learned.enter(src, i, self.state.db.raw_features[f])
                self._cross_transition(i, self.state.db.frames, f, src.pose, n + i)
            self._set_learned(src)
        else:
            src = self.learned
            for i in range(n):
                ss, m = self.search_sets[i], self.masks[i]
                best, _ = ss.searcher.search(ss.normalize(src.raw[i]), mask=None if m is None else m[1])
                best = int(best) if best >= 0 else int(self.state.playback.play.frame[i])
                self._cross_transition(i, src.pose, i, self.state.db.frames, best)
                self.state.playback.play.frame[i], self.state.playback.play.frac[i] = best, 0.0
            self._set_learned(None)
        self.state.search.transitions[:] += 1
        self.state.search.clip_hold[:] = False
        self.state.search.timers[:, FORCE] = 1.0

    def _set_learned(self, src) -> None:
        """Learned agents play `src` (learned.LearnedSource; None: classic agents); their Clips and Playhead
        records are made once (the stages then find their compiled code without typing them again)."""
        self.learned = src
        if src is not None:
            self.learned_clips = Clips(src.speeds, src.stop, src.contacts)
            # Each learned agent plays its own pose row (rate, stride and warp are the crowd's).
            self.learned_play = self.state.playback.play._replace(frame=src.frame, frac=src.frac)

    def _cross_transition(self, i: int, src_frames: Frames, src_row: int, dst_frames: Frames, dst_row: int) -> None:
        """Agent i moves from row src_row of one pose source to row dst_row of another, an inertialized
        transition like a search jump (the stages' transition on a two-row source)."""
        pair = Frames(*(np.stack([a[src_row], b[dst_row]]) for a, b in zip(src_frames, dst_frames)))
        play = Playhead(np.zeros(self.n, dtype=np.int64), np.zeros(self.n), self.state.playback.play.rate, self.state.playback.play.stride, self.state.playback.play.warp_angle,
                        self.state.playback.play.contacts)
        transition_stage(np.array([i]), np.array([1]), pair, np.array([1, 2], dtype=np.int64), self.state.inertialization.offsets, play,
                         self.packed, self.state.inertialization.scratch)

    def _model(self):
        return shared(self.db, ("lmm", self.model_path), lambda: learned.learned_model(self.db, self.model_path))

    def set_tag_filter(self, i: int, expr: str | None) -> None:
        """Switch agent i's allowed clips (a tag expression, None = all); the change is inertialized.
        The agent's settings object is copied first if other agents share it."""
        s = self.settings[i]
        if sum(x is s for x in self.settings) > 1:
            s = self.settings[i] = copy.deepcopy(s)
        s.tag_filter = expr or None
        self.apply_settings()

    def use_set(self, i: int, spec, interrupt: bool = True) -> None:
        """Agent i searches another set of the database (database_sets.SetSpec: the clips of a tag
        expression with its channel weights over the agent's own). interrupt: search now; else the set
        takes over at the agent's next search (its own 0.1 s phase). The agent gets its own settings."""
        s = copy.deepcopy(self.settings[i])
        base = self.set_base.setdefault(i, dict(s.weights))   # the weights before the first switch
        s.tag_filter, s.weights = spec.tags, {**base, **spec.weights}
        s.packed()                                 # checks the weights' bounds before anything changes
        search_set(self.db, s).mask(self.db, s.tag_filter)   # ... their channel names and the tags
        force = self.state.search.timers[i, FORCE]
        self.settings[i] = s
        log, self.input_log = self.input_log, None      # logged as one use_set, not as a settings change
        try:
            self.apply_settings()
        finally:
            self.input_log = log
        self.state.search.timers[i, FORCE] = 1.0 if interrupt else force
        self.active_set[i] = spec.name
        if log is not None:
            self._logged_settings = None
            self._log_settings_quietly()
            log.event("use_set", [int(i), {"name": spec.name, "tags": spec.tags, "weights": dict(spec.weights)},
                                  bool(interrupt)])

    def set_terrain(self, terrain, halflife: float = 0.15) -> None:
        """One Heightfield under every agent (None = flat ground): roots follow its smoothed height
        (critically damped, `halflife` s), the leg IK puts the feet on it."""
        self.terrain_field = terrain
        if self.input_log is not None:
            self._logged("terrain", terrain_dict(terrain, halflife))
        if terrain is None:
            self.terrain = Terrain(False, np.zeros((2, 2)), 0.0, 0.0, 1.0, float(halflife))
        else:
            self.terrain = Terrain(True, np.ascontiguousarray(terrain.heights, dtype=np.float64),
                                   float(terrain.origin[0]), float(terrain.origin[1]), float(terrain.cell),
                                   float(halflife))
        self.state.touchups.feet.heights[:, HAS_GROUND] = 0.0     # the ground smoothing restarts from the new ground

    def set_obstacles(self, obstacles) -> None:
        """Static obstacles (obstacles.Obstacles, None or empty = none) every agent's controller steers
        around (runtime/steering.py); without them the tick does no obstacle work at all."""
        self.obstacles = obstacles if obstacles is not None and obstacles.count else None
        self.state.controller.steered[:] = False
        if self.input_log is not None:
            self._logged("obstacles", obstacles_dict(obstacles))

    def set_collision_agents(self, on: bool) -> None:
        """Whether the search's collision term (runtime/collision_term.py) counts the other agents: for
        crowds whose agents avoid each other (crowd files); obstacles count whenever set."""
        self.collide_agents = bool(on)

    def _collision_world(self):
        """The tick's CollisionWorld, or None when the collision term has nothing to look at (no obstacles,
        no agents counted) or every weight is 0: then the search is exactly as without the term."""
        if (self.obstacles is None and not (self.collide_agents and self.n > 1)) \
                or not self.packed[:, S.COLLISION_WEIGHT].any():
            return None
        vel = self.state.controller.table[:, [VX, VZ]]
        return collision_world(self.obstacles, self.state.playback.root.pos[:, [0, 2]], vel, self.state.db.traj_times,
                               self.collide_agents and self.n > 1)

    def steer(self, before: np.ndarray, agents, dt: float) -> np.ndarray:
        """Steer the controllers of `agents` around the obstacles after their goals were set this tick;
        before: the controller table before the tick (a copy). Returns steered (n,) bool."""
        cs = self.controller_settings
        return steer_controllers(self.state.controller.table, before, agents, self.obstacles, dt, cs.rotation_halflife,
                                 cs.gait_halflife, self.state.controller.steered)

    def reset_agent(self, i: int, position=(0.0, 0.0, 0.0), yaw: float = 0.0, start_frame=None) -> None:
        """Agent i stands at `position` facing `yaw` (radians, 0 faces +Z, positive turns +Z toward +X),
        playing `start_frame` (default: the first searchable frame under its tag filter)."""
        db = self.db
        if start_frame is None:
            m = self.masks[i]
            ok = np.flatnonzero(searchable_frames(db.range_starts, db.range_stops, db.num_frames,
                                                  self.settings[i].end_exclude, None if m is None else m[0]))
            start_frame = int(ok[0]) if len(ok) else 0
        f = int(start_frame)
        if not 0 <= f < db.num_frames:
            raise ValueError(f"start_frame {f} outside [0, {db.num_frames})")
        frames, row = self.state.db.frames, f
        if self.learned is not None:
            learned.start(self.learned, i, self.state.db.raw_features[f])
            frames, row = self.learned.pose, i     # its own pose row
        reset_row(self.state, i, f, position, yaw, self.controller_settings, frames, row)
        self.requests.reset(i)
        self._output(0.0, np.array([i]))
        self._logged("reset_agent", [i, [float(c) for c in position], float(yaw), f])

    def reset_clock(self) -> None:
        """The crowd's clock (`time`, s: request times and the search log count from it) restarts at 0."""
        self.time = 0.0
        self._logged("reset_clock", None)

    # ------------------------------------------------------------------------------------------
    # the tick

    def step(self, move, run, strafe, look, dt: float = 1.0 / 60.0) -> None:
        """Advance every agent one tick. move: (n, 2) stick (x right, z forward, world frame), magnitude
        0..1 (longer sticks are clamped); run, strafe: (n,) bool; look: (n, 2), NaN rows = no look."""
        n = self.n
        move = np.ascontiguousarray(np.broadcast_to(np.asarray(move, dtype=np.float64), (n, 2)))
        look = np.ascontiguousarray(np.broadcast_to(np.asarray(look, dtype=np.float64), (n, 2)))
        run = np.ascontiguousarray(np.broadcast_to(np.asarray(run, dtype=np.bool_), (n,)))
        strafe = np.ascontiguousarray(np.broadcast_to(np.asarray(strafe, dtype=np.bool_), (n,)))
        if self.input_log is not None:
            self.input_log.tick((move.copy(), run.copy(), strafe.copy(), look.copy()), dt)
        self._tick(lambda: self._step(move, run, strafe, look, dt))

    def _step(self, move, run, strafe, look, dt) -> None:
        driven = self.requests_driving()
        kept = self.state.controller.table[driven].copy() if len(driven) else None
        before = None if self.obstacles is None else self.state.controller.table.copy()
        (gamepad_step if self.parallel else gamepad_serial)(self.state.controller.table, move, run, strafe, look, float(dt), self.controller_settings.packed())
        if before is not None:
            self.steer(before, np.setdiff1d(np.flatnonzero(~self.state.controller.routed), driven), dt)
        if len(driven):   # a stop or foot-plant request drives these controllers instead of the stick
            self.state.controller.table[driven] = kept
            self.drive_requests(driven, dt)
        self.advance(dt)

    def requests_driving(self) -> np.ndarray:
        """Agents whose controller a request drives this tick (stops, foot plants) instead of their input."""
        return self.requests.driving() if self.requests.busy else np.empty(0, dtype=np.int64)

    def request_drives(self, agent: int) -> bool:
        """Whether a request drives `agent`'s controller this tick: requests_driving for one agent, without
        building an array while no request is active (2 us of a one-character frame of 30)."""
        return self.requests.busy and agent in self.requests.driving()

    def drive_requests(self, agents, dt: float = 1.0 / 60.0) -> None:
        """Advance the controllers of `agents` (of requests_driving) dt seconds toward their requests' targets."""
        self.requests.drive(self.state.controller.table, agents, self.controller_settings, float(dt))

    def advance(self, dt: float = 1.0 / 60.0, predictor=None) -> None:
        """The tick after the controllers moved (step, or a driver on a Controller view of `ctrl`):
        matching, playback and output. predictor(i) -> (positions (K, 3), rotations (K, 4)) gives the
        desired trajectory of agent i at self.state.db.traj_offsets instead of the controller's prediction."""
        self._tick(lambda: self._advance(float(dt), predictor))

    def _advance(self, dt: float, predictor) -> None:
        self.ticks += 1
        t0 = time.perf_counter()
        searching = self.state.search.searching
        L = self.learned
        # Learned agents play no clip to hold (still_to 0: never held).
        frame, stop, still = ((self.state.playback.play.frame, self.state.db.clips.stop, self.state.db.still_to) if L is None
                              else (L.frame, L.never, np.zeros_like(L.never)))
        rules = self.state.db.annotations
        if rules.loop_to is not None and L is None:
            looping, start = loop_wraps(rules.loop_to, self.state.playback.play.frame, self.state.search.clip_hold)
            if len(looping):      # a loop range's end continues at its start: an inertialized jump
                self.state.search.transitions[looping] += 1
                self.calls(transition_stage, looping, start, self.state.db.frames, self.state.db.clips.stop, self.state.inertialization.offsets, self.state.playback.play,
                           self.packed, self.state.inertialization.scratch)
        (plan_stage if self.parallel else plan_serial)(dt, self.state.controller.table, self.state.playback.warp, self.state.search.timers, self.packed, frame, stop, self.state.search.clip_hold,
                   still, searching)
        if rules.blocked is not None and L is None:
            hold_blocked(rules.blocked, self.state.playback.play.frame, self.state.db.clips.stop, searching)
        if self.requests.busy and L is None:
            self.state.playback.warp[self.requests.timed(), FIXED_RATE] = 1.0      # plan_stage cleared it: set after
        agents = np.flatnonzero(searching)
        self.searches_last_tick = len(agents)
        if len(agents):
            self._search(agents, predictor)
        t1 = time.perf_counter()
        # The pose source: the next database frame, or the learned agents' stepped and decompressed pose.
        if L is None:
            timescale_stage(dt, self.state.controller.table, self.state.playback.warp, self.packed, self.state.playback.play.frame, *self.state.db.future_speeds, self.state.playback.play.rate,
                            self.state.playback.play.stride)
        else:
            learned.advance(L, self.state.playback.play.rate, dt)
        frames, clips, play = self.pose_source()
        self.calls(playback_stage if self.parallel else playback_serial, dt, frames, clips, self.state.controller.table, self.state.playback.warp,
                   self.packed, play, self.state.inertialization.offsets, self.state.inertialization.shown, self.state.playback.root)
        t2 = time.perf_counter()
        self._output(dt, self.everyone)
        self.stage_us = {"search": (t1 - t0) * 1e6, "playback": (t2 - t1) * 1e6,
                         "output": (time.perf_counter() - t2) * 1e6}
        self.time += dt
        if self.requests.busy:
            self._apply(self.requests.after_playback(self, dt))

    def _classic_only(self) -> None:
        if self.learned is not None:
            raise ValueError("requests search database clips: they need a classic crowd (mode 'classic')")

    def request_action(self, i: int, event: str, event_in: float) -> None:
        """Agent i performs the action whose clips carry `event` marks (e.g. "bow") with the event `event_in`
        seconds from now (runtime/requests.py); RequestError when the database has no such channel."""
        self._classic_only()
        self._requested(i, self.requests.action(i, event, event_in, self.time))
        self._logged("request_action", [int(i), event, float(event_in)])

    def request_stop_at(self, i: int, point) -> None:
        """Agent i stops with its root at rest at `point` (x, z) metres, and stays until cancel_request."""
        self._classic_only()
        self._requested(i, self.requests.stop_at(i, point))
        self._logged("request_stop_at", [int(i), float(point[0]), float(point[1])])

    def request_plant_at(self, i: int, point, side: str = "left") -> None:
        """Agent i plants its `side` foot at `point` (x, z) metres on its way there."""
        self._classic_only()
        self._requested(i, self.requests.foot_plant(i, point, side))
        self._logged("request_plant_at", [int(i), float(point[0]), float(point[1]), side])

    def cancel_request(self, i: int) -> None:
        """End agent i's request; the stick drives it again."""
        if self.requests.cancel(i):
            self._release(i)
        self._logged("cancel_request", int(i))

    def _requested(self, i: int, released: bool) -> None:
        """A new request of agent i searches now (the one it replaced may have held its clip)."""
        if released:
            self.state.search.clip_hold[i] = False
        self.state.search.timers[i, FORCE] = 1.0

    def _release(self, i: int) -> None:
        """An action ended or was cancelled: agent i's clip hold ends and it searches now."""
        self.state.search.clip_hold[i] = False
        self.state.search.timers[i, FORCE] = 1.0

    def _apply(self, d) -> None:
        """Apply the requests' decisions after a tick (requests.Decisions)."""
        self.state.search.clip_hold[d.hold] = True
        for i in d.release:
            self._release(i)
        for i in d.follow:
            follow_root(self.state.controller.table, i, self.state.playback.root)
        for i, (x, z) in d.glide.items():
            self.state.playback.root.pos[i, 0], self.state.playback.root.pos[i, 2] = x, z

    def play_clip(self, i: int, range_index: int | None, offset_frames: int = 0) -> None:
        """Agent i jumps (inertialized) to frame `offset_frames` of clip `range_index` and plays it with
        searches suspended until the clip is about to end; None resumes searching now."""
        if range_index is None:
            self.state.search.clip_hold[i] = False
            self.state.search.timers[i, FORCE] = 1.0
            self._logged("play_clip", [int(i), None, int(offset_frames)])
            return
        if self.learned is not None:
            raise ValueError("play_clip plays database clips: it needs a classic crowd (mode 'classic')")
        db = self.db
        r = int(range_index)
        if not 0 <= r < len(db.range_starts):
            raise ValueError(f"range_index {r} outside [0, {len(db.range_starts)})")
        start, stop = int(db.range_starts[r]), int(db.range_stops[r])
        off = int(offset_frames)
        if not 0 <= off < stop - start - 1:
            raise ValueError(f"offset {off} outside clip {db.range_names[r]!r} (0..{stop - start - 2} frames)")
        to = start + off
        if to != self.state.playback.play.frame[i]:
            self.state.search.transitions[i] += 1
            self.calls(transition_stage, np.array([i]), np.array([to]), self.state.db.frames, self.state.db.clips.stop, self.state.inertialization.offsets,
                       self.state.playback.play, self.packed, self.state.inertialization.scratch)
        self.state.search.clip_hold[i] = True
        self._logged("play_clip", [int(i), r, off])

    def _search(self, agents: np.ndarray, predictor) -> None:
        cs = self.controller_settings
        offsets = self.state.db.traj_offsets.astype(np.float64)
        predict_stage(agents, self.state.controller.table, offsets, float(self.db.fps), cs.rotation_halflife, self.state.search.desired.pos,
                      self.state.search.desired.rot)
        if predictor is not None:
            for i in agents:
                p, r = predictor(int(i))
                self.state.search.desired.pos[i], self.state.search.desired.rot[i] = p, r
        if self.requests.busy:
            for i, (p, r) in self.requests.predict(agents, self.state.controller.table, cs, self.state.db.traj_offsets, self.db.fps).items():
                self.state.search.desired.pos[i], self.state.search.desired.rot[i] = p, r
        raw = np.empty((len(agents), self.state.db.raw_features.shape[1]))
        L = self.learned
        features, frame = (self.state.db.raw_features, self.state.playback.play.frame) if L is None else (L.raw, L.frame)
        self.calls(query_stage if self.parallel and len(agents) >= PARALLEL_FROM else query_serial, agents, features,
                   frame, self.state.search.desired, self.state.controller.table, self.state.playback.warp, self.packed, self.state.playback.root, raw)
        if len(self.state.db.height_layout):
            self.calls(height_query, agents, self.state.search.desired.pos, self.state.playback.root.pos, self.terrain, self.state.db.height_layout, raw)
        if L is not None:
            self._learned_search(agents, raw)
            return
        best = np.empty(len(agents), dtype=np.int64)
        cost = np.empty(len(agents))
        groups = self.group_of[agents]
        if self.requests.busy:
            own = self.requests.shapes_search(agents)
            if own.any():
                best[own], cost[own], self.state.search.query[agents[own]] = self.requests.search(self, agents[own], raw[own], cs)
                groups = np.where(own, -1, groups)
        world = self._collision_world()
        self.settled_last_tick = 0
        for g in np.unique(groups[groups >= 0]):
            sel = np.flatnonzero(groups == g)
            ss, mask, bias, skip = self.groups[g]
            q = ss.normalize(raw[sel])
            self.state.search.query[agents[sel]] = q
            # The frames just around the playing one are excluded inside the search: a small jump back
            # replays what was just shown (a stutter loop on slow walks), and throwing such a result
            # away afterwards left a character frozen on a short clip's last frame.
            # Idle characters search alone: on frames with a still stretch ahead to hold, off the one they
            # just played (no pose loop).
            idle = resting(self.state.controller.table, agents[sel])
            wide = max(skip, int(round(IDLE_NO_REWIND_S * self.db.fps)))
            if idle.any():
                held = ss.idle_mask(self.db, self.tag_filters[agents[sel[0]]], self.state.db.holdable)
                idle_mask = None if held is None else held[1]
            if len(sel) == 1 or idle.any():
                for k in range(len(sel)) if len(sel) == 1 else np.flatnonzero(idle):
                    best[sel[k]], cost[sel[k]] = ss.searcher.search(q[k], current=int(self.state.playback.play.frame[agents[sel[k]]]),
                                                                    skip=wide if idle[k] else skip, bias=bias,
                                                                    mask=idle_mask if idle[k] else mask)
            if len(sel) > 1 and not idle.all():
                busy = np.flatnonzero(~idle)
                best[sel[busy]], cost[sel[busy]] = ss.searcher.search_batch(
                    q[busy], current=self.state.playback.play.frame[agents[sel[busy]]], skip=skip, bias=bias, mask=mask)
            if world is not None:
                self._collide(world, ss, sel, agents, q, idle, idle_mask if idle.any() else None, mask, wide, skip,
                              bias, best, cost)
        jump = (best >= 0) & (best != self.state.playback.play.frame[agents])
        self._searched(agents, best, cost, jump)
        if jump.any():
            movers = agents[jump]
            self.calls(transition_parallel if self.parallel and len(movers) >= PARALLEL_FROM else transition_stage,
                       movers, best[jump], self.state.db.frames, self.state.db.clips.stop, self.state.inertialization.offsets, self.state.playback.play, self.packed,
                       self.state.inertialization.scratch)

    def _collide(self, world, ss, sel, agents, q, idle, idle_mask, mask, wide, skip, bias, best, cost) -> None:
        """The collision term over one group's answers (best, cost at sel), in place: idle and walking
        agents searched with their own masks and skips."""
        paths, point_k, reach = shared(self.db, "collision_paths",
                                       lambda: candidate_paths(self.state.db.raw_features, self.state.db.traj_layout))
        for part, m, k in ((np.flatnonzero(idle), idle_mask, wide), (np.flatnonzero(~idle), mask, skip)):
            if not len(part):
                continue
            at = sel[part]
            b, c = best[at], cost[at]
            ids = agents[at]
            self.settled_last_tick += apply_collision_term(
                ss.searcher, m, q[part], ids, self.state.playback.play.frame[ids], k, bias, self.packed[ids, S.COLLISION_WEIGHT],
                self.state.playback.root.pos, self.state.playback.root.yaw, world, paths, point_k, reach, b, c)
            best[at], cost[at] = b, c

    def _learned_search(self, agents: np.ndarray, raw: np.ndarray) -> None:
        """Learned agents project their queries; a jump is an inertialized transition to the projected pose
        (last_best stays -1: no database frame)."""
        L = self.learned
        jump, cost, self.state.search.query[agents] = learned.search(L, agents, raw, self.packed[agents, S.LMM_BIAS],
                                                             self.packed[agents, S.LMM_PUSH],
                                                             self.packed[agents, S.LMM_DRIFT])
        self._searched(agents, np.full(len(agents), -1, dtype=np.int64), cost, jump)
        if jump.any():
            movers = agents[jump]
            self.calls(transition_stage, movers, self.n + movers, L.pose, L.stop, self.state.inertialization.offsets, self.learned_play,
                       self.packed, self.state.inertialization.scratch)
            L.frame[movers] = movers

    def _searched(self, agents, best, cost, jump) -> None:
        """Bookkeeping after a search (crowd_state.record_search)."""
        record_search(self.state.search, self.state.playback.play.frame, self.packed[agents, S.SEARCH_INTERVAL],
                      agents, best, cost, jump, self.time)

    def _output(self, dt: float, only) -> None:
        self.calls(output_stage if self.parallel and len(only) >= PARALLEL_FROM else output_serial, only, float(dt),
                   self.state.inertialization.shown, self.state.playback.root, self.state.playback.play, self.packed, self.state.db.rig, self.terrain, self.state.touchups.feet, self.state.touchups.out,
                   0.0 if self.learned is None else learned.LEARNED_RELOCK_SPEED)

    # ------------------------------------------------------------------------------------------
    # outputs

    @property
    def root_positions(self) -> np.ndarray:
        """(n, 3) character roots (the simulation-bone joint of the shown pose), metres."""
        return self.state.playback.root.pos

    @property
    def root_yaws(self) -> np.ndarray:
        """(n,) root yaws, radians."""
        return self.state.playback.root.yaw

    @property
    def sim_positions(self) -> np.ndarray:
        """(n, 3) controller simulation positions, metres."""
        return self.state.controller.table[:, [PX, PY, PZ]]

    @property
    def sim_velocities(self) -> np.ndarray:
        """(n, 3) controller simulation velocities, m/s."""
        v = np.zeros((self.n, 3))
        v[:, 0], v[:, 2] = self.state.controller.table[:, VX], self.state.controller.table[:, VZ]
        return v

    @property
    def desired_velocities(self) -> np.ndarray:
        """(n, 3) velocities asked by this tick's input, m/s."""
        v = np.zeros((self.n, 3))
        v[:, 0], v[:, 2] = self.state.controller.table[:, GOAL_VX], self.state.controller.table[:, GOAL_VZ]
        return v

    def pose_source(self) -> tuple[Frames, Clips, Playhead]:
        """What playback samples: the database's frames, or the learned agents' own pose rows."""
        if self.learned is None:
            return self.state.db.frames, self.state.db.clips, self.state.playback.play
        return self.learned.pose, self.learned_clips, self.learned_play

    def local_pose(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Agent i's output local pose (J, 3) / (J, 4), joint 0 the character root in the world (for BVH)."""
        return self.state.touchups.out.local_pos[i].copy(), self.state.touchups.out.local_rot[i].copy()


# The state's arrays other modules read (character.py, requests.py, the app, offline tools, devtools), by
# their names from before the state had groups: name -> its place in Crowd.state. Views: the next tick
# writes them.
PUBLIC_ARRAYS = {
    "db_arrays": "db.frames", "velocities": "db.velocities", "range_of": "db.range_of", "stop_of": "db.clips.stop",
    "still_to": "db.still_to", "holdable": "db.holdable", "future_speeds": "db.future_speeds",
    "raw_features": "db.raw_features", "contacts_db": "db.clips.contacts", "traj_offsets": "db.traj_offsets",
    "rig": "db.rig",
    "ctrl": "controller.table", "routed": "controller.routed",
    "search_state": "search.timers", "clip_hold": "search.clip_hold", "searched": "search.searching",
    "traj_pos": "search.desired.pos", "last_query": "search.query", "last_best": "search.best",
    "last_cost": "search.cost", "last_current": "search.current", "last_search_time": "search.time",
    "jumped": "search.jumped", "transitions": "search.transitions",
    "frame": "playback.play.frame", "frame_frac": "playback.play.frac", "rate": "playback.play.rate",
    "stride": "playback.play.stride", "warp_angle": "playback.play.warp_angle", "contacts": "playback.play.contacts",
    "root_pos": "playback.root.pos", "root_yaw": "playback.root.yaw", "root_vel": "playback.root.vel",
    "inert": "inertialization.offsets", "local": "inertialization.shown",
    "locked": "touchups.feet.locked", "out": "touchups.out",
    "global_positions": "touchups.out.positions", "global_rotations": "touchups.out.rotations",
}
for _name, _path in PUBLIC_ARRAYS.items():
    setattr(Crowd, _name, property(attrgetter("state." + _path), doc=f"Crowd.state.{_path} (a view)."))
