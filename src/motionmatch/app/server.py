"""The browser app's server: aiohttp, one simulated character per WebSocket connection.

Each connection gets its own `Character`, stepped at a fixed 60 Hz by an asyncio task (at most
`MAX_CATCHUP` steps per wake-up; a longer stall drops time instead of fast-forwarding). After each tick
the server sends one binary frame:

    uint32 sequence | float32 simulation time (s) | uint32 L | float32 positions[J*3] | L bytes JSON debug

positions are world joint positions in metres (Y up), J from the `hello` message. Text messages in both
directions are JSON objects with a `type`; every client message is validated (see `_SCHEMAS`) and a bad
one gets an `error` reply and is dropped. Rewind is kept by the page (it stores the last 10 s of frames);
BVH recording and scenario playback run here, reached through `/api/session/<id>/...`.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import secrets
import struct
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
from aiohttp import WSMsgType, web

log = logging.getLogger("motionmatch.app")

STATIC_DIR = Path(__file__).resolve().parent / "static"
PROJECT_ROOT = Path(__file__).resolve().parents[3]
DT = 1.0 / 60.0
MAX_CATCHUP = 4                 # fixed steps per wake-up before dropping time
MAX_TEXT_BYTES = 4096           # larger client messages get an error reply and are dropped
MAX_FRAME_BYTES = 64 * 1024     # beyond this aiohttp closes the connection (code 1009)
RATE_PER_S = 120.0              # client messages per second (token bucket, burst of the same size)
MAX_RECORD_FRAMES = 60 * 60 * 10  # 10 minutes of recorded poses
MAX_SCENARIO_BYTES = 1 << 20
INERTIALIZATION = ("spring", "quintic", "off")
FRAME_HEADER = struct.Struct("<IfI")


# ---------------------------------------------------------------------------------------------------
# Message validation


class MessageError(ValueError):
    """A client message that is malformed or out of range; the text goes back to the client."""


def _number(lo: float, hi: float) -> Callable[[Any, str], float]:
    def check(v, name):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
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
    if not isinstance(v, list) or len(v) != 2:
        raise MessageError(f"{name} must be a list [x, z]")
    unit = _number(-1.0, 1.0)
    return unit(v[0], f"{name}[0]"), unit(v[1], f"{name}[1]")


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
    "tag_filter": _optional(_text(200)),
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
}


def _reject_constant(name):
    raise MessageError(f"{name} is not valid JSON")


def parse_message(data: str | bytes) -> tuple[str, dict]:
    """Validate one client text message; return (type, fields) or raise MessageError."""
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
    if not isinstance(kind, str) or kind not in _SCHEMAS:
        raise MessageError(f"unknown message type {kind!r}; expected one of {', '.join(_SCHEMAS)}")
    schema = _SCHEMAS[kind]
    unknown = sorted(set(obj) - set(schema) - {"type"})
    if unknown:
        raise MessageError(f"unknown field(s) for {kind!r}: {', '.join(map(str, unknown))}")
    fields = {}
    for name, (check, required) in schema.items():
        if name in obj:
            fields[name] = check(obj[name], name)
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


BACKEND = web.AppKey("backend", Backend)
SESSIONS = web.AppKey("sessions", dict)
THREE_DIR = web.AppKey("three_dir", object)   # Path of node_modules/three, or None


def runtime_backend(db, settings=None) -> Backend:
    """The library's runtime character over a loaded database (its kernels compiled up front, so the
    first client's stream does not stall on JIT compilation). settings: a settings_file.RuntimeSettings
    every new character starts from (None: the defaults)."""
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
                   load_scenario=parse_scenario, description=str(getattr(db, "meta", {}).get("source", "database")))


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
                "backend": self.backend.description}

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

    def apply_settings(self, fields: dict) -> None:
        s = self.ch.settings
        if "weights" in fields:
            names = set(getattr(self.ch, "channel_names", []))
            unknown = sorted(set(fields["weights"]) - names)
            if unknown:
                raise MessageError(f"unknown feature channel(s): {', '.join(unknown)}")
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
        raise MessageError(f"unhandled message type {kind!r}")

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
        text = json.dumps(_round(dbg), separators=(",", ":")).encode()
        pos = np.ascontiguousarray(self.ch.global_positions, dtype="<f4")
        self.seq += 1
        return FRAME_HEADER.pack(self.seq, self.sim_time, len(text)) + pos.tobytes() + text


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
            if not session.paused:
                session.step()
            next_t += DT
            steps += 1
        if now >= next_t:           # too far behind: drop the backlog rather than fast-forward
            next_t = now + DT
        while session.pending:
            await _send_json(ws, session.pending.pop(0))
        if steps and not session.paused and not ws.closed:
            data = session.frame_bytes()
            try:
                await ws.send_bytes(data)
            except (ConnectionError, RuntimeError):
                return
            session.bytes_sent += len(data)
            session.frames_sent += 1
        await asyncio.sleep(max(0.0, next_t - loop.time()))


def _origin_ok(request: web.Request) -> bool:
    """Refuse pages from other sites (cross-site WebSocket hijacking); tools without Origin pass."""
    origin = request.headers.get("Origin")
    if not origin:
        return True
    host = origin.split("://", 1)[-1].rstrip("/")
    return host == request.host


async def websocket_handler(request: web.Request) -> web.StreamResponse:
    app = request.app
    if not _origin_ok(request):
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
                kind, fields = parse_message(msg.data if msg.type == WSMsgType.TEXT else bytes(msg.data))
                reply = session.handle(kind, fields)
            except MessageError as exc:
                reply = {"type": "error", "message": str(exc)}
            except Exception as exc:  # a bug in one session's character must not stop the others
                log.exception("session %s: message failed", sid)
                reply = {"type": "error", "message": f"internal error: {exc}"}
            if reply is not None:
                await _send_json(ws, reply)
            if task.done():
                break
    finally:
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
    if request.content_length is None or request.content_length > MAX_SCENARIO_BYTES:
        raise web.HTTPRequestEntityTooLarge(max_size=MAX_SCENARIO_BYTES, actual_size=request.content_length or 0)
    raw = await request.read()
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
    except (ValueError, KeyError, TypeError, MessageError) as exc:
        return web.json_response({"type": "error", "message": f"bad scenario: {exc}"}, status=400)
    name = request.query.get("name", "scenario")[:80]
    try:
        session.start_scenario(scenario, name)
    except MessageError as exc:
        return web.json_response({"type": "error", "message": f"bad scenario: {exc}"}, status=400)
    return web.json_response({"type": "scenario", "state": "playing", "name": name, "duration": duration})


async def index_handler(request: web.Request) -> web.StreamResponse:
    return web.FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})


async def status_handler(request: web.Request) -> web.Response:
    sessions = request.app[SESSIONS].values()
    return web.json_response({"sessions": len(request.app[SESSIONS]),
                              "step_us": [round(s.step_us, 1) for s in sessions],
                              "three": request.app[THREE_DIR] is not None})


def find_three(node_modules: str | os.PathLike | None = None) -> Path | None:
    """node_modules/three from the argument, $MOTIONMATCH_NODE_MODULES, the project root or the cwd."""
    candidates = [node_modules, os.environ.get("MOTIONMATCH_NODE_MODULES"), PROJECT_ROOT / "node_modules",
                  Path.cwd() / "node_modules"]
    for c in candidates:
        if c and (Path(c) / "three" / "build" / "three.module.js").is_file():
            return (Path(c) / "three").resolve()
    return None


async def _three_missing(request: web.Request) -> web.Response:
    return web.Response(status=503, text="three.js is not installed: run `make node_modules` (npm ci) in the "
                                         "project root or set MOTIONMATCH_NODE_MODULES\n")


@web.middleware
async def _headers(request: web.Request, handler):
    resp = await handler(request)
    resp.headers.setdefault("X-Content-Type-Options", "nosniff")
    return resp


def make_app(backend: Backend, node_modules=None) -> web.Application:
    """The aiohttp application: page, static files, /vendor/three, WebSocket and session API."""
    app = web.Application(middlewares=[_headers], client_max_size=MAX_SCENARIO_BYTES + 1024)
    app[BACKEND] = backend
    app[SESSIONS] = {}
    three = find_three(node_modules)
    app[THREE_DIR] = three
    app.router.add_get("/", index_handler)
    app.router.add_get("/ws", websocket_handler)
    app.router.add_get("/api/status", status_handler)
    app.router.add_get("/api/session/{sid}/record.bvh", record_handler)
    app.router.add_get("/api/session/{sid}/settings.toml", settings_file_handler)
    app.router.add_post("/api/session/{sid}/scenario", scenario_handler)
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
    parser.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0 picks a free one)")
    parser.add_argument("--node-modules", default=None,
                        help="folder holding three/ (default: $MOTIONMATCH_NODE_MODULES or ./node_modules)")
    parser.add_argument("--settings", default=None, help="settings file (TOML) every character starts from")


def run_serve(args) -> int:
    """`motionmatch serve`: load (or build) the database, serve the page, print the URL."""
    from .. import database
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    if find_three(args.node_modules) is None:
        print("motionmatch: three.js not found: run `make node_modules` (npm ci) in the project root, "
              "or pass --node-modules", file=sys.stderr)
        return 1
    path = args.db or database.build_default_database(progress=True)
    db = database.load_database(path)
    settings = None
    if getattr(args, "settings", None):
        from ..settings_file import load_settings
        settings = load_settings(args.settings, db.features.schema.names)
    app = make_app(runtime_backend(db, settings), node_modules=args.node_modules)
    return _run(app, args.host, args.port)


def _run(app: web.Application, host: str, port: int) -> int:
    async def main():
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1] if port == 0 else port
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        print(f"motionmatch: serving on http://{shown}:{bound}/  (Ctrl+C to stop)", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    return 0


def _main(argv=None) -> int:
    """`python -m motionmatch.app.server`: the same as `motionmatch serve`."""
    parser = argparse.ArgumentParser(prog="python -m motionmatch.app.server")
    add_serve_args(parser)
    return run_serve(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(_main())
