"""`motionmatch bench serve`: a soak of the app's server. A `motionmatch serve` process is started on a
free port and N simulated pages connect to it, hold a stick, record, and leave again every few seconds
(new ones take their place); the server's resident memory is sampled over time and every page's frame
rate is kept. What it shows: memory that returns when pages leave, and the frame rate the connected
pages keep (the session cap is chosen from it, docs/ROBUSTNESS.md).

`bench serve --soak` counts visits instead of minutes: each visit is what a page does over its WebSocket
and the session's HTTP routes (hello, the settings schema and the clip list, a stick that changes, a
recording, its three downloads, then it leaves), and the server's memory is sampled against the visits
made: after a warm-up share of them its slope (kB per visit) is what a day of traffic would add.
"""
from __future__ import annotations

import asyncio
import collections
import json
import math
import random
import re
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

FPS = 60.0
HELLO_TIMEOUT_S = 60.0
FETCH_TIMEOUT_S = 60.0      # --soak: a download not answered within this is counted as failed
RETRIES = 20                # --soak: times a refused or timed-out page asks again before its visit is given up


@dataclass
class SoakResult:
    """rss_mb: (seconds since the soak started, server RSS in MB) samples; page_fps: frames a second
    each page received while connected (one value per page visit); start_mb / end_mb: RSS after the
    warm-up round and after every page of the soak had left."""

    pages: int
    seconds: float
    rss_mb: list = field(default_factory=list)
    page_fps: list = field(default_factory=list)
    refused: int = 0
    timed_out: int = 0            # visits whose hello did not come within HELLO_TIMEOUT_S (an overloaded machine)
    start_mb: float = 0.0
    end_mb: float = 0.0
    # --soak only: (visits made, server RSS in MB) samples, the visits of the warm-up, downloads that failed
    by_visits: list = field(default_factory=list)
    warmup_visits: int = 0
    failed_downloads: int = 0

    def to_dict(self) -> dict:
        fps = sorted(self.page_fps)
        out = {"pages": self.pages, "seconds": round(self.seconds, 1), "visits": len(fps), "refused": self.refused,
               "timed_out": self.timed_out,
               "page_fps": {"median": _pick(fps, 0.5), "p5": _pick(fps, 0.05), "min": _pick(fps, 0.0)},
               "rss_mb": {"start": round(self.start_mb, 1), "end": round(self.end_mb, 1),
                          "max": round(max((m for _, m in self.rss_mb), default=0.0), 1),
                          "end_over_start": round(self.end_mb / self.start_mb, 3) if self.start_mb else None},
               "samples": [[round(t, 1), round(m, 1)] for t, m in self.rss_mb]}
        if self.by_visits:
            out.update({"warmup_visits": self.warmup_visits, "failed_downloads": self.failed_downloads,
                        "slope_kb_per_visit": round(self.slope_kb_per_visit(), 3),
                        "memory_by_visits": [[v, round(m, 2)] for v, m in self.by_visits]})
        return out

    def slope_kb_per_visit(self) -> float:
        """Least-squares slope of the server's RSS against visits made, over the samples after the
        warm-up, in kB (1000 bytes) per visit; nan with fewer than 3 samples."""
        pts = [(v, m) for v, m in self.by_visits if v >= self.warmup_visits]
        if len(pts) < 3:
            return math.nan
        n = len(pts)
        mv, mm = sum(v for v, _ in pts) / n, sum(m for _, m in pts) / n
        var = sum((v - mv) ** 2 for v, _ in pts)
        return sum((v - mv) * (m - mm) for v, m in pts) / var * 1024 * 1024 / 1000 if var else math.nan


def _pick(values: list, q: float):
    return round(values[min(len(values) - 1, int(q * len(values)))], 1) if values else None


def rss_mb(pid: int) -> float:
    """Resident memory of a process (MB) from /proc."""
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", text).group(1)) / 1024.0


def start_server(db: str | None, max_sessions: int, extra: list[str] | None = None) -> tuple[subprocess.Popen, str]:
    """A `motionmatch serve` subprocess on a free loopback port; returns it and its URL."""
    cmd = [sys.executable, "-m", "motionmatch", "serve", "--port", "0", "--max-sessions", str(max_sessions)]
    cmd += (["--db", str(db)] if db else []) + (extra or [])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    for line in proc.stdout:
        m = re.search(r"serving on (http://127\.0\.0\.1:\d+)/", line)
        if m:
            # Keep reading what it prints (its warnings): a full pipe would stop the server at its next line
            # (a 5,000-visit soak stood still after a few thousand visits).
            threading.Thread(target=collections.deque, args=(proc.stdout, 0), daemon=True).start()   # read, dropped
            return proc, m.group(1)
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError("the server did not start (run `motionmatch serve` to see why)")


@contextmanager
def running_server(db: str | None, max_sessions: int, extra: list[str] | None = None):
    """start_server's (process, URL) for a `with` block; the server is stopped on leaving it (terminated,
    killed if it has not ended 10 s later)."""
    proc, url = start_server(db, max_sessions, extra)
    try:
        yield proc, url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


async def _visit(http: aiohttp.ClientSession, url: str, seconds: float, record: bool, out: SoakResult,
                 rng: random.Random, downloads: bool = False) -> None:
    """One page: connect, walk about (recording if asked) for `seconds`, leave. downloads: also what the
    page asks over HTTP (the settings schema and the clip list on arrival; the recording as BVH, its input
    log and the settings file before leaving), a failed request counted in `out.failed_downloads`."""
    try:
        ws = await asyncio.wait_for(http.ws_connect(url.replace("http", "ws", 1) + "/ws", max_msg_size=0),
                                    HELLO_TIMEOUT_S)
    except aiohttp.ClientError:
        out.refused += 1
        return
    except asyncio.TimeoutError:     # an overloaded machine is a figure of the soak, not its end
        out.timed_out += 1
        return
    async with ws:
        try:
            first = await ws.receive(timeout=HELLO_TIMEOUT_S)
        except asyncio.TimeoutError:
            out.timed_out += 1
            return
        hello = json.loads(first.data) if first.type == aiohttp.WSMsgType.TEXT else {}
        if hello.get("type") != "hello":          # e.g. the server is full
            out.refused += 1
            return
        session = f"{url}/api/session/{hello['session']}/"
        if downloads:
            out.failed_downloads += await _fetch(http, [f"{url}/api/settings/schema", session + "clips"])
        if record:
            await ws.send_str(json.dumps({"type": "record", "action": "start"}))
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        end, next_input, frames = t0 + seconds, t0, 0
        while (left := end - loop.time()) > 0:
            if loop.time() >= next_input:         # a new stick direction now and then
                angle = rng.uniform(-math.pi, math.pi)
                await ws.send_str(json.dumps({"type": "input", "move": [round(0.9 * math.sin(angle), 3),
                                                                        round(0.9 * math.cos(angle), 3)],
                                              "run": rng.random() < 0.3}))
                next_input = loop.time() + rng.uniform(0.5, 2.0)
            try:
                msg = await ws.receive(timeout=left)
            except asyncio.TimeoutError:
                break
            if msg.type == aiohttp.WSMsgType.BINARY:
                frames += 1
            elif msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                break
        out.page_fps.append(frames / max(1e-6, loop.time() - t0))
        if downloads and not ws.closed:
            await ws.send_str(json.dumps({"type": "record", "action": "stop"}))
            names = (["record.bvh"] if record else []) + ["record.replay.json", "settings.toml"]
            out.failed_downloads += await _fetch(http, [session + name for name in names])


async def _fetch(http: aiohttp.ClientSession, urls: list) -> int:
    """GET each URL and read its body; returns how many did not answer 200 within FETCH_TIMEOUT_S."""
    failed = 0
    for u in urls:
        try:
            async with http.get(u, timeout=aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S)) as r:
                await r.read()
                failed += r.status != 200
        except (aiohttp.ClientError, asyncio.TimeoutError):
            failed += 1
    return failed


async def _soak(url: str, pid: int, pages: int, seconds: float, visit_s: float, record: bool,
                progress, seed: int) -> SoakResult:
    out = SoakResult(pages=pages, seconds=seconds)
    rng = random.Random(seed)
    async with aiohttp.ClientSession() as http:
        # Warm-up: every page slot once (characters, compiled code and caches reach their steady state).
        warm = SoakResult(pages=pages, seconds=0.0)
        await asyncio.gather(*[_visit(http, url, min(3.0, visit_s), record, warm, rng) for _ in range(pages)])
        await asyncio.sleep(1.0)
        out.start_mb = rss_mb(pid)
        loop = asyncio.get_running_loop()
        t0 = loop.time()

        async def slot(k):
            r = random.Random(seed * 1000 + k)
            await asyncio.sleep(r.uniform(0, visit_s))          # pages come and go out of step
            while loop.time() - t0 < seconds:
                await _visit(http, url, min(visit_s * r.uniform(0.5, 1.5), seconds - (loop.time() - t0) + 0.1),
                             record, out, r)

        async def sampler():
            while loop.time() - t0 < seconds:
                out.rss_mb.append((loop.time() - t0, rss_mb(pid)))
                if progress:
                    fps = sorted(out.page_fps[-pages:])
                    progress(f"{loop.time() - t0:6.0f} s  RSS {out.rss_mb[-1][1]:7.1f} MB  pages' fps (last "
                             f"{len(fps)}): median {_pick(fps, 0.5)} min {_pick(fps, 0.0)}")
                await asyncio.sleep(max(1.0, seconds / 60))

        await asyncio.gather(sampler(), *[slot(k) for k in range(pages)])
        await asyncio.sleep(2.0)                  # the server drops the last sessions
        out.end_mb = rss_mb(pid)
        out.rss_mb.append((loop.time() - t0, out.end_mb))
    return out


def soak(db: str | None, pages: int = 20, seconds: float = 300.0, visit_s: float = 20.0, record: bool = True,
         max_sessions: int | None = None, progress=print, seed: int = 0) -> SoakResult:
    """Run the soak against a fresh server: `pages` simulated pages at once for `seconds`, each visit
    lasting about `visit_s` seconds (0.5-1.5x), recording when `record`."""
    with running_server(db, max_sessions or max(pages, 1)) as (proc, url):
        return asyncio.run(_soak(url, proc.pid, pages, seconds, visit_s, record, progress, seed))


async def _soak_visits(url: str, pid: int, visits: int, pages: int, visit_s: float, warmup: int, record: bool,
                       progress, seed: int) -> SoakResult:
    out = SoakResult(pages=pages, seconds=0.0, warmup_visits=warmup)
    loop = asyncio.get_running_loop()
    step = max(1, visits // 100)          # a memory sample every `step` visits: 100 over the soak
    made = [0]

    async def run(n: int, first: int) -> None:
        """n visits by `pages` pages at once, out of step; RSS sampled at every `step` visits made."""
        todo = iter(range(first, first + n))

        async def page(k):
            r = random.Random(seed * 1000 + k)
            await asyncio.sleep(r.uniform(0, visit_s))        # pages come and go out of step
            for _ in todo:
                for _ in range(RETRIES):     # a refused page asks again, as the page does (counted in `refused`)
                    served = len(out.page_fps)
                    await _visit(http, url, visit_s * r.uniform(0.5, 1.5), record, out, r, downloads=True)
                    if len(out.page_fps) > served:
                        break
                    await asyncio.sleep(0.5)
                made[0] += 1
                if made[0] % step == 0:
                    out.by_visits.append((made[0], rss_mb(pid)))
                    out.rss_mb.append((loop.time() - t0, out.by_visits[-1][1]))
                    if progress and made[0] % (10 * step) == 0:
                        progress(f"{made[0]:6d} visits  {loop.time() - t0:6.0f} s  RSS {out.by_visits[-1][1]:7.1f} MB")

        await asyncio.gather(*[page(k) for k in range(pages)])
        await asyncio.sleep(2.0)              # the server drops the last sessions

    t0 = loop.time()
    async with aiohttp.ClientSession() as http:
        await run(warmup, 0)
        out.start_mb = rss_mb(pid)
        await run(visits - warmup, warmup)
        out.end_mb = rss_mb(pid)
    out.seconds = loop.time() - t0
    out.rss_mb.append((out.seconds, out.end_mb))
    return out


def soak_visits(db: str | None, visits: int = 5000, pages: int = 20, visit_s: float = 2.0,
                warmup: int | None = None, record: bool = True, max_sessions: int | None = None, progress=print,
                seed: int = 0) -> SoakResult:
    """`bench serve --soak`: `visits` page visits against a fresh server, `pages` at once, each lasting
    about `visit_s` seconds (0.5-1.5x) and doing what a page does (_visit with downloads). The first
    `warmup` visits (default a tenth) fill the server's caches; every page leaves before the RSS
    `start_mb` is read, and again at the end for `end_mb`. `by_visits` holds the RSS against visits
    made (100 samples), `slope_kb_per_visit()` its slope after the warm-up."""
    warmup = max(pages, visits // 10) if warmup is None else warmup
    if not 0 < warmup < visits:
        raise ValueError(f"warm-up: expected 1..{visits - 1} visits, got {warmup}")
    # Twice the pages: a page arriving while the server still closes the session of the one it replaces
    # is served, as on a server whose cap is not reached.
    with running_server(db, max_sessions or 2 * pages) as (proc, url):
        return asyncio.run(_soak_visits(url, proc.pid, visits, pages, visit_s, warmup, record, progress, seed))


def table(result: SoakResult) -> str:
    d = result.to_dict()
    return "\n".join([
        f"pages {d['pages']}, {d['seconds']} s, {d['visits']} visits, {d['refused']} refused, "
        f"{d['timed_out']} timed out",
        f"page fps: median {d['page_fps']['median']}, p5 {d['page_fps']['p5']}, min {d['page_fps']['min']}",
        f"server RSS (MB): start {d['rss_mb']['start']}, max {d['rss_mb']['max']}, end {d['rss_mb']['end']} "
        f"(end/start {d['rss_mb']['end_over_start']})"]
        + ([f"after {d['warmup_visits']} warm-up visits: {d['slope_kb_per_visit']} kB a visit; "
            f"{d['failed_downloads']} downloads failed", "visits  RSS MB"]
           + [f"{v:6d}  {m:7.1f}" for v, m in d["memory_by_visits"][9::10]] if result.by_visits else []))

