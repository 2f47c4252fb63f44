"""Packaging: the wheel carries the page's three.js, so `pip install motionmatch-*.whl && motionmatch serve`
works without node or npm. The wheel is built from this checkout (no build isolation: the pinned build
tools come with the test extras), installed with --no-deps into a fresh venv whose dependencies are the
project venv's site-packages listed in a .pth file (its own site-packages come first, so `motionmatch`
is the wheel's), and its app served from a folder without node_modules. Then the wheel alone demos: in an
empty folder, `motionmatch --version`, and `motionmatch demo --data MOCAP` builds the default database into
a fresh cache, serves, and the page draws in chromium."""
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

import numpy as np
import pytest

pytestmark = pytest.mark.slow         # builds and installs a wheel: `make test`, not `make check`

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(wheel, venv python, venv site-packages, venv bin): the wheel installed alone into a fresh venv."""
    tmp = tmp_path_factory.mktemp("wheel")
    dist = tmp / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", str(dist), str(ROOT)],
                   check=True, capture_output=True, cwd=ROOT)
    (wheel,) = dist.glob("motionmatch-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    # pip --python: the venv's own interpreter in the console script's first line. The dependencies are
    # linked in afterwards, so pip sees an empty environment.
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True)
    (site / "project-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return wheel, venv / "bin" / "python", site, venv / "bin"


def test_wheel_serves_page_and_three_without_npm(installed, tmp_path):
    wheel, py, site, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    assert "motionmatch/app/vendor/three/build/three.module.js" in names
    assert "motionmatch/app/vendor/three/examples/jsm/loaders/GLTFLoader.js" in names
    assert not any("node_modules" in n for n in names)

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


def test_wheel_alone_demos_in_an_empty_folder(installed, tmp_path):
    from browser_pages import probe
    _, py, site, bin_dir = installed
    empty = tmp_path / "empty"
    empty.mkdir()
    mocap = Path(os.environ.get("MOTIONMATCH_DATA", ROOT.parent / "shared" / "mocap"))
    assert mocap.is_dir(), f"test data missing: {mocap}"
    # No checkout, no node_modules, a cache of its own: what a pip user has.
    env = {k: v for k, v in os.environ.items() if k not in ("MOTIONMATCH_NODE_MODULES", "MOTIONMATCH_DATA")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    version = subprocess.run([bin_dir / "motionmatch", "--version"], capture_output=True, text=True, check=True,
                             cwd=empty, env=env).stdout
    import motionmatch
    assert version.strip() == f"motionmatch {motionmatch.__version__}"
    log = tmp_path / "demo.log"
    with log.open("w") as out:
        proc = subprocess.Popen([bin_dir / "motionmatch", "demo", "--data", str(mocap), "--port", "0"], cwd=empty,
                                env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        url = None
        deadline = time.monotonic() + 1200      # a fresh cache: database build and numba's first compilation
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            m = re.search(r"(http://127\.0\.0\.1:\d+)", log.read_text())
            url = m.group(1) if m else None
            time.sleep(1)
        assert url, f"demo did not serve (exit {proc.poll()}):\n{log.read_text()[-3000:]}"
        assert (tmp_path / "cache" / "motionmatch" / "mixed-locomotion.npz").is_file()
        assert not any(empty.iterdir()), "the demo wrote into the working folder"
        shot = tmp_path / "page.png"
        report = probe({"url": url + "/", "screenshot": str(shot), "waitFor":
                        "window.motionmatch && window.motionmatch.connected && window.motionmatch.framesReceived > 60",
                        "result": "({frames: window.motionmatch.framesReceived, fps: window.motionmatch.fps, "
                                  "names: window.motionmatch.names.length})"}, timeout_ms=180000)
        assert report["result"]["frames"] > 60 and report["result"]["fps"] > 0 and report["result"]["names"] > 10
        from skimage.io import imread
        img = imread(shot)[..., :3]
        assert len(np.unique(img.reshape(-1, 3), axis=0)) > 200     # a drawn scene, not an empty page
    finally:
        proc.terminate()
        proc.wait(30)
