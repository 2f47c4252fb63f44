"""The app's test harness: a server on its own event loop thread, a WebSocket client, the browser scripts
(tests/browser, run by node with Debian chromium), shared by the app, hostile-input and runtime tests."""
from __future__ import annotations

import asyncio
import inspect
import json
import os
import types
import typing
import shutil
import subprocess
import threading
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from motionmatch.app import assets
from motionmatch.app import backend as app_backend
from motionmatch.app import session as app_session
from motionmatch.posedb import database

def database_path():
    return os.environ.get("MOTIONMATCH_TEST_DB") or database.build_default_database(progress=False)


def default_backend() -> app_backend.Backend:
    return app_backend.runtime_backend(database.load_database(database_path()))


class ServerThread:
    """An aiohttp app served from its own event loop thread."""

    def __init__(self, app: web.Application):
        self.app, self.loop, self.url = app, asyncio.new_event_loop(), None
        ready = threading.Event()

        async def start():
            self.runner = web.AppRunner(app, access_log=None)
            await self.runner.setup()
            site = web.TCPSite(self.runner, "127.0.0.1", 0)
            await site.start()
            self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"

        def run():
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(start())
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert ready.wait(30), "server did not start"

    def stop(self):
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

def protocol_mismatches(obj, protocol) -> list[str]:
    """How `obj` falls short of the typing.Protocol `protocol` (empty: it implements it): a member it
    lacks, a value (attribute or property) not of the annotated type, or a method that refuses a call the
    protocol allows (positional, by keyword, with the required arguments only)."""
    out = [] if isinstance(obj, protocol) else [f"not an instance of {protocol.__name__}"]
    hints = typing.get_type_hints(protocol)
    for name, member in vars(protocol).items():
        if name.startswith("_") and name not in hints:
            continue
        if not hasattr(obj, name):
            out.append(f"{name}: missing")
        elif isinstance(member, property):
            out += _type_mismatch(name, getattr(obj, name), typing.get_type_hints(member.fget).get("return"))
        elif inspect.isfunction(member):
            out += _signature_mismatch(name, inspect.signature(member), getattr(obj, name))
    for name in hints.keys() - vars(protocol).keys():
        out += [f"{name}: missing"] if not hasattr(obj, name) else _type_mismatch(name, getattr(obj, name), hints[name])
    return out


def _type_mismatch(name, value, hint) -> list[str]:
    if hint is None:
        return []
    origin = typing.get_origin(hint)
    kinds = tuple(typing.get_origin(a) or a for a in typing.get_args(hint)) if origin in (typing.Union, types.UnionType) \
        else (origin or hint,)
    return [] if isinstance(value, kinds) else [f"{name}: {type(value).__name__} is not {hint}"]


def _signature_mismatch(name, wanted: inspect.Signature, method) -> list[str]:
    params = [p for p in wanted.parameters.values() if p.name != "self"]
    have = inspect.signature(method)
    calls = {"positional": ([0] * len(params), {}), "keywords": ([], {p.name: 0 for p in params}),
             "required only": ([0] * sum(p.default is p.empty for p in params), {})}
    out = []
    for how, (args, kwargs) in calls.items():
        try:
            have.bind(*args, **kwargs)
        except TypeError as exc:
            out.append(f"{name}{have} refuses the protocol's {how} call ({exc})")
    return out


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


class Client:
    """A WebSocket client that sorts what arrives into text messages and binary frames."""

    def __init__(self, ws):
        self.ws, self.texts, self.frames = ws, [], []

    @classmethod
    async def open(cls, session, url):
        c = cls(await session.ws_connect(url.replace("http", "ws") + "/ws", max_msg_size=0))
        hello = await c.next_text("hello")
        c.hello = hello
        return c

    async def pump(self, seconds: float):
        """Receive for a while (the server streams 60 frames/s)."""
        await self._receive(seconds, lambda: False)

    async def pump_frames(self, n: int, timeout: float = 20.0):
        """Receive until n more frames came (a loaded machine streams slower than 60 frames/s)."""
        want = len(self.frames) + n
        await self._receive(timeout, lambda: len(self.frames) >= want)

    async def _receive(self, seconds: float, done):
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while not done() and (left := end - loop.time()) > 0:
            try:
                msg = await asyncio.wait_for(self.ws.receive(), left)
            except asyncio.TimeoutError:
                break
            if not self._keep(msg):
                break

    def _keep(self, msg) -> bool:
        if msg.type == aiohttp.WSMsgType.TEXT:
            self.texts.append(json.loads(msg.data))
        elif msg.type == aiohttp.WSMsgType.BINARY:
            self.frames.append(msg.data)
        else:
            return False
        return True

    async def next_text(self, kind: str, timeout: float = 10.0) -> dict:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while True:
            for i, t in enumerate(self.texts):
                if t["type"] == kind:
                    return self.texts.pop(i)
            msg = await asyncio.wait_for(self.ws.receive(), max(0.01, end - loop.time()))
            if not self._keep(msg):
                raise AssertionError(f"connection closed waiting for {kind!r}: {msg}")

    def debug(self, frame: bytes) -> dict:
        J = len(self.hello["names"])
        _, _, n = app_session.FRAME_HEADER.unpack_from(frame)
        start = app_session.FRAME_HEADER.size + 12 * J
        return json.loads(frame[start:start + n])


# --------------------------------------------------------------------------------------------------
# Messages



def browser_tools():
    node = shutil.which("node")
    chromium = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    nm = assets.find_three()
    pw = nm.parent / "playwright-core" / "index.mjs" if nm else None
    missing = [what for what, ok in (("node", node), (f"chromium ({chromium}; `make browser-deps`)",
               os.path.exists(chromium)), ("node_modules with three and playwright-core (`make node_modules`)",
               pw is not None and pw.exists())) if not ok]
    return node, chromium, pw, missing


def run_browser_script(script: Path, url: str, out_dir: Path, timeout: float = 240) -> dict:
    """Run a tests/browser script on the page at `url`; its JSON report (no failure in it)."""
    node, chromium, pw, missing = browser_tools()
    if missing:
        pytest.fail("browser test needs " + ", ".join(missing) + " (make test installs them)")
    env = {**os.environ, "CHROMIUM": chromium, "PLAYWRIGHT_CORE": str(pw)}
    out = subprocess.run([node, str(script), url, str(out_dir)], capture_output=True, text=True, timeout=timeout,
                         env=env)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert "failure" not in report, report["failure"]
    return report
