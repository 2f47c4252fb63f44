"""BVH reading and writing.

Reads any rotation channel order, 3 or 6 (or any mix of) channels per joint, End Sites, tabs and CRLF,
and `.bvh.gz`. Rotation channels are intrinsic Euler angles in the order listed (the first channel is
the outermost rotation), as BVH intends. Lengths are converted to metres: the unit is detected from
the skeleton's size (a human measured in centimetres is far taller than 10 units) or given.

Every malformed input raises BVHError with the file and line. The motion block is parsed in one C-speed
pass (np.fromstring); only when that fails is it re-read line by line to say where and why.
"""
from __future__ import annotations

import gzip
import io
import math
import os
import re
import zlib
from pathlib import Path

import numba
import numpy as np

from ..motion.animation import Animation, Skeleton
from ..maths.rotations import quat_to_euler

POSITION_CHANNELS = ("Xposition", "Yposition", "Zposition")
ROTATION_CHANNELS = ("Xrotation", "Yrotation", "Zrotation")
_ALL_CHANNELS = {c.lower(): c for c in POSITION_CHANNELS + ROTATION_CHANNELS}
_UNITS = {"m": 1.0, "metre": 1.0, "metres": 1.0, "meter": 1.0, "meters": 1.0,
          "cm": 0.01, "centimetres": 0.01, "centimeters": 0.01, "mm": 0.001, "millimetres": 0.001,
          "millimeters": 0.001, "in": 0.0254, "inch": 0.0254, "inches": 0.0254}
_END = -2  # stack marker for an End Site block
# Sanity bounds: a value beyond them is a damaged file, not a capture (lengths in metres).
MAX_LENGTH_M = 1e5
MAX_ANGLE_DEG = 1e6
MAX_FPS = 1000.0
MAX_FRAME_TIME_S = 60.0


class BVHError(ValueError):
    """A BVH file that cannot be read; the message names the file and line."""

    def __init__(self, path, line, message):
        self.path, self.line = str(path), line
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"{where}: {message}")


def _open_text(path) -> str:
    path = Path(path)
    raw = path.read_bytes()
    if path.suffix == ".gz" or raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise BVHError(path, None, f"cannot decompress: {e}") from None
    text = raw.decode("utf-8", errors="replace")
    return text[1:] if text.startswith("\ufeff") else text  # a UTF-8 byte-order mark


def _unit_scale(unit, offsets: np.ndarray, parents: np.ndarray) -> float:
    """Factor from file units to metres."""
    if isinstance(unit, (int, float)) and not isinstance(unit, bool):
        if not np.isfinite(unit) or unit <= 0:
            raise ValueError(f"unit factor must be a positive number, got {unit!r}")
        return float(unit)
    if isinstance(unit, str) and unit.lower() in _UNITS:
        return _UNITS[unit.lower()]
    if unit not in (None, "auto"):
        raise ValueError(f"unknown unit {unit!r}: use 'auto', 'm', 'cm', 'mm' or a number (file units to metres)")
    # Rest-pose extent of the skeleton: a human is ~1.5-2 in metres, ~150-200 in cm, ~1500-2000 in mm.
    pos = np.zeros_like(offsets)
    for j, p in enumerate(parents):
        pos[j] = offsets[j] + (pos[p] if p >= 0 else 0.0)
    extent = float(np.max(pos.max(0) - pos.min(0))) if len(pos) else 0.0
    if extent > 600.0:
        return 0.001
    return 0.01 if extent > 10.0 else 1.0


def _parse_hierarchy(lines: list[str], path):
    """HIERARCHY lines (1-based numbering from the file start) -> names, parents, offsets, the line of
    each joint's OFFSET, channels and end sites."""
    names: list[str] = []
    name_set: set[str] = set()     # duplicate check in constant time: files with 40k joints exist
    parents: list[int] = []
    offsets: list[list[float] | None] = []
    channels: list[tuple[str, ...]] = []
    end_sites: dict[int, np.ndarray] = {}
    decl_line: list[int] = []
    offset_lines: list[int] = []
    stack: list[int] = []          # open blocks: joint index or _END
    pending: int | None = None     # block declared, its '{' not yet seen
    pending_line = 0
    root_closed = False
    saw_hierarchy = False

    for lineno, line in enumerate(lines, start=1):
        toks = line.split()
        if not toks:
            continue
        key = toks[0]
        if pending is not None and key != "{":
            raise BVHError(path, lineno, f"expected '{{' after line {pending_line}, got {key!r}")
        if key == "HIERARCHY":
            if saw_hierarchy or names:
                raise BVHError(path, lineno, "second HIERARCHY keyword")
            saw_hierarchy = True
        elif key in ("ROOT", "JOINT"):
            if not saw_hierarchy:
                raise BVHError(path, lineno, f"{key} before HIERARCHY")
            if len(toks) < 2:
                raise BVHError(path, lineno, f"{key} without a name")
            if key == "ROOT" and (names or stack):
                raise BVHError(path, lineno, "more than one ROOT is not supported")
            if key == "JOINT" and not stack:
                raise BVHError(path, lineno, "JOINT outside the ROOT's braces")
            if root_closed:
                raise BVHError(path, lineno, "joint after the ROOT block closed")
            if stack and stack[-1] == _END:
                raise BVHError(path, lineno, "JOINT inside an End Site")
            name = " ".join(toks[1:])
            if name in name_set:
                raise BVHError(path, lineno, f"duplicate joint name {name!r}")
            names.append(name)
            name_set.add(name)
            parents.append(stack[-1] if stack else -1)
            offsets.append(None)
            offset_lines.append(lineno)
            channels.append(())
            decl_line.append(lineno)
            pending, pending_line = len(names) - 1, lineno
        elif key == "End":
            if len(toks) != 2 or toks[1] != "Site":
                raise BVHError(path, lineno, f"expected 'End Site', got {line.strip()!r}")
            if not stack or stack[-1] == _END:
                raise BVHError(path, lineno, "End Site outside a joint")
            pending, pending_line = _END, lineno
        elif key == "{":
            if pending is None or len(toks) != 1:
                raise BVHError(path, lineno, "unexpected '{'")
            stack.append(pending)
            pending = None
        elif key == "}":
            if not stack or len(toks) != 1:
                raise BVHError(path, lineno, "unbalanced '}'")
            top = stack.pop()
            if top == _END:
                if stack[-1] not in end_sites:
                    raise BVHError(path, lineno, "End Site without an OFFSET")
            elif offsets[top] is None:
                raise BVHError(path, lineno, f"joint {names[top]!r} (line {decl_line[top]}) has no OFFSET")
            if not stack:
                root_closed = True
        elif key == "OFFSET":
            if not stack:
                raise BVHError(path, lineno, "OFFSET outside a joint")
            if len(toks) != 4:
                raise BVHError(path, lineno, f"OFFSET needs three numbers: {line.strip()!r}")
            try:
                vals = [float(v) for v in toks[1:4]]
            except ValueError:
                raise BVHError(path, lineno, f"non-numeric OFFSET: {line.strip()!r}") from None
            if not all(map(math.isfinite, vals)):
                raise BVHError(path, lineno, f"non-finite OFFSET: {line.strip()!r}")
            if max(map(abs, vals)) > MAX_LENGTH_M * 1000.0:  # the bound in metres is checked after units
                raise BVHError(path, lineno, f"OFFSET beyond {MAX_LENGTH_M:g} m: {line.strip()!r}")
            if stack[-1] == _END:
                end_sites[stack[-2]] = np.array(vals)
            else:
                offsets[stack[-1]] = vals
                offset_lines[stack[-1]] = lineno
        elif key == "CHANNELS":
            if not stack or stack[-1] == _END:
                raise BVHError(path, lineno, "CHANNELS outside a joint")
            try:
                n = int(toks[1])
            except (IndexError, ValueError):
                raise BVHError(path, lineno, "CHANNELS needs a count") from None
            chans = toks[2:]
            if len(chans) != n:
                raise BVHError(path, lineno, f"CHANNELS says {n} but lists {len(chans)}")
            fixed = []
            for c in chans:
                if c.lower() not in _ALL_CHANNELS:
                    raise BVHError(path, lineno, f"unknown channel name {c!r} (expected X/Y/Z position/rotation)")
                fixed.append(_ALL_CHANNELS[c.lower()])
            if len(set(fixed)) != len(fixed):
                raise BVHError(path, lineno, f"repeated channel in {' '.join(chans)}")
            channels[stack[-1]] = tuple(fixed)
        else:
            raise BVHError(path, lineno, f"unexpected keyword {key!r} in HIERARCHY")
    last = len(lines) + 1  # the MOTION line
    if not saw_hierarchy:
        raise BVHError(path, 1, "file does not start with HIERARCHY")
    if not names:
        raise BVHError(path, last, "HIERARCHY has no ROOT joint")
    if pending is not None:
        raise BVHError(path, last, f"block declared on line {pending_line} never opened with '{{'")
    if stack:
        raise BVHError(path, last, f"HIERARCHY ends with {len(stack)} unclosed '{{'")
    return names, parents, offsets, offset_lines, channels, end_sites


@numba.njit(cache=True)
def _euler_kernel(data, joints, cols, axes, rot):
    """rot[:, joints[i]] = quaternion of intrinsic Euler angles (degrees) data[:, cols[i, 0..2]] about
    axes[i, 0..2] (0=X, 1=Y, 2=Z), first axis outermost; a column of -1 is a zero angle."""
    F = data.shape[0]
    half = np.pi / 360.0
    for f in range(F):
        for i in range(joints.size):
            w, x, y, z = 1.0, 0.0, 0.0, 0.0
            for a in range(3):
                c = cols[i, a]
                if c < 0:
                    continue
                t = data[f, c] * half
                cw, sv = np.cos(t), np.sin(t)
                # q * (cw, sv * e_axis): right-multiplying makes later channels inner rotations.
                if axes[i, a] == 0:
                    w, x, y, z = w * cw - x * sv, x * cw + w * sv, y * cw + z * sv, z * cw - y * sv
                elif axes[i, a] == 1:
                    w, x, y, z = w * cw - y * sv, x * cw - z * sv, y * cw + w * sv, z * cw + x * sv
                else:
                    w, x, y, z = w * cw - z * sv, x * cw + y * sv, y * cw - x * sv, z * cw + w * sv
            j = joints[i]
            rot[f, j, 0] = w
            rot[f, j, 1] = x
            rot[f, j, 2] = y
            rot[f, j, 3] = z


_POW10 = np.array([10.0 ** k for k in range(23)])


@numba.njit(cache=True, inline="always")
def _scan_digits(buf, i, n, mant, ndig, exp10, fraction):
    """Digits from buf[i]: up to 18 significant ones go into mant; the decimal exponent counts the
    integer digits dropped, or the fraction digits kept. Returns (i, mant, ndig, exp10, any digit)."""
    seen = False
    while i < n and buf[i] >= 48 and buf[i] <= 57:
        seen = True
        if ndig < 18:
            if mant != 0 or buf[i] != 48:
                mant = mant * 10 + (buf[i] - 48)
                ndig += 1
            if fraction:
                exp10 -= 1
        elif not fraction:
            exp10 += 1
        i += 1
    return i, mant, ndig, exp10, seen


@numba.njit(cache=True)
def _scan_floats(buf, out, pow10, per_line):
    """Parse whitespace-separated decimal numbers from ASCII bytes into out, `per_line` on every
    non-empty line.

    Returns the count parsed, or -1 at the first token that is not a plain decimal number (nan, inf,
    commas, ...), -2 when there are more numbers than out holds and -3 at a line with another count
    (8 and 10 values on two lines would otherwise shift columns unnoticed); the caller then re-reads
    slowly to say where. Mantissas of up to 15 digits with |exponent| <= 22 are exact (correctly
    rounded), which covers everything BVH writers print.
    """
    n = buf.size
    i = 0
    k = 0
    on_line = 0
    while True:
        while i < n and (buf[i] == 32 or (buf[i] >= 9 and buf[i] <= 13)):
            if buf[i] == 10:
                if on_line != 0 and on_line != per_line:
                    return -3
                on_line = 0
            i += 1
        if i >= n:
            if on_line != 0 and on_line != per_line:
                return -3
            return k
        neg = False
        if buf[i] == 45 or buf[i] == 43:  # - +
            neg = buf[i] == 45
            i += 1
        # ndig: significant digits kept in mant
        i, mant, ndig, exp10, seen = _scan_digits(buf, i, n, 0, 0, 0, False)
        if i < n and buf[i] == 46:  # .
            i, mant, ndig, exp10, seen_frac = _scan_digits(buf, i + 1, n, mant, ndig, exp10, True)
            seen = seen or seen_frac
        if not seen:
            return -1
        if i < n and (buf[i] == 101 or buf[i] == 69):  # e E
            i += 1
            eneg = False
            if i < n and (buf[i] == 45 or buf[i] == 43):
                eneg = buf[i] == 45
                i += 1
            if i >= n or buf[i] < 48 or buf[i] > 57:
                return -1
            e = 0
            while i < n and buf[i] >= 48 and buf[i] <= 57:
                if e < 100000:
                    e = e * 10 + (buf[i] - 48)
                i += 1
            exp10 += -e if eneg else e
        if i < n and not (buf[i] == 32 or (buf[i] >= 9 and buf[i] <= 13)):
            return -1
        if k >= out.size:
            return -2
        if mant == 0:
            v = 0.0
        elif ndig <= 15 and exp10 >= -22 and exp10 <= 22:
            v = float(mant) * pow10[exp10] if exp10 >= 0 else float(mant) / pow10[-exp10]
        else:
            v = float(mant) * 10.0 ** exp10
        out[k] = -v if neg else v
        k += 1
        on_line += 1


def _next_line(text: str, pos: int) -> tuple[str, int]:
    end = text.find("\n", pos)
    if end < 0:
        return text[pos:], len(text)
    return text[pos:end], end + 1


def parse_bvh_text(text: str, path="<string>", unit="auto") -> Animation:
    """Parse BVH text into an Animation (metres, local quaternions w,x,y,z).

    unit: 'auto' (detect from the skeleton size), 'm', 'cm', 'mm' or a factor from file units to metres.
    """
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    m = re.search(r"^[ \t]*MOTION[ \t]*$", text, flags=re.M)
    if m is None:
        if not text.strip():
            raise BVHError(path, 1, "empty file")
        raise BVHError(path, text.count("\n") + 1, "no MOTION section (file truncated?)")
    head = text[:m.start()]
    head_lines = head.split("\n")[:-1] if head.endswith("\n") else head.split("\n")
    names, parents, offsets, offset_lines, channels, end_sites = _parse_hierarchy(head_lines, path)
    motion_line = head.count("\n") + 1

    # 'Frames:' and 'Frame Time:' lines, scanned without splitting the whole body.
    pos = m.end() + 1
    ln = motion_line
    frames = frame_time = None
    while frames is None or frame_time is None:
        if pos >= len(text):
            raise BVHError(path, ln + 1, "MOTION block truncated before 'Frames:'/'Frame Time:'")
        line, pos = _next_line(text, pos)
        ln += 1
        s = " ".join(line.split())  # 'Frame\tTime:' too
        if not s:
            continue
        low = s.lower()
        if low.startswith("frames:") and frames is None:
            try:
                frames = int(s.split(":", 1)[1])
            except ValueError:
                raise BVHError(path, ln, f"bad frame count: {s!r}") from None
            if frames <= 0:
                raise BVHError(path, ln, f"zero frames ({s!r})")
            frames_line = ln
        elif low.startswith("frame time:") and frame_time is None:
            try:
                frame_time = float(s.split(":", 1)[1])
            except ValueError:
                raise BVHError(path, ln, f"bad frame time: {s!r}") from None
            if not 1.0 / MAX_FPS <= frame_time <= MAX_FRAME_TIME_S:  # NaN fails too
                raise BVHError(path, ln, f"frame time must be a positive number from {1.0 / MAX_FPS:g} to "
                                         f"{MAX_FRAME_TIME_S:g} s (at most {MAX_FPS:g} fps): {s!r}")
        else:
            raise BVHError(path, ln, f"expected 'Frames:' and 'Frame Time:', got {s[:40]!r}")
    first_data_line = ln + 1
    ncols = sum(len(c) for c in channels)
    if ncols == 0:
        raise BVHError(path, motion_line, "no joint has CHANNELS")
    body = text[pos:]
    # Every value takes at least two bytes ("0 "): check the count against the bytes present before
    # allocating, so 'Frames: 1000000000000' is an error, not a memory exhaustion.
    if frames * ncols > (len(body) + 1) // 2:
        raise BVHError(path, frames_line, f"'Frames: {frames}' with {ncols} values per frame needs more "
                                          f"data than the {len(body)} bytes after it (file truncated?)")
    data = np.empty((frames, ncols))
    try:
        raw = np.frombuffer(body.encode("ascii"), dtype=np.uint8)
    except UnicodeEncodeError:
        raw = None
    count = _scan_floats(raw, data.reshape(-1), _POW10, ncols) if raw is not None and raw.size else 0
    if count != frames * ncols or not np.isfinite(data).all():
        data = _parse_motion_slow(path, body, first_data_line, frames, ncols)

    J = len(names)
    parents_a = np.array(parents, dtype=np.int64)
    offsets_a = np.array(offsets, dtype=np.float64).reshape(J, 3)
    scale = _unit_scale(unit, offsets_a, parents_a)
    _check_bounds(path, names, offset_lines, offsets_a * scale, channels, data, scale, body, first_data_line)

    pos_out = np.repeat(offsets_a[None], frames, axis=0)
    rot = np.zeros((frames, J, 4))
    rot[..., 0] = 1.0
    col = 0
    rjoints, rcols, raxes = [], [], []
    for j, chans in enumerate(channels):
        jc, ja = [-1, -1, -1], [0, 0, 0]
        r = 0
        for c in chans:
            if c in POSITION_CHANNELS:
                pos_out[:, j, POSITION_CHANNELS.index(c)] = data[:, col]
            else:
                jc[r], ja[r] = col, "XYZ".index(c[0])
                r += 1
            col += 1
        if r:
            rjoints.append(j)
            rcols.append(jc)
            raxes.append(ja)
    if rjoints:
        _euler_kernel(data, np.array(rjoints, dtype=np.int64), np.array(rcols, dtype=np.int64),
                      np.array(raxes, dtype=np.int64), rot)

    skel = Skeleton(names=names, parents=parents_a, offsets=offsets_a * scale,
                    end_sites={k: v * scale for k, v in end_sites.items()}, channels=channels)
    fps = 1.0 / frame_time
    if round(fps) > 0 and abs(round(fps) * frame_time - 1.0) < 1e-4:
        fps = float(round(fps))  # 'Frame Time: 0.0166667' means 60 fps, not 59.99998
    return Animation(skeleton=skel, positions=pos_out * scale, rotations=rot, fps=fps, source=str(path))


def _check_bounds(path, names, offset_lines, offsets_m, channels, data, scale, body, first_data_line):
    """Offsets and position values within MAX_LENGTH_M metres, angles within MAX_ANGLE_DEG: beyond
    that a file is damaged, and its numbers would overflow downstream maths."""
    bad = np.flatnonzero(np.abs(offsets_m).max(axis=1) > MAX_LENGTH_M)
    if bad.size:
        j = int(bad[0])
        raise BVHError(path, offset_lines[j], f"joint {names[j]!r}: OFFSET beyond {MAX_LENGTH_M:g} m")
    limit = np.array([MAX_LENGTH_M / scale if c in POSITION_CHANNELS else MAX_ANGLE_DEG
                      for chans in channels for c in chans])
    over = np.abs(data) > limit
    if over.any():
        row, col = (int(v[0]) for v in np.nonzero(over))
        what = f"beyond {MAX_LENGTH_M:g} m" if limit[col] != MAX_ANGLE_DEG else f"beyond {MAX_ANGLE_DEG:g} degrees"
        raise BVHError(path, _frame_line(body, first_data_line, row),
                       f"frame {row} value {col} ({data[row, col]:g}) is {what}")


def _frame_line(body: str, first_line: int, row: int) -> int:
    """File line of the row-th non-empty line of the motion block."""
    k = -1
    for i, line in enumerate(body.split("\n")):
        if line.strip():
            k += 1
            if k == row:
                return first_line + i
    return first_line


def _parse_motion_slow(path, body: str, first_line: int, frames: int, ncols: int) -> np.ndarray:
    """Line-by-line parse of the motion block that names the first bad line; returns the data when
    the fast pass only failed on something Python's float() accepts."""
    rows = []
    last_ln = first_line - 1
    for k, line in enumerate(body.split("\n")):
        toks = line.split()
        if not toks:
            continue
        ln = first_line + k
        last_ln = ln
        n = len(rows)
        if n >= frames:
            raise BVHError(path, ln, f"more frame lines than 'Frames: {frames}'")
        if len(toks) != ncols:
            raise BVHError(path, ln, f"frame {n} has {len(toks)} values, expected {ncols}")
        vals = []
        for t in toks:
            try:
                v = float(t)
            except ValueError:
                raise BVHError(path, ln, f"frame {n} has a non-numeric value {t!r}") from None
            if not np.isfinite(v):
                raise BVHError(path, ln, f"frame {n} has a non-finite value {t!r}")
            vals.append(v)
        rows.append(vals)
    if len(rows) < frames:
        raise BVHError(path, last_ln + 1,
                       f"MOTION block truncated: {len(rows)} of {frames} frames present")
    return np.array(rows, dtype=np.float64)


def read_bvh(path, unit="auto") -> Animation:
    """Read a .bvh or .bvh.gz file. unit: 'auto' (detect), 'm', 'cm', 'mm' or a factor to metres."""
    text = _open_text(path)
    return parse_bvh_text(text, path=path, unit=unit)


def _fmt(a: np.ndarray) -> str:
    return " ".join(f"{v:.6f}" for v in a)


def write_bvh(path, anim: Animation, unit: str = "m", default_order: str = "ZXY") -> None:
    """Write an Animation as BVH. Joints keep their channel layout when the skeleton has one; otherwise
    the root gets 6 channels and the other joints 3 (rotation order default_order). unit: 'm', 'cm' or
    'mm'. A path ending in .gz is gzip-compressed. Written to a temporary file, then renamed."""
    with BVHWriter(path, anim.skeleton, anim.fps, anim.num_frames, unit, default_order) as w:
        w.write(anim.positions, anim.rotations)


class BVHWriter:
    """Writes a BVH frames-chunk by frames-chunk, so a long synthesis never holds its whole motion:
    `with BVHWriter(path, skeleton, fps, frames) as w: w.write(positions, rotations)` for chunks of
    local positions (F, J, 3) m and rotations (F, J, 4). The frame count is declared up front and
    checked at the end; the file appears (renamed from a temporary) only when complete. Same layout
    and text as write_bvh."""

    def __init__(self, path, skeleton: Skeleton, fps: float, frames: int, unit: str = "m",
                 default_order: str = "ZXY"):
        if unit not in ("m", "cm", "mm"):
            raise ValueError(f"unit must be 'm', 'cm' or 'mm', got {unit!r}")
        self.path = Path(path)
        self.skeleton, self.frames, self.written = skeleton, int(frames), 0
        self.scale = 1.0 / _UNITS[unit]
        J = skeleton.num_joints
        chans = list(skeleton.channels) if len(skeleton.channels) == J else []
        if not chans:
            rots = tuple(f"{a}rotation" for a in default_order)
            chans = [POSITION_CHANNELS + rots if p < 0 else rots for p in skeleton.parents]
        self.channels = chans
        self.tmp = self.path.with_name(self.path.name + ".tmp")
        self.file = gzip.open(self.tmp, "wt", compresslevel=6) if self.path.suffix == ".gz" else open(self.tmp, "w")
        self.file.write(_hierarchy_text(skeleton, chans, self.scale))
        self.file.write(f"MOTION\nFrames: {self.frames}\nFrame Time: {1.0 / fps:.8f}\n")

    def write(self, positions: np.ndarray, rotations: np.ndarray) -> None:
        F = len(positions)
        if self.written + F > self.frames:
            raise ValueError(f"{self.path}: more frames than the {self.frames} declared")
        cols = []
        for j, ch in enumerate(self.channels):
            rot_order = "".join(c[0] for c in ch if c in ROTATION_CHANNELS)
            euler = None
            if rot_order:
                # Fewer than three rotation channels: write the listed ones (exact when the others are zero).
                full = rot_order + "".join(a for a in "XYZ" if a not in rot_order)
                euler = quat_to_euler(rotations[:, j], full)
            r = 0
            for c in ch:
                if c in POSITION_CHANNELS:
                    cols.append(positions[:, j, POSITION_CHANNELS.index(c)] * self.scale)
                else:
                    cols.append(euler[:, r])
                    r += 1
        data = np.stack(cols, axis=1) if cols else np.zeros((F, 0))
        data = np.where(np.abs(data) < 5e-7, 0.0, data)  # no '-0.000000'
        np.savetxt(self.file, data, fmt="%.6f", delimiter=" ")
        self.written += F

    def close(self) -> None:
        self.file.close()
        if self.written != self.frames:
            self.tmp.unlink(missing_ok=True)
            raise ValueError(f"{self.path}: {self.written} frames written, {self.frames} declared")
        os.replace(self.tmp, self.path)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.file.close()
            self.tmp.unlink(missing_ok=True)


def _hierarchy_text(skel: Skeleton, chans, scale: float) -> str:
    out = io.StringIO()
    out.write("HIERARCHY\n")
    J = skel.num_joints
    children = {j: [] for j in range(J)}
    for j, p in enumerate(skel.parents):
        if p >= 0:
            children[int(p)].append(j)
    # Depth-first with an explicit stack: a deep chain (thousands of joints) must not hit Python's
    # recursion limit.
    stack = [(0, 0, False)]
    while stack:
        j, depth, closing = stack.pop()
        ind = "\t" * depth
        if closing:
            if j in skel.end_sites or not children[j]:
                end = skel.end_sites.get(j, np.zeros(3))
                out.write(f"{ind}\tEnd Site\n{ind}\t{{\n{ind}\t\tOFFSET {_fmt(end * scale)}\n{ind}\t}}\n")
            out.write(f"{ind}}}\n")
            continue
        out.write(f"{ind}{'ROOT' if skel.parents[j] < 0 else 'JOINT'} {skel.names[j]}\n{ind}{{\n")
        out.write(f"{ind}\tOFFSET {_fmt(skel.offsets[j] * scale)}\n")
        out.write(f"{ind}\tCHANNELS {len(chans[j])} {' '.join(chans[j])}\n")
        stack.append((j, depth, True))
        for c in reversed(children[j]):
            stack.append((c, depth + 1, False))
    return out.getvalue()
