"""One connected page: its character, input state, recording, scenario and debugging tools; messages
already validated (messages.py) are applied by its `on_<type>` methods (websocket.HANDLERS), and
`Session.frame_bytes` encodes the binary frame sent after each tick (format: app/server.py's docstring).
"""
from __future__ import annotations

import asyncio
import json
import logging
import math
import struct
import time

import numpy as np
from aiohttp import web

from ..motion.posture import frame_posture
from .backend import Backend
from .driven import DrivenCharacter
from .messages import MAX_TEXT_BYTES, SETTINGS_FIELDS, MessageError
from .recording import Recording
from .limits import DT
from ..search import TagExpressionError, frame_mask
from ..search.inspect import inspect_search
from ..runtime.database_sets import SetSpec
from ..world.terrain import Heightfield
from ..offline.replay import ScenarioDriver
from ..offline.scenario import Scenario

log = logging.getLogger("motionmatch.app")

RATE_PER_S = 120.0              # client messages per second (token bucket, burst of the same size)
MAX_RECORD_FRAMES = 60 * 60 * 10  # 10 minutes of recorded poses
MAX_RESETS_PER_WINDOW, RESET_WINDOW_S = 5, 10.0   # more resets than this in the window end the session
TERRAIN_SAMPLES = 1025          # heights sent to the page per side: all of a procedural terrain (401), so the
                                # page draws and places the overlays on the surface the runtime uses
FRAME_HEADER = struct.Struct("<IfI")


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

    def __init__(self, sid: str, ws: web.WebSocketResponse, character: DrivenCharacter, backend: Backend):
        self.id, self.ws, self.ch, self.backend = sid, ws, character, backend
        self.move, self.look, self.run, self.strafe = (0.0, 0.0), None, False, False
        self.paused = False
        self.sim_time = 0.0
        self.seq = 0
        self.tokens, self.token_time, self.last_rate_warning = RATE_PER_S, time.monotonic(), 0.0
        self.dropped = 0
        self.recording = False
        self.recorded = Recording(MAX_RECORD_FRAMES)
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
        # The character's input log (runtime/input_log.py): from its last reset, so a Record press can be
        # downloaded as a file that `motionmatch synth --replay` turns into the same motion.
        character.start_input_log()

    def close(self) -> None:
        """Release what the session holds (recording, scenario, caches) once its page is gone: the
        server runs for hours while pages come and go."""
        self.recording = False
        self.recorded.clear()
        self.scenario = None
        self.pending.clear()
        self._masks.clear()
        self.weights_pending.clear()

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
                "parents": [int(p) for p in sk.parents], "channels": list(self.ch.channel_names),
                "tags": list(self.ch.known_tags), "settings": self.settings_dict(),
                "limits": {"max_message_bytes": MAX_TEXT_BYTES, "rate_per_s": RATE_PER_S,
                           "record_frames": MAX_RECORD_FRAMES},
                "backend": self.backend.description, "character": self.character_info(),
                "lmm": bool(self.ch.settings.model)}

    def character_info(self) -> dict | None:
        c = self.backend.character
        return None if c is None else {"url": "/api/character.glb", "name": c["name"], **c["retarget"]}

    def settings_dict(self) -> dict:
        s = self.ch.settings
        out = {k: getattr(s, k) for k in SETTINGS_FIELDS}
        out["weights"] = self.effective_weights()
        return _round(out, 4)

    def effective_weights(self) -> dict:
        """Every channel's weight: the setting where given, else the feature schema's default."""
        defaults = {c.name: float(c.weight) for c in self.ch.db.features.schema.channels}
        given = self.ch.settings.weights or {}
        return {c: float(given.get(c, defaults.get(c, 1.0))) for c in self.ch.channel_names}

    def apply_settings(self, fields: dict) -> None:
        """Set settings fields already checked (messages.session_schemas) on the character and apply them;
        when the character refuses them (ValueError), the old values come back and MessageError says why."""
        s = self.ch.settings
        old = {k: getattr(s, k) for k in fields}
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

    # One method per client message type, each taking the fields messages.parse_message validated and
    # returning the reply or None; websocket.HANDLERS maps the types to them.

    def on_input(self, f: dict) -> None:
        self.move, self.look = f["move"], f.get("look")
        self.run, self.strafe = f.get("run", False), f.get("strafe", False)

    def on_settings(self, f: dict) -> dict:
        self.apply_settings(f)
        return {"type": "settings", "settings": self.settings_dict()}

    def on_reset(self, f: dict) -> dict:
        self.stop_scenario()
        self.ch.reset()
        self.sim_time = 0.0
        return {"type": "reset"}

    def on_pause(self, f: dict) -> dict:
        self.paused = f["paused"]
        return {"type": "pause", "paused": self.paused}

    def on_record(self, f: dict) -> dict:
        log = self.ch.input_log
        if f["action"] == "start":
            self.recording = True
            if log is not None:
                log.open_window()
        elif f["action"] == "stop":
            self.recording = False
            if log is not None:
                log.close_window()
        else:
            self.recorded.clear()
            if log is not None:
                log.windows.clear()
        return self.record_status()

    def on_scenario_stop(self, f: dict) -> dict:
        self.stop_scenario()
        return {"type": "scenario", "state": "stopped", "name": self.scenario_name}

    def on_ping(self, f: dict) -> dict:
        return {"type": "pong", "t": f["t"]}

    def on_debug(self, f: dict) -> dict:
        self.ghosts = f.get("ghosts", self.ghosts)
        return {"type": "debug", "ghosts": self.ghosts}

    def on_play_clip(self, f: dict) -> dict:
        try:
            self.ch.play_clip(f["clip"], f.get("offset", 0))
        except ValueError as exc:
            raise MessageError(str(exc)) from None
        return {"type": "play_clip", "clip": f["clip"], "offset": f.get("offset", 0)}

    def on_action(self, f: dict) -> dict:
        try:
            self.ch.request_action(f["event"], f["event_in"])
        except ValueError as exc:
            raise MessageError(str(exc)) from None
        return {"type": "action", "event": f["event"], "event_in": f["event_in"]}

    def on_search_set(self, f: dict) -> dict:
        try:
            self.ch.use_set(SetSpec(f["name"], f.get("tags"), f.get("weights", {})), f.get("interrupt", True))
        except ValueError as exc:
            raise MessageError(str(exc)) from None
        self.pending.append({"type": "settings", "settings": self.settings_dict()})   # the set's filter and weights
        return {"type": "search_set", "name": f["name"], "interrupt": f.get("interrupt", True)}

    def on_terrain(self, f: dict) -> dict:
        self.set_terrain(None if f["kind"] == "flat" else Heightfield.procedural(f["kind"]), f["kind"])
        return self.terrain_status()

    def on_inspect(self, f: dict) -> dict:
        """The candidates of one search (a record from debug()["search"]): top k with per-channel
        costs and the continuing frame's cost, each with its clip and frame within the clip."""
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
        """The database's clips: name, tags, first frame, length in frames and annotation windows (kind,
        start, stop frames local to the clip, stop exclusive; cost)."""
        db = self.ch.db
        return {"fps": float(db.fps), "frames": int(db.num_frames), "clips": [
            {"name": n, "tags": list(t), "start": int(a), "frames": int(b - a),
             "annotations": [{**w, "start": w["start"] - a, "stop": w["stop"] - a} for w in db.annotations.of_clip(r)]}
            for r, (n, t, a, b) in enumerate(zip(db.range_names, db.range_tags, db.range_starts.tolist(),
                                                 db.range_stops.tolist()))]}

    def record_status(self) -> dict:
        return {"type": "record", "recording": self.recording, "frames": len(self.recorded),
                "max_frames": MAX_RECORD_FRAMES}

    # -- simulation ------------------------------------------------------------------------------

    def start_scenario(self, scenario: Scenario, name: str) -> None:
        """Play a scenario from the character's current state: the character gets the scenario's driver
        (paths work too); a scenario style sets the tag filter."""
        self.stop_scenario()
        self.scenario, self.scenario_name, self.scenario_time = scenario, name, 0.0
        self.saved_tag_filter = self.ch.settings.tag_filter
        if scenario.style:
            self.apply_settings({"tag_filter": scenario.style})   # raises MessageError on a style unknown here
            self.pending.append({"type": "settings", "settings": self.settings_dict()})
        self.ch.set_driver(ScenarioDriver(scenario.to_dict(), self.ch.time))
        self.ch.set_obstacles(scenario.obstacles)     # the scenario's obstacles live as long as it plays
        self.paused = False

    def stop_scenario(self) -> None:
        if self.scenario is None:
            return
        self.scenario = None
        self.ch.set_driver(None)
        self.ch.set_obstacles(None)
        if self.ch.settings.tag_filter != self.saved_tag_filter:
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
            if not self.recorded.append(*self.ch.local_pose()):
                self.recording = False
                log = self.ch.input_log
                if log is not None:
                    log.close_window()
                self.pending.append({**self.record_status(), "warning": "recording limit reached"})

    def frame_bytes(self) -> bytes:
        dbg = dict(self.ch.debug())
        dbg["server_step_us"] = self.step_us
        dbg["scenario"] = ({"name": self.scenario_name, "time": self.scenario_time,
                            "duration": float(self.scenario.duration)} if self.scenario is not None else None)
        dbg["recording"] = len(self.recorded) if (self.recording or len(self.recorded)) else 0
        dv, rv = self.ch.controller.desired_velocity, self.ch.root_velocity
        dbg["speed"] = {"asked": math.hypot(dv[0], dv[2]), "delivered": math.hypot(rv[0], rv[2])}
        db = self.ch.db             # the graphs' posture and style lanes
        dbg["posture"] = frame_posture(db, self.ch.global_positions)
        dbg["clip_styles"] = [t for t in dbg.get("tags", ()) if t in db.style_tags]
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

