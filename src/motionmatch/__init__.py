"""motionmatch: motion matching for responsive character animation.

Units: metres and seconds; Y up; quaternions (w, x, y, z).
"""
import hashlib
import os
import shutil
import sys
import time
from pathlib import Path

__version__ = "0.1.0"


def _use_source_keyed_numba_cache() -> None:
    """Put numba's on-disk cache in $XDG_CACHE_HOME/motionmatch/numba/<hash of this package's sources>.

    numba's `cache=True` notices when a compiled function's own file changes, not when a function it
    calls from another module does: after an upgrade or an edit of one runtime module, callers in other
    modules kept running stale machine code (wrong results; once a segfault). A folder per source hash
    makes any change start a clean cache. A NUMBA_CACHE_DIR the user set wins. Folders unused for a
    week are removed."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    here = Path(__file__).resolve().parent
    digest = hashlib.sha1(__version__.encode())
    for path in sorted(here.rglob("*.py")):
        digest.update(str(path.relative_to(here)).encode())
        digest.update(path.read_bytes())
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "motionmatch" / "numba"
    folder = base / digest.hexdigest()[:16]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        os.utime(folder)
        week_ago = time.time() - 7 * 24 * 3600
        for old in base.iterdir():
            if old != folder and old.is_dir() and old.stat().st_mtime < week_ago:
                shutil.rmtree(old, ignore_errors=True)
    except OSError:
        return          # no writable cache folder: numba keeps its default (next to the sources)
    os.environ["NUMBA_CACHE_DIR"] = str(folder)     # also for worker processes (Dask)
    if "numba" in sys.modules:                      # imported first: its config already read the environment
        sys.modules["numba"].config.CACHE_DIR = str(folder)


_use_source_keyed_numba_cache()

# OpenMP worker threads (numba's default threading layer here) spin while idle, taking the core from the
# thread they wait for when another process holds the other one: a 100-agent crowd tick took 100 ms
# instead of 1.4 ms with sleeping workers (runtime/threads.py). Read when libgomp loads, at the first
# parallel kernel; a value the user set wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
