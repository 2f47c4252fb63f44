"""`motionmatch bench crowd`: tick time of random-goal crowds of several sizes (default settings:
foot locking, IK and warping on). Each agent walks (or runs) toward a random goal in a square sized
for the crowd and picks a new goal on arrival; agents do not avoid each other.

With `contention` a process spinning on one core runs beside the crowd (what any user's machine has:
another program busy), and each size is timed with one thread, with all threads and with the
measured choice (runtime/threads.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager

import numpy as np
from tqdm import tqdm

from ..runtime.crowd import Crowd
from ..runtime.threads import max_threads

STAGES = ("search", "playback", "output")   # Crowd.stage_us; the rest of a tick is "controller"


def random_goal_sticks(positions: np.ndarray, goals: np.ndarray, rng, half: float) -> np.ndarray:
    """Sticks (n, 2) of full deflection toward each agent's goal (n, 2: x, z); goals reached (within
    0.5 m) are replaced by new random goals in [-half, half]^2, in place."""
    d = goals - positions[:, [0, 2]]
    dist = np.hypot(d[:, 0], d[:, 1])
    arrived = dist < 0.5
    if arrived.any():
        goals[arrived] = rng.uniform(-half, half, (int(arrived.sum()), 2))
        d = goals - positions[:, [0, 2]]
        dist = np.hypot(d[:, 0], d[:, 1])
    return d / np.maximum(dist, 1e-9)[:, None]


def state_bytes(crowd: Crowd) -> int:
    """Bytes held by the crowd's per-character arrays (not the shared per-database ones)."""
    seen = {}

    def collect(v):
        if isinstance(v, tuple):
            for x in v:
                collect(x)
        elif isinstance(v, np.ndarray) and v.ndim and len(v) == crowd.n:
            seen[id(v)] = v.nbytes     # records share the crowd's arrays: each counted once

    for v in vars(crowd).values():
        collect(v)
    return int(sum(seen.values()))


def database_bytes(crowd: Crowd) -> int:
    """Bytes of the per-database arrays a crowd reads (poses, velocities, features, contacts, the
    per-database runtime arrays, every searcher's normalized features and index): shared by all agents."""
    seen = {}

    def collect(v):
        if isinstance(v, (tuple, list)):
            for x in v:
                collect(x)
        elif isinstance(v, np.ndarray):
            seen[id(v)] = v.nbytes
        elif hasattr(v, "searcher"):                       # a SearchSet
            collect(v.features)
            collect(v.searcher.index_arrays)
            collect(v.searcher.searchable)

    collect(tuple(crowd.db_arrays) + (crowd.raw_features, crowd.contacts_db, crowd.range_of, crowd.stop_of,
                                      crowd.still_to, crowd.holdable, crowd.future_speeds))
    collect(list({id(s): s for s in crowd.search_sets}.values()))
    return int(sum(seen.values()))


def bench_crowd(db, sizes, seconds: float = 3.0, seed: int = 0, warmup_s: float = 1.0, progress: bool = True,
                threads="auto"):
    """Per crowd size: tick times (wall clock and the process's CPU time, ms, median and p99), us per character, searches per tick, the share
    of the tick per stage, the share of ticks run on more than one thread, the runtime state's bytes
    per character and the database's bytes per frame. The first warmup_s seconds are not timed."""
    fps = float(db.fps)
    dt = 1.0 / fps
    results = []
    for n in sizes:
        rng = np.random.default_rng(seed)
        crowd = Crowd(db, n, threads=threads)
        half = max(5.0, 1.5 * np.sqrt(n))            # about 2 m^2 per agent
        for i in range(n):
            x, z = rng.uniform(-half, half, 2)
            crowd.reset_agent(i, (x, 0.0, z), float(rng.uniform(-np.pi, np.pi)))
        goals = rng.uniform(-half, half, (n, 2))
        run = rng.random(n) < 0.3
        strafe = np.zeros(n, dtype=bool)
        look = np.full((n, 2), np.nan)
        warm, timed = int(round(warmup_s * fps)), max(int(round(seconds * fps)), 1)
        ticks, cpu, searches, stages, multi = [], [], [], [], []
        for k in tqdm(range(warm + timed), desc=f"crowd of {n}", unit="tick", disable=not progress, leave=False):
            move = random_goal_sticks(crowd.root_positions, goals, rng, half)
            c0 = time.process_time()
            t0 = time.perf_counter()
            crowd.step(move, run, strafe, look, dt)
            t1 = time.perf_counter()
            c1 = time.process_time()
            if k >= warm:
                ticks.append((t1 - t0) * 1e3)
                cpu.append((c1 - c0) * 1e3)
                searches.append(crowd.searches_last_tick)
                stages.append([crowd.stage_us[s] * 1e-3 for s in STAGES])
                multi.append(crowd.threads_last_tick > 1)
        ticks = np.array(ticks)
        med = float(np.median(ticks))
        stage_ms = np.array(stages).sum(0)
        total = float(ticks.sum())
        share = {s: round(float(v) / total, 3) for s, v in zip(STAGES, stage_ms)}
        share["controller"] = round(max(0.0, 1.0 - sum(share.values())), 3)
        results.append({"n": int(n), "tick_ms": {"median": round(med, 4), "p99": round(float(np.percentile(ticks, 99)), 4)},
                        # CPU time of all the process's threads: the work, whatever the machine's load
                        # (a loaded machine stretches the wall clock, not this).
                        "tick_cpu_ms": {"median": round(float(np.median(cpu)), 4),
                                        "p99": round(float(np.percentile(cpu, 99)), 4)},
                        "us_per_character": round(med * 1e3 / n, 3),
                        "searches_per_tick": round(float(np.mean(searches)), 3),
                        "stage_share": share,
                        "parallel_tick_share": round(float(np.mean(multi)), 3),
                        "bytes_per_character": state_bytes(crowd) // n,
                        "database_bytes_per_frame": round(database_bytes(crowd) / db.num_frames, 1)})
    return results


@contextmanager
def busy_core():
    """A child process spinning on one core (the last this process may use) for the duration; yields
    the core's number."""
    cores = sorted(os.sched_getaffinity(0))
    core = cores[-1]
    code = f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True:\n    pass\n"
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL)
    try:
        time.sleep(0.2)                                # let it start spinning
        yield core
    finally:
        proc.kill()
        proc.wait()


def bench_contention(db, sizes, seconds: float = 3.0, seed: int = 0, progress: bool = True):
    """bench_crowd with a busy core beside it, for one thread, all threads and the measured choice:
    {"busy_core", "by_threads": {"1": rows, "<all>": rows, "auto": rows}}."""
    out = {}
    with busy_core() as core:
        for threads in (1, max_threads(), "auto"):
            if str(threads) in out:
                continue
            out[str(threads)] = bench_crowd(db, sizes, seconds, seed, progress=progress, threads=threads)
    return {"busy_core": core, "by_threads": out}
