"""Shared definitions of the search problem: validation, searchable frames, the canonical cost, the decision rule.

Every back-end answers the same question, exactly:

- searchable frames: inside a clip range [start, stop - end_exclude) and allowed by the mask;
- "others": searchable frames f the search may enter with f != current and, when current >= 0,
  |f - current| > skip (skip=0 therefore excludes only the current frame itself; skip=k also excludes the k
  frames on each side);
- cost(f) = sum over j = 0..F-1, in that order, of (query[j] - features[f, j])**2 accumulated in float32
  (the canonical cost; all back-ends compute exactly this number, so ties and results are identical),
  plus, with FrameRules.cost, that frame's cost added in float32 once the sum is complete;
- best_other = the other with the lowest cost, the lowest frame index among equal costs;
- the current frame counts only when it is searchable; then it wins if
  cost(current) <= cost(best_other) + bias (compared in float64), so at bias=0 it also wins ties;
- otherwise best_other is returned; with nothing searchable the answer is (-1, inf).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["FrameRules", "validate_rules", "validate_features", "validate_ranges", "searchable_frames", "segments_of", "canonical_costs",
           "decide", "validate_mask"]


class FrameRules(NamedTuple):
    """What annotations (posedb/annotations.py) tell the search about frames; each None when absent.

    cost: float32 (N,) finite, added to a frame's cost (also the current frame's);
    enter: bool (N,), the frames the search may enter (jump to); the current frame continues whatever it says;
    allowed: bool (N,), the frames that may be a result at all (the current frame too), like a mask.
    """

    cost: np.ndarray | None = None
    enter: np.ndarray | None = None
    allowed: np.ndarray | None = None


def validate_rules(rules, n_frames: int) -> FrameRules:
    """FrameRules with contiguous arrays of N frames (None: no rules)."""
    if rules is None:
        return FrameRules()
    cost, enter, allowed = rules
    if cost is not None:
        cost = np.ascontiguousarray(cost, dtype=np.float32)
        if cost.shape != (n_frames,) or not np.isfinite(cost).all():
            raise ValueError(f"rules.cost must be finite float32 ({n_frames},)")
    out = [cost]
    for name, m in (("enter", enter), ("allowed", allowed)):
        if m is not None:
            m = np.ascontiguousarray(m)
            if m.dtype != np.bool_ or m.shape != (n_frames,):
                raise ValueError(f"rules.{name} must be bool ({n_frames},)")
        out.append(m)
    return FrameRules(*out)


def validate_features(features) -> np.ndarray:
    """(N, F) float32 C-contiguous, finite."""
    x = np.ascontiguousarray(features, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] == 0:
        raise ValueError(f"features must be (N, F) with F > 0, got shape {x.shape}")
    if not np.isfinite(x).all():
        bad = np.argwhere(~np.isfinite(x))[0]
        raise ValueError(f"features hold a non-finite value at frame {bad[0]}, column {bad[1]}")
    return x


def validate_ranges(range_starts, range_stops, n_frames: int) -> tuple[np.ndarray, np.ndarray]:
    """int64 starts, stops (stop exclusive) sorted by start; ranges must lie in [0, N] and not overlap."""
    starts = np.asarray(range_starts, dtype=np.int64).reshape(-1)
    stops = np.asarray(range_stops, dtype=np.int64).reshape(-1)
    if starts.shape != stops.shape:
        raise ValueError(f"{len(starts)} range starts but {len(stops)} range stops")
    order = np.argsort(starts, kind="stable")
    starts, stops = starts[order], stops[order]
    if len(starts) and (starts.min() < 0 or stops.max() > n_frames or np.any(stops < starts)):
        raise ValueError(f"ranges must satisfy 0 <= start <= stop <= N={n_frames}")
    if len(starts) > 1 and np.any(starts[1:] < stops[:-1]):
        i = int(np.flatnonzero(starts[1:] < stops[:-1])[0])
        raise ValueError(f"ranges overlap: [{starts[i]}, {stops[i]}) and [{starts[i + 1]}, {stops[i + 1]})")
    return starts, stops


def searchable_frames(starts: np.ndarray, stops: np.ndarray, n_frames: int, end_exclude: int,
                      mask: np.ndarray | None) -> np.ndarray:
    """Bool (N,): in a range [start, stop - end_exclude) and allowed by `mask`."""
    valid = np.zeros(n_frames, dtype=bool)
    for s, e in zip(starts.tolist(), np.maximum(stops - end_exclude, starts).tolist()):
        valid[s:e] = True
    if mask is not None:
        valid &= mask
    return valid


def segments_of(valid: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Maximal runs of searchable frames, split at range starts (a run never spans two clips)."""
    n = len(valid)
    is_start = np.zeros(n, dtype=bool)
    is_start[starts[starts < n]] = True
    prev = np.concatenate(([False], valid[:-1]))
    seg_begin = valid & (~prev | is_start)
    nxt_begin = np.concatenate((seg_begin[1:], [True]))
    nxt_valid = np.concatenate((valid[1:], [False]))
    seg_end = valid & (~nxt_valid | nxt_begin)
    return np.flatnonzero(seg_begin), np.flatnonzero(seg_end) + 1


def validate_mask(mask, n_frames: int) -> np.ndarray | None:
    if mask is None:
        return None
    m = np.asarray(mask)
    if m.dtype != np.bool_ or m.shape != (n_frames,):
        raise ValueError(f"mask must be bool ({n_frames},), got {m.dtype} {m.shape}")
    return np.ascontiguousarray(m)


def canonical_costs(features_t: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Canonical float32 costs of all rows; `features_t` is the (F, N) transpose (contiguous columns)."""
    cost = np.zeros(features_t.shape[1], dtype=np.float32)
    for j in range(features_t.shape[0]):
        d = features_t[j] - query[j]
        cost += d * d
    return cost


def decide(current: int, cur_ok: bool, cur_cost: float, best_frame: int, best_cost: float,
           bias: float) -> tuple[int, float]:
    """The continuing-pose rule (see module docstring)."""
    if cur_ok and (best_frame < 0 or float(cur_cost) <= float(best_cost) + bias):
        return int(current), float(cur_cost)
    if best_frame >= 0:
        return int(best_frame), float(best_cost)
    return -1, float("inf")
