"""Scalar quaternion and vector kernels for numba code (w, x, y, z; components passed as floats so
compiled loops stay allocation free). The numpy versions for arrays are in maths/rotations.py."""
from __future__ import annotations

import math

import numba


@numba.njit(cache=True, error_model="numpy", inline="always")
def norm3(x, y, z):
    return math.sqrt(x * x + y * y + z * z)


@numba.njit(cache=True, error_model="numpy", inline="always")
def cross3(ax, ay, az, bx, by, bz):
    return ay * bz - az * by, az * bx - ax * bz, ax * by - ay * bx


@numba.njit(cache=True, error_model="numpy", inline="always")
def qmul(aw, ax, ay, az, bw, bx, by, bz):
    """Hamilton product a * b."""
    return (aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw)


@numba.njit(cache=True, error_model="numpy", inline="always")
def qrot(w, x, y, z, vx, vy, vz):
    """Rotate (vx, vy, vz) by the unit quaternion (w, x, y, z)."""
    tx = 2.0 * (y * vz - z * vy)
    ty = 2.0 * (z * vx - x * vz)
    tz = 2.0 * (x * vy - y * vx)
    return (vx + w * tx + (y * tz - z * ty),
            vy + w * ty + (z * tx - x * tz),
            vz + w * tz + (x * ty - y * tx))


@numba.njit(cache=True, error_model="numpy", inline="always")
def qexp(rx, ry, rz):
    """Rotation vector (axis * angle, radians) to a unit quaternion."""
    n = math.sqrt(rx * rx + ry * ry + rz * rz)
    if n < 1e-8:
        w, x, y, z = 1.0, 0.5 * rx, 0.5 * ry, 0.5 * rz
        inv = 1.0 / math.sqrt(w * w + x * x + y * y + z * z)
        return w * inv, x * inv, y * inv, z * inv
    s = math.sin(0.5 * n) / n
    return math.cos(0.5 * n), rx * s, ry * s, rz * s


# Taylor coefficients of cos(h) and sin(h) / h in u = h * h (qexp_series): 1 / (2k)! and (-1)^k / (2k + 1)!.
_C1, _C2, _C3, _C4, _C5, _C6, _C7 = (-1.0 / 2.0, 1.0 / 24.0, -1.0 / 720.0, 1.0 / 40320.0, -1.0 / 3628800.0,
                                     1.0 / 479001600.0, -1.0 / 87178291200.0)
_S1, _S2, _S3, _S4, _S5, _S6, _S7 = (-1.0 / 6.0, 1.0 / 120.0, -1.0 / 5040.0, 1.0 / 362880.0, -1.0 / 39916800.0,
                                     1.0 / 6227020800.0, -1.0 / 1307674368000.0)


@numba.njit(cache=True, error_model="numpy", inline="always")
def qexp_series(rx, ry, rz):
    """qexp for the many small rotations of a per-joint loop: below 1 radian the half angle's cosine and
    sine come from their Taylor series in its square (no square root, no sine or cosine call; the first
    term left out is under 1e-17 of the result, so the quaternion is qexp's to a few ulps); from 1 radian
    on, qexp."""
    n2 = rx * rx + ry * ry + rz * rz
    if n2 >= 1.0:
        return qexp(rx, ry, rz)
    u = 0.25 * n2
    c = 1.0 + u * (_C1 + u * (_C2 + u * (_C3 + u * (_C4 + u * (_C5 + u * (_C6 + u * _C7))))))
    s = 0.5 * (1.0 + u * (_S1 + u * (_S2 + u * (_S3 + u * (_S4 + u * (_S5 + u * (_S6 + u * _S7)))))))
    return c, rx * s, ry * s, rz * s


@numba.njit(cache=True, error_model="numpy", inline="always")
def qlog(w, x, y, z):
    """Unit quaternion to a rotation vector (radians), the short way round."""
    if w < 0.0:
        w, x, y, z = -w, -x, -y, -z
    s = math.sqrt(x * x + y * y + z * z)
    if s < 1e-8:
        return 2.0 * x, 2.0 * y, 2.0 * z
    k = 2.0 * math.atan2(s, w) / s
    return x * k, y * k, z * k


@numba.njit(cache=True, error_model="numpy", inline="always")
def qfrom_matrix(m00, m01, m02, m10, m11, m12, m20, m21, m22):
    """Rotation matrix (row by row) to a unit quaternion, w >= 0 (Shepperd's method: branch on the
    largest diagonal term, so no division by a small number)."""
    tr = m00 + m11 + m22
    if tr > 0.0:
        s = math.sqrt(tr + 1.0) * 2.0
        w, x, y, z = 0.25 * s, (m21 - m12) / s, (m02 - m20) / s, (m10 - m01) / s
    elif m00 > m11 and m00 > m22:
        s = math.sqrt(1.0 + m00 - m11 - m22) * 2.0
        w, x, y, z = (m21 - m12) / s, 0.25 * s, (m01 + m10) / s, (m02 + m20) / s
    elif m11 > m22:
        s = math.sqrt(1.0 + m11 - m00 - m22) * 2.0
        w, x, y, z = (m02 - m20) / s, (m01 + m10) / s, 0.25 * s, (m12 + m21) / s
    else:
        s = math.sqrt(1.0 + m22 - m00 - m11) * 2.0
        w, x, y, z = (m10 - m01) / s, (m02 + m20) / s, (m12 + m21) / s, 0.25 * s
    n = math.sqrt(w * w + x * x + y * y + z * z)
    if w < 0.0:
        n = -n
    return w / n, x / n, y / n, z / n
