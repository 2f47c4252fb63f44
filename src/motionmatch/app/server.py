"""The browser app's server: aiohttp, one simulated character per WebSocket connection (`motionmatch
serve`, cli/serve.py, loads a database and runs it here).

Each connection gets its own `Character`, stepped at a fixed 60 Hz by an asyncio task (at most
`MAX_CATCHUP` steps per wake-up; a longer stall drops time instead of fast-forwarding). After each tick
the server sends one binary frame:

    uint32 sequence | float32 simulation time (s) | uint32 L | float32 positions[J*3] | L bytes JSON debug
    | float32 local rotations[J*4]

positions are world joint positions in metres (Y up), J from the `hello` message; local rotations are
(w, x, y, z) relative to the parent joint (joint 0: in the world), for the skinned body. When the app has
a body (`hello.character`), its GLB is at /api/character.glb. Text messages in both
directions are JSON objects with a `type`; every client message is validated (see messages.SCHEMAS) and a
bad one gets an `error` reply and is dropped. Rewind is kept by the page (it stores the last 10 s of
frames); BVH recording and scenario playback run here, reached through `/api/session/<id>/...`.

The modules of the app: state.py (the state every part is handed: backend, sessions, allowed hosts),
backend.py (what a session simulates), messages.py (client message validation), session.py (one page's
character, input and tools), websocket.py (the 60 Hz loop and message handling), routes.py (HTTP),
hosts.py (Host and Origin checks), assets.py (static files, three.js), crowd_mode.py (with crowd_world.py,
crowd_process.py, crowd_stream.py) and vr.py (the modes).
"""
from __future__ import annotations

import asyncio
import errno
import logging
import socket
import sys

from aiohttp import web

from .assets import find_three
from .backend import Backend
from .crowd.mode import add_crowd_routes
from .hosts import guard, server_host_names
from .routes import MAX_SCENARIO_BYTES, MAX_TERRAIN_BYTES, add_routes
from . import limits
from .limits import MAX_SESSIONS, PORT_TRIES
from .state import STATE, AppState
from .vr import add_vr_routes
from .websocket import websocket_handler

log = logging.getLogger("motionmatch.app")



def make_app(backend: Backend, node_modules=None, host: str | None = None,
             max_sessions: int = MAX_SESSIONS) -> web.Application:
    """The aiohttp application: page, static files, /vendor/three, WebSocket and session API.
    host: the address bound (None: loopback only), which fixes the Host names accepted; max_sessions:
    pages connected at once (one more is told the server is full). Serve it with `app_runner`."""
    if not 1 <= max_sessions <= 10_000:
        raise ValueError(f"max_sessions: expected 1..10000, got {max_sessions}")
    app = web.Application(middlewares=[guard], client_max_size=max(MAX_SCENARIO_BYTES, MAX_TERRAIN_BYTES) + 1024)
    three = find_three(node_modules)
    app[STATE] = AppState(backend=backend, three_dir=three, allowed_hosts=server_host_names(host),
                          max_sessions=max_sessions)
    app.router.add_get("/ws", websocket_handler)
    add_routes(app, three)
    add_crowd_routes(app)
    add_vr_routes(app)

    async def close_sessions(app):
        for s in list(app[STATE].sessions.values()):
            await s.ws.close(code=1001, message=b"server shutdown")
    app.on_shutdown.append(close_sessions)
    return app


def app_runner(app: web.Application) -> web.AppRunner:
    """The runner to serve `app` with: a connection that has not sent a whole request's headers within
    HEADER_TIMEOUT_S (or idles that long between requests) is closed (aiohttp's default holds it for an
    hour, so a few thousand half-open requests would hold the server's sockets)."""
    return web.AppRunner(app, access_log=None, keepalive_timeout=limits.HEADER_TIMEOUT_S)


# ---------------------------------------------------------------------------------------------------
# CLI


def reachable_addresses(host: str) -> list[str]:
    """Addresses a browser can use for a server bound to `host` (a wildcard lists this machine's own)."""
    if host not in ("0.0.0.0", "", "::"):
        return [host]
    found = []
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            found.append(info[4][0])
    except OSError:
        pass
    try:
        # The address of the default route's interface (connecting a UDP socket sends nothing).
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))
            found.append(s.getsockname()[0])
    except OSError:
        pass
    out = ["127.0.0.1"]
    for a in found:
        if a not in out and not a.startswith("127."):
            out.append(a)
    return out


def announcement(host: str, port: int) -> tuple[list[str], str | None]:
    """What serve prints once listening: one URL per address a browser can use, and a warning when the
    app is reachable from other machines."""
    lines = [f"motionmatch: serving on http://{a}:{port}/  (Ctrl+C to stop)" for a in reachable_addresses(host)]
    local = host.startswith("127.") or host in ("localhost", "::1")
    warning = None if local else (
        f"motionmatch: warning: listening on {host or 'all interfaces'}: anyone who can reach this machine "
        f"can open the app (no authentication); use --host 127.0.0.1 to keep it local")
    return lines, warning


def run_app(app: web.Application, host: str, port: int) -> int:
    """Serve `app` on host:port (a busy port moves on to the next PORT_TRIES - 1) until Ctrl+C; prints the
    URLs (announcement). Returns the exit status."""
    async def main():
        runner = app_runner(app)
        await runner.setup()
        tries = 1 if port == 0 else PORT_TRIES
        for k in range(tries):
            site = web.TCPSite(runner, host, port + k if port else 0)
            try:
                await site.start()
                break
            except OSError as exc:
                if exc.errno not in (errno.EADDRINUSE, errno.EACCES) or k == tries - 1:
                    await runner.cleanup()
                    last = f"-{port + k}" if k else ""
                    raise SystemExit(f"motionmatch: cannot serve on {host}:{port}{last}: {exc.strerror}; "
                                     f"pick a free port with --port N (or PORT=N make demo)") from None
                print(f"motionmatch: port {port + k} is busy ({exc.strerror}); trying {port + k + 1}",
                      file=sys.stderr, flush=True)
        lines, warning = announcement(host, runner.addresses[0][1])     # the port bound (0: any free one)
        print("\n".join(lines), flush=True)
        if warning:
            print(warning, file=sys.stderr, flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0
