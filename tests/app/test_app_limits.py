"""The server's limits over hours and many clients: bounded recordings released with their session, a cap
on sessions, half-open requests dropped, uploads checked before they are decoded, and live tracker
clocks that cannot poison a stream.
"""
from __future__ import annotations

import asyncio
import gc
import json
import struct
import weakref
import zlib

import aiohttp
import numpy as np
import pytest

from motionmatch.app import backend as app_backend
from motionmatch.app import server as srv
from motionmatch.app import limits as app_limits
from motionmatch.app import websocket as app_websocket
from motionmatch.app.crowd.mode import SLOW_VIEWER_S, CrowdViewers, broadcast
from motionmatch.app.crowd.world import crowd_world, step_world, users_near
from motionmatch.app.recording import BLOCK_FRAMES, Recording
from motionmatch.app.state import STATE
from motionmatch.vr.live import LiveTrackerFeed
from motionmatch.vr.trackers import TrackerFileError
from app_fixtures import Client, ServerThread, run


@pytest.fixture(scope="module")
def small_server(jlpm_db):
    """A server over the jlpm22 database that takes two pages at most."""
    s = ServerThread(srv.make_app(app_backend.runtime_backend(jlpm_db), max_sessions=2))
    yield s
    s.stop()


def test_recording_is_bounded_and_exact():
    rec = Recording(max_frames=BLOCK_FRAMES + 5)
    rng = np.random.default_rng(0)
    frames = [(rng.normal(size=(3, 3)), rng.normal(size=(3, 4))) for _ in range(BLOCK_FRAMES + 5)]
    for p, r in frames:
        assert rec.append(p, r)
    assert rec.full and not rec.append(*frames[0]) and len(rec) == BLOCK_FRAMES + 5
    pos, rot = rec.arrays()
    assert pos.shape == (BLOCK_FRAMES + 5, 3, 3) and rot.dtype == np.float32
    np.testing.assert_array_equal(pos[-1], frames[-1][0].astype(np.float32))
    np.testing.assert_array_equal(rot[BLOCK_FRAMES], frames[BLOCK_FRAMES][1].astype(np.float32))
    rec.clear()
    assert len(rec) == 0 and rec.arrays()[0].shape == (0, 3, 3)


def test_session_cap_refuses_with_a_message_and_frees_its_place(small_server):
    async def go():
        async with aiohttp.ClientSession() as s:
            a = await Client.open(s, small_server.url)
            b = await Client.open(s, small_server.url)
            ws = await s.ws_connect(small_server.url.replace("http", "ws") + "/ws")
            msg = await ws.receive(timeout=10)
            refused = json.loads(msg.data)
            closing = await ws.receive(timeout=10)
            await b.ws.close()
            for _ in range(100):            # the server drops b's session once its loop sees the close
                if len(small_server.app[STATE].sessions) < 2:
                    break
                await asyncio.sleep(0.05)
            c = await Client.open(s, small_server.url)
            await c.pump_frames(3)
            await a.ws.close()
            await c.ws.close()
            return refused, closing, c

    refused, closing, c = run(go())
    assert refused["type"] == "error" and refused["fatal"] and refused["full"]
    assert "full" in refused["message"] and "--max-sessions" in refused["message"]
    assert closing.type == aiohttp.WSMsgType.CLOSE and closing.data == app_websocket.SERVER_FULL_CLOSE_CODE
    assert len(c.frames) >= 3                # the freed place serves a new page


def test_closed_session_releases_its_recording(small_server):
    async def go():
        async with aiohttp.ClientSession() as s:
            c = await Client.open(s, small_server.url)
            session = small_server.app[STATE].sessions[c.hello["session"]]
            await c.ws.send_str(json.dumps({"type": "record", "action": "start"}))
            await c.pump_frames(30)
            recorded = len(session.recorded)
            ref = weakref.ref(session)
            del session
            await c.ws.close()
            for _ in range(100):
                if not small_server.app[STATE].sessions:
                    break
                await asyncio.sleep(0.05)
            return recorded, ref

    recorded, ref = run(go())
    assert recorded >= 20
    for _ in range(20):
        gc.collect()
        if ref() is None:
            break
        run(asyncio.sleep(0.05))
    assert ref() is None, gc.get_referrers(ref())   # nothing keeps a closed session (and its recording)


def test_half_open_request_is_dropped(jlpm_db, monkeypatch):
    monkeypatch.setattr(app_limits, "HEADER_TIMEOUT_S", 1.0)
    app = srv.make_app(app_backend.runtime_backend(jlpm_db))

    async def go():
        runner = srv.app_runner(app)
        await runner.setup()
        site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")   # headers never finish
        await writer.drain()
        t0 = asyncio.get_running_loop().time()
        data = await asyncio.wait_for(reader.read(), 15)                     # b"" once the server closes
        waited = asyncio.get_running_loop().time() - t0
        writer.close()
        await runner.cleanup()
        return data, waited

    data, waited = run(go())
    assert data == b"" and waited < 10


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG with a valid IHDR of the given size and one tiny IDAT: enough to be opened, not decoded."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + \
        chunk(b"IEND", b"")


def test_uploads_are_checked_before_decoding(small_server, monkeypatch):
    monkeypatch.setattr(app_limits, "BODY_TIMEOUT_S", 1.0)

    async def go():
        async with aiohttp.ClientSession() as s:
            c = await Client.open(s, small_server.url)
            base = f"{small_server.url}/api/session/{c.hello['session']}"
            out = {}
            async with s.post(f"{base}/terrain?name=huge.png", data=_png_header_only(9400, 9400)) as r:
                out["huge"] = (r.status, await r.text())
            async with s.post(f"{base}/scenario?name=a%00b", data=b"{}") as r:
                out["nul"] = (r.status, await r.text())
            async with s.post(f"{base}/scenario", data=b"[" * 100_000) as r:
                out["nested"] = (r.status, await r.text())
            # A body that never arrives: the handler gives up after BODY_TIMEOUT_S instead of waiting.
            reader, writer = await asyncio.open_connection("127.0.0.1", int(small_server.url.rsplit(":", 1)[1]))
            writer.write(f"POST /api/session/{c.hello['session']}/scenario HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         "Content-Length: 1000\r\n\r\n{\"dur".encode())
            await writer.drain()
            out["slow"] = await asyncio.wait_for(reader.read(200), 15)
            writer.close()
            await c.ws.close()
        return out

    out = run(go())
    assert out["huge"][0] == 400 and "9400 x 9400" in out["huge"][1] and "at most" in out["huge"][1]
    assert out["nul"][0] == 400 and out["nul"][1].startswith("name:")
    assert out["nested"][0] == 400
    assert out["slow"].split(b" ")[1] == b"408", out["slow"]


def _poses():
    return [np.zeros(3), np.zeros(3), np.zeros(3)], [np.array([1.0, 0, 0, 0])] * 3


def test_live_tracker_clock_cannot_poison_the_stream():
    feed = LiveTrackerFeed()
    feed.push(10.0, *_poses())
    with pytest.raises(TrackerFileError, match="^t:"):
        feed.push(1e300, *_poses())              # refused by name, the stream keeps its clock
    feed.push(10.1, *_poses())
    with pytest.raises(TrackerFileError, match="times must increase"):
        feed.push(10.05, *_poses())              # a small step back is an error ...
    before = len(feed.pending)
    feed.push(3.0, *_poses())                    # ... a big one is a new clock (a reloaded page)
    assert len(feed.pending) == before + 1 and feed.pending[-1][2]   # a fresh start, not a refusal
    feed.push(3.0 + 1 / 60, *_poses())
    assert feed.t == pytest.approx(3.0 + 1 / 60)


class _Viewer:
    """A crowd viewer whose socket takes frames only when `stuck` is off."""

    def __init__(self, stuck: bool):
        self.stuck, self.closed, self.got, self.close_code = stuck, False, [], None
        self.release = asyncio.Event()

    async def send_bytes(self, data):
        if self.stuck:
            await self.release.wait()
        self.got.append(data)

    async def close(self, code, message):
        self.closed, self.close_code = True, code


def test_slow_crowd_viewer_neither_holds_up_the_others_nor_stays():
    world = CrowdViewers()

    async def go():
        slow, fast = _Viewer(stuck=True), _Viewer(stuck=False)
        world.viewers.update((slow, fast))
        for k in range(30):
            broadcast(world, bytes([k]), now=100.0 + 0.1 * k)
            await asyncio.sleep(0)
        during = (len(slow.got), len(fast.got), slow in world.viewers)
        broadcast(world, b"late", now=100.0 + 3.0 + SLOW_VIEWER_S)     # stalled too long: closed
        await asyncio.sleep(0)
        return during, slow, fast

    (slow_got, fast_got, slow_kept), slow, fast = run(go())
    assert fast_got == 30 and slow_got == 0 and slow_kept      # the fast one saw every frame meanwhile
    assert slow.closed and slow.close_code == 1008 and slow not in world.viewers
    assert fast.got[-1] == b"late" and fast in world.viewers


def test_a_user_far_away_or_not_finite_cannot_stop_the_crowd(jlpm_db):
    world = crowd_world(jlpm_db, 6)
    users = np.array([[1.0, 1.0], [1e30, 0.0], [np.inf, 0.0], [2.0, -1.0]])
    vel = np.array([[0.5, 0.0], [0.0, 0.0], [0.0, 0.0], [1e300, 0.0]])
    near, near_vel = users_near(users, vel)
    assert near.tolist() == [[1.0, 1.0]] and near_vel.tolist() == [[0.5, 0.0]]
    for _ in range(30):
        step_world(world, near, near_vel)
    assert np.isfinite(world.crowd.global_positions).all()
    assert np.abs(world.crowd.root_positions).max() < 100.0


@pytest.mark.slow
def test_soak_counts_visits_and_samples_memory(jlpm_db_path):
    from motionmatch.devtools.soak import soak, table
    result = soak(str(jlpm_db_path), pages=2, seconds=8.0, visit_s=3.0, progress=None)
    d = result.to_dict()
    assert d["visits"] >= 2 and d["refused"] == 0 and d["page_fps"]["median"] > 0
    assert len(d["samples"]) >= 2 and d["rss_mb"]["start"] > 50 and d["rss_mb"]["end_over_start"] is not None
    assert "timed out" in table(result)


def test_closed_sessions_hand_their_memory_back(small_server, monkeypatch):
    """The leak of issue 43 (RSS up by tens of kB a visit while nothing stayed allocated: glibc kept the
    freed memory, app/memory.py): a closed session's memory is handed back, once for sessions closing
    together, and never while the page is still there."""
    from motionmatch.app import memory
    assert memory.release_free_memory()            # glibc's malloc_trim is there (Linux)
    calls = []
    monkeypatch.setattr(app_websocket, "release_free_memory", lambda: calls.append(1))

    async def go():
        async with aiohttp.ClientSession() as s:
            a = await Client.open(s, small_server.url)
            b = await Client.open(s, small_server.url)
            await a.pump_frames(3)
            before = len(calls)
            await a.ws.close()
            await b.ws.close()
            for _ in range(100):
                if calls and small_server.app[STATE].release is None:
                    break
                await asyncio.sleep(0.05)
            return before

    assert run(go()) == 0
    assert calls == [1] and small_server.app[STATE].release is None and not small_server.app[STATE].sessions


# Slope of the server's RSS after the warm-up (60 visits) of a 200-visit soak (10 pages, 1 s visits, jlpm22
# database), kB a visit, and its end / start ratio. Spread over 20 runs (seeds 0-19, 2026-12-02, the shared
# 2-core machine beside a fresh-clone `make test`, `PYTHONPATH=src .venv/bin/python tests/spreads/soak_slope.py
# 20`): slope min 9.9 / median 73.9 / max 239.5 kB, end/start 1.004 / 1.030 / 1.090. Over so few visits the RSS
# moves in steps of malloc's heaps (+6 MB at once), so these bounds (about twice the worst run) catch a
# session's recording or character kept (MBs a visit), not the 27.5 kB a visit of issue 43: that one is
# test_closed_sessions_hand_their_memory_back's, and the 5,000-visit bench's (docs/ROBUSTNESS.md: 0.35 kB a
# visit).
SOAK_SLOPE_BOUND_KB = 500.0
SOAK_END_OVER_START = 1.2


@pytest.mark.slow
def test_a_short_soak_keeps_the_servers_memory_flat(jlpm_db_path):
    from motionmatch.devtools.soak import soak_visits, table
    result = soak_visits(str(jlpm_db_path), visits=200, pages=10, visit_s=1.0, warmup=60, progress=None)
    d = result.to_dict()
    assert d["visits"] >= 200 and d["failed_downloads"] == 0 and d["warmup_visits"] == 60
    assert [v for v, _ in d["memory_by_visits"]] == list(range(2, 201, 2))
    assert d["slope_kb_per_visit"] < SOAK_SLOPE_BOUND_KB, table(result)
    assert d["rss_mb"]["end_over_start"] < SOAK_END_OVER_START
