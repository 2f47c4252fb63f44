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

import math
import struct

import numba
import numpy as np

HEADER = struct.Struct("<IfHH")
_SCALE = 511.5 * np.sqrt(2.0)       # a component in [-1/sqrt 2, 1/sqrt 2] -> [0, 1023]


@numba.njit(cache=True)
def _pack_into(q, out):
    """pack_rotations of q (m, 4) into out (m,) uint32: one pass, no temporaries (the numpy version of the
    same steps took 7-9 ms a frame for 2,000 agents of 23 joints, as long as their crowd tick)."""
    c = np.empty(4)
    top = np.finfo(np.float64).max
    for k in range(q.shape[0]):
        # np.nan_to_num (NaN 0, infinities the largest finite), then no rotation for a zero quaternion.
        for j in range(4):
            e = q[k, j]
            c[j] = 0.0 if e != e else min(max(e, -top), top)
        if abs(c[0]) + abs(c[1]) + abs(c[2]) + abs(c[3]) < 1e-9:
            c[0], c[1], c[2], c[3] = 1.0, 0.0, 0.0, 0.0
        norm = max(math.sqrt(c[0] * c[0] + c[1] * c[1] + c[2] * c[2] + c[3] * c[3]), 1e-12)
        big = 0                      # the first largest magnitude, as np.argmax
        for j in range(4):
            c[j] = c[j] / norm
            if abs(c[j]) > abs(c[big]):
                big = j
        sign = -1.0 if c[big] < 0.0 else 1.0
        code = np.uint32(big) << np.uint32(30)
        shift = 20
        for j in range(4):
            if j != big:
                e = min(max(np.rint(c[j] * sign * _SCALE + 511.5), 0.0), 1023.0)
                code |= np.uint32(e) << np.uint32(shift)
                shift -= 10
        out[k] = code


def pack_rotations(q: np.ndarray) -> np.ndarray:
    """(..., 4) unit quaternions (w, x, y, z) as uint32 smallest-three codes (...); NaN components count as
    0 and a zero quaternion as no rotation."""
    q = np.asarray(q, dtype=np.float64)
    out = np.empty(q.shape[:-1], dtype=np.uint32)
    _pack_into(np.ascontiguousarray(q.reshape(-1, 4)), out.reshape(-1))
    return out


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
    return (HEADER.pack(seq & 0xFFFFFFFF, time, n, J) + roots.astype("<f4").tobytes()
            + pack_rotations(rotations).astype("<u4").tobytes() + off.tobytes())


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
