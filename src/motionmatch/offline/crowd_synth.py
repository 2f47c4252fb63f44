"""Crowds offline: the crowd file, the per-agent drivers that turn it into stick input, and crowd
synthesis (one BVH per agent, metrics.json, a top-view PNG).

Crowd file (JSON; metres, seconds, yaw in degrees, 0 faces +Z, positive turns +Z toward +X):

    {"duration": 20.0, "avoidance": true, "description": "...",
     "obstacles": [{"center": [x, z], "radius": r}, {"min": [x0, z0], "max": [x1, z1]}],
     "agents": [{"start": [x, z], "yaw": 90, "goal": [x, z], "run": false, "tags": "walk & !mirrored"},
                {"start": [x, z], "path": {"points": [[0, 0], [3, 0]], "speed": 1.2, "loop": true}},
                {"start": [x, z], "inputs": [{"t": 0.0, "move": [0, 1], "run": false}, ...]}]}

Each agent has exactly one driver: "goal" (walk there, or run with "run": true, then stop), "path" or
"inputs" (the scenario-file formats, validated by offline/scenario.py; request steps among the inputs,
actions, stops and foot plants, are issued as a scenario's are, and an action the database has no channel
for is refused). "yaw" defaults to 0, "tags" (a tag expression restricting the agent's clips) to none,
"avoidance" to true, "obstacles" (static circles and
boxes, world/obstacles.py; no agent may start or have its goal inside one) to none. A bad file raises CrowdError
naming the field, e.g. `agents[3].goal: expected two numbers [x, z]`.

Every tick the drivers give each agent a move stick (x right, z forward, the camera at yaw 0); with
avoidance on, the sticks become preferred velocities, world/avoidance.py adjusts them, and they go back to
sticks before `Crowd.step`.
"""
from __future__ import annotations

import copy
import json
import math
import sys
from dataclasses import dataclass
from functools import partial
from types import SimpleNamespace
from pathlib import Path

import numpy as np

from ..world.avoidance import AvoidanceSettings, AvoidanceState, avoid
from ..files.input_bounds import parse_json, read_bounded
from ..world.obstacles import Obstacles, parse_obstacles, penetration, signed_distance, steer_velocities
from ..runtime.controller import ControllerSettings
from ..world.obstacle_routes import RouteState, remaining, route_targets
from .scenario import Scenario, ScenarioError, parse_scenario
from ..search import range_mask
from ..runtime.character import CharacterSettings
from ..runtime.controller import GOAL_YAW, YAW
from ..runtime.crowd import Crowd
from ..motion.metrics import compute_metrics
from ..motion.posture import posture_joints
from ..motion.skeleton import shoulder_joints
from .synth import appearance_metrics, change_frames
from ..io.bvh import write_bvh
from ..motion.metrics import source_foot_sliding_cm_s
from .synth import record_animation, request_player
from ..runtime.requests import RequestError, Requests
from .synth import draw_obstacles

MAX_AGENTS = 1000
MAX_DURATION = 600.0            # s
MIN_DURATION = 0.1              # s: a few frames, so every metric has something to measure
MAX_CROWD_FILE_BYTES = 16 << 20
MAX_AGENT_SECONDS = 3000.0      # agents x duration: synthesis keeps every agent's poses in memory
MAX_COORDINATE = 10000.0        # m
ARRIVE_DISTANCE = 0.2           # m: a goal agent within this of its goal stops ...
RESUME_DISTANCE = 0.75          # m: ... and walks back once pushed further than this
COLLISION_DISTANCE = 0.3        # m between two roots
# An arrived agent holds its place (world/avoidance.py): others may pass it as close as this fraction of half
# the distance from its goal to the nearest other goal (between two neighbours standing on theirs), at
# least COLLISION_DISTANCE and at most the avoidance's two radii.
HOLD_SPACING = 0.75
SETTLE_DISTANCE = 0.4           # m: an arrived agent further than this from its goal walks back onto it
STUCK_SECONDS = 1.0             # s: a goal agent that wants to walk but has stood this long ...
RELEASE_RADIUS = 1.2            # m: ... has the arrived agents this close ahead of it step aside ...
ASIDE_SPEED = 0.6               # m/s: ... at this speed, square to its way (then walk back)

_TOP_KEYS = {"duration", "avoidance", "agents", "description", "obstacles"}
_AGENT_KEYS = {"start", "yaw", "goal", "run", "path", "inputs", "tags"}
_DRIVERS = ("goal", "path", "inputs")


class CrowdError(ValueError):
    """A crowd file or dict that does not follow the format; the message names the field."""


@dataclass(frozen=True)
class AgentSpec:
    start: tuple[float, float]
    yaw_deg: float = 0.0
    goal: tuple[float, float] | None = None
    run: bool = False
    scenario: Scenario | None = None     # the "path" or "inputs" driver, as a scenario of the crowd's duration
    tags: str | None = None


@dataclass(frozen=True)
class CrowdSpec:
    duration: float
    agents: tuple[AgentSpec, ...]
    avoidance: bool = True
    description: str | None = None
    obstacles: Obstacles | None = None


def _is_number(x) -> bool:
    """A finite number (an integer too large for a float is not one)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    return abs(x) <= 1e300 if isinstance(x, int) else math.isfinite(x)


def _point(value, name: str) -> tuple[float, float]:
    if not isinstance(value, (list, tuple)) or len(value) != 2 or not all(_is_number(v) for v in value):
        raise CrowdError(f"{name}: expected two numbers [x, z]")
    if max(abs(value[0]), abs(value[1])) > MAX_COORDINATE:
        raise CrowdError(f"{name}: coordinates beyond {MAX_COORDINATE:g} m")
    return float(value[0]), float(value[1])


def _parse_agent(a, name: str, duration: float) -> AgentSpec:
    if not isinstance(a, dict):
        raise CrowdError(f"{name}: expected an object")
    extra = sorted(set(a) - _AGENT_KEYS)
    if extra:
        raise CrowdError(f"{name}.{extra[0]}: unknown field (allowed: {', '.join(sorted(_AGENT_KEYS))})")
    if "start" not in a:
        raise CrowdError(f"{name}.start: missing")
    start = _point(a["start"], f"{name}.start")
    yaw = a.get("yaw", 0.0)
    if not _is_number(yaw):
        raise CrowdError(f"{name}.yaw: expected a number of degrees")
    drivers = [k for k in _DRIVERS if k in a]
    if len(drivers) != 1:
        raise CrowdError(f"{name}.{drivers[1] if drivers else 'goal'}: expected exactly one of 'goal', 'path' "
                         f"and 'inputs'")
    tags = a.get("tags")
    if tags is not None and (not isinstance(tags, str) or not tags.strip()):
        raise CrowdError(f"{name}.tags: expected a tag expression string or null")
    run = a.get("run", False)
    if not isinstance(run, bool):
        raise CrowdError(f"{name}.run: expected true or false")
    if "run" in a and drivers[0] != "goal":
        raise CrowdError(f"{name}.run: only with a goal (path speeds and inputs say how fast)")
    if drivers[0] == "goal":
        return AgentSpec(start, float(yaw), goal=_point(a["goal"], f"{name}.goal"), run=run, tags=tags)
    try:
        scenario = parse_scenario({"duration": duration, drivers[0]: a[drivers[0]]})
    except ScenarioError as e:
        raise CrowdError(f"{name}.{e}") from None
    return AgentSpec(start, float(yaw), scenario=scenario, tags=tags)


def parse_crowd(data) -> CrowdSpec:
    """Validate a crowd dict (as loaded from JSON) and build a CrowdSpec."""
    if not isinstance(data, dict):
        raise CrowdError("crowd: expected a JSON object")
    extra = sorted(set(data) - _TOP_KEYS)
    if extra:
        raise CrowdError(f"{extra[0]}: unknown field (allowed: {', '.join(sorted(_TOP_KEYS))})")
    duration = data.get("duration")
    if "duration" not in data:
        raise CrowdError("duration: missing")
    if not _is_number(duration) or not MIN_DURATION <= duration <= MAX_DURATION:
        raise CrowdError(f"duration: expected seconds in [{MIN_DURATION:g}, {MAX_DURATION:g}]")
    avoidance = data.get("avoidance", True)
    if not isinstance(avoidance, bool):
        raise CrowdError("avoidance: expected true or false")
    description = data.get("description")
    if description is not None and not isinstance(description, str):
        raise CrowdError("description: expected a string")
    agents = data.get("agents")
    if not isinstance(agents, list) or not agents:
        raise CrowdError("agents: expected a non-empty list of agents")
    if len(agents) > MAX_AGENTS:
        raise CrowdError(f"agents: {len(agents)} agents, at most {MAX_AGENTS}")
    if len(agents) * duration > MAX_AGENT_SECONDS:
        raise CrowdError(f"agents: {len(agents)} agents x {duration:g} s exceeds {MAX_AGENT_SECONDS:g} "
                         f"agent-seconds (fewer agents or a shorter duration)")
    specs = tuple(_parse_agent(a, f"agents[{i}]", float(duration)) for i, a in enumerate(agents))
    obstacles = None
    if "obstacles" in data:
        obstacles = parse_obstacles(data["obstacles"], CrowdError)
        _check_clear(specs, obstacles)
    return CrowdSpec(float(duration), specs, avoidance, description, obstacles)


def _check_clear(agents, obstacles: Obstacles) -> None:
    """No agent starts inside an obstacle or has its goal inside one (it could never arrive)."""
    for field in ("start", "goal"):
        rows = [(i, getattr(a, field)) for i, a in enumerate(agents) if getattr(a, field) is not None]
        if not rows or not obstacles.count:
            continue
        d = signed_distance(obstacles, [p for _, p in rows])
        bad = np.flatnonzero(d < 0.0)
        if len(bad):
            i, p = rows[bad[0]]
            raise CrowdError(f"agents[{i}].{field}: [{p[0]:g}, {p[1]:g}] lies inside an obstacle")


def load_crowd(path) -> CrowdSpec:
    """Read and validate a crowd JSON file (at most 16 MB; input_bounds' nesting and number rules)."""
    raw = read_bounded(path, MAX_CROWD_FILE_BYTES, CrowdError, "crowd file")
    try:
        return parse_crowd(parse_json(raw, CrowdError, f"crowd {path}"))
    except CrowdError as e:
        if str(path) in str(e):
            raise
        raise CrowdError(f"{path}: {e}") from None


# ---------------------------------------------------------------------------------------------
# sticks <-> velocities


def stick_to_velocity(move: np.ndarray, run: np.ndarray, cs: ControllerSettings) -> np.ndarray:
    """Velocities (n, 2) m/s a move stick (n, 2) asks for at the gait's forward speed, through the
    controller's radial dead zone (camera at yaw 0)."""
    mag = np.linalg.norm(move, axis=1)
    frac = np.clip((mag - cs.dead_zone) / max(1.0 - cs.dead_zone, 1e-9), 0.0, 1.0) ** cs.response_exponent
    speed = np.where(run, cs.run_forward_speed, cs.walk_forward_speed) * frac
    return move * (speed / np.maximum(mag, 1e-12))[:, None]


def velocity_to_stick(vel: np.ndarray, run: np.ndarray, cs: ControllerSettings) -> np.ndarray:
    """The move stick (n, 2) that asks for velocities (n, 2) m/s: the inverse of stick_to_velocity."""
    speed = np.linalg.norm(vel, axis=1)
    frac = np.clip(speed / np.where(run, cs.run_forward_speed, cs.walk_forward_speed), 0.0, 1.0)
    mag = np.where(frac > 1e-6, cs.dead_zone + (1.0 - cs.dead_zone) * frac ** (1.0 / cs.response_exponent), 0.0)
    return vel * (np.minimum(mag, 1.0) / np.maximum(speed, 1e-12))[:, None]


# ---------------------------------------------------------------------------------------------
# drivers


@dataclass
class DriverState:
    """Structure-of-arrays driver state of n agents. Goal agents: goals (n, 2), run (n,), arrived (n,);
    path agents: their PathFollower in `followers`; input agents: their Scenario in `scripts`."""
    goals: np.ndarray
    has_goal: np.ndarray
    goal_run: np.ndarray
    arrived: np.ndarray
    followers: dict
    scripts: dict
    routes: RouteState | None = None     # goal agents' routes round static obstacles
    hold: np.ndarray | None = None       # (n,) m: how close others may pass an arrived agent (goal_spacing)
    settled: np.ndarray | None = None    # (n,) bool: arrived and standing on the goal (holds its place)
    stuck: np.ndarray | None = None      # (n,) s a goal agent has wanted to walk and stood


def driver_state(agents, obstacles: Obstacles | None = None) -> DriverState:
    """The drivers of `agents` (AgentSpec); with obstacles, goal agents follow routes round them
    (world/obstacle_routes.py)."""
    n = len(agents)
    goals = np.array([a.goal if a.goal is not None else (0.0, 0.0) for a in agents], dtype=np.float64)
    return DriverState(goals=goals.reshape(n, 2), has_goal=np.array([a.goal is not None for a in agents]),
                       goal_run=np.array([a.run for a in agents]), arrived=np.zeros(n, dtype=bool),
                       followers={i: a.scenario.path.follower() for i, a in enumerate(agents)
                                  if a.scenario is not None and a.scenario.is_path},
                       scripts={i: a.scenario for i, a in enumerate(agents)
                                if a.scenario is not None and not a.scenario.is_path},
                       routes=goal_routes(agents, obstacles),
                       hold=goal_spacing(goals, [a.goal is not None for a in agents]),
                       settled=np.zeros(n, dtype=bool), stuck=np.zeros(n))


def goal_spacing(goals: np.ndarray, has_goal, most: float = 0.6) -> np.ndarray:
    """(n,) metres others may pass each goal agent at once it has arrived: HOLD_SPACING times half the
    distance from its goal (goals (n, 2) m) to the nearest other goal, within [COLLISION_DISTANCE, most]
    (most: the avoidance's two radii); 0 for agents without a goal. A packed goal area then takes its
    agents in any order of arrival, each walking in between neighbours already standing on theirs."""
    from scipy.spatial import cKDTree

    has = np.asarray(has_goal, dtype=bool)
    out = np.zeros(len(goals))
    rows = np.flatnonzero(has)
    if len(rows) < 2:
        out[rows] = most
        return out
    d, _ = cKDTree(goals[rows]).query(goals[rows], k=2)
    out[rows] = np.clip(HOLD_SPACING * 0.5 * d[:, 1], COLLISION_DISTANCE, most)
    return out


def goal_routes(agents, obstacles: Obstacles | None) -> RouteState | None:
    """Routes from each goal agent's start to its goal round the obstacles (None without either)."""
    rows = [i for i, a in enumerate(agents) if a.goal is not None]
    if obstacles is None or not obstacles.count or not rows:
        return None
    starts = np.array([a.start for a in agents], dtype=np.float64)
    goals = np.array([a.goal if a.goal is not None else a.start for a in agents], dtype=np.float64)
    return RouteState(obstacles, starts, goals, rows)


def drive(state: DriverState, t: float, sim_positions: np.ndarray, cs: ControllerSettings):
    """This tick's input at time t (s) for every agent from the simulation positions (n, 3):
    (move (n, 2), run (n,) bool, strafe (n,) bool, look (n, 2) with NaN rows for no look)."""
    n = len(state.goals)
    move = np.zeros((n, 2))
    run = state.goal_run.copy()
    strafe = np.zeros(n, dtype=bool)
    look = np.full((n, 2), np.nan)
    # Goals: walk (or run) straight there, braking over the last stretch; stop inside ARRIVE_DISTANCE
    # and only start again when pushed beyond RESUME_DISTANCE, so arrived agents do not shuffle.
    to_goal = state.goals - sim_positions[:, [0, 2]]
    dist = np.linalg.norm(to_goal, axis=1)
    state.arrived = state.has_goal & np.where(state.arrived, dist < RESUME_DISTANCE, dist < ARRIVE_DISTANCE)
    # Arrived agents nudged off their goal (they step aside for others, holding_distances) walk back
    # onto it at a braking pace; on it they stand and hold their place.
    state.settled = state.arrived & (dist < SETTLE_DISTANCE)
    top = np.where(run, cs.run_forward_speed, cs.walk_forward_speed)
    brake = np.maximum(0.5, 0.6 * top)
    heading, left = to_goal, dist
    if state.routes is not None:
        heading, left = route_heading(state, t, sim_positions, dist)
    left = np.where(state.arrived, dist, left)
    speed = np.where(state.has_goal & ~state.settled, top * np.minimum(left / brake, 1.0), 0.0)
    vel = heading * (speed / np.maximum(np.linalg.norm(heading, axis=1), 1e-9))[:, None]
    move[:] = velocity_to_stick(vel, run, cs)
    for i, f in state.followers.items():
        vx, vz, _, f.progress, f.done = f.goal((sim_positions[i, 0], sim_positions[i, 2]))
        run[i] = math.hypot(vx, vz) > cs.walk_forward_speed + 1e-6
        move[i] = velocity_to_stick(np.array([[vx, vz]]), run[i:i + 1], cs)[0]
    for i, sc in state.scripts.items():
        inp = sc.input_at(t)
        move[i], run[i], strafe[i] = inp.move, inp.run, inp.strafe
        if inp.look is not None:
            look[i] = inp.look
    return move, run, strafe, look


def route_heading(state: DriverState, t: float, sim_positions: np.ndarray, dist: np.ndarray):
    """Goal agents with routes: (n, 2) the way to walk (toward the point ahead on their route) and (n,)
    the metres left to brake over (the route's rest, at least the straight distance `dist` to the goal)."""
    pos = sim_positions[:, [0, 2]]
    walking = state.routes.agents[~state.arrived[state.routes.agents]]
    target = route_targets(state.routes, pos, t, walking)
    return target - pos, np.maximum(dist, remaining(state.routes))


def holding_distances(state: DriverState, sim_positions: np.ndarray, move: np.ndarray, chosen: np.ndarray,
                      dt: float):
    """This tick's (hold (n,) m, the avoidance's `hold`, 0: not holding; aside (n, 2) m/s, NaN rows:
    none). Agents settled on their goals hold their place and may be passed as close as their goal
    spacing (goal_spacing), so later arrivals walk in between them. A goal agent that has wanted to walk
    (a stick `move` (n, 2) past half) but stood (its last avoided velocity `chosen` (n, 2) m/s under
    0.15) for STUCK_SECONDS, hemmed in by standing agents with no gap it may pass, has those within
    RELEASE_RADIUS ahead of it step aside (aside: ASIDE_SPEED square to its way, away from it); they walk
    back once it has gone. sim_positions (n, 3) m; dt s."""
    wants = state.has_goal & ~state.settled & (np.linalg.norm(move, axis=1) > 0.5)
    stood = np.linalg.norm(chosen, axis=1) < 0.15
    state.stuck = np.where(wants & stood, state.stuck + dt, 0.0)
    hold = np.where(state.settled, state.hold, 0.0)
    aside = np.full((len(hold), 2), np.nan)
    stuck = np.flatnonzero(state.stuck >= STUCK_SECONDS)
    if not len(stuck) or not state.settled.any():
        return hold, aside
    from scipy.spatial import cKDTree

    xz = sim_positions[:, [0, 2]]
    for w in stuck:
        way = move[w] / np.linalg.norm(move[w])
        for s_ in cKDTree(xz).query_ball_point(xz[w], RELEASE_RADIUS):
            off = xz[s_] - xz[w]
            ahead = off @ way
            if not state.settled[s_] or ahead <= 0.0:
                continue
            side = off - ahead * way
            if np.linalg.norm(side) < 1e-3:       # straight ahead: to the walker's right (passing side)
                side = np.array([way[1], -way[0]])
            hold[s_] = 0.0
            aside[s_] = side / np.linalg.norm(side) * ASIDE_SPEED
    return hold, aside


def avoid_sticks(state: AvoidanceState, move, run, sim_positions, sim_velocities, cs: ControllerSettings,
                 settings: AvoidanceSettings | None = None, obstacles: Obstacles | None = None,
                 routed: np.ndarray | None = None, hold: np.ndarray | None = None,
                 parallel: bool = False) -> np.ndarray:
    """Move sticks (n, 2) adjusted by local avoidance (of each other and of `obstacles`), from the
    agents' sticks and run flags and the simulation positions and velocities (n, 3). routed (n,) bool:
    agents following routes (world/obstacle_routes.py), whose sticks already lead round the obstacles. hold
    (n,) m: arrived agents, which stand, and how close others may pass them (avoidance.avoid). parallel:
    on all numba threads (the same sticks)."""
    pref = stick_to_velocity(move, run, cs)
    top = np.where(run, cs.run_forward_speed, cs.walk_forward_speed)
    pos = np.ascontiguousarray(sim_positions[:, [0, 2]])
    if obstacles is not None:
        # The preference itself bends around what is ahead (the controllers' steering), so the
        # avoidance weighs detours from a way that passes: from a wall's face, standing still would
        # cost less than any turn toward the doorway. A route already leads round (and steering's fixed
        # lookahead would turn an agent away from a route that bends within it).
        free = np.ones(len(pref), dtype=bool) if routed is None else ~routed
        pref[free] = steer_velocities(obstacles, pos[free], pref[free])
    vel = avoid(state, pos, sim_velocities[:, [0, 2]], pref, top, settings, obstacles, hold, parallel)
    return velocity_to_stick(vel, run, cs)


# ---------------------------------------------------------------------------------------------
# synthesis


def check_agents(db, spec: CrowdSpec, source=None) -> None:
    """Every agent's tag expression compiles and selects at least one clip of db, and every action its
    inputs request has its channel in db (else CrowdError, naming `source`, the crowd file, when given)."""
    where = f"{source}: " if source else ""
    requests = Requests(db, 1)
    for i, a in enumerate(spec.agents):
        if a.tags is not None:
            try:
                range_mask(a.tags, db.range_tags)
            except ValueError as e:
                raise CrowdError(f"{where}agents[{i}].tags: {e}") from None
        for t, r in a.scenario.requests if a.scenario is not None else ():
            if "action" in r:
                try:
                    requests.event_column(r["action"])
                except RequestError as e:
                    raise CrowdError(f"{where}agents[{i}].inputs (the step at t={t:g}): {e}") from None


def _agent_requests(crowd: Crowd, i: int) -> SimpleNamespace:
    """Agent i of a crowd with the request methods of a Character: what synth.request_player calls."""
    return SimpleNamespace(crowd=crowd, request_action=partial(crowd.request_action, i),
                           request_stop_at=partial(crowd.request_stop_at, i),
                           request_plant_at=partial(crowd.request_plant_at, i),
                           cancel_request=partial(crowd.cancel_request, i))


def run_crowd(db, spec: CrowdSpec, settings=None, progress: bool = False, avoidance: bool | None = None,
              avoidance_settings: AvoidanceSettings | None = None) -> dict:
    """Simulate a crowd at the database rate. settings: CharacterSettings for every agent (each agent's
    "tags" becomes its tag filter). avoidance: None = as the file says. Returns a record of arrays,
    frames first: local_pos (F, n, J, 3), local_rot (F, n, J, 4), global_positions (F, n, J, 3) float32;
    root_pos, sim_pos, desired_vel (F, n, 3); root_yaw (the displayed facing: root yaw + orientation
    warp), sim_yaw, desired_yaw (F, n) radians; tick_us (F,); searches (F,); and per agent: search_us
    (F, n, NaN where it did not search: its share of the tick's batched search), transitions (n,);
    requests: the delivered requests (runtime/requests.py Requests.log)."""
    import time

    from tqdm import tqdm


    n = len(spec.agents)
    base = settings or CharacterSettings()
    check_agents(db, spec)
    per_agent = []
    for i, a in enumerate(spec.agents):
        s = copy.deepcopy(base)
        s.tag_filter = a.tags if a.tags is not None else base.tag_filter
        per_agent.append(s)
    cs = ControllerSettings()
    crowd = Crowd(db, n, settings=per_agent, controller_settings=cs)
    for i, a in enumerate(spec.agents):
        crowd.reset_agent(i, (a.start[0], 0.0, a.start[1]), math.radians(a.yaw_deg))
    obstacles = spec.obstacles if spec.obstacles is not None and spec.obstacles.count else None
    crowd.set_obstacles(obstacles)
    drivers = driver_state(spec.agents, obstacles)
    # Request steps of input agents (actions, stops, foot plants) are issued as a scenario's are.
    players = [request_player(_agent_requests(crowd, i), a.scenario) for i, a in enumerate(spec.agents)
               if a.scenario is not None and a.scenario.requests]
    routed = np.zeros(n, dtype=bool)
    if drivers.routes is not None:
        routed[drivers.routes.agents] = True
    crowd.routed[:] = routed
    use_avoidance = spec.avoidance if avoidance is None else avoidance
    crowd.set_collision_agents(use_avoidance)     # agents that avoid each other: the search's collision term too
    avoid_state = AvoidanceState.zeros(n)
    fps = db.fps
    dt = 1.0 / fps
    F = int(round(spec.duration * fps))
    J = db.num_joints
    rec = {"local_pos": np.zeros((F, n, J, 3), np.float32), "local_rot": np.zeros((F, n, J, 4), np.float32),
           "global_positions": np.zeros((F, n, J, 3), np.float32), "root_pos": np.zeros((F, n, 3)),
           "sim_pos": np.zeros((F, n, 3)), "desired_vel": np.zeros((F, n, 3)), "root_yaw": np.zeros((F, n)),
           "sim_yaw": np.zeros((F, n)), "desired_yaw": np.zeros((F, n)), "search_us": np.full((F, n), np.nan),
           "tick_us": np.zeros(F), "searches": np.zeros(F, np.int64), "settled": np.zeros(F, np.int64), "frames": np.zeros((F, n), np.int64),
           "start_pos": crowd.root_positions.copy()}
    for k in tqdm(range(F), desc="crowd", unit="frame", disable=not progress, file=sys.stderr):
        t0 = time.perf_counter()
        sim = crowd.sim_positions
        move, run, strafe, look = drive(drivers, k * dt, sim, cs)
        for issue in players:
            issue(k * dt)
        if use_avoidance:
            hold, aside = holding_distances(drivers, sim, move, avoid_state.chosen, dt)
            step = np.isfinite(aside[:, 0])
            move[step] = velocity_to_stick(aside[step], run[step], cs)
            # On the threads the crowd's last tick measured faster (runtime/threads.py): a busy core makes both serial.
            move = avoid_sticks(avoid_state, move, run, sim, crowd.sim_velocities, cs, avoidance_settings, obstacles,
                                routed, hold, crowd.threads_last_tick > 1)
        crowd.step(move, run, strafe, look, dt)
        rec["tick_us"][k] = (time.perf_counter() - t0) * 1e6
        rec["searches"][k] = crowd.searches_last_tick
        rec["settled"][k] = crowd.settled_last_tick
        rec["global_positions"][k] = crowd.global_positions
        rec["root_pos"][k] = crowd.root_positions
        rec["sim_pos"][k] = crowd.sim_positions
        rec["desired_vel"][k] = crowd.desired_velocities
        rec["root_yaw"][k] = np.remainder(crowd.root_yaws + crowd.warp_angle + np.pi, 2 * np.pi) - np.pi
        rec["sim_yaw"][k] = crowd.ctrl[:, YAW]
        rec["desired_yaw"][k] = crowd.ctrl[:, GOAL_YAW]
        rec["frames"][k] = crowd.frame
        if crowd.searches_last_tick:
            searched = crowd.searched != 0
            rec["search_us"][k, searched] = crowd.stage_us["search"] / crowd.searches_last_tick
        for i in range(n):
            rec["local_pos"][k, i], rec["local_rot"][k, i] = crowd.local_pose(i)
    rec["transitions"] = crowd.transitions.copy()
    rec["requests"] = list(crowd.requests.log)
    return rec


def separation(root_xz: np.ndarray, threshold: float = COLLISION_DISTANCE):
    """From root ground positions (F, n, 2): the smallest distance in metres between two roots over the
    run (None for one agent), the number of agent pairs that ever came closer than `threshold`, and
    the (frame, agent) index pairs (k, 2) of those close moments (for plotting)."""
    from scipy.spatial import cKDTree

    if root_xz.shape[1] < 2:
        return None, 0, np.zeros((0, 2), dtype=np.int64)
    n = root_xz.shape[1]
    smallest, ever, close = math.inf, np.zeros((n, n), dtype=bool), []
    for f, xz in enumerate(root_xz):
        tree = cKDTree(xz)
        d, _ = tree.query(xz, k=2)
        smallest = min(smallest, float(d[:, 1].min()))
        # Arrays, not sets of tuples: agents crowded on one spot make n^2 / 2 pairs every frame.
        near = tree.query_pairs(threshold, output_type="ndarray")
        ever[near[:, 0], near[:, 1]] = True
        agents = np.unique(near)
        close.append(np.stack([np.full(len(agents), f), agents], axis=1))
    return smallest, int(ever.sum()), np.concatenate(close).astype(np.int64).reshape(-1, 2)


def agent_metrics(db, rec: dict, spec: CrowdSpec, i: int, source_sliding: float) -> dict:
    """The usual per-character metrics of agent i (see motion/metrics.py), the keys a single synth writes.
    A batched tick has no per-agent clock: `search_us` is the agent's share of the tick's search
    (the search stage's time over the agents that searched in it), `frame_us` its share of the whole
    tick (tick time / agents)."""

    fps = db.fps
    root = rec["root_pos"][:, i]
    root_vel = np.diff(np.vstack([rec["start_pos"][i][None], root]), axis=0) * fps
    gpos = rec["global_positions"][:, i]
    toes = [db.roles["left_toe"], db.roles["right_toe"]]
    body = [db.roles["left_upper_leg"], db.roles["right_upper_leg"], *shoulder_joints(db.skeleton.parents, db.roles)]
    search = rec["search_us"][:, i]
    agent_rec = {"toe_positions": gpos[:, toes], "body_positions": gpos[:, body],
                 "nan": ~np.isfinite(gpos).all(axis=(1, 2)), "root_pos": root, "sim_pos": rec["sim_pos"][:, i],
                 "root_yaw": rec["root_yaw"][:, i], "sim_yaw": rec["sim_yaw"][:, i],
                 "desired_yaw": rec["desired_yaw"][:, i], "desired_vel": rec["desired_vel"][:, i],
                 "root_vel": root_vel, "transitions": int(rec["transitions"][i]),
                 "search_us": search[np.isfinite(search)], "frame_us": rec["tick_us"] / rec["root_pos"].shape[1],
                 "toe_joints": toes, "frames": rec["frames"][:, i],
                 "posture_positions": gpos[:, posture_joints(db.roles)]}
    a = spec.agents[i]
    changes = change_frames(a.scenario, fps) if a.scenario is not None else [0]
    metrics = compute_metrics(agent_rec, fps, source_sliding, changes)
    metrics.update(appearance_metrics(db, agent_rec))
    if spec.obstacles is not None:
        metrics["obstacle_penetration_cm"] = penetration(spec.obstacles, root[:, [0, 2]], fps)
    return metrics


def goals_reached(rec: dict, spec: CrowdSpec) -> tuple[int, int]:
    """(goal agents whose root ends within RESUME_DISTANCE of their goal, goal agents)."""
    rows = [(i, a.goal) for i, a in enumerate(spec.agents) if a.goal is not None]
    if not rows:
        return 0, 0
    end = rec["root_pos"][-1][[i for i, _ in rows]][:, [0, 2]]
    d = np.linalg.norm(end - np.array([g for _, g in rows]), axis=1)
    return int((d <= RESUME_DISTANCE).sum()), len(rows)


def plot_crowd(path, rec: dict, spec: CrowdSpec, title: str, close: np.ndarray) -> None:
    """Top view of every agent's root path: start circle, end dot, goal cross, and in red the roots at
    the (frame, agent) pairs `close` (k, 2) where two came closer than COLLISION_DISTANCE."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    root = rec["root_pos"]
    cmap = plt.get_cmap("tab20")
    fig, ax = plt.subplots(figsize=(8, 8), dpi=110)
    for i, a in enumerate(spec.agents):
        c = cmap(i % 20)
        ax.plot(root[:, i, 0], root[:, i, 2], "-", color=c, lw=1.2)
        ax.plot(*a.start, "o", mfc="none", color=c, ms=5)
        ax.plot(root[-1, i, 0], root[-1, i, 2], "o", color=c, ms=3)
        if a.goal is not None:
            ax.plot(*a.goal, "x", color=c, ms=6)
    if len(close):
        f, a_ = close[::-(-len(close) // 20000), 0], close[::-(-len(close) // 20000), 1]   # at most 20,000 dots
        ax.scatter(root[f, a_, 0], root[f, a_, 2], s=10, color="red", zorder=5,
                   label=f"roots closer than {COLLISION_DISTANCE} m")
        ax.legend(loc="best", fontsize=8)
    if spec.obstacles is not None:
        draw_obstacles(ax, spec.obstacles)
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xlabel("x (m, right)")
    ax.set_ylabel("z (m, forward)")
    ax.grid(True, alpha=0.3)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def synthesize_crowd(db, crowd, out_dir, settings=None, progress: bool = True) -> dict:
    """Run `crowd` (path, dict or CrowdSpec) and write out_dir/agent_000.bvh ..., metrics.json and
    crowd.png; returns the metrics."""

    if isinstance(crowd, (str, Path)):
        spec = load_crowd(crowd)
        check_agents(db, spec, crowd)
    elif isinstance(crowd, dict):
        spec = parse_crowd(crowd)
    else:
        spec = crowd
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rec = run_crowd(db, spec, settings, progress)
    n = len(spec.agents)
    min_d, collisions, close = separation(rec["root_pos"][:, :, [0, 2]])
    src_cache = {}
    agents = []
    for i, a in enumerate(spec.agents):
        if a.tags not in src_cache:
            allowed = None if a.tags is None else np.flatnonzero(range_mask(a.tags, db.range_tags))
            src_cache[a.tags] = source_foot_sliding_cm_s(db, allowed_ranges=allowed)
        agents.append(agent_metrics(db, rec, spec, i, src_cache[a.tags]))
        write_bvh(out / f"agent_{i:03d}.bvh", record_animation(db, {"local_pos": rec["local_pos"][:, i],
                                                                    "local_rot": rec["local_rot"][:, i]}))
    tick = rec["tick_us"]
    metrics = {
        "frames": int(len(tick)),
        "fps": float(db.fps),
        "agents_count": n,
        "avoidance": bool(spec.avoidance),
        "min_distance_m": None if min_d is None else round(min_d, 4),
        "collisions": int(collisions),
        "tick_us": {"median": round(float(np.median(tick)), 1), "p99": round(float(np.percentile(tick, 99)), 1)},
        "searches_per_tick": round(float(rec["searches"].mean()), 3),
        # Searches whose answer paid the collision term and were settled by its brute-force pass
        # (runtime/collision_term.py); 0 without obstacles and avoidance, or with collision_weight 0.
        "settled_per_tick": round(float(rec["settled"].mean()), 3),
        "goals_reached": goals_reached(rec, spec)[0],
        "goal_agents": goals_reached(rec, spec)[1],
        "agents": agents,
    }
    if spec.obstacles is not None:
        # The deepest any root went inside a shape, and the agent-seconds spent inside (summed over agents).
        per = [a["obstacle_penetration_cm"] for a in agents]
        metrics["obstacle_penetration_cm"] = {"max_cm": max(p["max_cm"] for p in per),
                                              "seconds_inside": round(sum(p["seconds_inside"] for p in per), 3)}
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1))
    plot_crowd(out / "crowd.png", rec, spec,
               f"{n} agents, {spec.duration:g} s, min distance "
               f"{'-' if min_d is None else f'{min_d:.2f} m'}, {collisions} collisions", close)
    return metrics
