"""Annotation windows on database clips: what the search may do inside them (issue 29, docs/ANNOTATIONS.md).

A sidecar (`motionmatch build --annotations FILE`, TOML `[[annotation]]` tables or JSON) names a clip (file name
or glob; mirrored copies follow their source clip; a name ending in " (mirrored)" names the copy alone), a range (`time` in seconds or `frame` at the database
rate: one number for one frame, [first, last] for an inclusive range, nothing for the whole clip) and a kind:

- `block_transitions`: the search does not leave the clip while the playhead is inside the range, nor enter the
  clip there;
- `exclude`: the range's frames are never a search result (not even the playing frame's continuation);
- `cost_bias`: `cost` (+ avoids, - prefers; the cost's units) is added to a candidate's cost inside the range;
- `branch_in`: the clip may only be entered at the frames of its branch_in ranges (marks);
- `loop`: an idle clip that may play in a loop: when the playhead reaches the range's end it continues at the
  range's first frame instead of searching because the clip runs out.

Entries resolve on a build's clips into `Annotations` (structure-of-arrays, stored in the database file);
`frame_rules` compiles them into the search's per-frame FrameRules (search/common.py) and `playhead_rules`
into the matcher's (blocked frames, loop jumps). "Entering" is a jump: the playing frame's continuation
never is one.
"""
from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..files.input_bounds import parse_json, parse_toml, read_bounded
from ..search.common import FrameRules

KINDS = ("block_transitions", "exclude", "cost_bias", "branch_in", "loop")
MAX_FILE_BYTES = 16 << 20
MAX_ENTRIES = 100_000
MAX_RANGES = 1_000_000           # resolved (clip, range) pairs: a glob over many clips multiplies entries
MAX_TIME_S = 1e6
MAX_COST = 1e6                   # |cost_bias|: costs are squared distances of normalized features (~0.1-100)
MAX_NAME_CHARS = 256
_KEYS = {"clip", "kind", "time", "frame", "cost"}


class AnnotationError(ValueError):
    """A bad annotation sidecar or stored annotation; the message names the entry and field."""


@dataclass
class Annotations:
    """Resolved annotation ranges of a database (A,), each on one clip: kind, database frames [start, stop)
    (stop exclusive), cost (cost_bias; 0 otherwise), the sidecar entry it came from and its clip's range."""

    kinds: list = field(default_factory=list)
    starts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    stops: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    costs: np.ndarray = field(default_factory=lambda: np.zeros(0))
    entries: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    clips: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.kinds)

    def counts(self) -> dict[str, int]:
        """Ranges per kind."""
        return {k: self.kinds.count(k) for k in KINDS if k in self.kinds}

    def of_clip(self, r: int) -> list[dict]:
        """The ranges on clip r, frames local to the clip (the app's clip browser)."""
        return [{"kind": k, "start": int(a), "stop": int(b), "cost": float(c)}
                for k, a, b, c, cl in zip(self.kinds, self.starts, self.stops, self.costs, self.clips) if cl == r]

    def to_dict(self) -> dict:
        return {"kind": list(self.kinds), "start": self.starts.tolist(), "stop": self.stops.tolist(),
                "cost": self.costs.tolist(), "entry": self.entries.tolist(), "clip": self.clips.tolist()}

    @staticmethod
    def from_dict(d, range_starts, range_stops) -> "Annotations":
        """Annotations from to_dict's form, checked against the clip ranges; AnnotationError names the field."""
        if not isinstance(d, dict):
            raise AnnotationError("annotations: expected an object")
        cols = [d.get(k) for k in ("kind", "start", "stop", "cost", "entry", "clip")]
        if not all(isinstance(c, list) for c in cols) or len({len(c) for c in cols}) != 1:
            raise AnnotationError("annotations: expected lists kind, start, stop, cost, entry, clip of one length")
        kinds, starts, stops, costs, entries, clips = cols
        if len(kinds) > MAX_RANGES:
            raise AnnotationError(f"annotations: {len(kinds):,} ranges, beyond the bound of {MAX_RANGES:,}")
        if not all(k in KINDS for k in kinds):
            raise AnnotationError(f"annotations.kind: expected one of {', '.join(KINDS)}")
        n_clips = len(range_starts)
        for name, col in (("start", starts), ("stop", stops), ("entry", entries), ("clip", clips)):
            if not all(type(v) is int and 0 <= v < 2 ** 62 for v in col):
                raise AnnotationError(f"annotations.{name}: expected non-negative integers")
        if not all(isinstance(c, (int, float)) and not isinstance(c, bool) and abs(c) <= MAX_COST for c in costs):
            raise AnnotationError(f"annotations.cost: expected numbers within +-{MAX_COST:g}")
        for a, b, r in zip(starts, stops, clips):
            if r >= n_clips or not range_starts[r] <= a < b <= range_stops[r]:
                raise AnnotationError(f"annotations: range [{a}, {b}) does not lie inside its clip {r}")
        return Annotations(list(kinds), np.array(starts, dtype=np.int64), np.array(stops, dtype=np.int64),
                           np.array(costs, dtype=np.float64), np.array(entries, dtype=np.int64),
                           np.array(clips, dtype=np.int64))


def _range_field(e: dict, key: str, where: str, bound, is_int: bool):
    v = e[key]
    items = v if isinstance(v, list) else [v]
    ok = len(items) in (1, 2) and all(
        (type(x) is int if is_int else isinstance(x, (int, float)) and not isinstance(x, bool)) and 0 <= x <= bound
        for x in items) and items[0] <= items[-1]
    if not ok:
        unit = "frames" if is_int else "seconds"
        raise AnnotationError(f"{where}.{key}: expected {unit} in [0, {bound:g}]: one number or [first, last] "
                              f"with first <= last")
    return items[0], items[-1]


def load_annotations(path) -> list[dict]:
    """Read an annotation sidecar (TOML `[[annotation]]` tables or JSON `{"annotation": [...]}` / a list),
    validated (see the module docstring); AnnotationError names the entry (`annotation[i]`) and field."""
    path = Path(path)
    raw = read_bounded(path, MAX_FILE_BYTES, AnnotationError, "annotation file")
    data = (parse_json if path.suffix.lower() == ".json" else parse_toml)(raw, AnnotationError, str(path))
    items = data.get("annotation") if isinstance(data, dict) else data
    if not isinstance(items, list) or not items:
        raise AnnotationError(f"{path}: expected a non-empty list of annotations ([[annotation]] tables or "
                              f"{{\"annotation\": [...]}})")
    if len(items) > MAX_ENTRIES:
        raise AnnotationError(f"{path}: {len(items):,} annotations, beyond the bound of {MAX_ENTRIES:,}")
    out = []
    for i, e in enumerate(items):
        where = f"{path}: annotation[{i}]"
        if not isinstance(e, dict):
            raise AnnotationError(f"{where}: expected a table")
        extra = sorted(set(e) - _KEYS)
        if extra:
            raise AnnotationError(f"{where}.{extra[0]}: unknown field (allowed: {', '.join(sorted(_KEYS))})")
        if not isinstance(e.get("clip"), str) or not 0 < len(e["clip"]) <= MAX_NAME_CHARS:
            raise AnnotationError(f"{where}.clip: expected a clip file name (or glob) of at most {MAX_NAME_CHARS} "
                                  f"characters")
        if e.get("kind") not in KINDS:
            raise AnnotationError(f"{where}.kind: expected one of {', '.join(KINDS)}, got {e.get('kind')!r}")
        if "time" in e and "frame" in e:
            raise AnnotationError(f"{where}.time: give at most one of time (seconds) and frame")
        span = None
        if "time" in e:
            span = ("time",) + _range_field(e, "time", where, MAX_TIME_S, False)
        elif "frame" in e:
            span = ("frame",) + _range_field(e, "frame", where, 2 ** 31 - 1, True)
        if (e["kind"] == "cost_bias") != ("cost" in e):
            raise AnnotationError(f"{where}.cost: {'required' if e['kind'] == 'cost_bias' else 'only'} for "
                                  f"kind cost_bias")
        cost = e.get("cost", 0.0)
        if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not math.isfinite(cost) \
                or abs(cost) > MAX_COST:
            raise AnnotationError(f"{where}.cost: expected a number within +-{MAX_COST:g}")
        out.append({"clip": e["clip"], "kind": e["kind"], "span": span, "cost": float(cost), "where": where,
                    "index": i})
    return out


def resolve(entries: list[dict], range_names, range_starts, range_stops, fps: float) -> Annotations:
    """Annotations of validated sidecar entries on a database's clips (mirrored copies too); an entry naming no
    clip, or a range beyond its clip's end, is an AnnotationError naming the entry."""
    bases = [n[:-len(" (mirrored)")] if n.endswith(" (mirrored)") else n for n in range_names]
    rows = []
    for e in entries:
        if e["clip"].endswith(" (mirrored)"):    # the mirrored copy alone
            hits = [r for r, n in enumerate(range_names) if n == e["clip"] or fnmatch.fnmatch(n, e["clip"])]
        else:
            hits = [r for r, b in enumerate(bases) if b == e["clip"] or fnmatch.fnmatch(b, e["clip"])]
        if not hits:
            raise AnnotationError(f"{e['where']}.clip: no clip named {e['clip']!r} in the database")
        if len(rows) + len(hits) > MAX_RANGES:
            raise AnnotationError(f"{e['where']}.clip: more than {MAX_RANGES:,} annotated ranges in all")
        for r in hits:
            length = int(range_stops[r] - range_starts[r])
            if e["span"] is None:
                a, b = 0, length
            else:
                unit, first, last = e["span"]
                a, b = (int(round(first * fps)), int(round(last * fps)) + 1) if unit == "time" else (first, last + 1)
                if b > length:
                    raise AnnotationError(f"{e['where']}.{unit}: beyond the end of clip {range_names[r]!r} "
                                          f"({length / fps:.2f} s, {length} frames)")
            rows.append((e["kind"], int(range_starts[r]) + a, int(range_starts[r]) + b, e["cost"], e["index"], r))
    cols = list(zip(*rows)) if rows else [[]] * 6
    return Annotations(list(cols[0]), np.array(cols[1], dtype=np.int64), np.array(cols[2], dtype=np.int64),
                       np.array(cols[3], dtype=np.float64), np.array(cols[4], dtype=np.int64),
                       np.array(cols[5], dtype=np.int64))


def frame_rules(ann: Annotations, range_starts, range_stops, n_frames: int) -> FrameRules | None:
    """The search's FrameRules of a database's annotations (None without any): cost_bias costs summed per
    frame (float32), the frames the search may enter (not in a block_transitions range; in a clip with
    branch_in ranges only those), the frames allowed at all (not excluded)."""
    if not len(ann):
        return None
    kinds = np.array(ann.kinds)
    cost = enter = allowed = None
    if (kinds == "cost_bias").any():
        acc = np.zeros(n_frames)
        for a, b, c in zip(ann.starts[kinds == "cost_bias"], ann.stops[kinds == "cost_bias"],
                           ann.costs[kinds == "cost_bias"]):
            acc[a:b] += c
        cost = acc.astype(np.float32)
    if (kinds == "exclude").any():
        allowed = np.ones(n_frames, dtype=bool)
        for a, b in zip(ann.starts[kinds == "exclude"], ann.stops[kinds == "exclude"]):
            allowed[a:b] = False
    branch, block = kinds == "branch_in", kinds == "block_transitions"
    if branch.any() or block.any():
        enter = np.ones(n_frames, dtype=bool)
        for r in np.unique(ann.clips[branch]):
            enter[range_starts[r]:range_stops[r]] = False
        for a, b in zip(ann.starts[branch], ann.stops[branch]):
            enter[a:b] = True
        for a, b in zip(ann.starts[block], ann.stops[block]):
            enter[a:b] = False
    return FrameRules(cost, enter, allowed)


def playhead_rules(ann: Annotations, n_frames: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The matcher's rules: `blocked` bool (N,), the frames inside a block_transitions range (no search while
    the playhead is there), and `loop_to` int64 (N,), a loop range's first frame on its last two frames (the
    playhead continues there instead of running out), -1 elsewhere; each None without such ranges."""
    blocked = loop_to = None
    for k, a, b in zip(ann.kinds, ann.starts.tolist(), ann.stops.tolist()):
        if k == "block_transitions":
            if blocked is None:
                blocked = np.zeros(n_frames, dtype=bool)
            blocked[a:b] = True
        elif k == "loop" and b - a >= 4:       # a loop of a few frames would stutter
            if loop_to is None:
                loop_to = np.full(n_frames, -1, dtype=np.int64)
            loop_to[b - 2:b] = a
    return blocked, loop_to
