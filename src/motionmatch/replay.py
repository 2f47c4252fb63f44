"""Replay of input logs (runtime/input_log.py): rebuild the Character or Crowd a log was recorded on,
make the same calls tick by tick, and write the motion (`motionmatch synth --replay FILE`). The
output is bit for bit the recorded motion, whatever the thread count (docs/REPLAY.md)."""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from .runtime.database_sets import SetSpec
from .runtime.input_log import (InputLogError, character_settings, check_database, controller_settings, load_log,
                                terrain_from_dict, unfloats)


class ScenarioDriver:
    """A scenario's driver started at character time t0 (drivers read time from the scenario start),
    with the replay_spec() an input log stores (the app's scenario playback uses it)."""

    def __init__(self, scenario: dict, t0: float):
        from .scenario import parse_scenario
        self.scenario, self.t0 = scenario, float(t0)
        self.driver = parse_scenario(scenario).make_driver()

    def step(self, controller, t, dt):
        self.driver.step(controller, t - self.t0, dt)

    def predict(self, *args, **kwargs):
        return self.driver.predict(*args, **kwargs)

    def replay_spec(self) -> dict:
        return {"scenario": self.scenario, "t0": self.t0}


def _driver(spec):
    if spec is None:
        return None
    if not isinstance(spec, dict) or set(spec) != {"scenario", "t0"}:
        raise InputLogError(f"driver: expected {{\"scenario\": {{...}}, \"t0\": s}} or null, got {str(spec)[:80]}")
    return ScenarioDriver(spec["scenario"], spec["t0"])


def _obstacles(d):
    """Obstacles from input_log.obstacles_dict's output (None: none)."""
    if d is None:
        return None
    from .obstacles import Obstacles
    pairs = {k: np.asarray(d[k], np.float64).reshape(-1, 2) for k in ("centers", "box_min", "box_max")}
    return Obstacles(pairs["centers"], np.asarray(d["radii"], np.float64), pairs["box_min"], pairs["box_max"])


def _dt_schedule(log: dict) -> np.ndarray:
    """dt (s) of every tick from the log's change list."""
    dts = np.empty(log["ticks"])
    changes = log["dt"] + [[log["ticks"], None]]
    if log["ticks"] and (not log["dt"] or changes[0][0] != 0):
        raise InputLogError("dt: the first entry must be at tick 0")
    for (a, dt), (b, _) in zip(changes, changes[1:]):
        dts[a:b] = float(dt)
    return dts


def _set_fields(target, source) -> None:
    """Copy every field of a settings dataclass (the runtime keeps references to the object)."""
    for k in vars(source):
        setattr(target, k, getattr(source, k))


def _character(db, log: dict, on_tick) -> None:
    from .runtime.character import Character
    from .runtime.controller import GamepadInput
    ch = Character(db, character_settings(log["settings"][0]), controller_settings(log["controller"]))
    st = log["start"]
    ch.reset(st.get("frame"), tuple(st.get("position", (0.0, 0.0, 0.0))), float(st.get("yaw", 0.0)))
    inp = GamepadInput()
    calls = {
        "settings": lambda v: (_set_fields(ch.settings, character_settings(v)), ch.apply_settings()),
        "request_action": lambda v: ch.request_action(v[0], v[1]),
        "request_stop_at": lambda v: ch.request_stop_at(v),
        "request_plant_at": lambda v: ch.request_plant_at(v[:2], v[2]),
        "cancel_request": lambda v: ch.cancel_request(),
        "play_clip": lambda v: ch.play_clip(v[0], v[1]),
        "terrain": lambda v: ch.set_terrain(*terrain_from_dict(v)),
        "driver": lambda v: ch.set_driver(_driver(v)),
        "use_set": lambda v: ch.use_set(SetSpec(**v[0]), v[1]),
        "obstacles": lambda v: ch.set_obstacles(_obstacles(v)),
    }
    entries, e = log["entries"], 0
    for k, dt in enumerate(_dt_schedule(log)):
        while e < len(entries) and entries[e]["tick"] <= k:
            (name, value), = ((n, v) for n, v in entries[e].items() if n != "tick")
            if name == "input":
                look = value["look"]
                inp = GamepadInput(move=(value["move"][0], value["move"][1]), run=value["run"],
                                   strafe=value["strafe"], look=None if look is None else (look[0], look[1]))
            elif name in calls:
                calls[name](value)
            else:
                raise InputLogError(f"entries[{e}]: {name!r} is not a call a character log holds")
            e += 1
        ch.step(inp, dt)
        on_tick(k, ch)


def _crowd(db, log: dict, on_tick) -> None:
    from .runtime.crowd import Crowd
    n = log["agents"]

    def agent_settings(table, order):
        objs = [character_settings(d) for d in table]
        return [objs[i] for i in order]

    crowd = Crowd(db, n, agent_settings(log["settings"], log["settings_of"]), log["start"].get("frames"),
                  controller_settings(log["controller"]))

    def settings(v):
        new = agent_settings(v["settings"], v["settings_of"])
        crowd.settings[:] = new
        crowd.apply_settings()

    calls = {
        "settings": settings,
        "request_action": lambda v: crowd.request_action(v[0], v[1], v[2]),
        "request_stop_at": lambda v: crowd.request_stop_at(v[0], v[1:]),
        "request_plant_at": lambda v: crowd.request_plant_at(v[0], v[1:3], v[3]),
        "cancel_request": lambda v: crowd.cancel_request(v),
        "play_clip": lambda v: crowd.play_clip(v[0], v[1], v[2]),
        "terrain": lambda v: crowd.set_terrain(*terrain_from_dict(v)),
        "reset_agent": lambda v: crowd.reset_agent(v[0], tuple(v[1]), v[2], v[3]),
        "reset_clock": lambda v: crowd.reset_clock(),
        "use_set": lambda v: crowd.use_set(v[0], SetSpec(**v[1]), v[2]),
        "obstacles": lambda v: crowd.set_obstacles(_obstacles(v)),
    }
    move, run = np.zeros((n, 2)), np.zeros(n, dtype=bool)
    strafe, look = np.zeros(n, dtype=bool), np.full((n, 2), np.nan)
    entries, e = log["entries"], 0
    for k, dt in enumerate(_dt_schedule(log)):
        while e < len(entries) and entries[e]["tick"] <= k:
            (name, value), = ((n_, v) for n_, v in entries[e].items() if n_ != "tick")
            if name == "input":
                move, look = unfloats(value["move"]), unfloats(value["look"])
                run, strafe = np.asarray(value["run"], dtype=bool), np.asarray(value["strafe"], dtype=bool)
            elif name in calls:
                calls[name](value)
            else:
                raise InputLogError(f"entries[{e}]: {name!r} is not a call a crowd log holds")
            e += 1
        crowd.step(move, run, strafe, look, dt)
        on_tick(k, crowd)


def replay(db, log, on_tick) -> None:
    """Replay an input log (a path or a parsed dict) on `db`, calling on_tick(tick, character_or_crowd)
    after every tick. InputLogError when the log is malformed or `db` is not its database."""
    log = load_log(log)
    check_database(log, db)
    (_character if log["kind"] == "character" else _crowd)(db, log, on_tick)


def replay_poses(db, log) -> dict:
    """Every tick's output of a replay: local_pos (T, n, J, 3), local_rot (T, n, J, 4) float64 (joint 0
    the character root in the world, as Character.local_pose), global_positions (T, n, J, 3) float32."""
    log = load_log(log)
    T, n, J = log["ticks"], log["agents"], db.num_joints
    out = {"local_pos": np.zeros((T, n, J, 3)), "local_rot": np.zeros((T, n, J, 4)),
           "global_positions": np.zeros((T, n, J, 3), np.float32)}

    def keep(k, obj):
        crowd = getattr(obj, "crowd", obj)
        for i in range(n):
            out["local_pos"][k, i], out["local_rot"][k, i] = crowd.local_pose(i)
        out["global_positions"][k] = crowd.global_positions

    replay(db, log, keep)
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
    from .io.bvh import write_bvh
    from .animation import Animation
    from .preprocess import remove_simulation_bone
    log = load_log(log_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if progress:
        print(f"replaying {log['ticks']} ticks of {log['agents']} {log['kind']}(s)", file=sys.stderr)
    poses = replay_poses(db, log)
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
