"""Event marks on database clips (seed 003: "clips carry events at their most significant moment").

A mark is (frame, type, tags, origin): `frame` a database frame (60 fps by default), `type` a name such as
`bow`, `stop` or `foot_plant_left`, `origin` "auto" (computed by the build) or "file" (an annotation
sidecar). Automatic marks, per clip:
- `foot_plant_left` / `foot_plant_right`: the first frame of each foot contact;
- `stop`: the moment the simulation bone comes to rest (ground speed below STOP_SPEED after moving faster
  than MOVING_SPEED within the second before, and staying slow for STOP_HOLD_S or to the clip's end);
- an action's key moment, for clips tagged `action:NAME` with NAME in ACTION_KEYS: the extreme of the
  action's key joint over the clip (e.g. the lowest head of a bow); the mark's type is NAME.

The time-to-event feature (posedb/features.py kind `time_to_event`) of a frame is the time in seconds to the next
mark of its type in the same clip, clamped to the channel's horizon (frames with none ahead get the horizon).
"""
from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .features import Channel, FeatureSchema
from ..files.input_bounds import parse_json, parse_toml, read_bounded

# Action -> (key joint roles, which extreme). "lowest"/"highest": the joint's height; "farthest": its
# horizontal distance from the hips (reach); "fastest": its speed. With two roles (left/right) the side that
# reaches the larger extreme wins. Chosen from the Bandai-Namco dataset-1 gestures: a bow and a nod (respond)
# peak when the head is lowest; waving (bye, byebye) and calling peak with the hand highest; pointing the way
# (guide) and punching at full reach; a kick with the foot highest; a slash and a dash at peak speed.
ACTION_KEYS = {
    "bow": (("head",), "lowest"),
    "respond": (("head",), "lowest"),
    "bye": (("left_hand", "right_hand"), "highest"),
    "byebye": (("left_hand", "right_hand"), "highest"),
    "call": (("left_hand", "right_hand"), "highest"),
    "guide": (("left_hand", "right_hand"), "farthest"),
    "punch": (("left_hand", "right_hand"), "farthest"),
    "kick": (("left_foot", "right_foot"), "highest"),
    "slash": (("left_hand", "right_hand"), "fastest"),
    "dash": (("hips",), "fastest"),
}
STOP_SPEED = 0.1          # m/s: at rest below this ground speed
MOVING_SPEED = 0.5        # m/s: moving above it
STOP_HOLD_S = 0.25        # s: a stop stays at rest at least this long (or to the clip's end)
DEFAULT_HORIZON_S = 1.5   # s: time-to-event clamp of the channels the build adds


class EventError(ValueError):
    """A bad annotation sidecar or event mark; the message names the file and field."""


@dataclass
class EventMarks:
    """Event marks of a database as structure-of-arrays, sorted by frame."""

    frames: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))   # (E,) database frames
    types: list = field(default_factory=list)                                            # (E,) type names
    tags: list = field(default_factory=list)                                             # (E,) tag lists
    origins: list = field(default_factory=list)                                          # (E,) "auto" | "file"

    def __len__(self) -> int:
        return len(self.types)

    @property
    def type_names(self) -> list[str]:
        return sorted(set(self.types))

    def counts(self) -> dict[str, int]:
        """Marks per type."""
        out: dict[str, int] = {}
        for t in self.types:
            out[t] = out.get(t, 0) + 1
        return dict(sorted(out.items()))

    def frames_of(self, event_type: str) -> np.ndarray:
        """Sorted frames of the marks of one type."""
        return np.array([f for f, t in zip(self.frames, self.types) if t == event_type], dtype=np.int64)

    def to_dict(self) -> dict:
        return {"frame": [int(f) for f in self.frames], "type": list(self.types), "tags": [list(t) for t in self.tags],
                "origin": list(self.origins)}

    @staticmethod
    def from_dict(d: dict, num_frames: int) -> "EventMarks":
        """Marks from to_dict's form; raises EventError naming the bad field."""
        if not isinstance(d, dict):
            raise EventError("events: expected an object")
        frames, types, tags, origins = (d.get(k) for k in ("frame", "type", "tags", "origin"))
        if not (isinstance(frames, list) and isinstance(types, list) and isinstance(tags, list)
                and isinstance(origins, list) and len(frames) == len(types) == len(tags) == len(origins)):
            raise EventError("events: expected lists frame, type, tags, origin of one length")
        if not all(type(f) is int and 0 <= f < num_frames for f in frames):
            raise EventError(f"events.frame: expected frames in [0, {num_frames})")
        if not all(isinstance(t, str) and t for t in types):
            raise EventError("events.type: expected non-empty strings")
        if not all(isinstance(t, list) and all(isinstance(x, str) for x in t) for t in tags):
            raise EventError("events.tags: expected lists of strings")
        if not all(o in ("auto", "file") for o in origins):
            raise EventError("events.origin: expected 'auto' or 'file'")
        return sorted_marks(np.array(frames, dtype=np.int64), types, tags, origins)


def sorted_marks(frames, types, tags, origins) -> EventMarks:
    """EventMarks sorted by (frame, type), exact duplicates dropped."""
    seen, rows = set(), []
    for f, t, g, o in zip(np.asarray(frames).tolist(), types, tags, origins):
        if (f, t) not in seen:
            seen.add((f, t))
            rows.append((int(f), t, list(g), o))
    rows.sort(key=lambda r: (r[0], r[1]))
    return EventMarks(np.array([r[0] for r in rows], dtype=np.int64), [r[1] for r in rows],
                      [r[2] for r in rows], [r[3] for r in rows])


def merge_marks(*marks: EventMarks) -> EventMarks:
    return sorted_marks(np.concatenate([m.frames for m in marks]) if marks else [],
                        [t for m in marks for t in m.types], [t for m in marks for t in m.tags],
                        [o for m in marks for o in m.origins])


# ---------------------------------------------------------------------------------------------
# Automatic marks

def action_of(tags) -> str | None:
    """The action name of a clip from its `action:NAME` tag (None: not an action clip)."""
    for t in tags:
        if t.startswith("action:"):
            return t[len("action:"):]
    return None


def action_tags(tags) -> list[str]:
    """`action` and `action:NAME` for a clip one of whose tags is an action NAME of ACTION_KEYS (a plain build of
    Bandai-Namco dataset-1 tags `bow` from the file name), so any build marks its key moments; none for a clip
    that already names its action."""
    if action_of(tags) is not None:
        return []
    for t in tags:
        if t in ACTION_KEYS:
            return ["action", f"action:{t}"]
    return []


def with_action_channels(schema, tag_lists):
    """`schema` (features.FeatureSchema) plus a time_to_event channel (weight 10, horizon DEFAULT_HORIZON_S) for
    each action of ACTION_KEYS some clip's tags name (`action:NAME`) and the schema lacks: an action request needs
    it; the runtime weighs it only during requests."""
    have = {c.event for c in schema.channels if c.kind == "time_to_event"}
    names = {c.name for c in schema.channels}
    found = {action_of(t) for t in tag_lists} - {None} - have
    extra = tuple(Channel(f"time_to_{a}", "time_to_event", 10.0, event=a, horizon=DEFAULT_HORIZON_S)
                  for a in ACTION_KEYS if a in found and f"time_to_{a}" not in names)
    return FeatureSchema(schema.channels + extra) if extra else schema


def key_moment(gpos: np.ndarray, fps: float, roles: dict, action: str) -> int | None:
    """Frame of an action's key moment in one clip (ACTION_KEYS), or None for an unknown action or a
    missing role. gpos (F, J, 3) world positions, joint 0 the simulation bone."""
    if action not in ACTION_KEYS:
        return None
    names, extreme = ACTION_KEYS[action]
    if not all(r in roles for r in names) or len(gpos) < 3:
        return None
    best, best_frame = -math.inf, None
    for r in names:
        p = gpos[:, roles[r]]
        if extreme == "lowest":
            score = -p[:, 1]
        elif extreme == "highest":
            score = p[:, 1]
        elif extreme == "farthest":
            score = np.linalg.norm((p - gpos[:, roles["hips"]])[:, [0, 2]], axis=1)
        else:
            score = np.zeros(len(p))
            score[1:-1] = np.linalg.norm(p[2:] - p[:-2], axis=1) * fps / 2
        f = int(np.argmax(score))
        if score[f] > best:
            best, best_frame = float(score[f]), f
    return best_frame


def stop_moments(sim_pos: np.ndarray, fps: float) -> list[int]:
    """Frames where the simulation bone (F, 3) comes to rest (see the module docstring)."""
    if len(sim_pos) < 3:
        return []
    speed = np.zeros(len(sim_pos))
    speed[1:] = np.linalg.norm(np.diff(sim_pos[:, [0, 2]], axis=0), axis=1) * fps
    speed[0] = speed[1]
    back, hold = int(round(fps)), int(round(STOP_HOLD_S * fps))
    out = []
    for f in np.flatnonzero((speed[1:] < STOP_SPEED) & (speed[:-1] >= STOP_SPEED)) + 1:
        if speed[max(0, f - back):f].max() > MOVING_SPEED and speed[f:f + hold].max() < STOP_SPEED:
            out.append(int(f))
    return out


def auto_marks(gpos: np.ndarray, contacts: np.ndarray, fps: float, roles: dict, tags) -> EventMarks:
    """Automatic marks of one clip (frames local to the clip): foot plants, stops, an action's key moment."""
    frames, types = [], []
    for side, c in zip(("left", "right"), contacts.T):
        plants = np.flatnonzero(c[1:] & ~c[:-1]) + 1
        frames += plants.tolist()
        types += [f"foot_plant_{side}"] * len(plants)
    stops = stop_moments(gpos[:, 0], fps)
    frames += stops
    types += ["stop"] * len(stops)
    action = action_of(tags)
    if action is not None:
        k = key_moment(gpos, fps, roles, action)
        if k is not None:
            frames.append(k)
            types.append(action)
    return sorted_marks(np.array(frames, dtype=np.int64), types, [[] for _ in types], ["auto"] * len(types))


# ---------------------------------------------------------------------------------------------
# Annotation sidecar

_EVENT_KEYS = {"clip", "time", "frame", "type", "tags"}
MAX_SIDECAR_BYTES = 16 << 20
MAX_SIDECAR_EVENTS = 100_000
MAX_EVENT_TIME_S = 1e6            # far beyond any clip, small enough to turn into a frame number
MAX_NAME_CHARS = 256              # clip globs, event types and tags


def load_sidecar(path) -> list[dict]:
    """Read an annotation sidecar (TOML `[[event]]` tables or JSON `{"event": [...]}` / a list), validated.

    Each entry: `clip` (file name as listed by `motionmatch info`, or a glob on it; mirrored copies are marked
    too), one of `time` (seconds from the clip's first frame) or `frame` (frame at the database rate),
    `type` (event name), optional `tags` (list of strings)."""
    path = Path(path)
    raw = read_bounded(path, MAX_SIDECAR_BYTES, EventError, "events file")
    data = (parse_json if path.suffix.lower() == ".json" else parse_toml)(raw, EventError, str(path))
    items = data.get("event") if isinstance(data, dict) else data
    if not isinstance(items, list) or not items:
        raise EventError(f"{path}: expected a non-empty list of events ([[event]] tables or {{\"event\": [...]}})")
    if len(items) > MAX_SIDECAR_EVENTS:
        raise EventError(f"{path}: {len(items):,} events, beyond the bound of {MAX_SIDECAR_EVENTS:,}")
    out = []
    for i, e in enumerate(items):
        where = f"{path}: event[{i}]"
        if not isinstance(e, dict):
            raise EventError(f"{where}: expected a table")
        extra = sorted(set(e) - _EVENT_KEYS)
        if extra:
            raise EventError(f"{where}.{extra[0]}: unknown field (allowed: {', '.join(sorted(_EVENT_KEYS))})")
        if not isinstance(e.get("clip"), str) or not 0 < len(e["clip"]) <= MAX_NAME_CHARS:
            raise EventError(f"{where}.clip: expected a clip file name (or glob) of at most {MAX_NAME_CHARS} characters")
        if not isinstance(e.get("type"), str) or not e["type"].strip() or any(c.isspace() for c in e["type"]) \
                or len(e["type"]) > MAX_NAME_CHARS:
            raise EventError(f"{where}.type: expected an event name without spaces (at most {MAX_NAME_CHARS} characters)")
        if ("time" in e) == ("frame" in e):
            raise EventError(f"{where}.time: give exactly one of time (seconds) and frame")
        if "time" in e:
            t = e["time"]
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t <= MAX_EVENT_TIME_S:
                raise EventError(f"{where}.time: expected seconds in [0, {MAX_EVENT_TIME_S:g}]")
        else:
            f = e["frame"]
            if type(f) is not int or not 0 <= f < 2 ** 31:
                raise EventError(f"{where}.frame: expected a frame number in [0, 2^31)")
        tags = e.get("tags", [])
        if not isinstance(tags, list) or not all(isinstance(t, str) and len(t) <= MAX_NAME_CHARS for t in tags) \
                or len(tags) > 64:
            raise EventError(f"{where}.tags: expected a list of at most 64 strings")
        out.append({**e, "tags": tags, "where": where})
    return out


def sidecar_marks(entries: list[dict], range_names, range_starts, range_stops, fps: float) -> EventMarks:
    """Marks of validated sidecar entries on a database's clips; an entry that names no clip, or a time
    beyond its clip, is an EventError naming it."""
    frames, types, tags = [], [], []
    bases = [n[:-len(" (mirrored)")] if n.endswith(" (mirrored)") else n for n in range_names]
    for e in entries:
        hits = [r for r, b in enumerate(bases) if b == e["clip"] or fnmatch.fnmatch(b, e["clip"])]
        if not hits:
            raise EventError(f"{e['where']}.clip: no clip named {e['clip']!r} in the database")
        for r in hits:
            local = int(round(e["time"] * fps)) if "time" in e else int(e["frame"])
            if local >= range_stops[r] - range_starts[r]:
                raise EventError(f"{e['where']}: {'time' if 'time' in e else 'frame'} is beyond the end of clip "
                                 f"{range_names[r]!r} ({(range_stops[r] - range_starts[r]) / fps:.2f} s)")
            frames.append(int(range_starts[r]) + local)
            types.append(e["type"])
            tags.append(e["tags"])
    return sorted_marks(np.array(frames, dtype=np.int64), types, tags, ["file"] * len(types))


# ---------------------------------------------------------------------------------------------
# Time to event

def time_to_event(event_frames: np.ndarray, range_starts, range_stops, num_frames: int, fps: float,
                  horizon: float) -> np.ndarray:
    """(N,) float32 seconds from each frame to the next mark in `event_frames` (sorted) of its own clip
    (0 on a mark), clamped to `horizon`."""
    out = np.full(num_frames, horizon, dtype=np.float64)
    idx = np.arange(num_frames)
    stops = np.repeat(np.asarray(range_stops), np.asarray(range_stops) - np.asarray(range_starts))
    k = np.searchsorted(event_frames, idx, side="left")
    has = k < len(event_frames)
    nxt = np.where(has, np.asarray(event_frames)[np.minimum(k, max(len(event_frames) - 1, 0))] if len(event_frames)
                   else 0, 0)
    ok = has & (nxt < stops)
    out[ok] = np.minimum((nxt[ok] - idx[ok]) / fps, horizon)
    return out.astype(np.float32)
