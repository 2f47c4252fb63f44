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

from ..files.input_bounds import check_plain, parse_json, read_bounded
from .settings import CharacterSettings
from .warping import WarpSettings
from .controller import ControllerSettings
from ..world.terrain import Heightfield

FORMAT = "motionmatch-input-log"
VERSION = 1
KINDS = ("character", "crowd")
# Events besides the inputs, each the name of the Character/Crowd method it replays (docs/REPLAY.md).
EVENTS = ("settings", "request_action", "request_stop_at", "request_plant_at", "cancel_request", "play_clip",
          "terrain", "driver", "reset_agent", "reset_clock", "use_set",
          "obstacles")
MAX_ENTRIES = 200_000           # inputs + events kept by one log (the app's sessions run for hours)
MAX_LOG_BYTES = 256 << 20       # a full character log is ~20 MB; crowds of many agents need more
MAX_TICKS = 60 * 60 * 60 * 24   # a day at 60 Hz
MAX_AGENTS = 10_000             # the largest crowd the benchmarks run
MAX_FRAMES = 1 << 31            # a frame number (checked against the database when replayed)
MAX_COORDINATE = 1e5            # m, like scenario files' coordinates
MAX_STICK = 1.5                 # a stick component (scenario.MAX_STICK_COMPONENT)
MIN_DT, MAX_DT = 1e-4, 1.0      # s per tick
MAX_TERRAIN_CELLS = 4_000_000   # scenario.MAX_TERRAIN_CELLS
# replay_poses holds float64 positions and rotations and float32 world positions of every joint.
POSE_BYTES_PER_JOINT = 8 * 3 + 8 * 4 + 4 * 3
MAX_POSE_BYTES = 3 << 29        # 1.5 GB: four hours of one character


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
    d = copy.deepcopy(d)
    return CharacterSettings(**{**d, "warp": WarpSettings(**d.get("warp", {}))})


def controller_settings(d: dict):
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
    """(Heightfield or None, halflife) from terrain_dict's output; InputLogError naming the field when
    it is not one (sizes are checked before anything is inflated)."""
    if not isinstance(d, dict):
        raise InputLogError("terrain: expected an object")
    halflife = d.get("halflife")
    if isinstance(halflife, bool) or not isinstance(halflife, (int, float)) or not 0.0 < halflife <= 10.0:
        raise InputLogError("terrain.halflife: expected seconds in (0, 10]")
    if d.get("heights") is None:
        return None, float(halflife)
    shape, origin, cell = d.get("shape"), d.get("origin"), d.get("cell")
    if (not isinstance(shape, list) or len(shape) != 2 or not all(isinstance(k, int) and not isinstance(k, bool)
                                                                  and k >= 2 for k in shape)
            or shape[0] * shape[1] > MAX_TERRAIN_CELLS):
        raise InputLogError(f"terrain.shape: expected [rows, columns], at least 2 each and at most "
                            f"{MAX_TERRAIN_CELLS:,} samples")
    if not isinstance(origin, list) or len(origin) != 2 or not all(
            isinstance(c, (int, float)) and not isinstance(c, bool) and abs(c) <= MAX_COORDINATE for c in origin):
        raise InputLogError("terrain.origin: expected [x, z] metres")
    if isinstance(cell, bool) or not isinstance(cell, (int, float)) or not 0.0 < cell <= 1e3:
        raise InputLogError("terrain.cell: expected metres in (0, 1000]")
    want = shape[0] * shape[1] * 8
    try:
        packed = base64.b64decode(d["heights"], validate=True)
        z = zlib.decompressobj()
        raw = z.decompress(packed, want + 1)        # never inflates more than the shape holds
    except (TypeError, ValueError, zlib.error) as e:
        raise InputLogError(f"terrain.heights: not zlib-compressed float64 in base64 ({e})") from None
    if len(raw) != want or z.unconsumed_tail:
        raise InputLogError(f"terrain.heights: {len(raw)} bytes (or more) where shape {shape} needs {want}")
    try:
        return Heightfield(np.frombuffer(raw, dtype="<f8").reshape(shape), tuple(origin), cell), float(halflife)
    except ValueError as e:
        raise InputLogError(f"terrain: {e}") from None


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
    """A log file (or its parsed dict), checked for format, version, field types and bounds
    (InputLogError naming the file and the field). Values that depend on the database (clip and frame
    numbers, channel names) are checked when the log replays on it (offline/replay.py)."""
    if isinstance(path_or_dict, dict):
        d, where = path_or_dict, "input log"
        check_plain(d, InputLogError, where)
    else:
        where = str(path_or_dict)
        if not Path(path_or_dict).exists():
            raise FileNotFoundError(f"{where}: no such input log")
        d = parse_json(read_bounded(path_or_dict, MAX_LOG_BYTES, InputLogError, "input log"), InputLogError, where)
    check_log(d, where)
    return d


def _fail(where: str, field: str, what: str):
    raise InputLogError(f"{where}: {field}: {what}")


def _int(v, where, field, low, high) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        _fail(where, field, f"expected an integer in [{low}, {high}], got {str(v)[:40]}")
    return v


def _number(v, where, field, low=-MAX_COORDINATE, high=MAX_COORDINATE) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not low <= v <= high:
        _fail(where, field, f"expected a number in [{low:g}, {high:g}], got {str(v)[:40]}")
    return float(v)


def _pairs(v, n, where, field, none_ok: bool) -> None:
    """n (x, z) pairs of stick values (None: NaN, where allowed)."""
    if not isinstance(v, list) or len(v) != n:
        _fail(where, field, f"expected {n} pairs")
    for i, p in enumerate(v):
        if not isinstance(p, list) or len(p) != 2:
            _fail(where, f"{field}[{i}]", "expected [x, z]")
        for k, c in enumerate(p):
            if not (c is None and none_ok):
                _number(c, where, f"{field}[{i}][{k}]", -MAX_STICK, MAX_STICK)


def _bools(v, n, where, field) -> None:
    if not isinstance(v, list) or len(v) != n or not all(isinstance(b, bool) for b in v):
        _fail(where, field, f"expected {n} booleans")


def _check_input(v, kind: str, agents: int, where: str, field: str) -> None:
    if not isinstance(v, dict) or set(v) != {"move", "look", "run", "strafe"}:
        _fail(where, field, 'expected {"move", "look", "run", "strafe"}')
    if kind == "character":
        _pairs([v["move"]], 1, where, f"{field}.move", none_ok=False)
        if v["look"] is not None:
            _pairs([v["look"]], 1, where, f"{field}.look", none_ok=False)
        for k in ("run", "strafe"):
            if not isinstance(v[k], bool):
                _fail(where, f"{field}.{k}", "expected true or false")
    else:
        _pairs(v["move"], agents, where, f"{field}.move", none_ok=False)
        _pairs(v["look"], agents, where, f"{field}.look", none_ok=True)
        _bools(v["run"], agents, where, f"{field}.run")
        _bools(v["strafe"], agents, where, f"{field}.strafe")


def check_log(d, where: str = "input log") -> None:
    """InputLogError naming `where` and the field unless `d` has the shape and bounds of an input log."""
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise InputLogError(f"{where}: not a motionmatch input log (\"format\" must be {FORMAT!r})")
    version = d.get("version")
    if isinstance(version, bool) or version != VERSION:
        raise InputLogError(f"{where}: version {version!r}; this motionmatch reads version {VERSION}")
    if d.get("kind") not in KINDS:
        raise InputLogError(f"{where}: \"kind\" must be one of {KINDS}, got {str(d.get('kind'))[:40]!r}")
    for key, kind in (("agents", int), ("ticks", int), ("dt", list), ("start", dict), ("settings", list),
                      ("settings_of", list), ("controller", dict), ("entries", list), ("database", dict)):
        if not isinstance(d.get(key), kind) or isinstance(d.get(key), bool):
            raise InputLogError(f"{where}: field {key!r} must be a {kind.__name__}")
    agents = _int(d["agents"], where, "agents", 1, 1 if d["kind"] == "character" else MAX_AGENTS)
    ticks = _int(d["ticks"], where, "ticks", 0, MAX_TICKS)
    if len(d["settings_of"]) != agents:
        raise InputLogError(f"{where}: \"settings_of\" must name one settings entry per agent")
    if not 1 <= len(d["settings"]) <= agents or not all(isinstance(s, dict) for s in d["settings"]):
        _fail(where, "settings", f"expected 1 to {agents} settings objects")
    for i, k in enumerate(d["settings_of"]):
        _int(k, where, f"settings_of[{i}]", 0, len(d["settings"]) - 1)
    last = -1
    for i, c in enumerate(d["dt"]):
        if not isinstance(c, list) or len(c) != 2:
            _fail(where, f"dt[{i}]", "expected [tick, seconds]")
        last = _int(c[0], where, f"dt[{i}][0]", last + 1, max(ticks - 1, 0))
        _number(c[1], where, f"dt[{i}][1]", MIN_DT, MAX_DT)
    if ticks and (not d["dt"] or d["dt"][0][0] != 0):
        _fail(where, "dt", "the first entry must be at tick 0")
    windows = d.get("windows") or []
    if not isinstance(windows, list) or len(windows) > MAX_ENTRIES:
        _fail(where, "windows", "expected a list of [first tick, end tick]")
    for i, w in enumerate(windows):
        if not isinstance(w, list) or len(w) != 2:
            _fail(where, f"windows[{i}]", "expected [first tick, end tick]")
        a = _int(w[0], where, f"windows[{i}][0]", 0, ticks)
        _int(w[1], where, f"windows[{i}][1]", a, ticks)
    st = d["start"]
    if d["kind"] == "character":
        if st.get("frame") is not None:
            _int(st["frame"], where, "start.frame", 0, MAX_FRAMES)
        pos = st.get("position", [0.0, 0.0, 0.0])
        if not isinstance(pos, list) or len(pos) != 3:
            _fail(where, "start.position", "expected [x, y, z] metres")
        for k, c in enumerate(pos):
            _number(c, where, f"start.position[{k}]")
        _number(st.get("yaw", 0.0), where, "start.yaw")
    elif st.get("frames") is not None:
        if not isinstance(st["frames"], list) or len(st["frames"]) != agents:
            _fail(where, "start.frames", f"expected {agents} frames or null")
        for i, f in enumerate(st["frames"]):
            if f is not None:
                _int(f, where, f"start.frames[{i}]", 0, MAX_FRAMES)
    if len(d["entries"]) > MAX_ENTRIES:
        _fail(where, "entries", f"{len(d['entries'])} entries, at most {MAX_ENTRIES}")
    last = 0
    for n, e in enumerate(d["entries"]):
        if not isinstance(e, dict) or not isinstance(e.get("tick"), int) or len(e) != 2 or not (
                set(e) - {"tick"}) <= {"input", *EVENTS}:
            raise InputLogError(f"{where}: entries[{n}] must be {{\"tick\": int, NAME: value}} with NAME "
                                f"\"input\" or one of {', '.join(EVENTS)}")
        last = _int(e["tick"], where, f"entries[{n}].tick", last, ticks)
        if "input" in e:
            _check_input(e["input"], d["kind"], agents, where, f"entries[{n}].input")
    # replay_poses keeps every tick's pose (poses.npz): a log no skeleton could replay in memory is refused
    # here (one joint); replay_poses checks the database's own skeleton.
    check_pose_bytes(ticks, agents, 1, where)


def check_pose_bytes(ticks: int, agents: int, joints: int, where: str) -> None:
    """InputLogError unless every tick's pose of `agents` characters of `joints` joints fits MAX_POSE_BYTES."""
    need = ticks * agents * joints * POSE_BYTES_PER_JOINT
    if need > MAX_POSE_BYTES:
        _fail(where, "ticks", f"{ticks} ticks of {agents} agent(s) of {joints} joint(s): the replay would hold "
                              f"{need / 2 ** 30:.1f} GB of poses, beyond the bound of {MAX_POSE_BYTES / 2 ** 30:.0f} GB")


def check_database(log: dict, db) -> None:
    """InputLogError unless `db` is the database the log was recorded on (same digest)."""
    want = log["database"].get("sha256")
    got = database_digest(db)
    if want != got:
        raise InputLogError(f"the input log was recorded on another database (sha256 {str(want)[:12]}..., "
                            f"{log['database'].get('frames')} frames, source {log['database'].get('source')!r}); "
                            f"this one is {got[:12]}... ({db.num_frames} frames): pass the recording's --db")
