"""Scenarios: scripted controller input for offline synthesis.

JSON format (metres, seconds; stick plane x right, z forward; stick magnitudes above 1 are clamped to 1,
components must lie in [-1.5, 1.5]):

    {"duration": 12.0, "style": "walk & !injured" | null,
     "inputs": [{"t": 0.0, "move": [0, 1], "run": false, "strafe": false, "look": null}, ...]}
    {"duration": 20.0, "path": {"points": [[0, 0], [3, 0], [3, 3]], "speed": 1.2, "loop": true}}

plus optional "terrain" (an object passed through untouched), "seed" (integer), "description" and
"obstacles" (circles and boxes the character steers around, world/obstacles.py:
[{"center": [x, z], "radius": r}, {"min": [x0, z0], "max": [x1, z1]}, ...]).
Inputs are piecewise constant from their time t on (neutral before the first one); in an input only
"t" and "move" are required. Requests with event constraints (docs/ACTIONS.md) are steps of "inputs" or of
an optional top-level "requests" list (also for path scenarios):

    {"t": 3.0, "action": "bow", "event_in": 0.8}     the bow's event 0.8 s after t
    {"t": 5.0, "stop_at": [x, z]}                    come to rest at (x, z); held until the next input change
    {"t": 5.0, "plant_at": [x, z], "side": "left"}   plant that foot at (x, z); held like a stop
    {"t": 6.0, "set": "idles", "interrupt": false}   search the database set "idles" from now (interrupt,
                                                     default true) or from the next search

with the database sets named in an optional top-level "sets": {"idles": {"tags": "idle", "weights": {...}}}
(runtime/database_sets.py).

A bad scenario raises ScenarioError naming the offending field.
"""
from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..world.obstacles import Obstacles, parse_obstacles
from ..runtime.controller import Controller, ControllerSettings, GamepadInput, PathFollower
from ..runtime.database_sets import parse_sets

_TOP_KEYS = {"duration", "style", "inputs", "path", "terrain", "seed", "description", "requests", "sets", "obstacles"}
_INPUT_KEYS = {"t", "move", "run", "strafe", "look"}
_ACTION_KEYS = {"t", "action", "event_in"}
_STOP_KEYS = {"t", "stop_at"}
_REQUEST_KEYS = {"action": _ACTION_KEYS, "stop_at": _STOP_KEYS, "plant_at": {"t", "plant_at", "side"},
                 "set": {"t", "set", "interrupt"}}
_PATH_KEYS = {"points", "speed", "loop"}
# Bounds that keep a scenario's work and memory finite; beyond them a value is a mistake.
MAX_DURATION_S = 3 * 3600.0      # synthesis streams its output, so hours are fine; days are not
MAX_COORDINATE_M = 1e5           # path points and terrain lengths
MAX_STICK_COMPONENT = 1.5        # a gamepad's square reaches 1.41 on the diagonal; magnitudes clamp to 1
MAX_TERRAIN_CELLS = 4_000_000    # a procedural terrain's samples (2000 x 2000, 32 MB)
MAX_NESTING = 32                 # depth of objects/lists (terrain is passed through)


class ScenarioError(ValueError):
    """A scenario file or dict that does not follow the format; the message names the field."""


@dataclass(frozen=True)
class PathSpec:
    points: tuple[tuple[float, float], ...]
    speed: float
    loop: bool = False

    def follower(self) -> PathFollower:
        return PathFollower(self.points, self.speed, self.loop)


@dataclass
class Scenario:
    duration: float
    inputs: tuple[tuple[float, GamepadInput], ...] = ()
    path: PathSpec | None = None
    style: str | None = None
    terrain: dict | None = None
    seed: int | None = None
    description: str | None = None
    # (t, {"action": name, "event_in": s} | {"stop_at": (x, z)} | {"plant_at": (x, z), "side": "left"}
    # | {"set": name, "interrupt": bool}), sorted by t
    requests: tuple[tuple[float, dict], ...] = ()
    sets: dict | None = None       # name -> database_sets.SetSpec
    obstacles: Obstacles | None = field(default=None, compare=False)    # arrays: compared by to_dict()
    _times: list = field(default_factory=list, repr=False, compare=False)

    def __post_init__(self):
        self._times = [t for t, _ in self.inputs]

    @property
    def is_path(self) -> bool:
        return self.path is not None

    def input_at(self, t: float) -> GamepadInput:
        """The input held at time t (seconds); neutral before the first input and for path scenarios."""
        i = bisect.bisect_right(self._times, t) - 1
        return self.inputs[i][1] if i >= 0 else GamepadInput()

    @property
    def change_times(self) -> tuple[float, ...]:
        """Times at which the held input changes (0.0 only for path scenarios)."""
        if self.path is not None:
            return (0.0,)
        out, prev = [0.0], self.input_at(0.0)
        for t, inp in self.inputs:
            if t > 0.0 and inp != prev:
                out.append(t)
            prev = inp
        return tuple(out)

    def make_driver(self):
        """A driver (Crowd.set_driver) that plays this scenario: a PathFollower for path scenarios (it predicts
        along its path), an InputDriver otherwise."""
        return self.path.follower() if self.path is not None else InputDriver(self)

    def to_dict(self) -> dict:
        d: dict = {"duration": self.duration, "style": self.style}
        if self.path is not None:
            d["path"] = {"points": [list(p) for p in self.path.points], "speed": self.path.speed,
                         "loop": self.path.loop}
        else:
            d["inputs"] = [{"t": t, "move": list(i.move), "run": i.run, "strafe": i.strafe,
                            "look": None if i.look is None else list(i.look)} for t, i in self.inputs]
        for k in ("terrain", "seed", "description"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        if self.sets:
            d["sets"] = {n: {"tags": s.tags, "weights": dict(s.weights)} for n, s in self.sets.items()}
        if self.obstacles is not None:
            d["obstacles"] = self.obstacles.to_list()
        if self.requests:
            d["requests"] = [{"t": t, **{k: list(v) if isinstance(v, tuple) else v for k, v in r.items()}}
                             for t, r in self.requests]
        return d

    def save(self, path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")


class InputDriver:
    """Plays a scenario's piecewise-constant inputs into a Controller. It has no predict: the trajectory
    ahead is the controller's own constant-goal prediction (Crowd.set_driver), as for a gamepad."""

    def __init__(self, scenario: Scenario):
        self.scenario = scenario

    def step(self, controller: Controller, t: float, dt: float) -> None:
        controller.update(self.scenario.input_at(t), dt)


def _is_number(x) -> bool:
    """A JSON number that is finite as a float (a 400-digit integer is not)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    if isinstance(x, int):
        return abs(x) <= 1e300
    return math.isfinite(x)


def clamp_stick(value, name: str, allow_none: bool = False, error=None):
    """A stick value [x, z] as a tuple with its magnitude clamped to 1.

    Forgiving on purpose: gamepads report the square [-1, 1]^2 and people round numbers, so only
    non-numbers, non-finite values and components outside [-1.5, 1.5] are refused (with `error`,
    default ScenarioError, naming `name`)."""
    error = error or ScenarioError
    if value is None and allow_none:
        return None
    msg = (f"{name}: expected two numbers in [-{MAX_STICK_COMPONENT}, {MAX_STICK_COMPONENT}]"
           + (" or null" if allow_none else ""))
    if not isinstance(value, (list, tuple)) or len(value) != 2 or not all(_is_number(v) for v in value):
        raise error(msg)
    x, z = float(value[0]), float(value[1])
    if max(abs(x), abs(z)) > MAX_STICK_COMPONENT:
        raise error(msg)
    mag = math.hypot(x, z)
    return (x / mag, z / mag) if mag > 1.0 else (x, z)


def _stick(value, name: str, allow_none: bool = False):
    return clamp_stick(value, name, allow_none)


def _check_plain(value, name: str, depth: int = 0) -> None:
    """Nesting depth and numbers of JSON data passed through (terrain): bounded and finite."""
    if depth > MAX_NESTING:
        raise ScenarioError(f"{name}: nested deeper than {MAX_NESTING} levels")
    if isinstance(value, dict):
        for k, v in value.items():
            _check_plain(v, f"{name}.{k}", depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_plain(v, f"{name}[{i}]", depth + 1)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if not _is_number(value) or abs(value) > MAX_COORDINATE_M:
            raise ScenarioError(f"{name}: expected a finite number within +-{MAX_COORDINATE_M:g}")


def _check_terrain(terrain: dict) -> None:
    _check_plain(terrain, "terrain")
    if "file" in terrain:
        return
    size, cell = terrain.get("size", 40.0), terrain.get("cell", 0.1)
    if not (_is_number(size) and _is_number(cell) and size > 0 and cell > 0):
        raise ScenarioError("terrain.size, terrain.cell: expected positive numbers of metres")
    n = size / cell + 1
    if n * n > MAX_TERRAIN_CELLS:
        raise ScenarioError(f"terrain.size / terrain.cell: {size} m sampled every {cell} m is about {n * n:.3g} "
                            f"cells, beyond the bound of {MAX_TERRAIN_CELLS:,}; use a larger cell or smaller size")


def _bool(d: dict, key: str, name: str) -> bool:
    v = d.get(key, False)
    if not isinstance(v, bool):
        raise ScenarioError(f"{name}.{key}: expected true or false")
    return v


def _unknown(d: dict, allowed: set, name: str) -> None:
    extra = sorted(set(d) - allowed)
    if extra:
        where = f"{name}." if name else ""
        raise ScenarioError(f"{where}{extra[0]}: unknown field (allowed: {', '.join(sorted(allowed))})")


def parse_scenario(data: dict) -> Scenario:
    """Validate a scenario dict (as loaded from JSON) and build a Scenario."""
    if not isinstance(data, dict):
        raise ScenarioError("scenario: expected a JSON object")
    _unknown(data, _TOP_KEYS, "")
    if "duration" not in data:
        raise ScenarioError("duration: missing")
    duration = data["duration"]
    if not _is_number(duration) or duration <= 0:
        raise ScenarioError("duration: expected a positive number of seconds")
    if duration > MAX_DURATION_S:
        raise ScenarioError(f"duration: {float(duration):g} s is beyond the bound of {MAX_DURATION_S:g} s")
    duration = float(duration)
    if round(duration * 60.0) < 1:
        raise ScenarioError(f"duration: {duration:g} s is shorter than one frame")
    style = data.get("style")
    if style is not None and not isinstance(style, str):
        raise ScenarioError("style: expected a tag expression string or null")
    terrain = data.get("terrain")
    if terrain is not None and not isinstance(terrain, dict):
        raise ScenarioError("terrain: expected an object")
    if terrain is not None:
        _check_terrain(terrain)
    seed = data.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2 ** 63):
        raise ScenarioError("seed: expected an integer in [0, 2^63)")
    description = data.get("description")
    if description is not None and not isinstance(description, str):
        raise ScenarioError("description: expected a string")
    has_inputs, has_path = "inputs" in data, "path" in data
    if has_inputs == has_path:
        raise ScenarioError("inputs: expected exactly one of 'inputs' and 'path'")
    requests = []
    if "requests" in data:
        if not isinstance(data["requests"], list):
            raise ScenarioError("requests: expected a list of request steps")
        requests = [_parse_request(r, f"requests[{i}]", duration) for i, r in enumerate(data["requests"])]
    sets = None
    if "sets" in data:
        sets = parse_sets(data["sets"], "sets", ScenarioError)
    obstacles = parse_obstacles(data["obstacles"], ScenarioError) if "obstacles" in data else None
    common = dict(duration=duration, style=style, terrain=terrain, seed=seed, description=description, sets=sets,
                  obstacles=obstacles)
    if has_path:
        _check_set_steps(requests, sets)
        return Scenario(path=_parse_path(data["path"]), requests=_sorted_requests(requests), **common)
    inputs = data["inputs"]
    if isinstance(inputs, list):
        is_step = lambda it: isinstance(it, dict) and any(k in it for k in _REQUEST_KEYS)
        steps = [(i, it) for i, it in enumerate(inputs) if is_step(it)]
        requests += [_parse_request(it, f"inputs[{i}]", duration) for i, it in steps]
        inputs = [it for it in inputs if not is_step(it)]
        if steps and not inputs:
            inputs = [{"t": 0.0, "move": [0.0, 0.0]}]
    _check_set_steps(requests, sets)
    return Scenario(inputs=_parse_inputs(inputs, duration), requests=_sorted_requests(requests), **common)


def _check_set_steps(requests, sets) -> None:
    for _, r in requests:
        if "set" in r and r["set"] not in (sets or {}):
            raise ScenarioError(f"{r['where']}.set: no set named {r['set']!r} (sets: {', '.join(sets or {}) or 'none'})")


def _sorted_requests(requests) -> tuple:
    return tuple(sorted(((t, {k: v for k, v in r.items() if k != "where"}) for t, r in requests),
                        key=lambda r: r[0]))


def _parse_request(it, name: str, duration: float) -> tuple[float, dict]:
    """One request step: {"t", "action", "event_in"}, {"t", "stop_at": [x, z]}, {"t", "plant_at": [x, z],
    "side"} or {"t", "set", "interrupt"}."""
    if not isinstance(it, dict):
        raise ScenarioError(f"{name}: expected an object")
    kinds = [k for k in _REQUEST_KEYS if k in it]
    if len(kinds) != 1:
        raise ScenarioError(f"{name}.action: expected exactly one of {', '.join(map(repr, _REQUEST_KEYS))}")
    _unknown(it, _REQUEST_KEYS[kinds[0]], name)
    t = it.get("t")
    if not _is_number(t) or t < 0:
        raise ScenarioError(f"{name}.t: expected a time >= 0 in seconds")
    if t > duration:
        raise ScenarioError(f"{name}.t: {t} is after the end of the scenario ({duration} s)")
    if "action" in it:
        action = it["action"]
        if not isinstance(action, str) or not action.strip():
            raise ScenarioError(f"{name}.action: expected an action (event type) name such as \"bow\"")
        if "event_in" not in it:
            raise ScenarioError(f"{name}.event_in: missing (seconds from t to the action's event)")
        ein = it["event_in"]
        if not _is_number(ein) or not 0.0 < ein <= 10.0:
            raise ScenarioError(f"{name}.event_in: expected seconds in (0, 10]")
        return float(t), {"action": action, "event_in": float(ein)}
    if "set" in it:
        if not isinstance(it["set"], str) or not isinstance(it.get("interrupt", True), bool):
            raise ScenarioError(f"{name}.set: expected a set name and an optional interrupt true/false")
        return float(t), {"set": it["set"], "interrupt": it.get("interrupt", True), "where": name}
    key = kinds[0]
    p = it[key]
    if not isinstance(p, (list, tuple)) or len(p) != 2 or not all(_is_number(v) for v in p) \
            or max(abs(p[0]), abs(p[1])) > MAX_COORDINATE_M:
        raise ScenarioError(f"{name}.{key}: expected two numbers [x, z] in metres within +-{MAX_COORDINATE_M:g}")
    if key == "plant_at":
        if it.get("side", "left") not in ("left", "right"):
            raise ScenarioError(f"{name}.side: expected 'left' or 'right'")
        return float(t), {"plant_at": (float(p[0]), float(p[1])), "side": it.get("side", "left")}
    return float(t), {"stop_at": (float(p[0]), float(p[1]))}


def _parse_path(p) -> PathSpec:
    if not isinstance(p, dict):
        raise ScenarioError("path: expected an object with points, speed, loop")
    _unknown(p, _PATH_KEYS, "path")
    pts = p.get("points")
    if not isinstance(pts, list) or len(pts) < 2:
        raise ScenarioError("path.points: expected a list of at least two [x, z] points")
    points = []
    for i, q in enumerate(pts):
        if not isinstance(q, (list, tuple)) or len(q) != 2 or not all(_is_number(v) for v in q) \
                or max(abs(q[0]), abs(q[1])) > MAX_COORDINATE_M:
            raise ScenarioError(f"path.points[{i}]: expected two numbers [x, z] in metres within "
                                f"+-{MAX_COORDINATE_M:g}")
        points.append((float(q[0]), float(q[1])))
    length = sum(math.dist(a, b) for a, b in zip(points[:-1], points[1:]))
    if length <= 1e-6:
        raise ScenarioError("path.points: the path has zero length")
    speed = p.get("speed")
    if not _is_number(speed) or not 0.0 < speed <= 12.0:
        raise ScenarioError("path.speed: expected a speed in m/s in (0, 12]")
    return PathSpec(tuple(points), float(speed), _bool(p, "loop", "path"))


def _parse_inputs(items, duration: float):
    if not isinstance(items, list) or not items:
        raise ScenarioError("inputs: expected a non-empty list of inputs")
    out, prev_t = [], -math.inf
    for i, it in enumerate(items):
        name = f"inputs[{i}]"
        if not isinstance(it, dict):
            raise ScenarioError(f"{name}: expected an object")
        _unknown(it, _INPUT_KEYS, name)
        t = it.get("t")
        if not _is_number(t) or t < 0:
            raise ScenarioError(f"{name}.t: expected a time >= 0 in seconds")
        if t <= prev_t:
            raise ScenarioError(f"{name}.t: times must increase (previous {prev_t})")
        if t > duration:
            raise ScenarioError(f"{name}.t: {t} is after the end of the scenario ({duration} s)")
        if "move" not in it:
            raise ScenarioError(f"{name}.move: missing")
        move = _stick(it["move"], f"{name}.move")
        look = _stick(it.get("look"), f"{name}.look", allow_none=True)
        inp = GamepadInput(move=move, look=look, run=_bool(it, "run", name), strafe=_bool(it, "strafe", name))
        out.append((float(t), inp))
        prev_t = t
    return tuple(out)


def load_scenario(path) -> Scenario:
    """Read and validate a scenario JSON file."""
    try:
        data = json.loads(Path(path).read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ScenarioError(f"scenario: {path} is not UTF-8 text (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ScenarioError(f"scenario: invalid JSON in {path}: {e}") from None
    except (RecursionError, ValueError) as e:  # nesting beyond Python's limit, 5000-digit integers
        raise ScenarioError(f"scenario: {path}: {type(e).__name__}: {str(e)[:200]}") from None
    try:
        return parse_scenario(data)
    except ScenarioError as e:
        raise ScenarioError(f"{path}: {e}") from None


def random_scenario(duration: float, seed: int = 0, *, hold: tuple[float, float] = (0.5, 3.0),
                    run_prob: float = 0.3, strafe_prob: float = 0.2, stop_prob: float = 0.15,
                    style: str | None = None) -> Scenario:
    """A long random-input scenario: inputs held for uniform random times in `hold` seconds, random
    directions (mostly full deflection), sometimes running, strafing (with a random look) or stopping."""
    rng = np.random.default_rng(seed)
    inputs, t = [], 0.0
    while t < duration:
        if rng.random() < stop_prob:
            move = (0.0, 0.0)
        else:
            ang = rng.uniform(-math.pi, math.pi)
            mag = 1.0 if rng.random() < 0.7 else float(rng.uniform(0.4, 1.0))
            move = (round(mag * math.sin(ang), 4), round(mag * math.cos(ang), 4))
            if math.hypot(*move) > 1.0:
                move = (move[0] / math.hypot(*move), move[1] / math.hypot(*move))
        strafe = bool(rng.random() < strafe_prob)
        look = None
        if strafe and rng.random() < 0.5:
            a = rng.uniform(-math.pi, math.pi)
            look = (round(math.sin(a), 4), round(math.cos(a), 4))
            if math.hypot(*look) > 1.0:
                look = (look[0] / math.hypot(*look), look[1] / math.hypot(*look))
        inputs.append((round(t, 3), GamepadInput(move=move, look=look, run=bool(rng.random() < run_prob),
                                                  strafe=strafe)))
        t = round(t + float(rng.uniform(*hold)), 3)
    return Scenario(duration=float(duration), inputs=tuple(inputs), style=style, seed=int(seed))


def simulate(scenario: Scenario, fps: float = 60.0, settings: ControllerSettings | None = None):
    """Run the controller alone through a scenario: positions (N, 3) and yaws (N,) at every frame,
    N = round(duration * fps) + 1 (frame 0 is the start)."""
    c = Controller(settings)
    driver = scenario.make_driver()
    n = int(round(scenario.duration * fps))
    pos, yaw = np.empty((n + 1, 3)), np.empty(n + 1)
    pos[0], yaw[0] = c.position, c.yaw
    dt = 1.0 / fps
    for i in range(n):
        driver.step(c, i * dt, dt)
        pos[i + 1], yaw[i + 1] = c.position, c.yaw
    return pos, yaw
