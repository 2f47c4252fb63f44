"""`motionmatch bench search`: search latency and throughput per back-end, on a database, synthetic
features or an export folder (offline/features_export.py), and whether the back-ends agree.
"""
from __future__ import annotations

import gc
import time

import numpy as np

from ..offline.features_export import database_features, make_queries, read_export, runtime_queries, subset_frames
from ..search import BACKENDS, Searcher

# Without a database: the trajectory columns of the standard 27-d schema sit at 15..27.
_SYNTH_TRAJECTORY = slice(15, 27)


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


def bench_search(db=None, synthetic: int | None = None, export=None, subset: int | None = None,
                 backends: str = "all", n_queries: int = 2000, noise: float = 0.5, query_source: str = "runtime",
                 end_exclude: int = 20, skip: int = 0, bias: float = 0.0, seed: int = 1) -> dict:
    """Time every back-end on one data source (a database file `db`, `synthetic` frames, or the export
    folder `export`, whose queries are used when it has them); latencies in microseconds. Each back-end's
    `*_disagreements` counts the answers that differ from the first back-end's."""
    traj = None
    given = None
    if export:
        given = read_export(export)
    if db:
        x, starts, stops, traj = database_features(db, subset)
        source = f"database {db}"
    elif synthetic:
        x, starts, stops = synthetic_features(int(synthetic), seed=seed)
        traj = np.arange(_SYNTH_TRAJECTORY.start, _SYNTH_TRAJECTORY.stop)
        source = f"synthetic {synthetic} frames"
    elif given is not None and "features" in given:
        x, starts, stops = subset_frames(given["features"], given["range_starts"], given["range_stops"], subset)
        source = f"export {export}"
    else:
        raise ValueError("give --db DB, --synthetic N, or --queries DIR holding features.f32")
    if given is not None:
        queries, cur = given["queries"], given["queries_cur"]
        if queries.shape[1] != x.shape[1]:
            raise ValueError(f"queries have {queries.shape[1]} features, the database {x.shape[1]}")
        cur = np.where(cur < len(x), cur, -1)
        qsource = f"{len(queries)} queries from {export}"
    elif db and query_source == "runtime":
        queries, cur = runtime_queries(db, n_queries, seed, len(x))
        qsource = f"{len(queries)} queries recorded from a character driven by random input"
    else:
        queries, cur = make_queries(x, starts, stops, traj, n_queries, noise, end_exclude,
                                    seed)
        qsource = f"{len(queries)} generated queries (trajectory noise {noise} std)"
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    cur = np.asarray(cur, dtype=np.int64)
    none = np.full(len(queries), -1, dtype=np.int64)
    names = BACKENDS if backends == "all" else tuple(b.strip() for b in backends.split(","))

    results = {"source": source, "frames": int(len(x)), "features": int(x.shape[1]), "ranges": int(len(starts)),
               "queries": qsource, "skip": skip, "bias": bias, "end_exclude": end_exclude,
               "note": "latency per call of Searcher.search (includes Python dispatch), one thread (cpu_*: the "
                       "thread's CPU time per call); "
                       "JIT compile/load excluded (warm-up reported separately); batch uses all numba threads",
               "backends": {}}
    reference = {}
    for b in names:
        tw = time.perf_counter()
        # JIT load or compile of the index build, outside the timed build (numba builds compile on first use)
        Searcher(x[:64], [0], [min(len(x), 64)], backend=b, end_exclude=0)
        warm = time.perf_counter() - tw
        t0 = time.perf_counter()
        s = Searcher(x, starts, stops, backend=b, end_exclude=end_exclude)
        build = s.build_seconds
        t1 = time.perf_counter()
        s.search(queries[0], -1, skip, bias)  # JIT load or compile
        s.search(queries[0], int(cur[0]), skip, bias)
        s.search_batch(queries[:4], cur[:4], skip, bias)
        warm += time.perf_counter() - t1
        nq = len(queries) if b != "brute_numpy" else min(len(queries), 200)
        row = {"build_ms": round(build * 1e3, 3), "construct_ms": round((t1 - t0) * 1e3, 3),
               "jit_warmup_s": round(warm, 3), "timed_queries": nq}
        for label, c in (("no_current", none), ("current", cur)):
            lat, cpu, frames = _time_single(s, queries[:nq], c[:nq], skip, bias)
            row[f"{label}_median_us"] = round(float(np.median(lat)), 2)
            row[f"{label}_p99_us"] = round(float(np.percentile(lat, 99)), 2)
            row[f"{label}_mean_us"] = round(float(np.mean(lat)), 2)
            row[f"{label}_cpu_median_us"] = round(float(np.median(cpu)), 2)
            row[f"{label}_cpu_p99_us"] = round(float(np.percentile(cpu, 99)), 2)
            tb = time.perf_counter()
            bf, _ = s.search_batch(queries[:nq], c[:nq], skip, bias)
            row[f"{label}_batch_us_per_query"] = round((time.perf_counter() - tb) / nq * 1e6, 2)
            ref = reference.setdefault(label, frames)
            n = min(len(ref), nq)
            row[f"{label}_disagreements"] = int(np.sum(ref[:n] != frames[:n]) + np.sum(bf != frames))
        results["backends"][b] = row
        del s
    return results


def print_table(r) -> None:
    """The bench result as a text table on stdout."""
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
