"""The example notebook (examples/motionmatch.ipynb) in a real JupyterLab: executed headless with nbclient
(every cell, no error), then opened in JupyterLab in headless chromium, run from the front end, and its two
widgets checked: both render the body, the played motion's frames advance, and the live character walks
while W is held. Needs the `notebook` extra (jupyterlab, ipykernel, nbclient pinned in pyproject.toml)."""
from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from motionmatch.app.assets import find_three

pytestmark = pytest.mark.slow         # starts JupyterLab and chromium: `make test`, not `make check`

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "motionmatch.ipynb"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("lab")
    shutil.copy(NOTEBOOK, d / NOTEBOOK.name)
    return d


def _jupyter_env(tmp: Path) -> dict:
    """Jupyter's config, data and runtime folders of its own (no user settings or workspaces leak in)."""
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp / "jcfg"), "JUPYTER_RUNTIME_DIR": str(tmp / "jrun"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "jws"), "JUPYTER_PLATFORM_DIRS": "1"}
    return env


def test_example_notebook_executes_headless(workdir):
    import nbclient
    import nbformat
    nb = nbformat.read(workdir / NOTEBOOK.name, as_version=4)
    nbclient.NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(workdir)}}).execute()
    assert (workdir / "out" / "walk" / "motion.bvh").is_file() and (workdir / "example.npz").is_file()
    views = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
             if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert len(views) == 2                       # the motion player and the live character


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_example_notebook_runs_in_jupyterlab_with_moving_widgets(workdir, tmp_path):
    node, chromium = shutil.which("node"), os.environ.get("CHROMIUM", "/usr/bin/chromium")
    three = find_three()
    pw = three.parent / "playwright-core" / "index.mjs" if three else None
    if not node or not os.path.exists(chromium) or pw is None or not pw.exists():
        pytest.fail("the JupyterLab test needs node, chromium (`make browser-deps`) and `make node_modules`")
    settings = tmp_path / "lab-settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    # Every cell rendered (no windowing): the widgets draw whether or not they are scrolled into view.
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    port, token = _free_port(), secrets.token_hex(16)
    log = tmp_path / "lab.log"
    with log.open("w") as out:
        lab = subprocess.Popen([sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", f"--port={port}",
                                "--ip=127.0.0.1", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={workdir}",
                                "--LabApp.expose_app_in_browser=True",
                                f"--LabApp.user_settings_dir={tmp_path / 'lab-settings'}"],
                               cwd=workdir, env=_jupyter_env(tmp_path), stdout=out, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5).read()
                break
            except OSError:
                assert lab.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(1)
        shot = tmp_path / "lab.png"
        config = {"url": f"{base}/lab/tree/{NOTEBOOK.name}?token={token}", "widgets": 2, "timeout": 900000,
                  "screenshot": str(shot)}
        run = subprocess.run([node, str(ROOT / "tests" / "browser" / "jupyterlab_test.mjs"), json.dumps(config)],
                             capture_output=True, text=True, timeout=1200,
                             env={**os.environ, "CHROMIUM": chromium, "PLAYWRIGHT_CORE": str(pw)})
        assert run.returncode == 0, run.stderr[-3000:]
        report = json.loads(run.stdout.strip().splitlines()[-1])
        assert "failure" not in report, (report["failure"], report.get("partial"), report["console"][-15:],
                                         log.read_text()[-2000:])
        assert not report["pageErrors"], report["pageErrors"]
        assert not report["cellErrors"], report["cellErrors"]
        first, second = report["first"], report["second"]
        modes = sorted(s["mode"] for s in second)
        assert modes == ["live", "motion"], modes
        for a, b in zip(first, second):
            assert b["loaded"] and not b["errors"], b
            assert b["frames"] > a["frames"], (a, b)       # frames advance: the motion plays, the live view steps
        live = [i for i, s in enumerate(report["afterWalk"]) if s["mode"] == "live"][0]
        z0, z1 = report["beforeWalk"][live]["root"][2], report["afterWalk"][live]["root"][2]
        assert z1 - z0 > 0.5, (z0, z1, report["walk_s"])  # held W (up to 30 s): the live character walked forward (+z)
    finally:
        lab.terminate()
        try:
            lab.wait(30)
        except subprocess.TimeoutExpired:
            lab.kill()
