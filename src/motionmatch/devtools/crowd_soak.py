"""`motionmatch bench serve --crowd N`: the app's crowd mode measured as a user meets it. A
`motionmatch serve --crowd N` process is started on a free port; one page drives the user's character
with a changing stick while two crowd viewers watch (/ws/crowd): a paced one, as the page is (it asks for
the next frame once it has the last), and an unpaced one (every frame it can take). After a warm-up the
crowd process's tick figures (/api/crowd), the ticks it stepped per second, the bytes per second sent to
viewers and every client's frame rate are kept for the timed seconds.
"""
from __future__ import annotations

import asyncio
import random

import aiohttp

from .soak import SoakResult, _visit, running_server

WARM_UP_S = 5.0


async def _viewer(http: aiohttp.ClientSession, url: str, seconds: float, paced: bool) -> dict:
    """One crowd viewer for `seconds`: frames a second and bytes a second it received."""
    frames = nbytes = 0
    loop = asyncio.get_running_loop()
    async with http.ws_connect(url.replace("http", "ws", 1) + "/ws/crowd", max_msg_size=0) as ws:
        if paced:
            await ws.send_str("ready")
        t0 = loop.time()
        while (left := t0 + seconds - loop.time()) > 0:
            try:
                msg = await ws.receive(timeout=left)
            except asyncio.TimeoutError:
                break
            if msg.type == aiohttp.WSMsgType.BINARY:
                frames += 1
                nbytes += len(msg.data)
                if paced:
                    await ws.send_str("ready")
            elif msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                break
        secs = max(1e-6, loop.time() - t0)
    return {"fps": round(frames / secs, 1), "bytes_per_s": round(nbytes / secs)}


async def _measure(url: str, seconds: float, seed: int) -> dict:
    async with aiohttp.ClientSession() as http:
        async def info():
            async with http.get(url + "/api/crowd") as r:
                return await r.json()

        warm = SoakResult(pages=1, seconds=0.0)
        await asyncio.gather(_visit(http, url, WARM_UP_S, False, warm, random.Random(seed)),
                             _viewer(http, url, WARM_UP_S, True))
        loop = asyncio.get_running_loop()
        page = SoakResult(pages=1, seconds=seconds)
        before, t0 = await info(), loop.time()
        _, paced, unpaced = await asyncio.gather(_visit(http, url, seconds, False, page, random.Random(seed + 1)),
                                                 _viewer(http, url, seconds, True),
                                                 _viewer(http, url, seconds, False))
        after, t1 = await info(), loop.time()
    secs = max(1e-6, t1 - t0)
    return {"n": after["n"], "seconds": round(secs, 1), "tick_ms": after["tick_ms"], "tick_p99_ms": after["tick_p99_ms"],
            "crowd_hz": round((after["ticks"] - before["ticks"]) / secs, 1),
            "skipped_per_s": round((after["skipped"] - before["skipped"]) / secs, 1),
            "bytes_per_frame": after["bytes_per_frame"],
            "bytes_per_s": paced["bytes_per_s"] + unpaced["bytes_per_s"],
            "viewer_fps": {"paced": paced["fps"], "unpaced": unpaced["fps"]},
            "page_fps": round(page.page_fps[0], 1) if page.page_fps else None}


def crowd_soak(db: str | None, n: int, seconds: float = 20.0, seed: int = 0) -> dict:
    """Measure `serve --crowd n` for `seconds` (after WARM_UP_S): the crowd process's tick median and p99
    (ms, last 10 s), ticks stepped and skipped per second (60 and 0 keep real time), bytes per frame and
    per second sent to the two viewers, the viewers' and the user's page's frames per second."""
    with running_server(db, 2, ["--crowd", str(n)]) as (_, url):
        return asyncio.run(_measure(url, seconds, seed))


def crowd_table(d: dict) -> str:
    return "\n".join([
        f"crowd {d['n']} agents, {d['seconds']} s: tick median {d['tick_ms']} ms, p99 {d['tick_p99_ms']} ms; "
        f"{d['crowd_hz']} ticks/s stepped, {d['skipped_per_s']} skipped/s",
        f"stream: {d['bytes_per_frame']} B/frame, {d['bytes_per_s'] / 1e6:.2f} MB/s to 2 viewers "
        f"(fps paced {d['viewer_fps']['paced']}, unpaced {d['viewer_fps']['unpaced']}); user's page {d['page_fps']} fps"])
