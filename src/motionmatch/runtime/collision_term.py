"""A collision term in the search: a candidate frame pays for the collisions its future trajectory would
run into, against static obstacles and the other agents of a crowd (docs/OBSTACLES.md, "The collision
term"; cf. environment-aware motion matching, SIGGRAPH Asia 2025).

A candidate frame's trajectory_position channels are its future ground positions (metres, in the frame's
own root space, at the schema's trajectory offsets). Placed at the character's root and facing, exactly as
the query places the desired trajectory, they are world points p_k at the horizons t_k. The candidate pays

    penalty = weight * sum_k [ max(0, OBSTACLE_MARGIN - clearance(p_k))
                               + sum over other agents j of max(0, AGENT_MARGIN - |p_k - q_j(t_k)|) ]

(normalized cost units: weight per metre of intrusion), with clearance the signed distance to the nearest
shape (obstacles.nearest) and q_j(t) = other agent j's root + t times its simulation velocity (constant
velocity, as the avoidance predicts). The agent itself is left out. A search's answer is then the frame
of least (feature cost + penalty) under the search's usual rule (common.py: skip, bias, ties, masks,
annotations), exactly:

- the penalty is >= 0, so when the ordinary search's answer pays nothing, no other frame can beat it
  (every other frame's total is at least its feature cost, which already lost) and it stands;
- otherwise one brute-force pass (`settle_search`, the brute back-end's SIMD tiles) over the frames the
  search may enter keeps those whose feature cost is below the best other frame's total (the seed) and
  the current frame's total minus the bias (a frame costlier than that cannot take over from it), then
  prices their penalties cheapest first until a feature cost alone passes the best total.

`brute_with_penalty` is the plain reference the tests compare every back-end against.
Conventions: metres, seconds; ground plane (x, z), Y up; yaw 0 faces +Z, positive yaw turns +Z toward +X.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from typing import NamedTuple

import numba
import numpy as np

from ..world.obstacles import Obstacles, nearest, no_obstacles
from ..search._simd import tile64_costs_into
from ..search.brute import BruteIndex
from ..search.common import canonical_costs, decide

# m kept between a candidate's future root and every shape: steering's 0.5 m (an agent's 0.3 m and the
# 0.2 m a root may stray from its simulation, obstacles.STEER_RADIUS).
OBSTACLE_MARGIN = 0.5
# m kept between a candidate's future root and another agent's predicted root: two agents' 0.3 m
# (avoidance.AvoidanceSettings.radius, what the avoidance keeps between simulations).
AGENT_MARGIN = 0.6
# Relative slack of the pruning bounds: a frame is skipped only when its cost is past the bound by more
# than rounding could account for (skipping less is always exact).
_SLACK = 1e-6


class CollisionWorld(NamedTuple):
    """What a tick's candidates may collide with.

    obstacles: obstacles.Obstacles (empty: none); others: (n, K, 2) float64 predicted roots (x, z) of every
    agent at the K trajectory horizons; order, sorted_x: agents by their current root x (a slab lookup of
    the ones within reach; spread, m: the farthest any agent's prediction moves along x); use_agents:
    agents count at all (a crowd whose agents avoid each other)."""

    obstacles: Obstacles
    others: np.ndarray
    order: np.ndarray
    sorted_x: np.ndarray
    spread: float
    use_agents: bool


class Candidates(NamedTuple):
    """Every frame's future root positions (candidate_paths)."""

    paths: np.ndarray          # (N, P, 2) float64 m, the frame's root space: x right, z forward
    point_k: np.ndarray        # (P,) int64 the horizon index of each point
    reach: float               # m: the farthest any frame's trajectory goes from its root


class Placed(NamedTuple):
    """Where one searching agent stands and what its candidates may run into there."""

    rx: float                  # m: its root's x
    rz: float                  # m: its root's z
    yaw: float                 # radians: its facing
    shapes: tuple              # obstacles.Obstacles' arrays (or those near it: _near_shapes)
    agents: np.ndarray         # (M, K, 2) float64 the other agents' predicted roots (x, z) at the K horizons


class Group(NamedTuple):
    """One search group's agents, as the collision term reads them."""

    ids: np.ndarray            # (B,) int64 their indices in the crowd
    q: np.ndarray              # (B, F) float32 their normalized queries
    currents: np.ndarray       # (B,) int64 their playing frames
    weights: np.ndarray        # (B,) float64 their collision weights (normalized cost per metre; 0: off)
    roots: np.ndarray          # (n, 3) float64 the crowd's roots (m)
    yaws: np.ndarray           # (n,) float64 the crowd's facings (radians)


class SettleIndex(NamedTuple):
    """What settle_search's brute-force pass reads for one mask (_tiles)."""

    features: np.ndarray       # (N, F) float32 normalized
    valid: np.ndarray          # (N,) bool the searchable frames
    frame_cost: np.ndarray     # (N,) float32 annotations' per-frame cost (zeros without)
    tiles: np.ndarray          # search.brute.BruteIndex's tiles of the frames a search may enter
    tile_frames: np.ndarray    # their frames (-1: padding)
    tile_cost: np.ndarray      # their frame costs (zeros without annotations)
    kept_f: np.ndarray         # scratch (int64): a slot per tiled row
    kept_c: np.ndarray         # scratch (float64): a slot per tiled row


def candidate_paths(raw_features: np.ndarray, layout: np.ndarray) -> Candidates:
    """Every frame's future root positions from its raw features.

    layout: matching.trajectory_layout's (D, 3) rows (feature column, point, component); components 0/1 are
    the trajectory positions' x/z."""
    rows = layout[layout[:, 2] == 0]
    paths = np.empty((raw_features.shape[0], len(rows), 2))
    for p, (col, _, _) in enumerate(rows):
        paths[:, p, 0] = raw_features[:, col]
        paths[:, p, 1] = raw_features[:, col + 1]   # trajectory_layout writes z right after x
    reach = float(np.sqrt((paths ** 2).sum(axis=2)).max()) if paths.size else 0.0
    return Candidates(np.ascontiguousarray(paths), np.ascontiguousarray(rows[:, 1], dtype=np.int64), reach)


def collision_world(obstacles: Obstacles | None, root_xz: np.ndarray, velocity_xz: np.ndarray, times: np.ndarray,
                    use_agents: bool) -> CollisionWorld:
    """The world of one tick: obstacles (None: none), every agent's root (n, 2) and simulation velocity
    (n, 2) (m, m/s), the horizons `times` (K,) in seconds."""
    root_xz = np.asarray(root_xz, dtype=np.float64)
    others = root_xz[:, None, :] + np.asarray(velocity_xz, dtype=np.float64)[:, None, :] * np.asarray(times)[None, :, None]
    order = np.argsort(root_xz[:, 0], kind="stable").astype(np.int64)
    spread = float(np.abs(others[:, :, 0] - root_xz[:, None, 0]).max()) if others.size else 0.0
    return CollisionWorld(obstacles if obstacles is not None else no_obstacles(), np.ascontiguousarray(others),
                          order, np.ascontiguousarray(root_xz[order, 0]), spread, bool(use_agents))


@numba.njit(cache=True)
def _near_shapes(obs, x, z, reach):
    """The shapes of obs within `reach` metres of (x, z): the only ones a candidate's points may come
    OBSTACLE_MARGIN near (a layout may hold thousands)."""
    centers, radii, lo, hi = obs
    keep_c = np.zeros(radii.shape[0], dtype=np.bool_)
    for c in range(radii.shape[0]):
        keep_c[c] = math.hypot(x - centers[c, 0], z - centers[c, 1]) - radii[c] <= reach
    keep_b = np.zeros(lo.shape[0], dtype=np.bool_)
    for b in range(lo.shape[0]):
        dx = max(lo[b, 0] - x, 0.0, x - hi[b, 0])
        dz = max(lo[b, 1] - z, 0.0, z - hi[b, 1])
        keep_b[b] = math.sqrt(dx * dx + dz * dz) <= reach
    return (np.ascontiguousarray(centers[keep_c]), np.ascontiguousarray(radii[keep_c]),
            np.ascontiguousarray(lo[keep_b]), np.ascontiguousarray(hi[keep_b]))


@numba.njit(cache=True)
def _near_agents(others, order, sorted_x, spread, me, x, z, reach):
    """(M, K, 2) predicted roots of the agents other than `me` that may come within reach of (x, z):
    a slab of the x-sorted current roots (widened by how far a prediction moves along x: `spread`), then
    the full test on every horizon."""
    a = np.searchsorted(sorted_x, x - reach - spread)
    b = np.searchsorted(sorted_x, x + reach + spread, side="right")
    keep = np.zeros(b - a, dtype=np.int64)
    m = 0
    for s in range(a, b):
        j = order[s]
        if j == me:
            continue
        for k in range(others.shape[1]):
            if math.hypot(others[j, k, 0] - x, others[j, k, 1] - z) <= reach:
                keep[m] = j
                m += 1
                break
    # In index order, as the reference sums them: the penalty is the same number to the last bit.
    keep = np.sort(keep[:m])
    out = np.empty((m, others.shape[1], 2))
    for s in range(m):
        out[s] = others[keep[s]]
    return out


@numba.njit(cache=True)
def penalty(paths, point_k, f, rx, rz, yaw, obs, agents):
    """Intrusion (m, summed over the horizons) of frame f's future trajectory placed at the root (rx, rz)
    facing `yaw`: into OBSTACLE_MARGIN of the shapes of obs and AGENT_MARGIN of the agents' predicted
    roots (agents (M, K, 2)). Unweighted; 0 when it stays clear."""
    # total_below with nothing to beat: 0 + 1 * total is total to the bit, and no partial sum passes inf.
    return total_below(paths, point_k, f, rx, rz, yaw, obs, agents, 0.0, 1.0, np.inf)


@numba.njit(cache=True)
def total_below(paths, point_k, f, rx, rz, yaw, obs, agents, cost, weight, best):
    """cost + weight * penalty of frame f, or inf as soon as the partial sum passes `best` (the same
    additions in the same order as `penalty`, so a partial sum past it means the whole one is too)."""
    c, s = math.cos(yaw), math.sin(yaw)
    total = 0.0
    has_shapes = obs[1].shape[0] + obs[2].shape[0] > 0
    for p in range(paths.shape[1]):
        lx, lz = paths[f, p, 0], paths[f, p, 1]
        wx = rx + lx * c + lz * s
        wz = rz - lx * s + lz * c
        if has_shapes:
            d = nearest(obs, wx, wz)[0]
            if d < OBSTACLE_MARGIN:
                total += OBSTACLE_MARGIN - d
                if cost + weight * total > best:
                    return np.inf
        k = point_k[p]
        for m in range(agents.shape[0]):
            dx, dz = wx - agents[m, k, 0], wz - agents[m, k, 1]
            d2 = dx * dx + dz * dz
            if d2 < AGENT_MARGIN * AGENT_MARGIN:
                total += AGENT_MARGIN - math.sqrt(d2)
                if cost + weight * total > best:
                    return np.inf
    return cost + weight * total


@numba.njit(cache=True)
def penalties(paths, point_k, rx, rz, yaw, obs, agents, out):
    """penalty of every frame into out (N,) (the reference's and tests' full table)."""
    for f in range(paths.shape[0]):
        out[f] = penalty(paths, point_k, f, rx, rz, yaw, obs, agents)


@numba.njit(cache=True)
def _sift_down(c, f, r, m):
    """Restore the min-heap order of (c, f)[:m] below position r (keys: cost, then frame)."""
    while True:
        a = 2 * r + 1
        if a >= m:
            return
        b = a + 1
        if b < m and (c[b] < c[a] or (c[b] == c[a] and f[b] < f[a])):
            a = b
        if c[a] < c[r] or (c[a] == c[r] and f[a] < f[r]):
            c[a], c[r] = c[r], c[a]
            f[a], f[r] = f[r], f[a]
            r = a
        else:
            return


@numba.njit(cache=True)
def settle_search(index, q, current, skip, bias, base_frame, base_cost, cand, at, weight):
    """The least (feature cost + weight * penalty) under the search rule (common.py), given the ordinary
    search's answer (base_frame, base_cost) whose penalty is > 0, or its best other frame (a seed: -1 for
    none); the current frame is priced here (it counts only when index.valid). index: SettleIndex (its
    tiles hold the frames the search may enter, before the skip window around `current`); cand: Candidates;
    at: Placed, the agent's. Returns (frame, total cost)."""
    features, valid, frame_cost, tiles, tile_frames, tile_cost, kept_f, kept_c = index
    paths, point_k, _ = cand
    rx, rz, yaw, obs, agents = at
    nf = q.shape[0]
    cur_ok = current >= 0 and valid[current]
    cur_t = np.inf
    bound = np.inf
    if cur_ok:
        own = np.float32(0.0)
        for j in range(nf):
            d = features[current, j] - q[j]
            own += d * d
        own += frame_cost[current]
        cur_t = np.float64(own) + weight * penalty(paths, point_k, current, rx, rz, yaw, obs, agents)
        # An other frame takes over only below cur_t - bias: costlier ones cannot change the answer.
        bound = cur_t - bias + _SLACK * (1.0 + abs(cur_t))
    best_f, best_t = -1, np.inf
    if base_frame >= 0 and base_frame != current:
        best_f = base_frame
        best_t = np.float64(base_cost) + weight * penalty(paths, point_k, base_frame, rx, rz, yaw, obs, agents)
    # Pass 1: the feature cost of every frame it may enter, 64 rows at a time with the brute back-end's SIMD
    # kernel (bit-identical to the canonical sum), those under the bound kept.
    lim = min(bound, best_t + _SLACK * (1.0 + abs(best_t)))
    # kept_f, kept_c: room for every frame, allocated once per mask (_tiles): not per search
    acc = np.empty(64, dtype=np.float32)
    m = 0
    for s0 in range(0, tiles.shape[0], 4):          # BruteIndex pads to a multiple of 4 tiles
        tile64_costs_into(tiles, s0, q, acc)
        for k in range(64):
            f = tile_frames[s0 + k // 16, k % 16]
            if f < 0 or (current >= 0 and abs(f - current) <= skip):
                continue                            # a padding lane, or the skip window
            c = np.float64(acc[k] + tile_cost[s0 + k // 16, k % 16])
            if c <= lim:
                kept_f[m] = f
                kept_c[m] = c
                m += 1
    # Pass 2: penalties in increasing feature cost, until the cost alone passes the best total (every later
    # frame's total is at least its cost): the penalty is priced for a few frames, not thousands. A binary
    # heap: usually a few pops settle it, where sorting every kept frame cost more than the pass itself.
    for r in range(m // 2 - 1, -1, -1):
        _sift_down(kept_c, kept_f, r, m)
    while m > 0:
        c, f = kept_c[0], kept_f[0]
        if c > best_t:
            break
        m -= 1
        kept_c[0], kept_f[0] = kept_c[m], kept_f[m]
        _sift_down(kept_c, kept_f, 0, m)
        t = total_below(paths, point_k, f, rx, rz, yaw, obs, agents, c, weight, best_t)
        if t < best_t or (t == best_t and f < best_f):      # ties: the lower frame, as every search
            best_f, best_t = f, t
    if cur_ok and (best_f < 0 or cur_t <= best_t + bias):
        return current, cur_t
    if best_f >= 0:
        return best_f, best_t
    return -1, np.inf


@numba.njit(cache=True)
def _surroundings(world, me, rx, rz, reach):
    """(shapes, agents) agent `me` at root (rx, rz) may meet within `reach` metres of its own trajectories
    (candidate_paths' reach): the shapes of world (CollisionWorld) near it and the other agents' predicted
    roots near it."""
    shapes = _near_shapes(world.obstacles, rx, rz, reach + OBSTACLE_MARGIN)
    if world.use_agents and world.order.shape[0] > 1:
        agents = _near_agents(world.others, world.order, world.sorted_x, world.spread, me, rx, rz,
                              reach + AGENT_MARGIN)
    else:
        agents = np.zeros((0, world.others.shape[1], 2))
    return shapes, agents


@numba.njit(cache=True)
def _answer_penalties(cand, world, group, best, out):
    """out[b]: the penalty (unweighted, m) of answer best[b] of the group's agent b; 0 when its weight is 0
    or it has no answer."""
    ids, roots, yaws = group.ids, group.roots, group.yaws
    for b in range(ids.shape[0]):
        out[b] = 0.0
        if group.weights[b] <= 0.0 or best[b] < 0:
            continue
        i = ids[b]
        shapes, near = _surroundings(world, i, roots[i, 0], roots[i, 2], cand.reach)
        if shapes[1].shape[0] + shapes[2].shape[0] + near.shape[0] > 0:
            out[b] = penalty(cand.paths, cand.point_k, best[b], roots[i, 0], roots[i, 2], yaws[i], shapes, near)


@numba.njit(cache=True)
def _settle_all(index, group, skip, bias, todo, seeds, seed_costs, cand, world, best, cost):
    """settle_search for the rows `todo` of a group, from the seeds (frame, cost) of each, into best and
    cost."""
    for t in range(todo.shape[0]):
        b = todo[t]
        i = group.ids[b]
        rx, rz = group.roots[i, 0], group.roots[i, 2]
        shapes, near = _surroundings(world, i, rx, rz, cand.reach)
        best[b], cost[b] = settle_search(index, group.q[b], group.currents[b], skip, bias, seeds[t], seed_costs[t],
                                         cand, Placed(rx, rz, group.yaws[i], shapes, near), group.weights[b])


_TILES: OrderedDict = OrderedDict()       # (searcher, mask) -> tiles; bounded like a searcher's structures
_TILES_KEPT = 16


def _tiles(searcher, mask) -> SettleIndex:
    """settle_search's index of a searcher's mask: the brute back-end's tiles of the frames a search may
    enter (the searcher's own when its back-end is brute, else built once and kept), frame_cost and
    tile_cost zeros without annotations, and its scratch."""
    valid, index = searcher.mask_structure(mask)
    key = (id(searcher), id(valid))
    hit = _TILES.get(key)
    if hit is None or hit[0] is not valid or hit[1] is not searcher:    # ids are reused after collection
        cost = searcher.rules.cost
        if not isinstance(index, BruteIndex) or cost is None:
            enter = searcher.rules.enter
            index = BruteIndex(searcher.features, valid if enter is None else valid & enter,
                               np.zeros(searcher.n_frames, np.float32) if cost is None else cost)
        rows = index.tile_frames.size
        hit = (valid, searcher, SettleIndex(searcher.features, valid, index.frame_cost, index.tiles, index.tile_frames,
                                            index.tile_cost, np.empty(rows, np.int64), np.empty(rows)))
        _TILES[key] = hit
        if len(_TILES) > _TILES_KEPT:
            _TILES.popitem(last=False)
    else:
        _TILES.move_to_end(key)
    return hit[2]


def apply_collision_term(searcher, mask, group: Group, skip: int, bias: float, world: CollisionWorld,
                         cand: Candidates, best, cost) -> int:
    """The collision term over one search group's answers best, cost (B,) (the ordinary search's), in place.
    mask: the group's (None, a prepared handle or bool array). Returns how many searches had to settle
    (their answer paid a penalty).
    Two compiled calls per group (the answers' penalties, then the passes) and at most one batch search:
    per-agent calls into compiled code cost more than the work itself."""
    group = Group(np.ascontiguousarray(group.ids, dtype=np.int64), np.ascontiguousarray(group.q, dtype=np.float32),
                  np.ascontiguousarray(group.currents, dtype=np.int64),
                  np.ascontiguousarray(group.weights, dtype=np.float64), group.roots, group.yaws)
    best_i = np.ascontiguousarray(best, dtype=np.int64)
    pen = np.empty(len(group.ids))
    _answer_penalties(cand, world, group, best_i, pen)
    todo = np.flatnonzero(pen > 0.0)
    if not len(todo):
        return 0
    index = _tiles(searcher, mask)
    q, cur = group.q, group.currents
    seeds, seed_costs = best_i[todo].copy(), np.asarray(cost, dtype=np.float64)[todo].copy()
    # Where the playing frame won (bias), seed the pass with the best other frame instead (bias -inf returns
    # it): its total bounds the pass from the start, where none would price frames until the bound tightens.
    stay = np.flatnonzero(seeds == cur[todo])
    if len(stay) > 3:
        seeds[stay], seed_costs[stay] = searcher.search_batch(q[todo[stay]], current=cur[todo[stay]], skip=int(skip),
                                                              bias=-np.inf, mask=mask)
    else:       # a few: on this thread (a batch hands off to the thread pool)
        for k in stay:
            seeds[k], seed_costs[k] = searcher.search(q[todo[k]], current=int(cur[todo[k]]), skip=int(skip),
                                                      bias=-np.inf, mask=mask)
    out_best, out_cost = best_i.copy(), np.asarray(cost, dtype=np.float64).copy()
    _settle_all(index, group, int(skip), float(bias), todo, seeds, seed_costs, cand, world, out_best, out_cost)
    best[:], cost[:] = out_best, out_cost
    return len(todo)


def brute_with_penalty(searcher, mask, q, current: int, skip: int, bias: float, weight: float, cand: Candidates,
                       at: Placed) -> tuple[int, float]:
    """The reference: every frame's feature cost (common.canonical_costs, plus annotations' frame cost) plus
    weight * penalty, the least under the search rule."""
    valid, _ = searcher.mask_structure(mask)
    enter = searcher.rules.enter
    others = (valid if enter is None else valid & enter).copy()
    cost32 = canonical_costs(np.ascontiguousarray(searcher.features.T), np.asarray(q, dtype=np.float32))
    if searcher.rules.cost is not None:
        cost32 = cost32 + searcher.rules.cost
    pen = np.empty(searcher.n_frames)
    penalties(cand.paths, cand.point_k, at.rx, at.rz, at.yaw, tuple(at.shapes), np.asarray(at.agents, dtype=np.float64),
              pen)
    total = cost32.astype(np.float64) + weight * pen
    cur_ok, cur_t = False, float("inf")
    if current >= 0:
        others[max(0, current - skip):current + skip + 1] = False
        cur_ok, cur_t = bool(valid[current]), float(total[current])
    idx = np.flatnonzero(others)
    best_f, best_t = -1, float("inf")
    if len(idx):
        k = int(np.argmin(total[idx]))
        best_f, best_t = int(idx[k]), float(total[idx[k]])
    return decide(current, cur_ok, cur_t, best_f, best_t, bias)
