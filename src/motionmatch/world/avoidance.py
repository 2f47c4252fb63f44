"""Local avoidance between crowd agents: sampled reciprocal velocity obstacles on the ground plane.

Each tick every agent picks, among candidate velocities (its preferred velocity, its previous choice,
standing still and rings of directions at a few speeds), the one with the least penalty

    |v - v_pref| + smoothness * |v - v_prev| + collision / time_to_collision(v)

where the time to collision with each neighbour assumes reciprocity (van den Berg et al., "Reciprocal
Velocity Obstacles for real-time multi-agent navigation", 2008): agent i moving at v meets neighbour j
as if their relative velocity were 2 v - v_i - v_j, so two agents each take half of the evasion and do
not oscillate. Neighbours already closer than two radii push apart instead. Only the nearest
`max_neighbours` within `neighbour_distance` count; a uniform grid finds them, so 1,000+ agents stay cheap.

Static obstacles (world/obstacles.py) add a collision term of their own: `obstacle_weight / time_to_hit(v)`,
the time until the agent, moving at v, comes within `radius` of a shape (no reciprocity: a wall does not
take half of the evasion), and a push out of a shape it already overlaps. Without obstacles the term
costs nothing (an empty loop).

Agents that hold their place (crowd goal agents that have arrived: `hold` > 0) do not evade: they stand
unless someone overlaps them closer than their hold distance, and the others treat them like a wall (no
reciprocity) but may pass as close as that distance, half the spacing of the goals they stand on, so a
packed goal area can be walked into between agents already standing on theirs (docs/OBSTACLES.md).

Positions and velocities are (x, z) in metres and m/s (Y up, the plane of the controller).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numba as nb
import numpy as np

from .obstacles import Obstacles, nearest, no_obstacles, time_to_hit


@dataclass
class AvoidanceSettings:
    radius: float = 0.3                 # m per agent: simulations >= 0.6 m apart keep roots >= 0.3 m
    horizon: float = 2.0                # s: collisions further ahead cost nothing
    collision_weight: float = 1.5       # (m/s) * s: penalty of a collision 1 s ahead, in m/s of deviation
    smoothness: float = 0.3             # weight of changing the chosen velocity (damps flicker)
    separation_weight: float = 4.0      # per m/s of approach while overlapping
    side_bias: float = 0.6              # per m/s of sideways velocity to the left: pass on the right,
                                        # which breaks the symmetric deadlocks of head-on meetings
    neighbour_distance: float = 6.0     # m
    max_neighbours: int = 10
    directions: int = 16                # candidate directions per speed ring
    speed_fractions: tuple = (0.35, 0.7, 1.0)
    obstacle_radius: float = 0.45       # m kept from obstacles: an agent's 0.3 m and most of the 0.2 m a
                                        # character root may stray from its simulation (clamp_radius)
    obstacle_weight: float = 3.0        # (m/s) * s: as collision_weight, for static obstacles (which never
                                        # evade: twice the reciprocal weight, as the agent does it all)


@dataclass
class AvoidanceState:
    """Structure-of-arrays state of avoidance over n agents: the velocity each chose last tick (n, 2)."""
    chosen: np.ndarray

    @classmethod
    def zeros(cls, n: int) -> "AvoidanceState":
        return cls(chosen=np.zeros((n, 2)))


@nb.njit(cache=True, fastmath=True)
def _time_to_collision(px, pz, vx, vz, r2) -> float:
    """Smallest t >= 0 with |p + v t| <= R (p: other minus self, v: self minus other), inf if never."""
    a = vx * vx + vz * vz
    b = px * vx + pz * vz            # approaching when b > 0 (moving toward the other)
    if b <= 0.0 or a < 1e-12:
        return math.inf
    c = px * px + pz * pz - r2
    disc = b * b - a * c
    if disc <= 0.0:
        return math.inf
    return max((b - math.sqrt(disc)) / a, 0.0)


class Penalties(NamedTuple):
    """AvoidanceSettings' numbers the compiled choice reads (metres, seconds, weights in m/s)."""
    radius: float
    horizon: float
    collision: float
    smoothness: float
    separation: float
    side: float
    obstacle_radius: float
    obstacle: float


@nb.njit(cache=True)
def _choose_range(lo, hi, pos, vel, pref, prev, max_speed, neighbours, cand_dirs, fractions, pen, obs, hold, out):
    """The chosen velocity of agents lo..hi-1 into out. The serial and the parallel choice both run this one
    compiled loop, so a choice does not depend on the thread count (runtime/touchups.py's _output_range)."""
    radius, horizon, w_col, w_smooth = pen.radius, pen.horizon, pen.collision, pen.smoothness
    w_sep, w_side, obs_radius, w_obs = pen.separation, pen.side, pen.obstacle_radius, pen.obstacle
    K = neighbours.shape[1]
    r = 2.0 * radius
    r2 = r * r
    n_cand = 3 + cand_dirs.shape[0] * fractions.shape[0]
    near = np.empty(K, dtype=np.int64)
    for i in range(lo, hi):
        # Neighbours that could be met within the horizon at any candidate velocity (the reciprocal
        # relative velocity 2 v - v_i - v_j is at most 2 top + |v_i| + |v_j|); the others cost nothing.
        vi = math.hypot(vel[i, 0], vel[i, 1])
        m = 0
        for kk in range(K):
            j = neighbours[i, kk]
            if j < 0:
                break
            dist = math.hypot(pos[j, 0] - pos[i, 0], pos[j, 1] - pos[i, 1])
            if dist - r <= horizon * (2.0 * max_speed[i] + vi + math.hypot(vel[j, 0], vel[j, 1])):
                near[m] = j
                m += 1
        if hold[i] > 0.0:
            # Holding its place: stand, unless a neighbour is closer than the pair may come.
            pressed = False
            for kk in range(m):
                j = near[kk]
                rr = min(hold[i], hold[j]) if hold[j] > 0.0 else hold[i]
                pressed = pressed or math.hypot(pos[j, 0] - pos[i, 0], pos[j, 1] - pos[i, 1]) < rr
            if not pressed:
                out[i, 0], out[i, 1] = 0.0, 0.0
                continue
        # Obstacles within reach of the horizon at top speed count; overlapping one pushes out.
        here, onx, onz = nearest(obs, pos[i, 0], pos[i, 1])
        walls = here - obs_radius <= horizon * max_speed[i]
        if m == 0 and not walls:
            # Alone, the preferred velocity has the least penalty.
            out[i, 0], out[i, 1] = pref[i, 0], pref[i, 1]
            continue
        best, bx, bz = math.inf, pref[i, 0], pref[i, 1]
        ps = math.hypot(pref[i, 0], pref[i, 1])
        hx, hz = (pref[i, 0] / ps, pref[i, 1] / ps) if ps > 1e-9 else (0.0, 0.0)
        for c in range(n_cand):
            if c == 0:
                cx, cz = pref[i, 0], pref[i, 1]
            elif c == 1:
                cx, cz = prev[i, 0], prev[i, 1]
            elif c == 2:
                cx, cz = 0.0, 0.0
            else:
                k = c - 3
                d = k % cand_dirs.shape[0]
                s = fractions[k // cand_dirs.shape[0]] * max_speed[i]
                cx, cz = cand_dirs[d, 0] * s, cand_dirs[d, 1] * s
            cost = math.hypot(cx - pref[i, 0], cz - pref[i, 1]) + w_smooth * math.hypot(cx - prev[i, 0], cz - prev[i, 1])
            cost += w_side * max(cz * hx - cx * hz, 0.0)     # left of the heading (x right, z forward)
            if walls and cost < best:
                if here < obs_radius:
                    cost += w_sep * (max(-(cx * onx + cz * onz), 0.0) + (obs_radius - here))
                else:
                    th = time_to_hit(obs, pos[i, 0], pos[i, 1], cx, cz, obs_radius)
                    if th < horizon:
                        cost += w_obs / max(th, 0.05)
            for kk in range(m):
                if cost >= best:
                    break                                     # penalties only add up
                j = near[kk]
                px, pz = pos[j, 0] - pos[i, 0], pos[j, 1] - pos[i, 1]
                d2 = px * px + pz * pz
                # A neighbour holding its place may be passed as close as its hold distance.
                rj = min(r, hold[j]) if hold[j] > 0.0 else r
                if d2 < rj * rj:
                    # Overlapping: penalize any approach (the component of v - v_j toward the neighbour).
                    dist = math.sqrt(d2) + 1e-9
                    approach = ((cx - vel[j, 0]) * px + (cz - vel[j, 1]) * pz) / dist
                    cost += w_sep * (max(approach, 0.0) + (rj - dist))
                    continue
                if hold[j] > 0.0:
                    # It stands still and will not evade: the relative velocity is this agent's own.
                    tc = _time_to_collision(px, pz, cx - vel[j, 0], cz - vel[j, 1], rj * rj)
                else:
                    # Reciprocal: the relative velocity if the neighbour takes its half of the evasion.
                    tc = _time_to_collision(px, pz, 2.0 * cx - vel[i, 0] - vel[j, 0],
                                            2.0 * cz - vel[i, 1] - vel[j, 1], r2)
                if tc < horizon:
                    cost += w_col / max(tc, 0.05)
            if cost < best:
                best, bx, bz = cost, cx, cz
        out[i, 0] = bx
        out[i, 1] = bz


# The parallel choice's agents go to _choose_range in this many equal chunks (a compiled constant, so the
# kernel stays cacheable; numba shares the chunks out among its threads).
CHUNKS = 64


@nb.njit(cache=True)
def _choose(pos, vel, pref, prev, max_speed, neighbours, cand_dirs, fractions, pen, obs, hold, out):
    _choose_range(0, pos.shape[0], pos, vel, pref, prev, max_speed, neighbours, cand_dirs, fractions, pen, obs,
                  hold, out)


@nb.njit(cache=True, parallel=True)
def _choose_parallel(pos, vel, pref, prev, max_speed, neighbours, cand_dirs, fractions, pen, obs, hold, out):
    n = pos.shape[0]
    chunks = max(min(n, CHUNKS), 1)
    for c in nb.prange(chunks):
        _choose_range(c * n // chunks, (c + 1) * n // chunks, pos, vel, pref, prev, max_speed, neighbours,
                      cand_dirs, fractions, pen, obs, hold, out)


_NONE = no_obstacles()


# Cells of the neighbour grid per agent at most (a crowd spread far apart gets cells wider than the neighbour
# distance instead of a grid mostly empty).
GRID_CELLS_PER_AGENT = 4


@nb.njit(cache=True)
def _grid(pos, cell, x0, z0, nx, nz):
    """Agents sorted by grid cell (counting sort): (order (n,), starts (nx * nz + 1,)); agents whose position
    is not finite are left out."""
    n = pos.shape[0]
    key = np.full(n, -1, dtype=np.int64)
    counts = np.zeros(nx * nz + 1, dtype=np.int64)
    for i in range(n):
        if np.isfinite(pos[i, 0]) and np.isfinite(pos[i, 1]):
            cx = min(int((pos[i, 0] - x0) / cell), nx - 1)
            cz = min(int((pos[i, 1] - z0) / cell), nz - 1)
            key[i] = cz * nx + cx
            counts[key[i] + 1] += 1
    for c in range(nx * nz):
        counts[c + 1] += counts[c]
    order = np.empty(counts[nx * nz], dtype=np.int64)
    fill = counts[:-1].copy()
    for i in range(n):
        if key[i] >= 0:
            order[fill[key[i]]] = i
            fill[key[i]] += 1
    return order, counts


@nb.njit(cache=True)
def _nearest_range(lo, hi, pos, order, starts, cell, x0, z0, nx, nz, d2max, out):
    """Rows lo..hi-1 of the neighbour table: each agent's nearest others closer than sqrt(d2max), nearest first
    (equal distances: the lower index first), from the 3 x 3 cells around it (cells are at least the distance
    wide)."""
    k = out.shape[1]
    best = np.empty(k)
    for i in range(lo, hi):
        out[i, :] = -1
        if not (np.isfinite(pos[i, 0]) and np.isfinite(pos[i, 1])):
            continue
        cx = min(int((pos[i, 0] - x0) / cell), nx - 1)
        cz = min(int((pos[i, 1] - z0) / cell), nz - 1)
        m = 0
        for gz in range(max(cz - 1, 0), min(cz + 2, nz)):
            for gx in range(max(cx - 1, 0), min(cx + 2, nx)):
                c = gz * nx + gx
                for t in range(starts[c], starts[c + 1]):
                    j = order[t]
                    if j == i:
                        continue
                    dx, dz = pos[j, 0] - pos[i, 0], pos[j, 1] - pos[i, 1]
                    d2 = dx * dx + dz * dz
                    if d2 >= d2max or (m == k and (d2 > best[k - 1] or (d2 == best[k - 1] and j > out[i, k - 1]))):
                        continue
                    # Insert (d2, j) into the sorted first m (dropping the last when full).
                    p = min(m, k - 1)
                    while p > 0 and (best[p - 1] > d2 or (best[p - 1] == d2 and out[i, p - 1] > j)):
                        best[p], out[i, p] = best[p - 1], out[i, p - 1]
                        p -= 1
                    best[p], out[i, p] = d2, j
                    m = min(m + 1, k)


@nb.njit(cache=True)
def _nearest(pos, order, starts, cell, x0, z0, nx, nz, d2max, out):
    _nearest_range(0, pos.shape[0], pos, order, starts, cell, x0, z0, nx, nz, d2max, out)


@nb.njit(cache=True, parallel=True)
def _nearest_parallel(pos, order, starts, cell, x0, z0, nx, nz, d2max, out):
    n = pos.shape[0]
    chunks = max(min(n, CHUNKS), 1)
    for c in nb.prange(chunks):
        _nearest_range(c * n // chunks, (c + 1) * n // chunks, pos, order, starts, cell, x0, z0, nx, nz, d2max, out)


def neighbour_table(positions: np.ndarray, max_neighbours: int, distance: float, parallel: bool = False) -> np.ndarray:
    """(n, k) int64 indices of each agent's nearest other agents closer than `distance` metres (nearest
    first; equal distances: the lower index first), -1 padded. positions: (n, 2). A uniform grid of cells
    at least `distance` wide; parallel: rows on all numba threads (the same table)."""
    pos = np.ascontiguousarray(positions, dtype=np.float64)
    n = len(pos)
    k = min(max_neighbours, n - 1)
    if k <= 0:
        return np.full((n, 1), -1, dtype=np.int64)
    finite = pos[np.isfinite(pos).all(axis=1)]
    lo = finite.min(axis=0) if len(finite) else np.zeros(2)
    span = finite.max(axis=0) - lo if len(finite) else np.zeros(2)
    cell = max(float(distance), float(span.max()) / math.sqrt(GRID_CELLS_PER_AGENT * n), 1e-6)
    nx, nz = (int(w / cell) + 1 for w in span)
    order, starts = _grid(pos, cell, float(lo[0]), float(lo[1]), nx, nz)
    out = np.empty((n, k), dtype=np.int64)
    (_nearest_parallel if parallel else _nearest)(pos, order, starts, cell, float(lo[0]), float(lo[1]), nx, nz,
                                                  float(distance) ** 2, out)
    return out


def avoid(state: AvoidanceState, positions: np.ndarray, velocities: np.ndarray, preferred: np.ndarray,
          max_speeds: np.ndarray, settings: AvoidanceSettings | None = None,
          obstacles: Obstacles | None = None, hold: np.ndarray | None = None, parallel: bool = False) -> np.ndarray:
    """Velocities (n, 2) m/s close to `preferred` (n, 2) that keep agents apart (and `radius` m away from
    static obstacles, when given), given the agents' positions (n, 2) m, current velocities (n, 2) m/s
    and top speeds (n,) m/s; updates `state`. hold (n,) m: agents holding their place (> 0, the distance
    between roots others may pass them at) stand and do not evade; 0 or None: none. parallel: choose on
    all numba threads (the same velocities; callers follow their crowd's thread choice, runtime/threads.py,
    so a busy core makes this serial too)."""
    s = settings or AvoidanceSettings()
    pos = np.ascontiguousarray(positions, dtype=np.float64)
    n = len(pos)
    out = np.empty((n, 2))
    if n == 0:
        return out
    ang = np.arange(s.directions) * (2.0 * np.pi / s.directions)
    dirs = np.stack([np.sin(ang), np.cos(ang)], axis=1)
    choose = _choose_parallel if parallel else _choose
    choose(pos, np.ascontiguousarray(velocities, dtype=np.float64), np.ascontiguousarray(preferred, dtype=np.float64),
           state.chosen, np.ascontiguousarray(max_speeds, dtype=np.float64),
           neighbour_table(pos, s.max_neighbours, s.neighbour_distance, parallel), dirs,
           np.asarray(s.speed_fractions, dtype=np.float64),
           Penalties(float(s.radius), float(s.horizon), float(s.collision_weight), float(s.smoothness),
                     float(s.separation_weight), float(s.side_bias), float(s.obstacle_radius),
                     float(s.obstacle_weight)),
           _NONE if obstacles is None else obstacles,
           np.zeros(n) if hold is None else np.ascontiguousarray(hold, dtype=np.float64), out)
    state.chosen[:] = out
    return out
