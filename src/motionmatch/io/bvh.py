"""BVH reading and writing.

Reads any rotation channel order, 3 or 6 (or any mix of) channels per joint, End Sites, tabs and CRLF,
and `.bvh.gz`. Rotation channels are intrinsic Euler angles in the order listed (the first channel is
the outermost rotation), as BVH intends. Lengths are converted to metres: the unit is detected from
the skeleton's size (a human measured in centimetres is far taller than 10 units) or given.
"""
from __future__ import annotations

import gzip
import io
import os
import re
from pathlib import Path

import numpy as np

from ..animation import Animation, Skeleton
from ..rotations import quat_from_euler, quat_to_euler, quat_normalize

POSITION_CHANNELS = ("Xposition", "Yposition", "Zposition")
ROTATION_CHANNELS = ("Xrotation", "Yrotation", "Zrotation")
_ALL_CHANNELS = {c.lower(): c for c in POSITION_CHANNELS + ROTATION_CHANNELS}


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
        raw = gzip.decompress(raw)
    return raw.decode("utf-8", errors="replace")


def _unit_scale(unit, offsets: np.ndarray, parents: np.ndarray) -> float:
    """Factor from file units to metres."""
    if isinstance(unit, (int, float)) and not isinstance(unit, bool):
        return float(unit)
    if unit in ("m", "metres", "meters"):
        return 1.0
    if unit in ("cm", "centimetres", "centimeters"):
        return 0.01
    if unit not in (None, "auto"):
        raise ValueError(f"unknown unit {unit!r}: use 'auto', 'm', 'cm' or a number (file units to metres)")
    # Rest-pose extent of the skeleton: ~1.5-2 for metres, ~150-200 for centimetres.
    pos = np.zeros_like(offsets)
    for j, p in enumerate(parents):
        pos[j] = offsets[j] + (pos[p] if p >= 0 else 0.0)
    extent = float(np.max(pos.max(0) - pos.min(0))) if len(pos) else 0.0
    return 0.01 if extent > 10.0 else 1.0


def parse_bvh_text(text: str, path="<string>", unit="auto") -> Animation:
    """Parse BVH text into an Animation (metres, local quaternions)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    m = re.search(r"^\s*MOTION\s*$", text, flags=re.M)
    if m is None:
        raise BVHError(path, None, "no MOTION section (file truncated?)")
    head_lines = text[:m.start()].split("\n")
    head_line_count = text[:m.start()].count("\n")

    names: list[str] = []
    parents: list[int] = []
    offsets: list[list[float]] = []
    channels: list[tuple[str, ...]] = []
    end_sites: dict[int, np.ndarray] = {}
    stack: list[int] = []
    pending: int | None = None  # joint whose '{' is expected
    in_end = False
    end_offset_for: int | None = None
    saw_hierarchy = False
    for lineno, line in enumerate(head_lines, start=1):
        toks = line.split()
        if not toks:
            continue
        key = toks[0]
        if key == "HIERARCHY":
            saw_hierarchy = True
        elif key in ("ROOT", "JOINT"):
            if len(toks) < 2:
                raise BVHError(path, lineno, f"{key} without a name")
            if key == "ROOT" and names:
                raise BVHError(path, lineno, "more than one ROOT is not supported")
            names.append(" ".join(toks[1:]))
            parents.append(stack[-1] if stack else -1)
            offsets.append([0.0, 0.0, 0.0])
            channels.append(())
            pending = len(names) - 1
        elif key == "End":
            if not stack:
                raise BVHError(path, lineno, "End Site outside any joint")
            in_end = True
            end_offset_for = stack[-1]
            pending = -2
        elif key == "{":
            if pending is None:
                raise BVHError(path, lineno, "unexpected '{'")
            stack.append(pending)
            pending = None
        elif key == "}":
            if not stack:
                raise BVHError(path, lineno, "unbalanced '}'")
            top = stack.pop()
            if top == -2:
                in_end = False
        elif key == "OFFSET":
            try:
                vals = [float(v) for v in toks[1:4]]
            except ValueError:
                raise BVHError(path, lineno, f"non-numeric OFFSET: {line.strip()}") from None
            if len(vals) != 3 or not np.all(np.isfinite(vals)):
                raise BVHError(path, lineno, f"OFFSET needs three finite numbers: {line.strip()}")
            if in_end:
                end_sites[end_offset_for] = np.array(vals)
            elif stack:
                offsets[stack[-1]] = vals
        elif key == "CHANNELS":
            if not stack or stack[-1] < 0:
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
                    raise BVHError(path, lineno, f"unknown channel name {c!r}")
                fixed.append(_ALL_CHANNELS[c.lower()])
            channels[stack[-1]] = tuple(fixed)
        else:
            raise BVHError(path, lineno, f"unexpected keyword {key!r} in HIERARCHY")
    if not saw_hierarchy or not names:
        raise BVHError(path, None, "no HIERARCHY with a ROOT joint")
    if stack:
        raise BVHError(path, head_line_count, "HIERARCHY ends with unclosed '{'")

    # MOTION header
    rest = text[m.end():]
    lines = rest.split("\n")
    base = head_line_count + 1  # line number of 'MOTION'
    idx = 0
    frames = frame_time = None
    while idx < len(lines) and (frames is None or frame_time is None):
        s = lines[idx].strip()
        idx += 1
        if not s:
            continue
        ln = base + idx
        if s.lower().startswith("frames:"):
            try:
                frames = int(s.split(":", 1)[1])
            except ValueError:
                raise BVHError(path, ln, f"bad frame count: {s}") from None
        elif s.lower().startswith("frame time:"):
            try:
                frame_time = float(s.split(":", 1)[1])
            except ValueError:
                raise BVHError(path, ln, f"bad frame time: {s}") from None
            if not np.isfinite(frame_time) or frame_time <= 0:
                raise BVHError(path, ln, f"frame time must be positive: {s}")
        else:
            raise BVHError(path, ln, f"expected 'Frames:' and 'Frame Time:', got {s[:40]!r}")
    if frames is None or frame_time is None:
        raise BVHError(path, base + idx, "MOTION block truncated before 'Frames:'/'Frame Time:'")
    if frames <= 0:
        raise BVHError(path, base, "zero frames")
    first_data_line = base + idx + 1
    ncols = sum(len(c) for c in channels)
    body = "\n".join(lines[idx:])
    try:
        flat = np.array(body.split(), dtype=np.float64)
    except ValueError:
        flat = None
    data = None
    if flat is not None and flat.size == frames * ncols:
        data = flat.reshape(frames, ncols)
    if data is None or not np.all(np.isfinite(data)):
        _locate_bad_frame(path, lines[idx:], first_data_line, frames, ncols)
        raise BVHError(path, None, "motion data malformed")  # _locate_bad_frame always raises first

    J = len(names)
    parents_a = np.array(parents, dtype=np.int64)
    offsets_a = np.array(offsets, dtype=np.float64)
    scale = _unit_scale(unit, offsets_a, parents_a)

    pos = np.repeat(offsets_a[None], frames, axis=0)
    rot = np.zeros((frames, J, 4))
    rot[..., 0] = 1.0
    col = 0
    by_order: dict[str, list[tuple[int, list[int]]]] = {}
    for j, chans in enumerate(channels):
        rcols, order = [], ""
        for c in chans:
            if c in POSITION_CHANNELS:
                pos[:, j, POSITION_CHANNELS.index(c)] = data[:, col]
            else:
                rcols.append(col)
                order += c[0]
            col += 1
        if rcols:
            if len(rcols) != 3:
                # Fewer than three rotation channels: pad with zero rotations about the missing axes.
                missing = [a for a in "XYZ" if a not in order]
                by_order.setdefault(order + "".join(missing), []).append((j, rcols + [-1] * len(missing)))
            else:
                by_order.setdefault(order, []).append((j, rcols))
    padded = np.concatenate([data, np.zeros((frames, 1))], axis=1)
    for order, items in by_order.items():
        js = [j for j, _ in items]
        cols = np.array([c for _, c in items])  # (k, 3)
        angles = padded[:, cols]                 # (F, k, 3)
        rot[:, js] = quat_from_euler(angles, order)

    skel = Skeleton(names=names, parents=parents_a, offsets=offsets_a * scale,
                    end_sites={k: v * scale for k, v in end_sites.items()}, channels=channels)
    anim = Animation(skeleton=skel, positions=pos * scale, rotations=quat_normalize(rot),
                     fps=1.0 / frame_time, source=str(path))
    return anim


def _locate_bad_frame(path, lines, first_line, frames, ncols):
    """Slow path: find the first bad line of the motion block and raise a precise error."""
    n = 0
    for k, line in enumerate(lines):
        toks = line.split()
        if not toks:
            continue
        ln = first_line + k
        if n >= frames:
            raise BVHError(path, ln, f"more frame lines than 'Frames: {frames}'")
        if len(toks) != ncols:
            raise BVHError(path, ln, f"frame {n} has {len(toks)} values, expected {ncols}")
        try:
            vals = [float(t) for t in toks]
        except ValueError:
            bad = next(t for t in toks if not _is_float(t))
            raise BVHError(path, ln, f"frame {n} has a non-numeric value {bad!r}") from None
        if not np.all(np.isfinite(vals)):
            raise BVHError(path, ln, f"frame {n} has a non-finite value")
        n += 1
    raise BVHError(path, first_line + len(lines), f"MOTION block truncated: {n} of {frames} frames present")


def _is_float(t: str) -> bool:
    try:
        float(t)
        return True
    except ValueError:
        return False


def read_bvh(path, unit="auto") -> Animation:
    """Read a .bvh or .bvh.gz file. unit: 'auto' (detect), 'm', 'cm' or a factor to metres."""
    text = _open_text(path)
    anim = parse_bvh_text(text, path=path, unit=unit)
    return anim


def _fmt(a: np.ndarray) -> str:
    return " ".join(f"{v:.6f}" for v in a)


def write_bvh(path, anim: Animation, unit: str = "m", default_order: str = "ZXY") -> None:
    """Write an Animation as BVH. Joints keep their channel layout when the skeleton has one; otherwise
    the root gets 6 channels and the other joints 3 (rotation order default_order). unit: 'm' or 'cm'."""
    skel = anim.skeleton
    scale = {"m": 1.0, "cm": 100.0}[unit]
    J = skel.num_joints
    chans = list(skel.channels) if len(skel.channels) == J else []
    if not chans:
        rots = tuple(f"{a}rotation" for a in default_order)
        chans = [POSITION_CHANNELS + rots if p < 0 else rots for p in skel.parents]
    out = io.StringIO()
    out.write("HIERARCHY\n")

    children = {j: [] for j in range(J)}
    for j, p in enumerate(skel.parents):
        if p >= 0:
            children[int(p)].append(j)

    def emit(j, depth):
        ind = "\t" * depth
        out.write(f"{ind}{'ROOT' if skel.parents[j] < 0 else 'JOINT'} {skel.names[j]}\n{ind}{{\n")
        out.write(f"{ind}\tOFFSET {_fmt(skel.offsets[j] * scale)}\n")
        out.write(f"{ind}\tCHANNELS {len(chans[j])} {' '.join(chans[j])}\n")
        for c in children[j]:
            emit(c, depth + 1)
        if j in skel.end_sites or not children[j]:
            end = skel.end_sites.get(j, np.zeros(3))
            out.write(f"{ind}\tEnd Site\n{ind}\t{{\n{ind}\t\tOFFSET {_fmt(end * scale)}\n{ind}\t}}\n")
        out.write(f"{ind}}}\n")

    emit(0, 0)
    F = anim.num_frames
    out.write(f"MOTION\nFrames: {F}\nFrame Time: {1.0 / anim.fps:.8f}\n")
    cols = []
    for j, ch in enumerate(chans):
        rot_order = "".join(c[0] for c in ch if c in ROTATION_CHANNELS)
        euler = quat_to_euler(anim.rotations[:, j], rot_order) if len(rot_order) == 3 else None
        r = 0
        for c in ch:
            if c in POSITION_CHANNELS:
                cols.append(anim.positions[:, j, POSITION_CHANNELS.index(c)] * scale)
            else:
                cols.append(euler[:, r])
                r += 1
    data = np.stack(cols, axis=1) if cols else np.zeros((F, 0))
    buf = io.StringIO()
    np.savetxt(buf, data, fmt="%.6f", delimiter=" ")
    text = out.getvalue() + buf.getvalue()
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    if path.suffix == ".gz":
        tmp.write_bytes(gzip.compress(text.encode()))
    else:
        tmp.write_text(text)
    os.replace(tmp, path)
