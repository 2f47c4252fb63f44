"""The app's shared state, held in the aiohttp application under `STATE` and passed to whoever needs it
(HTTP handlers, the WebSocket loop, crowd and VR modes), and the fixed simulation step they share.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from .backend import Backend

DT = 1.0 / 60.0                 # s: every session and the crowd step at 60 Hz
MAX_CATCHUP = 4                 # fixed steps per wake-up before dropping time
# Every session steps its character on the one event loop thread; past this many the pages already
# connected lose their 60 fps on a 2-core machine (measured with `motionmatch bench serve`, docs/ROBUSTNESS.md).
MAX_SESSIONS = 20      # measured: 20 pages keep 60 fps on a 2-core machine, 32 do not (docs/ROBUSTNESS.md)
# A connection must deliver a request's headers (and be idle between requests) within this many seconds;
# upload bodies must arrive within BODY_TIMEOUT_S. Half-open requests are dropped, not held.
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0


@dataclass
class AppState:
    """backend: what sessions simulate; sessions: the open sessions by id (app.session.Session);
    three_dir: node_modules/three or None; allowed_hosts: the Host names the server answers to;
    max_sessions: how many pages may be connected at once (opening: those being set up)."""

    backend: Backend
    three_dir: Path | None
    allowed_hosts: frozenset
    sessions: dict = field(default_factory=dict)
    max_sessions: int = MAX_SESSIONS
    opening: int = 0


STATE = web.AppKey("state", AppState)
