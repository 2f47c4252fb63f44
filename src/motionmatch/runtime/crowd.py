"""N motion-matched characters over one Database, stepped by batched stages (a single Character is a
crowd of one). The state is structure-of-arrays in named groups (runtime/crowd_state.py); `Crowd` holds
it with the settings, the search groups and the pose source, and offers the calls that change them.

One tick (`Crowd.tick`, normally 1/60 s; `step` gives it sticks) runs, for all characters at once:
1. controller (controller.gamepad_step, drivers, requests, steering.steer_controllers): goals from the
   sticks, springs advanced, goals bent around obstacles;
2. plan (matching.plan_stage): orientation-warp plan and who searches now (each character's own
   search phase, sharp input changes, the clip running out);
3. search (matching.predict_stage + query_stage), queries normalized per weight set and searched as one
   batch per (weights, tag filter, bias) group; results that are not a small rewind become transitions
   (playback.transition_stage);
4. pose source (timescale.timescale_stage, or the learned model stepped);
5. playback and inertialization (playback.playback_stage): play rate and stride, advance, sample,
   inertialize, root integration and synchronization with the simulation, orientation twist;
6. touch-ups (touchups.output_stage): root placement, orientation warp, forward kinematics, ground,
   foot locking, hips drop, slope warping and leg IK;
7. requests (requests.Requests.after_playback): events delivered, actions ended, roots at rest.
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
from .crowd_state import PUBLIC_ARRAYS, SearchGroup, new_crowd_state, record_search, reset_row
from .controller import (GOAL_VX, GOAL_VZ, PX, PY, PZ, VX, VZ, Controller, ControllerSettings, Sticks,
                         gamepad_serial, gamepad_step)
from .input_log import InputLog, obstacles_dict, settings_dict, terrain_dict
from .matching import (FORCE, IDLE_NO_REWIND_S, plan_serial, plan_stage, predict_stage, query_serial, query_stage,
                       resting)
from .playback import (Clips, Frames, Playhead, playback_serial, playback_stage, read_only, transition_parallel,
                       transition_stage)
from .requests import Requests, follow_root
from .annotation_play import hold_blocked, loop_wraps
from .collision_term import CollisionWorld, Group, apply_collision_term, candidate_paths, collision_world as new_world
from .search_sets import search_set, shared
from .settings import CharacterSettings
from .stage_calls import StageCalls
from .steering import steer_controllers
from .threads import ThreadChooser
from .timescale import timescale_stage
from .trajectory_heights import height_query
from .touchups import HAS_GROUND, Terrain, output_serial, output_stage
from .warping import FIXED_RATE


# No agents (an empty index array made once: a tick without requests builds none).
NO_AGENTS = np.empty(0, dtype=np.int64)

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
        # Made once, not at every search: the trajectory offsets as predict_stage (float64) and drivers (ints) take
        # them; the idle searches' skip (frames); the rows of raw queries, best frames and costs of a tick when
        # every agent searches (a Character's every search), so the stages given them are typed once, not again.
        self.traj_frames = self.state.db.traj_offsets.astype(np.float64)
        self.traj_frame_list = [int(o) for o in self.state.db.traj_offsets]
        self.idle_skip = int(round(IDLE_NO_REWIND_S * db.fps))
        self.raw_rows = np.empty((n, self.state.db.raw_features.shape[1]))
        self.best_rows, self.cost_rows, self.jump_rows = np.empty(n, dtype=np.int64), np.empty(n), np.empty(n, bool)
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
        # Agents whose controller a driver moves instead of the stick (set_driver), those of them whose driver
        # predicts their trajectory itself, and the Controller views drivers are handed (controller()).
        self.drivers, self.predictors, self.controllers = {}, {}, {}
        # The collision term of the search (runtime/collision_term.py): with obstacles, and against the other
        # agents when they avoid each other (set_collision_agents); `settled_last_tick` searches paid for it.
        self.collide_agents, self.settled_last_tick = False, 0
        self.kernel_s = 0.0         # this tick's time in the searcher's calls (stage_us["search_calls"]), s
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
        self.threads_last_tick, self.parallel = 1, False

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
        self.timescaled = bool(packed[:, S.W_TIMESCALE].any())      # else the timescale stage is skipped
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
            self.groups.append(SearchGroup(self.search_sets[i], None if m is None else m[1],
                                           float(self.packed[i, S.BIAS]), int(self.packed[i, S.NO_REWIND])))
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
            self.learned_clips = read_only(Clips(src.speeds, src.stop, src.contacts))
            self.learned_pose = read_only(src.pose)
            # Each learned agent plays its own pose row (rate, stride and warp are the crowd's).
            self.learned_play = self.state.playback.play._replace(frame=src.frame, frac=src.frac)

    def _cross_transition(self, i: int, src_frames: Frames, src_row: int, dst_frames: Frames, dst_row: int) -> None:
        """Agent i moves from row src_row of one pose source to row dst_row of another, an inertialized
        transition like a search jump (the stages' transition on a two-row source)."""
        pair = read_only(Frames(*(np.stack([a[src_row], b[dst_row]]) for a, b in zip(src_frames, dst_frames))))
        shown = self.state.playback.play
        play = Playhead(np.zeros(self.n, dtype=np.int64), np.zeros(self.n), shown.rate, shown.stride, shown.warp_angle,
                        shown.contacts)
        inert = self.state.inertialization
        transition_stage(np.array([i]), np.array([1]), pair, np.array([1, 2], dtype=np.int64), inert.offsets, play,
                         self.packed, inert.scratch)

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
            terrain = Terrain(False, np.zeros((2, 2)), 0.0, 0.0, 1.0, float(halflife))
        else:
            terrain = Terrain(True, np.ascontiguousarray(terrain.heights, dtype=np.float64),
                              float(terrain.origin[0]), float(terrain.origin[1]), float(terrain.cell), float(halflife))
        self.terrain = read_only(terrain)
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

    def collision_world(self) -> CollisionWorld | None:
        """The tick's CollisionWorld, or None when the collision term has nothing to look at (no obstacles,
        no agents counted) or every weight is 0: then the search is exactly as without the term."""
        others = self.collide_agents and self.n > 1
        if (self.obstacles is None and not others) or not self.packed[:, S.COLLISION_WEIGHT].any():
            return None
        s = self.state
        return new_world(self.obstacles, s.playback.root.pos[:, [0, 2]], s.controller.table[:, [VX, VZ]],
                         s.db.traj_times, others)

    def set_driver(self, i: int, driver) -> None:
        """Agent i's controller follows `driver` (handed controller(i)) instead of its stick: an object with
        step(controller, t, dt) and, if it knows the trajectory ahead (a path does), predict(controller, offsets,
        fps) (without: the controller's own prediction); None: the stick again. An input log cannot hold a
        driver: it stops being replayable."""
        self.predictors.pop(i, None)
        if driver is None:
            self.drivers.pop(i, None)
            return
        self.drivers[i] = driver
        if getattr(driver, "predict", None) is not None:
            self.predictors[i] = driver
        if self.input_log is not None:
            self.input_log.refuse(f"a crowd's agent {i} follows a {type(driver).__name__} driver")

    def controller(self, i: int) -> Controller:
        """A Controller view of agent i's row of the controller table (made once per agent)."""
        view = self.controllers.get(i)
        if view is None:
            view = self.controllers[i] = Controller(self.controller_settings, table=self.state.controller.table, row=i)
        return view

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
            frames, row = self.learned_pose, i     # its own pose row
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
        """Advance every agent one tick by its stick. move: (n, 2) stick (x right, z forward, world frame),
        magnitude 0..1 (longer sticks are clamped); run, strafe: (n,) bool; look: (n, 2), NaN rows = no look."""
        n = self.n
        sticks = Sticks(np.ascontiguousarray(np.broadcast_to(np.asarray(move, dtype=np.float64), (n, 2))),
                        np.ascontiguousarray(np.broadcast_to(np.asarray(run, dtype=np.bool_), (n,))),
                        np.ascontiguousarray(np.broadcast_to(np.asarray(strafe, dtype=np.bool_), (n,))),
                        np.ascontiguousarray(np.broadcast_to(np.asarray(look, dtype=np.float64), (n, 2))))
        if self.input_log is not None:
            self.input_log.tick(tuple(a.copy() for a in sticks), dt)
        self.tick(dt, sticks)

    def tick(self, dt: float = 1.0 / 60.0, sticks: Sticks | None = None) -> None:
        """Advance every agent dt seconds, stage by stage, on the threads the chooser picks (timed for it).
        sticks: every agent's stick (step); None when each agent has a driver (set_driver). stage_us: each
        stage's time, microseconds; "search_calls": the part of "search" in the searcher's calls (the kernel)."""
        dt = float(dt)
        self.ticks += 1
        k = self.thread_chooser.pick()
        # A crowd of one runs nothing in parallel: numba's thread count (a process-wide lock per get or set) is
        # left alone.
        threads_before = k if self.n == 1 else numba.get_num_threads()
        self.parallel = k > 1
        t0 = time.perf_counter()
        self.kernel_s = 0.0
        try:
            if k != threads_before:
                numba.set_num_threads(k)
            predicted = self._control(dt, sticks)
            t1 = time.perf_counter()
            agents = self._plan(dt)
            if len(agents):
                self._search(agents, predicted)
            t2 = time.perf_counter()
            self._advance_source(dt)
            self._playback(dt)
            t3 = time.perf_counter()
            self._output(dt, self.everyone)
            self.stage_us = {"controller": (t1 - t0) * 1e6, "search": (t2 - t1) * 1e6, "playback": (t3 - t2) * 1e6,
                             "output": (time.perf_counter() - t3) * 1e6, "search_calls": self.kernel_s * 1e6}
            self.time += dt
            self._follow_requests(dt)
        finally:
            if k != threads_before:
                numba.set_num_threads(threads_before)
        self.thread_chooser.record(k, time.perf_counter() - t0)
        self.threads_last_tick = k

    def _control(self, dt: float, sticks: Sticks | None) -> dict:
        """The controller stage: each controller advances dt seconds by its stick, its driver (set_driver) or
        its request (stops, foot plants: runtime/requests.py), then heads around the obstacles, unless a
        request or a route (`routed`) leads it. Returns {agent: driver} of the agents whose driver predicts
        their desired trajectory: those not steered (a driver knows nothing of the obstacles)."""
        ctrl, cs = self.state.controller.table, self.controller_settings
        driven = self.requests.driving() if self.requests.busy else NO_AGENTS
        before = None if self.obstacles is None else ctrl.copy()
        if sticks is not None:
            # The stick moves every row in one call; the rows a driver or request moves are put back after.
            own = [*driven, *self.drivers]
            kept = ctrl[own] if own else None
            (gamepad_step if self.parallel else gamepad_serial)(ctrl, *sticks, dt, cs.packed())
            if own:
                ctrl[own] = kept
        drivers = self.drivers if not len(driven) else {i: d for i, d in self.drivers.items() if i not in driven}
        for i, driver in drivers.items():
            driver.step(self.controller(i), self.time, dt)
        drivers = self.predictors if not len(driven) else {i: d for i, d in self.predictors.items() if i not in driven}
        if before is not None:
            routed = self.state.controller.routed
            agents = self.everyone if not (len(driven) or routed.any()) else np.setdiff1d(np.flatnonzero(~routed),
                                                                                          driven)
            steered = steer_controllers(ctrl, before, agents, self.obstacles, dt, cs.rotation_halflife,
                                        cs.gait_halflife, self.state.controller.steered)
            drivers = {i: d for i, d in drivers.items() if not steered[i]}
        if len(driven):
            self.requests.drive(ctrl, driven, cs, dt)
        return drivers

    def _plan(self, dt: float) -> np.ndarray:
        """The plan stage (matching.plan_stage): the orientation-warp plan, and who searches now (each agent's
        own search phase, sharp input changes, the clip running out); annotated loops jump back to their
        start and blocked frames put searches off. Returns the agents that search (int64)."""
        s, L = self.state, self.learned
        play, searching = s.playback.play, s.search.searching
        # Learned agents play no clip to hold (still_to 0: never held).
        frame, stop, still = ((play.frame, s.db.clips.stop, s.db.still_to) if L is None
                              else (L.frame, L.never, np.zeros_like(L.never)))
        rules = s.db.annotations
        if rules.loop_to is not None and L is None:
            looping, start = loop_wraps(rules.loop_to, play.frame, s.search.clip_hold)
            if len(looping):      # a loop range's end continues at its start: an inertialized jump
                s.search.transitions[looping] += 1
                self._transition(transition_stage, looping, start)
        count = self.calls(plan_stage if self.parallel else plan_serial, dt, s.controller.table, s.playback.warp,
                           s.search.timers, self.packed, frame, stop, s.search.clip_hold, still, searching)
        if rules.blocked is not None and L is None:
            hold_blocked(rules.blocked, play.frame, stop, searching)
            count = np.count_nonzero(searching)
        if self.requests.busy and L is None:
            s.playback.warp[self.requests.timed(), FIXED_RATE] = 1.0      # plan_stage cleared it: set after
        self.searches_last_tick = int(count)
        # Nobody or everybody searching (a Character's every tick) makes no new array.
        return NO_AGENTS if not count else self.everyone if count == self.n else np.flatnonzero(searching)

    def _advance_source(self, dt: float) -> None:
        """The pose source's stage: each agent's play rate and stride from the error its database frames
        predict (timescale.timescale_stage), or the learned agents' model stepped and decompressed."""
        s, L = self.state, self.learned
        play = s.playback.play
        if L is None:
            if self.timescaled:
                timescale_stage(dt, s.controller.table, s.playback.warp, self.packed, play.frame,
                                *s.db.future_speeds, play.rate, play.stride)
        else:
            learned.advance(L, play.rate, dt)

    def _playback(self, dt: float) -> None:
        """The playback and inertialization stage (playback.playback_stage): play rate and stride, advance,
        sample, inertialize, root integration and synchronization with the simulation, orientation twist."""
        s = self.state
        frames, clips, play = self.pose_source()
        self.calls(playback_stage if self.parallel else playback_serial, dt, frames, clips, s.controller.table,
                   s.playback.warp, self.packed, play, s.inertialization.offsets, s.inertialization.shown,
                   s.playback.root)

    def _output(self, dt: float, only) -> None:
        """The touch-ups stage (touchups.output_stage) of agents `only`: root placement, orientation warp,
        forward kinematics, ground, foot locking, hips drop, slope warping and leg IK."""
        s = self.state
        self.calls(output_stage if self.parallel and len(only) >= PARALLEL_FROM else output_serial, only, float(dt),
                   s.inertialization.shown, s.playback.root, s.playback.play, self.packed, s.db.rig, self.terrain,
                   s.touchups.feet, s.touchups.out, 0.0 if self.learned is None else learned.LEARNED_RELOCK_SPEED)

    def _follow_requests(self, dt: float) -> None:
        """The requests' stage, once the tick's frames are shown: events delivered, actions ended, roots at rest
        (Requests.after_playback), applied to the agents."""
        if not self.requests.busy:
            return
        d = self.requests.after_playback(self, dt)
        s = self.state
        s.search.clip_hold[d.hold] = True
        for i in d.release:
            self._release(i)
        for i in d.follow:
            follow_root(s.controller.table, i, s.playback.root)
        for i, (x, z) in d.glide.items():
            s.playback.root.pos[i, 0], s.playback.root.pos[i, 2] = x, z

    def _transition(self, stage, agents: np.ndarray, to: np.ndarray) -> None:
        """Inertialized transitions of `agents` to database frames `to` (a playback transition stage)."""
        s = self.state
        self.calls(stage, agents, to, s.db.frames, s.db.clips.stop, s.inertialization.offsets, s.playback.play,
                   self.packed, s.inertialization.scratch)

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
            self._transition(transition_stage, np.array([i]), np.array([to]))
        self.state.search.clip_hold[i] = True
        self._logged("play_clip", [int(i), r, off])

    def _search(self, agents: np.ndarray, predicted: dict) -> None:
        """The search stage of `agents`: desired trajectories (the controller's prediction, a driver's, a
        request's), queries, then the database search (or the learned agents' projection) and the
        transitions it decides. predicted: {agent: driver} whose driver predicts its trajectory."""
        s, cs, fps = self.state, self.controller_settings, self.db.fps
        desired = s.search.desired
        predict_stage(agents, s.controller.table, self.traj_frames, float(fps), cs.rotation_halflife, desired.pos,
                      desired.rot)
        if predicted:
            offsets = self.traj_frame_list
            for i in agents:
                if i in predicted:
                    desired.pos[i], desired.rot[i] = predicted[i].predict(self.controller(int(i)), offsets, fps)
        if self.requests.busy:
            for i, (p, r) in self.requests.predict(agents, s.controller.table, cs, s.db.traj_offsets, fps).items():
                desired.pos[i], desired.rot[i] = p, r
        raw = self.raw_rows if agents is self.everyone else np.empty((len(agents), s.db.raw_features.shape[1]))
        L = self.learned
        features, frame = (s.db.raw_features, s.playback.play.frame) if L is None else (L.raw, L.frame)
        self.calls(query_stage if self.parallel and len(agents) >= PARALLEL_FROM else query_serial, agents, features,
                   frame, desired, s.controller.table, s.playback.warp, self.packed, s.playback.root, raw)
        if len(s.db.height_layout):
            self.calls(height_query, agents, desired.pos, s.playback.root.pos, self.terrain, s.db.height_layout, raw)
        if L is None:
            self._match(agents, raw)
        else:
            self._learned_search(agents, raw)

    def _match(self, agents: np.ndarray, raw: np.ndarray) -> None:
        """The database search of `agents` for their raw queries (one row each): one batch per search group,
        idle agents alone, requests' own searches, the collision term; then the transitions."""
        s = self.state
        frame = s.playback.play.frame
        everyone = agents is self.everyone
        if everyone:
            best, cost = self.best_rows, self.cost_rows
        else:
            best, cost = np.empty(len(agents), dtype=np.int64), np.empty(len(agents))
        own = None
        if self.requests.busy:
            own = self.requests.shapes_search(agents)
            if own.any():
                best[own], cost[own], s.search.query[agents[own]] = self.requests.search(
                    self, agents[own], raw[own], self.controller_settings)
            else:
                own = None
        world = self.collision_world()
        self.settled_last_tick = 0
        for g, sel in self._group_rows(agents, own):
            group = self.groups[g]
            ss, mask, bias, skip = group
            whole = len(sel) == len(agents)     # then sel is every row, in order
            ids = agents if whole else agents[sel]
            q = ss.normalize(raw if whole else raw[sel])
            s.search.query[ids] = q
            # The frames just around the playing one are excluded inside the search: a small jump back
            # replays what was just shown (a stutter loop on slow walks), and throwing such a result
            # away afterwards left a character frozen on a short clip's last frame.
            # Idle characters search alone: on frames with a still stretch ahead to hold, off the one they
            # just played (no pose loop).
            idle = resting(s.controller.table, ids)
            any_idle = idle.any()
            wide = max(skip, self.idle_skip)
            idle_mask = None
            if any_idle:
                held = ss.idle_mask(self.db, self.tag_filters[ids[0]], s.db.holdable)
                idle_mask = None if held is None else held[1]
            t0 = time.perf_counter()
            if len(sel) == 1 or any_idle:
                for k in range(len(sel)) if len(sel) == 1 else np.flatnonzero(idle):
                    best[sel[k]], cost[sel[k]] = ss.searcher.search(q[k], current=int(frame[ids[k]]),
                                                                    skip=wide if idle[k] else skip, bias=bias,
                                                                    mask=idle_mask if idle[k] else mask)
            if len(sel) > 1 and not idle.all():
                busy = np.flatnonzero(~idle)
                best[sel[busy]], cost[sel[busy]] = ss.searcher.search_batch(
                    q[busy], current=frame[ids[busy]], skip=skip, bias=bias, mask=mask)
            self.kernel_s += time.perf_counter() - t0
            if world is not None:
                b, c = best[sel], cost[sel]
                self._collide(world, group, ids, q, idle, idle_mask, wide, b, c)
                best[sel], cost[sel] = b, c
        jump = np.logical_and(best >= 0, best != frame[agents], out=self.jump_rows if everyone else None)
        jumps = self._searched(agents, best, cost, jump)
        if jumps:
            # Every agent jumping (a Character's jumps): the crowd's own rows, typed once.
            movers, to = (agents, best) if everyone and jumps == len(agents) else (agents[jump], best[jump])
            self._transition(transition_parallel if self.parallel and len(movers) >= PARALLEL_FROM
                             else transition_stage, movers, to)

    def _group_rows(self, agents: np.ndarray, own) -> list:
        """[(search group, rows of `agents` in it)], less the rows `own` (bool; None: none) a request searches."""
        if own is None and len(self.groups) == 1:
            return [(0, self.everyone[:len(agents)])]
        groups = self.group_of[agents] if own is None else np.where(own, -1, self.group_of[agents])
        return [(g, np.flatnonzero(groups == g)) for g in np.unique(groups[groups >= 0])]

    def _collide(self, world, group: SearchGroup, ids: np.ndarray, q: np.ndarray, idle: np.ndarray, idle_mask,
                 wide: int, best: np.ndarray, cost: np.ndarray) -> None:
        """The collision term over the answers (best, cost) of one group's agents `ids`, in place: idle
        agents searched with idle_mask and skip `wide` (frames), walking ones with the group's mask and skip."""
        s = self.state
        cand = shared(self.db, "collision_paths", lambda: candidate_paths(s.db.raw_features, s.db.traj_layout))
        for part, m, k in ((np.flatnonzero(idle), idle_mask, wide), (np.flatnonzero(~idle), group.mask, group.skip)):
            if not len(part):
                continue
            b, c = best[part], cost[part]
            at = ids[part]
            agents = Group(at, q[part], s.playback.play.frame[at], self.packed[at, S.COLLISION_WEIGHT],
                           s.playback.root.pos, s.playback.root.yaw)
            self.settled_last_tick += apply_collision_term(group.search_set.searcher, m, agents, k, group.bias, world,
                                                           cand, b, c)
            best[part], cost[part] = b, c

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
            inert = self.state.inertialization
            self.calls(transition_stage, movers, self.n + movers, self.learned_pose, L.stop, inert.offsets,
                       self.learned_play, self.packed, inert.scratch)
            L.frame[movers] = movers

    def _searched(self, agents, best, cost, jump) -> int:
        """Bookkeeping after a search (crowd_state.record_search), and when it was; returns how many jumped."""
        s = self.state
        jumps = self.calls(record_search, s.search, s.playback.play.frame, self.packed, agents, best, cost, jump)
        s.search.time[agents] = self.time
        return jumps

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
        return self.learned_pose, self.learned_clips, self.learned_play

    def local_pose(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Agent i's output local pose (J, 3) / (J, 4), joint 0 the character root in the world (for BVH)."""
        return self.state.touchups.out.local_pos[i].copy(), self.state.touchups.out.local_rot[i].copy()


for _name, _path in PUBLIC_ARRAYS.items():
    setattr(Crowd, _name, property(attrgetter("state." + _path), doc=f"Crowd.state.{_path} (a view)."))
