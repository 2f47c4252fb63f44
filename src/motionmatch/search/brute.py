"""Brute-force search: a plain numpy reference and a numba kernel (same answers, see common.py)."""
from __future__ import annotations

import numba
import numpy as np

from .common import canonical_costs, decide

__all__ = ["brute_numpy", "BruteIndex", "brute_kernel", "make_tiles", "tile_costs", "row_cost", "TILE"]

TILE = 16  # rows per tile: tile_costs is written for exactly this


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


@numba.njit(cache=True, nogil=True, inline="always")
def tile_costs(tiles, s, q):
    """Canonical costs of the 16 rows of tile s ((F, 16) block), as a 16-tuple.

    Sixteen scalar accumulators rather than an array: LLVM keeps them in registers and vectorizes
    across rows (an accumulator array, or writing the sums to an output array, measured 8-10x slower).
    """
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = a8 = a9 = a10 = a11 = a12 = a13 = a14 = a15 = np.float32(0.0)
    for j in range(q.shape[0]):
        qj = q[j]
        t = tiles[s, j]
        d0 = t[0] - qj
        a0 += d0 * d0
        d1 = t[1] - qj
        a1 += d1 * d1
        d2 = t[2] - qj
        a2 += d2 * d2
        d3 = t[3] - qj
        a3 += d3 * d3
        d4 = t[4] - qj
        a4 += d4 * d4
        d5 = t[5] - qj
        a5 += d5 * d5
        d6 = t[6] - qj
        a6 += d6 * d6
        d7 = t[7] - qj
        a7 += d7 * d7
        d8 = t[8] - qj
        a8 += d8 * d8
        d9 = t[9] - qj
        a9 += d9 * d9
        d10 = t[10] - qj
        a10 += d10 * d10
        d11 = t[11] - qj
        a11 += d11 * d11
        d12 = t[12] - qj
        a12 += d12 * d12
        d13 = t[13] - qj
        a13 += d13 * d13
        d14 = t[14] - qj
        a14 += d14 * d14
        d15 = t[15] - qj
        a15 += d15 * d15
    return (a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15)


@numba.njit(cache=True, nogil=True)
def finish(current, cur_ok, cur_cost, best_frame, best_cost, bias):
    """The continuing-pose rule in numba (same as common.decide)."""
    if cur_ok and (best_frame < 0 or np.float64(cur_cost) <= np.float64(best_cost) + bias):
        return current, np.float64(cur_cost)
    if best_frame >= 0:
        return best_frame, np.float64(best_cost)
    return -1, np.inf


@numba.njit(cache=True, nogil=True)
def brute_kernel(features, valid, tiles, tile_frames, q, current, skip, bias):
    """Brute force over all tiles (the searchable frames in frame order, 16 per (F, 16) tile).

    Returns (frame, cost); frame -2 flags a non-finite query.
    """
    nf = q.shape[0]
    for j in range(nf):
        if not np.isfinite(q[j]):
            return -2, np.nan
    best_cost = np.float32(np.inf)
    best_frame = -1
    for s in range(tiles.shape[0]):
        acc = tile_costs(tiles, s, q)
        for k in range(16):
            if acc[k] < best_cost:  # strict: frame order, so equal costs keep the lower frame
                f = tile_frames[s, k]
                if f < 0:
                    break  # padding lanes come last
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
def brute_batch_kernel(features, valid, tiles, tile_frames, queries, currents, skip, bias, out_frames,
                       out_costs):
    for i in numba.prange(queries.shape[0]):
        f, c = brute_kernel(features, valid, tiles, tile_frames, queries[i], currents[i], skip, bias)
        out_frames[i] = f
        out_costs[i] = c


def make_tiles(features: np.ndarray, frames: np.ndarray, tile_start: np.ndarray):
    """Pack rows `frames` (increasing) into (T, F, 16) tiles starting at positions `tile_start`.

    Returns tiles and tile_frames (T, 16) int64 with -1 in the padding lanes (which hold zeros).
    """
    nf = features.shape[1]
    count = np.diff(np.append(tile_start, len(frames)))
    lane = np.arange(TILE)
    used = lane[None, :] < count[:, None]
    idx = np.where(used, tile_start[:, None] + lane[None, :], 0)
    if len(tile_start) == 0:
        return np.zeros((0, nf, TILE), np.float32), np.zeros((0, TILE), np.int64)
    tiles = features[frames[idx]]  # (T, 16, F)
    tiles[~used] = 0.0
    return np.ascontiguousarray(tiles.transpose(0, 2, 1)), np.where(used, frames[idx], -1).astype(np.int64)


class BruteIndex:
    """The searchable frames of one mask packed in tiles, in frame order."""

    def __init__(self, features: np.ndarray, valid: np.ndarray):
        frames = np.flatnonzero(valid)
        self.tiles, self.tile_frames = make_tiles(features, frames, np.arange(0, len(frames), TILE))

    def search(self, features, valid, q, current, skip, bias):
        return brute_kernel(features, valid, self.tiles, self.tile_frames, q, current, skip, bias)

    def search_batch(self, features, valid, queries, currents, skip, bias, out_frames, out_costs):
        brute_batch_kernel(features, valid, self.tiles, self.tile_frames, queries, currents, skip, bias,
                           out_frames, out_costs)
