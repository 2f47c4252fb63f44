"""Input logs: everything a Character or a Crowd is told, tick by tick, so that `motionmatch synth
--replay FILE` regenerates the same motion bit for bit (format and guarantees: docs/REPLAY.md).

The runtime draws no random numbers and its parallel loops write one character per iteration (no
reduction across threads), so the output is a function of the database, the settings at the start,
and the calls made since: the sticks and dt of every tick, settings changes, requests, clip plays,
terrains and drivers. A log holds exactly those, as JSON whose floats are Python's shortest repr
(read back to the same float64). Inputs and dt are stored when they change, so an idle or steady
session costs a few bytes a tick at most.
"""
from __future__ import annotations

import base64
import copy
import dataclasses
import hashlib
import json
import math
import zlib
from pathlib import Path

import numpy as np

FORMAT = "motionmatch-input-log"
VERSION = 1
KINDS = ("character", "crowd")
# Events besides the inputs, each the name of the Character/Crowd method it replays (docs/REPLAY.md).
EVENTS = ("settings", "request_action", "request_stop_at", "request_plant_at", "cancel_request", "play_clip",
          "terrain", "driver", "reset_agent", "reset_clock", "use_set",
          "obstacles")
MAX_ENTRIES = 200_000           # inputs + events kept by one log (the app's sessions run for hours)


class InputLogError(ValueError):
    """A log that cannot be replayed here; the message says why (field, database, format)."""


def database_digest(db) -> str:
    """SHA-256 (hex) of what the runtime reads from a database: poses, contacts, clips, tags, features
    and their normalization, skeleton, rate and event marks. Two databases with the same digest give
    the same motion for the same log."""
    h = hashlib.sha256()
    fs = db.features
    for a in (db.positions, db.rotations, db.contacts, db.range_starts, db.range_stops, fs.raw, fs.offset, fs.std,
              np.asarray(db.skeleton.parents), np.asarray(db.skeleton.offsets)):
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    meta = {"fps": float(db.fps), "names": list(db.range_names), "tags": [list(t) for t in db.range_tags],
            "roles": dict(db.roles), "schema": fs.schema.to_dict(), "joints": list(db.skeleton.names),
            "events": [np.asarray(db.events.frames).tolist(), list(db.events.types),
                       [list(t) for t in db.events.tags]], "default_tag_filter": db.meta.get("default_tag_filter")}
    h.update(json.dumps(meta, sort_keys=True, default=str).encode())
    return h.hexdigest()


def settings_dict(settings) -> dict:
    """A CharacterSettings or ControllerSettings as plain JSON values (exact floats)."""
    return json.loads(json.dumps(dataclasses.asdict(settings)))


def character_settings(d: dict):
    """CharacterSettings from settings_dict's output."""
    from .settings import CharacterSettings
    from .warping import WarpSettings
    d = copy.deepcopy(d)
    return CharacterSettings(**{**d, "warp": WarpSettings(**d["warp"])})


def controller_settings(d: dict):
    from .controller import ControllerSettings
    return ControllerSettings(**d)


def _floats(a) -> list:
    """Nested lists of floats, NaN as None (JSON has no NaN)."""
    return [None if math.isnan(x) else x for x in a] if np.ndim(a) == 1 else [_floats(r) for r in a]


def unfloats(a) -> np.ndarray:
    """_floats' inverse: float64 array, None as NaN."""
    def conv(x):
        return [conv(v) for v in x] if isinstance(x, list) else (math.nan if x is None else float(x))
    return np.asarray(conv(a), dtype=np.float64)


def terrain_dict(terrain, halflife: float) -> dict:
    """A Heightfield (None: flat) exactly: float64 heights zlib-compressed in base64."""
    if terrain is None:
        return {"heights": None, "halflife": float(halflife)}
    h = np.ascontiguousarray(terrain.heights, dtype="<f8")
    return {"shape": list(h.shape), "heights": base64.b64encode(zlib.compress(h.tobytes(), 6)).decode(),
            "origin": list(terrain.origin), "cell": terrain.cell, "halflife": float(halflife)}


def obstacles_dict(obstacles) -> dict | None:
    """Obstacles (obstacles.Obstacles; None or empty: none) exactly, as lists of float64."""
    if obstacles is None or not obstacles.count:
        return None
    return {k: np.asarray(getattr(obstacles, k), np.float64).tolist()
            for k in ("centers", "radii", "box_min", "box_max")}


def terrain_from_dict(d: dict):
    """(Heightfield or None, halflife) from terrain_dict's output."""
    if d.get("heights") is None:
        return None, float(d["halflife"])
    from .terrain import Heightfield
    h = np.frombuffer(zlib.decompress(base64.b64decode(d["heights"])), dtype="<f8").reshape(d["shape"])
    return Heightfield(h, tuple(d["origin"]), d["cell"]), float(d["halflife"])


class InputLog:
    """What one Character (kind "character") or Crowd (kind "crowd") is told from its start.

    start: the object's construction arguments and, for a character, the reset it starts from
    ({"frame", "position", "yaw"}); settings: one settings_dict per agent (at the start);
    controller: settings_dict of the ControllerSettings. Entries are added by the runtime's hooks
    (Character / Crowd `start_input_log`); to_dict / save give the file (docs/REPLAY.md)."""

    def __init__(self, db, kind: str, agents: int, settings: list, controller, start: dict, seed=None,
                 max_entries: int = MAX_ENTRIES):
        self.db, self.kind, self.agents = db, kind, int(agents)
        uniq = {id(s): s for s in settings}
        self.settings = [settings_dict(s) for s in uniq.values()]
        order = list(uniq)
        self.settings_of = [order.index(id(s)) for s in settings]
        self.controller = settings_dict(controller)
        self.start, self.seed, self.max_entries = start, seed, int(max_entries)
        self.ticks = 0
        self.entries: list[dict] = []       # {"tick": k, "input" | event name: value}, in call order
        self.dt: list[list] = []            # [[tick, dt], ...] where dt changes
        self.windows: list[list] = []       # [first tick, end tick) of recordings inside the log (None: open)
        self.unreplayable: str | None = None
        self._input = None

    def _add(self, entry: dict) -> None:
        if self.unreplayable:
            return
        if len(self.entries) >= self.max_entries:
            self.unreplayable = f"input log full ({self.max_entries} entries): reset the character to start a new one"
            return
        self.entries.append(entry)

    def event(self, name: str, value) -> None:
        """Record a call (one of EVENTS) made before tick `ticks`."""
        self._add({"tick": self.ticks, name: value})

    def open_window(self) -> None:
        """A recording of the output starts with the next tick (the app's Record button)."""
        if not self.windows or self.windows[-1][1] is not None:
            self.windows.append([self.ticks, None])

    def close_window(self) -> None:
        if self.windows and self.windows[-1][1] is None:
            self.windows[-1][1] = self.ticks

    def refuse(self, why: str) -> None:
        """Mark the log as not replayable (a call it cannot hold, e.g. a driver without replay_spec)."""
        self.unreplayable = self.unreplayable or why

    def tick(self, inp, dt: float) -> None:
        """Record one step with input `inp` (character: a dict; crowd: a tuple of arrays) and `dt`."""
        if self._input is None or not _same(inp, self._input):
            self._input = inp
            self._add({"tick": self.ticks, "input": inp if isinstance(inp, dict) else
                       {"move": _floats(inp[0]), "run": inp[1].tolist(), "strafe": inp[2].tolist(),
                        "look": _floats(inp[3])}})
        dt = float(dt)
        if not self.dt or self.dt[-1][1] != dt:
            self.dt.append([self.ticks, dt])
        self.ticks += 1

    def to_dict(self) -> dict:
        if self.unreplayable:
            raise InputLogError(f"this input log cannot be replayed: {self.unreplayable}")
        db = self.db
        return {"format": FORMAT, "version": VERSION, "kind": self.kind, "agents": self.agents,
                "database": {"sha256": database_digest(db), "frames": int(db.num_frames),
                             "joints": int(db.num_joints), "fps": float(db.fps),
                             "source": str(db.meta.get("source", ""))},
                "seed": self.seed, "ticks": self.ticks, "dt": self.dt,
                "windows": [[a, self.ticks if b is None else b] for a, b in self.windows],
                "start": self.start, "settings": self.settings, "settings_of": self.settings_of,
                "controller": self.controller, "entries": self.entries}

    def save(self, path) -> Path:
        """Write the log as JSON (one entry a line, so a diff of two logs reads)."""
        d = self.to_dict()
        entries = d.pop("entries")
        head = json.dumps(d, separators=(",", ":"))[:-1]
        body = ",\n".join(json.dumps(e, separators=(",", ":")) for e in entries)
        path = Path(path)
        path.write_text(f'{head},"entries":[\n{body}\n]}}\n')
        return path


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return a == b
    return all(np.array_equal(x, y, equal_nan=x.dtype.kind == "f") for x, y in zip(a, b))


def load_log(path_or_dict) -> dict:
    """A log file (or its parsed dict), checked for format, version and field types (InputLogError
    naming the field)."""
    if isinstance(path_or_dict, dict):
        d, where = path_or_dict, "input log"
    else:
        where = str(path_or_dict)
        try:
            d = json.loads(Path(path_or_dict).read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"{where}: no such input log") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise InputLogError(f"{where}: not a JSON input log ({e})") from None
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise InputLogError(f"{where}: not a motionmatch input log (\"format\" must be {FORMAT!r})")
    if d.get("version") != VERSION:
        raise InputLogError(f"{where}: version {d.get('version')!r}; this motionmatch reads version {VERSION}")
    if d.get("kind") not in KINDS:
        raise InputLogError(f"{where}: \"kind\" must be one of {KINDS}, got {d.get('kind')!r}")
    for key, kind in (("agents", int), ("ticks", int), ("dt", list), ("start", dict), ("settings", list),
                      ("settings_of", list), ("controller", dict), ("entries", list), ("database", dict)):
        if not isinstance(d.get(key), kind) or isinstance(d.get(key), bool):
            raise InputLogError(f"{where}: field {key!r} must be a {kind.__name__}")
    if len(d["settings_of"]) != d["agents"]:
        raise InputLogError(f"{where}: \"settings_of\" must name one settings entry per agent")
    for n, e in enumerate(d["entries"]):
        if not isinstance(e, dict) or not isinstance(e.get("tick"), int) or len(e) != 2 or not (
                set(e) - {"tick"}) <= {"input", *EVENTS}:
            raise InputLogError(f"{where}: entries[{n}] must be {{\"tick\": int, NAME: value}} with NAME "
                                f"\"input\" or one of {', '.join(EVENTS)}")
    return d


def check_database(log: dict, db) -> None:
    """InputLogError unless `db` is the database the log was recorded on (same digest)."""
    want = log["database"].get("sha256")
    got = database_digest(db)
    if want != got:
        raise InputLogError(f"the input log was recorded on another database (sha256 {str(want)[:12]}..., "
                            f"{log['database'].get('frames')} frames, source {log['database'].get('source')!r}); "
                            f"this one is {got[:12]}... ({db.num_frames} frames): pass the recording's --db")
