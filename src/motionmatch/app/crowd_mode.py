"""The app's crowd mode (`motionmatch serve --crowd N`): N agents roam with random goals around the
users' characters. One shared task steps the whole crowd once per 60 Hz tick, whoever watches, and
sends every viewer the same compact binary frame on `/ws/crowd`:

    uint32 sequence | float32 time (s) | uint16 n | uint16 J | float32 roots[n*3] | int16 offsets[n*J*3]

roots are the agents' root positions (metres, world, Y up); offsets are each joint minus its agent's root
in millimetres (int16: +-32 m at 1 mm steps, finer than anything visible on screen), half the bytes of
float32 positions. `GET /api/crowd` gives {"n", "fps", "names", "parents", "bytes_per_frame"} ({"n": 0}
without crowd mode, so the page can ask without an error).

Agents avoid each other and the users' characters (local avoidance, avoidance.py); users are not steered.
"""
from __future__ import annotations

import asyncio
import logging
import math
import struct
import time
from dataclasses import dataclass

import numpy as np
from aiohttp import WSMsgType, web

from ..avoidance import AvoidanceState, avoid
from ..crowd_synth import AgentSpec, DriverState, drive, driver_state, stick_to_velocity, velocity_to_stick
from ..runtime.controller import ControllerSettings
from .hosts import origin_ok
from .state import DT, MAX_CATCHUP, STATE

log = logging.getLogger("motionmatch.app")

CROWD_HEADER = struct.Struct("<IfHH")
MAX_AGENTS = 2000
RUN_FRACTION = 0.2           # of new goals reached running
MAX_WAIT = 2.0               # s an arrived agent waits before its next goal (uniform 0..MAX_WAIT)
SLOW_VIEWER_S = 10.0         # s a viewer may stay unable to take a frame before it is closed
USER_REACH = 1000.0          # m: users farther from the origin (or not finite) are left out of avoidance
# An agent that has not come PROGRESS_M closer to its goal for STALL_S gives it up and picks another:
# a goal another agent (or a user) stands on is never reached within crowd_synth.ARRIVE_DISTANCE, so
# without this the agent stands there for good (its wait for a new goal starts only on arrival).
STALL_S = 3.0
PROGRESS_M = 0.25


@dataclass
class CrowdWorld:
    """The shared crowd: the runtime Crowd, roaming goals and avoidance state, viewers and the latest frame."""
    crowd: object
    drivers: DriverState
    avoidance: AvoidanceState
    controller: ControllerSettings
    half_size: float             # m: goals are drawn in [-half_size, half_size]^2
    wait: np.ndarray             # (n,) s left before an arrived agent gets a new goal
    best: np.ndarray             # (n,) m: the closest each came to its current goal (within PROGRESS_M)
    stall_s: np.ndarray          # (n,) s since that distance last shrank by PROGRESS_M
    rng: np.random.Generator
    names: list
    parents: list
    seq: int = 0
    time: float = 0.0
    step_us: float = 0.0
    viewers: set | None = None
    sending: dict | None = None      # viewer -> the task sending it its latest frame
    stalled: dict | None = None      # viewer -> time.monotonic() when it first could not take a frame


def crowd_world(db, n: int, seed: int = 0) -> CrowdWorld:
    """n roaming agents on a jittered grid around (not on) the origin, where users' characters start."""
    from ..runtime.crowd import Crowd

    rng = np.random.default_rng(seed)
    half = max(6.0, 1.5 * math.sqrt(n))
    side = math.ceil(math.sqrt(n + 9))
    cells = (np.stack(np.meshgrid(np.arange(side), np.arange(side)), -1).reshape(-1, 2) + 0.5) / side
    spots = (cells * 2.0 - 1.0) * half
    spots = spots[np.linalg.norm(spots, axis=1) > 2.0]
    spots = spots[rng.permutation(len(spots))[:n]] + rng.uniform(-0.2, 0.2, (n, 2)) * half / side
    goals = rng.uniform(-half, half, (n, 2))
    agents = [AgentSpec(start=tuple(p), goal=tuple(g), run=bool(rng.random() < RUN_FRACTION)) for p, g in zip(spots, goals)]
    cs = ControllerSettings()
    crowd = Crowd(db, n, controller_settings=cs)
    for i, a in enumerate(agents):
        crowd.reset_agent(i, (a.start[0], 0.0, a.start[1]), float(rng.uniform(-math.pi, math.pi)))
    return CrowdWorld(crowd=crowd, drivers=driver_state(agents), avoidance=AvoidanceState.zeros(n), controller=cs,
                      half_size=half, wait=rng.uniform(0.0, MAX_WAIT, n), best=np.full(n, np.inf),
                      stall_s=np.zeros(n), rng=rng, names=list(db.skeleton.names),
                      parents=[int(p) for p in db.skeleton.parents], viewers=set(), sending={}, stalled={})


def step_world(world: CrowdWorld, users_xz: np.ndarray, users_vel: np.ndarray, dt: float = DT) -> None:
    """One tick: new goals for agents that waited long enough or made no progress for STALL_S, drivers, avoidance (of each other and of
    the users at (u, 2) positions moving at (u, 2) m/s), then one Crowd.step for all agents."""
    c, d, cs = world.crowd, world.drivers, world.controller
    n = c.n
    sim = c.sim_positions
    world.wait[d.arrived] -= dt
    dist = np.linalg.norm(d.goals - sim[:, [0, 2]], axis=1)
    closer = dist < world.best - PROGRESS_M
    world.best[closer] = dist[closer]
    world.stall_s[closer | d.arrived] = 0.0
    world.stall_s[~closer & ~d.arrived] += dt
    renew = (d.arrived & (world.wait <= 0.0)) | (world.stall_s > STALL_S)
    if renew.any():
        k = int(renew.sum())
        world.wait[renew] = world.rng.uniform(0.0, MAX_WAIT, k)
        d.goals[renew] = world.rng.uniform(-world.half_size, world.half_size, (k, 2))
        d.goal_run[renew] = world.rng.random(k) < RUN_FRACTION
        d.arrived[renew] = False
        world.best[renew] = np.inf
        world.stall_s[renew] = 0.0
    move, run, strafe, look = drive(d, world.time, sim, cs)
    # Users count as neighbours moving at their own velocity; their rows of the answer are dropped.
    pos = np.vstack([sim[:, [0, 2]], users_xz])
    vel = np.vstack([c.sim_velocities[:, [0, 2]], users_vel])
    pref = np.vstack([stick_to_velocity(move, run, cs), users_vel])
    top = np.concatenate([np.where(run, cs.run_forward_speed, cs.walk_forward_speed),
                          np.maximum(np.linalg.norm(users_vel, axis=1), 0.1)])
    state = AvoidanceState(np.vstack([world.avoidance.chosen, users_vel]))
    chosen = avoid(state, pos, vel, pref, top)[:n]
    world.avoidance.chosen[:] = chosen
    c.step(velocity_to_stick(chosen, run, cs), run, strafe, look, dt)
    world.time += dt
    world.seq += 1


def frame_bytes(world: CrowdWorld) -> bytes:
    """The current poses of all agents in the stream format of the module docstring."""
    c = world.crowd
    roots = np.asarray(c.root_positions, dtype=np.float32)
    offsets = (np.asarray(c.global_positions, dtype=np.float32) - roots[:, None, :]) * 1000.0
    offsets = np.nan_to_num(np.rint(offsets), nan=0.0, posinf=0.0, neginf=0.0)
    q = np.clip(offsets, -32767, 32767).astype("<i2")
    n, J = q.shape[:2]
    return CROWD_HEADER.pack(world.seq, world.time, n, J) + roots.astype("<f4").tobytes() + q.tobytes()


def bytes_per_frame(n: int, joints: int) -> int:
    return CROWD_HEADER.size + 12 * n + 6 * n * joints


# ---------------------------------------------------------------------------------------------------
# aiohttp wiring

CROWD = web.AppKey("crowd", CrowdWorld)
CROWD_TASK = web.AppKey("crowd_task", asyncio.Task)


def users_near(positions: np.ndarray, velocities: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The users (rows of (u, 2) ground positions in m and velocities in m/s) the crowd should avoid:
    finite and within USER_REACH of the origin. One page driving its character to 1e30 m (a hostile
    tracker message) must not turn the shared avoidance step into infinities for every viewer."""
    keep = (np.isfinite(positions).all(axis=1) & np.isfinite(velocities).all(axis=1)
            & (np.abs(positions).max(axis=1, initial=0.0) <= USER_REACH)
            & (np.abs(velocities).max(axis=1, initial=0.0) <= USER_REACH))
    return positions[keep], velocities[keep]


def _users(app) -> tuple[np.ndarray, np.ndarray]:
    """Ground positions and velocities (u, 2) of the connected users' characters (their roots)."""
    pos, vel = [], []
    for s in app[STATE].sessions.values():
        p, v = getattr(s.ch, "root_pos", None), getattr(s.ch, "root_velocity", None)
        if p is not None and v is not None:
            pos.append((p[0], p[2]))
            vel.append((v[0], v[2]))
    return users_near(np.array(pos, dtype=np.float64).reshape(-1, 2), np.array(vel, dtype=np.float64).reshape(-1, 2))


async def _send(world: CrowdWorld, ws, data: bytes) -> None:
    try:
        await ws.send_bytes(data)
    except (ConnectionError, RuntimeError):
        forget_viewer(world, ws)


def forget_viewer(world: CrowdWorld, ws) -> None:
    world.viewers.discard(ws)
    world.sending.pop(ws, None)
    world.stalled.pop(ws, None)


def broadcast(world: CrowdWorld, data: bytes, now: float | None = None) -> None:
    """Hand the frame to every viewer that took the previous one, without waiting for any of them: a
    slow reader skips frames instead of holding up the others, and one that could not take a frame
    for SLOW_VIEWER_S seconds is closed (code 1008). `now` is time.monotonic() seconds."""
    now = time.monotonic() if now is None else now
    for ws in list(world.viewers):
        if ws.closed:
            forget_viewer(world, ws)
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
        world.sending[ws] = asyncio.ensure_future(_send(world, ws, data))


async def _run_world(app) -> None:
    """The shared fixed-step loop: steps while anyone is connected (a page or a crowd viewer)."""
    world = app[CROWD]
    loop = asyncio.get_running_loop()
    next_t = loop.time()
    while True:
        now = loop.time()
        steps = 0
        active = bool(world.viewers) or bool(app[STATE].sessions)
        while now >= next_t and steps < MAX_CATCHUP:
            if active:
                t0 = time.perf_counter()
                step_world(world, *_users(app))
                us = (time.perf_counter() - t0) * 1e6
                world.step_us = us if world.seq <= 1 else 0.95 * world.step_us + 0.05 * us
            next_t += DT
            steps += 1
        if now >= next_t:
            next_t = now + DT
        if steps and active and world.viewers:
            broadcast(world, frame_bytes(world))
        await asyncio.sleep(max(0.0, next_t - loop.time()))


async def crowd_ws_handler(request: web.Request) -> web.StreamResponse:
    """A crowd viewer: receives every tick's frame; what it sends is ignored."""
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
    finally:
        forget_viewer(world, ws)
    return ws


async def crowd_info_handler(request: web.Request) -> web.Response:
    if CROWD not in request.app:
        return web.json_response({"n": 0})
    w = request.app[CROWD]
    J = len(w.names)
    return web.json_response({"n": w.crowd.n, "fps": round(1.0 / DT), "names": w.names, "parents": w.parents,
                              "bytes_per_frame": bytes_per_frame(w.crowd.n, J), "step_us": round(w.step_us, 1)})


def add_crowd_routes(app: web.Application) -> None:
    """/ws/crowd and /api/crowd (answering "no crowd" until setup_crowd is called)."""
    app.router.add_get("/ws/crowd", crowd_ws_handler)
    app.router.add_get("/api/crowd", crowd_info_handler)


def warm_up_world(db, n: int, ticks: int = 3) -> None:
    """Compile (or load from numba's cache) the kernels a crowd of n uses (serial or parallel stages,
    avoidance, the stream) on a throw-away world: the shared tick runs on the event loop, where a
    first-tick compilation would stall every page for seconds."""
    world = crowd_world(db, n)
    none = np.zeros((0, 2))
    for _ in range(ticks):
        step_world(world, none, none)
    frame_bytes(world)


def setup_crowd(app: web.Application, db, n: int, seed: int = 0) -> None:
    """Turn crowd mode on: n agents over `db` and the shared task that steps them."""
    if not 1 <= n <= MAX_AGENTS:
        raise ValueError(f"--crowd: expected 1 to {MAX_AGENTS} agents, got {n}")
    warm_up_world(db, n)
    app[CROWD] = crowd_world(db, n, seed)

    def report_failure(task):
        if not task.cancelled() and task.exception() is not None:
            log.error("crowd mode stopped", exc_info=task.exception())

    async def start(app):
        app[CROWD_TASK] = asyncio.create_task(_run_world(app))
        app[CROWD_TASK].add_done_callback(report_failure)

    async def close_viewers(app):
        for ws in list(app[CROWD].viewers):
            await ws.close(code=1001, message=b"server shutdown")

    async def stop(app):
        app[CROWD_TASK].cancel()
        try:
            await app[CROWD_TASK]
        except asyncio.CancelledError:
            pass

    app.on_startup.append(start)
    app.on_shutdown.append(close_viewers)
    app.on_cleanup.append(stop)
