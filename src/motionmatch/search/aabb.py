"""Exact two-level bounding-box search (after Holden et al. 2020), in numba.

Layout, built per mask from the searchable frames only (end-excluded and masked-out frames are dropped,
so the boxes are tighter):

- segments: maximal runs of consecutive searchable frames inside one clip; boxes never span two;
- small boxes of up to 16 consecutive frames, large boxes of up to 64 (4 small boxes), both starting at
  their segment's start;
- large-box bounds are stored column-major (F, L): the query's distance to every large box is computed
  in one SIMD pass (no early exit; cheaper than branching per box);
- the 4 small boxes of a large box are stored interleaved (L, F, 4), so their 4 distances are one SIMD
  pass too; missing small boxes have empty bounds (+inf, -inf) and hence an infinite distance;
- each small box's rows are stored as an (F, 16) tile, so its 16 canonical costs are computed with SIMD
  across rows, in the canonical column order (exact: see common.py).

Search: the bound starts at cost(current) - bias (when the current frame counts), lowered by the frames
just after the skipped window; then the large box nearest to the query is searched first, then all
others in frame order, skipping boxes whose distance exceeds the bound.

Pruning is exact: a box is skipped only if its distance exceeds best * (1 + 4 F 2**-24); the margin
covers rounding (the box distance is also summed in float32), so a frame that could tie or beat the best
is never pruned. Equal costs keep the lowest frame index even though one box is visited out of order.
"""
from __future__ import annotations

import numba
import numpy as np

from ._simd import box4_distances, tile16_costs
from .brute import TILE, finish, make_tiles, row_cost
from .common import segments_of

__all__ = ["AabbIndex", "SMALL", "LARGE", "aabb_kernel"]

SMALL = TILE  # 16
LARGE = 64
_PER_LARGE = LARGE // SMALL  # 4: the kernel's small-box loop is written for this


@numba.njit(cache=True, nogil=True, inline="always")
def _visit_large(lg, thr, best, best_frame, sm_lo, sm_hi, tiles, tile_frames, lg_first, q, current, skip,
                 rtol):
    """Search large box `lg`: distances to its 4 small boxes, then the tiles of those that pass."""
    a0, a1, a2, a3 = box4_distances(sm_lo, sm_hi, lg, q)
    s0 = lg_first[lg]
    for k in range(lg_first[lg + 1] - s0):
        a = a0 if k == 0 else (a1 if k == 1 else (a2 if k == 2 else a3))
        if a > thr:
            continue
        s = s0 + k
        acc = tile16_costs(tiles, s, q)
        for r in range(16):
            c = acc[r]
            if c <= best:
                f = tile_frames[s, r]
                if f < 0:
                    break  # padding lanes come last
                if c == best and (best_frame < 0 or f >= best_frame):
                    continue  # equal cost: the lower frame (or the current frame's bound) stays
                if current >= 0 and abs(f - current) <= skip:
                    continue
                best = np.float64(c)
                best_frame = f
                thr = best + abs(best) * rtol
    return thr, best, best_frame


@numba.njit(cache=True, nogil=True)
def aabb_kernel(features, valid, tiles, tile_frames, sm_lo, sm_hi, lg_lo, lg_hi, lg_first,
                q, current, skip, bias, rtol, n_seed):
    """One exact search; see the module docstring and common.py for the semantics.

    Returns (frame, cost); frame -2 flags a non-finite query.
    """
    nf = q.shape[0]
    for j in range(nf):
        if not np.isfinite(q[j]):
            return -2, np.nan
    best = np.inf  # float64: holds float32 costs exactly, or the bound from the current frame
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
                # Other frames matter only below cost(current) - bias; the slack absorbs the float64
                # rounding of the final comparison, which finish() makes exactly.
                c64 = np.float64(cur_cost)
                best = c64 - bias + 1e-9 * (abs(c64) + abs(bias)) + 1e-30
        # Frames just past the skipped window often continue the current motion: cheap early bound.
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
    n_lg = lg_lo.shape[1]
    lb = np.zeros(n_lg, dtype=np.float32)
    for j in range(nf):
        qj = q[j]
        lo = lg_lo[j]
        hi = lg_hi[j]
        for g in range(n_lg):
            d = max(lo[g] - qj, np.float32(0.0)) + max(qj - hi[g], np.float32(0.0))
            lb[g] += d * d
    thr = best + abs(best) * rtol
    g0 = -1
    m = np.float32(np.inf)
    for g in range(n_lg):
        if lb[g] < m:
            m = lb[g]
            g0 = g
    if g0 >= 0 and lb[g0] <= thr:
        thr, best, best_frame = _visit_large(g0, thr, best, best_frame, sm_lo, sm_hi, tiles, tile_frames,
                                             lg_first, q, current, skip, rtol)
    for g in range(n_lg):
        if lb[g] > thr or g == g0:
            continue
        thr, best, best_frame = _visit_large(g, thr, best, best_frame, sm_lo, sm_hi, tiles, tile_frames,
                                             lg_first, q, current, skip, rtol)
    bc = np.float32(best) if best_frame >= 0 else np.float32(np.inf)
    return finish(current, cur_ok, cur_cost, best_frame, bc, bias)


@numba.njit(cache=True, nogil=True, parallel=True)
def aabb_batch_kernel(features, valid, tiles, tile_frames, sm_lo, sm_hi, lg_lo, lg_hi, lg_first,
                      queries, currents, skip, bias, rtol, n_seed, out_frames, out_costs):
    for i in numba.prange(queries.shape[0]):
        f, c = aabb_kernel(features, valid, tiles, tile_frames, sm_lo, sm_hi, lg_lo, lg_hi, lg_first,
                           queries[i], currents[i], skip, bias, rtol, n_seed)
        out_frames[i] = f
        out_costs[i] = c


class AabbIndex:
    """Two-level box index over the searchable frames `valid` (bool (N,)) of one mask."""

    def __init__(self, features: np.ndarray, valid: np.ndarray, range_starts: np.ndarray, n_seed: int = 4):
        nf = features.shape[1]
        self.rtol = 4.0 * nf * 2.0 ** -24
        self.n_seed = int(n_seed)
        seg_start, seg_stop = segments_of(valid, range_starts)
        lengths = seg_stop - seg_start
        rows = np.flatnonzero(valid)  # increasing: compacted order keeps frame order
        n_rows = len(rows)
        # position of each searchable frame within its segment
        seg_first = (np.cumsum(lengths) - lengths).astype(np.int64)
        pos = np.arange(n_rows) - np.repeat(seg_first, lengths)
        sm_start = np.flatnonzero(pos % SMALL == 0)
        n_sm = len(sm_start)
        self.tiles, self.tile_frames = make_tiles(features, rows, sm_start)
        x = features[rows]
        lg_sm = np.flatnonzero(pos[sm_start] % LARGE == 0) if n_sm else np.zeros(0, np.int64)
        self.lg_first = np.append(lg_sm, n_sm).astype(np.int64)
        n_lg = len(lg_sm)
        if n_sm:
            sm_min = np.minimum.reduceat(x, sm_start, axis=0)
            sm_max = np.maximum.reduceat(x, sm_start, axis=0)
            lg_min = np.minimum.reduceat(sm_min, lg_sm, axis=0)
            lg_max = np.maximum.reduceat(sm_max, lg_sm, axis=0)
        else:
            sm_min = sm_max = np.zeros((0, nf), np.float32)
            lg_min = lg_max = np.zeros((0, nf), np.float32)
        self.lg_lo = np.ascontiguousarray(lg_min.T, dtype=np.float32)  # (F, L)
        self.lg_hi = np.ascontiguousarray(lg_max.T, dtype=np.float32)
        # small boxes grouped 4 per large box, interleaved (L, F, 4); empty slots never pass
        slot = np.arange(n_sm) - np.repeat(lg_sm, np.diff(self.lg_first))
        owner = np.repeat(np.arange(n_lg), np.diff(self.lg_first))
        sm_lo = np.full((n_lg, _PER_LARGE, nf), np.inf, dtype=np.float32)
        sm_hi = np.full((n_lg, _PER_LARGE, nf), -np.inf, dtype=np.float32)
        sm_lo[owner, slot] = sm_min
        sm_hi[owner, slot] = sm_max
        self.sm_lo = np.ascontiguousarray(sm_lo.transpose(0, 2, 1))
        self.sm_hi = np.ascontiguousarray(sm_hi.transpose(0, 2, 1))
        self.n_frames = n_rows

    def _args(self):
        return (self.tiles, self.tile_frames, self.sm_lo, self.sm_hi, self.lg_lo, self.lg_hi, self.lg_first)

    def search(self, features, valid, q, current, skip, bias):
        return aabb_kernel(features, valid, *self._args(), q, current, skip, bias, self.rtol, self.n_seed)

    def search_batch(self, features, valid, queries, currents, skip, bias, out_frames, out_costs):
        aabb_batch_kernel(features, valid, *self._args(), queries, currents, skip, bias, self.rtol,
                          self.n_seed, out_frames, out_costs)
