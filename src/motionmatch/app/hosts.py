"""Which requests the server answers: the Host names it serves under (DNS rebinding) and the Origins
whose pages may open its WebSockets (cross-site WebSocket hijacking), applied by the `guard` middleware.
"""
from __future__ import annotations

import socket
from urllib.parse import urlsplit

from aiohttp import web

from .state import STATE

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
MAX_PATH_CHARS = 1024           # longer request paths are not ours: 404 without touching the file system


def _host_name(netloc: str) -> str:
    """'Name:port' or '[v6]:port' -> lower-case name without port or brackets."""
    netloc = netloc.strip().lower()
    if netloc.startswith("["):
        return netloc[1:].split("]", 1)[0]
    return netloc.rsplit(":", 1)[0] if netloc.count(":") == 1 else netloc


def server_host_names(bind_host: str | None) -> frozenset:
    """Names this server answers to: loopback, the bound address and, when bound to every interface,
    the machine's host names and addresses. A Host header outside them is DNS rebinding."""
    names = set(LOOPBACK_NAMES)
    if bind_host in (None, "", "0.0.0.0", "::"):
        if bind_host is not None:
            hostname = socket.gethostname()
            names |= {hostname.lower(), socket.getfqdn().lower()}
            try:
                names |= {info[4][0].lower() for info in socket.getaddrinfo(hostname, None)}
            except OSError:
                pass
    else:
        names.add(_host_name(bind_host))
    return frozenset(names)


def _host_ok(request: web.Request) -> bool:
    return _host_name(request.host or "") in request.app[STATE].allowed_hosts


def origin_ok(request: web.Request) -> bool:
    """Refuse pages from other sites (cross-site WebSocket hijacking): the Origin must be this very
    server (http scheme, same host and port as the request, a name the server answers to); tools
    without Origin pass."""
    origin = request.headers.get("Origin")
    if not origin:
        return True
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    return (parts.scheme == "http" and parts.netloc.lower() == (request.host or "").lower()
            and _host_name(parts.netloc) in request.app[STATE].allowed_hosts)


@web.middleware
async def guard(request: web.Request, handler):
    """Unknown Host names refused, over-long paths not found, every answer marked nosniff."""
    if not _host_ok(request):
        # DNS rebinding: a page of another site reaching this server under its own name.
        return web.Response(status=403, text="unknown Host: this server answers only to its own names\n")
    if len(request.path) > MAX_PATH_CHARS:
        raise web.HTTPNotFound()
    try:
        resp = await handler(request)
    except OSError:  # a static path the file system refuses (name too long, ...): no such file
        raise web.HTTPNotFound() from None
    resp.headers.setdefault("X-Content-Type-Options", "nosniff")
    return resp
