"""Quaternion maths over numpy arrays.

Convention everywhere in motionmatch: quaternions are (w, x, y, z) in the last axis, unit length,
rotating column vectors (v' = q v q*). Arrays broadcast over leading axes. Angles in radians unless
a name says degrees.
"""
from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation

_EPS = 1e-8


def quat_identity(shape=()) -> np.ndarray:
    """Identity quaternions of the given leading shape."""
    q = np.zeros(tuple(np.atleast_1d(shape)) + (4,) if shape != () else (4,))
    q[..., 0] = 1.0
    return q


def quat_normalize(q: np.ndarray) -> np.ndarray:
    return q / np.maximum(np.linalg.norm(q, axis=-1, keepdims=True), _EPS)


def quat_abs(q: np.ndarray) -> np.ndarray:
    """The same rotation with w >= 0 (the short way round)."""
    return np.where(q[..., :1] < 0.0, -q, q)


def quat_inv(q: np.ndarray) -> np.ndarray:
    """Inverse of a unit quaternion (its conjugate)."""
    return q * np.array([1.0, -1.0, -1.0, -1.0], dtype=q.dtype)


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product a * b (apply b first, then a)."""
    aw, ax, ay, az = a[..., 0], a[..., 1], a[..., 2], a[..., 3]
    bw, bx, by, bz = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    return np.stack([
        aw * bw - ax * bx - ay * by - az * bz,
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
    ], axis=-1)


def quat_inv_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a^-1 * b."""
    return quat_mul(quat_inv(a), b)


def quat_mul_inv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a * b^-1."""
    return quat_mul(a, quat_inv(b))


def quat_rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate vectors v (..., 3) by unit quaternions q (..., 4)."""
    # Written out instead of np.cross: np.cross costs ~20 us of overhead per call.
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    vx, vy, vz = v[..., 0], v[..., 1], v[..., 2]
    tx = 2.0 * (y * vz - z * vy)
    ty = 2.0 * (z * vx - x * vz)
    tz = 2.0 * (x * vy - y * vx)
    return np.stack([vx + w * tx + (y * tz - z * ty),
                     vy + w * ty + (z * tx - x * tz),
                     vz + w * tz + (x * ty - y * tx)], axis=-1)


def quat_inv_rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate vectors v by the inverse of q."""
    return quat_rotate(quat_inv(q), v)


def quat_from_angle_axis(angle: np.ndarray, axis: np.ndarray) -> np.ndarray:
    """Quaternion of a rotation by angle (radians) around a unit axis."""
    angle = np.asarray(angle, dtype=np.float64)[..., None]
    axis = np.asarray(axis, dtype=np.float64)
    s = np.sin(angle / 2.0)
    return np.concatenate([np.cos(angle / 2.0) * np.ones_like(axis[..., :1]), s * axis], axis=-1)


def quat_from_scaled_angle_axis(v: np.ndarray) -> np.ndarray:
    """Exponential map: a rotation vector (axis * angle, radians) to a quaternion."""
    v = np.asarray(v, dtype=np.float64)
    half = 0.5 * v
    ang = np.linalg.norm(half, axis=-1, keepdims=True)
    small = ang < _EPS
    safe = np.where(small, 1.0, ang)
    w = np.where(small, 1.0, np.cos(ang))
    xyz = np.where(small, half, half * np.sin(safe) / safe)
    return quat_normalize(np.concatenate([w, xyz], axis=-1))


def quat_to_scaled_angle_axis(q: np.ndarray) -> np.ndarray:
    """Logarithmic map: a quaternion to a rotation vector (axis * angle, radians), short way round."""
    q = quat_abs(np.asarray(q, dtype=np.float64))
    xyz = q[..., 1:]
    s = np.linalg.norm(xyz, axis=-1, keepdims=True)
    ang = 2.0 * np.arctan2(s, q[..., :1])
    small = s < _EPS
    return np.where(small, 2.0 * xyz, xyz * ang / np.where(small, 1.0, s))


def quat_angle(q: np.ndarray) -> np.ndarray:
    """Rotation angle of q in radians, in [0, pi]."""
    q = np.asarray(q)
    return 2.0 * np.arctan2(np.linalg.norm(q[..., 1:], axis=-1), np.abs(q[..., 0]))


def quat_between(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Shortest rotation taking direction u to direction v (need not be unit)."""
    u = np.asarray(u, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    c = np.cross(u, v)
    w = np.sqrt((u * u).sum(-1) * (v * v).sum(-1))[..., None] + (u * v).sum(-1, keepdims=True)
    q = np.concatenate([w, c], axis=-1)
    # Opposite vectors: any perpendicular axis works.
    opposite = (np.linalg.norm(q, axis=-1) < _EPS)
    if np.any(opposite):
        perp = np.cross(u, np.array([1.0, 0.0, 0.0]))
        perp = np.where(np.linalg.norm(perp, axis=-1, keepdims=True) < _EPS, np.cross(u, np.array([0.0, 0.0, 1.0])), perp)
        alt = np.concatenate([np.zeros_like(w), perp], axis=-1)
        q = np.where(opposite[..., None], alt, q)
    return quat_normalize(q)


def quat_slerp(a: np.ndarray, b: np.ndarray, t) -> np.ndarray:
    """Spherical interpolation from a (t=0) to b (t=1), the short way round."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    t = np.asarray(t, dtype=np.float64)
    if t.ndim == a.ndim - 1 or t.ndim > 0 and t.shape[-1:] != (1,):
        t = t[..., None]
    dot = (a * b).sum(-1, keepdims=True)
    b = np.where(dot < 0.0, -b, b)
    dot = np.abs(dot)
    theta = np.arccos(np.clip(dot, -1.0, 1.0))
    sin_t = np.sin(theta)
    near = sin_t < 1e-6
    safe = np.where(near, 1.0, sin_t)
    wa = np.where(near, 1.0 - t, np.sin((1.0 - t) * theta) / safe)
    wb = np.where(near, t, np.sin(t * theta) / safe)
    return quat_normalize(wa * a + wb * b)


def quat_unroll(q: np.ndarray, axis: int = 0) -> np.ndarray:
    """Flip signs along a time axis so consecutive quaternions sit in the same hemisphere.

    Needed before filtering or cubic interpolation of quaternion components.
    """
    q = np.moveaxis(np.array(q, dtype=np.float64, copy=True), axis, 0)
    dots = (q[1:] * q[:-1]).sum(-1)
    flips = np.cumsum(dots < 0.0, axis=0) % 2 == 1
    q[1:][flips] *= -1.0
    return np.moveaxis(q, 0, axis)


def quat_from_euler(angles: np.ndarray, order: str, degrees: bool = True) -> np.ndarray:
    """Intrinsic Euler angles (..., 3), applied in the order named (e.g. 'ZXY', as BVH channels list
    them: first channel outermost) to quaternions."""
    angles = np.asarray(angles, dtype=np.float64)
    shape = angles.shape[:-1]
    r = Rotation.from_euler(order.upper(), angles.reshape(-1, 3), degrees=degrees)
    xyzw = r.as_quat()
    return np.concatenate([xyzw[:, 3:], xyzw[:, :3]], axis=-1).reshape(shape + (4,))


def quat_to_euler(q: np.ndarray, order: str, degrees: bool = True) -> np.ndarray:
    """Quaternions to intrinsic Euler angles in the order named (inverse of quat_from_euler)."""
    q = np.asarray(q, dtype=np.float64)
    shape = q.shape[:-1]
    xyzw = np.concatenate([q[..., 1:], q[..., :1]], axis=-1).reshape(-1, 4)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gimbal lock warnings: the angles are still a valid solution
        e = Rotation.from_quat(xyzw).as_euler(order.upper(), degrees=degrees)
    return e.reshape(shape + (3,))


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """Unit quaternions (..., 4) to rotation matrices (..., 3, 3)."""
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
        np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
        np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
    ], -2)


def quat_from_matrix(m: np.ndarray) -> np.ndarray:
    """Rotation matrices (..., 3, 3) to unit quaternions (..., 4) with w >= 0."""
    m = np.asarray(m, dtype=np.float64)
    shape = m.shape[:-2]
    xyzw = Rotation.from_matrix(m.reshape(-1, 3, 3)).as_quat()
    q = np.concatenate([xyzw[:, 3:], xyzw[:, :3]], axis=-1).reshape(shape + (4,))
    return quat_abs(q)


def quat_from_yaw(yaw: np.ndarray) -> np.ndarray:
    """Rotation about +Y by yaw radians (0 faces +Z, positive turns +Z toward +X)."""
    yaw = np.asarray(yaw, dtype=np.float64)
    return np.stack([np.cos(yaw / 2), np.zeros_like(yaw), np.sin(yaw / 2), np.zeros_like(yaw)], axis=-1)


def yaw_of_direction(d: np.ndarray) -> np.ndarray:
    """Yaw (radians) of a ground direction (..., 3) or (..., 2 as x, z): atan2(x, z)."""
    d = np.asarray(d)
    if d.shape[-1] == 3:
        return np.arctan2(d[..., 0], d[..., 2])
    return np.arctan2(d[..., 0], d[..., 1])


def wrap_angle(a):
    """Wrap radians to (-pi, pi]."""
    return (np.asarray(a) + np.pi) % (2 * np.pi) - np.pi
