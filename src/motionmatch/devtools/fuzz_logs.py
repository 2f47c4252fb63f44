"""Hostile-input campaign for input logs (`motionmatch synth --replay FILE`, docs/REPLAY.md): damaged
copies of a character log and a crowd log recorded here, fed through the replay the CLI runs.

A log names its database by digest, which anyone can compute, so nothing past the digest check may
trust the file: every named damage must be refused (InputLogError naming the file), and seeded random
damage to any one value must end as a clean error or a replay (never another exception, a hang or a
blow-up).
"""
from __future__ import annotations

import base64
import copy
import json
import zlib
from pathlib import Path

import numpy as np
from ..world.obstacles import parse_obstacles
from ..runtime.character import Character
from ..runtime.controller import GamepadInput
from ..runtime.crowd import Crowd
from ..runtime.database_sets import SetSpec
from ..world.terrain import Heightfield
from .fuzz import Outcome, classify
from ..offline.replay import synthesize_replay
from ..runtime.input_log import InputLogError

_ODD = (-1, 0, 2 ** 62, -(2 ** 62), 1e300, -1e300, 1e-300, 0.5, "x", "", None, True, False, [], {}, [[]],
        [0, 0, 0, 0], {"a": 1})


def recorded_logs(db) -> dict:
    """A character log (sticks, a settings change, a terrain, obstacles, a stop, a clip, a set) and a
    crowd log (3 agents: sticks, a reset, a stop) of a few ticks on `db`, as dicts."""
    ch = Character(db)
    log = ch.start_input_log()
    for k in range(40):
        if k == 5:
            ch.settings.bias = 0.3
            ch.apply_settings()
        if k == 10:
            ch.set_terrain(Heightfield.procedural("slope", size=4.0, cell=0.5, angle_deg=5.0))
        if k == 12:
            ch.set_obstacles(parse_obstacles([{"center": [0.5, 2.5], "radius": 0.4},
                                              {"min": [-2.0, 1.0], "max": [-1.0, 1.5]}]))
        if k == 20:
            ch.request_stop_at((1.0, 2.0))
        if k == 25:
            ch.cancel_request()
            ch.play_clip(1, 3)
        if k == 30:
            ch.use_set(SetSpec("mirrored", "mirrored", {ch.channel_names[0]: 2.0}), interrupt=False)
        ch.step(GamepadInput(move=(0.3, 1.0), run=k > 15, look=(0.0, 1.0) if k > 30 else None))
    character = log.to_dict()
    crowd = Crowd(db, 3)
    clog = crowd.start_input_log()
    crowd.reset_agent(1, (1.0, 0.0, 0.0), 0.5)
    for k in range(20):
        if k == 8:
            crowd.request_stop_at(2, (2.0, 1.0))
        look = np.full((3, 2), np.nan)
        look[0] = (0.0, 1.0)
        crowd.step(np.array([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]]), np.array([k > 10, False, True]),
                   np.array([False, True, False]), look)
    return {"character": character, "crowd": json.loads(json.dumps(clog.to_dict()))}


def _entry(d: dict, name: str) -> dict:
    return next(e for e in d["entries"] if name in e)


def _named_damages(logs: dict) -> list[tuple[str, str, object]]:
    """(name, log kind, damaged dict or raw bytes): each must be refused."""
    out = []

    def damage(kind, name, change):
        d = copy.deepcopy(logs[kind])
        change(d)
        out.append((name, kind, d))

    c = "character"
    damage(c, "format", lambda d: d.update(format="other"))
    damage(c, "version true", lambda d: d.update(version=True))
    damage(c, "version string", lambda d: d.update(version="1"))
    damage(c, "kind", lambda d: d.update(kind="robot"))
    damage(c, "two agents", lambda d: d.update(agents=2, settings_of=[0, 0]))
    damage(c, "ticks 2^62", lambda d: d.update(ticks=2 ** 62))
    damage(c, "ticks 10^8", lambda d: d.update(ticks=10 ** 8))
    damage(c, "ticks negative", lambda d: d.update(ticks=-5))
    damage(c, "dt empty", lambda d: d.update(dt=[]))
    damage(c, "dt late start", lambda d: d.update(dt=[[3, 1 / 60]]))
    damage(c, "dt zero", lambda d: d.update(dt=[[0, 0.0]]))
    damage(c, "dt negative", lambda d: d.update(dt=[[0, -0.01]]))
    damage(c, "dt an hour", lambda d: d.update(dt=[[0, 3600.0]]))
    damage(c, "dt ticks backwards", lambda d: d.update(dt=[[0, 0.01], [5, 0.02], [4, 0.01]]))
    damage(c, "dt beyond ticks", lambda d: d.update(dt=[[0, 0.01], [10 ** 6, 0.02]]))
    damage(c, "window reversed", lambda d: d.update(windows=[[10, 5]]))
    damage(c, "window beyond", lambda d: d.update(windows=[[0, 10 ** 9]]))
    damage(c, "settings empty", lambda d: d.update(settings=[]))
    damage(c, "settings unknown key", lambda d: d["settings"][0].update(nonsense=1))
    damage(c, "settings bias huge", lambda d: d["settings"][0].update(bias=1e300))
    damage(c, "settings bias string", lambda d: d["settings"][0].update(bias="x"))
    damage(c, "settings warp number", lambda d: d["settings"][0].update(warp=3))
    damage(c, "settings weights list", lambda d: d["settings"][0].update(weights=[1, 2]))
    damage(c, "settings weight negative", lambda d: d["settings"][0].update(weights={"trajectory_position": -1.0}))
    damage(c, "settings_of out of range", lambda d: d.update(settings_of=[4]))
    damage(c, "controller unknown key", lambda d: d["controller"].update(nonsense=1))
    damage(c, "start frame 10^12", lambda d: d["start"].update(frame=10 ** 12))
    damage(c, "start frame negative", lambda d: d["start"].update(frame=-1))
    damage(c, "start position short", lambda d: d["start"].update(position=[0, 0]))
    damage(c, "start yaw huge", lambda d: d["start"].update(yaw=1e300))
    damage(c, "entry tick negative", lambda d: d["entries"][0].update(tick=-1))
    damage(c, "entry ticks backwards", lambda d: d["entries"].append({"tick": 0, "cancel_request": None}))
    damage(c, "entry beyond ticks", lambda d: d["entries"].append({"tick": 10 ** 6, "cancel_request": None}))
    damage(c, "entry unknown call", lambda d: d["entries"].append({"tick": d["ticks"], "explode": None}))
    damage(c, "input move string", lambda d: _entry(d, "input")["input"].update(move="ahead"))
    damage(c, "input move huge", lambda d: _entry(d, "input")["input"].update(move=[1e300, 0]))
    damage(c, "input run number", lambda d: _entry(d, "input")["input"].update(run=1))
    damage(c, "input look short", lambda d: _entry(d, "input")["input"].update(look=[1]))
    damage(c, "input extra key", lambda d: _entry(d, "input")["input"].update(jump=True))
    damage(c, "stop at far away", lambda d: _entry(d, "request_stop_at").update(request_stop_at=[1e300, 0]))
    damage(c, "stop at strings", lambda d: _entry(d, "request_stop_at").update(request_stop_at=["a", "b"]))
    damage(c, "play clip 10^9", lambda d: _entry(d, "play_clip").update(play_clip=[10 ** 9, 0]))
    damage(c, "play clip negative", lambda d: _entry(d, "play_clip").update(play_clip=[-1, 0]))
    damage(c, "play clip offset beyond", lambda d: _entry(d, "play_clip").update(play_clip=[1, 10 ** 7]))
    damage(c, "action unknown", lambda d: d["entries"].append({"tick": d["ticks"], "request_action": ["fly", 1.0]}))
    damage(c, "plant side", lambda d: d["entries"].append({"tick": d["ticks"], "request_plant_at": [0, 1, "middle"]}))
    damage(c, "terrain shape huge", lambda d: _entry(d, "terrain")["terrain"].update(shape=[100000, 100000]))
    damage(c, "terrain shape mismatch", lambda d: _entry(d, "terrain")["terrain"].update(shape=[3, 3]))
    damage(c, "terrain not base64", lambda d: _entry(d, "terrain")["terrain"].update(heights="%%%"))
    damage(c, "terrain zlib bomb", lambda d: _entry(d, "terrain")["terrain"].update(
        shape=[8, 8], heights=base64.b64encode(zlib.compress(bytes(64 << 20), 9)).decode()))
    damage(c, "terrain NaN heights", lambda d: _entry(d, "terrain")["terrain"].update(
        shape=[2, 2], heights=base64.b64encode(zlib.compress(np.full(4, np.nan).tobytes())).decode()))
    damage(c, "terrain cell zero", lambda d: _entry(d, "terrain")["terrain"].update(cell=0))
    damage(c, "terrain halflife negative", lambda d: _entry(d, "terrain")["terrain"].update(halflife=-1))
    damage(c, "obstacles radius negative", lambda d: _entry(d, "obstacles")["obstacles"].update(radii=[-1.0]))
    damage(c, "obstacles lengths differ", lambda d: _entry(d, "obstacles")["obstacles"].update(radii=[1.0, 2.0]))
    damage(c, "obstacles box inside out", lambda d: _entry(d, "obstacles")["obstacles"].update(
        box_min=[[1.0, 1.0]], box_max=[[0.0, 0.0]]))
    damage(c, "obstacles 10^5 circles", lambda d: _entry(d, "obstacles")["obstacles"].update(
        centers=[[0.0, 0.0]] * 100_000, radii=[1.0] * 100_000))
    damage(c, "driver garbage", lambda d: d["entries"].append({"tick": d["ticks"], "driver": {"scenario": 3, "t0": 0}}))
    damage(c, "driver bad scenario", lambda d: d["entries"].append(
        {"tick": d["ticks"], "driver": {"scenario": {"duration": -1}, "t0": 0}}))
    damage(c, "set unknown channel", lambda d: _entry(d, "use_set").update(
        use_set=[{"name": "s", "tags": None, "weights": {"no_such_channel": 1.0}}, True]))
    damage(c, "set bad tags", lambda d: _entry(d, "use_set").update(use_set=[{"name": "s", "tags": "((("}, True]))
    damage(c, "set interrupt string", lambda d: _entry(d, "use_set").update(use_set=[{"name": "s"}, "now"]))
    k = "crowd"
    damage(k, "crowd agents 10^6", lambda d: d.update(agents=10 ** 6))
    damage(k, "crowd input short", lambda d: _entry(d, "input")["input"].update(run=[True]))
    damage(k, "crowd move null", lambda d: _entry(d, "input")["input"].update(move=[None, [0, 1], [0, 1]]))
    damage(k, "crowd stop agent 99", lambda d: _entry(d, "request_stop_at").update(request_stop_at=[99, 0.0, 0.0]))
    damage(k, "crowd stop agent -1", lambda d: _entry(d, "request_stop_at").update(request_stop_at=[-1, 0.0, 0.0]))
    damage(k, "crowd reset agent 7", lambda d: _entry(d, "reset_agent").update(reset_agent=[7, [0, 0, 0], 0, None]))
    damage(k, "crowd reset frame 10^9", lambda d: _entry(d, "reset_agent").update(reset_agent=[1, [0, 0, 0], 0, 10 ** 9]))
    damage(k, "crowd start frames", lambda d: d["start"].update(frames=[10 ** 9, 0, 0]))
    damage(k, "crowd settings change", lambda d: d["entries"].append(
        {"tick": d["ticks"], "settings": {"settings": [{}], "settings_of": [0, 0, 5]}}))
    damage(k, "crowd cancel agent 3", lambda d: d["entries"].append({"tick": d["ticks"], "cancel_request": 3}))
    nested = (b'{"format": "motionmatch-input-log", "version": 1, "kind": "character", "seed": '
              + b"[" * 5000 + b"]" * 5000 + b"}")
    out += [("deep nesting", c, nested), ("not JSON", c, b"\x00\xff garbage"), ("empty file", c, b""),
            ("NaN", c, json.dumps(logs[c]).replace('"yaw": 0.0', '"yaw": NaN').encode()),
            ("integer of 400 digits", c, json.dumps(logs[c]).replace('"agents": 1', '"agents": ' + "9" * 400).encode())]
    return out


def _random_damages(logs: dict, n: int, seed: int) -> list[tuple[str, str, dict]]:
    """Seeded: one value anywhere in a log replaced by an odd one (may be valid: the replay must then run)."""
    rng = np.random.default_rng(seed)
    out = []
    for m in range(n):
        kind = ("character", "crowd")[m % 2]
        d = copy.deepcopy(logs[kind])
        slots, stack = [], [(d, "")]
        while stack:
            node, name = stack.pop()
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for key, v in items:
                slots.append((node, key, f"{name}.{key}"))
                if isinstance(v, (dict, list)) and len(slots) < 20_000:
                    stack.append((v, f"{name}.{key}"))
        node, key, name = slots[int(rng.integers(len(slots)))]
        odd = _ODD[int(rng.integers(len(_ODD)))]
        node[key] = copy.deepcopy(odd)
        out.append((f"{kind}{name} = {str(odd)[:20]}", kind, d))
    return out


def fuzz_input_logs(db, out_dir, random_damages: int = 200, seed: int = 0) -> dict:
    """Run the campaign through replay.synthesize_replay (what `synth --replay` runs) into out_dir:
    {"input logs": Outcome}."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    logs = recorded_logs(db)
    for kind, d in logs.items():        # compile what a replay runs first: compiling is not a hang
        f = out_dir / f"valid_{kind}.replay.json"
        f.write_text(json.dumps(d))
        synthesize_replay(db, f, out_dir / "out")
    report = Outcome()
    cases = [(name, kind, d, True) for name, kind, d in _named_damages(logs)]
    cases += [(name, kind, d, False) for name, kind, d in _random_damages(logs, random_damages, seed)]
    for k, (name, kind, d, refuse) in enumerate(cases):
        f = out_dir / f"log_{k:04d}.replay.json"
        f.write_bytes(d if isinstance(d, bytes) else json.dumps(d).encode())
        classify(report, name, f, refuse, (InputLogError,), lambda: synthesize_replay(db, f, out_dir / "out"))
    for path in ("/dev/zero", str(out_dir)):
        classify(report, path, path, True, (InputLogError,), lambda: synthesize_replay(db, path, out_dir / "out"))
    return {"input logs": report}
