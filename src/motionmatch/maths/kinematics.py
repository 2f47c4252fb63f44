"""Forward kinematics: local joint transforms to world (or character) space.

Joints are ordered so that every parent comes before its children (BVH order guarantees it).
Positions in metres, quaternions (w, x, y, z).
"""
from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, error_model="numpy", fastmath=False)
def _fk_kernel(lpos, lrot, parents, gpos, grot):
    F, J = lpos.shape[0], lpos.shape[1]
    for f in range(F):
        for j in range(J):
            p = parents[j]
            if p < 0:
                for k in range(3):
                    gpos[f, j, k] = lpos[f, j, k]
                for k in range(4):
                    grot[f, j, k] = lrot[f, j, k]
                continue
            aw, ax, ay, az = grot[f, p, 0], grot[f, p, 1], grot[f, p, 2], grot[f, p, 3]
            bw, bx, by, bz = lrot[f, j, 0], lrot[f, j, 1], lrot[f, j, 2], lrot[f, j, 3]
            grot[f, j, 0] = aw * bw - ax * bx - ay * by - az * bz
            grot[f, j, 1] = aw * bx + ax * bw + ay * bz - az * by
            grot[f, j, 2] = aw * by - ax * bz + ay * bw + az * bx
            grot[f, j, 3] = aw * bz + ax * by - ay * bx + az * bw
            vx, vy, vz = lpos[f, j, 0], lpos[f, j, 1], lpos[f, j, 2]
            # v + 2w(q x v) + 2 q x (q x v)
            tx = 2.0 * (ay * vz - az * vy)
            ty = 2.0 * (az * vx - ax * vz)
            tz = 2.0 * (ax * vy - ay * vx)
            gpos[f, j, 0] = gpos[f, p, 0] + vx + aw * tx + (ay * tz - az * ty)
            gpos[f, j, 1] = gpos[f, p, 1] + vy + aw * ty + (az * tx - ax * tz)
            gpos[f, j, 2] = gpos[f, p, 2] + vz + aw * tz + (ax * ty - ay * tx)


def forward_kinematics(local_pos: np.ndarray, local_rot: np.ndarray, parents) -> tuple[np.ndarray, np.ndarray]:
    """World positions (..., J, 3) and rotations (..., J, 4) from local ones.

    local_pos: (..., J, 3) joint translations relative to the parent (offsets for most joints);
    local_rot: (..., J, 4); parents: (J,) with -1 for the root.
    """
    local_pos = np.asarray(local_pos)
    local_rot = np.asarray(local_rot)
    lead = local_pos.shape[:-2]
    J = local_pos.shape[-2]
    lp = np.ascontiguousarray(local_pos.reshape(-1, J, 3), dtype=np.float64)
    lr = np.ascontiguousarray(local_rot.reshape(-1, J, 4), dtype=np.float64)
    gp = np.empty_like(lp)
    gr = np.empty_like(lr)
    _fk_kernel(lp, lr, np.asarray(parents, dtype=np.int64), gp, gr)
    return gp.reshape(lead + (J, 3)), gr.reshape(lead + (J, 4))


@numba.njit(cache=True, error_model="numpy", inline="always")
def _fk_joint(lpos, lrot, parents, gpos, grot, j):
    """Joint j's world transform from its parent's (fk_pose_into's arithmetic)."""
    p = parents[j]
    if p < 0:
        for k in range(3):
            gpos[j, k] = lpos[j, k]
        for k in range(4):
            grot[j, k] = lrot[j, k]
        return
    aw, ax, ay, az = grot[p, 0], grot[p, 1], grot[p, 2], grot[p, 3]
    bw, bx, by, bz = lrot[j, 0], lrot[j, 1], lrot[j, 2], lrot[j, 3]
    grot[j, 0] = aw * bw - ax * bx - ay * by - az * bz
    grot[j, 1] = aw * bx + ax * bw + ay * bz - az * by
    grot[j, 2] = aw * by - ax * bz + ay * bw + az * bx
    grot[j, 3] = aw * bz + ax * by - ay * bx + az * bw
    vx, vy, vz = lpos[j, 0], lpos[j, 1], lpos[j, 2]
    tx = 2.0 * (ay * vz - az * vy)
    ty = 2.0 * (az * vx - ax * vz)
    tz = 2.0 * (ax * vy - ay * vx)
    gpos[j, 0] = gpos[p, 0] + vx + aw * tx + (ay * tz - az * ty)
    gpos[j, 1] = gpos[p, 1] + vy + aw * ty + (az * tx - ax * tz)
    gpos[j, 2] = gpos[p, 2] + vz + aw * tz + (ax * ty - ay * tx)


@numba.njit(cache=True, error_model="numpy", fastmath=False)
def fk_pose_into(lpos, lrot, parents, gpos, grot):
    """Forward kinematics of one pose (J, 3) / (J, 4) into preallocated gpos / grot (float64).

    For compiled callers (one frame of a character): the same arithmetic as forward_kinematics without
    its reshaping and allocations. gpos / grot may hold an older pose: each joint reads only its
    parent's new transform."""
    for j in range(lpos.shape[0]):
        _fk_joint(lpos, lrot, parents, gpos, grot, j)


@numba.njit(cache=True, error_model="numpy")
def fk_subtrees_into(lpos, lrot, parents, gpos, grot, tops):
    """fk_pose_into for the joints `tops` (int array) and their descendants only, the others' gpos / grot
    being already those of this pose: after a change of the legs' local rotations, a third of the
    skeleton instead of all of it (same arithmetic, same results). Skeletons over 64 joints: all."""
    J = lpos.shape[0]
    if J > 64:
        fk_pose_into(lpos, lrot, parents, gpos, grot)
        return
    moved = 0                   # bit j: joint j is recomputed (parents come before their children)
    for t in tops:
        moved |= 1 << t
    for j in range(J):
        p = parents[j]
        if (moved >> j) & 1 or (p >= 0 and (moved >> p) & 1):
            moved |= 1 << j
            _fk_joint(lpos, lrot, parents, gpos, grot, j)
