"""Memory a closed session freed, handed back to the system.

Nothing of a session stays allocated once its page leaves (tests/app/test_app_limits.py: no object of
it is left, the Python heap does not grow from visit to visit), yet the server's resident memory rose by
tens of kB a visit: glibc's malloc keeps freed memory in its heaps. The executor threads that build
characters and downloads allocate in arenas of their own, the event loop frees there, and after the
first large block is freed malloc raises its mmap threshold, so even a recording's one-minute blocks
come from those heaps; pages once written stay resident while free. malloc_trim(0) gives every free
page of every arena back (madvise), so the server's memory follows what its sessions hold. With a C
library that has no malloc_trim (not glibc) this does nothing.
"""
from __future__ import annotations

import ctypes


def _malloc_trim():
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return None


_TRIM = _malloc_trim()


def release_free_memory() -> bool:
    """Return the C heap's free pages to the system (glibc's malloc_trim(0)); False where there is no
    such call. Takes milliseconds on the server's heap: call it off the event loop."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True
