"""Brute-force search: a plain numpy reference and a numba kernel (same answers, see common.py)."""
from __future__ import annotations

import numba
import numpy as np

from ._simd import tile64_costs_into
from .common import canonical_costs, decide

__all__ = ["brute_numpy", "BruteIndex", "brute_kernel", "make_tiles", "row_cost", "TILE"]

TILE = 16  # rows per tile: the SIMD kernels in _simd.py are written for exactly this


def brute_numpy(features_t: np.ndarray, valid: np.ndarray, query: np.ndarray, current: int = -1,
                skip: int = 0, bias: float = 0.0, others: np.ndarray | None = None,
                frame_cost: np.ndarray | None = None) -> tuple[int, float]:
    """Reference search over all frames; `features_t` is the (F, N) transpose, `valid` bool (N,); `others`
    (default `valid`) the frames it may jump to, `frame_cost` float32 (N,) added to every cost (common.py)."""
    cost = canonical_costs(features_t, query)
    if frame_cost is not None:
        cost = cost + frame_cost
    others = (valid if others is None else others).copy()
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
def brute_kernel(features, valid, tiles, tile_frames, tile_cost, frame_cost, q, current, skip, bias):
    """Brute force over all tiles (the frames a search may jump to, in frame order, 16 per (F, 16) tile).
    tile_cost (T, 16) and frame_cost (N,) float32: the per-frame cost added to each row's (annotations), or
    both None (numba compiles a version without them).

    Returns (frame, cost); frame -2 flags a non-finite query.
    """
    nf = q.shape[0]
    for j in range(nf):
        if not np.isfinite(q[j]):
            return -2, np.nan
    best_cost = np.float32(np.inf)
    best_frame = -1
    acc = np.empty(64, dtype=np.float32)
    for s in range(0, tiles.shape[0], 4):  # the tile count is a multiple of 4
        tile64_costs_into(tiles, s, q, acc)
        if tile_cost is not None:
            for k in range(64):
                acc[k] += tile_cost[s + k // 16, k % 16]
        for k in range(64):
            if acc[k] < best_cost:  # strict: frame order, so equal costs keep the lower frame
                f = tile_frames[s + k // 16, k % 16]
                if f < 0:
                    continue  # padding lane
                if current < 0 or abs(f - current) > skip:
                    best_cost = acc[k]
                    best_frame = f
    cur_ok = False
    cur_cost = np.float32(np.inf)
    if current >= 0:
        cur_cost = row_cost(features, current, q)
        if frame_cost is not None:
            cur_cost += frame_cost[current]
        cur_ok = valid[current]
    return finish(current, cur_ok, cur_cost, best_frame, best_cost, bias)


@numba.njit(cache=True, nogil=True, parallel=True)
def brute_batch_kernel(features, valid, tiles, tile_frames, tile_cost, frame_cost, queries, currents, skip, bias,
                       out_frames, out_costs):
    for i in numba.prange(queries.shape[0]):
        f, c = brute_kernel(features, valid, tiles, tile_frames, tile_cost, frame_cost, queries[i], currents[i],
                            skip, bias)
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
    """The frames a search may jump to (`others`, bool (N,)) of one mask packed in tiles, in frame order;
    frame_cost: float32 (N,) added to each frame's cost, or None."""

    def __init__(self, features: np.ndarray, others: np.ndarray, frame_cost: np.ndarray | None = None):
        frames = np.flatnonzero(others)
        tiles, tile_frames = make_tiles(features, frames, np.arange(0, len(frames), TILE))
        pad = -len(tiles) % 4  # brute_kernel takes 4 tiles (64 rows) at a time
        self.tiles = np.concatenate((tiles, np.zeros((pad,) + tiles.shape[1:], np.float32)))
        self.tile_frames = np.concatenate((tile_frames, np.full((pad, TILE), -1, np.int64)))
        if frame_cost is None:
            self.frame_cost = self.tile_cost = None
        else:
            self.frame_cost = np.ascontiguousarray(frame_cost, np.float32)
            self.tile_cost = np.where(self.tile_frames >= 0, self.frame_cost[np.maximum(self.tile_frames, 0)],
                                      np.float32(0.0)).astype(np.float32)

    @property
    def arrays(self) -> tuple:
        """The index's arrays (None where there is no frame cost)."""
        return self.tiles, self.tile_frames, self.tile_cost, self.frame_cost

    def search(self, features, valid, q, current, skip, bias):
        return brute_kernel(features, valid, self.tiles, self.tile_frames, self.tile_cost, self.frame_cost, q,
                            current, skip, bias)

    def search_batch(self, features, valid, queries, currents, skip, bias, out_frames, out_costs):
        brute_batch_kernel(features, valid, self.tiles, self.tile_frames, self.tile_cost, self.frame_cost,
                           queries, currents, skip, bias, out_frames, out_costs)
