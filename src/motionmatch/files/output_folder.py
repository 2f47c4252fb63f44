"""Output folders that never look complete when they are not: a run writes into a hidden staging folder
inside the output folder and moves its files in only when every one is written.

A run killed while it computes leaves the folder's earlier outputs untouched beside a `.partial-*`
folder (its partial files, marked by the name); a run that fails (full disk, an error) removes its
staging folder. While the finished files move in (milliseconds), an INCOMPLETE file marks the folder.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

INCOMPLETE_MARKER = "INCOMPLETE"


@contextmanager
def staged_output(out, stale=()):
    """Yield a staging folder for a run's outputs; on success move them into `out`, first removing the
    files of an earlier run that match the globs `stale` (e.g. `agent_*.bvh`: a smaller crowd must not
    leave a larger one's agents behind). Creating `out` in a read-only place raises OSError at once."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".partial-", dir=out))
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    marker = out / INCOMPLETE_MARKER
    marker.write_text("a run was moving its outputs into this folder; while this file exists they are a mix of "
                      "two runs\n")
    for pattern in stale:
        for f in out.glob(pattern):
            f.unlink()
    for f in sorted(stage.iterdir()):
        os.replace(f, out / f.name)
    stage.rmdir()
    marker.unlink()
