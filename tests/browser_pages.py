"""Helpers for the tests of pages in headless chromium (tests/browser/page_probe.mjs) and of the app's
server in a background thread."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiohttp import web

from motionmatch.app.assets import find_three

ROOT = Path(__file__).resolve().parents[1]
BROWSER = ROOT / "tests" / "browser"


def probe(config: dict, timeout_ms: int = 60000) -> dict:
    """Run page_probe.mjs with `config` (see the script) and return its report. Static pages get the
    routes /three/ (three.js) and /pages/ (tests/browser). Fails (never skips) when node, chromium or
    node_modules is missing."""
    node = shutil.which("node")
    chromium = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    three = find_three()
    pw = three.parent / "playwright-core" / "index.mjs" if three else None
    if not node or not os.path.exists(chromium) or pw is None or not pw.exists():
        pytest.fail("browser test needs node, chromium (`make browser-deps`) and `make node_modules`")
    config = {"timeout": timeout_ms, **config}
    if "routes" in config:
        config["routes"] = {"/three/": str(three), "/pages/": str(BROWSER), **{k: str(v) for k, v in config["routes"].items()}}
    out = subprocess.run([node, str(BROWSER / "page_probe.mjs"), json.dumps(config)], capture_output=True,
                         text=True, timeout=timeout_ms / 1000 + 60,
                         env={**os.environ, "CHROMIUM": chromium, "PLAYWRIGHT_CORE": str(pw)})
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert "failure" not in report, (report["failure"], report["console"][-10:], report["pageErrors"])
    assert not report["pageErrors"], report["pageErrors"]
    return report


def run_page(page: str, routes: dict[str, Path], **config) -> dict:
    """A static test page's window.testResult (which must not hold an `error`)."""
    result = probe({"page": page, "routes": routes, **config})["result"]
    assert "error" not in result, result["error"]
    return result


@contextmanager
def serving(app: web.Application):
    """Serve an aiohttp app on a free 127.0.0.1 port from a background thread; yields its base URL."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box = {}

    async def start():
        box["runner"] = web.AppRunner(app, access_log=None)
        await box["runner"].setup()
        site = web.TCPSite(box["runner"], "127.0.0.1", 0)
        await site.start()
        box["url"] = f"http://127.0.0.1:{box['runner'].addresses[0][1]}"     # the port bound

    def run():
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(30), "server did not start"
    try:
        yield box["url"]
    finally:
        asyncio.run_coroutine_threadsafe(box["runner"].cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
