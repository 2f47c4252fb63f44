"""Exact nearest-frame search over normalized features: brute force (numpy, numba) and a bounding-box
tree (numba), behind one facade. The semantics (searchable frames, skip, bias, ties) are
defined once in `common.py`; every back-end returns exactly the same (frame, cost).
"""
from __future__ import annotations

import hashlib
import time
from collections import OrderedDict

import numpy as np

from .aabb import AabbIndex
from .brute import BruteIndex, brute_numpy
from .common import FrameRules, searchable_frames, validate_features, validate_mask, validate_ranges, validate_rules
from .tags import TagExpressionError, compile_tag_expression, frame_mask, range_mask

__all__ = ["Searcher", "FrameRules", "BACKENDS", "TagExpressionError", "compile_tag_expression", "frame_mask",
           "range_mask"]

BACKENDS = ("brute_numpy", "brute", "aabb")
_CACHE_SIZE = 8  # structures kept per searcher (one per distinct mask)


class _NumpyIndex:
    """The reference: no structure beyond the transposed features."""

    def __init__(self, features_t: np.ndarray, others: np.ndarray, frame_cost: np.ndarray | None):
        self.features_t, self.others, self.frame_cost = features_t, others, frame_cost
        self.arrays = (features_t, others, frame_cost)

    def search(self, features, valid, q, current, skip, bias):
        if not np.isfinite(q).all():
            return -2, float("nan")
        return brute_numpy(self.features_t, valid, q, current, skip, bias, self.others, self.frame_cost)

    def search_batch(self, features, valid, queries, currents, skip, bias, out_frames, out_costs):
        for i in range(len(queries)):
            out_frames[i], out_costs[i] = brute_numpy(self.features_t, valid, queries[i], int(currents[i]),
                                                      skip, bias, self.others, self.frame_cost)


class PreparedMask:
    """A mask bound to its search structure (see Searcher.prepare)."""

    __slots__ = ("valid", "index")

    def __init__(self, valid, index):
        self.valid, self.index = valid, index


class Searcher:
    """Exact nearest-frame search.

    features: (N, F) normalized features (float32; copied if another dtype or layout).
    range_starts, range_stops: clip ranges in frames, stop exclusive; frames outside every range are
    never returned, nor the last `end_exclude` frames of each range (they have no future to play).
    backend: one of BACKENDS. Single queries run on the calling thread only; `search_batch` uses the
    numba thread pool for the numba back-ends.
    rules: FrameRules (per-frame costs, frames it may enter, frames allowed at all: a database's
    annotations), or None.
    """

    def __init__(self, features, range_starts, range_stops, backend: str = "aabb", end_exclude: int = 20,
                 rules: FrameRules | None = None):
        if backend not in BACKENDS:
            raise ValueError(f"unknown search backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        if int(end_exclude) < 0:
            raise ValueError("end_exclude must be >= 0")
        self.features = validate_features(features)
        self.n_frames, self.n_features = self.features.shape
        self.range_starts, self.range_stops = validate_ranges(range_starts, range_stops, self.n_frames)
        self.backend = backend
        self.end_exclude = int(end_exclude)
        self.rules = validate_rules(rules, self.n_frames)
        self._features_t = None
        self._cache: OrderedDict = OrderedDict()
        self.build_seconds = 0.0  # time spent building the structure for the last new mask
        self.mask = None
        self._valid, self._index = self._structure(None)

    # -- structures -------------------------------------------------------------------------------
    def _build(self, mask):
        t0 = time.perf_counter()
        valid = searchable_frames(self.range_starts, self.range_stops, self.n_frames, self.end_exclude, mask)
        cost, enter, allowed = self.rules
        if allowed is not None:
            valid &= allowed
        others = valid if enter is None else valid & enter
        if self.backend == "brute_numpy":
            if self._features_t is None:
                self._features_t = np.ascontiguousarray(self.features.T)
            index = _NumpyIndex(self._features_t, others, cost)
        elif self.backend == "brute":
            index = BruteIndex(self.features, others, cost)
        else:
            index = AabbIndex(self.features, others, self.range_starts, frame_cost=cost)
        self.build_seconds = time.perf_counter() - t0
        return valid, index

    def _structure(self, mask):
        mask = validate_mask(mask, self.n_frames)
        key = None if mask is None else hashlib.blake2b(np.packbits(mask).tobytes(), digest_size=16).digest()
        hit = self._cache.get(key)
        if hit is None:
            hit = self._build(mask)
            self._cache[key] = hit
            if len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return hit

    def set_mask(self, mask) -> None:
        """Restrict the search to frames where `mask` (bool (N,)) is True; None allows all.

        Structures are cached by mask content, so switching back to an earlier mask is free.
        """
        self._valid, self._index = self._structure(mask)
        self.mask = None if mask is None else np.asarray(mask, dtype=bool)

    @property
    def index_arrays(self) -> tuple:
        """The arrays of the current mask's index (what it adds to the features in memory; None: absent)."""
        return self._index.arrays

    @property
    def searchable(self) -> np.ndarray:
        """Bool (N,): frames the search may return under the current mask."""
        return self._valid

    # -- queries ----------------------------------------------------------------------------------
    def _check_options(self, skip, bias):
        skip = int(skip)
        if skip < 0:
            raise ValueError("skip must be >= 0")
        bias = float(bias)
        if bias != bias:
            raise ValueError("bias must not be NaN")
        return skip, bias

    def prepare(self, mask) -> "PreparedMask":
        """A handle for `mask` to pass as search(..., mask=handle): the per-mask index is looked up
        once instead of hashing the mask on every call (what a character with a style filter wants)."""
        valid, index = self._structure(mask)
        return PreparedMask(valid, index)

    def mask_structure(self, mask):
        """(valid, index) for a search call's mask: None (the set_mask one), a bool array or a prepared handle."""
        if mask is None:
            return self._valid, self._index
        if type(mask) is PreparedMask:
            return mask.valid, mask.index
        return self._structure(mask)

    def search(self, query, current: int = -1, skip: int = 0, bias: float = 0.0, *, mask=None):
        """Best frame for one query (F,): returns (frame, cost) with cost the squared distance.

        current: the playing frame or -1. skip: frames with 0 < |f - current| <= skip are excluded.
        bias: the current frame is kept unless another frame's cost is lower by more than bias.
        mask: optional bool (N,) or a prepare()d handle, for this call only (default: the mask given to
        set_mask).
        Returns (-1, inf) when no frame is searchable.
        """
        q = query
        if not (type(q) is np.ndarray and q.dtype == np.float32 and q.flags.c_contiguous):
            q = np.ascontiguousarray(q, dtype=np.float32)
        if q.shape != (self.n_features,):
            raise ValueError(f"query must have shape ({self.n_features},), got {q.shape}")
        current = int(current)
        if not -1 <= current < self.n_frames:
            raise ValueError(f"current frame {current} outside [-1, {self.n_frames})")
        skip, bias = self._check_options(skip, bias)
        valid, index = self.mask_structure(mask)
        frame, cost = index.search(self.features, valid, q, current, skip, bias)
        if frame == -2:
            raise ValueError("query holds a non-finite value")
        return int(frame), float(cost)

    def search_batch(self, queries, current=None, skip: int = 0, bias: float = 0.0, *, mask=None):
        """Best frames for queries (B, F); current: (B,) ints, a single int, or None (= -1 for all).

        mask: as for `search` (None, bool (N,) or a prepare()d handle).
        Returns frames (B,) int64 and costs (B,) float64, each exactly as `search` would give.
        """
        q = np.ascontiguousarray(queries, dtype=np.float32)
        if q.ndim != 2 or q.shape[1] != self.n_features:
            raise ValueError(f"queries must have shape (B, {self.n_features}), got {q.shape}")
        if not np.isfinite(q).all():
            raise ValueError("queries hold a non-finite value")
        if current is None:
            current = -1
        cur = np.ascontiguousarray(np.broadcast_to(np.asarray(current, dtype=np.int64), (len(q),)))
        if len(cur) and (cur.min() < -1 or cur.max() >= self.n_frames):
            raise ValueError(f"current frames must lie in [-1, {self.n_frames})")
        skip, bias = self._check_options(skip, bias)
        valid, index = self.mask_structure(mask)
        frames = np.empty(len(q), dtype=np.int64)
        costs = np.empty(len(q), dtype=np.float64)
        index.search_batch(self.features, valid, q, cur, skip, bias, frames, costs)
        return frames, costs
