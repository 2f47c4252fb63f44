"""The page's WebSocket (`/ws`): one Session per connection, stepped at a fixed 60 Hz by its own asyncio
task, client messages validated and applied, feature weights applied off the event loop.
"""
from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from typing import Awaitable, Callable

from aiohttp import WSMsgType, web

from .hosts import origin_ok
from .memory import release_free_memory
from .messages import MessageError, parse_message, session_schemas
from .session import RATE_PER_S, Session
from .limits import DT, MAX_CATCHUP
from .state import STATE

log = logging.getLogger("motionmatch.app")

MAX_FRAME_BYTES = 64 * 1024     # beyond this aiohttp closes the connection (code 1009)
SERVER_FULL_CLOSE_CODE = 1013   # WebSocket "try again later": max_sessions pages are connected
WEIGHTS_INTERVAL_S = 0.25       # a session's weight changes apply at most this often (latest values win)
RELEASE_DELAY_S = 1.0           # a closed session's memory goes back to the system this long after it closed

Handler = Callable[[Session, dict], "dict | None | Awaitable[dict | None]"]


async def _send_json(ws: web.WebSocketResponse, obj: dict) -> None:
    if not ws.closed:
        try:
            await ws.send_str(json.dumps(obj, separators=(",", ":")))
        except (ConnectionError, RuntimeError):
            pass


async def _simulate(session: Session) -> None:
    """Fixed-step 60 Hz loop for one session; sends one frame per wake-up that stepped."""
    loop = asyncio.get_running_loop()
    ws = session.ws
    next_t = loop.time()
    while not ws.closed:
        now = loop.time()
        steps = 0
        while now >= next_t and steps < MAX_CATCHUP:
            if not session.paused and not session.busy:
                session.safe_step()
            next_t += DT
            steps += 1
        if now >= next_t:           # too far behind: drop the backlog rather than fast-forward
            next_t = now + DT
        while session.pending:
            await _send_json(ws, session.pending.pop(0))
        if session.fatal:
            await ws.close()
            return
        if steps and not session.paused and not session.busy and not ws.closed:
            try:
                data = session.frame_bytes()
            except Exception as exc:  # e.g. a debug value that cannot be encoded
                session.recover(f"frame encoding error ({type(exc).__name__})")
                data = None
            if data is not None:
                try:
                    await ws.send_bytes(data)
                except (ConnectionError, RuntimeError):
                    return
                session.bytes_sent += len(data)
                session.frames_sent += 1
        await asyncio.sleep(max(0.0, next_t - loop.time()))


async def websocket_handler(request: web.Request) -> web.StreamResponse:
    app = request.app
    if not origin_ok(request):
        return web.Response(status=403, text="cross-origin WebSocket refused\n")
    ws = web.WebSocketResponse(max_msg_size=MAX_FRAME_BYTES, heartbeat=30.0)
    state = app[STATE]
    if len(state.sessions) + state.opening >= state.max_sessions:
        # Accepted only to say why: a browser cannot read the body of a refused handshake.
        await ws.prepare(request)
        await _send_json(ws, {"type": "error", "fatal": True, "full": True, "message":
                              f"the server is full ({state.max_sessions} pages connected, its limit: "
                              f"serve --max-sessions); try again later"})
        await ws.close(code=SERVER_FULL_CLOSE_CODE, message=b"server full")
        return ws
    await ws.prepare(request)
    backend = state.backend
    state.opening += 1
    try:
        character = await asyncio.get_running_loop().run_in_executor(None, backend.new_character)
    except Exception as exc:  # a broken database must not take the server down
        log.exception("could not create a character")
        await _send_json(ws, {"type": "error", "fatal": True, "message": f"could not create a character: {exc}"})
        await ws.close()
        return ws
    finally:
        state.opening -= 1
    sid = secrets.token_urlsafe(12)
    session = Session(sid, ws, character, backend)
    state.sessions[sid] = session
    log.info("session %s opened (%d active)", sid, len(state.sessions))
    await _send_json(ws, session.hello())
    task = asyncio.create_task(_simulate(session))
    handlers = {**HANDLERS, **{kind: handler for kind, (_, handler) in backend.messages.items()}}
    schemas = session_schemas(character.channel_names, backend.messages)
    try:
        async for msg in ws:
            if msg.type == WSMsgType.ERROR:
                break
            if msg.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                continue
            if not session.allow_message():
                now = time.monotonic()
                if now - session.last_rate_warning > 1.0:
                    session.last_rate_warning = now
                    await _send_json(ws, {"type": "warning", "message":
                                          f"more than {RATE_PER_S:.0f} messages/s: dropping "
                                          f"({session.dropped} dropped so far)"})
                continue
            try:
                # The door: every field is checked here, once; the handlers take the fields as they are.
                kind, fields = parse_message(msg.data if msg.type == WSMsgType.TEXT else bytes(msg.data), schemas)
                reply = handlers[kind](session, fields)
                if isinstance(reply, asyncio.Future):
                    reply = await reply
            except MessageError as exc:
                reply = {"type": "error", "message": str(exc)}
            except Exception as exc:  # a bug in one session's character must not stop the others
                log.warning("session %s: message failed: %s: %s", sid, type(exc).__name__, exc)
                reply = {"type": "error", "message": f"internal error: {type(exc).__name__}"}
            if reply is not None:
                await _send_json(ws, reply)
            if task.done():
                break
    finally:
        if session.weights_task is not None:
            session.weights_task.cancel()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("session %s: simulation failed", sid)
        state.sessions.pop(sid, None)
        session.close()
        if not ws.closed:
            await ws.close()
        _release_soon(state)
        secs = max(1e-6, time.monotonic() - session.started)
        log.info("session %s closed after %.1f s: %d frames, %.1f kB/s, step %.0f us (%d active)", sid, secs,
                 session.frames_sent, session.bytes_sent / secs / 1e3, session.step_us, len(state.sessions))
    return ws


def _release_soon(state) -> None:
    """Hand the memory of closed sessions back to the system (app/memory.py) RELEASE_DELAY_S from now,
    off the event loop, once this handler and the requests still holding the session are gone; the
    sessions closing meanwhile share that one call."""
    if state.release is not None:
        return
    loop = asyncio.get_running_loop()

    def release():
        state.release = None
        loop.run_in_executor(None, release_free_memory)
    state.release = loop.call_later(RELEASE_DELAY_S, release)


def _off_loop(handler: Callable[[Session, dict], dict | None]) -> Handler:
    """`handler` run on the executor's threads, its reply awaited while the session's frames stream on."""
    def run(session: Session, fields: dict) -> asyncio.Future:
        return asyncio.get_running_loop().run_in_executor(None, handler, session, fields)
    return run


def _settings(session: Session, fields: dict) -> dict | None:
    """Settings apply at once, but feature weights through queue_weights: the settings reply then comes
    once the weights are applied, with every field."""
    if "weights" not in fields:
        return session.on_settings(fields)
    weights = fields.pop("weights")
    if fields:
        session.on_settings(fields)
    queue_weights(session, weights)
    return None


# Every client message type (messages.SCHEMAS) -> its handler(session, fields): the reply, None, or a
# Future of the reply. A mode's own types (Backend.messages) join these per connection.
HANDLERS: dict[str, Handler] = {
    "input": Session.on_input,
    "settings": _settings,
    "reset": Session.on_reset,
    "pause": Session.on_pause,
    "record": Session.on_record,
    "scenario_stop": Session.on_scenario_stop,
    "ping": Session.on_ping,
    "debug": Session.on_debug,
    "inspect": _off_loop(Session.on_inspect),     # ranks the whole database: off the loop that streams frames
    "play_clip": Session.on_play_clip,
    "terrain": Session.on_terrain,
    "action": Session.on_action,
    "search_set": Session.on_search_set,
}


def queue_weights(session: Session, weights: dict) -> None:
    """Feature weights apply off the event loop (a new weight set normalizes the features and builds
    an index: milliseconds to seconds on big databases) and at most every WEIGHTS_INTERVAL_S; values
    arriving meanwhile coalesce, the latest winning. The settings reply follows the application."""
    session.weights_pending.update(weights)
    if session.weights_task is None or session.weights_task.done():
        session.weights_task = asyncio.create_task(_apply_weights(session))


async def _apply_weights(session: Session) -> None:
    loop = asyncio.get_running_loop()
    while session.weights_pending and not session.ws.closed:
        weights, session.weights_pending = session.weights_pending, {}
        started = loop.time()
        session.busy = True
        try:
            await loop.run_in_executor(None, session.apply_settings, {"weights": weights})
            reply = {"type": "settings", "settings": session.settings_dict()}
        except MessageError as exc:
            reply = {"type": "error", "message": str(exc)}
        except Exception as exc:
            log.warning("session %s: weights failed: %s: %s", session.id, type(exc).__name__, exc)
            reply = {"type": "error", "message": f"weights could not be applied ({type(exc).__name__})"}
        finally:
            session.busy = False
        await _send_json(session.ws, reply)
        await asyncio.sleep(max(0.0, WEIGHTS_INTERVAL_S - (loop.time() - started)))
