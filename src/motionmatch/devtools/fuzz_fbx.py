"""Hostile-input campaign for FBX clip files (`build FILE.fbx`, `convert`): damaged copies of a
Blender-made FBX read through io/fbx.py, whose Blender child process must end every one with an
FBXError naming the file (never a traceback, a hang or a sample beyond the bounds). Needs the Blender
environment (`make blender`); `motionmatch bench fuzz` reports the door as not run without it.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .fuzz import Outcome, classify
from ..io.fbx import FBXError, read_fbx_clips


def damaged_fbx(base: bytes, out_dir, flips: int = 4, seed: int = 0) -> list[tuple[str, Path, bool]]:
    """(name, path, must_refuse) for damaged copies of the binary FBX `base`: truncations, a header with
    nothing after it, random bytes behind the header, ASCII, empty, and seeded byte flips (which may
    leave a readable file)."""
    rng = np.random.default_rng(seed)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    head = base[:27]
    cases = [("truncated to half", base[:len(base) // 2], True), ("truncated to 10 %", base[:len(base) // 10], True),
             ("header only", head, True), ("header and noise", head + rng.bytes(20_000), True),
             ("ASCII FBX", b"; FBX 7.4.0 project file\nFBXHeaderExtension:  {\n}\n", True), ("empty", b"", True)]
    for k in range(flips):
        b = bytearray(base)
        at = rng.integers(27, len(b), 64)
        b_arr = np.frombuffer(bytes(b), np.uint8).copy()
        b_arr[at] ^= rng.integers(1, 256, 64).astype(np.uint8)
        cases.append((f"64 bytes flipped ({k})", b_arr.tobytes(), False))
    out = []
    for k, (name, data, refuse) in enumerate(cases):
        f = out_dir / f"damaged_{k:02d}.fbx"
        f.write_bytes(data)
        out.append((name, f, refuse))
    return out


def fuzz_fbx_clips(damaged) -> Outcome:
    """Each damaged FBX through read_fbx_clips: an FBXError naming the file, or clips (a flip that left
    the file readable)."""
    out = Outcome()
    for name, f, refuse in damaged:
        classify(out, name, f, refuse, (FBXError,), lambda: read_fbx_clips(f))
    for path in ("/dev/zero", str(Path(damaged[0][1]).parent)):
        classify(out, path, path, True, (FBXError,), lambda: read_fbx_clips(path))
    return out
