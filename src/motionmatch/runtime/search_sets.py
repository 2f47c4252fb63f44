"""The normalized features and searcher of one set of channel weights, shared by every character and
crowd on a database (through the per-database cache `shared`), with the prepared masks of tag filters.
"""
from __future__ import annotations

import numba
import numpy as np

from ..search import Searcher, frame_mask
from .annotation_play import AnnotationRules
from .settings import CharacterSettings


def annotation_rules(db) -> AnnotationRules:
    """The database's compiled annotations (search rules, blocked frames, loops), shared."""
    return shared(db, "annotation_rules", lambda: AnnotationRules(db))


def shared(db, key, build):
    """A value computed once per database and shared by every character and crowd on it."""
    cache = db.runtime_cache      # bounded (least recently used out): keep what you get, don't look it up twice
    try:
        return cache[key]
    except KeyError:
        value = build()
        cache[key] = value
        return value


class SearchSet:
    """Normalized features and their searcher for one set of channel weights (shared per database)."""

    def __init__(self, db, weights: dict, backend: str, end_exclude: int):
        fs = db.features
        w = np.empty(fs.raw.shape[1])
        for name, sl in fs.channel_slices.items():
            w[sl] = weights[name]
        self.offset = fs.offset
        # Weight 0 (time_to_event channels outside requests) leaves a column out of the cost.
        self.inactive = np.flatnonzero(w <= 0.0)
        self.scale = fs.std / np.where(w > 0.0, w, 1.0)
        self.features = ((fs.raw - fs.offset) / self.scale).astype(np.float32)
        self.features[:, self.inactive] = 0.0
        self.active = w > 0.0
        self.searcher = Searcher(self.features, db.range_starts, db.range_stops, backend=backend,
                                 end_exclude=end_exclude, rules=annotation_rules(db).search)
        self.prepared = {}

    def normalize(self, raw: np.ndarray) -> np.ndarray:
        """Normalized float32 queries from raw ones (..., F)."""
        raw = np.ascontiguousarray(raw, dtype=np.float64)
        q = np.empty(raw.shape, dtype=np.float32)
        f = raw.shape[-1]
        normalized_rows(raw.reshape(-1, f), self.offset, self.scale, self.active, q.reshape(-1, f))
        return q

    def mask(self, db, tag_filter: str | None):
        """The prepared mask of a tag expression (None: every clip)."""
        if not tag_filter:
            return None
        if tag_filter not in self.prepared:
            m = frame_mask(tag_filter, db.range_tags, db.range_starts, db.range_stops, db.num_frames)
            self.prepared[tag_filter] = (m, self.searcher.prepare(m))
        return self.prepared[tag_filter]

    def idle_mask(self, db, tag_filter: str | None, holdable: np.ndarray):
        """The prepared mask of the frames of a tag expression an idle character may land on: `holdable`
        ones (a still stretch of its own ahead), or all of them when none is."""
        key = ("idle", tag_filter)
        if key not in self.prepared:
            base = self.mask(db, tag_filter)
            m = holdable if base is None else base[0] & holdable
            self.prepared[key] = base if not m.any() else (m, self.searcher.prepare(m))
        return self.prepared[key]


@numba.njit(cache=True)
def normalized_rows(raw, offset, scale, active, out):
    """out (B, F) float32 = (raw - offset) / scale of raw (B, F), each difference and quotient in float64 and
    rounded once to float32 (as numpy's arithmetic then astype), 0 in the columns not `active` (weight 0).
    A compiled loop: a tick's one or few queries cost four numpy calls' overhead otherwise."""
    for a in range(raw.shape[0]):
        for c in range(raw.shape[1]):
            out[a, c] = np.float32((raw[a, c] - offset[c]) / scale[c]) if active[c] else np.float32(0.0)


def search_set(db, s: CharacterSettings, events=()) -> SearchSet:
    """The shared SearchSet for a character's weights, back-end and end exclusion; time_to_event channels
    weigh only for the event types in `events` (a request's, runtime/requests.py)."""
    fs = db.features
    weights = {c.name: s.channel_weight(c.kind, float(s.weights.get(c.name, c.weight)))
               if c.kind != "time_to_event" or c.event in events else 0.0 for c in fs.schema.channels}
    unknown = set(s.weights) - set(weights)
    if unknown:
        raise ValueError(f"unknown feature channel(s) {sorted(unknown)}; channels are {sorted(weights)}")
    key = ("search", tuple(sorted(weights.items())), s.search_backend, int(s.end_exclude))
    return shared(db, key, lambda: SearchSet(db, weights, s.search_backend, int(s.end_exclude)))
