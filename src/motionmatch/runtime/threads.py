"""How many threads a crowd tick uses, chosen by measuring ticks.

Two threads make a quiet 2-core machine's big crowds about 2x faster, but when another process holds a
core a parallel stage waits for a worker thread the kernel has not scheduled: on this machine a
100-agent tick took 77-100 ms instead of 0.7 ms on one thread. Neither a fixed thread count nor a
load figure (the load average lags by a minute; the cores' share changes from one tick to the next)
decides well, so the chooser times the ticks themselves: it runs the faster of one thread and all
threads (the median of each one's recent ticks) and now and then tries the other for a single tick.
A losing try doubles the wait before the next (up to `max_interval` ticks), so under a lasting
contention it costs one slow tick in hundreds; a winning try switches at once. A try that loses by far
(`decisive`: a 10,000-agent crowd's one-thread tick is 1.9x its two-thread one) waits `max_interval`
at once: each try is a tick the player sees slower (a dropped frame at 60 Hz), and the doubling from
`interval` made 6 of them in the first half minute (and 3 in a 2 s measurement, its p99). The wait
ends early when the running choice slows past the last try's time: contention arriving shows
there first (its last ticks slower than that try by the margin: within it, the machine's noise between
two close choices would bring tries on), so it is still caught within a few ticks. Ties go to one thread:
all threads must beat one thread's median by `margin` to take over, one thread only has to match
all threads' (a crowd's tick is never to be slower than on one thread; with the margin both ways, a
100-agent crowd beside a busy core stayed on two threads 12 % slower than one).

OpenMP's idle worker threads spin for a while waiting for work (libgomp's default), which on a busy
machine takes the core from the very thread they wait for; `motionmatch/__init__.py` asks them to sleep
instead (OMP_WAIT_POLICY=PASSIVE unless the user set it): a parallel tick under contention then costs
about 2x a single-thread tick instead of 100x, which bounds what a losing try costs.
"""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["ThreadChooser", "max_threads"]


def max_threads() -> int:
    """Threads numba may use in this process (NUMBA_NUM_THREADS, default the core count)."""
    return int(numba.config.NUMBA_NUM_THREADS)


class ThreadChooser:
    """Picks 1 or `threads` threads for each tick from the measured tick times (see module docstring).

    threads: the parallel candidate (default max_threads()); fixed: always use `threads` (no tries).
    window: recent ticks kept per candidate; burst: ticks of one try (their median is compared, so one
    tick delayed by another process decides nothing); margin: a try of all threads must beat one
    thread's median by this fraction to switch (no flapping between two equal choices), a try of one
    thread only has to be no slower; interval, max_interval: ticks between tries (min, max); decisive:
    a try this many times slower than the running choice's median waits max_interval at once.
    """

    def __init__(self, threads: int | None = None, fixed: bool = False, window: int = 9, burst: int = 3,
                 margin: float = 0.1, interval: int = 30, max_interval: int = 960, decisive: float = 1.5):
        top = max_threads()
        self.threads = max(1, min(int(threads or top), top))
        self.fixed = bool(fixed) or self.threads == 1
        self.window, self.burst, self.margin = int(window), int(burst), float(margin)
        self.interval, self.max_interval, self.decisive = int(interval), int(max_interval), float(decisive)
        self.samples = {1: [], self.threads: []}
        self.current = self.threads
        self.wait = self.interval
        self.since_try = 0
        self.tried = []             # tick times of the running try
        self.last_try = float("inf")  # the median of the last losing try, s

    @classmethod
    def of_setting(cls, threads="auto", small: bool = False) -> "ThreadChooser":
        """The chooser for a crowd's `threads` setting: "auto" or a fixed positive count; a small crowd
        (parallel stages cost more than they save) always uses one thread."""
        if threads != "auto" and (isinstance(threads, bool) or not isinstance(threads, (int, np.integer))
                                  or threads < 1):
            raise ValueError(f"threads: expected 'auto' or a positive integer, got {threads!r}")
        return cls(1 if small else None if threads == "auto" else int(threads), fixed=small or threads != "auto")

    def _other(self) -> int:
        return 1 if self.current != 1 else self.threads

    def pick(self) -> int:
        """Thread count for the next tick."""
        if self.fixed:
            return self.threads
        if self.tried or self.since_try >= self.wait:
            return self._other()
        return self.current

    def record(self, threads: int, seconds: float) -> None:
        """The tick just run with `threads` threads took `seconds` (wall clock)."""
        if self.fixed or threads not in self.samples:
            return
        seconds = float(seconds)
        if threads == self.current:
            s = self.samples[threads]
            s.append(seconds)
            if len(s) > self.window:
                del s[0]
            self.since_try += 1
            # Every tick: a sort of a few floats (numpy's median of a short list costs 10 us, 1 % of a small tick).
            if len(s) >= self.burst and sorted(s[-self.burst:])[self.burst // 2] > (1.0 + self.margin) * self.last_try:
                self.since_try = self.wait      # slower than the other measured: try it next tick
            return
        self.tried.append(seconds)
        if len(self.tried) < self.burst:
            return
        # The first tick of a try may load compiled code or wake the worker threads: the burst's median.
        tried = float(np.median(self.tried))
        self.tried = []
        self.since_try = 0
        mine = self.samples[self.current]
        margin = 0.0 if threads == 1 else self.margin
        if len(mine) < 3 or tried <= (1.0 - margin) * float(np.median(mine)):
            # The try won: switch now and try the other again soon; the winner's older ticks (earlier
            # tries, perhaps under another load) no longer speak for it.
            self.samples[threads] = [tried]
            self.current = threads
            self.wait = self.interval
            self.last_try = float("inf")
        else:
            far = tried >= self.decisive * float(np.median(mine))
            self.wait = self.max_interval if far else min(2 * self.wait, self.max_interval)
            self.last_try = tried

    def medians_ms(self) -> dict:
        """{threads: median of its recent tick times in ms} (NaN when not measured yet)."""
        return {k: float(np.median(v)) * 1e3 if v else float("nan") for k, v in self.samples.items()}
