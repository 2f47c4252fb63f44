"""`motionmatch bench crowd`: tick time of random-goal crowds of several sizes (default settings:
foot locking, IK and warping on). Each agent walks (or runs) toward a random goal in a square sized
for the crowd and picks a new goal on arrival; agents do not avoid each other."""
from __future__ import annotations

import time

import numpy as np
from tqdm import tqdm

from .crowd import Crowd


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


def bench_crowd(db, sizes, seconds: float = 3.0, seed: int = 0, warmup_s: float = 1.0, progress: bool = True):
    """Per crowd size: tick times (ms, median and p99), us per character, searches per tick and the
    runtime state's bytes per character. The first warmup_s seconds are not timed."""
    fps = float(db.fps)
    dt = 1.0 / fps
    results = []
    for n in sizes:
        rng = np.random.default_rng(seed)
        crowd = Crowd(db, n)
        half = max(5.0, 1.5 * np.sqrt(n))            # about 2 m^2 per agent
        for i in range(n):
            x, z = rng.uniform(-half, half, 2)
            crowd.reset_agent(i, (x, 0.0, z), float(rng.uniform(-np.pi, np.pi)))
        goals = rng.uniform(-half, half, (n, 2))
        run = rng.random(n) < 0.3
        strafe = np.zeros(n, dtype=bool)
        look = np.full((n, 2), np.nan)
        warm, timed = int(round(warmup_s * fps)), max(int(round(seconds * fps)), 1)
        ticks, searches = [], []
        for k in tqdm(range(warm + timed), desc=f"crowd of {n}", unit="tick", disable=not progress, leave=False):
            move = random_goal_sticks(crowd.root_positions, goals, rng, half)
            t0 = time.perf_counter()
            crowd.step(move, run, strafe, look, dt)
            t1 = time.perf_counter()
            if k >= warm:
                ticks.append((t1 - t0) * 1e3)
                searches.append(crowd.searches_last_tick)
        ticks = np.array(ticks)
        med = float(np.median(ticks))
        results.append({"n": int(n), "tick_ms": {"median": round(med, 4), "p99": round(float(np.percentile(ticks, 99)), 4)},
                        "us_per_character": round(med * 1e3 / n, 3),
                        "searches_per_tick": round(float(np.mean(searches)), 3),
                        "bytes_per_character": crowd.state_bytes() // n})
    return results
