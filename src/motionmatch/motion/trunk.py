"""Trunk lean against the body's facing, per gait, and a retargeted clip's trunk turned to lean as the
target actor's does at the same gaits.

The trunk is the line from the hips joint to the head joint (posture.trunk_lean_deg measures its angle to
world up in any direction); here it is split in the body's frame: `forward` (degrees, positive leaning
towards the facing) and `side` (degrees, positive leaning to the body's left). The facing is the
horizontal normal of the line between the upper-leg joints (posture.gait_bins').

Why: the CMU side-steps lean forward 8-9 degrees while the jlpm22 actor side-steps at 1-3, and Bandai-Namco's
backward walk leans forward 4.5 where the actor walks backward at -0.5: played in the mixed database, their
frames fell outside the actor's 1st-99th percentile of trunk lean at the same gait (strafe: 90 % of the CMU
frames). Retargeting keeps the source actor's trunk; matching it is one constant turn of the spine per clip.

Inputs are positions of posture.POSTURE_ROLES (F, K, 3), metres, Y up; quaternions w, x, y, z.
"""
from __future__ import annotations

import numpy as np

from ..maths.kinematics import forward_kinematics
from .posture import GAIT_BINS, gait_bins, gait_stand_in, posture_joints, travel_velocity
from ..maths.rotations import quat_inv, quat_mul

_HIPS, _HEAD, _LUL, _RUL = 0, 1, 2, 5       # posture.POSTURE_ROLES
MIN_MOVING_S = 0.5      # a clip moving for less than this (s) keeps its own trunk


def body_axes(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(forward, left) unit horizontal vectors (F, 3) of posture positions p (F, K, 3)."""
    left = (p[:, _LUL] - p[:, _RUL]) * np.array([1.0, 0.0, 1.0])
    left /= np.maximum(np.linalg.norm(left, axis=1, keepdims=True), 1e-12)
    forward = np.stack([-left[:, 2], np.zeros(len(left)), left[:, 0]], axis=1)    # left x up
    return forward, left


def trunk_angles_deg(p: np.ndarray) -> np.ndarray:
    """(F, 2) forward and sideways lean (degrees) of the hips-to-head line in the body's frame."""
    forward, left = body_axes(p)
    t = p[:, _HEAD] - p[:, _HIPS]
    return np.degrees(np.stack([np.arctan2((t * forward).sum(1), t[:, 1]),
                                np.arctan2((t * left).sum(1), t[:, 1])], axis=1))


def actor_trunk(p: np.ndarray, bins: np.ndarray) -> list[list[float]]:
    """Per gait bin (posture.GAIT_BINS) the actor's median [forward, side] lean (degrees) over the bin's
    frames or its stand-in's (posture.gait_stand_in); p (F, K, 3) posture positions, bins (F,)."""
    a = trunk_angles_deg(p)
    return [[float(x) for x in np.median(a[gait_stand_in(bins, b)], axis=0)] for b in range(GAIT_BINS)]


def match_trunk(parents, roles: dict, t_pos: np.ndarray, t_rot: np.ndarray, fps: float, actor: list) -> np.ndarray:
    """Turn a clip's spine joint (the `spine` role, else `chest`) in place by one constant forward and
    sideways angle in the body's frame, so the median over the clip's moving frames of the actor's lean at
    the frame's gait (`actor`: actor_trunk) minus the clip's own is zero (a clip moving for less than
    MIN_MOVING_S keeps its trunk). t_pos (F, J, 3) metres and t_rot
    (F, J, 4) local; fps frames per second. Returns the [forward, side] turn given (degrees).

    Turning about the spine joint moves the head less than a turn about the hips would: two passes."""
    P = np.asarray(parents)
    spine = roles.get("spine", roles["chest"])
    joints = posture_joints(roles)
    total = np.zeros(2)
    for _ in range(2):
        gpos, grot = forward_kinematics(t_pos, t_rot, P)
        p = gpos[:, joints]
        bins = gait_bins(p, travel_velocity(p[:, _HIPS], fps))
        # Moving frames only: a clip's standing frames may be a bow or a wave, whose lean is the action
        # (a bow matched to the actor's upright standing lost a third of its depth).
        moving = bins != 0
        if moving.sum() < MIN_MOVING_S * fps:
            break
        turn = np.median(np.asarray(actor)[bins[moving]] - trunk_angles_deg(p[moving]), axis=0)
        total += turn
        forward, left = body_axes(p)
        # About the left axis a positive angle tips the head forward; about -forward, to the left.
        q = _axis_angle(left, np.radians(turn[0]))
        q = quat_mul(_axis_angle(-forward, np.radians(turn[1])), q)
        g = quat_mul(q, grot[:, spine])
        t_rot[:, spine] = quat_mul(quat_inv(grot[:, P[spine]]), g) if P[spine] >= 0 else g
    return total


def _axis_angle(axis: np.ndarray, angle: float) -> np.ndarray:
    half = 0.5 * angle
    return np.concatenate([np.full((len(axis), 1), np.cos(half)), np.sin(half) * axis], axis=1)
