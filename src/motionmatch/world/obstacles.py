"""Static obstacles on the ground plane: circles and axis-aligned boxes, as structure-of-arrays, with
their signed distance, the clearance of segments and trajectories, steering around them and the
penetration figure of metrics.json.

File form (scenario and crowd files, the app): a list of shapes, metres, (x, z) on the ground plane (Y up)

    "obstacles": [{"center": [x, z], "radius": r}, {"min": [x0, z0], "max": [x1, z1]}, ...]

Signed distance: negative inside a shape, positive outside, in metres; the outward direction is the
distance's gradient. Steering (`steer`) keeps a point `radius` metres away from every shape by turning
its wanted velocity to the nearest direction whose straight run over a lookahead stays clear
(docs/OBSTACLES.md).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np

MAX_OBSTACLES = 10_000          # shapes per file: every steering agent looks at each of them
MAX_COORDINATE = 1e4            # m, like crowd files' coordinates
MAX_SIZE = 1e3                  # m: a radius or a box side
# Steering (steer): kept clearance from every shape (m): an agent's 0.3 m plus the 0.2 m the character
# root may stray from the simulation (clamp_radius), so a root keeps out while its simulation keeps this.
STEER_RADIUS = 0.5
STEER_LOOKAHEAD_S = 1.5         # s of travel at the wanted speed checked ahead ...
STEER_MIN_LOOKAHEAD = 1.0       # ... but never fewer metres (slow walking still sees what is ahead)
STEER_STEP_DEG = 7.5            # candidate directions every this many degrees ...
STEER_MAX_DEG = 150.0           # ... up to this far from the wanted one on either side


class Obstacles(NamedTuple):
    """Circles and boxes (structure-of-arrays, float64, metres on the (x, z) plane)."""
    centers: np.ndarray         # (C, 2) circle centres
    radii: np.ndarray           # (C,) circle radii
    box_min: np.ndarray         # (B, 2) box corners with the smaller x and z
    box_max: np.ndarray         # (B, 2) box corners with the larger x and z

    @property
    def count(self) -> int:
        return len(self.radii) + len(self.box_min)

    def to_list(self) -> list[dict]:
        """The file form (circles first, then boxes)."""
        return ([{"center": [float(x), float(z)], "radius": float(r)} for (x, z), r in zip(self.centers, self.radii)]
                + [{"min": [float(a[0]), float(a[1])], "max": [float(b[0]), float(b[1])]}
                   for a, b in zip(self.box_min, self.box_max)])


def no_obstacles() -> Obstacles:
    """An empty set (every kernel loops over nothing)."""
    return Obstacles(np.zeros((0, 2)), np.zeros(0), np.zeros((0, 2)), np.zeros((0, 2)))


def _number(v) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return abs(v) <= 1e300 if isinstance(v, int) else math.isfinite(v)


def _xz(value, error, name: str) -> tuple[float, float]:
    if not isinstance(value, (list, tuple)) or len(value) != 2 or not all(_number(v) for v in value):
        raise error(f"{name}: expected two numbers [x, z] in metres")
    if max(abs(value[0]), abs(value[1])) > MAX_COORDINATE:
        raise error(f"{name}: coordinates beyond {MAX_COORDINATE:g} m")
    return float(value[0]), float(value[1])


def parse_obstacles(value, error=ValueError, name: str = "obstacles") -> Obstacles:
    """Validate the file form (a list of {"center", "radius"} circles and {"min", "max"} boxes) and build
    Obstacles; `error` (a ValueError subclass) names the entry and the field, e.g.
    `obstacles[2].radius: expected metres in (0, 1000]`."""
    if not isinstance(value, list):
        raise error(f"{name}: expected a list of circles {{\"center\", \"radius\"}} and boxes {{\"min\", \"max\"}}")
    if len(value) > MAX_OBSTACLES:
        raise error(f"{name}: {len(value)} obstacles, at most {MAX_OBSTACLES}")
    centers, radii, lo, hi = [], [], [], []
    for i, o in enumerate(value):
        where = f"{name}[{i}]"
        if not isinstance(o, dict):
            raise error(f"{where}: expected an object (a circle {{\"center\", \"radius\"}} or a box {{\"min\", \"max\"}})")
        keys = set(o)
        if keys == {"center", "radius"}:
            centers.append(_xz(o["center"], error, f"{where}.center"))
            r = o["radius"]
            if not _number(r) or not 0.0 < r <= MAX_SIZE:
                raise error(f"{where}.radius: expected metres in (0, {MAX_SIZE:g}]")
            radii.append(float(r))
        elif keys == {"min", "max"}:
            a, b = _xz(o["min"], error, f"{where}.min"), _xz(o["max"], error, f"{where}.max")
            for k, axis in enumerate("xz"):
                if not a[k] < b[k]:
                    raise error(f"{where}.max: {axis} {b[k]:g} is not above min {a[k]:g}")
                if b[k] - a[k] > MAX_SIZE:
                    raise error(f"{where}.max: the box is wider than {MAX_SIZE:g} m along {axis}")
            lo.append(a)
            hi.append(b)
        else:
            extra = sorted(keys - {"center", "radius", "min", "max"})
            circle, box = keys & {"center", "radius"}, keys & {"min", "max"}
            if not extra and (circle or box) and not (circle and box):
                raise error(f"{where}.{sorted(({'center', 'radius'} if circle else {'min', 'max'}) - keys)[0]}: missing")
            field = extra[0] if extra else sorted(box)[0] if box else "center"
            raise error(f"{where}.{field}: expected exactly {{\"center\", \"radius\"}} (a circle) or "
                        f"{{\"min\", \"max\"}} (a box)")
    return Obstacles(np.array(centers, dtype=np.float64).reshape(-1, 2), np.array(radii, dtype=np.float64),
                     np.array(lo, dtype=np.float64).reshape(-1, 2), np.array(hi, dtype=np.float64).reshape(-1, 2))


# ---------------------------------------------------------------------------------------------
# distances (numba)


@numba.njit(cache=True, inline="always")
def _box_distance(ax, az, bx, bz, x, z):
    """Signed distance (m) of (x, z) to the box [ax, bx] x [az, bz] and its outward direction."""
    cx, cz = 0.5 * (ax + bx), 0.5 * (az + bz)
    hx, hz = 0.5 * (bx - ax), 0.5 * (bz - az)
    dx, dz = x - cx, z - cz
    qx, qz = abs(dx) - hx, abs(dz) - hz
    sx = 1.0 if dx >= 0.0 else -1.0
    sz = 1.0 if dz >= 0.0 else -1.0
    if qx > 0.0 or qz > 0.0:
        ox, oz = max(qx, 0.0), max(qz, 0.0)
        d = math.sqrt(ox * ox + oz * oz)
        return d, sx * ox / d, sz * oz / d
    if qx > qz:                       # inside: out through the nearest side
        return qx, sx, 0.0
    return qz, 0.0, sz


@numba.njit(cache=True)
def nearest(obs, x, z):
    """(signed distance m, outward x, outward z) of the point (x, z) to the nearest shape of obs
    (inf and a zero direction without shapes)."""
    centers, radii, lo, hi = obs
    best, nx, nz = math.inf, 0.0, 0.0
    for c in range(radii.shape[0]):
        dx, dz = x - centers[c, 0], z - centers[c, 1]
        r = math.sqrt(dx * dx + dz * dz)
        d = r - radii[c]
        if d < best:
            best = d
            nx, nz = (dx / r, dz / r) if r > 1e-12 else (1.0, 0.0)
    for b in range(lo.shape[0]):
        d, ox, oz = _box_distance(lo[b, 0], lo[b, 1], hi[b, 0], hi[b, 1], x, z)
        if d < best:
            best, nx, nz = d, ox, oz
    return best, nx, nz


@numba.njit(cache=True)
def _distances(obs, points, out):
    for k in range(points.shape[0]):
        out[k] = nearest(obs, points[k, 0], points[k, 1])[0]


def signed_distance(obs: Obstacles, points) -> np.ndarray:
    """(M,) signed distance in metres of points (M, 2) (x, z) to the nearest shape (negative inside;
    inf without shapes)."""
    p = np.ascontiguousarray(np.asarray(points, dtype=np.float64).reshape(-1, 2))
    out = np.empty(len(p))
    _distances(obs, p, out)
    return out


@numba.njit(cache=True, inline="always")
def _segment_point(ax, az, bx, bz, px, pz):
    """Distance (m) from (px, pz) to the segment a-b."""
    dx, dz = bx - ax, bz - az
    L2 = dx * dx + dz * dz
    t = 0.0 if L2 < 1e-18 else min(max(((px - ax) * dx + (pz - az) * dz) / L2, 0.0), 1.0)
    ex, ez = ax + t * dx - px, az + t * dz - pz
    return math.sqrt(ex * ex + ez * ez)


@numba.njit(cache=True)
def _box_segment(lx, lz, hx, hz, ax, az, bx, bz):
    """Smallest signed distance (m) between the box [lx, hx] x [lz, hz] and the segment a-b. Apart, it is
    met at an end of the segment or a corner of the box (two convex shapes of the plane); crossing, the
    deepest of the ends and the middle of the part inside, a lower bound on the clearance that is
    negative, which is all steering needs."""
    # Slab test: the part of the segment inside the box, t in [t0, t1].
    t0, t1 = 0.0, 1.0
    dx, dz = bx - ax, bz - az
    inside = True
    for axis in range(2):
        p, d, lo, hi = (ax, dx, lx, hx) if axis == 0 else (az, dz, lz, hz)
        if abs(d) < 1e-15:
            if p < lo or p > hi:
                inside = False
        else:
            u, v = (lo - p) / d, (hi - p) / d
            if u > v:
                u, v = v, u
            t0, t1 = max(t0, u), min(t1, v)
            if t0 > t1:
                inside = False
    if inside:
        tm = 0.5 * (t0 + t1)
        d = _box_distance(lx, lz, hx, hz, ax + tm * dx, az + tm * dz)[0]
        d = min(d, _box_distance(lx, lz, hx, hz, ax, az)[0], _box_distance(lx, lz, hx, hz, bx, bz)[0])
        return min(d, 0.0)
    d = min(_box_distance(lx, lz, hx, hz, ax, az)[0], _box_distance(lx, lz, hx, hz, bx, bz)[0])
    d = min(d, _segment_point(ax, az, bx, bz, lx, lz), _segment_point(ax, az, bx, bz, hx, lz))
    return min(d, _segment_point(ax, az, bx, bz, lx, hz), _segment_point(ax, az, bx, bz, hx, hz))


@numba.njit(cache=True)
def segment_clearance(obs, ax, az, bx, bz):
    """Smallest signed distance (m) from the segment (ax, az)-(bx, bz) to any shape of obs (inf without
    shapes; at most 0 when the segment enters one)."""
    centers, radii, lo, hi = obs
    best = math.inf
    for c in range(radii.shape[0]):
        best = min(best, _segment_point(ax, az, bx, bz, centers[c, 0], centers[c, 1]) - radii[c])
    for b in range(lo.shape[0]):
        best = min(best, _box_segment(lo[b, 0], lo[b, 1], hi[b, 0], hi[b, 1], ax, az, bx, bz))
    return best


def trajectory_clearance(obs: Obstacles, points) -> float:
    """Smallest signed distance (m) from the polyline through points (K, 2) (x, z) to any shape (inf
    without shapes)."""
    p = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    if len(p) == 1:
        return float(signed_distance(obs, p)[0])
    return float(min(segment_clearance(obs, p[k, 0], p[k, 1], p[k + 1, 0], p[k + 1, 1]) for k in range(len(p) - 1)))


@numba.njit(cache=True, inline="always")
def _ray_box(px, pz, vx, vz, lx, lz, hx, hz):
    """Time (s) at which p + v t enters the box [lx, hx] x [lz, hz] (0 when inside at t = 0), inf if never."""
    t0, t1 = -math.inf, math.inf
    for axis in range(2):
        p, v, lo, hi = (px, vx, lx, hx) if axis == 0 else (pz, vz, lz, hz)
        if abs(v) < 1e-12:
            if p < lo or p > hi:
                return math.inf
        else:
            u, w = (lo - p) / v, (hi - p) / v
            if u > w:
                u, w = w, u
            t0, t1 = max(t0, u), min(t1, w)
    if t0 > t1 or t1 < 0.0:
        return math.inf
    return max(t0, 0.0)


@numba.njit(cache=True, inline="always")
def _ray_circle(px, pz, vx, vz, cx, cz, r):
    """Time (s) at which p + v t comes within r of (cx, cz) (0 when already within), inf if never."""
    dx, dz = px - cx, pz - cz
    c = dx * dx + dz * dz - r * r
    if c <= 0.0:
        return 0.0
    a = vx * vx + vz * vz
    b = dx * vx + dz * vz
    if b >= 0.0 or a < 1e-18:
        return math.inf
    disc = b * b - a * c
    if disc < 0.0:
        return math.inf
    return (-b - math.sqrt(disc)) / a


@numba.njit(cache=True)
def time_to_hit(obs, px, pz, vx, vz, radius):
    """Time (s) until the point (px, pz) moving at (vx, vz) m/s comes within `radius` m of a shape of obs
    (exact: a box grown by a radius is two crossed boxes and four corner circles), inf if never."""
    centers, radii, lo, hi = obs
    best = math.inf
    for c in range(radii.shape[0]):
        best = min(best, _ray_circle(px, pz, vx, vz, centers[c, 0], centers[c, 1], radii[c] + radius))
    for b in range(lo.shape[0]):
        lx, lz, hx, hz = lo[b, 0], lo[b, 1], hi[b, 0], hi[b, 1]
        t = min(_ray_box(px, pz, vx, vz, lx - radius, lz, hx + radius, hz),
                _ray_box(px, pz, vx, vz, lx, lz - radius, hx, hz + radius))
        for cx, cz in ((lx, lz), (hx, lz), (lx, hz), (hx, hz)):
            t = min(t, _ray_circle(px, pz, vx, vz, cx, cz, radius))
        best = min(best, t)
    return best


# ---------------------------------------------------------------------------------------------
# steering


@numba.njit(cache=True)
def steer(obs, px, pz, wx, wz, radius, lookahead_s, min_lookahead):
    """The velocity (vx, vz) m/s a point at (px, pz) takes instead of the wanted (wx, wz) so that it keeps
    `radius` m from every shape of obs: the wanted direction when its straight run over the lookahead
    (lookahead_s seconds at the wanted speed, at least min_lookahead m) stays that clear, else the
    nearest direction (every STEER_STEP_DEG, either side, up to STEER_MAX_DEG) that does; of two equally
    near, the one with more clearance, then the right one (the avoidance's passing side). Never asks
    for more clearance than the point has now, so a point inside the margin may still slide along a
    wall or move out. Nothing clear: the clearest direction at a third of the speed. The speed is kept."""
    s = math.hypot(wx, wz)
    if s < 1e-9:
        return wx, wz
    here = nearest(obs, px, pz)[0]
    L = max(s * lookahead_s, min_lookahead)
    if here - L > radius:
        return wx, wz                   # nothing within reach
    need = min(radius, here - 0.01)
    ux, uz = wx / s, wz / s
    if segment_clearance(obs, px, pz, px + L * ux, pz + L * uz) >= need:
        return wx, wz
    step = math.radians(STEER_STEP_DEG)
    steps = int(STEER_MAX_DEG / STEER_STEP_DEG + 0.5)
    best_c, bx, bz = -math.inf, ux, uz
    for k in range(1, steps + 1):
        found = False
        pick_c, qx, qz = -math.inf, 0.0, 0.0
        for side in range(2):
            a = k * step if side == 0 else -k * step     # positive yaw turns +Z toward +X: to the right
            ca, sa = math.cos(a), math.sin(a)
            dx, dz = ux * ca + uz * sa, -ux * sa + uz * ca
            c = segment_clearance(obs, px, pz, px + L * dx, pz + L * dz)
            if c >= need and c > pick_c:
                found, pick_c, qx, qz = True, c, dx, dz
            if c > best_c:
                best_c, bx, bz = c, dx, dz
        if found:
            return qx * s, qz * s
    return bx * s / 3.0, bz * s / 3.0


@numba.njit(cache=True)
def steer_all(obs, pos, wanted, radius, lookahead_s, min_lookahead, out):
    """steer for every row: positions (n, 2) m and wanted velocities (n, 2) m/s into out (n, 2)."""
    for i in range(pos.shape[0]):
        out[i, 0], out[i, 1] = steer(obs, pos[i, 0], pos[i, 1], wanted[i, 0], wanted[i, 1], radius, lookahead_s,
                                     min_lookahead)


def steer_velocities(obs: Obstacles, positions, wanted, radius: float = STEER_RADIUS) -> np.ndarray:
    """steer for n points: positions (n, 2) m, wanted velocities (n, 2) m/s -> (n, 2) m/s, with the
    module's lookahead."""
    out = np.empty((len(wanted), 2))
    steer_all(obs, np.ascontiguousarray(positions, dtype=np.float64), np.ascontiguousarray(wanted, dtype=np.float64),
              float(radius), STEER_LOOKAHEAD_S, STEER_MIN_LOOKAHEAD, out)
    return out


# ---------------------------------------------------------------------------------------------
# the metric


def penetration(obs: Obstacles, xz, fps: float) -> dict:
    """metrics.json's `obstacle_penetration_cm` for one root path (F, 2) (x, z) m at fps: `max_cm`, the
    deepest the root went inside any shape (cm, 0 when never inside), and `seconds_inside`, the time it
    spent inside (s)."""
    d = signed_distance(obs, xz)
    inside = d < 0.0
    return {"max_cm": round(float(max(0.0, -d.min(initial=0.0))) * 100.0, 2),
            "seconds_inside": round(float(inside.sum()) / float(fps), 3)}
