"""Upper-body touch-ups for a VR avatar (seed 002, sections 4.2.2 and 4.3), as pure functions on one
pose: arms by two-joint IK to the controllers with the upper body leaning when they are out of reach, the
head turned to the HMD, and the root clamped near the HMD's floor projection.

Poses are local positions (J, 3) and rotations (J, 4) of any skeleton with `parents` and skeleton roles
(skeleton.find_roles); device poses are world positions (3,) and rotations (4,) in the device frames of
trackers.py, and `calibration` is trackers.device_calibration of that skeleton (joint -> device frame).
Metres, quaternions (w, x, y, z), Y up.
"""
from __future__ import annotations

import numpy as np

from ..maths.kinematics import forward_kinematics
from ..maths.rotations import (quat_between, quat_from_matrix, quat_from_scaled_angle_axis, quat_inv_mul,
                               quat_mul, quat_mul_inv, quat_normalize, quat_rotate, quat_to_scaled_angle_axis)
from ..maths.ik import two_joint_ik

# The centre of the head, an estimate of the point that moves least when the head turns, relative to
# the HMD in its own frame (about 10 cm behind the eyes).
HEAD_CENTRE_FROM_HMD = np.array([0.0, -0.02, -0.10])
ROOT_ALPHA_TIGHT = 0.1
ROOT_ALPHA_LOOSE = 0.3
# The root clamp radius a caller may ask for (m): beyond 2 m the root no longer follows the person.
ROOT_ALPHA_RANGE = (0.01, 2.0)


def arm_chain(parents, roles: dict[str, int], side: str) -> tuple[int, int, int]:
    """(upper arm, forearm, hand) joint indices of side 'left' or 'right': the hand and its two parents."""
    hand = roles[f"{side}_hand"]
    lower = int(parents[hand])
    return int(parents[lower]), lower, hand


def device_targets(positions, rotations, calibration, hand_offset=(0.0, 0.0, 0.0)):
    """World positions (2, 3) and rotations (2, 4) the left and right hand joints should take for the
    controller poses positions (3, 3) / rotations (3, 4) in trackers.DEVICES order, and the head
    joint's world rotation (4,) for the HMD."""
    rotations = np.asarray(rotations, np.float64)
    joint_rot = quat_mul_inv(rotations, calibration)
    hand_pos = np.asarray(positions[1:], np.float64) - quat_rotate(rotations[1:], np.asarray(hand_offset, np.float64))
    return hand_pos, joint_rot[1:], joint_rot[0]


def _set_global_rotation(local_rot, grot, parents, joint, world):
    p = parents[joint]
    local_rot[joint] = world if p < 0 else quat_normalize(quat_inv_mul(grot[p], world))


def lean_chest(local_pos, local_rot, parents, roles, hand_targets, buffer: float = 0.01,
               max_lean_deg: float = 35.0) -> np.ndarray:
    """Local rotations (J, 4) with the upper body leaning (the spine joint turned) so that shoulders
    move toward controllers beyond the arms' reach: the rotation about the spine joint that best
    carries each shoulder to where its arm would just reach (shoulders within reach stay), at most
    max_lean_deg."""
    local_rot = np.array(local_rot, np.float64, copy=True)
    gpos, grot = forward_kinematics(local_pos[None], local_rot[None], parents)
    gpos, grot = gpos[0], grot[0]
    pivot = roles["spine"]
    src, dst, lean = [], [], False
    for side, target in zip(("left", "right"), hand_targets):
        upper, lower, hand = arm_chain(parents, roles, side)
        reach = (np.linalg.norm(gpos[lower] - gpos[upper]) + np.linalg.norm(gpos[hand] - gpos[lower])) * (1 - buffer)
        to_target = np.asarray(target, np.float64) - gpos[upper]
        dist = np.linalg.norm(to_target)
        shoulder = gpos[upper] - gpos[pivot]
        src.append(shoulder)
        dst.append(shoulder + (to_target * (1 - reach / dist) if dist > reach else 0.0))
        lean |= dist > reach
    if not lean:
        return local_rot
    # Best rotation of the two shoulders onto their goals (Kabsch, no reflection).
    u, _, vt = np.linalg.svd(np.array(src).T @ np.array(dst))
    d = np.sign(np.linalg.det(vt.T @ u.T))
    r = vt.T @ np.diag([1.0, 1.0, d]) @ u.T
    lean_vec = quat_to_scaled_angle_axis(quat_from_matrix(r))
    angle = np.linalg.norm(lean_vec)
    limit = np.radians(max_lean_deg)
    if angle > limit:
        lean_vec *= limit / angle
    _set_global_rotation(local_rot, grot, parents, pivot, quat_mul(quat_from_scaled_angle_axis(lean_vec), grot[pivot]))
    return local_rot


def lean_head(local_pos, local_rot, parents, roles, head_target, max_lean_deg: float = 30.0) -> np.ndarray:
    """Local rotations (J, 4) with the upper body bent at the spine joint so that the head joint moves
    toward head_target (3,) world (the head's place under the HMD): the shortest rotation of the
    spine-to-head direction onto the spine-to-target one, at most max_lean_deg. Only the direction is
    matched (the spine does not stretch), so a target far below the head is the legs' work."""
    local_rot = np.array(local_rot, np.float64, copy=True)
    gpos, grot = forward_kinematics(local_pos[None], local_rot[None], np.asarray(parents))
    gpos, grot = gpos[0], grot[0]
    pivot = roles["spine"]
    lean = quat_to_scaled_angle_axis(quat_between(gpos[roles["head"]] - gpos[pivot],
                                                  np.asarray(head_target, np.float64) - gpos[pivot]))
    angle, limit = np.linalg.norm(lean), np.radians(max_lean_deg)
    if angle > limit:
        lean *= limit / angle
    _set_global_rotation(local_rot, grot, np.asarray(parents), pivot,
                         quat_mul(quat_from_scaled_angle_axis(lean), grot[pivot]))
    return local_rot


def reach_arms(local_pos, local_rot, parents, roles, hand_targets, hand_rotations=None,
               buffer: float = 0.01, max_lean_deg: float = 35.0) -> np.ndarray:
    """Local rotations (J, 4) with the hands on hand_targets (2, 3), left then right: the upper body
    leans toward out-of-reach targets (lean_chest), then two-joint IK per arm keeping the current elbow plane;
    the hands take hand_rotations (2, 4) world when given. Targets within reach end within
    `buffer` of the arm's length of the target (sub-centimetre)."""
    parents = np.asarray(parents)
    local_rot = lean_chest(local_pos, local_rot, parents, roles, hand_targets, buffer, max_lean_deg)
    for i, side in enumerate(("left", "right")):
        gpos, grot = forward_kinematics(local_pos[None], local_rot[None], parents)
        gpos, grot = gpos[0], grot[0]
        upper, lower, hand = arm_chain(parents, roles, side)
        up_rot, low_rot, _ = two_joint_ik(gpos[upper], gpos[lower], gpos[hand], hand_targets[i],
                                          grot[upper], grot[lower], buffer=buffer)
        _set_global_rotation(local_rot, grot, parents, upper, up_rot)
        local_rot[lower] = quat_normalize(quat_inv_mul(up_rot, low_rot))
        if hand_rotations is not None:
            local_rot[hand] = quat_normalize(quat_inv_mul(low_rot, hand_rotations[i]))
    return local_rot


def turn_head(local_pos, local_rot, parents, roles, head_rotation) -> np.ndarray:
    """Local rotations (J, 4) with the head joint's world rotation set to head_rotation (4,)."""
    local_rot = np.array(local_rot, np.float64, copy=True)
    _, grot = forward_kinematics(local_pos[None], local_rot[None], np.asarray(parents))
    _set_global_rotation(local_rot, grot[0], np.asarray(parents), roles["head"], np.asarray(head_rotation, np.float64))
    return local_rot


def hmd_floor_target(hmd_position, hmd_rotation) -> np.ndarray:
    """Where the body should stand: the centre of the head projected on the floor (y = 0), (..., 3)."""
    centre = np.asarray(hmd_position, np.float64) + quat_rotate(np.asarray(hmd_rotation, np.float64), HEAD_CENTRE_FROM_HMD)
    centre[..., 1] = 0.0
    return centre


def clamp_root(root_position, target, alpha: float) -> np.ndarray:
    """The root position (..., 3) moved on the floor so that it is at most alpha metres from target
    (the thesis's position accuracy; 0.1 m keeps the avatar under the user, 0.3 m leaves motion
    matching more freedom). The height is kept."""
    root = np.array(root_position, np.float64, copy=True)
    d = root[..., [0, 2]] - np.asarray(target, np.float64)[..., [0, 2]]
    dist = np.linalg.norm(d, axis=-1, keepdims=True)
    scale = np.where(dist > alpha, alpha / np.maximum(dist, 1e-9), 1.0)
    root[..., [0, 2]] = np.asarray(target, np.float64)[..., [0, 2]] + d * scale
    return root
