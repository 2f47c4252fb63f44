"""Where the page's files are: the static folder of this package and three.js (node_modules, or the copy
an installed wheel carries).
"""
from __future__ import annotations

import os
from pathlib import Path

STATIC_DIR = Path(__file__).resolve().parent / "static"
VENDOR_DIR = Path(__file__).resolve().parent / "vendor"      # three.js inside a wheel (setup.py)
PROJECT_ROOT = Path(__file__).resolve().parents[3]


def find_three(node_modules: str | os.PathLike | None = None) -> Path | None:
    """node_modules/three from the argument, $MOTIONMATCH_NODE_MODULES, the project root or the cwd, else
    the copy an installed wheel carries (motionmatch/app/vendor/three, made by the build hook in setup.py)."""
    candidates = [node_modules, os.environ.get("MOTIONMATCH_NODE_MODULES"), PROJECT_ROOT / "node_modules",
                  Path.cwd() / "node_modules", VENDOR_DIR]
    for c in candidates:
        if c and (Path(c) / "three" / "build" / "three.module.js").is_file():
            return (Path(c) / "three").resolve()
    return None
