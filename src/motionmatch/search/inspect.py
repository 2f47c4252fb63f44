"""Why did the search pick that frame: the k best candidates of one query, each with its cost split per
feature channel, plus the cost of simply continuing the playing frame.

Pure functions over the same normalized features the search uses; the costs are the canonical ones of
`common.py` (float32 sums in column order), so the best candidate is exactly the search's answer (the
continuing-pose rule included: see `inspect_search`).
"""
from __future__ import annotations

import numpy as np

from .common import canonical_costs, decide, searchable_frames

__all__ = ["inspect_search"]


def inspect_search(features: np.ndarray, query: np.ndarray, channel_slices: dict, range_starts, range_stops,
                   k: int = 8, current: int = -1, skip: int = 0, bias: float = 0.0, mask=None,
                   end_exclude: int = 20, features_t: np.ndarray | None = None) -> dict:
    """Top-k candidates of one search, in cost order.

    features: (N, F) normalized features; query: (F,) normalized query; channel_slices: {channel name:
    slice of feature columns}; range_starts/stops, mask, end_exclude, current, skip, bias: as
    `Searcher.search`. features_t: the (F, N) contiguous transpose if the caller keeps one (faster).

    Returns {"best": frame the search returns (-1 if none), "best_cost", "jumped": best != current,
    "candidates": [{"frame", "cost", "channels": {name: cost}}] (the k lowest-cost frames other than
    current and its skip window, lowest frame first among ties), "continue": None or {"frame": current,
    "cost", "channels", "searchable"} (the playing frame's own cost, counted by the search only when
    searchable)}. Costs are squared normalized distances.
    """
    x = np.ascontiguousarray(features, dtype=np.float32)
    q = np.ascontiguousarray(query, dtype=np.float32)
    if q.shape != (x.shape[1],):
        raise ValueError(f"query must have shape ({x.shape[1]},), got {q.shape}")
    n = x.shape[0]
    ft = features_t if features_t is not None else np.ascontiguousarray(x.T)
    cost = canonical_costs(ft, q)
    valid = searchable_frames(np.asarray(range_starts, dtype=np.int64), np.asarray(range_stops, dtype=np.int64),
                              n, int(end_exclude), None if mask is None else np.asarray(mask, dtype=bool))
    others = valid.copy()
    if current >= 0:
        others[max(0, current - skip):current + skip + 1] = False
    idx = np.flatnonzero(others)
    k = max(0, min(int(k), len(idx)))
    if k:
        part = idx[np.argpartition(cost[idx], k - 1)[:k]] if k < len(idx) else idx
        # Stable order: cost, then frame (the search keeps the lowest frame among equal costs).
        top = part[np.lexsort((part, cost[part]))]
        # argpartition may cut inside a run of equal costs; the lowest frames of that run belong in.
        edge = cost[top[-1]]
        tied = idx[cost[idx] == edge]
        top = np.concatenate((top[cost[top] < edge], tied))[:k]
    else:
        top = np.zeros(0, dtype=np.int64)

    def split(f: int) -> dict:
        d = x[f] - q
        d *= d
        return {name: float(d[sl].sum()) for name, sl in channel_slices.items()}

    candidates = [{"frame": int(f), "cost": float(cost[f]), "channels": split(int(f))} for f in top]
    cont = None
    cur_ok, cur_cost = False, float("inf")
    if current >= 0:
        cur_ok, cur_cost = bool(valid[current]), float(cost[current])
        cont = {"frame": int(current), "cost": cur_cost, "channels": split(int(current)), "searchable": cur_ok}
    best_frame, best_cost = (int(top[0]), float(cost[top[0]])) if len(top) else (-1, float("inf"))
    best, best_cost = decide(int(current), cur_ok, cur_cost, best_frame, best_cost, float(bias))
    return {"best": best, "best_cost": best_cost, "jumped": best >= 0 and best != current,
            "candidates": candidates, "continue": cont}
