"""The browser app's server: aiohttp, one simulated character per WebSocket connection.

Each connection gets its own `Character`, stepped at a fixed 60 Hz by an asyncio task (at most
`MAX_CATCHUP` steps per wake-up; a longer stall drops time instead of fast-forwarding). After each tick
the server sends one binary frame:

    uint32 sequence | float32 simulation time (s) | uint32 L | float32 positions[J*3] | L bytes JSON debug
    | float32 local rotations[J*4]

positions are world joint positions in metres (Y up), J from the `hello` message; local rotations are
(w, x, y, z) relative to the parent joint (joint 0: in the world), for the skinned body. When the app has
a body (`hello.character`), its GLB is at /api/character.glb. Text messages in both
directions are JSON objects with a `type`; every client message is validated (see `_SCHEMAS`) and a bad
one gets an `error` reply and is dropped. Rewind is kept by the page (it stores the last 10 s of frames);
BVH recording and scenario playback run here, reached through `/api/session/<id>/...`.
"""
from __future__ import annotations

import argparse
import asyncio
import errno
import json
import logging
import math
import os
import secrets
import socket
import struct
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
from aiohttp import WSMsgType, web

log = logging.getLogger("motionmatch.app")

STATIC_DIR = Path(__file__).resolve().parent / "static"
VENDOR_DIR = Path(__file__).resolve().parent / "vendor"      # three.js inside a wheel (setup.py)
PROJECT_ROOT = Path(__file__).resolve().parents[3]
DT = 1.0 / 60.0
MAX_CATCHUP = 4                 # fixed steps per wake-up before dropping time
MAX_TEXT_BYTES = 4096           # larger client messages get an error reply and are dropped
MAX_FRAME_BYTES = 64 * 1024     # beyond this aiohttp closes the connection (code 1009)
RATE_PER_S = 120.0              # client messages per second (token bucket, burst of the same size)
MAX_RECORD_FRAMES = 60 * 60 * 10  # 10 minutes of recorded poses
MAX_SCENARIO_BYTES = 1 << 20
MAX_PATH_CHARS = 1024           # longer request paths are not ours: 404 without touching the file system
WEIGHTS_INTERVAL_S = 0.25       # a session's weight changes apply at most this often (latest values win)
MAX_RESETS_PER_WINDOW, RESET_WINDOW_S = 5, 10.0   # more resets than this in the window end the session
INERTIALIZATION = ("spring", "quintic", "off", "dead_blending")
TERRAIN_KINDS = ("flat", "slope", "steps", "noise")
MAX_TERRAIN_BYTES = 4 << 20     # PNG heightmap upload
TERRAIN_SAMPLES = 201           # heights sent to the page per side (the page draws a mesh of them)
FRAME_HEADER = struct.Struct("<IfI")
PORT_TRIES = 10                 # a busy --port moves on to the next ones


# ---------------------------------------------------------------------------------------------------
# Message validation


class MessageError(ValueError):
    """A client message that is malformed or out of range; the text goes back to the client."""


def _finite(v) -> bool:
    """A JSON number that is finite as a float (a 400-digit integer is not; math.isfinite would raise)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return abs(v) <= 1e300 if isinstance(v, int) else math.isfinite(v)


def _number(lo: float, hi: float) -> Callable[[Any, str], float]:
    def check(v, name):
        if not _finite(v):
            raise MessageError(f"{name} must be a finite number")
        if not lo <= v <= hi:
            raise MessageError(f"{name} must be in [{lo}, {hi}], got {v}")
        return float(v)
    return check


def _boolean(v, name) -> bool:
    if not isinstance(v, bool):
        raise MessageError(f"{name} must be true or false")
    return v


def _vec2(v, name) -> tuple[float, float]:
    """A stick [x, z], forgiving like scenarios: components within [-1.5, 1.5], magnitude clamped to 1."""
    from ..scenario import clamp_stick
    return clamp_stick(v, name, error=MessageError)


def _optional(check):
    def inner(v, name):
        return None if v is None else check(v, name)
    return inner


def _text(max_len: int):
    def check(v, name):
        if not isinstance(v, str) or len(v) > max_len:
            raise MessageError(f"{name} must be a string of at most {max_len} characters")
        return v
    return check


def _choice(options):
    def check(v, name):
        if v not in options:
            raise MessageError(f"{name} must be one of {', '.join(options)}")
        return v
    return check


def _integer(lo: int, hi: int):
    def check(v, name):
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise MessageError(f"{name} must be an integer in [{lo}, {hi}]")
        return v
    return check


def _numbers(max_len: int):
    def check(v, name):
        if not isinstance(v, list) or not 0 < len(v) <= max_len:
            raise MessageError(f"{name} must be a list of 1..{max_len} numbers")
        num = _number(-1e6, 1e6)
        return [num(x, f"{name}[{i}]") for i, x in enumerate(v)]
    return check


def _weights(v, name):
    if not isinstance(v, dict) or len(v) > 64:
        raise MessageError(f"{name} must be an object {{channel: weight}}")
    w = _number(0.0, 10.0)
    return {str(k): w(x, f"{name}.{k}") for k, x in v.items()}


_SETTINGS_FIELDS = {
    "weights": _weights,
    "search_interval": _number(0.02, 1.0),
    "bias": _number(0.0, 5.0),
    "inertialization": _choice(INERTIALIZATION),
    "halflife": _number(0.01, 1.0),
    "adjustment": _boolean,
    "clamping": _boolean,
    "foot_locking": _boolean,
    "warp_orientation": _boolean,
    "warp_stride": _boolean,
    "warp_play_rate": _boolean,
    "warp_slope": _boolean,
    "warp_limit_deg": _number(0.0, 120.0),
    "warp_hip_twist_limit_deg": _number(0.0, 90.0),
    "warp_spine_twist_limit_deg": _number(0.0, 90.0),
    "tag_filter": _optional(_text(200)),
    "mode": _choice(("classic", "lmm")),     # learned motion matching needs a model (serve --lmm)
}

# type -> {field: (validator, required)}
_SCHEMAS: dict[str, dict[str, tuple[Callable, bool]]] = {
    "input": {"move": (_vec2, True), "look": (_optional(_vec2), False), "run": (_boolean, False),
              "strafe": (_boolean, False)},
    "settings": {k: (f, False) for k, f in _SETTINGS_FIELDS.items()},
    "reset": {},
    "pause": {"paused": (_boolean, True)},
    "record": {"action": (_choice(("start", "stop", "clear")), True)},
    "scenario_stop": {},
    "ping": {"t": (_number(-1e15, 1e15), True)},
    # Debugging tools: extra per-frame payloads (ghost poses), one search's candidates (the page sends
    # back a search record from its history), playing a clip directly, live terrain.
    "debug": {"ghosts": (_boolean, False)},
    "inspect": {"query": (_numbers(256), True), "current": (_integer(-1, 2**31), True),
                "bias": (_number(0.0, 1e6), True), "tag_filter": (_optional(_text(200)), False),
                "k": (_integer(1, 32), False)},
    "play_clip": {"clip": (_optional(_integer(0, 2**31)), True), "offset": (_integer(0, 2**31), False)},
    "terrain": {"kind": (_choice(TERRAIN_KINDS), True)},
    # A request with an event constraint (docs/ACTIONS.md): the action's event `event_in` s from now.
    "action": {"event": (_text(64), True), "event_in": (_number(0.05, 10.0), True)},
}


def _reject_constant(name):
    raise MessageError(f"{name} is not valid JSON")


def parse_message(data: str | bytes, extra: dict | None = None) -> tuple[str, dict]:
    """Validate one client text message; return (type, fields) or raise MessageError. extra: more
    message types {type: (schema, handler)} (Backend.messages), schemas as in _SCHEMAS."""
    if not isinstance(data, str):
        raise MessageError("binary frames are not accepted; send JSON text")
    if len(data.encode("utf-8", "replace")) > MAX_TEXT_BYTES:
        raise MessageError(f"message larger than {MAX_TEXT_BYTES} bytes")
    try:
        obj = json.loads(data, parse_constant=_reject_constant)
    except MessageError:
        raise
    except (ValueError, RecursionError) as exc:
        raise MessageError(f"malformed JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise MessageError("a message must be a JSON object with a 'type'")
    kind = obj.get("type")
    schemas = {**_SCHEMAS, **{k: schema for k, (schema, _) in (extra or {}).items()}}
    if not isinstance(kind, str) or kind not in schemas:
        raise MessageError(f"unknown message type {kind!r}; expected one of {', '.join(schemas)}")
    schema = schemas[kind]
    unknown = sorted(set(obj) - set(schema) - {"type"})
    if unknown:
        raise MessageError(f"unknown field(s) for {kind!r}: {', '.join(map(str, unknown))}")
    fields = {}
    for name, (check, required) in schema.items():
        if name in obj:
            try:
                fields[name] = check(obj[name], name)
            except (TypeError, ValueError, OverflowError) as exc:  # MessageError is a ValueError
                raise MessageError(str(exc) if isinstance(exc, MessageError) else f"{name}: bad value") from None
        elif required:
            raise MessageError(f"{kind!r} needs field {name!r}")
    return kind, fields


# ---------------------------------------------------------------------------------------------------
# Backend: what the server simulates


@dataclass
class Backend:
    """How sessions get their character, inputs and scenarios (the real runtime by default)."""

    new_character: Callable[[], Any]
    make_input: Callable[..., Any]
    load_scenario: Callable[[Any], Any] | None = None
    description: str = ""
    character: dict | None = None   # {"glb": bytes, "name": str, "retarget": rigged_model table} or None
    # More client message types: {type: (schema as in _SCHEMAS, handler(session, fields) -> reply or None)}
    messages: dict = field(default_factory=dict)


BACKEND = web.AppKey("backend", Backend)
SESSIONS = web.AppKey("sessions", dict)
THREE_DIR = web.AppKey("three_dir", object)   # Path of node_modules/three, or None


def runtime_backend(db, character: dict | None = None, settings=None) -> Backend:
    """The library's runtime character over a loaded database (its kernels compiled up front, so the
    first client's stream does not stall on JIT compilation); `character` is the body the page draws
    (see character_for); settings: a settings_file.RuntimeSettings every new character starts from
    (None: the defaults)."""
    import copy
    from ..runtime.character import Character, CharacterSettings, warm_up
    from ..runtime.controller import GamepadInput

    def new_character():
        if settings is None:
            return Character(db, CharacterSettings())
        rs = copy.deepcopy(settings)
        return Character(db, rs.character, rs.controller)

    warm_up(db)
    return Backend(new_character=new_character, make_input=GamepadInput,
                   load_scenario=parse_scenario, description=str(getattr(db, "meta", {}).get("source", "database")),
                   character=character)


def character_for(db, db_path, model_path=None, role_map=None) -> dict:
    """The body the page draws: the user's rigged humanoid `model_path` (.glb) retargeted live, else the
    default body generated for the database skeleton (cached beside the database file). Raises GLTFError /
    SkeletonError for a model that is not a readable humanoid rig."""
    from .. import rigged_model
    if model_path is not None:
        model = rigged_model.load_rigged_model(model_path, role_map)
        bind = rigged_model.source_bind_pose(db.skeleton, db.roles, db.positions, db.rotations)
        return {"glb": model.glb, "name": model.name,
                "retarget": rigged_model.live_retarget(db.skeleton, db.roles, bind, model)}
    from ..mesh import ensure_body_glb
    glb = ensure_body_glb(db_path, db.skeleton, db.roles)
    return {"glb": glb.read_bytes(), "name": "default body",
            "retarget": rigged_model.identity_retarget(db.skeleton, db.roles)}


def parse_scenario(obj: dict):
    """A scenario from its JSON object (motionmatch.scenario format)."""
    from .. import scenario
    return scenario.parse_scenario(obj)


def _round(obj, digits=3):
    """JSON-ready copy with floats rounded (numpy scalars and arrays included)."""
    if isinstance(obj, float):
        return round(obj, digits) if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _round(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_round(v, digits) for v in obj]
    if isinstance(obj, np.ndarray):
        return _round(obj.tolist(), digits)
    if isinstance(obj, np.generic):
        return _round(obj.item(), digits)
    return obj


# ---------------------------------------------------------------------------------------------------
# Sessions


_TRANSPOSED: dict = {}


def _transposed(features: np.ndarray) -> np.ndarray:
    """The (F, N) contiguous transpose of a normalized feature matrix, kept for the few matrices in use
    (characters with the same weights share one): the inspector reads columns."""
    hit = _TRANSPOSED.get(id(features))
    if hit is None or hit[0] is not features:
        if len(_TRANSPOSED) >= 4:
            _TRANSPOSED.pop(next(iter(_TRANSPOSED)))
        hit = _TRANSPOSED[id(features)] = (features, np.ascontiguousarray(features.T))
    return hit[1]


class Session:
    """One connected page: its character, input state, recording and scenario."""

    def __init__(self, sid: str, ws: web.WebSocketResponse, character, backend: Backend):
        self.id, self.ws, self.ch, self.backend = sid, ws, character, backend
        self.move, self.look, self.run, self.strafe = (0.0, 0.0), None, False, False
        self.paused = False
        self.sim_time = 0.0
        self.seq = 0
        self.tokens, self.token_time, self.last_rate_warning = RATE_PER_S, time.monotonic(), 0.0
        self.dropped = 0
        self.recording = False
        self.rec_pos: list[np.ndarray] = []
        self.rec_rot: list[np.ndarray] = []
        self.scenario = None
        self.scenario_name = ""
        self.scenario_time = 0.0
        self.saved_tag_filter = None
        self.step_us = 0.0          # smoothed simulation step time
        self.bytes_sent = 0
        self.frames_sent = 0
        self.started = time.monotonic()
        self.pending: list[dict] = []   # text messages the simulation loop sends before the next frame
        self.ghosts = False             # send the poses before inertialization / touch-ups each frame
        self.terrain = None             # Heightfield the character walks on (None: flat)
        self.terrain_name = "flat"
        self._masks: dict = {}          # tag filter -> frame mask, for inspecting past searches
        self.busy = False               # settings are being applied off the event loop: do not step
        self.weights_pending: dict = {}
        self.weights_task: asyncio.Task | None = None
        self.resets = 0                 # characters reset after an exception or a non-finite state
        self.fatal = False              # a reset failed too: the session ends with a message
        self.reset_times: list[float] = []

    # -- messages --------------------------------------------------------------------------------

    def allow_message(self) -> bool:
        now = time.monotonic()
        self.tokens = min(RATE_PER_S, self.tokens + (now - self.token_time) * RATE_PER_S)
        self.token_time = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        self.dropped += 1
        return False

    def hello(self) -> dict:
        sk = self.ch.skeleton
        return {"type": "hello", "session": self.id, "fps": round(1.0 / DT), "names": list(sk.names),
                "parents": [int(p) for p in sk.parents], "channels": list(getattr(self.ch, "channel_names", [])),
                "tags": list(getattr(self.ch, "known_tags", [])), "settings": self.settings_dict(),
                "limits": {"max_message_bytes": MAX_TEXT_BYTES, "rate_per_s": RATE_PER_S,
                           "record_frames": MAX_RECORD_FRAMES},
                "backend": self.backend.description, "character": self.character_info(),
                "lmm": bool(getattr(self.ch.settings, "model", None))}

    def character_info(self) -> dict | None:
        c = self.backend.character
        return None if c is None else {"url": "/api/character.glb", "name": c["name"], **c["retarget"]}

    def settings_dict(self) -> dict:
        s = self.ch.settings
        out = {k: getattr(s, k) for k in _SETTINGS_FIELDS if hasattr(s, k)}
        out["weights"] = self.effective_weights()
        return _round(out, 4)

    def effective_weights(self) -> dict:
        """Every channel's weight: the setting where given, else the feature schema's default."""
        schema = getattr(getattr(getattr(self.ch, "db", None), "features", None), "schema", None)
        defaults = {c.name: float(c.weight) for c in getattr(schema, "channels", [])}
        given = getattr(self.ch.settings, "weights", {}) or {}
        return {c: float(given.get(c, defaults.get(c, 1.0))) for c in getattr(self.ch, "channel_names", [])}

    def check_weights(self, weights: dict) -> None:
        names = set(getattr(self.ch, "channel_names", []))
        unknown = sorted(set(weights) - names)
        if unknown:
            raise MessageError(f"unknown feature channel(s): {', '.join(unknown)}"[:300])

    def apply_settings(self, fields: dict) -> None:
        s = self.ch.settings
        if "weights" in fields:
            self.check_weights(fields["weights"])
        old = {k: getattr(s, k) for k in fields if hasattr(s, k)}
        missing = sorted(set(fields) - set(old))
        if missing:
            raise MessageError(f"this character has no setting(s): {', '.join(missing)}")
        for k, v in fields.items():
            if k == "weights":
                v = {**s.weights, **v}
            elif k == "tag_filter":
                v = v.strip() or None if v is not None else None
            setattr(s, k, v)
        try:
            self.ch.apply_settings()
        except ValueError as exc:
            for k, v in old.items():
                setattr(s, k, v)
            self.ch.apply_settings()
            raise MessageError(str(exc)) from None

    def handle(self, kind: str, f: dict) -> dict | None:
        """Apply one validated message; return a reply or None."""
        if kind in self.backend.messages:     # the mode's own messages (Backend.messages)
            return self.backend.messages[kind][1](self, f)
        if kind == "input":
            self.move, self.look = f["move"], f.get("look")
            self.run, self.strafe = f.get("run", False), f.get("strafe", False)
            return None
        if kind == "settings":
            self.apply_settings(f)
            return {"type": "settings", "settings": self.settings_dict()}
        if kind == "reset":
            self.stop_scenario()
            self.ch.reset()
            self.sim_time = 0.0
            return {"type": "reset"}
        if kind == "pause":
            self.paused = f["paused"]
            return {"type": "pause", "paused": self.paused}
        if kind == "record":
            if f["action"] == "start":
                self.recording = True
            elif f["action"] == "stop":
                self.recording = False
            else:
                self.rec_pos.clear()
                self.rec_rot.clear()
            return self.record_status()
        if kind == "scenario_stop":
            self.stop_scenario()
            return {"type": "scenario", "state": "stopped", "name": self.scenario_name}
        if kind == "ping":
            return {"type": "pong", "t": f["t"]}
        if kind == "debug":
            self.ghosts = f.get("ghosts", self.ghosts)
            return {"type": "debug", "ghosts": self.ghosts}
        if kind == "inspect":
            return self.inspect(f)
        if kind == "play_clip":
            try:
                self.ch.play_clip(f["clip"], f.get("offset", 0))
            except ValueError as exc:
                raise MessageError(str(exc)) from None
            return {"type": "play_clip", "clip": f["clip"], "offset": f.get("offset", 0)}
        if kind == "action":
            ask = getattr(self.ch, "request_action", None)
            if ask is None:
                raise MessageError("this character takes no action requests")
            try:
                ask(f["event"], f["event_in"])
            except ValueError as exc:
                raise MessageError(str(exc)) from None
            return {"type": "action", "event": f["event"], "event_in": f["event_in"]}
        if kind == "terrain":
            from ..runtime.terrain import Heightfield
            self.set_terrain(None if f["kind"] == "flat" else Heightfield.procedural(f["kind"]), f["kind"])
            return self.terrain_status()
        raise MessageError(f"unhandled message type {kind!r}")

    def inspect(self, f: dict) -> dict:
        """The candidates of one search (a record from debug()["search"]): top k with per-channel
        costs and the continuing frame's cost, each with its clip and frame within the clip."""
        from ..search import TagExpressionError, frame_mask
        from ..search.inspect import inspect_search
        ch = self.ch
        db = ch.db
        feats = ch.searcher.features
        if len(f["query"]) != feats.shape[1]:
            raise MessageError(f"query must hold {feats.shape[1]} numbers, got {len(f['query'])}")
        if f["current"] >= db.num_frames:
            raise MessageError(f"current must be < {db.num_frames}")
        tags = f.get("tag_filter") or None
        if tags not in self._masks:
            try:
                self._masks[tags] = None if tags is None else frame_mask(
                    tags, db.range_tags, db.range_starts, db.range_stops, db.num_frames)
            except (TagExpressionError, ValueError) as exc:
                raise MessageError(f"tag_filter: {exc}") from None
        out = inspect_search(feats, np.asarray(f["query"], np.float32), ch.slices, db.range_starts,
                             db.range_stops, k=f.get("k", 8), current=f["current"], bias=f["bias"],
                             mask=self._masks[tags], end_exclude=ch.settings.end_exclude,
                             features_t=_transposed(feats))
        # Raw (un-normalized) features for drawing query vs match in the character's frame.
        fs = db.features
        weights = self.effective_weights()
        scale = np.empty(feats.shape[1])
        for name, sl in ch.slices.items():
            scale[sl] = fs.std[sl] / max(weights.get(name, 1.0), 1e-9)
        out["query_raw"] = np.asarray(f["query"]) * scale + fs.offset
        rows = out["candidates"] + ([out["continue"]] if out["continue"] else [])
        ranges = np.searchsorted(db.range_starts, [c["frame"] for c in rows], side="right") - 1
        for c, r in zip(rows, ranges.tolist()):
            c["clip"], c["clip_frame"] = r, c["frame"] - int(db.range_starts[r])
            c["raw"] = fs.raw[c["frame"]]
        out["schema"] = fs.schema.to_dict()["channel"]
        return {"type": "inspect", **_round(out, 4)}

    def set_terrain(self, terrain, name: str) -> None:
        self.terrain, self.terrain_name = terrain, name
        self.ch.set_terrain(terrain)

    def terrain_status(self) -> dict:
        return {"type": "terrain", "name": self.terrain_name}

    def terrain_heights(self) -> dict:
        """The terrain as a grid the page can draw: heights (rows along +z, columns along +x, m), the
        world (x, z) of the first sample and the spacing (m); subsampled to at most TERRAIN_SAMPLES a side."""
        t = self.terrain
        if t is None:
            return {"name": "flat", "heights": None}
        h = np.asarray(t.heights)
        step = max(1, math.ceil(max(h.shape) / TERRAIN_SAMPLES))
        sub = h[::step, ::step]
        return {"name": self.terrain_name, "origin": [float(t.origin[0]), float(t.origin[1])],
                "cell": float(t.cell) * step, "shape": list(sub.shape),
                "heights": np.round(sub, 3).ravel().tolist()}

    def clips(self) -> dict:
        """The database's clips: name, tags, first frame and length in frames."""
        db = self.ch.db
        return {"fps": float(db.fps), "frames": int(db.num_frames), "clips": [
            {"name": n, "tags": list(t), "start": int(a), "frames": int(b - a)}
            for n, t, a, b in zip(db.range_names, db.range_tags, db.range_starts.tolist(), db.range_stops.tolist())]}

    def record_status(self) -> dict:
        return {"type": "record", "recording": self.recording, "frames": len(self.rec_pos)}

    # -- simulation ------------------------------------------------------------------------------

    def start_scenario(self, scenario, name: str) -> None:
        """Play a scenario from the character's current state. Characters with set_driver get the
        scenario's driver (paths work too), others its inputs; a scenario style sets the tag filter."""
        self.stop_scenario()
        self.scenario, self.scenario_name, self.scenario_time = scenario, name, 0.0
        self.saved_tag_filter = getattr(self.ch.settings, "tag_filter", None)
        style = getattr(scenario, "style", None)
        if style and hasattr(self.ch.settings, "tag_filter"):
            self.apply_settings({"tag_filter": style})   # raises MessageError on a style unknown here
            self.pending.append({"type": "settings", "settings": self.settings_dict()})
        if hasattr(self.ch, "set_driver") and hasattr(scenario, "make_driver"):
            self.ch.set_driver(_TimeShift(scenario.make_driver(), getattr(self.ch, "time", 0.0)))
        self.paused = False

    def stop_scenario(self) -> None:
        if self.scenario is None:
            return
        self.scenario = None
        if hasattr(self.ch, "set_driver"):
            self.ch.set_driver(None)
        if getattr(self.ch.settings, "tag_filter", None) != self.saved_tag_filter:
            self.apply_settings({"tag_filter": self.saved_tag_filter})
            self.pending.append({"type": "settings", "settings": self.settings_dict()})

    def current_input(self):
        if self.scenario is not None:
            inp = self.scenario.input_at(self.scenario_time)
            self.scenario_time += DT
            if self.scenario_time >= self.scenario.duration:
                self.stop_scenario()
                self.pending.append({"type": "scenario", "state": "finished", "name": self.scenario_name})
            return inp
        return self.backend.make_input(move=self.move, look=self.look, run=self.run, strafe=self.strafe)

    def recover(self, why: str) -> None:
        """Reset the character after an exception or a non-finite state, and tell the client: a
        session never stops silently."""
        self.resets += 1
        log.warning("session %s: %s; character reset (%d so far)", self.id, why, self.resets)
        now = time.monotonic()
        self.reset_times = [t for t in self.reset_times if now - t < RESET_WINDOW_S] + [now]
        if len(self.reset_times) > MAX_RESETS_PER_WINDOW:   # failing again at once: resetting is no cure
            self.fatal = True
            self.pending.append({"type": "error", "fatal": True, "message":
                                 f"the character keeps failing ({why}); reload the page"[:300]})
            return
        try:
            self.stop_scenario()
        except Exception:  # a scenario's tag filter that no longer applies must not block the reset
            self.scenario = None
        try:
            self.ch.reset()
        except Exception as exc:  # beyond repair: end the session, saying why
            self.fatal = True
            self.pending.append({"type": "error", "fatal": True,
                                 "message": f"the character failed ({why}) and could not be reset "
                                            f"({type(exc).__name__}); reload the page"[:300]})
            return
        self.sim_time = 0.0
        self.pending.append({"type": "error", "reset": True,
                             "message": f"the character was reset: {why}"[:300]})

    def safe_step(self) -> None:
        """step(), recovering from an exception or a non-finite pose."""
        try:
            self.step()
            finite = bool(np.isfinite(self.ch.global_positions).all())
        except Exception as exc:
            self.recover(f"simulation error ({type(exc).__name__}: {exc})")
            return
        if not finite:
            self.recover("non-finite pose")

    def step(self) -> None:
        inp = self.current_input()
        t0 = time.perf_counter()
        self.ch.step(inp, DT)
        us = (time.perf_counter() - t0) * 1e6
        self.step_us = us if self.seq == 0 else 0.95 * self.step_us + 0.05 * us
        self.sim_time += DT
        if self.recording:
            if len(self.rec_pos) < MAX_RECORD_FRAMES:
                p, r = self.ch.local_pose()
                self.rec_pos.append(np.asarray(p, dtype=np.float32).copy())
                self.rec_rot.append(np.asarray(r, dtype=np.float32).copy())
            else:
                self.recording = False
                self.pending.append({**self.record_status(), "warning": "recording limit reached"})

    def frame_bytes(self) -> bytes:
        dbg = dict(self.ch.debug())
        dbg["server_step_us"] = self.step_us
        dbg["scenario"] = ({"name": self.scenario_name, "time": self.scenario_time,
                            "duration": float(self.scenario.duration)} if self.scenario is not None else None)
        dbg["recording"] = len(self.rec_pos) if (self.recording or self.rec_pos) else 0
        ctrl = getattr(self.ch, "controller", None)
        if ctrl is not None:
            dv, rv = ctrl.desired_velocity, self.ch.root_velocity
            dbg["speed"] = {"asked": math.hypot(dv[0], dv[2]), "delivered": math.hypot(rv[0], rv[2])}
        if self.ghosts:
            dbg["ghosts"] = {"raw": np.ravel(self.ch.pose_before_inertialization()),
                             "before_touchups": np.ravel(self.ch.pose_before_touchups())}
        search = dbg.pop("search", None)
        dbg = _round(dbg)
        # The search record goes back to the server for inspection: its query keeps float32 precision,
        # so ranking it again gives the same answer as the search did.
        dbg["search"] = _round(search, 7)
        text = json.dumps(dbg, separators=(",", ":")).encode()
        pos = np.ascontiguousarray(self.ch.global_positions, dtype="<f4")
        rot = np.ascontiguousarray(self.ch.local_pose()[1], dtype="<f4")
        self.seq += 1
        return FRAME_HEADER.pack(self.seq, self.sim_time, len(text)) + pos.tobytes() + text + rot.tobytes()


class _TimeShift:
    """A scenario driver started at character time t0 (drivers read time from the scenario start)."""

    def __init__(self, driver, t0: float):
        self.driver, self.t0 = driver, t0

    def step(self, controller, t, dt):
        self.driver.step(controller, t - self.t0, dt)

    def predict(self, *args, **kwargs):
        return self.driver.predict(*args, **kwargs)


async def _send_json(ws: web.WebSocketResponse, obj: dict) -> None:
    if not ws.closed:
        try:
            await ws.send_str(json.dumps(obj, separators=(",", ":")))
        except (ConnectionError, RuntimeError):
            pass


async def _simulate(session: Session) -> None:
    """Fixed-step 60 Hz loop for one session; sends one frame per wake-up that stepped."""
    loop = asyncio.get_running_loop()
    ws = session.ws
    next_t = loop.time()
    while not ws.closed:
        now = loop.time()
        steps = 0
        while now >= next_t and steps < MAX_CATCHUP:
            if not session.paused and not session.busy:
                session.safe_step()
            next_t += DT
            steps += 1
        if now >= next_t:           # too far behind: drop the backlog rather than fast-forward
            next_t = now + DT
        while session.pending:
            await _send_json(ws, session.pending.pop(0))
        if session.fatal:
            await ws.close()
            return
        if steps and not session.paused and not session.busy and not ws.closed:
            try:
                data = session.frame_bytes()
            except Exception as exc:  # e.g. a debug value that cannot be encoded
                session.recover(f"frame encoding error ({type(exc).__name__})")
                data = None
            if data is not None:
                try:
                    await ws.send_bytes(data)
                except (ConnectionError, RuntimeError):
                    return
                session.bytes_sent += len(data)
                session.frames_sent += 1
        await asyncio.sleep(max(0.0, next_t - loop.time()))


LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
ALLOWED_HOSTS = web.AppKey("allowed_hosts", frozenset)


def _host_name(netloc: str) -> str:
    """'Name:port' or '[v6]:port' -> lower-case name without port or brackets."""
    netloc = netloc.strip().lower()
    if netloc.startswith("["):
        return netloc[1:].split("]", 1)[0]
    return netloc.rsplit(":", 1)[0] if netloc.count(":") == 1 else netloc


def server_host_names(bind_host: str | None) -> frozenset:
    """Names this server answers to: loopback, the bound address and, when bound to every interface,
    the machine's host names and addresses. A Host header outside them is DNS rebinding."""
    import socket
    names = set(LOOPBACK_NAMES)
    if bind_host in (None, "", "0.0.0.0", "::"):
        if bind_host is not None:
            hostname = socket.gethostname()
            names |= {hostname.lower(), socket.getfqdn().lower()}
            try:
                names |= {info[4][0].lower() for info in socket.getaddrinfo(hostname, None)}
            except OSError:
                pass
    else:
        names.add(_host_name(bind_host))
    return frozenset(names)


def _host_ok(request: web.Request) -> bool:
    return _host_name(request.host or "") in request.app[ALLOWED_HOSTS]


def origin_ok(request: web.Request) -> bool:
    """Refuse pages from other sites (cross-site WebSocket hijacking): the Origin must be this very
    server (http scheme, same host and port as the request, a name the server answers to); tools
    without Origin pass."""
    from urllib.parse import urlsplit
    origin = request.headers.get("Origin")
    if not origin:
        return True
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    return (parts.scheme == "http" and parts.netloc.lower() == (request.host or "").lower()
            and _host_name(parts.netloc) in request.app[ALLOWED_HOSTS])


async def websocket_handler(request: web.Request) -> web.StreamResponse:
    app = request.app
    if not origin_ok(request):
        return web.Response(status=403, text="cross-origin WebSocket refused\n")
    ws = web.WebSocketResponse(max_msg_size=MAX_FRAME_BYTES, heartbeat=30.0)
    await ws.prepare(request)
    backend: Backend = app[BACKEND]
    try:
        character = await asyncio.get_running_loop().run_in_executor(None, backend.new_character)
    except Exception as exc:  # a broken database must not take the server down
        log.exception("could not create a character")
        await _send_json(ws, {"type": "error", "fatal": True, "message": f"could not create a character: {exc}"})
        await ws.close()
        return ws
    sid = secrets.token_urlsafe(12)
    session = Session(sid, ws, character, backend)
    app[SESSIONS][sid] = session
    log.info("session %s opened (%d active)", sid, len(app[SESSIONS]))
    await _send_json(ws, session.hello())
    task = asyncio.create_task(_simulate(session))
    try:
        async for msg in ws:
            if msg.type == WSMsgType.ERROR:
                break
            if msg.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                continue
            if not session.allow_message():
                now = time.monotonic()
                if now - session.last_rate_warning > 1.0:
                    session.last_rate_warning = now
                    await _send_json(ws, {"type": "warning", "message":
                                          f"more than {RATE_PER_S:.0f} messages/s: dropping "
                                          f"({session.dropped} dropped so far)"})
                continue
            try:
                kind, fields = parse_message(msg.data if msg.type == WSMsgType.TEXT else bytes(msg.data),
                                             backend.messages)
                if kind == "inspect":   # ranks the whole database: off the loop that streams frames
                    reply = await asyncio.get_running_loop().run_in_executor(None, session.handle, kind, fields)
                elif kind == "settings" and "weights" in fields:
                    # The settings reply comes once the weights are applied, with every field.
                    session.check_weights(fields["weights"])
                    weights = fields.pop("weights")
                    if fields:
                        session.handle(kind, fields)
                    queue_weights(session, weights)
                    reply = None
                else:
                    reply = session.handle(kind, fields)
            except MessageError as exc:
                reply = {"type": "error", "message": str(exc)}
            except Exception as exc:  # a bug in one session's character must not stop the others
                log.warning("session %s: message failed: %s: %s", sid, type(exc).__name__, exc)
                reply = {"type": "error", "message": f"internal error: {type(exc).__name__}"}
            if reply is not None:
                await _send_json(ws, reply)
            if task.done():
                break
    finally:
        if session.weights_task is not None:
            session.weights_task.cancel()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("session %s: simulation failed", sid)
        app[SESSIONS].pop(sid, None)
        if not ws.closed:
            await ws.close()
        secs = max(1e-6, time.monotonic() - session.started)
        log.info("session %s closed after %.1f s: %d frames, %.1f kB/s, step %.0f us (%d active)", sid, secs,
                 session.frames_sent, session.bytes_sent / secs / 1e3, session.step_us, len(app[SESSIONS]))
    return ws


def queue_weights(session: Session, weights: dict) -> None:
    """Feature weights apply off the event loop (a new weight set normalizes the features and builds
    an index: milliseconds to seconds on big databases) and at most every WEIGHTS_INTERVAL_S; values
    arriving meanwhile coalesce, the latest winning. The settings reply follows the application."""
    session.check_weights(weights)
    session.weights_pending.update(weights)
    if session.weights_task is None or session.weights_task.done():
        session.weights_task = asyncio.create_task(_apply_weights(session))


async def _apply_weights(session: Session) -> None:
    loop = asyncio.get_running_loop()
    while session.weights_pending and not session.ws.closed:
        weights, session.weights_pending = session.weights_pending, {}
        started = loop.time()
        session.busy = True
        try:
            await loop.run_in_executor(None, session.apply_settings, {"weights": weights})
            reply = {"type": "settings", "settings": session.settings_dict()}
        except MessageError as exc:
            reply = {"type": "error", "message": str(exc)}
        except Exception as exc:
            log.warning("session %s: weights failed: %s: %s", session.id, type(exc).__name__, exc)
            reply = {"type": "error", "message": f"weights could not be applied ({type(exc).__name__})"}
        finally:
            session.busy = False
        await _send_json(session.ws, reply)
        await asyncio.sleep(max(0.0, WEIGHTS_INTERVAL_S - (loop.time() - started)))


def _session_or_404(request: web.Request) -> Session:
    s = request.app[SESSIONS].get(request.match_info["sid"])
    if s is None:
        raise web.HTTPNotFound(text="no such session (closed tab?)\n")
    return s


def recording_animation(session: Session):
    """The session's recorded local poses as an Animation (60 fps)."""
    from ..animation import Animation
    if not session.rec_pos:
        raise web.HTTPNotFound(text="nothing recorded: press Record first\n")
    return Animation(skeleton=session.ch.skeleton, positions=np.stack(session.rec_pos),
                     rotations=np.stack(session.rec_rot), fps=1.0 / DT, source="motionmatch serve")


async def record_handler(request: web.Request) -> web.StreamResponse:
    from ..io.bvh import write_bvh
    session = _session_or_404(request)
    anim = recording_animation(session)

    def build() -> bytes:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "recording.bvh"
            write_bvh(path, anim)
            return path.read_bytes()

    data = await asyncio.get_running_loop().run_in_executor(None, build)
    name = time.strftime("motionmatch-%Y%m%d-%H%M%S.bvh")
    return web.Response(body=data, content_type="application/octet-stream",
                        headers={"Content-Disposition": f'attachment; filename="{name}"'})


async def settings_file_handler(request: web.Request) -> web.Response:
    """The session's live settings as a settings file (TOML, see settings_file.py) to download."""
    from ..settings_file import dumps_settings
    ch = _session_or_404(request).ch
    controller = getattr(getattr(ch, "controller", None), "settings", None)
    text = dumps_settings(ch.settings, controller, comment="saved from the motionmatch app; "
                          "load with --settings FILE (synth, serve, bench quality)")
    name = time.strftime("motionmatch-settings-%Y%m%d-%H%M%S.toml")
    return web.Response(text=text, content_type="application/toml",
                        headers={"Content-Disposition": f'attachment; filename="{name}"'})


async def scenario_handler(request: web.Request) -> web.Response:
    session = _session_or_404(request)
    loader = request.app[BACKEND].load_scenario
    if loader is None:
        raise web.HTTPNotImplemented(text="scenarios are not available with this backend\n")
    if request.content_length is not None and request.content_length > MAX_SCENARIO_BYTES:
        raise web.HTTPRequestEntityTooLarge(max_size=MAX_SCENARIO_BYTES, actual_size=request.content_length)
    # A chunked upload has no length: read at most the limit and refuse what goes beyond.
    raw = bytearray()
    while len(raw) <= MAX_SCENARIO_BYTES:
        part = await request.content.read(MAX_SCENARIO_BYTES + 1 - len(raw))
        if not part:
            break
        raw += part
    raw = bytes(raw)
    if len(raw) > MAX_SCENARIO_BYTES:
        raise web.HTTPRequestEntityTooLarge(max_size=MAX_SCENARIO_BYTES, actual_size=len(raw))
    try:
        obj = json.loads(raw, parse_constant=_reject_constant)
        if not isinstance(obj, dict):
            raise ValueError("a scenario file is a JSON object")
        scenario = loader(obj)
        duration = float(scenario.duration)
        if not math.isfinite(duration) or duration <= 0:
            raise ValueError("scenario has no duration")
    except ImportError as exc:
        raise web.HTTPNotImplemented(text=f"scenario support missing: {exc}\n")
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError, MessageError) as exc:
        # ValueError covers UnicodeDecodeError and Python's limit on integer digits.
        return web.json_response({"type": "error", "message": f"bad scenario: {str(exc)[:300]}"}, status=400)
    name = request.query.get("name", "scenario")[:80]
    try:
        session.start_scenario(scenario, name)
    except MessageError as exc:
        return web.json_response({"type": "error", "message": f"bad scenario: {exc}"}, status=400)
    return web.json_response({"type": "scenario", "state": "playing", "name": name, "duration": duration})


async def clips_handler(request: web.Request) -> web.Response:
    return web.json_response(_session_or_404(request).clips())


async def terrain_get_handler(request: web.Request) -> web.Response:
    return web.json_response(_session_or_404(request).terrain_heights())


async def terrain_png_handler(request: web.Request) -> web.Response:
    """A grey-scale PNG heightmap for this session's character: ?scale= metres for white (default 1),
    ?cell= metres per pixel (default 0.1), centred on the world origin."""
    from ..runtime.terrain import Heightfield, TerrainError
    session = _session_or_404(request)
    if request.content_length is None or request.content_length > MAX_TERRAIN_BYTES:
        raise web.HTTPRequestEntityTooLarge(max_size=MAX_TERRAIN_BYTES, actual_size=request.content_length or 0)
    raw = await request.read()
    name = request.query.get("name", "heightmap.png")[:80]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "heightmap.png"
        try:
            scale = _number(-20.0, 20.0)(float(request.query.get("scale", 1.0)), "scale")
            cell = _number(0.01, 10.0)(float(request.query.get("cell", 0.1)), "cell")
            path.write_bytes(raw)
            terrain = Heightfield.from_png(path, scale=scale, cell=cell)
        except (ValueError, MessageError, TerrainError) as exc:
            msg = str(exc).replace(str(path), name)
            return web.json_response({"type": "error", "message": f"bad heightmap: {msg}"}, status=400)
    session.set_terrain(terrain, name)
    return web.json_response(session.terrain_status())


async def character_handler(request: web.Request) -> web.Response:
    c = request.app[BACKEND].character
    if c is None:
        raise web.HTTPNotFound(text="no character body: the app draws capsules\n")
    return web.Response(body=c["glb"], content_type="model/gltf-binary", headers={"Cache-Control": "no-cache"})


async def index_handler(request: web.Request) -> web.StreamResponse:
    return web.FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})


async def status_handler(request: web.Request) -> web.Response:
    sessions = request.app[SESSIONS].values()
    return web.json_response({"sessions": len(request.app[SESSIONS]),
                              "step_us": [round(s.step_us, 1) for s in sessions],
                              "three": request.app[THREE_DIR] is not None})


def find_three(node_modules: str | os.PathLike | None = None) -> Path | None:
    """node_modules/three from the argument, $MOTIONMATCH_NODE_MODULES, the project root or the cwd, else
    the copy an installed wheel carries (motionmatch/app/vendor/three, made by the build hook in setup.py)."""
    candidates = [node_modules, os.environ.get("MOTIONMATCH_NODE_MODULES"), PROJECT_ROOT / "node_modules",
                  Path.cwd() / "node_modules", VENDOR_DIR]
    for c in candidates:
        if c and (Path(c) / "three" / "build" / "three.module.js").is_file():
            return (Path(c) / "three").resolve()
    return None


async def _three_missing(request: web.Request) -> web.Response:
    return web.Response(status=503, text="three.js is not installed: run `make node_modules` (npm ci) in the "
                                         "project root or set MOTIONMATCH_NODE_MODULES\n")


@web.middleware
async def _headers(request: web.Request, handler):
    if not _host_ok(request):
        # DNS rebinding: a page of another site reaching this server under its own name.
        return web.Response(status=403, text="unknown Host: this server answers only to its own names\n")
    if len(request.path) > MAX_PATH_CHARS:
        raise web.HTTPNotFound()
    try:
        resp = await handler(request)
    except OSError:  # a static path the file system refuses (name too long, ...): no such file
        raise web.HTTPNotFound() from None
    resp.headers.setdefault("X-Content-Type-Options", "nosniff")
    return resp


def make_app(backend: Backend, node_modules=None, host: str | None = None) -> web.Application:
    """The aiohttp application: page, static files, /vendor/three, WebSocket and session API.
    host: the address bound (None: loopback only), which fixes the Host names accepted."""
    app = web.Application(middlewares=[_headers], client_max_size=max(MAX_SCENARIO_BYTES, MAX_TERRAIN_BYTES) + 1024)
    app[BACKEND] = backend
    app[ALLOWED_HOSTS] = server_host_names(host)
    app[SESSIONS] = {}
    three = find_three(node_modules)
    app[THREE_DIR] = three
    app.router.add_get("/", index_handler)
    app.router.add_get("/ws", websocket_handler)
    app.router.add_get("/api/status", status_handler)
    app.router.add_get("/api/character.glb", character_handler)
    app.router.add_get("/api/session/{sid}/record.bvh", record_handler)
    app.router.add_get("/api/session/{sid}/settings.toml", settings_file_handler)
    app.router.add_post("/api/session/{sid}/scenario", scenario_handler)
    app.router.add_get("/api/session/{sid}/clips", clips_handler)
    app.router.add_get("/api/session/{sid}/terrain", terrain_get_handler)
    app.router.add_post("/api/session/{sid}/terrain", terrain_png_handler)
    from .crowd import add_crowd_routes
    add_crowd_routes(app)
    from .vr import add_vr_routes
    add_vr_routes(app)
    # Static routes refuse paths that resolve outside their folder (aiohttp normalizes and checks).
    app.router.add_static("/static/", STATIC_DIR, follow_symlinks=False)
    if three is not None:
        app.router.add_static("/vendor/three/build/", three / "build", follow_symlinks=False)
        app.router.add_static("/vendor/three/examples/jsm/", three / "examples" / "jsm", follow_symlinks=False)
    else:
        log.warning("three.js not found: run `npm ci` (make node_modules) or set MOTIONMATCH_NODE_MODULES")
        app.router.add_get("/vendor/three/{tail:.*}", _three_missing)

    async def close_sessions(app):
        for s in list(app[SESSIONS].values()):
            await s.ws.close(code=1001, message=b"server shutdown")
    app.on_shutdown.append(close_sessions)
    return app


# ---------------------------------------------------------------------------------------------------
# CLI


def add_serve_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", help="database file (default: build or reuse the cached default database)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000,
                        help=f"TCP port (default 8000; if busy, the next {PORT_TRIES - 1} are tried; 0 picks a free one)")
    parser.add_argument("--jlpm22-only", action="store_true",
                        help="without --db: the jlpm22-only default database instead of the mixed default")
    parser.add_argument("--node-modules", default=None,
                        help="folder holding three/ (default: $MOTIONMATCH_NODE_MODULES or ./node_modules)")
    parser.add_argument("--crowd", type=int, default=0, metavar="N",
                        help="crowd mode: N agents roam around your character (see app/crowd.py)")
    parser.add_argument("--character", default=None, metavar="MODEL.glb",
                        help="a rigged humanoid glTF to drive (default: a body generated for the database skeleton)")
    parser.add_argument("--character-map", default=None, metavar="ROLES.toml",
                        help="[roles] table (role = \"joint name\") for a model whose joint names are not recognised")
    parser.add_argument("--settings", default=None, help="settings file (TOML) every character starts from")
    parser.add_argument("--lmm", default=None, metavar="MODEL.npz",
                        help="learned motion matching: characters take their poses from this model (docs/LMM.md)")
    parser.add_argument("--vr-model", default=None, metavar="VR.npz",
                        help="VR replay mode: a tracker stream drives the character (docs/VR.md)")
    parser.add_argument("--trackers", default=None, metavar="FILE",
                        help="with --vr-model: the tracker file (JSON, CSV or BVH) replayed first "
                             "(default: the first held-out clip)")
    from ..commands import add_crouch_args
    add_crouch_args(parser)


def run_serve(args) -> int:
    """`motionmatch serve`: load (or build) the database, serve the page, print the URL."""
    from .. import database
    from ..commands import database_path
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    if find_three(args.node_modules) is None:
        print("motionmatch: three.js not found: run `make node_modules` (npm ci) in the project root, "
              "or pass --node-modules", file=sys.stderr)
        return 1
    if args.character and not Path(args.character).is_file():
        raise FileNotFoundError(f"{args.character}: no such model file")
    for flag in ("trackers", "crouch_tags"):
        if getattr(args, flag, None) and not getattr(args, "vr_model", None):
            raise ValueError(f"--{flag.replace('_', '-')} needs --vr-model VR.npz (the app's VR mode, docs/VR.md)")
    path = database_path(args.db, mixed=not args.jlpm22_only)
    db = database.load_database(path)
    settings = None
    if getattr(args, "settings", None):
        from ..settings_file import load_settings
        settings = load_settings(args.settings, db.features.schema.names)
    if getattr(args, "lmm", None):
        from ..runtime.learned import learned_model
        from ..settings_file import settings_from_dict
        learned_model(db, args.lmm)           # a model that does not fit fails here, before serving
        settings = settings or settings_from_dict({})
        settings.character.mode, settings.character.model = "lmm", args.lmm
    try:
        character = character_for(db, path, args.character, args.character_map)
    except ImportError as exc:   # the body needs scikit-image and pygltflib; the capsules do not
        log.warning("no character body (%s): drawing capsules", exc)
        character = None
    app = make_app(runtime_backend(db, character, settings), node_modules=args.node_modules, host=args.host)
    if getattr(args, "vr_model", None):
        from ..commands import crouch_settings
        from ..vr.driver import VRDriverSettings
        from .vr import setup_vr
        setup_vr(app, db, args.vr_model, args.trackers, VRDriverSettings(height_databases=crouch_settings(args)))
    if args.crowd:
        from .crowd import setup_crowd
        setup_crowd(app, db, args.crowd)
    return _run(app, args.host, args.port)


def reachable_addresses(host: str) -> list[str]:
    """Addresses a browser can use for a server bound to `host` (a wildcard lists this machine's own)."""
    if host not in ("0.0.0.0", "", "::"):
        return [host]
    found = []
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            found.append(info[4][0])
    except OSError:
        pass
    try:
        # The address of the default route's interface (connecting a UDP socket sends nothing).
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))
            found.append(s.getsockname()[0])
    except OSError:
        pass
    out = ["127.0.0.1"]
    for a in found:
        if a not in out and not a.startswith("127."):
            out.append(a)
    return out


def announcement(host: str, port: int) -> tuple[list[str], str | None]:
    """What serve prints once listening: one URL per address a browser can use, and a warning when the
    app is reachable from other machines."""
    lines = [f"motionmatch: serving on http://{a}:{port}/  (Ctrl+C to stop)" for a in reachable_addresses(host)]
    local = host.startswith("127.") or host in ("localhost", "::1")
    warning = None if local else (
        f"motionmatch: warning: listening on {host or 'all interfaces'}: anyone who can reach this machine "
        f"can open the app (no authentication); use --host 127.0.0.1 to keep it local")
    return lines, warning


def _run(app: web.Application, host: str, port: int) -> int:
    async def main():
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        tries = 1 if port == 0 else PORT_TRIES
        for k in range(tries):
            site = web.TCPSite(runner, host, port + k if port else 0)
            try:
                await site.start()
                break
            except OSError as exc:
                if exc.errno not in (errno.EADDRINUSE, errno.EACCES) or k == tries - 1:
                    await runner.cleanup()
                    last = f"-{port + k}" if k else ""
                    raise SystemExit(f"motionmatch: cannot serve on {host}:{port}{last}: {exc.strerror}; "
                                     f"pick a free port with --port N (or PORT=N make demo)") from None
                print(f"motionmatch: port {port + k} is busy ({exc.strerror}); trying {port + k + 1}",
                      file=sys.stderr, flush=True)
        lines, warning = announcement(host, site._server.sockets[0].getsockname()[1])
        print("\n".join(lines), flush=True)
        if warning:
            print(warning, file=sys.stderr, flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


def _main(argv=None) -> int:
    """`python -m motionmatch.app.server`: the same as `motionmatch serve`."""
    parser = argparse.ArgumentParser(prog="python -m motionmatch.app.server")
    add_serve_args(parser)
    return run_serve(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(_main())
