"""A crowd's state as structure-of-arrays in named groups, one row per character: what the database
gives every agent (read only), then one group per stage of the tick (controller, search, playback,
inertialization, touch-ups). The groups are named tuples of arrays: made once by `new_crowd_state`,
their arrays written in place by the stages (runtime/crowd.py), never replaced, so the compiled
stages keep the records they were typed for (runtime/stage_calls.py).
Conventions: metres, seconds, radians; yaw 0 faces +Z.
"""
from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

from . import settings as S
from .annotation_play import AnnotationRules
from .controller import ControllerSettings, new_state, reset_state
from .frame_velocities import database_velocities
from .inertialization import Offsets, new_offsets
from .matching import (FORCE, IDLE_MIN_HOLD_S, SEARCH_COLUMNS, TIMER, Desired, lively_holds, still_stretch_ends,
                       trajectory_layout)
from .playback import (Clips, Frames, Playhead, Pose, Root, new_pose, new_shown_pose, read_only,
                       read_only_view)
from .search_sets import annotation_rules, shared
from .timescale import future_speeds, horizon_frames
from .trajectory_heights import height_layout
from .touchups import FOOT_LOCK, HEIGHT_COLUMNS, LEG_BUFFER, Display, Feet, Rig
from .warping import PoseWarpRig, clip_speeds, has_side_steps, new_warp_table


class DatabaseArrays(NamedTuple):
    """What the stages read of the database, per frame or per feature layout (shared by every crowd on
    one database: search_sets.shared)."""

    frames: Frames              # poses and velocities of every frame
    velocities: tuple           # database_velocities: (N, J, 3) vel, angvel, (N, 3) root vel, root angvel
    clips: Clips                # each frame's clip speed (m/s), clip end, foot contacts
    range_of: np.ndarray        # (N,) int64 the clip of each frame
    still_to: np.ndarray        # (N,) int64 where each frame's still stretch ends (idle holds)
    holdable: np.ndarray        # (N,) bool frames an idle agent may hold
    future_speeds: tuple        # timescale.future_speeds: the root speed ahead of each frame, m/s
    raw_features: np.ndarray    # (N, F) unnormalized features
    annotations: AnnotationRules
    traj_offsets: np.ndarray    # (K,) int64 trajectory points, frames ahead
    traj_times: np.ndarray      # (K,) the same in seconds
    traj_layout: np.ndarray     # (D, 3) int64 trajectory_layout
    height_layout: np.ndarray   # trajectory_heights.height_layout (empty: no height channels)
    side_steps: np.ndarray      # warping.has_side_steps
    rig: Rig                    # the joints the touch-ups work on


class ControllerState(NamedTuple):
    """The simulation characters (runtime/controller.py) and who steers around obstacles."""

    table: np.ndarray           # (n, STATE_COLUMNS) controller state table
    steered: np.ndarray         # (n,) bool: the goal was bent around an obstacle this tick
    routed: np.ndarray          # (n,) bool: a route (world/obstacle_routes.py) already avoids the obstacles


class SearchState(NamedTuple):
    """When each agent searches, what it asks, and the record of its last search (debugging tools)."""

    timers: np.ndarray          # (n, SEARCH_COLUMNS) matching's search timer and forced flag
    phase: np.ndarray           # (n,) fraction of the search interval the first search comes early by
    clip_hold: np.ndarray       # (n,) bool: a clip plays to its end with searches suspended
    searching: np.ndarray       # (n,) int64 nonzero for the agents that search this tick (plan stage)
    desired: Desired            # the desired trajectories the queries take
    query: np.ndarray           # (n, F) float32 the last normalized query
    best: np.ndarray            # (n,) int64 its best frame (-1: none, or a learned agent)
    cost: np.ndarray            # (n,) its cost
    current: np.ndarray         # (n,) int64 the frame playing when it searched
    time: np.ndarray            # (n,) when, s of the crowd's clock
    jumped: np.ndarray          # (n,) bool: it made a transition
    transitions: np.ndarray     # (n,) int64 transitions since the agent's reset


class PlaybackState(NamedTuple):
    """Where each agent plays, how fast, and its root in the world."""

    play: Playhead
    root: Root
    warp: np.ndarray            # (n, ...) warping's table: the orientation-warp plan and fixed rates


class InertializationState(NamedTuple):
    """The offsets that hide transitions, and the pose shown after them."""

    offsets: Offsets
    shown: Pose                 # the inertialized local pose (joint velocities of the root only)
    scratch: tuple              # (Pose, Pose): a transition's source and destination poses


class TouchupState(NamedTuple):
    """The touch-ups' memory (ground, foot locks) and the displayed poses they make."""

    feet: Feet
    out: Display


class CrowdState(NamedTuple):
    """Everything a crowd's tick reads and writes, group by group."""

    db: DatabaseArrays
    controller: ControllerState
    search: SearchState
    playback: PlaybackState
    inertialization: InertializationState
    touchups: TouchupState


class SearchGroup(NamedTuple):
    """Agents searched together (Crowd.apply_settings groups them): one searcher, mask, bias and skip."""

    search_set: object          # search_sets.SearchSet: the normalized features and their searcher
    mask: np.ndarray | None     # (N,) bool frames the tag filter allows (None: all)
    bias: float                 # the playing frame's cost discount
    skip: int                   # frames around the playing one the search leaves out (no small rewinds)


def database_arrays(db) -> DatabaseArrays:
    """The per-database arrays, each computed once per database (search_sets.shared)."""
    vel, ang, rvel, rang = velocities = shared(db, "velocities", lambda: database_velocities(db))
    range_of = shared(db, "range_of", lambda: np.repeat(np.arange(len(db.range_starts)),
                                                        db.range_stops - db.range_starts))
    stop_of = shared(db, "stop_of", lambda: np.asarray(db.range_stops, dtype=np.int64)[range_of])
    still_to = shared(db, "still_to", lambda: still_stretch_ends(rvel, rang, db.range_stops, db.fps))
    holdable = shared(db, "holdable", lambda: lively_holds(
        db, still_to - np.arange(db.num_frames) >= IDLE_MIN_HOLD_S * db.fps, still_to))
    clip_speed = shared(db, "clip_speed", lambda: clip_speeds(rvel, db.range_starts, db.range_stops, db.fps))
    speeds = shared(db, "future_speeds", lambda: future_speeds(rvel, db.range_stops,
                                                               horizon_frames(db.features.schema), db.fps))
    raw_features = read_only_view(np.ascontiguousarray(db.features.raw))
    traj_offsets, traj_layout = trajectory_layout(db.features.schema, db.features.channel_slices)
    return DatabaseArrays(
        frames=read_only(Frames(np.asarray(db.positions), np.asarray(db.rotations), vel, ang, rvel, rang)),
        velocities=velocities,
        clips=read_only(Clips(clip_speed, stop_of, np.ascontiguousarray(db.contacts))),
        range_of=range_of, still_to=still_to, holdable=holdable, future_speeds=speeds, raw_features=raw_features,
        annotations=annotation_rules(db),
        traj_offsets=traj_offsets, traj_times=traj_offsets / float(db.fps), traj_layout=traj_layout,
        height_layout=height_layout(db.features.schema, db.features.channel_slices, traj_offsets),
        side_steps=shared(db, "side_steps", lambda: has_side_steps(raw_features, traj_layout, db.fps)),
        rig=leg_rig(db))


def leg_rig(db) -> Rig:
    """The touch-ups' joints of the database's skeleton; each leg's reach (m) is its rest length less
    the IK's buffer."""
    parents = np.asarray(db.skeleton.parents, dtype=np.int64)
    roles = db.roles
    rig = PoseWarpRig(roles, parents)
    legs = np.array([[roles[f"{side}_{part}"] for part in ("upper_leg", "lower_leg", "foot", "toe")]
                     for side in ("left", "right")], dtype=np.int64)
    reach = np.array([(1.0 - LEG_BUFFER) * float(np.linalg.norm(db.positions[0, lo])
                                                  + np.linalg.norm(db.positions[0, ft]))
                      for _, lo, ft, _ in legs])
    return read_only(Rig(parents, rig.pelvis, rig.upper_legs, rig.chain, legs, reach))


def new_crowd_state(db, n: int, controller_settings: ControllerSettings) -> CrowdState:
    """The state of n agents over `db`, zeroed: each agent is then placed by Crowd.reset_agent."""
    arrays = database_arrays(db)
    J, F, K = db.num_joints, db.features.raw.shape[1], len(arrays.traj_offsets)
    controller = ControllerState(new_state(n, controller_settings), np.zeros(n, dtype=np.bool_),
                                 np.zeros(n, dtype=np.bool_))
    desired = Desired(np.zeros((n, K, 3)), np.zeros((n, K, 4)), arrays.traj_times, arrays.traj_layout)
    search = SearchState(
        timers=np.zeros((n, SEARCH_COLUMNS)), phase=np.zeros(n), clip_hold=np.zeros(n, dtype=np.bool_),
        searching=np.zeros(n, dtype=np.int64), desired=desired, query=np.zeros((n, F), dtype=np.float32),
        best=np.full(n, -1, dtype=np.int64), cost=np.full(n, np.nan), current=np.full(n, -1, dtype=np.int64),
        time=np.full(n, np.nan), jumped=np.zeros(n, dtype=np.bool_), transitions=np.zeros(n, dtype=np.int64))
    play = Playhead(np.zeros(n, dtype=np.int64), np.zeros(n), np.ones(n), np.ones(n), np.zeros(n),
                    np.zeros((n, 2), dtype=np.bool_))
    playback = PlaybackState(play, Root(np.zeros((n, 3)), np.zeros(n), np.zeros((n, 3))),
                             new_warp_table(n, arrays.side_steps))
    inertialization = InertializationState(new_offsets(n, J), new_shown_pose(n, J), (new_pose(n, J), new_pose(n, J)))
    touchups = TouchupState(
        Feet(np.zeros((n, HEIGHT_COLUMNS)), np.zeros((n, 2), dtype=FOOT_LOCK), np.zeros((n, 2), dtype=np.bool_)),
        Display(np.zeros((n, J, 3)), np.zeros((n, J, 4)), np.zeros((n, J, 3)), np.zeros((n, J, 4)),
                np.zeros((n, J, 3), dtype=np.float32), np.zeros((n, J, 4), dtype=np.float32)))
    return CrowdState(arrays, controller, search, playback, inertialization, touchups)


@numba.njit(cache=True)
def record_search(search, frame, settings, agents, best, cost, jump):
    """Bookkeeping after the search of `agents` (int64 rows; best, cost, jump (bool) one per agent), but for its
    time (search.time, the caller's clock): their next search their settings' search interval (s) ahead, less
    their phase the first time, the debugging record, transition counts. search: SearchState; frame: the frames
    playing; settings: the packed settings rows. Returns how many jumped. A compiled loop: a Character's search
    made a dozen numpy calls."""
    jumps = 0
    for a in range(agents.shape[0]):
        i = agents[a]
        # Each agent's first search after a reset starts its own phase, so a crowd reset at once does
        # not search all at once every interval.
        interval = settings[i, S.SEARCH_INTERVAL]
        search.timers[i, TIMER] = interval - interval * search.phase[i]
        search.phase[i] = 0.0
        search.timers[i, FORCE] = 0.0
        search.current[i] = frame[i]
        search.best[i] = best[a]
        search.cost[i] = cost[a]
        search.jumped[i] = jump[a]
        if jump[a]:
            search.transitions[i] += 1
            jumps += 1
    return jumps


def reset_row(state: CrowdState, i: int, frame: int, position, yaw: float, controller_settings: ControllerSettings,
              frames: Frames, row: int) -> None:
    """Agent i stands still at `position` (3,) m facing `yaw` radians, playing database frame `frame` and
    showing row `row` of `frames` (a learned agent shows its own row), with no offsets, foot locks or
    ground memory, searching at once."""
    play, root, search = state.playback.play, state.playback.root, state.search
    play.frame[i], play.frac[i] = frame, 0.0
    play.rate[i] = play.stride[i] = 1.0
    play.warp_angle[i] = 0.0
    state.playback.warp[i] = new_warp_table(1, state.db.side_steps)[0]
    reset_state(state.controller.table, i, controller_settings, position, yaw)
    root.pos[i] = [float(c) for c in position]
    root.yaw[i] = float(yaw)
    root.vel[i] = 0.0
    shown = state.inertialization.shown
    shown.pos[i], shown.rot[i] = frames.positions[row], frames.rotations[row]
    shown.vel[i], shown.angvel[i] = frames.vel[row, :1], frames.angvel[row, :1]
    for a in state.inertialization.offsets:
        a[i] = 0.0
    search.timers[i] = 0.0
    search.timers[i, FORCE] = 1.0
    search.clip_hold[i] = False
    search.phase[i] = (i * 0.6180339887498949) % 1.0     # golden-ratio spread; agent 0 (a Character): 0
    search.transitions[i] = 0
    play.contacts[i] = False
    state.touchups.feet.locks[i] = 0
    state.touchups.feet.heights[i] = 0.0
    search.best[i], search.current[i] = -1, -1
    search.time[i] = np.nan


# The state's arrays other modules read (character.py, requests.py, the app, offline tools, devtools), by
# their names from before the state had groups: name -> its place in Crowd.state; runtime/crowd.py makes them
# read-only properties of Crowd. Views: the next tick writes them.
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
