"""Routes around static obstacles: a grid A* over the ground plane with every shape grown by a clearance,
giving each goal-driven agent a path to its goal, and the following of such paths (a point ahead on the
path that the agent can walk to in a straight line), so agents head for the doorway and the gaps between
pillars instead of walking straight at the wall that lies between them and their goal.

Steering (obstacles.steer) and the crowd's avoidance only look a second or two ahead: from the face of a
wall, no direction within their reach leads round it, and agents queue against the wall or slide along it
the wrong way. A route is the whole way round, planned once per agent (and again when the agent is
pushed off it); steering and avoidance stay in charge of the next metres.

The grid: cells of ROUTE_CELL m (coarser when the layout would need more than ROUTE_MAX_CELLS) over the
box of the shapes, starts and goals; each cell holds its clearance (distance to the nearest shape, m,
capped). A step's cost is its length times 1 + NEAR_COST per metre of clearance under PREFERRED_CLEARANCE
(routes keep to the middle of gaps, where two flows can pass) + WALL_COST per metre under
ROUTE_CLEARANCE (a gap one agent wide is taken only when the way round is much longer);
cells closer than HARD_CLEARANCE to a shape (an agent's radius) are never entered. Units: metres, (x, z)
on the ground plane (Y up).
"""
from __future__ import annotations

import heapq
import math
from typing import NamedTuple

import numba
import numpy as np

from .obstacles import STEER_RADIUS, Obstacles, nearest, segment_clearance, signed_distance

ROUTE_CELL = 0.1                # m: grid cells (a 0.1 m cell keeps a 1.5 m gap 15 cells wide)
ROUTE_MAX_CELLS = 2_000_000     # cells: larger layouts get coarser cells
ROUTE_MARGIN = 3.0              # m of grid around the shapes, starts and goals (routes may go round)
# m: steering's radius and room to sway: a gap narrower than twice this (1.4 m) holds one agent at a
# time, which steering and avoidance (0.45 m from shapes) squeeze through slowly or not at all.
ROUTE_CLEARANCE = STEER_RADIUS + 0.2
HARD_CLEARANCE = 0.3            # m: an agent's radius; closer cells are walls
PREFERRED_CLEARANCE = 1.2       # m: closer cells cost more ...
NEAR_COST = 1.5                 # ... this much per metre under it, per metre walked
WALL_COST = 40.0                # per metre under ROUTE_CLEARANCE, per metre walked
LANE_OFFSET = 0.6               # m a route keeps to the right of the middle of a gap ...
LANE_CLEARANCE = 0.75           # ... as long as it keeps this clearance (keep_right)
LANE_EASE = 1.5                 # m at either end of a route over which the lane offset grows
KEEP_EVERY = 0.3                # m between the waypoints kept of a planned route
SNAP_RADIUS = 2.0               # m: a start or goal in a wall cell joins the nearest free cell this close
# Following (follow_routes)
CARROT = 2.0                    # m along the path: the point aimed at, when it can be walked to
# m: the straight walk to the aimed point keeps this from every shape: steering's own radius, so that
# steering lets the agent walk there (a point it would turn away from pins agents to corners).
SIGHT_CLEARANCE = STEER_RADIUS
NUDGE = 0.3                     # m along the path: the point aimed at when none of the four is in sight
WINDOW_BACK, WINDOW_AHEAD = 0.5, 3.0    # m of path searched for the agent's place on it each tick
REPLAN_OFF = 1.5                # m off the path (or no point of it in sight): plan again ...
REPLAN_EVERY = 1.0              # ... at most once per this many seconds


class RouteGrid(NamedTuple):
    """Clearance of every cell (H, W) float32, metres, capped; cell (r, c) is centred at
    (x0 + c * cell, z0 + r * cell)."""
    clear: np.ndarray
    x0: float
    z0: float
    cell: float


class Routes(NamedTuple):
    """Paths of n agents, structure-of-arrays: points (P, 2) m of all paths one after another, arc (P,)
    m along each path from its start, first (n,) and count (n,) int64: agent i's rows."""
    points: np.ndarray
    arc: np.ndarray
    first: np.ndarray
    count: np.ndarray


# ---------------------------------------------------------------------------------------------
# the grid


@numba.njit(cache=True)
def _fill_clearance(obs, clear, x0, z0, cell, cap):
    """clear[r, c] = min(cap, signed distance of the cell centre to any shape), visiting per shape only
    the cells within cap of it (a layout of many small shapes costs their area, not the grid's)."""
    centers, radii, lo, hi = obs
    H, W = clear.shape
    for k in range(radii.shape[0] + lo.shape[0]):
        if k < radii.shape[0]:
            ax, az = centers[k, 0] - radii[k], centers[k, 1] - radii[k]
            bx, bz = centers[k, 0] + radii[k], centers[k, 1] + radii[k]
        else:
            b = k - radii.shape[0]
            ax, az, bx, bz = lo[b, 0], lo[b, 1], hi[b, 0], hi[b, 1]
        c0 = max(int(math.floor((ax - cap - x0) / cell)), 0)
        c1 = min(int(math.ceil((bx + cap - x0) / cell)), W - 1)
        r0 = max(int(math.floor((az - cap - z0) / cell)), 0)
        r1 = min(int(math.ceil((bz + cap - z0) / cell)), H - 1)
        for r in range(r0, r1 + 1):
            z = z0 + r * cell
            for c in range(c0, c1 + 1):
                x = x0 + c * cell
                if k < radii.shape[0]:
                    d = math.hypot(x - centers[k, 0], z - centers[k, 1]) - radii[k]
                else:
                    # Signed distance to the box (negative inside).
                    qx = abs(x - 0.5 * (ax + bx)) - 0.5 * (bx - ax)
                    qz = abs(z - 0.5 * (az + bz)) - 0.5 * (bz - az)
                    d = math.hypot(max(qx, 0.0), max(qz, 0.0)) + min(max(qx, qz), 0.0)
                if d < clear[r, c]:
                    clear[r, c] = d


def route_grid(obs: Obstacles, points) -> RouteGrid:
    """The clearance grid over the shapes of obs and the points (M, 2) m (starts, goals) with
    ROUTE_MARGIN m around them."""
    p = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    lo = [p.min(axis=0)] if len(p) else []
    hi = [p.max(axis=0)] if len(p) else []
    if len(obs.radii):
        lo.append((obs.centers - obs.radii[:, None]).min(axis=0))
        hi.append((obs.centers + obs.radii[:, None]).max(axis=0))
    if len(obs.box_min):
        lo.append(obs.box_min.min(axis=0))
        hi.append(obs.box_max.max(axis=0))
    a = np.min(lo, axis=0) - ROUTE_MARGIN
    b = np.max(hi, axis=0) + ROUTE_MARGIN
    cell = max(ROUTE_CELL, math.sqrt(float((b[0] - a[0]) * (b[1] - a[1])) / ROUTE_MAX_CELLS))
    W = int(math.ceil((b[0] - a[0]) / cell)) + 1
    H = int(math.ceil((b[1] - a[1]) / cell)) + 1
    cap = PREFERRED_CLEARANCE + cell
    clear = np.full((H, W), cap, dtype=np.float32)
    _fill_clearance(obs, clear, float(a[0]), float(a[1]), float(cell), float(cap))
    return RouteGrid(clear, float(a[0]), float(a[1]), float(cell))


# ---------------------------------------------------------------------------------------------
# A*


@numba.njit(cache=True)
def _snap(clear, r, c, hard, reach):
    """The cell nearest (r, c) (within `reach` cells) whose clearance is at least hard, as r * W + c;
    -1 when none."""
    H, W = clear.shape
    r = min(max(r, 0), H - 1)
    c = min(max(c, 0), W - 1)
    if clear[r, c] >= hard:
        return r * W + c
    best, bd = -1, math.inf
    for rr in range(max(r - reach, 0), min(r + reach, H - 1) + 1):
        for cc in range(max(c - reach, 0), min(c + reach, W - 1) + 1):
            d = (rr - r) ** 2 + (cc - c) ** 2
            if clear[rr, cc] >= hard and d < bd:
                best, bd = rr * W + cc, d
    return best


@numba.njit(cache=True)
def _step_cost(clear_to, length):
    c = float(clear_to)
    return length * (1.0 + NEAR_COST * max(PREFERRED_CLEARANCE - c, 0.0) + WALL_COST * max(ROUTE_CLEARANCE - c, 0.0))


@numba.njit(cache=True)
def _astar(clear, start, goal, cell, stamp, gen, g, parent):
    """Cells (as r * W + c, start first) of the cheapest 8-connected way from cell start to cell goal
    (no diagonal past a wall cell), empty when there is none; the clearances and costs are the module's
    constants (compiled in). stamp/gen: g and parent are valid where
    stamp == gen (the arrays serve every search of a grid without clearing)."""
    H, W = clear.shape
    gr, gc = goal // W, goal % W
    heap = [(0.0, start)]
    stamp[start] = gen
    g[start] = 0.0
    parent[start] = -1
    diag = math.sqrt(2.0)
    found = False
    while len(heap):
        f, u = heapq.heappop(heap)
        if u == goal:
            found = True
            break
        ur, uc = u // W, u % W
        # A stale heap entry (a cheaper way to u was found after it was pushed) is skipped.
        dr_, dc_ = abs(ur - gr), abs(uc - gc)
        if f > g[u] + cell * (max(dr_, dc_) + (diag - 1.0) * min(dr_, dc_)) + 1e-9:
            continue
        for dr in range(-1, 2):
            for dc in range(-1, 2):
                if dr == 0 and dc == 0:
                    continue
                vr, vc = ur + dr, uc + dc
                if vr < 0 or vr >= H or vc < 0 or vc >= W or clear[vr, vc] < HARD_CLEARANCE:
                    continue
                if dr != 0 and dc != 0 and (clear[ur + dr, uc] < HARD_CLEARANCE or clear[ur, uc + dc] < HARD_CLEARANCE):
                    continue
                length = cell * (diag if dr != 0 and dc != 0 else 1.0)
                v = vr * W + vc
                nv = g[u] + _step_cost(clear[vr, vc], length)
                if stamp[v] != gen or nv < g[v]:
                    stamp[v] = gen
                    g[v] = nv
                    parent[v] = u
                    ar, ac = abs(vr - gr), abs(vc - gc)
                    heapq.heappush(heap, (nv + cell * (max(ar, ac) + (diag - 1.0) * min(ar, ac)), v))
    if not found:
        return np.empty(0, dtype=np.int64)
    n = 1
    u = goal
    while parent[u] >= 0:
        u = parent[u]
        n += 1
    out = np.empty(n, dtype=np.int64)
    u = goal
    for k in range(n - 1, -1, -1):
        out[k] = u
        u = parent[u]
    return out


class RoutePlanner:
    """Plans routes on one grid (route_grid) for any number of agents; keeps the search arrays."""

    def __init__(self, obs: Obstacles, points):
        self.obs = obs
        self.grid = route_grid(obs, points)
        size = self.grid.clear.size
        self.stamp = np.zeros(size, dtype=np.int32)
        self.g = np.zeros(size)
        self.parent = np.zeros(size, dtype=np.int64)
        self.gen = 0

    def cell_of(self, p) -> tuple[int, int]:
        gr = self.grid
        return int(round((p[1] - gr.z0) / gr.cell)), int(round((p[0] - gr.x0) / gr.cell))

    def plan(self, start, goal) -> np.ndarray:
        """Waypoints (K, 2) m from start to goal round the obstacles: the exact start and goal at the ends,
        the cell centres of the cheapest grid way between, without the points where it goes straight on.
        [start, goal] when the grid has no way (a goal walled in, or the ends further than SNAP_RADIUS from
        a free cell)."""
        gr = self.grid
        start, goal = np.asarray(start, dtype=np.float64), np.asarray(goal, dtype=np.float64)
        straight = np.stack([start, goal])
        if segment_clearance(self.obs, start[0], start[1], goal[0], goal[1]) >= PREFERRED_CLEARANCE:
            return straight
        reach = int(math.ceil(SNAP_RADIUS / gr.cell))
        a = _snap(gr.clear, *self.cell_of(start), HARD_CLEARANCE, reach)
        b = _snap(gr.clear, *self.cell_of(goal), HARD_CLEARANCE, reach)
        if a < 0 or b < 0:
            return straight
        self.gen += 1
        cells = _astar(gr.clear, a, b, gr.cell, self.stamp, self.gen, self.g, self.parent)
        if not len(cells):
            return straight
        W = gr.clear.shape[1]
        pts = np.stack([gr.x0 + (cells % W) * gr.cell, gr.z0 + (cells // W) * gr.cell], axis=1)
        pts = keep_right(self.obs, np.concatenate([start[None], pts[1:-1], goal[None]]))
        step = max(1, int(round(KEEP_EVERY / gr.cell)))
        return np.concatenate([pts[:-1:step], pts[-1:]])


def keep_right(obs: Obstacles, pts: np.ndarray) -> np.ndarray:
    """The path pts (N, 2) m moved up to LANE_OFFSET m to its right where the room allows (a point keeps
    at least LANE_CLEARANCE, or its own clearance when it had less), eased in over the first and last
    LANE_EASE m: two flows through a doorway or round a pillar keep to two lanes, as avoidance's side
    bias passes on the right."""
    n = len(pts)
    if n < 3:
        return pts
    from scipy.ndimage import minimum_filter1d, uniform_filter1d

    k = np.arange(n)
    tangent = pts[np.minimum(k + 5, n - 1)] - pts[np.maximum(k - 5, 0)]
    tangent /= np.maximum(np.linalg.norm(tangent, axis=1), 1e-9)[:, None]
    right = np.stack([tangent[:, 1], -tangent[:, 0]], axis=1)     # x right, z forward: +Z's right is +X
    here = signed_distance(obs, pts)
    need = np.minimum(LANE_CLEARANCE, here)
    shift = np.zeros(n)
    for s in np.linspace(LANE_OFFSET, 0.1, int(round(LANE_OFFSET / 0.1))):
        ok = (shift == 0.0) & (signed_distance(obs, pts + s * right) >= need)
        shift[ok] = s
    arc = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(pts, axis=0), axis=1))])
    shift *= np.clip(np.minimum(arc, arc[-1] - arc) / LANE_EASE, 0.0, 1.0)
    # Narrow stretches pull the lane in before and after them, smoothly.
    shift = uniform_filter1d(minimum_filter1d(shift, 11, mode="nearest"), 11, mode="nearest")
    out = pts + shift[:, None] * right
    bad = signed_distance(obs, out) < need - 0.05
    out[bad] = pts[bad]
    return out


def pack_routes(paths) -> Routes:
    """Routes from a list of n waypoint arrays (K_i, 2) m."""
    count = np.array([len(p) for p in paths], dtype=np.int64)
    first = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
    points = np.ascontiguousarray(np.concatenate(paths).astype(np.float64).reshape(-1, 2))
    arc = np.zeros(len(points))
    for f, k in zip(first, count):
        seg = np.linalg.norm(np.diff(points[f:f + k], axis=0), axis=1)
        arc[f + 1:f + k] = np.cumsum(seg)
    return Routes(points, arc, first, count)


# ---------------------------------------------------------------------------------------------
# following


@numba.njit(cache=True)
def _point_at(points, arc, f, k, s):
    """The point s m along the path of rows f .. f + k - 1 (clamped to its ends) and its segment."""
    if s <= 0.0 or k == 1:
        return points[f, 0], points[f, 1], 0
    for j in range(1, k):
        if arc[f + j] >= s:
            L = arc[f + j] - arc[f + j - 1]
            t = 0.0 if L < 1e-12 else (s - arc[f + j - 1]) / L
            return (points[f + j - 1, 0] + t * (points[f + j, 0] - points[f + j - 1, 0]),
                    points[f + j - 1, 1] + t * (points[f + j, 1] - points[f + j - 1, 1]), j - 1)
    return points[f + k - 1, 0], points[f + k - 1, 1], k - 2


@numba.njit(cache=True)
def follow_routes(obs, points, arc, first, count, agents, pos, progress, out, lost):
    """For each agent i of `agents` (int64) at pos[i] (x, z) m on its path: its place on the path
    (progress[i], m along it: the nearest point of the path within WINDOW_BACK behind and WINDOW_AHEAD
    ahead of the last), and in out[i] the point it should walk to: CARROT m further on, or nearer, the
    furthest of four that it can walk to in a straight line with SIGHT_CLEARANCE (else NUDGE m ahead of
    its place). lost[i] is set when the agent is more than REPLAN_OFF m off its path or sees none of the four."""
    for a in range(agents.shape[0]):
        i = agents[a]
        f, k = first[i], count[i]
        px, pz = pos[i, 0], pos[i, 1]
        lo, hi = progress[i] - WINDOW_BACK, progress[i] + WINDOW_AHEAD
        best, bs = math.inf, progress[i]
        for j in range(1, k):
            s0, s1 = arc[f + j - 1], arc[f + j]
            if s1 < lo or s0 > hi:
                continue
            ax, az = points[f + j - 1, 0], points[f + j - 1, 1]
            dx, dz = points[f + j, 0] - ax, points[f + j, 1] - az
            L2 = dx * dx + dz * dz
            t = 0.0 if L2 < 1e-18 else min(max(((px - ax) * dx + (pz - az) * dz) / L2, 0.0), 1.0)
            s = min(max(s0 + t * (s1 - s0), lo), hi)
            qx, qz, _ = _point_at(points, arc, f, k, s)
            d = math.hypot(px - qx, pz - qz)
            if d < best:
                best, bs = d, s
        if k == 1:
            best, bs = math.hypot(px - points[f, 0], pz - points[f, 1]), 0.0
        progress[i] = bs
        lost[i] = best > REPLAN_OFF
        seen = False
        need = min(SIGHT_CLEARANCE, nearest(obs, px, pz)[0] - 0.01)
        for m in range(4, -1, -1):
            s = bs + (CARROT * m / 4.0 if m > 0 else NUDGE)
            qx, qz, _ = _point_at(points, arc, f, k, s)
            if m == 0 or segment_clearance(obs, px, pz, qx, qz) >= need:
                out[i, 0], out[i, 1] = qx, qz
                seen = m > 0
                break
        if not seen and bs < arc[f + k - 1] - 1e-6:
            lost[i] = True


class RouteState:
    """The routes of a crowd's goal-driven agents and where each is along its own: planned at the start
    (route_targets plans agents it has not seen), planned again from where an agent stands when it is
    lost (follow_routes), at most once per REPLAN_EVERY seconds."""

    def __init__(self, obs: Obstacles, starts, goals, agents):
        self.obs = obs
        self.agents = np.asarray(agents, dtype=np.int64)
        n = len(starts)
        self.goals = np.asarray(goals, dtype=np.float64).reshape(n, 2)
        pts = np.concatenate([np.asarray(starts, dtype=np.float64).reshape(n, 2)[self.agents], self.goals[self.agents]])
        self.planner = RoutePlanner(obs, pts)
        self.paths = [np.stack([self.goals[i], self.goals[i]]) for i in range(n)]
        for i in self.agents:
            self.paths[i] = self.planner.plan(np.asarray(starts, dtype=np.float64)[i], self.goals[i])
        self.routes = pack_routes(self.paths)
        self.progress = np.zeros(n)
        self.planned_at = np.zeros(n)
        self.lost = np.zeros(n, dtype=np.bool_)
        self.plans = len(self.agents)           # routes planned so far (replans included)


def route_targets(state: RouteState, positions, t: float, agents=None) -> np.ndarray:
    """(n, 2) the points (x, z) m the agents walk toward at time t (s), from their positions (n, 2) m:
    for `agents` (default: all of the state's) a point ahead on their route, replanned for those that
    got lost (docs/OBSTACLES.md, "Routes"); other rows are the goals."""
    pos = np.ascontiguousarray(positions, dtype=np.float64)
    agents = state.agents if agents is None else np.asarray(agents, dtype=np.int64)
    out = state.goals.copy()
    r = state.routes
    follow_routes(state.obs, r.points, r.arc, r.first, r.count, agents, pos, state.progress, out, state.lost)
    again = [i for i in agents[state.lost[agents]] if t - state.planned_at[i] >= REPLAN_EVERY]
    if again:
        for i in again:
            state.paths[i] = state.planner.plan(pos[i], state.goals[i])
            state.progress[i], state.planned_at[i] = 0.0, t
        state.plans += len(again)
        state.routes = r = pack_routes(state.paths)
        idx = np.asarray(again, dtype=np.int64)
        follow_routes(state.obs, r.points, r.arc, r.first, r.count, idx, pos, state.progress, out, state.lost)
    return out


def remaining(state: RouteState) -> np.ndarray:
    """(n,) metres of each agent's route still ahead of its place on it."""
    r = state.routes
    return r.arc[r.first + r.count - 1] - state.progress
