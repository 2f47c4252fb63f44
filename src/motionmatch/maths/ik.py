"""Leg touch-ups: analytical two-joint IK and toe re-aim (foot locking is in touchups.py).

World space, metres, seconds, Y up, quaternions (w, x, y, z). The leg is a (hip) - b (knee) - c (ankle).
The solver keeps the leg's current bend plane (the plane through hip, knee and ankle, rotated the
shortest way so it contains the target), never straightens the knee fully (reach is limited to
(upper + lower) * (1 - buffer)) and rotates the hip and knee joints only; the foot's world rotation is
the caller's choice (apply_leg_ik keeps the animated one). The scalar kernels are numba-compiled so
that one leg costs a few microseconds.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from .kinematics import fk_subtrees_into
from .rotations import quat_inv, quat_mul

# ----------------------------------------------------------------------------------------------
# Scalar helpers (numba). Vectors are passed as separate floats to stay allocation free.


from .scalar_quat import cross3 as _cross, norm3 as _norm3, qfrom_matrix, qmul as _qmul, qrot as _qrot


@numba.njit(cache=True, error_model="numpy")
def _qbetween_unit(ux, uy, uz, vx, vy, vz):
    """Shortest rotation taking unit u to unit v."""
    cx, cy, cz = _cross(ux, uy, uz, vx, vy, vz)
    w = 1.0 + ux * vx + uy * vy + uz * vz
    if w < 1e-9:
        # Opposite: half turn about any axis perpendicular to u.
        if abs(ux) < 0.9:
            cx, cy, cz = _cross(ux, uy, uz, 1.0, 0.0, 0.0)
        else:
            cx, cy, cz = _cross(ux, uy, uz, 0.0, 1.0, 0.0)
        w = 0.0
    n = math.sqrt(w * w + cx * cx + cy * cy + cz * cz)
    return w / n, cx / n, cy / n, cz / n


@numba.njit(cache=True, error_model="numpy")
def _frame_rotation(ux, uy, uz, nx, ny, nz, px, py, pz, mx, my, mz):
    """Rotation taking the orthonormal pair (u, n) onto the orthonormal pair (p, m)."""
    wx, wy, wz = _cross(ux, uy, uz, nx, ny, nz)
    qx, qy, qz = _cross(px, py, pz, mx, my, mz)
    # M = p u^T + m n^T + q w^T
    return qfrom_matrix(
        px * ux + mx * nx + qx * wx, px * uy + mx * ny + qx * wy, px * uz + mx * nz + qx * wz,
        py * ux + my * nx + qy * wx, py * uy + my * ny + qy * wy, py * uz + my * nz + qy * wz,
        pz * ux + mz * nx + qz * wx, pz * uy + mz * ny + qz * wy, pz * uz + mz * nz + qz * wz)


@numba.njit(cache=True, error_model="numpy")
def _two_joint_ik_core(a, b, c, t, pole, a_gr, b_gr, buffer, keep=False):
    """_two_joint_ik_kernel on tuples (no arrays: nothing to allocate or reference-count per leg); returns
    (hip world rotation, knee world rotation, reached end), tuples of 4, 4 and 3. keep: a limb posed straighter
    than the buffer allows may stay as straight (the reach is at least its current one)."""
    lab = _norm3(b[0] - a[0], b[1] - a[1], b[2] - a[2])
    lcb = _norm3(c[0] - b[0], c[1] - b[1], c[2] - b[2])
    acx, acy, acz = c[0] - a[0], c[1] - a[1], c[2] - a[2]
    lac = _norm3(acx, acy, acz)
    atx, aty, atz = t[0] - a[0], t[1] - a[1], t[2] - a[2]
    lat = _norm3(atx, aty, atz)
    if lab < 1e-9 or lcb < 1e-9 or lac < 1e-9:
        return a_gr, b_gr, c
    ux, uy, uz = acx / lac, acy / lac, acz / lac          # current hip->ankle direction
    if lat < 1e-9:
        dx, dy, dz = ux, uy, uz
    else:
        dx, dy, dz = atx / lat, aty / lat, atz / lat       # wanted hip->ankle direction
    reach = lat
    max_reach = (lab + lcb) * (1.0 - buffer)
    if keep and lac > max_reach:
        max_reach = min(lac, lab + lcb)
    min_reach = abs(lab - lcb) * (1.0 + buffer) + 1e-6
    if reach > max_reach:
        reach = max_reach
    if reach < min_reach:
        reach = min_reach

    bx, by, bz = (b[0] - a[0]) / lab, (b[1] - a[1]) / lab, (b[2] - a[2]) / lab
    # Bend plane normal of the current pose; a straight leg has none, then the pole hint decides.
    nx, ny, nz = _cross(ux, uy, uz, bx, by, bz)
    ln = _norm3(nx, ny, nz)
    if ln < 1e-6:
        pd = pole[0] * ux + pole[1] * uy + pole[2] * uz
        px, py, pz = pole[0] - pd * ux, pole[1] - pd * uy, pole[2] - pd * uz
        if _norm3(px, py, pz) < 1e-9:
            if abs(ux) < 0.9:
                px, py, pz = _cross(ux, uy, uz, 1.0, 0.0, 0.0)
            else:
                px, py, pz = _cross(ux, uy, uz, 0.0, 1.0, 0.0)
        nx, ny, nz = _cross(ux, uy, uz, px, py, pz)
        ln = _norm3(nx, ny, nz)
    nx, ny, nz = nx / ln, ny / ln, nz / ln
    # Turn the plane the shortest way so it contains the target direction.
    rw, rx, ry, rz = _qbetween_unit(ux, uy, uz, dx, dy, dz)
    mx, my, mz = _qrot(rw, rx, ry, rz, nx, ny, nz)
    lm = _norm3(mx, my, mz)
    mx, my, mz = mx / lm, my / lm, mz / lm
    kx, ky, kz = _cross(mx, my, mz, dx, dy, dz)          # towards the knee, perpendicular to d

    cos_a = (lab * lab + reach * reach - lcb * lcb) / (2.0 * lab * reach)
    cos_a = min(1.0, max(-1.0, cos_a))
    sin_a = math.sqrt(max(0.0, 1.0 - cos_a * cos_a))
    nbx = cos_a * dx + sin_a * kx                        # new upper-bone direction
    nby = cos_a * dy + sin_a * ky
    nbz = cos_a * dz + sin_a * kz
    kneex, kneey, kneez = a[0] + lab * nbx, a[1] + lab * nby, a[2] + lab * nbz
    endx, endy, endz = a[0] + reach * dx, a[1] + reach * dy, a[2] + reach * dz

    qw, qx, qy, qz = _frame_rotation(bx, by, bz, nx, ny, nz, nbx, nby, nbz, mx, my, mz)
    out_a = _qmul(qw, qx, qy, qz, a_gr[0], a_gr[1], a_gr[2], a_gr[3])

    cx0, cy0, cz0 = (c[0] - b[0]) / lcb, (c[1] - b[1]) / lcb, (c[2] - b[2]) / lcb
    cx1, cy1, cz1 = (endx - kneex) / lcb, (endy - kneey) / lcb, (endz - kneez) / lcb
    l1 = _norm3(cx1, cy1, cz1)
    cx1, cy1, cz1 = cx1 / l1, cy1 / l1, cz1 / l1
    qw, qx, qy, qz = _frame_rotation(cx0, cy0, cz0, nx, ny, nz, cx1, cy1, cz1, mx, my, mz)
    out_b = _qmul(qw, qx, qy, qz, b_gr[0], b_gr[1], b_gr[2], b_gr[3])
    return out_a, out_b, (endx, endy, endz)


@numba.njit(cache=True, error_model="numpy")
def _two_joint_ik_kernel(a, b, c, t, pole, a_gr, b_gr, buffer, out_a, out_b, out_c):
    qa, qb, end = _two_joint_ik_core((a[0], a[1], a[2]), (b[0], b[1], b[2]), (c[0], c[1], c[2]), (t[0], t[1], t[2]),
                                     (pole[0], pole[1], pole[2]), (a_gr[0], a_gr[1], a_gr[2], a_gr[3]),
                                     (b_gr[0], b_gr[1], b_gr[2], b_gr[3]), buffer)
    out_a[0], out_a[1], out_a[2], out_a[3] = qa
    out_b[0], out_b[1], out_b[2], out_b[3] = qb
    out_c[0], out_c[1], out_c[2] = end


_ZERO3 = np.zeros(3)


def two_joint_ik(a, b, c, target, a_grot, b_grot, pole=None, buffer: float = 0.01):
    """Hip/knee world rotations that bring the ankle to `target` (world, metres).

    a, b, c: (3,) world positions of the upper joint (hip), lower joint (knee) and end (ankle);
    a_grot, b_grot: (4,) their world rotations. pole: (3,) hint for the knee direction used only when
    the leg is exactly straight (else the current bend plane is kept). The reach is clamped to
    (|ab| + |bc|) * (1 - buffer), so an unreachable target leaves the knee slightly bent and the ankle
    on the hip->target line. Returns (a_grot_new (4,), b_grot_new (4,), reached end position (3,)).
    """
    out_a = np.empty(4)
    out_b = np.empty(4)
    out_c = np.empty(3)
    _two_joint_ik_kernel(np.asarray(a, np.float64), np.asarray(b, np.float64), np.asarray(c, np.float64),
                         np.asarray(target, np.float64),
                         _ZERO3 if pole is None else np.asarray(pole, np.float64),
                         np.asarray(a_grot, np.float64), np.asarray(b_grot, np.float64), float(buffer),
                         out_a, out_b, out_c)
    return out_a, out_b, out_c


@numba.njit(cache=True, error_model="numpy")
def _toe_fix_kernel(foot, foot_gr, toe, ground, out_q, out_toe):
    vx, vy, vz = toe[0] - foot[0], toe[1] - foot[1], toe[2] - foot[2]
    for k in range(4):
        out_q[k] = foot_gr[k]
    for k in range(3):
        out_toe[k] = toe[k]
    if toe[1] >= ground:
        return
    length = _norm3(vx, vy, vz)
    horiz = math.sqrt(vx * vx + vz * vz)
    if length < 1e-9:
        return
    dy = ground - foot[1]
    if dy > length:
        dy = length                                      # the best we can do: toe straight up
    if horiz < 1e-9:
        hx, hz = 1.0, 0.0
    else:
        hx, hz = vx / horiz, vz / horiz
    h = math.sqrt(max(0.0, length * length - dy * dy))
    wx, wy, wz = hx * h, dy, hz * h
    qw, qx, qy, qz = _qbetween_unit(vx / length, vy / length, vz / length,
                                    wx / length, wy / length, wz / length)
    out_q[0], out_q[1], out_q[2], out_q[3] = _qmul(qw, qx, qy, qz, foot_gr[0], foot_gr[1], foot_gr[2], foot_gr[3])
    out_toe[0], out_toe[1], out_toe[2] = foot[0] + wx, foot[1] + wy, foot[2] + wz


def toe_ground_fix(foot_pos, foot_grot, toe_pos, ground_height: float):
    """Pitch the foot about the ankle so the toe joint is not below `ground_height` (metres).

    The toe keeps its heading and distance from the ankle; nothing changes when the toe is already on
    or above the ground. Returns (new foot world rotation (4,), new toe position (3,)). The toe's local
    rotation is meant to be kept, so the toe follows the foot.
    """
    out_q = np.empty(4)
    out_toe = np.empty(3)
    _toe_fix_kernel(np.asarray(foot_pos, np.float64), np.asarray(foot_grot, np.float64),
                    np.asarray(toe_pos, np.float64), float(ground_height), out_q, out_toe)
    return out_q, out_toe


@numba.njit(cache=True, error_model="numpy")
def _inv_mul_into(p, q, out):
    """out = p^-1 * q for unit quaternions."""
    out[0], out[1], out[2], out[3] = _qmul(p[0], -p[1], -p[2], -p[3], q[0], q[1], q[2], q[3])


@numba.njit(cache=True, error_model="numpy")
def _globals_to_locals_kernel(grot, parents, local):
    for j in range(grot.shape[0]):
        p = parents[j]
        if p < 0:
            for k in range(4):
                local[j, k] = grot[j, k]
        else:
            _inv_mul_into(grot[p], grot[j], local[j])


def globals_to_locals(grot: np.ndarray, parents) -> np.ndarray:
    """Local rotations (..., J, 4) from world rotations (..., J, 4): parent^-1 * joint; the root keeps
    its world rotation."""
    grot = np.asarray(grot, dtype=np.float64)
    parents = np.asarray(parents, dtype=np.int64)
    if grot.ndim == 2:
        local = np.empty_like(grot)
        _globals_to_locals_kernel(np.ascontiguousarray(grot), parents, local)
        return local
    par = np.where(parents < 0, 0, parents)
    local = quat_mul(quat_inv(grot[..., par, :]), grot)
    local[..., parents < 0, :] = grot[..., parents < 0, :]
    return local


# ----------------------------------------------------------------------------------------------
# Whole-pose entry point


def _solve_leg(gpos, grot, parents, up, lo, ft, toe, target, toe_ground, local):
    c = gpos[ft]
    toe_vec = gpos[toe] - c if toe is not None else None
    # Pole for a straight leg: the foot's forward direction (the knee bends that way).
    pole = toe_vec if toe_vec is not None else _ZERO3
    a_new, b_new, c_new = two_joint_ik(gpos[up], gpos[lo], c, target, grot[up], grot[lo], pole=pole)
    foot_gr = grot[ft]
    if toe is not None and toe_ground is not None:
        foot_gr, _ = toe_ground_fix(c_new, foot_gr, c_new + toe_vec, float(toe_ground))
    p = parents[up]
    if p >= 0:
        _inv_mul_into(grot[p], a_new, local[up])
    else:
        local[up] = a_new
    _inv_mul_into(a_new, b_new, local[lo])
    _inv_mul_into(b_new, foot_gr, local[ft])


def apply_leg_ik(gpos: np.ndarray, grot: np.ndarray, parents, roles: dict, left_target=None,
                 right_target=None, toe_ground=(None, None), local_rot=None) -> np.ndarray:
    """Local rotations (J, 4) of the pose with both legs solved towards their ankle targets.

    gpos (J, 3) / grot (J, 4): world positions and rotations of the pose; parents (J,); roles: the
    skeleton roles (left/right upper_leg, lower_leg, foot, toe). left_target / right_target: (3,) world
    ankle targets, None leaves that leg as animated. toe_ground: (left, right) ground heights (metres)
    under the toes, None skips the toe fix. Feet keep their animated world rotation (apart from the
    toe fix); the toes keep their local rotation. local_rot: the pose's local rotations when the
    caller has them (saves recomputing them from grot; only the leg joints are overwritten).
    """
    gpos = np.asarray(gpos, dtype=np.float64)
    grot = np.asarray(grot, dtype=np.float64)
    parents = np.asarray(parents)
    local = globals_to_locals(grot, parents) if local_rot is None else np.array(local_rot, dtype=np.float64)
    for side, target, tg in (("left", left_target, toe_ground[0]), ("right", right_target, toe_ground[1])):
        if target is None and tg is None:
            continue
        up, lo, ft = roles[f"{side}_upper_leg"], roles[f"{side}_lower_leg"], roles[f"{side}_foot"]
        toe = roles.get(f"{side}_toe")
        tgt = gpos[ft] if target is None else np.asarray(target, dtype=np.float64)
        _solve_leg(gpos, grot, parents, up, lo, ft, toe, tgt, tg, local)
    return local


# ----------------------------------------------------------------------------------------------
# Both legs and the pose's forward kinematics in one compiled call (the character's frame loop)


@numba.njit(cache=True, error_model="numpy")
def _solve_leg_kernel(gpos, grot, parents, leg, tgt, has_ground, toe_ground, local, buffer=0.01, keep=False):
    """_solve_leg with a toe joint, compiled: the same arithmetic, local rotations written in place.
    leg: (upper leg, lower leg, foot, toe) joints; tgt (3,) the ankle target. Points and rotations are
    tuples, not arrays: a crowd tick solves 20,000 legs, and each array is an allocation."""
    up, lo, ft, toe = leg[0], leg[1], leg[2], leg[3]
    c = (gpos[ft, 0], gpos[ft, 1], gpos[ft, 2])
    toe_vec = (gpos[toe, 0] - c[0], gpos[toe, 1] - c[1], gpos[toe, 2] - c[2])
    out_a, out_b, out_c = _two_joint_ik_core(
        (gpos[up, 0], gpos[up, 1], gpos[up, 2]), (gpos[lo, 0], gpos[lo, 1], gpos[lo, 2]), c, (tgt[0], tgt[1], tgt[2]),
        toe_vec, (grot[up, 0], grot[up, 1], grot[up, 2], grot[up, 3]), (grot[lo, 0], grot[lo, 1], grot[lo, 2], grot[lo, 3]),
        buffer, keep)
    fw, fx, fy, fz = grot[ft, 0], grot[ft, 1], grot[ft, 2], grot[ft, 3]
    if has_ground:
        foot = np.array(out_c)
        toe_pos = np.empty(3)
        for k in range(3):
            toe_pos[k] = out_c[k] + toe_vec[k]
        fixed = np.empty(4)
        _toe_fix_kernel(foot, grot[ft], toe_pos, toe_ground, fixed, np.empty(3))
        fw, fx, fy, fz = fixed[0], fixed[1], fixed[2], fixed[3]
    p = parents[up]
    if p >= 0:
        local[up, 0], local[up, 1], local[up, 2], local[up, 3] = _qmul(grot[p, 0], -grot[p, 1], -grot[p, 2], -grot[p, 3],
                                                                       out_a[0], out_a[1], out_a[2], out_a[3])
    else:
        local[up, 0], local[up, 1], local[up, 2], local[up, 3] = out_a
    local[lo, 0], local[lo, 1], local[lo, 2], local[lo, 3] = _qmul(out_a[0], -out_a[1], -out_a[2], -out_a[3],
                                                                   out_b[0], out_b[1], out_b[2], out_b[3])
    local[ft, 0], local[ft, 1], local[ft, 2], local[ft, 3] = _qmul(out_b[0], -out_b[1], -out_b[2], -out_b[3],
                                                                   fw, fx, fy, fz)


@numba.njit(cache=True, error_model="numpy")
def legs_pose(lpos, lrot, gpos, grot, parents, legs, targets, ground_mask, grounds, drop, buffer=0.01, keep=False):
    """Both legs toward their ankle targets (2, 3) and the pose's forward kinematics (apply_leg_ik_in_place);
    bit k of ground_mask: leg k's toe is kept above grounds[k] (m); buffer: the IK's reach limit (a share of the
    leg's length short of straight); keep: a leg posed straighter than that may stay that straight (the touch-ups: the buffer bent every straighter played knee to 164
    degrees, where the actor side-steps at 158-161 and walks backward at 163)."""
    if drop != 0.0:
        # The whole pose moves down: its world positions with it (no forward kinematics pass needed).
        lpos[0, 1] -= drop
        for j in range(gpos.shape[0]):
            gpos[j, 1] -= drop
    for leg in range(2):
        _solve_leg_kernel(gpos, grot, parents, legs[leg], targets[leg], (ground_mask & (1 << leg)) != 0, grounds[leg],
                          lrot, buffer, keep)
    # Only the legs' local rotations changed: their joints and what hangs from them move.
    fk_subtrees_into(lpos, lrot, parents, gpos, grot, legs[:, 0])


def leg_chains(roles: dict) -> np.ndarray:
    """(2, 4) int64 joint indices (upper leg, lower leg, foot, toe) of the left and right legs, for
    apply_leg_ik_in_place."""
    return np.array([[roles[f"{side}_{part}"] for part in ("upper_leg", "lower_leg", "foot", "toe")]
                     for side in ("left", "right")], dtype=np.int64)


def apply_leg_ik_in_place(local_pos: np.ndarray, local_rot: np.ndarray, gpos: np.ndarray, grot: np.ndarray,
                          parents: np.ndarray, legs: np.ndarray, left_target, right_target,
                          toe_ground=(None, None), drop: float = 0.0) -> None:
    """apply_leg_ik on a whole pose in place, followed by its forward kinematics, in one compiled call.

    local_pos (J, 3) / local_rot (J, 4) with gpos (J, 3) / grot (J, 4) their forward kinematics, all
    C-contiguous float64; parents (J,) int64; legs from leg_chains. When drop != 0 the root is first
    lowered by `drop` metres (local_pos[0, 1] -= drop) and the world pose recomputed. Both legs are then
    solved toward their world ankle targets (3,) exactly as apply_leg_ik does (toe_ground: per leg the
    ground height under the toe or None), local_rot gets the new hip, knee and foot rotations and
    gpos / grot the new world pose.
    """
    lg, rg = toe_ground
    mask = (lg is not None) | ((rg is not None) << 1)
    targets = np.array([left_target, right_target], dtype=np.float64).reshape(2, 3)
    grounds = np.array([0.0 if lg is None else float(lg), 0.0 if rg is None else float(rg)])
    legs_pose(local_pos, local_rot, gpos, grot, parents, legs, targets, int(mask), grounds, float(drop))
