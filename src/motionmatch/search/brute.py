"""Brute-force search: a plain numpy reference and a numba kernel (same answers, see common.py)."""
from __future__ import annotations

import numba
import numpy as np

from .common import canonical_costs, decide

__all__ = ["brute_numpy", "BruteIndex", "brute_kernel"]

_BLOCK = 256  # rows per block: the block's costs stay in registers/L1 while the columns stream


def brute_numpy(features_t: np.ndarray, valid: np.ndarray, query: np.ndarray, current: int = -1,
                skip: int = 0, bias: float = 0.0) -> tuple[int, float]:
    """Reference search over all frames; `features_t` is the (F, N) transpose, `valid` bool (N,)."""
    cost = canonical_costs(features_t, query)
    others = valid.copy()
    cur_ok, cur_cost = False, float("inf")
    if current >= 0:
        others[max(0, current - skip):current + skip + 1] = False
        cur_ok, cur_cost = bool(valid[current]), float(cost[current])
    idx = np.flatnonzero(others)
    best_frame, best_cost = -1, float("inf")
    if len(idx):
        k = int(np.argmin(cost[idx]))  # first minimum: lowest frame index among ties
        best_frame, best_cost = int(idx[k]), float(cost[idx[k]])
    return decide(current, cur_ok, cur_cost, best_frame, best_cost, bias)


@numba.njit(cache=True, nogil=True)
def row_cost(features, f, q):
    """Canonical cost of one row (sequential float32 sum in column order)."""
    c = np.float32(0.0)
    for j in range(q.shape[0]):
        d = features[f, j] - q[j]
        c += d * d
    return c


@numba.njit(cache=True, nogil=True)
def finish(current, cur_ok, cur_cost, best_frame, best_cost, bias):
    """The continuing-pose rule in numba (same as common.decide)."""
    if cur_ok and (best_frame < 0 or np.float64(cur_cost) <= np.float64(best_cost) + bias):
        return current, np.float64(cur_cost)
    if best_frame >= 0:
        return best_frame, np.float64(best_cost)
    return -1, np.inf


@numba.njit(cache=True, nogil=True)
def brute_kernel(features, valid, xt, rows, q, current, skip, bias):
    """Brute force over the compacted searchable rows `xt` (F, M) whose frame numbers are `rows` (M,).

    Costs of a block of rows are accumulated column by column, which vectorizes across rows without
    reordering any sum (no fastmath needed: each row's sum keeps the canonical order).
    """
    nf, m = xt.shape
    acc = np.empty(_BLOCK, dtype=np.float32)
    best_cost = np.float32(np.inf)
    best_frame = -1
    for b0 in range(0, m, _BLOCK):
        n = min(_BLOCK, m - b0)
        for k in range(n):
            acc[k] = 0.0
        for j in range(nf):
            qj = q[j]
            for k in range(n):
                d = xt[j, b0 + k] - qj
                acc[k] += d * d
        for k in range(n):
            if acc[k] < best_cost:
                f = rows[b0 + k]
                if current < 0 or abs(f - current) > skip:
                    best_cost = acc[k]
                    best_frame = f
    cur_ok = False
    cur_cost = np.float32(np.inf)
    if current >= 0:
        cur_cost = row_cost(features, current, q)
        cur_ok = valid[current]
    return finish(current, cur_ok, cur_cost, best_frame, best_cost, bias)


@numba.njit(cache=True, nogil=True, parallel=True)
def brute_batch_kernel(features, valid, xt, rows, queries, currents, skip, bias, out_frames, out_costs):
    for i in numba.prange(queries.shape[0]):
        f, c = brute_kernel(features, valid, xt, rows, queries[i], currents[i], skip, bias)
        out_frames[i] = f
        out_costs[i] = c


class BruteIndex:
    """Compacted, transposed searchable rows for one mask (what brute_kernel scans)."""

    def __init__(self, features: np.ndarray, valid: np.ndarray):
        self.rows = np.flatnonzero(valid).astype(np.int64)
        self.xt = np.ascontiguousarray(features[self.rows].T)

    def search(self, features, valid, q, current, skip, bias):
        return brute_kernel(features, valid, self.xt, self.rows, q, current, skip, bias)

    def search_batch(self, features, valid, queries, currents, skip, bias, out_frames, out_costs):
        brute_batch_kernel(features, valid, self.xt, self.rows, queries, currents, skip, bias,
                           out_frames, out_costs)
