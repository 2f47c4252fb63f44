"""The crowd of the app's crowd mode in its own process, so that it never holds up a user's character.

In the server's process every page's character steps on the one event loop; a crowd stepped there too
took the loop for as long as its tick lasted (on a busy 2-core machine a 50-agent tick took 77 ms,
and the user's character ran at 0.15-0.2x real time). Here the crowd has its own process, niced
(CROWD_NICE) so that the operating system gives the server's session ticks the CPU first, and its own
60 Hz clock: a tick less than a tick late is made up at once, a later one skipped (next_tick), never
caught up in a burst, so the crowd's time runs slow rather than its stalls growing.

The server talks to it through a pipe, one request at a time: the users' positions and velocities,
whether anyone is connected (the crowd only steps then) and whether a frame is wanted; the process
answers after its next tick with the frame (crowd_stream.py) and its tick figures. At most one
message is in flight each way, so neither side can fill the pipe.
"""
from __future__ import annotations

import logging
import multiprocessing
import os
import time
from collections import deque

import numpy as np

from ..limits import DT
from ...posedb.database import load_database
from .stream import world_frame
from .world import crowd_world, step_world, warm_up_world

log = logging.getLogger("motionmatch.app")

CROWD_NICE = 10          # the crowd's scheduling priority below the server (a nice-10 process gets ~1/10
                         # of a core that a nice-0 one also wants; alone it gets everything)
STARTUP_TIMEOUT_S = 600.0  # loading the database and compiling (or loading) the kernels
TICK_WINDOW = 600        # ticks (10 s) the reported tick times cover


def tick_figures(times_us, skipped: int, ticks: int) -> dict:
    """Tick figures for /api/crowd: median and p99 step time (ms) over the last TICK_WINDOW ticks,
    ticks stepped and ticks skipped because the crowd was late."""
    t = np.asarray(times_us, dtype=np.float64)
    return {"tick_ms": round(float(np.median(t)) / 1e3, 3) if len(t) else None,
            "tick_p99_ms": round(float(np.percentile(t, 99)) / 1e3, 3) if len(t) else None,
            "ticks": ticks, "skipped": skipped}


def next_tick(scheduled: float, now: float) -> tuple[float, int]:
    """When the tick after the one scheduled at `scheduled` (s, monotonic clock) starts, and how many ticks
    are skipped, at `now` (the tick just ended). Less than a tick behind, the next starts at once and the
    schedule keeps its 60 Hz (an occasional long tick is made up by the short ones around it: skipping a tick
    for 1 ms of lateness had a 2,000-agent crowd with a 12.5 ms median tick step 45 times a second); further
    behind, the missed ticks are skipped and the schedule restarts now, so stalls never come back as a burst."""
    due = scheduled + DT
    if now - due <= DT:
        return due, 0
    return now, int((now - due) / DT)


def crowd_main(conn, db_path: str, n: int, seed: int, nice: int, slow_s: float) -> None:
    """The crowd process: load the database, answer "ready" with the skeleton, then step at 60 Hz and
    answer requests (see the module docstring). slow_s: seconds slept in every tick, a stand-in for a
    slower machine (tests)."""

    try:
        os.nice(nice)
    except OSError:
        pass
    try:
        db = load_database(db_path)
        warm_up_world(db, n)
        world = crowd_world(db, n, seed)
    except Exception as exc:  # said to the server, which fails to start with the reason
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", {"n": n, "names": world.names, "parents": world.parents, "hips": world.hips}))
    users, vel = np.zeros((0, 2)), np.zeros((0, 2))
    active = want = pending = False
    times, skipped, ticks = deque(maxlen=TICK_WINDOW), 0, 0
    next_t = time.monotonic()
    while True:
        while conn.poll(max(0.0, next_t - time.monotonic())):
            msg = conn.recv()
            if msg[0] == "stop":
                return
            _, users, vel, active, want = msg
            pending = True
        now = time.monotonic()
        if now < next_t:
            continue
        if active:
            t0 = time.perf_counter()
            step_world(world, users, vel)
            if slow_s:
                time.sleep(slow_s)
            times.append((time.perf_counter() - t0) * 1e6)
            ticks += 1
        next_t, missed = next_tick(next_t, time.monotonic())
        skipped += missed
        if pending:
            conn.send(("frame", world_frame(world) if want else None, tick_figures(times, skipped, ticks)))
            pending = False


class CrowdProcess:
    """The server's handle on the crowd process: start (blocks until it is ready or failed), request,
    poll, close. `info`: n, joint names, parents, hips joint; `figures`: the latest tick figures."""

    def __init__(self, db_path, n: int, seed: int = 0, nice: int = CROWD_NICE, slow_s: float = 0.0):
        ctx = multiprocessing.get_context("spawn")      # a fork would copy the server's threads' state
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=crowd_main, args=(child, str(db_path), n, seed, nice, slow_s),
                                name="motionmatch-crowd", daemon=True)
        self.proc.start()
        child.close()
        self.waiting = False
        self.figures = tick_figures((), 0, 0)
        if not self.conn.poll(STARTUP_TIMEOUT_S):
            self.close()
            raise RuntimeError(f"the crowd process did not start within {STARTUP_TIMEOUT_S:.0f} s")
        try:
            kind, info = self.conn.recv()
        except EOFError:
            self.close()
            raise RuntimeError(f"the crowd process ended while starting (exit code {self.proc.exitcode})") from None
        if kind != "ready":
            self.close()
            raise RuntimeError(f"the crowd process could not start: {info}")
        self.info = info

    def request(self, users: np.ndarray, velocities: np.ndarray, active: bool, want_frame: bool) -> bool:
        """Send the users ((u, 2) m and m/s) and flags unless a request is in flight; True if sent."""
        if self.waiting:
            return False
        self.conn.send(("tick", np.asarray(users, np.float64), np.asarray(velocities, np.float64),
                        bool(active), bool(want_frame)))
        self.waiting = True
        return True

    def poll(self):
        """The answer to the request in flight if it has come (frame bytes or None), else None. Raises
        RuntimeError when the process has ended."""
        if not self.waiting:
            return None
        try:
            if not self.conn.poll(0):
                if not self.proc.is_alive():
                    raise EOFError
                return None
            _, frame, self.figures = self.conn.recv()
        except (EOFError, OSError):
            raise RuntimeError(f"the crowd process ended (exit code {self.proc.exitcode})") from None
        self.waiting = False
        return frame

    def close(self) -> None:
        try:
            self.conn.send(("stop",))
        except (OSError, ValueError):
            pass
        # The process answers "stop" between two ticks; one that does not is terminated, then killed.
        self.proc.join(2.0)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(2.0)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()
