"""FBX clips through Blender's Python module (`bpy`, PyPI, the `blender` environment).

Blender's FBX importer is the best-kept open FBX reader (docs/IMPORTING.md has the comparison with
assimp and ufbx measured here), but its module pins numpy < 2 and Python 3.11, so it cannot share the
library's environment: it lives in its own (`make blender` in a clone; see BLENDER_HELP) and runs as a
child process (io/blender_worker.py) that writes the bones' world matrices to a temporary .npz. This
side reads that file back with bounds, turns Blender's Z-up frame into the library's Y-up one and derives
local transforms as the glTF reader does (io.gltf_clips.local_transforms): every action of the file's
armature is one clip, at the file's frame rate, named after the action.

The Blender Python is $MOTIONMATCH_BLENDER_PYTHON, else `.venv-blender/bin/python` beside the running
environment (a clone's `make blender` puts it there).
"""
from __future__ import annotations

import os
import stat
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import numpy as np

from ..motion.animation import Animation, Skeleton
from ..files.input_bounds import check_npz
from .bvh import POSITION_CHANNELS
from .gltf import MOVING_TRANSLATION_M
from .gltf_clips import local_transforms

BPY_VERSION = "5.0.1"
BLENDER_ENV = ".venv-blender"
BLENDER_HELP = (f"FBX files are read by Blender's Python module (bpy {BPY_VERSION}, about 1 GB), which needs "
                f"numpy < 2 and so its own environment: in a clone run `make blender`; elsewhere "
                f"`python3.11 -m venv ENV && ENV/bin/pip install bpy=={BPY_VERSION}` and set "
                f"MOTIONMATCH_BLENDER_PYTHON=ENV/bin/python")
MAX_FBX_BYTES = 1 << 30
MAX_WORKER_SECONDS = 1800.0
MAX_SAMPLE_BYTES = (16_000_000 + 1024) * 128 + (1 << 20)   # blender_worker.MAX_SAMPLES bone matrices
WORKER = Path(__file__).with_name("blender_worker.py")
# Blender (x, y, z) with Z up and -Y forward -> the library's (x, z, -y): Y up, +Z forward.
Z_UP_TO_Y_UP = np.array([[1.0, 0, 0, 0], [0, 0, 1, 0], [0, -1, 0, 0], [0, 0, 0, 1]])


class FBXError(ValueError):
    """An FBX file that cannot be read (or no Blender to read it with); the message names the file."""


def blender_python() -> Path | None:
    """The interpreter that has `bpy` (see the module docstring), None when there is none."""
    env = os.environ.get("MOTIONMATCH_BLENDER_PYTHON")
    if env:
        return Path(env)
    beside = Path(sys.prefix).parent / BLENDER_ENV / "bin" / "python"
    return beside if beside.exists() else None


def run_blender(*args: str, what: str) -> None:
    """Run io/blender_worker.py with args in the Blender Python. Raises FBXError (naming `what`) when
    there is none or the worker fails (its last output lines in the message)."""
    py = blender_python()
    if py is None or not py.exists():
        raise FBXError(f"{what}: {BLENDER_HELP}" + (f" ({py} does not exist)" if py else ""))
    try:
        r = subprocess.run([str(py), str(WORKER), *args], capture_output=True, text=True,
                           timeout=MAX_WORKER_SECONDS)
    except subprocess.TimeoutExpired:
        raise FBXError(f"{what}: Blender took over {MAX_WORKER_SECONDS:g} s") from None
    if r.returncode != 0:
        tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-4:])
        raise FBXError(f"{what}: Blender could not read it: {tail}")


# The binary FBX layout (a tree of node records, each with typed properties) checked before Blender
# parses it: a damaged or hostile file sent its parser into minutes of work (20 KB of noise after a valid
# header took 129 s); the walk below is linear in the file and refuses such files at once.
FBX_MAGIC = b"Kaydara FBX Binary  \x00"
MAX_FBX_NODES = 10_000_000
MAX_FBX_DEPTH = 64
MAX_FBX_ARRAY_BYTES = 512 << 20
_SCALAR_BYTES = {ord("Y"): 2, ord("C"): 1, ord("I"): 4, ord("F"): 4, ord("D"): 8, ord("L"): 8}
_ARRAY_ITEM_BYTES = {ord("f"): 4, ord("d"): 8, ord("l"): 8, ord("i"): 4, ord("b"): 1}


def _fbx_properties(data, pos: int, count: int, end: int, where: str) -> None:
    """Walk `count` properties from pos to end: every length inside the record, arrays within the bound,
    compressed arrays inflating to exactly their declared size."""
    for k in range(count):
        if pos >= end:
            raise FBXError(f"{where}: property {k} lies past its record")
        t = data[pos]
        pos += 1
        if t in _SCALAR_BYTES:
            pos += _SCALAR_BYTES[t]
        elif t in _ARRAY_ITEM_BYTES:
            if pos + 12 > end:
                raise FBXError(f"{where}: an array header runs past its record")
            n, encoding, stored = struct.unpack_from("<III", data, pos)
            pos += 12
            want = n * _ARRAY_ITEM_BYTES[t]
            if encoding not in (0, 1) or want > MAX_FBX_ARRAY_BYTES or pos + stored > end:
                raise FBXError(f"{where}: an array of {n:,} values (encoding {encoding}, {stored:,} bytes) is "
                               f"damaged or beyond {MAX_FBX_ARRAY_BYTES:,} bytes")
            if encoding == 0 and stored != want:
                raise FBXError(f"{where}: an array of {n:,} values stored in {stored:,} bytes")
            if encoding == 1:
                z = zlib.decompressobj()
                try:
                    got = len(z.decompress(data[pos:pos + stored], want + 1))
                except zlib.error:
                    got = -1
                if got != want:
                    raise FBXError(f"{where}: a compressed array does not inflate to its {n:,} values")
            pos += stored
        elif t in (ord("S"), ord("R")):
            if pos + 4 > end:
                raise FBXError(f"{where}: a string header runs past its record")
            pos += 4 + struct.unpack_from("<I", data, pos)[0]
        else:
            raise FBXError(f"{where}: unknown property type {t}")
    if pos != end:
        raise FBXError(f"{where}: the properties do not fill their record")


def check_fbx_structure(path) -> None:
    """FBXError naming the file unless its node records nest inside each other and the file, with at
    most MAX_FBX_NODES records MAX_FBX_DEPTH deep and arrays of at most MAX_FBX_ARRAY_BYTES."""
    import mmap
    if os.stat(path).st_size < 27 + 13:
        raise FBXError(f"{path}: not a binary FBX (shorter than its header)")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data[:21] != FBX_MAGIC:
            raise FBXError(f"{path}: not a binary FBX")
        version = struct.unpack_from("<I", data, 23)[0]
        wide = version >= 7500
        head, fmt = (25, "<QQQB") if wide else (13, "<IIIB")
        stack, nodes = [(27, len(data), 0)], 0
        while stack:
            pos, limit, depth = stack.pop()
            while not (depth and pos == limit):
                if pos + head > limit:
                    raise FBXError(f"{path}: a node record at byte {pos} runs past {'its parent' if depth else 'the file'}")
                end, count, length, name = struct.unpack_from(fmt, data, pos)
                if end == 0:            # the null record closing a list
                    break
                nodes += 1
                body = pos + head + name
                where = f"{path}: node at byte {pos}"
                if depth > MAX_FBX_DEPTH or nodes > MAX_FBX_NODES:
                    raise FBXError(f"{where}: beyond {MAX_FBX_NODES:,} nodes or {MAX_FBX_DEPTH} levels")
                if not pos < body + length <= end <= limit:
                    raise FBXError(f"{where}: its lengths run outside {'its parent' if depth else 'the file'}")
                _fbx_properties(data, body, count, body + length, where)
                if body + length < end:
                    stack.append((body + length, end, depth + 1))
                pos = end


def _check_sample(d: dict, path) -> dict:
    """d (one armature's arrays) checked: shapes agree, numbers finite, a frame rate in (0, 1000]."""
    keys = {"names", "parents", "rest", "fps", "action_names"}
    if not keys <= set(d):
        raise FBXError(f"{path}: the sample lacks {', '.join(sorted(keys - set(d)))}")
    names, parents, rest = d["names"], d["parents"].astype(np.int64), d["rest"]
    J = len(names)
    if not (parents.shape == (J,) and rest.shape == (J, 4, 4) and ((parents >= -1) & (parents < np.arange(J))).all()
            and np.isfinite(rest).all()):
        raise FBXError(f"{path}: inconsistent skeleton arrays")
    fps = d["fps"]
    if fps.shape != () or not np.isfinite(fps) or not 0.0 < float(fps) <= 1000.0:
        raise FBXError(f"{path}: frame rate {fps!r} outside (0, 1000] frames per second")
    for k in range(len(d["action_names"])):
        c = d.get(f"clip_{k}")
        if c is None or c.ndim != 4 or c.shape[1:] != (J, 4, 4) or not np.isfinite(c).all():
            raise FBXError(f"{path}: clip {k} is not (F, {J}, 4, 4) finite matrices")
    return d


def _load_sample(path) -> dict:
    check_npz(path, FBXError, max_member_bytes=MAX_SAMPLE_BYTES, max_total_bytes=MAX_SAMPLE_BYTES)
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def read_blender_sample(path) -> dict:
    """A worker's .npz (see io/blender_worker.py), checked: sizes, shapes agree, numbers finite, a frame
    rate in (0, 1000]."""
    return _check_sample(_load_sample(path), path)


def read_blender_armatures(path) -> list[dict]:
    """A worker's `usd` sample as one checked sample per armature (read_blender_sample's keys, the
    armature's own action as its one clip, `armature` its parent's name: the character's SkelRoot, and
    `meshes` the mesh objects it deforms), in the order of the armatures' object names."""
    d = _load_sample(path)
    if "armature_names" not in d or "fps" not in d:
        raise FBXError(f"{path}: not a sample of armatures")
    out = []
    for k, name in enumerate(d["armature_names"]):
        if not all(f"{key}_{k}" in d for key in ("names", "parents", "rest", "clip", "meshes")):
            raise FBXError(f"{path}: armature {k} lacks its arrays")
        arm = {"names": d[f"names_{k}"], "parents": d[f"parents_{k}"], "rest": d[f"rest_{k}"], "fps": d["fps"],
               "action_names": np.array([str(name)]), "clip_0": d[f"clip_{k}"], "armature": str(name),
               "meshes": int(d[f"meshes_{k}"])}
        out.append(_check_sample(arm, path))
    return out


def clips_from_sample(d: dict, source: str) -> list[Animation]:
    """Clips (one per action, at the file's fps) from a checked worker sample, in the library's frame."""
    names = [str(n) for n in d["names"]]
    parents = d["parents"].astype(np.int64)
    rest_pos, _ = local_transforms((Z_UP_TO_Y_UP @ d["rest"])[None], parents)
    clips = []
    for k, action in enumerate(d["action_names"]):
        lpos, lrot = local_transforms(Z_UP_TO_Y_UP @ d[f"clip_{k}"], parents)
        moves = np.abs(lpos - rest_pos).max(axis=0).max(axis=-1) > MOVING_TRANSLATION_M
        channels = [(POSITION_CHANNELS if p < 0 or moves[j] else ()) + ("Zrotation", "Yrotation", "Xrotation")
                    for j, p in enumerate(parents)]
        skel = Skeleton(names=names, parents=parents, offsets=rest_pos[0], channels=channels)
        clips.append(Animation(skeleton=skel, positions=lpos, rotations=lrot, fps=float(d["fps"]), source=source,
                               name=str(action)))
    return clips


def read_fbx_clips(path) -> list[Animation]:
    """Every action of an FBX file's armature as a clip (see the module docstring). Raises FBXError
    naming the file: not a binary FBX, no Blender environment, no armature or no animation."""
    path = Path(path)
    try:
        st = os.stat(path)
    except OSError as e:
        raise FBXError(f"{path}: cannot read the FBX file: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FBX_BYTES:
        raise FBXError(f"{path}: not a regular file of at most {MAX_FBX_BYTES:,} bytes")
    with open(path, "rb") as f:
        head = f.read(32)
    if not head.startswith(b"Kaydara FBX Binary"):
        raise FBXError(f"{path}: not a binary FBX (ASCII FBX is not read: re-export it as binary)")
    check_fbx_structure(path)
    with tempfile.TemporaryDirectory(prefix="motionmatch-fbx-") as tmp:
        out = Path(tmp) / "sample.npz"
        run_blender("read", str(path.resolve()), str(out), what=str(path))
        d = read_blender_sample(out)
    if not len(d["action_names"]):
        raise FBXError(f"{path}: the armature has no animation (a clip file needs one)")
    return clips_from_sample(d, str(path))
