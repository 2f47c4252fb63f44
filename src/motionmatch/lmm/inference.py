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

from ..maths.scalar_quat import cross3, qfrom_matrix
from .model import LearnedModel, Network


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


# Rows per block of a layer: the block's outputs stay in the L1 cache while the weights stream past them
# once per block.
BLOCK = 8


@numba.njit(cache=True, fastmath=True)
def _dense_rows(h, w, b, out, r0, r1):
    n_in, n_out = w.shape
    for r in range(r0, r1):
        for o in range(n_out):
            out[r, o] = b[o]
    for i in range(n_in):
        for r in range(r0, r1):
            v = h[r, i]
            # Half of a ReLU layer's inputs are zero: their weight rows are skipped.
            if v != 0.0:
                for o in range(n_out):
                    out[r, o] += v * w[i, o]


@numba.njit(cache=True, fastmath=True)
def dense(h, w, b, out, activation):
    """out = activation(h @ w + b) for h (rows, n_in), w (n_in, n_out), out (rows, n_out), float32,
    contiguous; activation 0 none, 1 ReLU, 2 ELU.

    A frame's matrix-vector products are bound by reading the weights: the loop adds weight rows times
    inputs for a block of rows at once (no BLAS: its threads would fight the runtime's own; a crowd runs
    blocks of agents in parallel itself, see runtime/learned.py)."""
    rows, n_out = out.shape
    for r0 in range(0, rows, BLOCK):
        _dense_rows(h, w, b, out, r0, min(rows, r0 + BLOCK))
    if activation == 1:
        for r in range(rows):
            for o in range(n_out):
                out[r, o] = max(out[r, o], np.float32(0.0))
    elif activation == 2:
        for r in range(rows):
            for o in range(n_out):
                if out[r, o] < 0.0:
                    out[r, o] = np.expm1(out[r, o])


@numba.njit(cache=True, fastmath=True)
def forward(inputs, net, a, b, out):
    """A network (Network.kernel_args) on inputs (rows, in); out (rows, outputs) float32. a and b are
    flat scratch buffers of at least rows x the widest layer (scratch())."""
    weights, biases, in_mean, in_std, out_mean, out_std, activation = net
    rows, n = inputs.shape[0], in_mean.shape[0]
    h = a[:rows * n].reshape(rows, n)
    for r in range(rows):
        for c in range(n):
            h[r, c] = (inputs[r, c] - in_mean[c]) / in_std[c]
    last = len(weights) - 1
    for k in range(last + 1):
        w = weights[k]
        nxt = b[:rows * w.shape[1]].reshape(rows, w.shape[1])
        dense(h, w, biases[k], nxt, activation if k < last else 0)
        h = nxt
        a, b = b, a
    for r in range(rows):
        for c in range(out_mean.shape[0]):
            out[r, c] = h[r, c] * out_std[c] + out_mean[c]


def scratch(model_or_net, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Two flat float32 buffers of rows x the widest layer, for forward()."""
    nets = (model_or_net.decompressor, model_or_net.stepper, model_or_net.projector) \
        if isinstance(model_or_net, LearnedModel) else (model_or_net,)
    width = max(max(w.shape[0], w.shape[1]) for n in nets for w in n.weights)
    return np.empty(rows * width, np.float32), np.empty(rows * width, np.float32)


def evaluate(net: Network, inputs: np.ndarray) -> np.ndarray:
    """Run a network on (B, in) inputs; (B, out) float32."""
    inputs = np.ascontiguousarray(inputs, dtype=np.float32)
    out = np.empty((inputs.shape[0], net.outputs), np.float32)
    forward(inputs, net.kernel_args, *scratch(net, inputs.shape[0]), out)
    return out


@numba.njit(cache=True)
def two_columns_quat(t0, t1, t2, t3, t4, t5):
    """A rotation matrix given by its first two columns -> unit quaternion (w, x, y, z), w >= 0.

    The columns are re-orthonormalized first (Gram-Schmidt), so any network output maps to a rotation."""
    n = np.sqrt(t0 * t0 + t1 * t1 + t2 * t2) + 1e-12
    ax, ay, az = t0 / n, t1 / n, t2 / n
    d = ax * t3 + ay * t4 + az * t5
    bx, by, bz = t3 - d * ax, t4 - d * ay, t5 - d * az
    n = np.sqrt(bx * bx + by * by + bz * bz) + 1e-12
    bx, by, bz = bx / n, by / n, bz / n
    cx, cy, cz = cross3(ax, ay, az, bx, by, bz)
    # The matrix [a b c] has the vectors as columns.
    return qfrom_matrix(ax, bx, cx, ay, by, cy, az, bz, cz)


@numba.njit(cache=True)
def unpack_pose(y, rows, positions, rotations, velocities, angular_velocities, contacts):
    """Decompressor outputs y (m, D) (layout: model.pose_layout) into rows `rows` (m,) of pose arrays
    (.., J, 3|4) and contacts (.., 2) (LearnedPose's conventions: joint 0 at the origin, identity, its
    velocities the root's own-frame ones)."""
    J = positions.shape[1]
    k = J - 1
    rp, rr, rv, ra = 0, 3 * k, 9 * k, 12 * k
    root = 15 * k
    for m in range(rows.shape[0]):
        i = rows[m]
        ym = y[m]
        positions[i, 0] = 0.0
        rotations[i, 0, 0] = 1.0
        rotations[i, 0, 1:] = 0.0
        for c in range(3):
            velocities[i, 0, c] = ym[root + c]
            angular_velocities[i, 0, c] = ym[root + 3 + c]
        for j in range(1, J):
            p, r, v, a = rp + 3 * (j - 1), rr + 6 * (j - 1), rv + 3 * (j - 1), ra + 3 * (j - 1)
            for c in range(3):
                positions[i, j, c] = ym[p + c]
                velocities[i, j, c] = ym[v + c]
                angular_velocities[i, j, c] = ym[a + c]
            w, x, yy, z = two_columns_quat(ym[r], ym[r + 1], ym[r + 2], ym[r + 3], ym[r + 4], ym[r + 5])
            rotations[i, j, 0], rotations[i, j, 1], rotations[i, j, 2], rotations[i, j, 3] = w, x, yy, z
        contacts[i, 0] = ym[root + 6] > 0.5
        contacts[i, 1] = ym[root + 7] > 0.5


def _rows(a) -> tuple[np.ndarray, bool]:
    a = np.asarray(a, dtype=np.float32)
    return (a[None], True) if a.ndim == 1 else (a, False)


def decompress(model: LearnedModel, x, z) -> LearnedPose:
    """The pose of features x (F,)|(B, F) and latent z (Z,)|(B, Z)."""
    x, single = _rows(x)
    z, _ = _rows(z)
    y = evaluate(model.decompressor, np.concatenate([x, z], axis=1))
    b, j = y.shape[0], model.num_joints
    pose = LearnedPose(np.empty((b, j, 3), np.float32), np.empty((b, j, 4), np.float32),
                       np.empty((b, j, 3), np.float32), np.empty((b, j, 3), np.float32), np.empty((b, 2), np.bool_))
    unpack_pose(y, np.arange(b), *pose)
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
