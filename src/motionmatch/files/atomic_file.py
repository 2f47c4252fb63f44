"""Outputs that are either the old file or a whole new one: write beside the target, then rename.

A build, a training run or a settings save killed at any moment (or failing on a full disk) leaves the
earlier file untouched and no temporary file behind, except after SIGKILL, where the temporary file is
named `.NAME.PID.tmp` (hidden, never mistaken for an output) and the next write of the same target
from any process removes stale ones.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path


def temporary_name(path: Path) -> Path:
    """The temporary file of `path` for this process (unique per process: writers may share a folder)."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _remove_stale(path: Path) -> None:
    for old in path.parent.glob(f".{path.name}.*.tmp"):
        try:
            pid = int(old.name[len(path.name) + 2:-4])
        except ValueError:
            continue
        if pid != os.getpid() and not _alive(pid):
            old.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def replacing(path, mode: str = "wb"):
    """Open a temporary file beside `path` (mode "wb" or "w"); when the block ends normally it replaces
    `path` atomically (os.replace on one file system), on any exception it is removed and `path` keeps
    its earlier content."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(path)
    tmp = temporary_name(path)
    try:
        with open(tmp, mode) as f:
            yield f
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
