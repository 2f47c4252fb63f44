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
  all of them are one SIMD pass; missing children have empty bounds (+inf, -inf). The leaves are first
  sorted into cells of 128-256 leaves on average by a k-d tree whose splits are the medians of a sample of
  the leaf centres along their widest column (_cells: one pass over the leaves); a 16-ary tree takes the
  cells in k-d order, and inside a cell its leaves are split in two at the median of their centres
  along their widest column (judged on a sample), four times over, giving 16 children of equal size.
  Exact median splits over all leaves at every level had been about 40 % of the build (13 levels
  over 86k leaves on the full Bandai-Namco database); the sampled cells answer as fast.

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

from typing import NamedTuple

import numba
import numpy as np

from ._simd import box16_accumulate, rows16_accumulate
from .brute import finish, row_cost

__all__ = ["AabbIndex", "AabbTree", "FrameCosts", "LEAF", "FANOUT", "aabb_kernel", "build_leaves", "build_tree",
           "leaf_spans", "leaf_boxes"]

LEAF = 8  # frames per leaf (rows16_accumulate reads up to 16)
FANOUT = 16  # children per node: box16_accumulate computes exactly 16
_AXIS_SAMPLE = 64  # leaves looked at to choose a split column
_CELL = 256  # most leaves per cell on average (build_tree: exact median splits only inside a cell)
_CELL_SAMPLE = 16  # sampled leaves per cell to place the cells' boundaries
_LANES = 8  # leaves descending the cells' k-d tree together (_cells)
_STACK = FANOUT * 18
_PIECES = 3  # costs and box distances are summed in this many column ranges, checked after each  # pending boxes: at most FANOUT per level; depth <= 17 for any N < 2**64 leaves


@numba.njit(cache=True, nogil=True)
def _leaf_spans(valid, range_starts, first, count):
    """Fill first, count with the leaves' first frame and frame count; returns their number S."""
    n = valid.shape[0]
    r = 0
    n_leaves = 0
    f = 0
    while f < n:
        if not valid[f]:
            f += 1
            continue
        while r < range_starts.shape[0] and range_starts[r] <= f:
            r += 1
        stop = min(n, f + LEAF)
        if r < range_starts.shape[0]:
            stop = min(stop, range_starts[r])  # never into the next clip
        e = f + 1
        while e < stop and valid[e]:
            e += 1
        first[n_leaves] = f
        count[n_leaves] = e - f
        n_leaves += 1
        f = e
    return n_leaves


def leaf_spans(valid, range_starts):
    """First frame and frame count (S,) of each leaf of the searchable frames `valid` (bool (N,)): up to
    LEAF consecutive searchable frames, never spanning two clips (range_starts, frames) or a gap."""
    bound = int(np.count_nonzero(valid))  # at most one leaf per searchable frame
    first = np.empty(bound, dtype=np.int64)  # numpy's: untouched pages cost nothing
    count = np.empty(bound, dtype=np.int64)
    n_leaves = _leaf_spans(valid, np.sort(np.asarray(range_starts, dtype=np.int64)), first, count)
    return first[:n_leaves].copy(), count[:n_leaves].copy()


@numba.njit(cache=True, nogil=True)
def leaf_boxes(features, first, count, lo, hi):
    """Fill the leaves' bounds lo, hi (S, F) in one pass over the features (N, F)."""
    nf = features.shape[1]
    for s in range(first.shape[0]):
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


def build_leaves(features, valid, range_starts):
    """Leaves of the searchable frames: first frame and frame count (S,) and bounds lo, hi (S, F); see
    leaf_spans and leaf_boxes."""
    first, count = leaf_spans(valid, range_starts)
    n_leaves, nf = first.shape[0], features.shape[1]
    # Allocated by numpy, which asks the kernel for huge pages on large arrays (numba's allocations do
    # not): taking the build's fresh memory 4 kB page by page cost several milliseconds.
    lo = np.empty((n_leaves, nf), dtype=np.float32)
    hi = np.empty((n_leaves, nf), dtype=np.float32)
    leaf_boxes(features, first, count, lo, hi)
    return first, count, lo, hi


@numba.njit(cache=True, nogil=True, inline="always")
def _centre(lo, hi, p, j):
    """Column j of leaf p's box centre (bounds lo, hi (S, F))."""
    return np.float32(0.5) * lo[p, j] + np.float32(0.5) * hi[p, j]


@numba.njit(cache=True, nogil=True, inline="always")
def _swap(perm, key, i, j):
    key[i], key[j] = key[j], key[i]
    perm[i], perm[j] = perm[j], perm[i]


@numba.njit(cache=True, nogil=True)
def _select(perm, key, b, e, k):
    """Reorder perm[b:e] and key[b:e] alike so that key[i] <= key[k] <= key[j] for b <= i < k < j < e.

    Floyd and Rivest's selection (1975): on large ranges the pivot is first selected within a small
    sample range around k, so each partition pass leaves few keys on k's side; about 1.5 comparisons a
    key instead of the 3.4 of median-of-three quickselect."""
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
def _widest(lo, hi, idx, b, e, cmin, cmax):
    """The column along which the leaves idx[b:e] (an evenly spaced sample of at most about
    _AXIS_SAMPLE of them) spread their box centres most (bounds lo, hi (S, F); lo + hi is twice the
    centre); cmin, cmax (F,) are scratch space."""
    nf = lo.shape[1]
    cmin[:] = np.inf
    cmax[:] = -np.inf
    for i in range(b, e, max(1, (e - b) // _AXIS_SAMPLE)):
        a = lo[idx[i]]
        z = hi[idx[i]]
        for j in range(nf):
            c = a[j] + z[j]
            cmin[j] = min(cmin[j], c)
            cmax[j] = max(cmax[j], c)
    axis = 0
    for j in range(1, nf):
        if cmax[j] - cmin[j] > cmax[axis] - cmin[axis]:
            axis = j
    return axis


@numba.njit(cache=True, nogil=True)
def _split(perm, lo, hi, key, b, e, size, cmin, cmax, stack):
    """Reorder perm[b:e] into consecutive parts of `size` leaves (the last may be smaller) by repeated
    median splits of the leaves' box centres (bounds lo, hi (S, F)) along their widest column (_widest);
    key (S,), cmin, cmax (F,) and stack (64, 2) are scratch space."""
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
        axis = _widest(lo, hi, perm, b0, e0, cmin, cmax)
        for i in range(b0, e0):
            key[i] = _centre(lo, hi, perm[i], axis)
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
    """Nodes of the tree over n_leaves leaves (1 for 0 or 1 leaves: the root): a node, its full
    children's subtrees ((size - 1) / 15 nodes each: size is a power of 16) and its last, partial one."""
    total = 0
    n = n_leaves
    while True:
        total += 1
        size = _child_size(n)
        if size == 1:
            return total
        total += (n // size) * ((size - 1) // (FANOUT - 1))
        n = n % size
        if n <= 1:  # no partial child, or a leaf
            return total


@numba.njit(cache=True, nogil=True)
def _cells(lo, hi, depth):
    """Leaves (bounds lo, hi (S, F)) sorted into the 2**depth cells of a k-d tree whose splits are the
    medians, along the widest column (_widest), of an evenly spaced sample of _CELL_SAMPLE leaves per
    cell: one pass over the leaves instead of `depth` exact median splits over all of them (those had
    been most of the build).

    Returns perm (S,) (the leaves cell by cell, in clip order within a cell; consecutive cells are k-d
    siblings) and cell_start (2**depth + 1,) (cell c holds perm[cell_start[c]:cell_start[c + 1]]). The
    cells are only roughly equal in size."""
    n, nf = lo.shape
    n_cells = 1 << depth
    n_inner = n_cells - 1
    axis = np.zeros(max(n_inner, 1), dtype=np.int64)
    thr = np.zeros(max(n_inner, 1), dtype=np.float32)
    m = min(n, _CELL_SAMPLE * n_cells)
    # the sample's bounds copied next to each other: its splits read them over and over
    slo = np.empty((m, nf), dtype=np.float32)
    shi = np.empty((m, nf), dtype=np.float32)
    for i in range(m):
        p = (i * n) // m
        for j in range(nf):
            slo[i, j] = lo[p, j]
            shi[i, j] = hi[p, j]
    sample = np.arange(m)
    key = np.empty(m, dtype=np.float32)
    cmin = np.empty(nf, dtype=np.float32)
    cmax = np.empty(nf, dtype=np.float32)
    span = np.empty((2 * n_cells, 2), dtype=np.int64)  # the sample range of each k-d node, heap order
    span[0, 0] = 0
    span[0, 1] = m
    for h in range(n_inner):
        b = span[h, 0]
        e = span[h, 1]
        mid = (b + e) // 2
        if e - b < 2:
            thr[h] = np.inf  # nothing sampled here: every leaf goes left
        else:
            ax = _widest(slo, shi, sample, b, e, cmin, cmax)
            axis[h] = ax
            for i in range(b, e):
                key[i] = _centre(slo, shi, sample[i], ax)
            _select(sample, key, b, e, mid)
            thr[h] = key[mid]
        span[2 * h + 1, 0] = b
        span[2 * h + 1, 1] = mid
        span[2 * h + 2, 0] = mid
        span[2 * h + 2, 1] = e
    cell = np.empty(n, dtype=np.int64)
    cell_start = np.zeros(n_cells + 1, dtype=np.int64)
    h = np.zeros(_LANES, dtype=np.int64)
    for s0 in range(0, n, _LANES):
        # _LANES leaves descend side by side: one leaf's steps wait on each other, the leaves' do not
        lanes = min(_LANES, n - s0)
        h[:] = 0
        for d in range(depth):
            for u in range(lanes):
                ax = axis[h[u]]
                h[u] = 2 * h[u] + (2 if _centre(lo, hi, s0 + u, ax) >= thr[h[u]] else 1)
        for u in range(lanes):
            cell[s0 + u] = h[u] - n_inner
            cell_start[h[u] - n_inner + 1] += 1
    for c in range(n_cells):
        cell_start[c + 1] += cell_start[c]
    fill = cell_start[:-1].copy()
    perm = np.empty(n, dtype=np.int64)
    for s in range(n):
        perm[fill[cell[s]]] = s
        fill[cell[s]] += 1
    return perm, cell_start


@numba.njit(cache=True, nogil=True)
def _tree_size(cell_start):
    """Nodes of the tree _grow makes over these cells."""
    sizes = cell_start[1:] - cell_start[:-1]
    live = np.flatnonzero(sizes)
    total = _count_nodes(live.shape[0]) if live.shape[0] > 1 else 0
    for c in live:
        if sizes[c] > 1 or live.shape[0] == 1:
            total += _count_nodes(sizes[c])
    return total


@numba.njit(cache=True, nogil=True)
def _grow(lo, hi, perm, cell_start, node_lo, node_hi):
    """The tree over the cells of _cells (M = _tree_size(cell_start) nodes): a 16-ary tree over the
    non-empty cells in order, then each cell a subtree of equal-size full subtrees by exact median
    splits (_split). Fills node_lo, node_hi (M, F, 16); returns node_kids (M, 16) (a child node's id, or
    -(leaf + 1)) and node_count (M,). A child's id is above its parent's.

    A cell's leaves' bounds are first copied next to each other (a cell's leaves lie anywhere in the
    database): its splits and its leaf slots then read the copy, not rows scattered over lo and hi."""
    n_nodes_total, nf = node_lo.shape[0], lo.shape[1]
    sizes = cell_start[1:] - cell_start[:-1]
    live = np.flatnonzero(sizes)
    node_kids = np.zeros((n_nodes_total, FANOUT), dtype=np.int64)
    node_count = np.zeros(n_nodes_total, dtype=np.int64)
    # the cells' roots: (cell, node id)
    roots = np.empty((live.shape[0], 2), dtype=np.int64)
    n_roots = 0
    n_nodes = 1
    if live.shape[0] == 1:
        roots[0, 0] = live[0]
        roots[0, 1] = 0
        n_roots = 1
    else:
        todo = np.empty((max(1, _count_nodes(live.shape[0])), 3), dtype=np.int64)  # node, cells b:e
        todo[0, 0] = 0
        todo[0, 1] = 0
        todo[0, 2] = live.shape[0]
        n_todo = 1
        while n_todo > 0:
            n_todo -= 1
            nd = todo[n_todo, 0]
            b = todo[n_todo, 1]
            e = todo[n_todo, 2]
            size = _child_size(e - b)
            k = 0
            for cb in range(b, e, size):
                ce = min(cb + size, e)
                if ce - cb > 1:
                    todo[n_todo, 0] = n_nodes
                    todo[n_todo, 1] = cb
                    todo[n_todo, 2] = ce
                    n_todo += 1
                    node_kids[nd, k] = n_nodes
                    n_nodes += 1
                elif sizes[live[cb]] == 1:  # a cell of one leaf: the leaf itself
                    p = perm[cell_start[live[cb]]]
                    node_kids[nd, k] = -(p + 1)
                    for j in range(nf):
                        node_lo[nd, j, k] = lo[p, j]
                        node_hi[nd, j, k] = hi[p, j]
                else:
                    roots[n_roots, 0] = live[cb]
                    roots[n_roots, 1] = n_nodes
                    n_roots += 1
                    node_kids[nd, k] = n_nodes
                    n_nodes += 1
                k += 1
            node_count[nd] = k
    big = 0
    for c in live:
        big = max(big, sizes[c])
    clo = np.empty((big, nf), dtype=np.float32)  # the cell's leaves' bounds, next to each other
    chi = np.empty((big, nf), dtype=np.float32)
    local = np.empty(big, dtype=np.int64)
    key = np.empty(big, dtype=np.float32)
    cmin = np.empty(nf, dtype=np.float32)
    cmax = np.empty(nf, dtype=np.float32)
    stack = np.empty((64, 2), dtype=np.int64)
    todo = np.empty((max(1, _count_nodes(big)), 3), dtype=np.int64)  # node, local leaves b:e
    for r in range(n_roots):
        c0 = cell_start[roots[r, 0]]
        n = sizes[roots[r, 0]]
        for i in range(n):
            p = perm[c0 + i]
            for j in range(nf):
                clo[i, j] = lo[p, j]
                chi[i, j] = hi[p, j]
            local[i] = i
        todo[0, 0] = roots[r, 1]
        todo[0, 1] = 0
        todo[0, 2] = n
        n_todo = 1
        while n_todo > 0:
            n_todo -= 1
            nd = todo[n_todo, 0]
            b = todo[n_todo, 1]
            e = todo[n_todo, 2]
            size = _child_size(e - b)
            if size > 1:  # children of one leaf each need no order
                _split(local, clo, chi, key, b, e, size, cmin, cmax, stack)
            k = 0
            for cb in range(b, e, size):
                ce = min(cb + size, e)
                if ce - cb == 1:
                    i = local[cb]
                    node_kids[nd, k] = -(perm[c0 + i] + 1)
                    for j in range(nf):
                        node_lo[nd, j, k] = clo[i, j]
                        node_hi[nd, j, k] = chi[i, j]
                else:
                    node_kids[nd, k] = n_nodes
                    todo[n_todo, 0] = n_nodes
                    todo[n_todo, 1] = cb
                    todo[n_todo, 2] = ce
                    n_todo += 1
                    n_nodes += 1
                k += 1
            node_count[nd] = k
    if n_nodes != n_nodes_total:
        raise ValueError("aabb: the tree's size differs from _tree_size")
    _unions(node_lo, node_hi, node_kids, node_count)
    return node_kids, node_count


@numba.njit(cache=True, nogil=True, fastmath={"nnan", "nsz"})
def _unions(node_lo, node_hi, node_kids, node_count):
    """Missing children's slots (empty boxes, never within a bound) and node children's slots (the union
    of the child's own slots); in decreasing id order each node is complete before its parent reads it.
    The union runs over all 16 slots (empty ones change nothing), which the compiler vectorizes given
    that no bound is NaN (fastmath: min and max are exact in any order; -0 and +0 bound alike)."""
    nf = node_lo.shape[1]
    for nd in range(node_kids.shape[0] - 1, -1, -1):
        blo = node_lo[nd]
        bhi = node_hi[nd]
        for k in range(node_count[nd], FANOUT):
            for j in range(nf):
                blo[j, k] = np.inf
                bhi[j, k] = -np.inf
        for k in range(node_count[nd]):
            c = node_kids[nd, k]
            if c < 0:
                continue  # a leaf's slot is filled by _grow
            clo = node_lo[c]
            chi = node_hi[c]
            for j in range(nf):
                a = clo[j, 0]
                z = chi[j, 0]
                for i in range(1, FANOUT):
                    a = min(a, clo[j, i])
                    z = max(z, chi[j, i])
                blo[j, k] = a
                bhi[j, k] = z


def build_tree(lo, hi):
    """16-ary tree over leaves with bounds lo, hi (S, F) (build_leaves); see the module docstring.

    Returns node_lo, node_hi (M, F, 16) (the children's bounds), node_kids (M, 16) (a child node's id, or
    -(leaf + 1) for a leaf) and node_count (M,) (children per node). Node 0 is the root; M = 0 when S = 0.
    """
    n_leaves, nf = lo.shape
    if n_leaves == 0:
        return (np.empty((0, nf, FANOUT), np.float32), np.empty((0, nf, FANOUT), np.float32),
                np.zeros((0, FANOUT), np.int64), np.zeros(0, np.int64))
    depth = 0
    while n_leaves > _CELL << depth:
        depth += 1
    perm, cell_start = _cells(lo, hi, depth)
    m = _tree_size(cell_start)
    # numpy's allocation (huge pages, see build_leaves); _grow writes every slot
    node_lo = np.empty((m, nf, FANOUT), dtype=np.float32)
    node_hi = np.empty((m, nf, FANOUT), dtype=np.float32)
    node_kids, node_count = _grow(lo, hi, perm, cell_start, node_lo, node_hi)
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


class AabbTree(NamedTuple):
    """The box tree of one mask's frames (build_leaves, build_tree)."""

    others: np.ndarray         # (N,) bool: the frames a search may jump to (the leaves' frames)
    leaf_first: np.ndarray     # (S,) int64 a leaf's first frame
    leaf_count: np.ndarray     # (S,) int64 its frames
    node_lo: np.ndarray        # (M, F, 16) float32 the children's lower bounds
    node_hi: np.ndarray        # (M, F, 16) float32 their upper bounds
    node_kids: np.ndarray      # (M, 16) int64 a child node's id, or -(leaf + 1)
    node_count: np.ndarray     # (M,) int64 children per node


class FrameCosts(NamedTuple):
    """Annotations' per-frame costs and their lower bounds under the tree's boxes (min_costs)."""

    frame_cost: np.ndarray     # (N,) float32 added to each frame's cost (normalized cost units)
    leaf_min: np.ndarray       # (S,) float32 the lowest frame_cost under each leaf
    node_min: np.ndarray       # (M, 16) float32 the lowest under each child of each node


@numba.njit(cache=True, nogil=True)
def aabb_kernel(features, valid, tree, costs, q, current, skip, bias, rtol, n_seed):
    """One exact search; see the module docstring and common.py for the semantics. valid: the searchable
    frames (bool (N,)); tree: AabbTree; costs: FrameCosts, or None: numba compiles a version without them
    (the `is not None` branches are pruned), so a database without annotations searches exactly as before.

    Returns (frame, cost); frame -2 flags a non-finite query.
    """
    others, leaf_first, leaf_count, node_lo, node_hi, node_kids, node_count = tree
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
        if costs is not None:
            cur_cost += costs.frame_cost[current]
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
                if costs is not None:
                    c += costs.frame_cost[f]
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
                    if costs is not None:
                        low += costs.leaf_min[-box - 1]
                    if low > best:
                        break
                else:
                    for r in range(n_rows):
                        c = acc[r]
                        if costs is not None:
                            c += costs.frame_cost[f0 + r]
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
                if costs is not None:
                    lowest = np.inf
                    for k in range(node_count[box]):
                        lowest = min(lowest, _lower(acc[k], costs.node_min[box, k], rtol))
                    if lowest > thr:
                        break
                elif _min16(acc) > thr:
                    break  # partial distances only grow: every child is beyond the bound
            # children within the bound, sorted by decreasing distance (insertion sort of <= 16)
            n_kids = 0
            for k in range(node_count[box]):
                d = acc[k]
                if costs is not None:
                    d = _lower(acc[k], costs.node_min[box, k], rtol)
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
def aabb_batch_kernel(features, valid, tree, costs, queries, currents, skip, bias, rtol, n_seed, out_frames,
                      out_costs):
    for i in numba.prange(queries.shape[0]):
        f, c = aabb_kernel(features, valid, tree, costs, queries[i], currents[i], skip, bias, rtol, n_seed)
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
        first, count, lo, hi = build_leaves(features, others, range_starts)
        tree = build_tree(lo, hi)
        self.tree = AabbTree(others, first, count, *tree)
        self.costs = None
        if frame_cost is not None:
            frame_cost = np.ascontiguousarray(frame_cost, np.float32)
            self.costs = FrameCosts(frame_cost, *min_costs(tree[2], tree[3], first, count, frame_cost))
        costs = (None, None, None) if self.costs is None else tuple(self.costs)
        self.arrays = (others,) + costs + (first, count) + tree     # what the index holds (Searcher.index_arrays)
        self._entries = {}      # kinds of (features, valid, q) -> the compiled overload's entry point

    def search(self, features, valid, q, current, skip, bias):
        # numba types every argument of every call, the two named tuples slowly (runtime/stage_calls.py):
        # 1.2 us of a 4 us search here. The other arguments come in few kinds (Searcher.search passes
        # float32 C arrays, ints and a float), so the overload found once per kind of array is called
        # directly.
        key = (features.flags.c_contiguous, valid.flags.c_contiguous, valid.flags.writeable, q.flags.writeable)
        entry = self._entries.get(key)
        if entry is None:
            args = (features, valid, self.tree, self.costs, q, current, skip, bias, self.rtol, self.n_seed)
            entry = self._entries[key] = aabb_kernel.compile(tuple(map(aabb_kernel.typeof_pyval, args)))
        return entry(features, valid, self.tree, self.costs, q, current, skip, bias, self.rtol, self.n_seed)

    def search_batch(self, features, valid, queries, currents, skip, bias, out_frames, out_costs):
        aabb_batch_kernel(features, valid, self.tree, self.costs, queries, currents, skip, bias, self.rtol,
                          self.n_seed, out_frames, out_costs)
