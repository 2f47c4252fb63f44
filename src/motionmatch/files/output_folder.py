"""Output folders that never look complete when they are not: a run writes into a hidden staging folder
inside the output folder and moves its files in only when every one is written.

A run killed while it computes leaves the folder's earlier outputs untouched beside a `.partial-*`
folder (its partial files, marked by the name); a run that fails (full disk, an error) removes its
staging folder. While the finished files move in (milliseconds), an INCOMPLETE file marks the folder.

A live run holds an exclusive lock (flock) on `.partial-*/.lock` for as long as its staging folder
exists; the kernel drops the lock when the process ends, however it ends (SIGKILL included), and the
lock holds across machines sharing the folder. So the next run into the same folder removes the
staging folders whose lock it can take (their run is gone) and never one a live run holds. A staging
folder with no lock file (a run killed in the microseconds between making the folder and locking it,
or one of a motionmatch before the lock) is removed once nothing in it changed for STALE_UNLOCKED_S.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

INCOMPLETE_MARKER = "INCOMPLETE"
STAGING_PREFIX = ".partial-"
LOCK_NAME = ".lock"
STALE_UNLOCKED_S = 3600.0     # s: a staging folder without a lock file untouched this long is a dead run's


@contextmanager
def staged_output(out, stale=()):
    """Yield a staging folder for a run's outputs; on success move them into `out`, first removing the
    files of an earlier run that match the globs `stale` (e.g. `agent_*.bvh`: a smaller crowd must not
    leave a larger one's agents behind). Staging folders of earlier runs that were killed are removed
    first (remove_dead_staging). Creating `out` in a read-only place raises OSError at once."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    remove_dead_staging(out)
    stage = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=out))
    lock = _hold_lock(stage)
    try:
        try:
            yield stage
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise
        marker = out / INCOMPLETE_MARKER
        marker.write_text("a run was moving its outputs into this folder; while this file exists they are a mix "
                          "of two runs\n")
        for pattern in stale:
            for f in out.glob(pattern):
                f.unlink()
        for f in sorted(stage.iterdir()):
            if f.name != LOCK_NAME:
                os.replace(f, out / f.name)
        (stage / LOCK_NAME).unlink()
        try:
            stage.rmdir()
        except FileNotFoundError:   # unlocked and empty for a moment: another run may have removed it
            pass
        marker.unlink()
    finally:
        os.close(lock)              # the lock goes with the descriptor


def _hold_lock(stage: Path) -> int:
    """Lock `stage` as this live run's: the lock file is made and locked under another name, then renamed
    into place (the lock follows the file), so `.lock` never exists unlocked while its run lives."""
    fresh = stage / (LOCK_NAME + ".new")
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.replace(fresh, stage / LOCK_NAME)
    except BaseException:
        os.close(fd)
        raise
    return fd


def remove_dead_staging(out) -> list[Path]:
    """Remove the staging folders (`.partial-*`) in `out` that no live run holds: a lock file nobody
    holds, or no lock file and nothing changed for STALE_UNLOCKED_S seconds. Returns the folders
    removed. Only folders of this module's kind are looked at (the name, then the lock)."""
    removed = []
    for stage in Path(out).glob(STAGING_PREFIX + "*"):
        if stage.is_symlink() or not stage.is_dir():
            continue
        if _dead(stage):
            _remove(stage)
            removed.append(stage)
    return removed


def _remove(stage: Path) -> None:
    """Remove a dead run's staging folder, its lock file last: a run killed while removing it leaves a
    folder still recognised by its free lock, so the run after it finishes the job."""
    for f in stage.iterdir():
        if f.name == LOCK_NAME:
            continue
        if f.is_dir() and not f.is_symlink():
            shutil.rmtree(f, ignore_errors=True)
        else:
            f.unlink(missing_ok=True)
    (stage / LOCK_NAME).unlink(missing_ok=True)
    try:
        stage.rmdir()
    except OSError:                 # another run removing it too, or a file it could not remove
        pass


def _dead(stage: Path) -> bool:
    try:
        fd = os.open(stage / LOCK_NAME, os.O_RDWR | os.O_NOFOLLOW)   # NFS locks want it writable
    except FileNotFoundError:
        return _untouched_for(stage, STALE_UNLOCKED_S)
    except OSError:             # not ours to judge (a link, no permission): leave it
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:             # held: its run is alive
        return False
    finally:
        os.close(fd)            # ours only for the question; removing the folder needs no lock
    return True


def _untouched_for(stage: Path, seconds: float) -> bool:
    """True when neither `stage` nor anything directly in it changed in the last `seconds`."""
    now = time.time()
    try:
        newest = max([stage.stat().st_mtime] + [f.stat().st_mtime for f in stage.iterdir()])
    except OSError:             # gone meanwhile (its run finished): nothing to remove
        return False
    return now - newest > seconds
