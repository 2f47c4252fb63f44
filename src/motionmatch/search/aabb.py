"""Exact bounding-box tree search, in numba: small boxes of consecutive frames (after Holden et al.
2020) as leaves, grouped by similarity into a 16-ary tree instead of by time.

Layout, built per mask from the searchable frames only (end-excluded and masked-out frames are dropped,
so the boxes are tighter):

- leaves: boxes of up to 8 consecutive searchable frames inside one clip, each starting at a multiple of
  8 from its segment's start (a segment is a maximal run of searchable frames inside one clip). On the
  full Bandai-Namco database (722k frames) a query's exact answer lies below the box distance of a
  median 1,182 frames' leaves with 16-frame leaves, 96 with 8 (p99 20,626 and 1,672): small boxes bound
  far better in 27 dimensions. A leaf's canonical costs are one SIMD pass across its rows in the
  canonical column order (exact: see common.py), gathering the rows from the features where they lie,
  so no copy of the features is made (copying 78 MB cost more than the rest of the build);
- nodes: each holds the bounds of its up to 16 children interleaved (F, 16), so the query's distances to
  all of them are one SIMD pass; missing children have empty bounds (+inf, -inf). A node's leaves are
  split in two at the median of the leaf centres along their widest column (judged on a sample), four
  times over, giving 16 children of equal size (full subtrees).

Search: the bound starts at cost(current) - bias (when the current frame counts), lowered by the frames
just after the skipped window; then depth first from the root, the children within the bound pushed
nearest last (popped first), so the first leaves reached are near the query and the bound drops fast.
Costs and box distances are summed in three pieces of columns; partial sums only grow, so a leaf or node
whose every partial sum already exceeds the bound is left without reading the rest of it.

Pruning is exact: a box is skipped only if its distance exceeds best * (1 + 4 F 2**-24); the margin
covers rounding (the box distance is also summed in float32), so a frame that could tie or beat the best
is never pruned. Equal costs keep the lowest frame index whatever order the leaves are visited in.
"""
from __future__ import annotations

import numba
import numpy as np

from ._simd import box16_accumulate, rows16_accumulate
from .brute import finish, row_cost

__all__ = ["AabbIndex", "LEAF", "FANOUT", "aabb_kernel", "build_leaves", "build_tree"]

LEAF = 8  # frames per leaf (rows16_accumulate reads up to 16)
FANOUT = 16  # children per node: box16_accumulate computes exactly 16
_AXIS_SAMPLE = 64  # leaves looked at to choose a split column
_STACK = FANOUT * 18
_PIECES = 3  # costs and box distances are summed in this many column ranges, checked after each  # pending boxes: at most FANOUT per level; depth <= 17 for any N < 2**64 leaves


@numba.njit(cache=True, nogil=True)
def build_leaves(features, valid, range_starts):
    """Leaves of the searchable frames: first frame and frame count (S,), bounds lo, hi (S, F) and box
    centres (F, S) (column-major: a split reads one column). A leaf is up to LEAF consecutive searchable
    frames and never spans two clips or a gap."""
    n, nf = features.shape
    is_start = np.zeros(n, dtype=np.bool_)
    for s in range_starts:
        if s < n:
            is_start[s] = True
    first = np.empty(n, dtype=np.int64)  # untouched pages of np.empty cost nothing
    count = np.empty(n, dtype=np.int64)
    n_leaves = 0
    f = 0
    while f < n:
        if not valid[f]:
            f += 1
            continue
        e = f + 1
        while e < n and e - f < LEAF and valid[e] and not is_start[e]:
            e += 1
        first[n_leaves] = f
        count[n_leaves] = e - f
        n_leaves += 1
        f = e
    lo = np.empty((n_leaves, nf), dtype=np.float32)
    hi = np.empty((n_leaves, nf), dtype=np.float32)
    centres = np.empty((nf, n_leaves), dtype=np.float32)
    for s in range(n_leaves):
        a = lo[s]
        z = hi[s]
        r0 = features[first[s]]
        for j in range(nf):
            a[j] = r0[j]
            z[j] = r0[j]
        for f in range(first[s] + 1, first[s] + count[s]):
            row = features[f]
            for j in range(nf):
                a[j] = min(a[j], row[j])
                z[j] = max(z[j], row[j])
        # The centres come from the same pass (a second pass over lo and hi cost a tenth of the build).
        for j in range(nf):
            centres[j, s] = np.float32(0.5) * a[j] + np.float32(0.5) * z[j]
    return first[:n_leaves].copy(), count[:n_leaves].copy(), lo, hi, centres


@numba.njit(cache=True, nogil=True, inline="always")
def _swap(perm, key, i, j):
    key[i], key[j] = key[j], key[i]
    perm[i], perm[j] = perm[j], perm[i]


@numba.njit(cache=True, nogil=True)
def _select(perm, key, b, e, k):
    """Reorder perm[b:e] and key[b:e] alike so that key[i] <= key[k] <= key[j] for b <= i < k < j < e.

    Floyd and Rivest's selection (1975): on large ranges the pivot is first selected within a small
    sample range around k, so each partition pass leaves few keys on k's side; about 1.5 comparisons a
    key instead of the 3.4 of median-of-three quickselect (the tree's splits were most of the build)."""
    left = b
    right = e - 1
    while right > left:
        if right - left > 600:
            n = right - left + 1
            i = k - left + 1
            z = np.log(n)
            s = 0.5 * np.exp(2.0 * z / 3.0)
            sd = 0.5 * np.sqrt(z * s * (n - s) / n) * (1.0 if i - n / 2 >= 0 else -1.0)
            _select(perm, key, max(left, int(k - i * s / n + sd)), min(right, int(k + (n - i) * s / n + sd)) + 1, k)
        t = key[k]
        i = left
        j = right
        _swap(perm, key, left, k)
        if key[right] > t:
            _swap(perm, key, right, left)
        while i < j:
            _swap(perm, key, i, j)
            i += 1
            j -= 1
            while key[i] < t:
                i += 1
            while key[j] > t:
                j -= 1
        if key[left] == t:
            _swap(perm, key, left, j)
        else:
            j += 1
            _swap(perm, key, j, right)
        if j <= k:
            left = j + 1
        if k <= j:
            right = j - 1


@numba.njit(cache=True, nogil=True)
def _split(perm, centres, key, b, e, size):
    """Reorder perm[b:e] into consecutive parts of `size` leaves (the last may be smaller) by repeated
    median splits along the widest column of the leaf centres (F, S) (measured on an evenly spaced
    sample); key (S,) is scratch space."""
    nf = centres.shape[0]
    cmin = np.empty(nf, dtype=np.float32)
    cmax = np.empty(nf, dtype=np.float32)
    stack = np.empty((64, 2), dtype=np.int64)
    stack[0, 0] = b
    stack[0, 1] = e
    top = 1
    while top > 0:
        top -= 1
        b0 = stack[top, 0]
        e0 = stack[top, 1]
        parts = (e0 - b0 + size - 1) // size
        if parts <= 1:
            continue
        cmin[:] = np.inf
        cmax[:] = -np.inf
        step = max(1, (e0 - b0) // _AXIS_SAMPLE)
        for i in range(b0, e0, step):
            p = perm[i]
            for j in range(nf):
                cmin[j] = min(cmin[j], centres[j, p])
                cmax[j] = max(cmax[j], centres[j, p])
        axis = 0
        for j in range(1, nf):
            if cmax[j] - cmin[j] > cmax[axis] - cmin[axis]:
                axis = j
        col = centres[axis]
        for i in range(b0, e0):
            key[i] = col[perm[i]]
        m = b0 + (parts // 2) * size
        _select(perm, key, b0, e0, m)
        stack[top, 0] = b0
        stack[top, 1] = m
        stack[top + 1, 0] = m
        stack[top + 1, 1] = e0
        top += 2


@numba.njit(cache=True, nogil=True)
def _child_size(n):
    """Leaves per child of a node over n leaves: the smallest power of FANOUT leaving <= FANOUT children."""
    size = 1
    while size * FANOUT < n:
        size *= FANOUT
    return size


@numba.njit(cache=True, nogil=True)
def _count_nodes(n_leaves):
    """Nodes of the tree over n_leaves leaves (1 for 0 or 1 leaves: the root)."""
    todo = [n_leaves]
    count = 0
    while len(todo) > 0:
        n = todo.pop()
        count += 1
        size = _child_size(n)
        for b in range(0, n, size):
            if min(size, n - b) > 1:
                todo.append(min(size, n - b))
    return count


@numba.njit(cache=True, nogil=True)
def build_tree(lo, hi, centres):
    """16-ary tree over leaves with bounds lo, hi (S, F) and centres (F, S) (build_leaves); see the
    module docstring.

    Returns node_lo, node_hi (M, F, 16) (the children's bounds), node_kids (M, 16) (a child node's id, or
    -(leaf + 1) for a leaf) and node_count (M,) (children per node). Node 0 is the root; M = 0 when S = 0.
    """
    nf, n_leaves = centres.shape
    perm = np.arange(n_leaves)
    key = np.empty(n_leaves, dtype=np.float32)
    cap = _count_nodes(n_leaves)
    node_lo = np.empty((cap, nf, FANOUT), dtype=np.float32)  # every slot is written once below
    node_hi = np.empty((cap, nf, FANOUT), dtype=np.float32)
    node_kids = np.zeros((cap, FANOUT), dtype=np.int64)
    node_count = np.zeros(cap, dtype=np.int64)
    if n_leaves == 0:
        return node_lo[:0], node_hi[:0], node_kids[:0], node_count[:0]
    todo = np.empty((cap, 3), dtype=np.int64)  # node, first leaf, end leaf (positions in perm)
    todo[0, 0] = 0
    todo[0, 1] = 0
    todo[0, 2] = n_leaves
    n_todo = 1
    n_nodes = 1
    while n_todo > 0:
        n_todo -= 1
        nd = todo[n_todo, 0]
        b = todo[n_todo, 1]
        e = todo[n_todo, 2]
        size = _child_size(e - b)
        if size > 1:  # children of one leaf each need no order
            _split(perm, centres, key, b, e, size)
        k = 0
        for cb in range(b, e, size):
            ce = min(cb + size, e)
            if ce - cb == 1:
                node_kids[nd, k] = -(perm[cb] + 1)
                for j in range(nf):
                    node_lo[nd, j, k] = lo[perm[cb], j]
                    node_hi[nd, j, k] = hi[perm[cb], j]
            else:
                node_kids[nd, k] = n_nodes
                todo[n_todo, 0] = n_nodes
                todo[n_todo, 1] = cb
                todo[n_todo, 2] = ce
                n_todo += 1
                n_nodes += 1
            k += 1
        node_count[nd] = k
        for kk in range(k, FANOUT):  # missing children: empty boxes, never within a bound
            for j in range(nf):
                node_lo[nd, j, kk] = np.inf
                node_hi[nd, j, kk] = -np.inf
    # A child node's id is above its parent's: in decreasing order, each node's own bounds are complete
    # before its parent takes their union.
    for nd in range(n_nodes - 1, -1, -1):
        for k in range(node_count[nd]):
            c = node_kids[nd, k]
            if c < 0:
                continue
            for j in range(nf):
                a = node_lo[c, j, 0]
                z = node_hi[c, j, 0]
                for i in range(1, node_count[c]):
                    a = min(a, node_lo[c, j, i])
                    z = max(z, node_hi[c, j, i])
                node_lo[nd, j, k] = a
                node_hi[nd, j, k] = z
    return node_lo, node_hi, node_kids, node_count


@numba.njit(cache=True, nogil=True)
def min_costs(node_kids, node_count, leaf_first, leaf_count, frame_cost):
    """The lowest per-frame cost (annotations' frame_cost (N,) float32) under each leaf (S,) and under each
    child of each node (M, FANOUT): the tree's lower bounds stay exact with costs below 0."""
    n_leaves = leaf_first.shape[0]
    leaf_min = np.empty(n_leaves, dtype=np.float32)
    for s in range(n_leaves):
        m = np.float32(np.inf)
        for f in range(leaf_first[s], leaf_first[s] + leaf_count[s]):
            m = min(m, frame_cost[f])
        leaf_min[s] = m
    node_min = np.full((node_kids.shape[0], FANOUT), np.inf, dtype=np.float32)
    for nd in range(node_kids.shape[0] - 1, -1, -1):   # children have higher ids than their parent
        for k in range(node_count[nd]):
            c = node_kids[nd, k]
            if c < 0:
                node_min[nd, k] = leaf_min[-c - 1]
            else:
                m = np.float32(np.inf)
                for i in range(node_count[c]):
                    m = min(m, node_min[c, i])
                node_min[nd, k] = m
    return leaf_min, node_min


@numba.njit(cache=True, nogil=True, inline="always")
def _lower(d, m, rtol):
    """A float32 lower bound on the annotated cost of every frame under a box at float32 distance d whose
    lowest per-frame cost is m: d shrunk by the rounding margin (the bound may be far below the best cost),
    lowered once more so that rounding it to float32 never raises it."""
    x = np.float64(d) * (1.0 - rtol) + np.float64(m)
    return np.float32(x - abs(x) * 2.0 ** -23)


@numba.njit(cache=True, nogil=True, inline="always")
def _min16(acc):
    m = acc[0]
    for k in range(1, 16):
        m = min(m, acc[k])
    return m


@numba.njit(cache=True, nogil=True)
def aabb_kernel(features, valid, others, frame_cost, leaf_min, node_min, leaf_first, leaf_count, node_lo, node_hi,
                node_kids, node_count, q, current, skip, bias, rtol, n_seed):
    """One exact search; see the module docstring and common.py for the semantics. valid: the searchable
    frames (bool (N,)); others: those the search may jump to (the tree's leaves); frame_cost: float32 (N,)
    added to each frame's cost with its lower bounds leaf_min, node_min (min_costs), or all three None:
    numba compiles a version without them (the `is not None` branches are pruned), so a database without
    annotations searches exactly as before.

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
        if frame_cost is not None:
            cur_cost += frame_cost[current]
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
            if others[f]:
                c = row_cost(features, f, q)
                if frame_cost is not None:
                    c += frame_cost[f]
                if c < best:
                    best = np.float64(c)
                    best_frame = f
    thr = best + abs(best) * rtol
    if node_count.shape[0] > 0:
        stack_box = np.empty(_STACK, dtype=np.int64)  # node id, or -(leaf + 1)
        stack_dist = np.empty(_STACK, dtype=np.float32)   # a box's lower bound
        acc = np.empty(16, dtype=np.float32)  # a leaf's costs or a node's FANOUT box distances
        kid_box = np.empty(FANOUT, dtype=np.int64)
        kid_dist = np.empty(FANOUT, dtype=np.float32)
        stack_box[0] = 0
        stack_dist[0] = -np.inf   # the root is always opened (costs may lie below 0)
        sp = 1
        while sp > 0:
            sp -= 1
            box = stack_box[sp]
            if stack_dist[sp] > thr:
                continue
            if box < 0:
                f0 = leaf_first[-box - 1]
                n_rows = leaf_count[-box - 1]
                acc[:] = 0.0
                for p in range(_PIECES):
                    rows16_accumulate(features, f0, n_rows, q, p * nf // _PIECES, (p + 1) * nf // _PIECES, acc)
                    # partial costs only grow (and float32 rounding is monotone): no row of this leaf can
                    # reach the best
                    low = _min16(acc)
                    if leaf_min is not None:
                        low += leaf_min[-box - 1]
                    if low > best:
                        break
                else:
                    for r in range(n_rows):
                        c = acc[r]
                        if frame_cost is not None:
                            c += frame_cost[f0 + r]
                        if c <= best:
                            f = f0 + r
                            if c == best and (best_frame < 0 or f >= best_frame):
                                continue  # equal cost: the lower frame (or the current frame's bound) stays
                            if current >= 0 and abs(f - current) <= skip:
                                continue
                            best = np.float64(c)
                            best_frame = f
                            thr = best + abs(best) * rtol
                continue
            acc[:] = 0.0
            for p in range(_PIECES):
                box16_accumulate(node_lo, node_hi, box, q, p * nf // _PIECES, (p + 1) * nf // _PIECES, acc)
                if node_min is not None:
                    lowest = np.inf
                    for k in range(node_count[box]):
                        lowest = min(lowest, _lower(acc[k], node_min[box, k], rtol))
                    if lowest > thr:
                        break
                elif _min16(acc) > thr:
                    break  # partial distances only grow: every child is beyond the bound
            # children within the bound, sorted by decreasing distance (insertion sort of <= 16)
            n_kids = 0
            for k in range(node_count[box]):
                d = acc[k]
                if node_min is not None:
                    d = _lower(acc[k], node_min[box, k], rtol)
                if d > thr:
                    continue
                i = n_kids
                while i > 0 and kid_dist[i - 1] < d:
                    kid_dist[i] = kid_dist[i - 1]
                    kid_box[i] = kid_box[i - 1]
                    i -= 1
                kid_dist[i] = d
                kid_box[i] = node_kids[box, k]
                n_kids += 1
            for i in range(n_kids):  # the nearest is pushed last, so popped first
                stack_box[sp] = kid_box[i]
                stack_dist[sp] = kid_dist[i]
                sp += 1
    bc = np.float32(best) if best_frame >= 0 else np.float32(np.inf)
    return finish(current, cur_ok, cur_cost, best_frame, bc, bias)


@numba.njit(cache=True, nogil=True, parallel=True)
def aabb_batch_kernel(features, valid, others, frame_cost, leaf_min, node_min, leaf_first, leaf_count, node_lo,
                      node_hi, node_kids, node_count, queries, currents, skip, bias, rtol, n_seed, out_frames,
                      out_costs):
    for i in numba.prange(queries.shape[0]):
        f, c = aabb_kernel(features, valid, others, frame_cost, leaf_min, node_min, leaf_first, leaf_count,
                           node_lo, node_hi, node_kids, node_count, queries[i], currents[i], skip, bias, rtol,
                           n_seed)
        out_frames[i] = f
        out_costs[i] = c


class AabbIndex:
    """Box tree over the frames a search may jump to (`others`, bool (N,): the searchable frames of one
    mask, less any an annotation keeps it from entering); frame_cost: float32 (N,) added to each frame's
    cost, or None."""

    def __init__(self, features: np.ndarray, others: np.ndarray, range_starts: np.ndarray, n_seed: int = 4,
                 frame_cost: np.ndarray | None = None):
        self.rtol = 4.0 * features.shape[1] * 2.0 ** -24
        self.n_seed = int(n_seed)
        first, count, lo, hi, centres = build_leaves(features, others, np.ascontiguousarray(range_starts, np.int64))
        tree = build_tree(lo, hi, centres)
        if frame_cost is None:
            costs = (None, None, None)
        else:
            frame_cost = np.ascontiguousarray(frame_cost, np.float32)
            costs = (frame_cost,) + min_costs(tree[2], tree[3], first, count, frame_cost)
        self._arrays = (others,) + costs + (first, count) + tree

    def search(self, features, valid, q, current, skip, bias):
        return aabb_kernel(features, valid, *self._arrays, q, current, skip, bias, self.rtol, self.n_seed)

    def search_batch(self, features, valid, queries, currents, skip, bias, out_frames, out_costs):
        aabb_batch_kernel(features, valid, *self._arrays, queries, currents, skip, bias, self.rtol,
                          self.n_seed, out_frames, out_costs)
