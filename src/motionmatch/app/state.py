"""The app's shared state, held in the aiohttp application under `STATE` and passed to whoever needs it
(HTTP handlers, the WebSocket loop, crowd and VR modes), and the fixed simulation step they share.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from .backend import Backend

from .limits import MAX_SESSIONS


@dataclass
class AppState:
    """backend: what sessions simulate; sessions: the open sessions by id (app.session.Session);
    three_dir: node_modules/three or None; allowed_hosts: the Host names the server answers to;
    max_sessions: how many pages may be connected at once (opening: those being set up); release: the
    pending hand-back of closed sessions' memory (websocket._release_soon), None when none is pending."""

    backend: Backend
    three_dir: Path | None
    allowed_hosts: frozenset
    sessions: dict = field(default_factory=dict)
    max_sessions: int = MAX_SESSIONS
    opening: int = 0
    release: asyncio.TimerHandle | None = None


STATE = web.AppKey("state", AppState)
