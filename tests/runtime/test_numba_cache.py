"""numba's compiled-code cache lives in a folder keyed by the package's sources (motionmatch/__init__.py):
a change in any module, even one only called from another module's kernels, starts a clean cache."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import motionmatch

PROBE = ("import os, motionmatch.maths.springs as s; s.decay_exact(1.0, 0.1, 20.0, 1 / 60); "
         "print(os.environ['NUMBA_CACHE_DIR'])")


def _run(package_parent: Path, cache_home: Path, **env) -> Path:
    e = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    e.update(PYTHONPATH=str(package_parent), XDG_CACHE_HOME=str(cache_home), **env)
    out = subprocess.run([sys.executable, "-c", PROBE], env=e, capture_output=True, text=True, check=True)
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_cache_folder_follows_the_sources(tmp_path):
    pkg = tmp_path / "src"
    shutil.copytree(Path(motionmatch.__file__).parent, pkg / "motionmatch",
                    ignore=shutil.ignore_patterns("__pycache__", "static", "node_modules"))
    home = tmp_path / "cache"
    first = _run(pkg, home)
    assert first.parent == home / "motionmatch" / "numba"
    assert list(first.rglob("*.nbi")), "the kernel's cache index is written into the keyed folder"
    assert _run(pkg, home) == first                     # same sources, same folder (the cache is reused)
    warping = pkg / "motionmatch" / "runtime" / "warping.py"
    warping.write_text(warping.read_text() + "\n# edited\n")
    assert _run(pkg, home) != first                     # any module edited: a new folder
    assert _run(pkg, home, NUMBA_CACHE_DIR=str(tmp_path / "mine")) == tmp_path / "mine"   # the user's wins
