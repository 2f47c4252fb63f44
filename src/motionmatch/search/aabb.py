"""Exact two-level bounding-box search (after Holden et al. 2020), in numba.

Layout, built per mask from the searchable frames only (end-excluded and masked-out frames are dropped,
so the boxes are tighter):

- segments: maximal runs of consecutive searchable frames inside one clip; boxes never span two;
- small boxes of up to 16 consecutive frames, large boxes of up to 64 (4 small boxes), both starting at
  their segment's start;
- each small box's rows are stored as a (F, 16) tile, so the 16 canonical costs are computed with SIMD
  across rows, in the canonical column order (exact, no partial-sum tricks at the leaves);
- box bounds are stored with the columns ordered by decreasing variance, so the box distance (a lower
  bound, accumulated with an early exit) passes the pruning threshold after fewer columns.

Pruning is exact: a box is skipped only if its lower bound, computed in the permuted order, exceeds
best * (1 + 4 F 2**-24); that margin covers the rounding difference between summation orders, so a
frame whose canonical cost could tie or beat the best is never pruned.
"""
from __future__ import annotations

import numba
import numpy as np

from .brute import finish, row_cost
from .common import segments_of

__all__ = ["AabbIndex", "SMALL", "LARGE"]

SMALL = 16
LARGE = 64
_PER_LARGE = LARGE // SMALL


@numba.njit(cache=True, nogil=True, inline="always")
def _box_lb(bounds, b, qp, thr):
    """Squared distance from the query (permuted columns) to box b, stopping once it exceeds thr."""
    lb = np.float32(0.0)
    for j in range(qp.shape[0]):
        v = qp[j]
        lo = bounds[b, j, 0]
        hi = bounds[b, j, 1]
        if v < lo:
            d = lo - v
            lb += d * d
        elif v > hi:
            d = v - hi
            lb += d * d
        if lb > thr:
            return lb
    return lb


@numba.njit(cache=True, nogil=True)
def aabb_kernel(features, valid, tiles, tile_frames, sm_bounds, lg_bounds, lg_first, perm,
                q, current, skip, bias, rtol, n_seed):
    """One exact search; see the module docstring and common.py for the semantics."""
    nf = q.shape[0]
    qp = np.empty(nf, dtype=np.float32)
    for j in range(nf):
        qp[j] = q[perm[j]]
    best = np.inf  # float64: holds float32 costs exactly, or the seeded bound
    best_frame = -1
    cur_ok = False
    cur_cost = np.float32(np.inf)
    if current >= 0:
        cur_cost = row_cost(features, current, q)
        cur_ok = valid[current]
        if cur_ok:
            if bias == np.inf:
                return current, np.float64(cur_cost)
            if bias != -np.inf:
                # Others matter only below cost(current) - bias; the slack absorbs float64 rounding of
                # the final comparison, which finish() makes exactly.
                c64 = np.float64(cur_cost)
                best = c64 - bias + 1e-9 * (abs(c64) + abs(bias)) + 1e-30
        # Seeds: frames just past the skipped window often continue the current motion well.
        n = features.shape[0]
        for t in range(n_seed):
            f = current + skip + 1 + t
            if f >= n:
                break
            if valid[f]:
                c = row_cost(features, f, q)
                if c < best:
                    best = np.float64(c)
                    best_frame = f
    acc = np.empty(16, dtype=np.float32)
    thr = best + abs(best) * rtol
    n_lg = lg_bounds.shape[0]
    for lg in range(n_lg):
        if _box_lb(lg_bounds, lg, qp, thr) > thr:
            continue
        for s in range(lg_first[lg], lg_first[lg + 1]):
            if _box_lb(sm_bounds, s, qp, thr) > thr:
                continue
            for k in range(16):
                acc[k] = 0.0
            for j in range(nf):
                qj = q[j]
                for k in range(16):
                    d = tiles[s, j, k] - qj
                    acc[k] += d * d
            for k in range(16):
                c = acc[k]
                if c <= best:
                    f = tile_frames[s, k]
                    if f < 0:
                        break
                    if c == best and (best_frame < 0 or f >= best_frame):
                        continue  # equal cost: the lower frame index (or the seeded bound) stays
                    if current >= 0 and abs(f - current) <= skip:
                        continue
                    best = np.float64(c)
                    best_frame = f
                    thr = best + abs(best) * rtol
    bc = np.float32(best) if best_frame >= 0 else np.float32(np.inf)
    return finish(current, cur_ok, cur_cost, best_frame, bc, bias)


@numba.njit(cache=True, nogil=True, parallel=True)
def aabb_batch_kernel(features, valid, tiles, tile_frames, sm_bounds, lg_bounds, lg_first, perm,
                      queries, currents, skip, bias, rtol, n_seed, out_frames, out_costs):
    for i in numba.prange(queries.shape[0]):
        f, c = aabb_kernel(features, valid, tiles, tile_frames, sm_bounds, lg_bounds, lg_first, perm,
                           queries[i], currents[i], skip, bias, rtol, n_seed)
        out_frames[i] = f
        out_costs[i] = c


class AabbIndex:
    """Two-level box index over the searchable frames of one mask."""

    def __init__(self, features: np.ndarray, valid: np.ndarray, range_starts: np.ndarray,
                 perm: np.ndarray, n_seed: int = 4):
        nf = features.shape[1]
        self.perm = np.ascontiguousarray(perm, dtype=np.int64)
        self.rtol = 4.0 * nf * 2.0 ** -24
        self.n_seed = int(n_seed)
        seg_start, seg_stop = segments_of(valid, range_starts)
        lengths = seg_stop - seg_start
        rows = np.flatnonzero(valid)  # increasing, so compacted order keeps frame order
        # position of each compacted row within its segment
        seg_first_row = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
        pos = np.arange(len(rows)) - np.repeat(seg_first_row, lengths)
        sm_start = np.flatnonzero(pos % SMALL == 0)
        sm_count = np.diff(np.concatenate((sm_start, [len(rows)])))
        n_sm = len(sm_start)
        lane = np.arange(SMALL)
        idx = sm_start[:, None] + lane[None, :]
        used = lane[None, :] < sm_count[:, None]
        idx = np.where(used, idx, 0)
        x = features[rows] if len(rows) else np.zeros((0, nf), np.float32)
        tiles = x[idx] if n_sm else np.zeros((0, SMALL, nf), np.float32)
        tiles[~used] = 0.0
        self.tiles = np.ascontiguousarray(tiles.transpose(0, 2, 1))  # (S, F, 16)
        self.tile_frames = np.where(used, rows[idx] if n_sm else idx, -1).astype(np.int64)
        xp = x[:, self.perm]
        self.sm_bounds = _bounds(xp, sm_start)
        lg_sm = np.flatnonzero(pos[sm_start] % LARGE == 0) if n_sm else np.zeros(0, np.int64)
        self.lg_first = np.concatenate((lg_sm, [n_sm])).astype(np.int64)
        lg_min = np.minimum.reduceat(self.sm_bounds[:, :, 0], lg_sm, axis=0) if n_sm else np.zeros((0, nf))
        lg_max = np.maximum.reduceat(self.sm_bounds[:, :, 1], lg_sm, axis=0) if n_sm else np.zeros((0, nf))
        self.lg_bounds = np.ascontiguousarray(np.stack((lg_min, lg_max), axis=-1), dtype=np.float32)

    def search(self, features, valid, q, current, skip, bias):
        return aabb_kernel(features, valid, self.tiles, self.tile_frames, self.sm_bounds, self.lg_bounds,
                           self.lg_first, self.perm, q, current, skip, bias, self.rtol, self.n_seed)

    def search_batch(self, features, valid, queries, currents, skip, bias, out_frames, out_costs):
        aabb_batch_kernel(features, valid, self.tiles, self.tile_frames, self.sm_bounds, self.lg_bounds,
                          self.lg_first, self.perm, queries, currents, skip, bias, self.rtol, self.n_seed,
                          out_frames, out_costs)


def _bounds(xp: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """(B, F, 2) float32 min/max of the rows of each group starting at `starts`."""
    if len(starts) == 0:
        return np.zeros((0, xp.shape[1], 2), np.float32)
    lo = np.minimum.reduceat(xp, starts, axis=0)
    hi = np.maximum.reduceat(xp, starts, axis=0)
    return np.ascontiguousarray(np.stack((lo, hi), axis=-1), dtype=np.float32)
