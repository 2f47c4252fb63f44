"""Terrain as a regular heightfield: ground heights, normals, loading, procedural shapes.

Metres, Y up. Sample heights[i, j] sits at x = x0 + j * cell, z = z0 + i * cell (rows run along z,
columns along x). Between samples the height is bilinear; outside the grid the edge values extend.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numba
import numpy as np


@numba.njit(cache=True)
def height_at(heights, ox, oz, cell, x, z):
    """Bilinear height (metres) at x, z of a heights grid (H, W) float64 with its origin (ox, oz) and
    cell size (what Heightfield.height computes, compiled for the runtime's per-foot queries)."""
    H, W = heights.shape
    u = min(max((x - ox) / cell, 0.0), W - 1.0)
    v = min(max((z - oz) / cell, 0.0), H - 1.0)
    j = min(int(u), W - 2)
    i = min(int(v), H - 2)
    fu, fv = u - j, v - i
    top = heights[i, j] * (1.0 - fu) + heights[i, j + 1] * fu
    bot = heights[i + 1, j] * (1.0 - fu) + heights[i + 1, j + 1] * fu
    return top * (1.0 - fv) + bot * fv


@numba.njit(cache=True)
def normal_at(heights, ox, oz, cell, x, z):
    """Unit ground normal (pointing up) at x, z from central differences of height_at over +-0.1 m
    (smoother over a foot's length than the cell's own slope)."""
    step = 0.1
    gx = (height_at(heights, ox, oz, cell, x + step, z) - height_at(heights, ox, oz, cell, x - step, z)) / (2.0 * step)
    gz = (height_at(heights, ox, oz, cell, x, z + step) - height_at(heights, ox, oz, cell, x, z - step)) / (2.0 * step)
    n = math.sqrt(gx * gx + 1.0 + gz * gz)
    return -gx / n, 1.0 / n, -gz / n


MAX_HEIGHTMAP_PIXELS = 2048 * 2048   # a PNG heightmap (205 m a side at 0.1 m per pixel)


class TerrainError(ValueError):
    """A terrain specification or file that cannot be used; the message names the field or file."""


class Heightfield:
    """Ground height over the x-z plane (see the module docstring for the sample layout)."""

    def __init__(self, heights, origin=(0.0, 0.0), cell: float = 1.0):
        h = np.asarray(heights, dtype=np.float64)
        if h.ndim != 2 or h.shape[0] < 2 or h.shape[1] < 2:
            raise TerrainError(f"heights must be a 2-D array of at least 2x2 samples, got shape {h.shape}")
        if not np.all(np.isfinite(h)):
            raise TerrainError("heights contain NaN or infinite values")
        if not cell > 0.0:
            raise TerrainError(f"cell size must be positive, got {cell}")
        self.heights = h
        self.origin = (float(origin[0]), float(origin[1]))
        self.cell = float(cell)

    @property
    def extent(self) -> tuple[float, float, float, float]:
        """(x_min, x_max, z_min, z_max) covered by samples."""
        x0, z0 = self.origin
        H, W = self.heights.shape
        return x0, x0 + (W - 1) * self.cell, z0, z0 + (H - 1) * self.cell

    def _cells(self, x, z):
        H, W = self.heights.shape
        u = np.clip((np.asarray(x, dtype=np.float64) - self.origin[0]) / self.cell, 0.0, W - 1.0)
        v = np.clip((np.asarray(z, dtype=np.float64) - self.origin[1]) / self.cell, 0.0, H - 1.0)
        j = np.minimum(np.floor(u).astype(np.int64), W - 2)
        i = np.minimum(np.floor(v).astype(np.int64), H - 2)
        return i, j, u - j, v - i

    def height(self, x, z):
        """Bilinear ground height (metres) at x, z (scalars or arrays of one shape)."""
        if np.ndim(x) == 0 and np.ndim(z) == 0:
            return self._height_scalar(float(x), float(z))
        i, j, fu, fv = self._cells(x, z)
        h = self.heights
        top = h[i, j] * (1.0 - fu) + h[i, j + 1] * fu
        bot = h[i + 1, j] * (1.0 - fu) + h[i + 1, j + 1] * fu
        out = top * (1.0 - fv) + bot * fv
        return float(out) if np.ndim(out) == 0 else out

    def _height_scalar(self, x: float, z: float) -> float:
        return float(height_at(self.heights, self.origin[0], self.origin[1], self.cell, x, z))

    def gradient(self, x, z):
        """(dh/dx, dh/dz) of the bilinear surface; zero along an axis outside the grid."""
        x = np.asarray(x, dtype=np.float64)
        z = np.asarray(z, dtype=np.float64)
        i, j, fu, fv = self._cells(x, z)
        h = self.heights
        dx = ((h[i, j + 1] - h[i, j]) * (1.0 - fv) + (h[i + 1, j + 1] - h[i + 1, j]) * fv) / self.cell
        dz = ((h[i + 1, j] - h[i, j]) * (1.0 - fu) + (h[i + 1, j + 1] - h[i, j + 1]) * fu) / self.cell
        x0, x1, z0, z1 = self.extent
        dx = np.where((x < x0) | (x > x1), 0.0, dx)
        dz = np.where((z < z0) | (z > z1), 0.0, dz)
        return dx, dz

    def normal(self, x, z) -> np.ndarray:
        """Unit surface normals (..., 3) at x, z, pointing up."""
        gx, gz = self.gradient(x, z)
        n = np.stack([-gx, np.ones_like(gx), -gz], axis=-1)
        return n / np.linalg.norm(n, axis=-1, keepdims=True)

    # ------------------------------------------------------------------------------------------
    # Constructors and saving

    @classmethod
    def from_npy(cls, path, cell: float | None = None, origin=None, scale: float = 1.0, offset: float = 0.0):
        """Heights (H, W) from a .npy file, times `scale` plus `offset` metres. Cell size and origin come
        from the arguments, else from a `.json` next to the file (as `save` writes), else 1 m and a grid
        centred on the world origin."""
        path = Path(path)
        try:
            h = np.load(path)
        except (OSError, ValueError) as e:
            raise TerrainError(f"{path}: cannot read heights: {e}") from None
        meta = _read_meta(path)
        cell = float(cell if cell is not None else meta.get("cell", 1.0))
        h = np.asarray(h, dtype=np.float64) * float(scale) + float(offset)
        if origin is None:
            origin = meta.get("origin") or _centred_origin(h.shape, cell)
        return cls(h, origin, cell)

    @classmethod
    def from_png(cls, path, scale: float = 1.0, cell: float = 0.1, origin=None, offset: float = 0.0):
        """Grey-scale PNG heightmap: pixel value in [0, 1] (8 or 16 bit) times `scale` metres plus
        `offset`. Image rows run along +z, columns along +x; centred on the world origin by default."""
        path = Path(path)
        try:
            from PIL import Image  # Pillow comes with matplotlib
            with Image.open(path) as im:
                # Opening reads only the header: refuse a huge image before its pixels are decoded (a
                # 90 kB PNG can hold 9400 x 9400 pixels, 1.5 GB once decoded to float64).
                if im.width * im.height > MAX_HEIGHTMAP_PIXELS:
                    raise TerrainError(f"{path}: heightmap of {im.width} x {im.height} pixels: at most "
                                       f"{MAX_HEIGHTMAP_PIXELS:,} pixels (e.g. 2048 x 2048)")
                if im.mode in ("I;16", "I;16B", "I;16L", "I"):
                    a = np.asarray(im, dtype=np.float64) / 65535.0
                else:
                    a = np.asarray(im.convert("L"), dtype=np.float64) / 255.0
        except (OSError, ValueError) as e:
            raise TerrainError(f"{path}: cannot read PNG heightmap: {e}") from None
        h = a * float(scale) + float(offset)
        return cls(h, origin if origin is not None else _centred_origin(h.shape, cell), cell)

    @classmethod
    def procedural(cls, kind: str = "flat", size: float = 40.0, cell: float = 0.1, **params):
        """A square terrain `size` metres wide centred on the origin, sampled every `cell` metres.

        kind="flat": height (m, default 0).
        kind="slope": angle_deg (default 10), direction_deg (uphill heading in the ground plane,
            yaw convention: 0 = +z, 90 = +x; default 0), height at the origin `height` (default 0).
        kind="steps": step_height (m, 0.15), step_length (m, 0.5), direction_deg (0), start (m along the
            direction where the first step up is, 1.0); flat before it. Between samples the step edges
            are ramps one cell long.
        kind="noise": amplitude (m, 0.1), scale (feature size in metres, 4.0), octaves (3), seed (0).
        """
        params = dict(params)
        allowed = _KIND_FIELDS.get(kind)
        if allowed is None:
            raise TerrainError(f"terrain kind {kind!r} unknown; use one of {', '.join(_KIND_FIELDS)}")
        for k in params:
            if k not in allowed:
                raise TerrainError(f"terrain field {k!r} is not valid for kind {kind!r}; "
                                   f"valid: {', '.join(sorted(allowed + ('size', 'cell')))}")
        if not size > 0 or not cell > 0:
            raise TerrainError(f"terrain size and cell must be positive (size={size}, cell={cell})")
        n = int(round(size / cell)) + 1
        origin = (-0.5 * (n - 1) * cell, -0.5 * (n - 1) * cell)
        coords = origin[0] + np.arange(n) * cell
        X, Z = np.meshgrid(coords, coords)              # X varies along columns, Z along rows
        if kind == "flat":
            h = np.full((n, n), float(params.get("height", 0.0)))
        elif kind == "slope":
            ang = math.radians(float(params.get("angle_deg", 10.0)))
            if not abs(ang) < math.pi / 2:
                raise TerrainError(f"terrain field 'angle_deg' must be within (-90, 90), got {params['angle_deg']}")
            s = _along(X, Z, params.get("direction_deg", 0.0))
            h = float(params.get("height", 0.0)) + math.tan(ang) * s
        elif kind == "steps":
            sh = float(params.get("step_height", 0.15))
            sl = float(params.get("step_length", 0.5))
            if not sl > 0:
                raise TerrainError(f"terrain field 'step_length' must be positive, got {sl}")
            s = _along(X, Z, params.get("direction_deg", 0.0)) - float(params.get("start", 1.0))
            h = np.where(s >= 0.0, sh * (np.floor(s / sl) + 1.0), 0.0)
        else:  # noise
            h = _value_noise(X, Z, float(params.get("amplitude", 0.1)), float(params.get("scale", 4.0)),
                             int(params.get("octaves", 3)), int(params.get("seed", 0)))
        return cls(h, origin, cell)

    @classmethod
    def from_spec(cls, spec: dict, base_dir=None):
        """Terrain from a scenario's "terrain" entry: {"kind": "slope", "angle_deg": 10, ...} for a
        procedural one, or {"file": "ground.npy" | "ground.png", "scale": ..., "cell": ..., "origin":
        [x0, z0], "offset": ...} (relative file paths resolve against base_dir). None means flat."""
        if spec is None:
            return cls.procedural("flat")
        if not isinstance(spec, dict):
            raise TerrainError(f"terrain must be an object (e.g. {{\"kind\": \"flat\"}}), got {type(spec).__name__}")
        spec = dict(spec)
        if "file" in spec and "kind" in spec:
            raise TerrainError("terrain: give either 'file' or 'kind', not both")
        if "file" in spec:
            for k in spec:
                if k not in _FILE_FIELDS:
                    raise TerrainError(f"terrain field {k!r} is not valid with 'file'; valid: {', '.join(_FILE_FIELDS)}")
            path = Path(spec.pop("file"))
            if base_dir is not None and not path.is_absolute():
                path = Path(base_dir) / path
            if not path.exists():
                raise TerrainError(f"terrain field 'file': {path} does not exist")
            kw = {}
            for k in ("scale", "cell", "offset"):
                if k in spec:
                    kw[k] = _number(spec, k)
            if "origin" in spec:
                o = spec["origin"]
                if not (isinstance(o, (list, tuple)) and len(o) == 2 and all(isinstance(v, (int, float)) for v in o)):
                    raise TerrainError(f"terrain field 'origin' must be [x0, z0] in metres, got {o!r}")
                kw["origin"] = tuple(float(v) for v in o)
            if path.suffix.lower() == ".png":
                return cls.from_png(path, **kw)
            if path.suffix.lower() == ".npy":
                return cls.from_npy(path, **kw)
            raise TerrainError(f"terrain field 'file': {path.name} must be a .npy or .png file")
        kind = spec.pop("kind", "flat")
        if not isinstance(kind, str):
            raise TerrainError(f"terrain field 'kind' must be a string, got {kind!r}")
        if kind not in _KIND_FIELDS:
            raise TerrainError(f"terrain field 'kind': {kind!r} unknown; use one of {', '.join(_KIND_FIELDS)} "
                               f"or give 'file'")
        kw = {}
        for k in list(spec):
            if k == "seed" or k == "octaves":
                v = spec[k]
                if isinstance(v, bool) or not isinstance(v, int):
                    raise TerrainError(f"terrain field {k!r} must be an integer, got {v!r}")
                kw[k] = v
            else:
                kw[k] = _number(spec, k) if k in _NUMERIC_FIELDS else spec[k]
        return cls.procedural(kind, **kw)

    def save(self, path) -> None:
        """Write heights to `path` (.npy) and cell/origin to the same name with .json."""
        path = Path(path)
        if path.suffix != ".npy":
            path = path.with_suffix(".npy")
        np.save(path, self.heights)
        path.with_suffix(".json").write_text(json.dumps(
            {"cell": self.cell, "origin": list(self.origin), "shape": list(self.heights.shape)}, indent=1) + "\n")


_COMMON = ("size", "cell")
_KIND_FIELDS = {
    "flat": ("height",),
    "slope": ("angle_deg", "direction_deg", "height"),
    "steps": ("step_height", "step_length", "direction_deg", "start"),
    "noise": ("amplitude", "scale", "octaves", "seed"),
}
_KIND_FIELDS = {k: v + _COMMON for k, v in _KIND_FIELDS.items()}
_NUMERIC_FIELDS = {"size", "cell", "height", "angle_deg", "direction_deg", "step_height", "step_length",
                   "start", "amplitude", "scale"}
_FILE_FIELDS = ("file", "scale", "cell", "origin", "offset")


def _number(spec: dict, key: str) -> float:
    v = spec[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise TerrainError(f"terrain field {key!r} must be a number, got {v!r}")
    return float(v)


def _read_meta(path: Path) -> dict:
    meta_path = path.with_suffix(".json")
    if not meta_path.exists():
        return {}
    try:
        return json.loads(meta_path.read_text())
    except json.JSONDecodeError as e:
        raise TerrainError(f"{meta_path}: not valid JSON: {e}") from None


def _centred_origin(shape, cell):
    return (-0.5 * (shape[1] - 1) * cell, -0.5 * (shape[0] - 1) * cell)


def _along(X, Z, direction_deg) -> np.ndarray:
    """Signed distance along a ground heading (yaw convention: 0 = +z, 90 = +x)."""
    d = math.radians(float(direction_deg))
    return X * math.sin(d) + Z * math.cos(d)


def _value_noise(X, Z, amplitude, scale, octaves, seed):
    """Smooth value noise: random lattice values blended with smoothstep weights, octaves halving in
    size and amplitude; result scaled so its peak magnitude is about `amplitude`."""
    if not scale > 0:
        raise TerrainError(f"terrain field 'scale' must be positive, got {scale}")
    rng = np.random.default_rng(seed)
    total = np.zeros_like(X)
    norm = 0.0
    for o in range(max(1, octaves)):
        s = scale / (2 ** o)
        u = (X - X.min()) / s
        v = (Z - Z.min()) / s
        lattice = rng.uniform(-1.0, 1.0, size=(int(v.max()) + 2, int(u.max()) + 2))
        i, j = np.floor(v).astype(int), np.floor(u).astype(int)
        fu, fv = u - j, v - i
        fu, fv = fu * fu * (3 - 2 * fu), fv * fv * (3 - 2 * fv)
        n = ((lattice[i, j] * (1 - fu) + lattice[i, j + 1] * fu) * (1 - fv)
             + (lattice[i + 1, j] * (1 - fu) + lattice[i + 1, j + 1] * fu) * fv)
        total += n / (2 ** o)
        norm += 1.0 / (2 ** o)
    return amplitude * total / norm
