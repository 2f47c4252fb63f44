"""`motionmatch bench search` (search latency per back-end) and `motionmatch features export` (raw
little-endian feature/query files for benchmarking other implementations on the same data).

It lives outside `search/` because its default queries are recorded from the runtime character
(`synth.recorded_queries`): the search itself never imports the runtime.

Export layout (a folder): features.f32 (N x F float32), ranges.i32 (R x 2 int32, start and exclusive
stop), queries.f32 (Q x F float32), queries_cur.i32 (Q int32, -1 = no current frame), meta.json.
"""
from __future__ import annotations

import gc
import json
import sys
import time
from pathlib import Path

import numpy as np
from ..posedb.database import load_database
from ..offline.synth import recorded_queries
from ..search import BACKENDS, Searcher

__all__ = ["add_bench_search_args", "run_bench_search", "add_features_export_args", "run_features_export",
           "synthetic_features", "make_queries", "write_export", "read_export"]

# Without a database: the trajectory columns of the standard 27-d schema sit at 15..27.
_SYNTH_TRAJECTORY = slice(15, 27)


# ---------------------------------------------------------------------------------------------
# data

def synthetic_features(n: int, dims: int = 27, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Smooth random-walk features standing in for a database: clips of 300-3000 frames, each column a
    mean-reverting random walk (time constant ~1 s at 60 fps) smoothed over ~0.1 s, standardized.

    Returns features (n, dims) float32, range_starts, range_stops (stop exclusive).
    """
    rng = np.random.default_rng(seed)
    lengths = []
    while sum(lengths) < n:
        lengths.append(int(rng.integers(300, 3001)))
    lengths[-1] -= sum(lengths) - n
    if lengths[-1] < 1:
        lengths.pop()
    stops = np.cumsum(lengths).astype(np.int64)
    starts = stops - np.asarray(lengths)
    a = 1.0 / 60.0
    noise = rng.normal(size=(n, dims)) * np.sqrt(2 * a)
    x = np.empty((n, dims))
    for s, e in zip(starts, stops):  # each clip starts afresh
        x[s] = rng.normal(size=dims)
        seg = noise[s + 1:e]
        # x_t = (1 - a) x_{t-1} + e_t, solved by a filter over the clip
        from scipy.signal import lfilter
        x[s + 1:e] = lfilter([1.0], [1.0, -(1 - a)], seg, axis=0, zi=((1 - a) * x[s])[None, :])[0]
    from scipy.ndimage import gaussian_filter1d
    for s, e in zip(starts, stops):
        x[s:e] = gaussian_filter1d(x[s:e], sigma=3.0, axis=0, mode="nearest")
    x = (x - x.mean(0)) / x.std(0)
    return x.astype(np.float32), starts, stops


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


def _load_db_features(path, subset: int | None):
    db = load_database(path)
    x = np.ascontiguousarray(db.features.normalized, dtype=np.float32)
    starts = np.asarray(db.range_starts, dtype=np.int64)
    stops = np.asarray(db.range_stops, dtype=np.int64)
    x, starts, stops = _subset(x, starts, stops, subset)
    return x, starts, stops, trajectory_columns(db.features.channel_slices)


def _subset(x, starts, stops, subset):
    if subset is None or subset >= len(x):
        return x, starts, stops
    keep = starts < subset
    return np.ascontiguousarray(x[:subset]), starts[keep], np.minimum(stops[keep], subset)


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


# ---------------------------------------------------------------------------------------------
# features export

def add_features_export_args(parser) -> None:
    parser.add_argument("db", help="database file (.npz)")
    parser.add_argument("--out", required=True, help="folder to write")
    parser.add_argument("--queries", type=int, default=2000, help="number of queries (default 2000)")
    parser.add_argument("--noise", type=float, default=0.5,
                        help="trajectory noise in column standard deviations (default 0.5)")
    parser.add_argument("--end-exclude", type=int, default=20, help="frames at clip ends never sampled")
    parser.add_argument("--subset", type=int, metavar="N", help="only the first N frames")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-current", action="store_true", help="write -1 as every query's current frame")
    parser.add_argument("--query-source", choices=("runtime", "perturbed"), default="runtime",
                        help="runtime: queries a character made while driven by random input (default); "
                             "perturbed: real frames with noisy trajectory columns")


def _runtime_queries(db_path, n: int, seed: int, n_frames: int):
    """Queries recorded from the runtime character on the full database; current frames beyond a
    subset become -1."""
    q, cur = recorded_queries(load_database(db_path), n, seed)
    return q, np.where(cur < n_frames, cur, -1).astype(np.int32)


def run_features_export(args) -> int:
    x, starts, stops, traj = _load_db_features(args.db, args.subset)
    if args.query_source == "runtime":
        q, cur = _runtime_queries(args.db, args.queries, args.seed, len(x))
    else:
        q, cur = make_queries(x, starts, stops, traj, args.queries, args.noise, args.end_exclude, args.seed)
    if args.no_current:
        cur[:] = -1
    meta = write_export(args.out, x, starts, stops, q, cur,
                        {"source": str(args.db), "query_source": args.query_source,
                         "noise": args.noise if args.query_source == "perturbed" else None,
                         "trajectory_columns": traj.tolist(),
                         "end_exclude": args.end_exclude})
    print(f"wrote {args.out}: {meta['N']} frames x {meta['F']} features, {meta['R']} ranges, "
          f"{meta['Q']} queries")
    return 0


# ---------------------------------------------------------------------------------------------
# bench search

def add_bench_search_args(parser) -> None:
    src = parser.add_argument_group("data (one of --db, --synthetic, or --queries DIR holding features.f32)")
    src.add_argument("--db", help="database file (.npz)")
    src.add_argument("--synthetic", type=int, metavar="N", help="N frames of smooth random-walk 27-d features")
    src.add_argument("--queries", metavar="DIR", help="time exactly the queries of this export folder")
    parser.add_argument("--subset", type=int, metavar="N", help="only the first N frames of the database")
    parser.add_argument("--backends", default="all", help="comma-separated back-ends (default all)")
    parser.add_argument("-n", "--n-queries", type=int, default=2000, help="generated queries (default 2000)")
    parser.add_argument("--noise", type=float, default=0.5,
                        help="trajectory noise of generated queries, in column std (default 0.5)")
    parser.add_argument("--query-source", choices=("runtime", "perturbed"), default="runtime",
                        help="with --db: queries a character made while driven by random input (default), "
                             "or real frames with noisy trajectory columns")
    parser.add_argument("--end-exclude", type=int, default=20)
    parser.add_argument("--skip", type=int, default=0)
    parser.add_argument("--bias", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _time_single(searcher, queries, currents, skip, bias):
    """Per call: wall-clock and this thread's CPU time (us; the CPU time leaves out the time other
    processes held the core, which dominates the wall-clock tail on a loaded machine), and the frames."""
    t = np.empty(len(queries))
    cpu = np.empty(len(queries))
    out = np.empty(len(queries), dtype=np.int64)
    search = searcher.search
    clock = time.perf_counter_ns
    cpu_clock = time.thread_time_ns
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for i in range(len(queries)):
            q, c = queries[i], int(currents[i])
            u0 = cpu_clock()
            t0 = clock()
            f, _ = search(q, c, skip, bias)
            t[i] = clock() - t0
            cpu[i] = cpu_clock() - u0
            out[i] = f
    finally:
        if gc_was:
            gc.enable()
    return t / 1000.0, cpu / 1000.0, out


def run_bench_search(args) -> int:

    traj = None
    given = None
    if args.queries:
        given = read_export(args.queries)
    if args.db:
        x, starts, stops, traj = _load_db_features(args.db, args.subset)
        source = f"database {args.db}"
    elif args.synthetic:
        x, starts, stops = synthetic_features(int(args.synthetic), seed=args.seed)
        traj = np.arange(_SYNTH_TRAJECTORY.start, _SYNTH_TRAJECTORY.stop)
        source = f"synthetic {args.synthetic} frames"
    elif given is not None and "features" in given:
        x, starts, stops = _subset(given["features"], given["range_starts"], given["range_stops"], args.subset)
        source = f"export {args.queries}"
    else:
        raise ValueError("give --db DB, --synthetic N, or --queries DIR holding features.f32")
    if given is not None:
        queries, cur = given["queries"], given["queries_cur"]
        if queries.shape[1] != x.shape[1]:
            raise ValueError(f"queries have {queries.shape[1]} features, the database {x.shape[1]}")
        cur = np.where(cur < len(x), cur, -1)
        qsource = f"{len(queries)} queries from {args.queries}"
    elif args.db and args.query_source == "runtime":
        queries, cur = _runtime_queries(args.db, args.n_queries, args.seed, len(x))
        qsource = f"{len(queries)} queries recorded from a character driven by random input"
    else:
        queries, cur = make_queries(x, starts, stops, traj, args.n_queries, args.noise, args.end_exclude,
                                    args.seed)
        qsource = f"{len(queries)} generated queries (trajectory noise {args.noise} std)"
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    cur = np.asarray(cur, dtype=np.int64)
    none = np.full(len(queries), -1, dtype=np.int64)
    backends = BACKENDS if args.backends == "all" else tuple(b.strip() for b in args.backends.split(","))

    results = {"source": source, "frames": int(len(x)), "features": int(x.shape[1]), "ranges": int(len(starts)),
               "queries": qsource, "skip": args.skip, "bias": args.bias, "end_exclude": args.end_exclude,
               "note": "latency per call of Searcher.search (includes Python dispatch), one thread (cpu_*: the "
                       "thread's CPU time per call); "
                       "JIT compile/load excluded (warm-up reported separately); batch uses all numba threads",
               "backends": {}}
    reference = {}
    for b in backends:
        tw = time.perf_counter()
        # JIT load or compile of the index build, outside the timed build (numba builds compile on first use)
        Searcher(x[:64], [0], [min(len(x), 64)], backend=b, end_exclude=0)
        warm = time.perf_counter() - tw
        t0 = time.perf_counter()
        s = Searcher(x, starts, stops, backend=b, end_exclude=args.end_exclude)
        build = s.build_seconds
        t1 = time.perf_counter()
        s.search(queries[0], -1, args.skip, args.bias)  # JIT load or compile
        s.search(queries[0], int(cur[0]), args.skip, args.bias)
        s.search_batch(queries[:4], cur[:4], args.skip, args.bias)
        warm += time.perf_counter() - t1
        nq = len(queries) if b != "brute_numpy" else min(len(queries), 200)
        row = {"build_ms": round(build * 1e3, 3), "construct_ms": round((t1 - t0) * 1e3, 3),
               "jit_warmup_s": round(warm, 3), "timed_queries": nq}
        for label, c in (("no_current", none), ("current", cur)):
            lat, cpu, frames = _time_single(s, queries[:nq], c[:nq], args.skip, args.bias)
            row[f"{label}_median_us"] = round(float(np.median(lat)), 2)
            row[f"{label}_p99_us"] = round(float(np.percentile(lat, 99)), 2)
            row[f"{label}_mean_us"] = round(float(np.mean(lat)), 2)
            row[f"{label}_cpu_median_us"] = round(float(np.median(cpu)), 2)
            row[f"{label}_cpu_p99_us"] = round(float(np.percentile(cpu, 99)), 2)
            tb = time.perf_counter()
            bf, _ = s.search_batch(queries[:nq], c[:nq], args.skip, args.bias)
            row[f"{label}_batch_us_per_query"] = round((time.perf_counter() - tb) / nq * 1e6, 2)
            ref = reference.setdefault(label, frames)
            n = min(len(ref), nq)
            row[f"{label}_disagreements"] = int(np.sum(ref[:n] != frames[:n]) + np.sum(bf != frames))
        results["backends"][b] = row
        del s
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        _print_table(results)
    bad = sum(r["no_current_disagreements"] + r["current_disagreements"] for r in results["backends"].values())
    if bad:
        print(f"ERROR: back-ends disagree on {bad} answers", file=sys.stderr)
        return 1
    return 0


def _print_table(r) -> None:
    print(f"{r['source']}: {r['frames']} frames x {r['features']} features, {r['ranges']} ranges; {r['queries']}")
    print(f"skip {r['skip']}, bias {r['bias']}, end_exclude {r['end_exclude']}; {r['note']}")
    head = (f"{'backend':<12}{'build ms':>9}{'warmup s':>9} | {'no current: med':>15}{'p99':>9}{'batch':>8} | "
            f"{'current: med':>13}{'p99':>9}{'batch':>8}  (us)")
    print(head)
    for b, row in r["backends"].items():
        print(f"{b:<12}{row['build_ms']:>9.1f}{row['jit_warmup_s']:>9.2f} | "
              f"{row['no_current_median_us']:>15.1f}{row['no_current_p99_us']:>9.1f}"
              f"{row['no_current_batch_us_per_query']:>8.1f} | "
              f"{row['current_median_us']:>13.1f}{row['current_p99_us']:>9.1f}"
              f"{row['current_batch_us_per_query']:>8.1f}")
    for b, row in r["backends"].items():
        print(f"{b:<12}thread CPU time per call (us): no current median {row['no_current_cpu_median_us']:.1f} "
              f"p99 {row['no_current_cpu_p99_us']:.1f} | current median {row['current_cpu_median_us']:.1f} "
              f"p99 {row['current_cpu_p99_us']:.1f}")
