"""Requests with event constraints (seed 003: "this event must happen exactly 0.8 s after I start"), per
agent of a crowd, held as structure-of-arrays.

- An action request ("do a `bow` with its event in 0.8 s") restricts the agent's searches to the clips that
  hold marks of the event type and asks, in the query's time_to_event column of that type, for the requested
  remaining time, counting down each tick. The event is delivered on the tick that shows its marked frame;
  the action then plays on for AFTER_S (or to its clip's end) before locomotion resumes. While an action runs
  the simulation follows the animation's root (root motion drives; the stick is ignored).
- A stop request ("stop with the event `stop` at P") drives the simulation to P with a braking profile (speed
  at most sqrt(2 DECELERATION d)), predicts the trajectory under that profile and asks, in the `stop`
  time_to_event column, for the predicted time until the simulation rests. Once slow within SETTLE_M of P
  the simulation is pinned there and the character root glides onto P (at most GLIDE_SPEED, only while the
  animation's root is slower than GLIDE_BELOW: the talk's position correction). The rest point is where the
  root then stays still (below REST_SPEED for REST_HOLD_S). The request holds the agent at P until it is
  cancelled or replaced.
- A foot plant request ("plant the left foot at P") steers the simulation at its speed (at least
  STOP_CRUISE_MIN) to where the character root is when a foot plants at P (P less the foot's mean offset at
  plants, turned to the travel direction) and asks, in the foot's time_to_event column, for the time until
  it gets there. The first plant of that foot within PLANT_WINDOW_S of the arrival ends the request; the log
  holds where the foot joint (ankle) landed.
Without an active request nothing here touches the agent: time_to_event channels have weight 0 in its
searches (runtime/search_sets.py search_set), so locomotion searches as before.
Times in seconds, distances in metres; the stick plane is (x, z).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from . import settings as S
from .controller import (AX, AZ, GOAL_VX, GOAL_VZ, GOAL_YAW, HALFLIFE, PX, PZ, VX, VZ, YAW, YAW_RATE,
                         advance_state, wrap_angle)
from .search_sets import search_set

NONE, ACTION, STOP, PLANT = 0, 1, 2, 3
PENDING, AFTER, HOLD = 0, 1, 2          # action: before / after its event; stop: approaching / at rest
AFTER_S = 0.6                           # the action plays on this long after its event
MISS_S = 0.5                            # an event this late is reported missed
DECELERATION = 1.5                      # m/s^2 of the stop's braking profile
STOP_CRUISE_MIN = 1.0                   # m/s: a stop request from standing walks to P at least this fast
REST_SPEED = 0.05                       # m/s: the root is at rest below this ground speed ...
REST_HOLD_S = 0.25                      # ... for this long
SETTLE_M = 0.06                         # a slow simulation this close to the target stands still
GLIDE_SPEED = 0.2                       # m/s: the root's glide onto an arrived stop's target ...
GLIDE_BELOW = 0.5                       # ... while the animation's root is slower than this (m/s)
PLANT_WINDOW_S = 0.35                   # s: a foot plant counts this close to the arrival at its point


class RequestError(ValueError):
    """A request the database cannot serve; the message names the field."""


class Decisions(NamedTuple):
    """What the crowd applies to its agents after a tick's request bookkeeping (Requests.after_playback)."""

    hold: list        # agents whose clip plays on: no search cuts an action at its peak
    release: list     # agents the stick drives again: clip hold off, search now
    follow: list      # agents whose simulation takes the root's place and motion (follow_root)
    glide: dict       # agent -> (x, z) m: the root's new ground position (an arrived stop's glide)


class Requests:
    """The request state of a crowd's n agents (one row each) and the log of delivered requests.

    The crowd (runtime/crowd.py) owns its agents' arrays: methods here read them and return what the crowd
    applies (a search to force, a clip hold to release, Decisions); `drive` advances the controller rows the
    crowd hands it.

    log: dicts {"agent", "kind": "action", "event", "requested_s" (due time), "delivered_s" (None: missed)},
    {"agent", "kind": "stop_at", "target" [x, z], "rest" [x, z] | None, "error_m"} and
    {"agent", "kind": "plant_at", "side", "target", "foot" [x, z] | None, "error_m"}.
    """

    def __init__(self, db, n: int):
        self.db = db
        schema = db.features.schema
        slices = schema.slices()
        # event type -> (feature column, horizon s, channel name)
        self.channels = {c.event: (slices[c.name].start, c.horizon, c.name)
                         for c in schema.channels if c.kind == "time_to_event"}
        self.kind = np.zeros(n, dtype=np.int64)
        self.busy = False      # any request active: the crowd skips every request stage while not
        self.phase = np.zeros(n, dtype=np.int64)
        self.event = [None] * n
        self.due = np.zeros(n)
        self.until = np.zeros(n)
        self.target = np.zeros((n, 2))
        self.still_since = np.full(n, np.nan)
        self.arrived = np.zeros(n, dtype=np.bool_)
        self.prev_frame = np.full(n, -1, dtype=np.int64)
        self.log: list[dict] = []
        self.side = [None] * n
        self.aim = np.zeros((n, 2))
        # Foot position (x right, z forward, m) relative to the simulation bone at its plants, as a line in
        # the hips' ground speed (m/s): a running foot lands ~20 cm further back than a walking one, which the
        # mean of all plants put on every plant (a plant from a run missed by ~40 cm).
        self.plant_offsets = {}
        for side in ("left", "right"):
            ev, ch = f"foot_plant_{side}", f"{side}_foot_position"
            frames = db.events.frames_of(ev)
            if ev in self.channels and ch in slices and len(frames):
                off = db.features.raw[frames, slices[ch]][:, [0, 2]]
                fit = np.zeros((2, 2))
                fit[0] = off.mean(axis=0)
                if "hips_velocity" in slices and len(frames) >= 8:
                    hv = db.features.raw[frames, slices["hips_velocity"]]
                    speed = np.hypot(hv[:, 0], hv[:, 2])
                    if np.ptp(speed) > 0.5:
                        fit = np.linalg.lstsq(np.stack([np.ones_like(speed), speed], 1), off, rcond=None)[0]
                self.plant_offsets[side] = fit      # offset = fit[0] + fit[1] * speed

    # ------------------------------------------------------------------------------------------
    # asking

    def event_column(self, event: str) -> tuple[int, float, str]:
        if event not in self.channels:
            raise RequestError(f"action: the database has no time_to_event channel for {event!r} (channels for: "
                               f"{', '.join(sorted(self.channels)) or 'none'}; build with `motionmatch build "
                               f"--default actions` or a schema with time_to_event channels)")
        return self.channels[event]

    def action(self, i: int, event: str, event_in: float, now: float) -> bool:
        """Agent i performs the action whose clips carry `event` marks, the event `event_in` s from `now`
        (the crowd's time). The agent must search now; returns whether the request it replaces held its
        clip (the crowd releases it: cancel)."""
        self.event_column(event)
        if not (isinstance(event_in, (int, float)) and math.isfinite(event_in) and 0.0 < event_in <= 10.0):
            raise RequestError(f"event_in: expected seconds in (0, 10], got {event_in!r}")
        released = self.cancel(i)
        self.kind[i], self.phase[i], self.event[i] = ACTION, PENDING, event
        self.busy = bool(self.kind.any())
        self.due[i] = now + float(event_in)
        self.prev_frame[i] = -1
        return released

    def stop_at(self, i: int, point) -> bool:
        """Agent i stops with its root at rest at `point` (x, z). Stop clips are matched by their time to
        the `stop` mark where the database has that channel; without it the stop trajectory alone steers
        the search and the root glide settles the rest. The agent must search now; returns as action."""
        if not (isinstance(point, (list, tuple, np.ndarray)) and len(point) == 2
                and all(isinstance(v, (int, float, np.floating)) and math.isfinite(v) for v in point)):
            raise RequestError(f"stop_at: expected two finite numbers [x, z], got {point!r}")
        released = self.cancel(i)
        self.kind[i], self.phase[i], self.event[i] = STOP, PENDING, "stop"
        self.busy = bool(self.kind.any())
        self.target[i] = [float(point[0]), float(point[1])]
        self.still_since[i] = np.nan
        self.arrived[i] = False
        return released

    def foot_plant(self, i: int, point, side: str = "left") -> bool:
        """Agent i plants its `side` foot at `point` (x, z). The agent must search now; returns as action."""
        if side not in ("left", "right"):
            raise RequestError(f"side: expected 'left' or 'right', got {side!r}")
        self.event_column(f"foot_plant_{side}")
        if not (isinstance(point, (list, tuple, np.ndarray)) and len(point) == 2
                and all(isinstance(v, (int, float, np.floating)) and math.isfinite(v) for v in point)):
            raise RequestError(f"plant_at: expected two finite numbers [x, z], got {point!r}")
        released = self.cancel(i)
        self.kind[i], self.phase[i], self.event[i], self.side[i] = PLANT, PENDING, f"foot_plant_{side}", side
        self.busy = bool(self.kind.any())
        self.target[i] = [float(point[0]), float(point[1])]
        self.aim[i] = self.target[i]
        self.until[i] = np.inf
        return released

    def cancel(self, i: int) -> bool:
        """End agent i's request (an unfinished stop is logged as not at rest, an unfinished plant as missed).
        Returns whether it was an action: the crowd then releases the agent's clip hold and searches now."""
        released = False
        if self.kind[i] == STOP and self.phase[i] == PENDING:
            self._log_stop(i, None)
        if self.kind[i] == PLANT:
            self._log_plant(i, None)
        if self.kind[i] == ACTION:
            if self.phase[i] == PENDING:
                self.log.append({"agent": int(i), "kind": "action", "event": self.event[i],
                                 "requested_s": round(float(self.due[i]), 6), "delivered_s": None})
            released = True
        self.kind[i] = NONE
        self.busy = bool(self.kind.any())
        self.event[i] = None
        return released

    # ------------------------------------------------------------------------------------------
    # the tick

    def driving(self) -> np.ndarray:
        """Agents whose controller a request drives (stops, foot plants)."""
        return np.flatnonzero((self.kind == STOP) | (self.kind == PLANT))

    def timed(self) -> np.ndarray:
        """Agents performing an action: their clips play as captured (rate 1), or the event the search
        timed by the clip's time_to_event would come late."""
        return np.flatnonzero(self.kind == ACTION)

    def drive(self, ctrl, agents, cs, dt: float) -> None:
        """Advance the controller rows of driven agents dt seconds toward their targets (instead of the
        stick). cs: ControllerSettings."""
        for i in agents:
            if self.kind[i] == PLANT:
                self._plant_drive(ctrl, i, cs, dt)
                continue
            if self.arrived[i]:
                # Pinned at the target: clamping drags the simulation toward a root that overshot, and chasing
                # back a few centimetres asks the search for slow steps that overshoot again.
                st = ctrl[i]
                st[PX], st[PZ] = self.target[i]
                st[VX] = st[VZ] = st[AX] = st[AZ] = st[GOAL_VX] = st[GOAL_VZ] = 0.0
                continue
            stop_step(ctrl, i, self.target[i], cs, dt)
            st = ctrl[i]
            self.arrived[i] = (math.hypot(st[PX] - self.target[i, 0], st[PZ] - self.target[i, 1]) < SETTLE_M
                               and math.hypot(st[VX], st[VZ]) < 0.3)

    def shapes_search(self, agents: np.ndarray) -> np.ndarray:
        """(len(agents),) bool: whose query and search a request shapes (pending actions, stops)."""
        k, p = self.kind[agents], self.phase[agents]
        return ((k == ACTION) & (p == PENDING)) | (k == STOP) | (k == PLANT)

    def predict(self, agents: np.ndarray, ctrl, cs, offsets, fps: float) -> dict:
        """The stop profile's trajectory of the stopping ones of `agents`: {agent: (positions (K, 3),
        rotations (K, 4))} at frame `offsets` from their controller rows (ctrl); cs: ControllerSettings."""
        out = {}
        for i in agents:
            if self.kind[i] == STOP:
                pos, yaw, _ = stop_rollout(ctrl[i], self.target[i], cs, offsets, float(fps))
                h = 0.5 * yaw
                out[int(i)] = pos, np.stack([np.cos(h), np.zeros_like(h), np.sin(h), np.zeros_like(h)], 1)
        return out

    def search(self, crowd, agents: np.ndarray, raw: np.ndarray, cs):
        """Search of agents whose request shapes it: returns (best (k,), cost (k,), normalized queries (k, F))."""
        best = np.empty(len(agents), dtype=np.int64)
        cost = np.empty(len(agents))
        qs = np.empty((len(agents), raw.shape[1]), dtype=np.float32)
        fps = float(crowd.db.fps)
        for a, i in enumerate(agents):
            event = self.event[i]
            col, horizon, _ = self.channels.get(event, (-1, 0.0, ""))
            q = raw[a].copy()
            if self.kind[i] == STOP and col < 0:
                ss = search_set(crowd.db, crowd.settings[i])
                mask = ss.mask(crowd.db, crowd.tag_filters[i])
            elif self.kind[i] == ACTION:
                # The shown frame after a jump to the result is one frame on (playback advances first), so
                # the result's own time to the event is the time from now.
                q[col] = min(max(self.due[i] - crowd.time, 0.0), horizon)
                ss = search_set(crowd.db, crowd.settings[i], events=(event,))
                mask = action_mask(crowd.db, ss, event)
            elif self.kind[i] == PLANT:
                q[col] = min(self._arrival_s(crowd.ctrl[i], i), horizon)
                ss = search_set(crowd.db, crowd.settings[i], events=(event,))
                mask = ss.mask(crowd.db, crowd.tag_filters[i])
            else:
                _, _, t_rest = stop_rollout(crowd.ctrl[i], self.target[i], cs, crowd.traj_offsets, fps, horizon)
                q[col] = t_rest
                # At rest the stop column is left out: frames after a stop mark (standing) have no stop ahead.
                ss = search_set(crowd.db, crowd.settings[i], events=(event,) if t_rest > 2.0 / fps else ())
                mask = ss.mask(crowd.db, crowd.tag_filters[i])
            qs[a] = ss.normalize(q)
            best[a], cost[a] = ss.searcher.search(qs[a], current=int(crowd.frame[i]),
                                                  skip=int(crowd.packed[i, S.NO_REWIND]),
                                                  bias=float(crowd.packed[i, S.BIAS]),
                                                  mask=None if mask is None else mask[1])
        return best, cost, qs

    def after_playback(self, crowd, dt: float) -> Decisions:
        """Bookkeeping once the tick's frames are shown (crowd.time is the shown frame's time; the crowd is
        read, not written): events delivered, actions ended, roots at rest. Returns what the crowd
        applies: running actions carry the simulation with the root, arrived stops glide the root onto
        the target."""
        out = Decisions([], [], [], {})
        for i in np.flatnonzero(self.kind != NONE):
            if self.kind[i] == ACTION:
                self._action_tick(crowd, i, out)
            elif self.kind[i] == PLANT:
                self._plant_tick(crowd, i, out)
            else:
                self._stop_tick(crowd, i, dt, out)
        return out

    def _action_tick(self, crowd, i: int, out: Decisions) -> None:
        frame = int(crowd.frame[i])
        if self.phase[i] == PENDING:
            col, horizon, _ = self.channels[self.event[i]]
            tte = crowd.raw_features[:, col]
            prev = self.prev_frame[i]
            hit = tte[frame] == 0.0
            if not hit and prev >= 0 and crowd.range_of[prev] == crowd.range_of[frame] and 0 < frame - prev <= 3:
                hit = tte[prev] < horizon and tte[prev] * crowd.db.fps <= frame - prev + 1e-3   # stepped over it
            self.prev_frame[i] = frame
            if hit:
                self.log.append({"agent": int(i), "kind": "action", "event": self.event[i],
                                 "requested_s": round(float(self.due[i]), 6), "delivered_s": round(crowd.time, 6)})
                self.phase[i] = AFTER
                self.until[i] = crowd.time + AFTER_S
                out.hold.append(int(i))         # play on: no search cuts the action at its peak
            elif crowd.time > self.due[i] + MISS_S:
                if self.cancel(i):
                    out.release.append(int(i))
                return
        elif crowd.time >= self.until[i] or not crowd.clip_hold[i]:
            self.kind[i] = NONE
            self.busy = bool(self.kind.any())
            self.event[i] = None
            out.release.append(int(i))
        out.follow.append(int(i))

    def _stop_tick(self, crowd, i: int, dt: float, out: Decisions) -> None:
        speed = math.hypot(crowd.root_vel[i, 0], crowd.root_vel[i, 2])
        rx, rz = crowd.root_pos[i, 0], crowd.root_pos[i, 2]
        off = math.hypot(rx - self.target[i, 0], rz - self.target[i, 1])
        if self.arrived[i] and speed < GLIDE_BELOW and off > 0.005:
            # The stop animation ends where it ends (up to the clamping radius away); the last centimetres
            # are a slow glide of the root (seed 003's position correction; locked feet stay planted).
            step = min(off, GLIDE_SPEED * dt) / off
            rx += (self.target[i, 0] - rx) * step
            rz += (self.target[i, 1] - rz) * step
            out.glide[int(i)] = rx, rz
        if self.phase[i] != PENDING:
            return
        near = math.hypot(crowd.ctrl[i, PX] - self.target[i, 0], crowd.ctrl[i, PZ] - self.target[i, 1]) < 0.15
        if speed < REST_SPEED and near and (off <= 0.01 or not self.arrived[i]):
            if np.isnan(self.still_since[i]):
                self.still_since[i] = crowd.time
            elif crowd.time - self.still_since[i] >= REST_HOLD_S - 1e-9:
                self._log_stop(i, (float(rx), float(rz)))
                self.phase[i] = HOLD
        else:
            self.still_since[i] = np.nan

    def _log_stop(self, i: int, rest) -> None:
        t = self.target[i]
        self.log.append({"agent": int(i), "kind": "stop_at", "target": [float(t[0]), float(t[1])],
                         "rest": None if rest is None else [round(rest[0], 5), round(rest[1], 5)],
                         "error_m": None if rest is None else round(math.hypot(rest[0] - t[0], rest[1] - t[1]), 5)})

    def _plant_drive(self, ctrl, i: int, cs, dt: float) -> None:
        st = ctrl[i]
        if self.phase[i] == PENDING:
            dx, dz = self.target[i, 0] - st[PX], self.target[i, 1] - st[PZ]
            yaw = math.atan2(dx, dz) if math.hypot(dx, dz) > 0.3 else st[GOAL_YAW]
            fit = self.plant_offsets.get(self.side[i])
            ox, oz = (0.0, 0.0) if fit is None else fit[0] + fit[1] * math.hypot(st[VX], st[VZ])
            c, sn = math.cos(yaw), math.sin(yaw)
            ax, az = self.target[i, 0] - (ox * c + oz * sn), self.target[i, 1] - (-ox * sn + oz * c)
            d = math.hypot(ax - st[PX], az - st[PZ])
            if d > 0.05 and (ax - st[PX]) * st[VX] + (az - st[PZ]) * st[VZ] >= 0.0:
                self.aim[i] = ax, az
                cruise = min(max(math.hypot(st[VX], st[VZ]), STOP_CRUISE_MIN), cs.run_forward_speed)
                st[GOAL_VX], st[GOAL_VZ] = (ax - st[PX]) / d * cruise, (az - st[PZ]) / d * cruise
                st[GOAL_YAW] = yaw
            else:   # there (or past it): keep going straight until the plant
                self.phase[i] = AFTER
        st[HALFLIFE] = cs.velocity_halflife
        advance_state(ctrl, i, dt, cs.rotation_halflife, cs.gait_halflife)

    def _arrival_s(self, row, i: int) -> float:
        """Seconds until the simulation reaches the plant's aim point at its speed (0 once there)."""
        if self.phase[i] != PENDING:
            return 0.0
        d = math.hypot(self.aim[i, 0] - row[PX], self.aim[i, 1] - row[PZ])
        return d / max(math.hypot(row[VX], row[VZ]), STOP_CRUISE_MIN)

    def _plant_tick(self, crowd, i: int, out: Decisions) -> None:
        col = self.channels[self.event[i]][0]
        t_arrive = self._arrival_s(crowd.ctrl[i], i)
        if t_arrive <= PLANT_WINDOW_S and not np.isfinite(self.until[i]):
            self.until[i] = crowd.time + t_arrive + PLANT_WINDOW_S
        if np.isfinite(self.until[i]) and crowd.raw_features[crowd.frame[i], col] == 0.0:
            foot = crowd.global_positions[i, crowd.db.roles[f"{self.side[i]}_foot"]]
            self._log_plant(i, (float(foot[0]), float(foot[2])))
            self.kind[i] = NONE
            self.busy = bool(self.kind.any())
        elif crowd.time > self.until[i] and self.cancel(i):
            out.release.append(int(i))

    def _log_plant(self, i: int, foot) -> None:
        t = self.target[i]
        self.log.append({"agent": int(i), "kind": "plant_at", "side": self.side[i], "target": [float(t[0]), float(t[1])],
                         "foot": None if foot is None else [round(foot[0], 5), round(foot[1], 5)],
                         "error_m": None if foot is None else round(math.hypot(foot[0] - t[0], foot[1] - t[1]), 5)})

    def reset(self, i: int) -> None:
        self.kind[i] = NONE
        self.busy = bool(self.kind.any())
        self.event[i] = None


def action_mask(db, ss, event: str):
    """The prepared search mask of an action request: the clips tagged `action:NAME`, else (events from a
    sidecar on any clips) the clips holding marks of the event."""
    tag = f"action:{event}"
    if tag in db.known_tags:
        return ss.mask(db, tag)
    key = ("event", event)
    if key not in ss.prepared:
        frames = np.zeros(db.num_frames, dtype=np.bool_)
        for r in np.unique(np.searchsorted(db.range_stops, db.events.frames_of(event), side="right")):
            frames[db.range_starts[r]:db.range_stops[r]] = True
        ss.prepared[key] = (frames, ss.searcher.prepare(frames))
    return ss.prepared[key]


def follow_root(ctrl, i: int, root) -> None:
    """Controller row i (the simulation) takes the place and motion of character root i (root: playback.Root;
    an action's root motion drives)."""
    c = ctrl
    c[i, PX], c[i, PZ] = root.pos[i, 0], root.pos[i, 2]
    c[i, VX], c[i, VZ] = root.vel[i, 0], root.vel[i, 2]
    c[i, AX] = c[i, AZ] = 0.0
    c[i, YAW] = c[i, GOAL_YAW] = wrap_angle(float(root.yaw[i]))
    c[i, YAW_RATE] = 0.0
    c[i, GOAL_VX], c[i, GOAL_VZ] = root.vel[i, 0], root.vel[i, 2]


def stop_goal(row_table, i: int, target, cs) -> None:
    """Goals of controller row i braking to `target` (x, z): toward it at min(cruise, sqrt(2 a d)) m/s,
    facing the way while farther than 0.3 m; cs: ControllerSettings."""
    st = row_table[i]
    dx, dz = target[0] - st[PX], target[1] - st[PZ]
    d = math.hypot(dx, dz)
    cruise = min(max(math.hypot(st[VX], st[VZ]), STOP_CRUISE_MIN), cs.run_forward_speed)
    speed = min(cruise, math.sqrt(2.0 * DECELERATION * d))
    if d < 0.01 or (d < SETTLE_M and math.hypot(st[VX], st[VZ]) < 0.3):
        # Chasing a few centimetres makes the search pick slow steps that overshoot them: stand instead.
        speed = 0.0
    st[GOAL_VX], st[GOAL_VZ] = (dx / d * speed, dz / d * speed) if d > 1e-9 else (0.0, 0.0)
    if d > 0.3:
        st[GOAL_YAW] = math.atan2(dx, dz)
    st[HALFLIFE] = cs.velocity_halflife


def stop_step(table, i: int, target, cs, dt: float) -> None:
    """Advance controller row i dt seconds braking to `target`: the velocity spring toward stop_goal, its
    speed then capped by the braking profile sqrt(2 a d) (the spring's lag alone overshoots the point)."""
    stop_goal(table, i, target, cs)
    advance_state(table, i, dt, cs.rotation_halflife, cs.gait_halflife)
    st = table[i]
    d = math.hypot(target[0] - st[PX], target[1] - st[PZ])
    cap = math.sqrt(2.0 * DECELERATION * d)
    v = math.hypot(st[VX], st[VZ])
    if v > cap:
        st[VX], st[VZ] = st[VX] * cap / v, st[VZ] * cap / v
        st[AX] = st[AZ] = 0.0
    if d < 0.005 and v < REST_SPEED:
        st[PX], st[PZ], st[VX], st[VZ] = target[0], target[1], 0.0, 0.0


def stop_rollout(row, target, cs, offsets, fps: float, horizon: float = 1.5):
    """Roll a copy of one controller row forward under the stop profile: positions (K, 3) and yaws (K,)
    at frame `offsets`, and the time (s, at most `horizon`) until it rests (speed below REST_SPEED within
    SETTLE_M of the target)."""
    st = np.array(row, dtype=np.float64).reshape(1, -1)
    dt = 1.0 / fps
    steps = max(int(max(offsets)), int(math.ceil(horizon * fps)))
    want = {int(o): k for k, o in enumerate(offsets)}
    pos, yaw = np.zeros((len(offsets), 3)), np.zeros(len(offsets))
    t_rest = horizon
    for s in range(1, steps + 1):
        stop_step(st, 0, target, cs, dt)
        if s in want:
            k = want[s]
            pos[k] = st[0, PX], row[1], st[0, PZ]
            yaw[k] = st[0, YAW]
        if t_rest == horizon and math.hypot(st[0, VX], st[0, VZ]) < REST_SPEED and \
                math.hypot(st[0, PX] - target[0], st[0, PZ] - target[1]) < SETTLE_M:
            t_rest = min(s * dt, horizon)
    if math.hypot(row[VX], row[VZ]) < REST_SPEED and math.hypot(row[PX] - target[0], row[PZ] - target[1]) < SETTLE_M:
        t_rest = 0.0
    return pos, yaw, t_rest
