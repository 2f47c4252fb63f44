"""`motionmatch features export`: the feature matrix, its clip ranges and realistic queries as raw
little-endian files, for benchmarking other search implementations on exactly our data.

Queries are by default recorded from the runtime character driven by random input
(`synth.recorded_queries`), which is why this lives in offline/ and not beside the search.

Export layout (a folder): features.f32 (N x F float32), ranges.i32 (R x 2 int32, start and exclusive
stop), queries.f32 (Q x F float32), queries_cur.i32 (Q int32, -1 = no current frame), meta.json.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..posedb.database import load_database
from .synth import recorded_queries


def make_queries(features: np.ndarray, range_starts, range_stops, trajectory_cols, n_queries: int,
                 noise: float = 0.5, end_exclude: int = 20, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Queries from real frames: a searchable frame's features with the trajectory columns perturbed by
    Gaussian noise of `noise` x that column's standard deviation (as if the player steered elsewhere).

    Returns queries (Q, F) float32 and their current frames (Q,) int32 (the source frame).
    """
    rng = np.random.default_rng(seed)
    starts = np.asarray(range_starts, dtype=np.int64)
    stops = np.asarray(range_stops, dtype=np.int64)
    frames = np.concatenate([np.arange(s, e - end_exclude) for s, e in zip(starts, stops) if e - end_exclude > s])
    if len(frames) == 0:
        raise ValueError("no searchable frames to make queries from")
    cur = rng.choice(frames, size=n_queries, replace=len(frames) < n_queries)
    q = features[cur].astype(np.float64)
    cols = np.zeros(features.shape[1], dtype=bool)
    cols[trajectory_cols] = True
    sd = features.std(axis=0)
    q[:, cols] += rng.normal(size=(n_queries, int(cols.sum()))) * (noise * sd[cols])
    return q.astype(np.float32), cur.astype(np.int32)


def trajectory_columns(channel_slices: dict) -> np.ndarray:
    """Column indices of the channels whose names start with "trajectory"."""
    cols = [np.arange(s.start, s.stop) for name, s in channel_slices.items() if name.startswith("trajectory")]
    return np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)


def database_features(path, subset: int | None):
    """A database file's normalized features (float32), range starts and stops, trajectory columns."""
    db = load_database(path)
    x = np.ascontiguousarray(db.features.normalized, dtype=np.float32)
    starts = np.asarray(db.range_starts, dtype=np.int64)
    stops = np.asarray(db.range_stops, dtype=np.int64)
    x, starts, stops = subset_frames(x, starts, stops, subset)
    return x, starts, stops, trajectory_columns(db.features.channel_slices)


def subset_frames(x, starts, stops, subset):
    """The first `subset` frames and the ranges (clipped) that start inside them; all when subset is None."""
    if subset is None or subset >= len(x):
        return x, starts, stops
    keep = starts < subset
    return np.ascontiguousarray(x[:subset]), starts[keep], np.minimum(stops[keep], subset)


def runtime_queries(db_path, n: int, seed: int, n_frames: int):
    """Queries recorded from the runtime character on the full database; current frames beyond a
    subset become -1."""
    q, cur = recorded_queries(load_database(db_path), n, seed)
    return q, np.where(cur < n_frames, cur, -1).astype(np.int32)


def write_export(out, features, range_starts, range_stops, queries, queries_cur, extra: dict | None = None):
    """Write the raw little-endian export folder (see module docstring)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    np.ascontiguousarray(features, dtype="<f4").tofile(out / "features.f32")
    np.stack([range_starts, range_stops], axis=1).astype("<i4").tofile(out / "ranges.i32")
    np.ascontiguousarray(queries, dtype="<f4").tofile(out / "queries.f32")
    np.ascontiguousarray(queries_cur, dtype="<i4").tofile(out / "queries_cur.i32")
    meta = {"N": int(len(features)), "F": int(features.shape[1]), "R": int(len(range_starts)),
            "Q": int(len(queries)), "dtype": "float32 little-endian; ranges and queries_cur int32",
            "files": {"features.f32": "N x F", "ranges.i32": "R x 2 (start, stop exclusive)",
                      "queries.f32": "Q x F", "queries_cur.i32": "Q (-1 = no current frame)"}}
    meta.update(extra or {})
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def read_export(folder) -> dict:
    """Read an export folder; features/ranges are present only if the folder holds them."""
    folder = Path(folder)
    meta = json.loads((folder / "meta.json").read_text())
    n_f = int(meta["F"])
    res = {"meta": meta}
    res["queries"] = np.fromfile(folder / "queries.f32", dtype="<f4").reshape(-1, n_f)
    res["queries_cur"] = np.fromfile(folder / "queries_cur.i32", dtype="<i4").astype(np.int64)
    if (folder / "features.f32").exists():
        res["features"] = np.fromfile(folder / "features.f32", dtype="<f4").reshape(-1, n_f)
        r = np.fromfile(folder / "ranges.i32", dtype="<i4").reshape(-1, 2).astype(np.int64)
        res["range_starts"], res["range_stops"] = r[:, 0], r[:, 1]
    return res




def export_features(db_path, out, n_queries: int = 2000, query_source: str = "runtime", noise: float = 0.5,
                    end_exclude: int = 20, subset: int | None = None, seed: int = 1,
                    no_current: bool = False) -> dict:
    """Write the export folder `out` for the database file `db_path`; returns its meta.json contents.
    query_source: "runtime" (recorded from a character) or "perturbed" (real frames, trajectory columns
    moved by `noise` standard deviations)."""
    x, starts, stops, traj = database_features(db_path, subset)
    if query_source == "runtime":
        q, cur = runtime_queries(db_path, n_queries, seed, len(x))
    else:
        q, cur = make_queries(x, starts, stops, traj, n_queries, noise, end_exclude, seed)
    if no_current:
        cur[:] = -1
    return write_export(out, x, starts, stops, q, cur,
                        {"source": str(db_path), "query_source": query_source,
                         "noise": noise if query_source == "perturbed" else None,
                         "trajectory_columns": traj.tolist(), "end_exclude": end_exclude})
