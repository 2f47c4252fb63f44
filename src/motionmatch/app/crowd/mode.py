"""The app's crowd mode (`motionmatch serve --crowd N`): N agents roam with random goals around the
users' characters (crowd_world.py), stepped at 60 Hz in their own process whoever watches
(crowd_process.py: the crowd never holds up a user's character), and drawn by the page as the
skinned body (static/crowd.js).

Viewers on `/ws/crowd` get binary frames (crowd_stream.py: roots, hips and smallest-three local
rotations, 18 + 4 J bytes per agent). A viewer that sends "ready" is paced: it gets one frame per
"ready", so frames come at the page's own drawing rate; one that never sends gets every tick's frame
it can take. `GET /api/crowd` gives {"n", "fps", "names", "parents", "hips", "bytes_per_frame",
"character", tick and traffic figures} ({"n": 0} without crowd mode, so the page can ask without an
error).

Agents avoid each other and the users' characters (local avoidance, world/avoidance.py); users are not steered.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import numpy as np
from aiohttp import WSMsgType, web

from .process import CrowdProcess
from .stream import bytes_per_frame
from .world import MAX_AGENTS, users_near
from ..hosts import origin_ok
from ..limits import DT
from ..state import STATE

log = logging.getLogger("motionmatch.app")

SLOW_VIEWER_S = 10.0         # s a viewer may stay unable to take a frame before it is closed


@dataclass
class CrowdViewers:
    """The server's side of crowd mode: the crowd process, the viewers and what has been sent."""
    process: object = None                          # CrowdProcess (None in tests of the viewers alone)
    viewers: set = field(default_factory=set)
    sending: dict = field(default_factory=dict)     # viewer -> the task sending it its latest frame
    stalled: dict = field(default_factory=dict)     # viewer -> time.monotonic() when it first could not take one
    ready: dict = field(default_factory=dict)       # paced viewer -> it asked for a frame
    bytes_sent: int = 0
    frames_sent: int = 0
    since: float = field(default_factory=time.monotonic)


CROWD = web.AppKey("crowd", CrowdViewers)
CROWD_TASK = web.AppKey("crowd_task", asyncio.Task)


def _users(app) -> tuple[np.ndarray, np.ndarray]:
    """Ground positions and velocities (u, 2) of the connected users' characters (their roots)."""
    pos, vel = [], []
    for s in app[STATE].sessions.values():
        p, v = s.ch.root_pos, s.ch.root_velocity
        pos.append((p[0], p[2]))
        vel.append((v[0], v[2]))
    return users_near(np.array(pos, dtype=np.float64).reshape(-1, 2), np.array(vel, dtype=np.float64).reshape(-1, 2))


async def _send(world: CrowdViewers, ws, data: bytes) -> None:
    try:
        await ws.send_bytes(data)
    except (ConnectionError, RuntimeError):
        forget_viewer(world, ws)
        return
    world.bytes_sent += len(data)
    world.frames_sent += 1


def forget_viewer(world: CrowdViewers, ws) -> None:
    world.viewers.discard(ws)
    world.sending.pop(ws, None)
    world.stalled.pop(ws, None)
    world.ready.pop(ws, None)


def wants_frame(world: CrowdViewers) -> bool:
    """Some viewer is open. The frame asked for now comes after the crowd's next tick, when a viewer
    busy with the last frame (or paced and drawing it) has usually taken it: asking only when a viewer
    could take a frame at once, a frame just handed out never was, and viewers got every other tick's."""
    return any(not ws.closed for ws in world.viewers)


def broadcast(world: CrowdViewers, data: bytes, now: float | None = None) -> None:
    """Hand the frame to every viewer that took the previous one (and asked for one, if paced), without
    waiting for any of them: a slow reader skips frames instead of holding up the others, and one that
    could not take a frame for SLOW_VIEWER_S seconds is closed (code 1008). `now`: time.monotonic() s."""
    now = time.monotonic() if now is None else now
    for ws in list(world.viewers):
        if ws.closed:
            forget_viewer(world, ws)
            continue
        if not world.ready.get(ws, True):       # paced and has not asked: drawing the last frame still
            continue
        busy = world.sending.get(ws)
        if busy is not None and not busy.done():
            if now - world.stalled.setdefault(ws, now) > SLOW_VIEWER_S:
                log.warning("crowd viewer dropped: it took no frame for %.0f s", SLOW_VIEWER_S)
                busy.cancel()
                forget_viewer(world, ws)
                asyncio.ensure_future(ws.close(code=1008, message=b"too slow"))
            continue
        world.stalled.pop(ws, None)
        if ws in world.ready:
            world.ready[ws] = False
        world.sending[ws] = asyncio.ensure_future(_send(world, ws, data))


async def relay_frames(app) -> None:
    """The server's side of the crowd: hand the latest frame to the viewers, then ask the crowd process
    for the next tick with the users' positions. The loop wakes when the answer arrives (at most 1/60 s
    later): polling on its own 60 Hz clock instead, an answer that came just after a poll waited a whole
    period, and viewers got 26 frames a second of the crowd's 60. Costs the event loop a pipe message."""
    world = app[CROWD]
    proc = world.process
    loop = asyncio.get_running_loop()
    answered = asyncio.Event()
    loop.add_reader(proc.conn.fileno(), answered.set)
    try:
        while True:
            frame = proc.poll()
            if frame is not None:
                broadcast(world, frame)
            active = bool(world.viewers) or bool(app[STATE].sessions)
            proc.request(*_users(app), active, active and wants_frame(world))
            answered.clear()
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancel that comes as the
            # answer arrives, and the server's shutdown waited for this task for ever (a CI failure).
            try:
                async with asyncio.timeout(DT):
                    await answered.wait()
            except TimeoutError:
                pass
    finally:
        loop.remove_reader(proc.conn.fileno())


async def crowd_ws_handler(request: web.Request) -> web.StreamResponse:
    """A crowd viewer: gets frames (see the module docstring); the text "ready" asks for the next one."""
    if not origin_ok(request):
        return web.Response(status=403, text="cross-origin WebSocket refused\n")
    if CROWD not in request.app:
        raise web.HTTPNotFound(text="crowd mode is off (motionmatch serve --crowd N)\n")
    world = request.app[CROWD]
    ws = web.WebSocketResponse(max_msg_size=1024, heartbeat=30.0)
    await ws.prepare(request)
    world.viewers.add(ws)
    try:
        async for msg in ws:
            if msg.type == WSMsgType.ERROR:
                break
            if msg.type == WSMsgType.TEXT and msg.data == "ready":
                world.ready[ws] = True
    finally:
        forget_viewer(world, ws)
    return ws


def crowd_info(world: CrowdViewers, character: dict | None) -> dict:
    """GET /api/crowd: the crowd's skeleton, the body's retarget table (None: no body), the stream's
    size, the crowd process's tick figures and the bytes per second sent to viewers since the start."""
    info = world.process.info
    n, J = info["n"], len(info["names"])
    secs = max(1e-6, time.monotonic() - world.since)
    return {"n": n, "fps": round(1.0 / DT), "names": info["names"], "parents": info["parents"],
            "hips": info["hips"], "bytes_per_frame": bytes_per_frame(n, J),
            "character": None if character is None else {"url": "/api/crowd/body.glb", **character["retarget"]},
            **world.process.figures, "viewers": len(world.viewers), "frames_sent": world.frames_sent,
            "bytes_per_s": round(world.bytes_sent / secs)}


async def crowd_info_handler(request: web.Request) -> web.Response:
    if CROWD not in request.app:
        return web.json_response({"n": 0})
    return web.json_response(crowd_info(request.app[CROWD], request.app[STATE].backend.character))


async def crowd_body_handler(request: web.Request) -> web.Response:
    """The crowd's body: the default body's coarser copy, else the user's model."""
    c = request.app[STATE].backend.character
    if CROWD not in request.app or c is None:
        raise web.HTTPNotFound(text="no crowd body (crowd mode off, or no character body)\n")
    return web.Response(body=c.get("crowd_glb", c["glb"]), content_type="model/gltf-binary",
                        headers={"Cache-Control": "no-cache"})


def add_crowd_routes(app: web.Application) -> None:
    """/ws/crowd, /api/crowd and /api/crowd/body.glb (answering "no crowd" until setup_crowd is called)."""
    app.router.add_get("/ws/crowd", crowd_ws_handler)
    app.router.add_get("/api/crowd", crowd_info_handler)
    app.router.add_get("/api/crowd/body.glb", crowd_body_handler)


def setup_crowd(app: web.Application, db_path, n: int, seed: int = 0, slow_s: float = 0.0) -> None:
    """Turn crowd mode on: n agents over the database at `db_path`, in their own process (started
    here: it fails here, saying why) and the server's task that relays its frames. slow_s: seconds
    added to every crowd tick, a stand-in for a slower machine (tests)."""
    if not 1 <= n <= MAX_AGENTS:
        raise ValueError(f"--crowd: expected 1 to {MAX_AGENTS} agents, got {n}")
    app[CROWD] = CrowdViewers(process=CrowdProcess(db_path, n, seed, slow_s=slow_s))

    def report_failure(task):
        if not task.cancelled() and task.exception() is not None:
            log.error("crowd mode stopped", exc_info=task.exception())

    async def start(app):
        app[CROWD].since = time.monotonic()
        app[CROWD_TASK] = asyncio.create_task(relay_frames(app))
        app[CROWD_TASK].add_done_callback(report_failure)

    async def close_viewers(app):
        for ws in list(app[CROWD].viewers):
            await ws.close(code=1001, message=b"server shutdown")

    async def stop(app):
        if CROWD_TASK in app:
            app[CROWD_TASK].cancel()
            try:
                await app[CROWD_TASK]
            except (asyncio.CancelledError, RuntimeError):
                pass
        app[CROWD].process.close()

    app.on_startup.append(start)
    app.on_shutdown.append(close_viewers)
    app.on_cleanup.append(stop)
