"""Reading what a page uploads: the body within a size limit and a time limit, and the file name the
page gives (`?name=`), both refused with a 4xx that names the problem before anything is decoded.
"""
from __future__ import annotations

import asyncio

from aiohttp import web

from . import limits

MAX_NAME_CHARS = 80


async def read_body(request: web.Request, limit: int, timeout: float | None = None) -> bytes:
    """The whole request body, at most `limit` bytes (413 beyond, chunked uploads included) and within
    `timeout` seconds (default limits.BODY_TIMEOUT_S; 408: a client that trickles its body must not hold
    a handler forever)."""
    timeout = limits.BODY_TIMEOUT_S if timeout is None else timeout
    if request.content_length is not None and request.content_length > limit:
        raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=request.content_length)
    raw = bytearray()
    try:
        async with asyncio.timeout(timeout):
            while len(raw) <= limit:
                part = await request.content.read(limit + 1 - len(raw))
                if not part:
                    break
                raw += part
    except TimeoutError:
        raise web.HTTPRequestTimeout(text=f"the upload did not arrive within {timeout:g} s\n") from None
    if len(raw) > limit:
        raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=len(raw))
    return bytes(raw)


def upload_name(request: web.Request, default: str) -> str:
    """The `name` query parameter as a plain file name (its last path component, at most 80
    characters); 400 for control characters (a NUL cannot name a file)."""
    raw = request.query.get("name", "")
    if any(ord(c) < 32 or ord(c) == 127 for c in raw):
        raise web.HTTPBadRequest(text="name: control characters are not allowed in a file name\n")
    name = raw.replace("\\", "/").rsplit("/", 1)[-1][:MAX_NAME_CHARS]
    return name if name not in ("", ".", "..") else default
