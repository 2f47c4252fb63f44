"""Learned motion matching inference in numpy: the three networks of a LearnedModel, batched over rows.

Every function takes one row (F,) or a batch (B, F) and answers in the same shape, so one character and
a crowd call the same code. x is the feature vector normalized with the model's own offset and scale; z
the latent. The runtime's loop keeps the shape of classic motion matching:

    x, z = project(model, raw_query)          # where classic motion matching searches
    x, z = step(model, x, z, dt)              # where it would play on one frame
    pose = decompress(model, x, z)            # instead of reading the database's frame
"""
from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

from ..scalar_quat import cross3, qfrom_matrix
from .model import LearnedModel, Network, pose_layout


class LearnedPose(NamedTuple):
    """A pose in the database's per-frame layout, leading axes as the inputs (B or none), float32.

    Joints 1.. are local to their parent. Joint 0 (the simulation bone) is at the origin with identity
    rotation; its velocities are the root's own-frame velocity (m/s) and angular velocity (rad/s), the
    values the runtime integrates to move the character."""

    positions: np.ndarray            # (..., J, 3) m
    rotations: np.ndarray            # (..., J, 4) (w, x, y, z)
    velocities: np.ndarray           # (..., J, 3) m/s
    angular_velocities: np.ndarray   # (..., J, 3) rad/s
    contacts: np.ndarray             # (..., 2) bool, left and right foot


def evaluate(net: Network, inputs: np.ndarray) -> np.ndarray:
    """Run a network on (B, in) inputs; (B, out) float32."""
    h = (np.asarray(inputs, dtype=np.float32) - net.in_mean) / net.in_std
    last = len(net.weights) - 1
    for i, (w, b) in enumerate(zip(net.weights, net.biases)):
        h = h @ w + b
        if i < last:
            if net.activation == "relu":
                np.maximum(h, 0.0, out=h)
            else:
                h = np.where(h > 0.0, h, np.expm1(np.minimum(h, 0.0)))
    return h * net.out_std + net.out_mean


@numba.njit(cache=True)
def _two_columns_to_quat(txy, out):
    """Rotation matrices given by their first two columns (N, 6) -> unit quaternions (N, 4), w >= 0.

    The columns are re-orthonormalized first (Gram-Schmidt), so any network output maps to a rotation."""
    for i in range(txy.shape[0]):
        ax, ay, az = txy[i, 0], txy[i, 1], txy[i, 2]
        n = np.sqrt(ax * ax + ay * ay + az * az) + 1e-12
        ax, ay, az = ax / n, ay / n, az / n
        bx, by, bz = txy[i, 3], txy[i, 4], txy[i, 5]
        d = ax * bx + ay * by + az * bz
        bx, by, bz = bx - d * ax, by - d * ay, bz - d * az
        n = np.sqrt(bx * bx + by * by + bz * bz) + 1e-12
        bx, by, bz = bx / n, by / n, bz / n
        cx, cy, cz = cross3(ax, ay, az, bx, by, bz)
        # The matrix [a b c] has the vectors as columns.
        w, x, y, z = qfrom_matrix(ax, bx, cx, ay, by, cy, az, bz, cz)
        out[i, 0], out[i, 1], out[i, 2], out[i, 3] = w, x, y, z


def two_columns_to_quat(txy: np.ndarray) -> np.ndarray:
    """(..., 6) first two rotation-matrix columns -> (..., 4) quaternions (w, x, y, z), w >= 0."""
    txy = np.asarray(txy)
    flat = np.ascontiguousarray(txy.reshape(-1, 6), dtype=np.float64)
    out = np.empty((flat.shape[0], 4))
    _two_columns_to_quat(flat, out)
    return out.reshape(txy.shape[:-1] + (4,))


def _rows(a) -> tuple[np.ndarray, bool]:
    a = np.asarray(a, dtype=np.float32)
    return (a[None], True) if a.ndim == 1 else (a, False)


def decompress(model: LearnedModel, x, z) -> LearnedPose:
    """The pose of features x (F,)|(B, F) and latent z (Z,)|(B, Z)."""
    x, single = _rows(x)
    z, _ = _rows(z)
    y = evaluate(model.decompressor, np.concatenate([x, z], axis=1))
    b, j = y.shape[0], model.num_joints
    lay = pose_layout(j)
    pos = np.zeros((b, j, 3), dtype=np.float32)
    rot = np.zeros((b, j, 4), dtype=np.float32)
    vel = np.zeros((b, j, 3), dtype=np.float32)
    ang = np.zeros((b, j, 3), dtype=np.float32)
    rot[:, 0, 0] = 1.0
    pos[:, 1:] = y[:, lay["positions"]].reshape(b, j - 1, 3)
    rot[:, 1:] = two_columns_to_quat(y[:, lay["rotations"]].reshape(b, j - 1, 6))
    vel[:, 1:] = y[:, lay["velocities"]].reshape(b, j - 1, 3)
    ang[:, 1:] = y[:, lay["angular_velocities"]].reshape(b, j - 1, 3)
    vel[:, 0] = y[:, lay["root_velocity"]]
    ang[:, 0] = y[:, lay["root_angular_velocity"]]
    contacts = y[:, lay["contacts"]] > 0.5
    pose = LearnedPose(pos, rot, vel, ang, contacts)
    return LearnedPose(*(a[0] for a in pose)) if single else pose


def step(model: LearnedModel, x, z, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """Features and latent dt seconds later (the stepper predicts their rates of change)."""
    x, single = _rows(x)
    z, _ = _rows(z)
    f = model.num_features
    rate = evaluate(model.stepper, np.concatenate([x, z], axis=1))
    xn = x + np.float32(dt) * rate[:, :f]
    zn = z + np.float32(dt) * rate[:, f:]
    return (xn[0], zn[0]) if single else (xn, zn)


def normalize_query(model: LearnedModel, raw_query) -> np.ndarray:
    """Raw query features (database units, the schema's layout) -> the model's normalized x."""
    return ((np.asarray(raw_query, dtype=np.float64) - model.feature_offset) / model.feature_scale).astype(np.float32)


def project(model: LearnedModel, query) -> tuple[np.ndarray, np.ndarray]:
    """(x, z) of the database frame nearest to a raw query (F,)|(B, F) (what classic search would find)."""
    q, single = _rows(normalize_query(model, query))
    out = evaluate(model.projector, q)
    f = model.num_features
    return (out[0, :f], out[0, f:]) if single else (out[:, :f], out[:, f:])
