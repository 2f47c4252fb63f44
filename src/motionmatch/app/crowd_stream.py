"""The crowd stream (`/ws/crowd`): every agent's pose in what the page's skinned body needs, packed
small. Little endian:

    uint32 sequence | float32 time (s) | uint16 n | uint16 J
    | float32 roots[n*3] | uint32 rotations[n*J] | int16 hips[n*3]

roots: joint 0 (the character root) in the world, metres, Y up. hips: the hips joint minus the root in
millimetres (the body places its hips there). rotations: every joint's local rotation (joint 0: in the
world) as "smallest three": bits 30-31 the index (w, x, y, z) of the largest component, dropped and
made positive, then the other three in order, 10 bits each over [-1/sqrt 2, 1/sqrt 2] (at most 0.2
degrees off). The body needs no joint positions (skinned.js), so none are sent: 18 + 4 J bytes per
agent, 110 for the 23 joints of the default database, against 12 J = 276 for float32 positions alone.
(The order keeps every array aligned to its element size, so the page reads them in place.)
"""
from __future__ import annotations

import struct

import numpy as np

HEADER = struct.Struct("<IfHH")
_SCALE = 511.5 * np.sqrt(2.0)       # a component in [-1/sqrt 2, 1/sqrt 2] -> [0, 1023]


def pack_rotations(q: np.ndarray) -> np.ndarray:
    """(..., 4) unit quaternions (w, x, y, z) as uint32 smallest-three codes (...)."""
    q = np.asarray(q, dtype=np.float64)
    q = q / np.maximum(np.linalg.norm(q, axis=-1, keepdims=True), 1e-12)
    big = np.argmax(np.abs(q), axis=-1)
    q = q * np.where(np.take_along_axis(q, big[..., None], -1) < 0.0, -1.0, 1.0)
    keep = np.array([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]])[big]          # (..., 3) the other three
    rest = np.take_along_axis(q, keep, -1)
    code = np.clip(np.rint(rest * _SCALE + 511.5), 0, 1023).astype(np.uint32)
    return (big.astype(np.uint32) << 30) | (code[..., 0] << 20) | (code[..., 1] << 10) | code[..., 2]


def unpack_rotations(codes: np.ndarray) -> np.ndarray:
    """The (..., 4) unit quaternions (w, x, y, z) of smallest-three codes (the page's decoding)."""
    c = np.asarray(codes, dtype=np.uint32)
    big = (c >> 30).astype(np.int64)
    rest = np.stack([(c >> 20) & 1023, (c >> 10) & 1023, c & 1023], -1).astype(np.float64)
    rest = (rest - 511.5) / _SCALE
    dropped = np.sqrt(np.maximum(0.0, 1.0 - (rest ** 2).sum(-1)))
    out = np.empty(c.shape + (4,))
    keep = np.array([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]])[big]
    np.put_along_axis(out, keep, rest, -1)
    np.put_along_axis(out, big[..., None], dropped[..., None], -1)
    return out


def encode_frame(seq: int, time: float, roots: np.ndarray, hips: np.ndarray, rotations: np.ndarray) -> bytes:
    """One frame: roots (n, 3) m, hips (n, 3) m (the hips joint in the world), local rotations (n, J, 4)."""
    n, J = rotations.shape[:2]
    roots = np.nan_to_num(np.asarray(roots, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    off = np.nan_to_num((np.asarray(hips, dtype=np.float64) - roots) * 1000.0, nan=0.0, posinf=0.0, neginf=0.0)
    off = np.clip(np.rint(off), -32767, 32767).astype("<i2")
    rot = np.nan_to_num(np.asarray(rotations, dtype=np.float64), nan=0.0)
    rot[np.abs(rot).sum(-1) < 1e-9] = (1.0, 0.0, 0.0, 0.0)
    return (HEADER.pack(seq & 0xFFFFFFFF, time, n, J) + roots.astype("<f4").tobytes()
            + pack_rotations(rot).astype("<u4").tobytes() + off.tobytes())


def decode_frame(data: bytes) -> dict:
    """A frame's fields: seq, time (s), roots (n, 3), hips (n, 3) m in the world, rotations (n, J, 4)."""
    seq, t, n, J = HEADER.unpack_from(data)
    o = HEADER.size
    roots = np.frombuffer(data, "<f4", n * 3, o).reshape(n, 3).astype(np.float64)
    rot = unpack_rotations(np.frombuffer(data, "<u4", n * J, o + 12 * n).reshape(n, J))
    hips = roots + np.frombuffer(data, "<i2", n * 3, o + 12 * n + 4 * n * J).reshape(n, 3) / 1000.0
    return {"seq": seq, "time": t, "roots": roots, "hips": hips, "rotations": rot}


def bytes_per_frame(n: int, joints: int) -> int:
    return HEADER.size + n * (18 + 4 * joints)


def world_frame(world) -> bytes:
    """The current poses of a crowd_world.CrowdWorld as a frame."""
    c = world.crowd
    pos = c.global_positions
    return encode_frame(world.seq, world.time, pos[:, 0], pos[:, world.hips], c.out.local_rot)
