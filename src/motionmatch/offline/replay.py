"""Replay of input logs (runtime/input_log.py): rebuild the Character or Crowd a log was recorded on,
make the same calls tick by tick, and write the motion (`motionmatch synth --replay FILE`). The
output is bit for bit the recorded motion, whatever the thread count (docs/REPLAY.md)."""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from ..runtime.database_sets import SetSpec, parse_sets
from ..runtime.input_log import (MAX_COORDINATE, MAX_TICKS, InputLogError, character_settings, check_database,
                                 check_log, check_pose_bytes, controller_settings, load_log, terrain_from_dict,
                                 unfloats)
from ..world.obstacles import parse_obstacles
from ..runtime.settings_schema import check_fields
from ..runtime.character import Character
from ..runtime.controller import GamepadInput
from ..runtime.crowd import Crowd
from ..io.bvh import write_bvh
from ..motion.animation import Animation
from ..motion.preprocess import remove_simulation_bone
from .scenario import parse_scenario


class ScenarioDriver:
    """A scenario's driver started at character time t0 (drivers read time from the scenario start),
    with the replay_spec() an input log stores (the app's scenario playback uses it)."""

    def __init__(self, scenario: dict, t0: float):
        self.scenario, self.t0 = scenario, float(t0)
        self.driver = parse_scenario(scenario).make_driver()
        # The scenario's own prediction (a path's), or None: the controller's (Crowd.set_driver).
        self.predict = getattr(self.driver, "predict", None)

    def step(self, controller, t, dt):
        self.driver.step(controller, t - self.t0, dt)

    def replay_spec(self) -> dict:
        return {"scenario": self.scenario, "t0": self.t0}


def _driver(spec):
    if spec is None:
        return None
    if not isinstance(spec, dict) or set(spec) != {"scenario", "t0"} or not isinstance(spec["scenario"], dict):
        raise InputLogError(f"expected {{\"scenario\": {{...}}, \"t0\": s}} or null, got {str(spec)[:80]}")
    t0 = spec["t0"]
    if isinstance(t0, bool) or not isinstance(t0, (int, float)) or not 0.0 <= t0 <= MAX_TICKS:
        raise InputLogError(f"t0: expected seconds in [0, {MAX_TICKS}], got {str(t0)[:40]}")
    return ScenarioDriver(spec["scenario"], t0)


def _obstacles(d):
    """Obstacles from input_log.obstacles_dict's output (None: none), checked as a file's list is."""
    if d is None:
        return None
    keys = ("centers", "radii", "box_min", "box_max")
    if not isinstance(d, dict) or set(d) != set(keys) or not all(isinstance(d[k], list) for k in keys):
        raise InputLogError(f"expected lists {', '.join(keys)}")
    if len(d["centers"]) != len(d["radii"]) or len(d["box_min"]) != len(d["box_max"]):
        raise InputLogError("centers and radii, box_min and box_max: lists of equal lengths")
    return parse_obstacles([{"center": c, "radius": r} for c, r in zip(d["centers"], d["radii"])]
                           + [{"min": a, "max": b} for a, b in zip(d["box_min"], d["box_max"])], InputLogError)


def _dt_schedule(log: dict) -> np.ndarray:
    """dt (s) of every tick from the log's change list (load_log checked its order and bounds)."""
    dts = np.empty(log["ticks"])
    changes = log["dt"] + [[log["ticks"], None]]
    for (a, dt), (b, _) in zip(changes, changes[1:]):
        dts[a:b] = float(dt)
    return dts


def _set_fields(target, source) -> None:
    """Copy every field of a settings dataclass (the runtime keeps references to the object)."""
    for k in vars(source):
        setattr(target, k, getattr(source, k))


def _settings(d):
    """CharacterSettings from a log's settings object, checked against the schema."""
    if not isinstance(d, dict) or not isinstance(d.get("warp", {}), dict) or not isinstance(d.get("weights", {}), dict):
        raise InputLogError("expected a settings object with objects 'warp' and 'weights'")
    try:
        s = character_settings(d)
    except TypeError as e:
        raise InputLogError(f"not a settings object ({e})") from None
    s.check()
    for k in ("model", "tag_filter"):
        if not isinstance(getattr(s, k), (str, type(None))) or len(getattr(s, k) or "") > 4096:
            raise InputLogError(f"{k}: expected a string or null")
    return s


def _controller(d):
    try:
        c = controller_settings(d)
    except TypeError as e:
        raise InputLogError(f"not a controller settings object ({e})") from None
    check_fields(c, "controller")
    return c


def _named(where: str, field: str, make):
    """make(), its ValueError (SettingError, ...) an InputLogError naming the file and `field`."""
    try:
        return make()
    except ValueError as exc:
        raise InputLogError(f"{where}: {field}: {exc}") from None


def _list(v, n: int) -> list:
    if not isinstance(v, list) or len(v) != n:
        raise InputLogError(f"expected a list of {n} values, got {str(v)[:80]}")
    return v


def _point(v) -> tuple:
    if not all(isinstance(c, (int, float)) and not isinstance(c, bool) and abs(c) <= MAX_COORDINATE for c in v):
        raise InputLogError(f"expected [x, z] metres within +-{MAX_COORDINATE:g}, got {str(v)[:80]}")
    return float(v[0]), float(v[1])


def _set_spec(v) -> SetSpec:
    if not isinstance(v, dict) or set(v) - {"name", "tags", "weights"} or not isinstance(v.get("name"), str):
        raise InputLogError(f"expected a set {{\"name\", \"tags\", \"weights\"}}, got {str(v)[:80]}")
    return parse_sets({v["name"]: {k: v[k] for k in ("tags", "weights") if k in v}}, "set", InputLogError)[v["name"]]


def _flag(v) -> bool:
    if not isinstance(v, bool):
        raise InputLogError(f"expected true or false, got {str(v)[:40]}")
    return v


def _replay_entries(log: dict, where: str, calls: dict, step) -> None:
    """Make the log's calls and steps in order: calls[name](value) before tick k's step(k, dt, input).
    A call the runtime refuses is an InputLogError naming the file and the entry."""
    entries, e, inp = log["entries"], 0, None
    # The calls after the last tick (entries at tick == ticks) are made too: the log holds them.
    for k, dt in enumerate([*_dt_schedule(log), None]):
        while e < len(entries) and entries[e]["tick"] <= k:
            (name, value), = ((n, v) for n, v in entries[e].items() if n != "tick")
            try:
                if name == "input":
                    inp = value
                elif name in calls:
                    calls[name](value)
                else:
                    raise InputLogError(f"not a call a {log['kind']} log holds")
            except (ValueError, TypeError) as exc:       # InputLogError, SettingError, RequestError, ...
                raise InputLogError(f"{where}: entries[{e}].{name}: {exc}") from None
            e += 1
        if dt is not None:
            step(k, dt, inp)


def _character(db, log: dict, on_tick, where: str) -> None:
    ch = Character(db, _named(where, "settings[0]", lambda: _settings(log["settings"][0])),
                   _named(where, "controller", lambda: _controller(log["controller"])))
    st = log["start"]
    try:
        ch.reset(st.get("frame"), tuple(st.get("position", (0.0, 0.0, 0.0))), float(st.get("yaw", 0.0)))
    except ValueError as exc:
        raise InputLogError(f"{where}: start: {exc}") from None

    def clip(v):
        _list(v, 2)
        ch.play_clip(None if v[0] is None else _index(v[0], len(db.range_starts)), _index(v[1], db.num_frames))

    calls = {
        "settings": lambda v: (_set_fields(ch.settings, _settings(v)), ch.apply_settings()),
        "request_action": lambda v: ch.request_action(*_list(v, 2)),
        "request_stop_at": lambda v: ch.request_stop_at(_point(_list(v, 2))),
        "request_plant_at": lambda v: ch.request_plant_at(_point(_list(v, 3)[:2]), v[2]),
        "cancel_request": lambda v: ch.cancel_request(),
        "play_clip": clip,
        "terrain": lambda v: ch.set_terrain(*terrain_from_dict(v)),
        "driver": lambda v: ch.set_driver(_driver(v)),
        "use_set": lambda v: ch.use_set(_set_spec(_list(v, 2)[0]), _flag(v[1])),
        "obstacles": lambda v: ch.set_obstacles(_obstacles(v)),
    }

    def step(k, dt, value):
        inp = GamepadInput() if value is None else GamepadInput(
            move=(value["move"][0], value["move"][1]), run=value["run"], strafe=value["strafe"],
            look=None if value["look"] is None else (value["look"][0], value["look"][1]))
        ch.step(inp, dt)
        on_tick(k, ch)

    _replay_entries(log, where, calls, step)


def _index(v, n: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < n:
        raise InputLogError(f"expected an integer in [0, {n}), got {str(v)[:40]}")
    return v


def _crowd(db, log: dict, on_tick, where: str) -> None:
    n = log["agents"]

    def agent_settings(table, order):
        objs = [_settings(d) for d in table]
        return [objs[i] for i in order]

    frames = log["start"].get("frames")
    if frames is not None and any(f is not None and f >= db.num_frames for f in frames):
        raise InputLogError(f"{where}: start.frames: a frame beyond the database's {db.num_frames}")
    crowd = Crowd(db, n, _named(where, "settings", lambda: agent_settings(log["settings"], log["settings_of"])), frames,
                  _named(where, "controller", lambda: _controller(log["controller"])))

    def settings(v):
        if not isinstance(v, dict) or set(v) != {"settings", "settings_of"}:
            raise InputLogError('expected {"settings": [...], "settings_of": [...]}')
        check_log({**log, "settings": v["settings"], "settings_of": v["settings_of"], "entries": []}, where)
        crowd.settings[:] = agent_settings(v["settings"], v["settings_of"])
        crowd.apply_settings()

    def clip(v):
        _list(v, 3)
        crowd.play_clip(_index(v[0], n), None if v[1] is None else _index(v[1], len(db.range_starts)),
                        _index(v[2], db.num_frames))

    def reset(v):
        _list(v, 4)
        pos = _list(v[1], 3)
        _point(pos[:2])
        _point(pos[1:])
        crowd.reset_agent(_index(v[0], n), tuple(float(c) for c in pos), _point([v[2], 0.0])[0],
                          None if v[3] is None else _index(v[3], db.num_frames))

    calls = {
        "settings": settings,
        "request_action": lambda v: crowd.request_action(_index(_list(v, 3)[0], n), v[1], v[2]),
        "request_stop_at": lambda v: crowd.request_stop_at(_index(_list(v, 3)[0], n), _point(v[1:])),
        "request_plant_at": lambda v: crowd.request_plant_at(_index(_list(v, 4)[0], n), _point(v[1:3]), v[3]),
        "cancel_request": lambda v: crowd.cancel_request(_index(v, n)),
        "play_clip": clip,
        "terrain": lambda v: crowd.set_terrain(*terrain_from_dict(v)),
        "reset_agent": reset,
        "reset_clock": lambda v: crowd.reset_clock(),
        "use_set": lambda v: crowd.use_set(_index(_list(v, 3)[0], n), _set_spec(v[1]), _flag(v[2])),
        "obstacles": lambda v: crowd.set_obstacles(_obstacles(v)),
    }
    state = {"move": np.zeros((n, 2)), "run": np.zeros(n, dtype=bool), "strafe": np.zeros(n, dtype=bool),
             "look": np.full((n, 2), np.nan), "value": None}

    def step(k, dt, value):
        if value is not state["value"]:
            state.update(move=unfloats(value["move"]), look=unfloats(value["look"]), value=value,
                         run=np.asarray(value["run"], dtype=bool), strafe=np.asarray(value["strafe"], dtype=bool))
        crowd.step(state["move"], state["run"], state["strafe"], state["look"], dt)
        on_tick(k, crowd)

    _replay_entries(log, where, calls, step)


def replay(db, log, on_tick, where: str | None = None) -> None:
    """Replay an input log (a path or a parsed dict) on `db`, calling on_tick(tick, character_or_crowd)
    after every tick. InputLogError naming the file (`where`: the name of a parsed log) and the entry
    when the log is malformed or `db` is not its database."""
    where = where or ("input log" if isinstance(log, dict) else str(log))
    log = load_log(log)
    try:
        check_database(log, db)
    except InputLogError as exc:
        raise InputLogError(f"{where}: {exc}") from None
    (_character if log["kind"] == "character" else _crowd)(db, log, on_tick, where)


def replay_poses(db, log, where: str | None = None) -> dict:
    """Every tick's output of a replay: local_pos (T, n, J, 3), local_rot (T, n, J, 4) float64 (joint 0
    the character root in the world, as Character.local_pose), global_positions (T, n, J, 3) float32."""
    where = where or ("input log" if isinstance(log, dict) else str(log))
    log = load_log(log)
    T, n, J = log["ticks"], log["agents"], db.num_joints
    check_pose_bytes(T, n, J, where)
    out = {"local_pos": np.zeros((T, n, J, 3)), "local_rot": np.zeros((T, n, J, 4)),
           "global_positions": np.zeros((T, n, J, 3), np.float32)}

    def keep(k, obj):
        crowd = getattr(obj, "crowd", obj)
        for i in range(n):
            out["local_pos"][k, i], out["local_rot"][k, i] = crowd.local_pose(i)
        out["global_positions"][k] = crowd.global_positions

    replay(db, log, keep, where)
    return out


def motion_digest(poses: dict) -> str:
    """SHA-256 (hex) of a replay's pose arrays: equal digests, bit-for-bit equal motion."""
    h = hashlib.sha256()
    for k in ("local_pos", "local_rot", "global_positions"):
        h.update(np.ascontiguousarray(poses[k]).tobytes())
    return h.hexdigest()


def window_ticks(log: dict) -> np.ndarray:
    """The ticks a log's recorded windows cover (the app's Record presses), all ticks without windows."""
    if not log.get("windows"):
        return np.arange(log["ticks"])
    return np.concatenate([np.arange(a, b) for a, b in log["windows"]] or [np.zeros(0, np.int64)]).astype(np.int64)


def synthesize_replay(db, log_path, out_dir, progress: bool = False) -> dict:
    """Replay `log_path` and write out_dir/motion.bvh (a character log: the ticks of its recorded windows,
    else all) or agent_000.bvh ... (a crowd log), poses.npz (replay_poses' arrays, every tick) and
    replay.json (ticks, database, motion digest); returns replay.json's content."""
    log = load_log(log_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if progress:
        print(f"replaying {log['ticks']} ticks of {log['agents']} {log['kind']}(s)", file=sys.stderr)
    poses = replay_poses(db, log, str(log_path))
    np.savez(out / "poses.npz", **poses)
    ticks = window_ticks(log)
    for i in range(log["agents"]):
        skel, pos, rot = remove_simulation_bone(db.skeleton, poses["local_pos"][ticks, i], poses["local_rot"][ticks, i])
        name = "motion.bvh" if log["kind"] == "character" else f"agent_{i:03d}.bvh"
        write_bvh(out / name, Animation(skeleton=skel, positions=pos, rotations=rot, fps=db.fps))
    summary = {"kind": log["kind"], "agents": log["agents"], "ticks": log["ticks"], "frames_written": len(ticks),
               "windows": log.get("windows"), "database_sha256": log["database"]["sha256"],
               "motion_sha256": motion_digest(poses)}
    (out / "replay.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary
