"""Packaging: the wheel carries the page's three.js, so `pip install motionmatch-*.whl && motionmatch serve`
works without node or npm. The wheel is built from this checkout (no build isolation: the pinned build
tools come with the test extras), installed with --no-deps into a fresh venv whose dependencies are the
project venv's site-packages listed in a .pth file (its own site-packages come first, so `motionmatch`
is the wheel's), and its app served from a folder without node_modules."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import time
import urllib.request
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_serves_page_and_three_without_npm(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", str(dist), str(ROOT)],
                   check=True, capture_output=True, cwd=ROOT)
    (wheel,) = dist.glob("motionmatch-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "motionmatch/app/vendor/three/build/three.module.js" in names
    assert "motionmatch/app/vendor/three/examples/jsm/loaders/GLTFLoader.js" in names
    assert not any("node_modules" in n for n in names)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "project-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site),
                    str(wheel)], check=True, capture_output=True)
    py = venv / "bin" / "python"
    where = subprocess.run([py, "-c", "import motionmatch; print(motionmatch.__file__)"], capture_output=True,
                           text=True, check=True, cwd=tmp_path).stdout
    assert where.startswith(str(site)), where

    # The installed package's app (page, static files, three.js) behind a character-less backend: the
    # runtime's first JIT compilation in a fresh install takes a minute, and the runtime is tested elsewhere.
    script = (
        "import asyncio\n"
        "from aiohttp import web\n"
        "from motionmatch.app.backend import Backend\n"
        "from motionmatch.app.server import make_app\n"
        "async def main():\n"
        "    runner = web.AppRunner(make_app(Backend(new_character=None, make_input=None)))\n"
        "    await runner.setup()\n"
        "    site = web.TCPSite(runner, '127.0.0.1', 0)\n"
        "    await site.start()\n"
        "    print('serving on http://127.0.0.1:%d/' % site._server.sockets[0].getsockname()[1], flush=True)\n"
        "    await asyncio.Event().wait()\n"
        "asyncio.run(main())\n")
    env = {k: v for k, v in os.environ.items() if k != "MOTIONMATCH_NODE_MODULES"}
    proc = subprocess.Popen([py, "-c", script], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        url = None
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
            m = re.search(r"serving on (http://\S+)/", line)
            url = m.group(1) if m else None
        assert url, f"server did not start (exit {proc.poll()})"
        page = urllib.request.urlopen(url + "/").read().decode()
        assert "importmap" in page and "/vendor/three/build/three.module.js" in page
        for path in ("/vendor/three/build/three.module.js", "/vendor/three/build/three.core.js",
                     "/vendor/three/examples/jsm/loaders/GLTFLoader.js", "/static/skinned.js"):
            with urllib.request.urlopen(url + path) as r:
                assert r.status == 200 and "javascript" in r.headers["Content-Type"], path
        status = json.loads(urllib.request.urlopen(url + "/api/status").read())
        assert status["three"] is True
    finally:
        proc.terminate()
        proc.wait(10)
