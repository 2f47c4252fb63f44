"""Run a static test page in headless chromium (tests/browser/static_page.mjs): three.js from node_modules,
test files from local folders, no server. Used by the glTF, skinned-body and notebook-widget tests."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from motionmatch.app.server import find_three

ROOT = Path(__file__).resolve().parents[1]
BROWSER = ROOT / "tests" / "browser"


def run_page(page: str, routes: dict[str, Path], timeout_ms: int = 60000, screenshot: Path | None = None) -> dict:
    """Open `page` (a path under one of the route prefixes) and return window.testResult; /three/ is
    three.js, /pages/ is tests/browser. Fails (never skips) when node, chromium or node_modules is missing."""
    node = shutil.which("node")
    chromium = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    three = find_three()
    pw = three.parent / "playwright-core" / "index.mjs" if three else None
    if not node or not os.path.exists(chromium) or pw is None or not pw.exists():
        pytest.fail("browser test needs node, chromium (`make browser-deps`) and `make node_modules`")
    config = {"routes": {"/three/": str(three), "/pages/": str(BROWSER), **{k: str(v) for k, v in routes.items()}},
              "page": page, "timeout": timeout_ms}
    if screenshot:
        config["screenshot"] = str(screenshot)
    out = subprocess.run([node, str(BROWSER / "static_page.mjs"), json.dumps(config)], capture_output=True,
                         text=True, timeout=timeout_ms / 1000 + 60,
                         env={**os.environ, "CHROMIUM": chromium, "PLAYWRIGHT_CORE": str(pw)})
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert "failure" not in report, (report["failure"], report["console"], report["pageErrors"])
    assert not report["pageErrors"], report["pageErrors"]
    result = report["result"]
    assert "error" not in result, result["error"]
    return result
