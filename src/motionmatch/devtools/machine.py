"""The machine a benchmark runs on, for every `motionmatch bench ... --json` (issue 41): figures from two
machines (an EPYC without AVX-512 runs these benchmarks at about half the speed of one with it) are never
to be compared as if they came from one, and a figure taken at a load of 15 is not a quiet one.

`machine_info()` is called when a bench command starts (the load average is the one the run met, not the
one it left) and its dict is stored under the JSON's "machine" key.
"""
from __future__ import annotations

import os
import platform

# The vector instruction sets the compiled kernels may use, by the names Linux gives them in /proc/cpuinfo
# ("flags" on x86, "Features" on ARM, where "asimd" is 64-bit NEON).
SIMD_FLAGS = ("sse2", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512cd",
              "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "neon", "asimd",
              "asimdhp", "sve", "sve2")


def _cpuinfo(path: str = "/proc/cpuinfo") -> tuple[str | None, list[str]]:
    """(CPU model, its SIMD flags in SIMD_FLAGS order) from Linux's cpuinfo; (None, []) elsewhere."""
    model, flags = None, set()
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                if model is None and key in ("model name", "cpu model", "hardware"):
                    model = value.strip() or None
                elif key in ("flags", "features") and not flags:
                    flags = set(value.split())
    except OSError:
        return None, []
    return model, [f for f in SIMD_FLAGS if f in flags]


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def machine_info() -> dict:
    """The machine now: {"cpu_model": str, "cores": logical CPUs of the machine, "usable_cores": those this
    process may run on, "simd": [flags, SIMD_FLAGS order; "neon" added where the OS says "asimd"],
    "load_average": [1, 5, 15 minutes] (runnable processes; null where the OS has none), "system": OS and
    architecture, "python": version}."""
    model, simd = _cpuinfo()
    if "asimd" in simd and "neon" not in simd:
        simd.insert(simd.index("asimd"), "neon")
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        load = None
    return {"cpu_model": model or platform.processor() or platform.machine() or "unknown",
            "cores": os.cpu_count() or 1, "usable_cores": _usable_cores(), "simd": simd, "load_average": load,
            "system": f"{platform.system()} {platform.machine()}", "python": platform.python_version()}
