"""Retargeting motion between humanoid skeletons with T-pose rotation offsets.

Method (seed 002, eq. 3.20-3.23): for a target joint t mapped to a source joint s, with world rotations
q (this frame) and q0 (bind pose), the retargeted world rotation is q_t = q_s (q0_s)^-1 q0_t. It only
works when both bind poses show the same body pose. Real files rarely do (a BVH rest pose may lie on its
side, a first frame may be an A-pose or a walk), so both bind poses are first *normalised to one canonical
T-pose*: facing +Z, Y up, the character's left towards +X, spine/neck/head straight up, legs straight
down, feet and toes horizontal forward, arms and hands straight out sideways. Each limb bone is swung
the shortest way from its bind direction to its canonical one (so the twist about the bone is the one
of the bind pose), the hips and chest are fully aligned (up and left-right axes). Consequently:

- a bind pose only needs to be an upright pose with a natural twist of the limbs (a T-pose, an A-pose or
  a standing/walking frame all work); the bone directions of mapped joints then match the source exactly.
- No bind frame is needed for a source (`source_bind_frame=None`): `find_source_bind` looks at the bone
  directions of the roles. A rest pose (skeleton offsets, identity rotations) that shows a standing
  human (spine and head up, legs down, toes forward, arms anywhere between down and sideways without
  reaching forward: T-pose, A-pose, arms down) is used as it is. Many files' rest poses are not a body
  pose at all (jlpm22 and Bandai-Namco point every bone along one local axis; the twist about each bone
  is then arbitrary), so otherwise the most upright frame of the clip is used (spine closest to vertical,
  legs closest to straight down, arms least forward). `source_bind_frame` stays as an override.
- The target's bind pose is a frame of the target BVH (default 0), or the rest pose for a bare Skeleton.

Joint correspondence: by default the roles of both skeletons (skeleton.find_roles) are paired role by
role, and the joints between two roles along a chain (shoulders, arms, forearms, neck, extra spine
joints) are paired by normalised name (side markers and synonyms such as clavicle/shoulder,
forearm/lowerarm removed), then the rest from the hand/head end inwards; helper joints with 'twist' or
'roll' in their name are never paired by position. An explicit mapping (dict target -> source joint
name, or a TOML file with a [joints] table) replaces the automatic pairing.

Joints without a counterpart: a target joint keeps its (normalised) bind rotation relative to its parent,
so twist bones and extra spine joints ride along rigidly; a source joint's rotation is folded into its
mapped descendants automatically because the formula works on world rotations.

Root: the target hips follow the source hips, scaled by the leg-length ratio (hips above the ankles in
the canonical pose), then shifted vertically so the feet rest on the ground as low as the source's
(5th percentile of the per-frame lowest foot/toe joint).
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .animation import Animation, Skeleton
from ..maths.kinematics import forward_kinematics
from .posture import (POSTURE_ROLES, gait_bins, gait_figures, gait_source, hand_spread_cm, knee_angles_deg, posture_joints,
                      travel_velocity)
from ..maths.rotations import quat_angle, quat_between, quat_from_matrix, quat_identity, quat_inv, quat_mul, quat_rotate
from .skeleton import SkeletonError, arm_chains, check_role_joints, find_roles, load_joint_mapping
from .trunk import actor_trunk, match_trunk
from ..maths.ik import apply_leg_ik_in_place, leg_chains

LEG_ROLES = ("upper_leg", "lower_leg", "foot", "toe")
# A rest pose passes as a standing body when, in the hips' frame, the spine and head are within this of
# up, the thighs and shins within this of down (A-poses and real rests spread the legs by ~20 degrees).
REST_UPRIGHT_DEG = 35.0
# The most upright frame must be at least this upright (worst spine/leg bone off vertical): a clip lying
# on the floor has no usable bind frame.
UPRIGHT_FRAME_DEG = 45.0


class RetargetError(ValueError):
    """Retargeting impossible as asked; the message says what to give instead."""


# ----------------------------------------------------------------------------------------------
# Skeleton structure from roles


def _path(parents, start: int, end: int) -> list[int] | None:
    """Joints from start to end (both included) following parents up from end; None if not a descendant."""
    out = [end]
    j = end
    while j != start:
        j = int(parents[j])
        if j < 0:
            return None
        out.append(j)
    return out[::-1]


def _aims(skel: Skeleton, roles: dict) -> tuple[list[tuple[int, int | None, np.ndarray]], list[tuple[int, int, tuple]]]:
    """Canonical T-pose directions.

    Returns (aims, frames): aims are (joint, next joint on the chain or None for a leaf, canonical unit
    direction); frames are (joint, up-chain next joint, (left joint, right joint)) for full alignment.
    """
    P = skel.parents
    up, down, fwd = np.array([0.0, 1.0, 0.0]), np.array([0.0, -1.0, 0.0]), np.array([0.0, 0.0, 1.0])
    side = {"left": np.array([1.0, 0.0, 0.0]), "right": np.array([-1.0, 0.0, 0.0])}
    aims: dict[int, tuple[int | None, np.ndarray]] = {}
    frames = []

    def chain(a, b, d, include_start=True):
        if a not in roles or b not in roles:
            return None
        p = _path(P, roles[a], roles[b])
        if p is None:
            return None
        for j, nxt in zip(p[:-1], p[1:]):
            if include_start or j != p[0]:
                aims[j] = (nxt, d)
        return p

    spine_path = chain("hips", "spine", up, include_start=False)
    chain("spine", "chest", up)
    head_path = chain("chest", "head", up, include_start=False)
    for s in ("left", "right"):
        chain(f"{s}_upper_leg", f"{s}_lower_leg", down)
        chain(f"{s}_lower_leg", f"{s}_foot", down)
        chain(f"{s}_foot", f"{s}_toe", fwd)
        for leaf, d in ((f"{s}_toe", fwd), (f"{s}_hand", side[s])):
            if leaf in roles:
                aims[roles[leaf]] = (None, d)
    # Arms: only the joints after the left and right chains part (joints shared with the neck chain,
    # e.g. an upper chest above the chest role, stay aimed up).
    arms = arm_chains(P, roles)
    for s, chain_ in arms.items():
        for j, nxt in zip(chain_[:-1], chain_[1:]):
            aims[j] = (nxt, side[s])
    if "head" in roles:
        aims[roles["head"]] = (None, up)
    if spine_path is not None and "left_upper_leg" in roles and "right_upper_leg" in roles:
        frames.append((roles["hips"], spine_path[1], (roles["left_upper_leg"], roles["right_upper_leg"])))
    if head_path is not None and arms:
        frames.append((roles["chest"], head_path[1], (arms["left"][0], arms["right"][0])))
        aims.pop(roles["chest"], None)
    return [(j, n, d) for j, (n, d) in sorted(aims.items())], frames


def _leaf_vector(skel: Skeleton, j: int) -> np.ndarray | None:
    """Local direction of a leaf bone: its End Site, else the mean of its children's offsets."""
    if j in skel.end_sites and np.linalg.norm(skel.end_sites[j]) > 1e-6:
        return np.asarray(skel.end_sites[j], dtype=np.float64)
    kids = skel.children(j)
    if kids:
        v = np.mean([skel.offsets[k] for k in kids], axis=0)
        if np.linalg.norm(v) > 1e-6:
            return v
    return None


def _frame_quat(up: np.ndarray, left: np.ndarray) -> np.ndarray | None:
    """Rotation whose columns are (left, up, forward) from an up and a left vector (Gram-Schmidt);
    None when the vectors do not span a plane."""
    if np.linalg.norm(up) < 1e-9:
        return None
    u = up / np.linalg.norm(up)
    l = left - np.dot(left, u) * u
    if np.linalg.norm(l) < 1e-9:
        return None
    l = l / np.linalg.norm(l)
    f = np.cross(l, u)
    return quat_from_matrix(np.stack([l, u, f], axis=1))


def canonical_tpose(skel: Skeleton, roles: dict, local_pos: np.ndarray, local_rot: np.ndarray):
    """Normalise one pose to the canonical T-pose (module docstring).

    local_pos (J, 3), local_rot (J, 4): the bind pose. Returns (local_rot (J, 4), world positions
    (J, 3), world rotations (J, 4), largest swing in degrees that a bone between two joints needed).
    """
    aims, frames = _aims(skel, roles)
    lrot = np.array(local_rot, dtype=np.float64)
    lpos = np.asarray(local_pos, dtype=np.float64)
    P = skel.parents
    frame_of = {j: (nxt, pair) for j, nxt, pair in frames}
    todo = sorted(set([j for j, _, _ in aims]) | set(frame_of))
    aim_of = {j: (n, d) for j, n, d in aims}
    largest = 0.0
    for j in todo:
        gpos, grot = forward_kinematics(lpos, lrot, P)
        if j in frame_of:
            nxt, (lj, rj) = frame_of[j]
            cur = _frame_quat(gpos[nxt] - gpos[j], gpos[lj] - gpos[rj])
            if cur is None:
                continue
            swing = quat_inv(cur)  # canonical frame is identity
        else:
            nxt, d = aim_of[j]
            if nxt is None:
                v = _leaf_vector(skel, j)
                if v is None:
                    continue
                cur_dir = quat_rotate(grot[j], v)
            else:
                cur_dir = gpos[nxt] - gpos[j]
            if np.linalg.norm(cur_dir) < 1e-6:
                continue
            swing = quat_between(cur_dir, d)
            if nxt is not None:  # End Sites are often arbitrary: only bones between joints count
                largest = max(largest, float(np.degrees(quat_angle(swing))))
        new_g = quat_mul(swing, grot[j])
        p = P[j]
        lrot[j] = new_g if p < 0 else quat_mul(quat_inv(grot[p]), new_g)
    gpos, grot = forward_kinematics(lpos, lrot, P)
    return lrot, gpos, grot, largest


# ----------------------------------------------------------------------------------------------
# Finding a bind pose from the roles


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)


def _angle_to(v: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Angle in degrees between vectors v (..., 3) and the unit direction d (3,)."""
    return np.degrees(np.arccos(np.clip((_unit(v) * d).sum(-1), -1.0, 1.0)))


def _arm_bases(skel: Skeleton, roles: dict) -> dict[str, int]:
    """Per side, the first joint of the arm: where the chains from the chest to the two hands part."""
    return {side: chain[0] for side, chain in arm_chains(skel.parents, roles).items()}


def pose_uprightness(skel: Skeleton, roles: dict, gpos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """How far global poses gpos (F, J, 3) are from standing upright, in degrees per frame.

    Returns (body, arms): body is the worst of the spine (hips to chest) and head (chest to head) off
    vertical and each thigh and shin off straight down; arms is the larger angle by which an arm (its
    base to the hand) leans forward or backward out of the body's side plane (0 for T-, A- and
    arms-down poses). Facing comes from the hip line. Missing roles are left out.
    """
    up = np.array([0.0, 1.0, 0.0])
    worst = np.zeros(gpos.shape[0])
    for a, b in (("hips", "chest"), ("chest", "head")):
        if a in roles and b in roles:
            worst = np.maximum(worst, _angle_to(gpos[:, roles[b]] - gpos[:, roles[a]], up))
    for side in ("left", "right"):
        for a, b in (("upper_leg", "lower_leg"), ("lower_leg", "foot")):
            worst = np.maximum(worst, _angle_to(gpos[:, roles[f"{side}_{b}"]] - gpos[:, roles[f"{side}_{a}"]], -up))
    arms = np.zeros(gpos.shape[0])
    across = gpos[:, roles["left_upper_leg"]] - gpos[:, roles["right_upper_leg"]]
    fwd = _unit(np.cross(across, up))
    for side, base in _arm_bases(skel, roles).items():
        v = _unit(gpos[:, roles[f"{side}_hand"]] - gpos[:, base])
        arms = np.maximum(arms, np.degrees(np.arcsin(np.clip(np.abs((v * fwd).sum(-1)), 0.0, 1.0))))
    return worst, arms


def rest_pose_is_standing(skel: Skeleton, roles: dict) -> bool:
    """True when the skeleton's rest pose (offsets, identity rotations) shows a standing human (module
    docstring): then it serves as a bind pose as it is."""
    lpos = np.asarray(skel.offsets, np.float64)
    gpos, _ = forward_kinematics(lpos, quat_identity(skel.num_joints), skel.parents)
    # Judge the pose in the hips' own frame (a rest pose may lie on its side or face anywhere).
    spine = roles.get("spine", roles.get("chest"))
    if spine is None:
        return False
    frame = _frame_quat(gpos[spine] - gpos[roles["hips"]],
                        gpos[roles["left_upper_leg"]] - gpos[roles["right_upper_leg"]])
    if frame is None:
        return False
    local = quat_rotate(quat_inv(frame), gpos - gpos[roles["hips"]])[None]
    body, arms = pose_uprightness(skel, roles, local)
    toes_forward = all(local[0, roles[f"{s}_toe"], 2] > local[0, roles[f"{s}_foot"], 2]
                       for s in ("left", "right") if f"{s}_toe" in roles)
    sides_right = all(np.sign(local[0, roles[f"{s}_hand"], 0] - local[0, j, 0]) != -sgn
                      for (s, j), sgn in zip(_arm_bases(skel, roles).items(), (1.0, -1.0)))
    return bool(body[0] <= REST_UPRIGHT_DEG and arms[0] <= 30.0 and toes_forward and sides_right)


def find_source_bind(anim: Animation, roles: dict | None = None) -> int | None:
    """The bind pose `retarget_animation` uses for a source without `source_bind_frame`: None for the
    rest pose (when `rest_pose_is_standing`), else the index of the clip's most upright frame (body
    angle of `pose_uprightness` plus half the arms' lean). Raises RetargetError when no frame stands
    within 45 degrees of upright."""
    skel = anim.skeleton
    roles = roles if roles is not None else _roles(skel, None, "source")
    if rest_pose_is_standing(skel, roles):
        return None
    gpos, _ = anim.global_transforms()
    body, arms = pose_uprightness(skel, roles, gpos)
    best = int(np.argmin(body + 0.5 * arms))
    if body[best] > UPRIGHT_FRAME_DEG:
        raise RetargetError(
            f"no bind pose found for the source skeleton: its rest pose is not a standing body and no frame "
            f"stands upright (best frame {best} is {body[best]:.0f} degrees off); give source_bind_frame "
            f"(--source-bind-frame N), a frame where the character stands upright")
    return best


def synthetic_tpose_frames(anim: Animation, roles: dict | None = None) -> int:
    """Number of leading frames to drop: 1 when frame 0 is a T-pose (body within 15 degrees of upright,
    arms within 20 degrees of straight sideways) that the motion leaves at once (some joint turns more
    than 10 degrees by frame 1), as BVH converters prepend to CMU clips; else 0."""
    if anim.num_frames < 2:
        return 0
    skel = anim.skeleton
    roles = roles if roles is not None else _roles(skel, None, "source")
    gpos, grot = forward_kinematics(np.asarray(anim.positions[:2], np.float64),
                                    np.asarray(anim.rotations[:2], np.float64), skel.parents)
    body, _ = pose_uprightness(skel, roles, gpos[:1])
    across = _unit(gpos[0, roles["left_upper_leg"]] - gpos[0, roles["right_upper_leg"]])
    bases = _arm_bases(skel, roles)
    if body[0] > 15.0 or not bases:
        return 0
    for side, base in bases.items():
        sideways = across if side == "left" else -across
        if _angle_to(gpos[0, roles[f"{side}_hand"]] - gpos[0, base], sideways) > 20.0:
            return 0
    jump = np.degrees(quat_angle(quat_mul(quat_inv(grot[0]), grot[1]))).max()
    return 1 if jump > 10.0 else 0


def bind_pose_of(anim: Animation, roles: dict | None = None) -> Animation:
    """A one-frame Animation holding `anim`'s bind pose (`find_source_bind`: its rest pose or its most
    upright frame): the form `retarget_onto` takes a target in."""
    skel = anim.skeleton
    frame = find_source_bind(anim, roles)
    if frame is None:
        pos = np.asarray(skel.offsets, np.float64)[None].copy()
        pos[0, 0] = anim.positions[0, 0]
        rot = quat_identity(skel.num_joints)[None]
    else:
        pos, rot = anim.positions[frame:frame + 1], anim.rotations[frame:frame + 1]
    return Animation(skeleton=skel, positions=np.array(pos, np.float64), rotations=np.array(rot, np.float64),
                     fps=anim.fps, source=anim.source, tags=list(anim.tags))


def retarget_onto(anim: Animation, target: Animation, floor: float | None = None,
                  stance: Stance | None = None) -> Animation:
    """Retarget a clip of any humanoid skeleton onto `target` (frame 0 is its bind pose, e.g. from
    `bind_pose_of`) with no hand-holding: a synthetic leading T-pose frame is dropped, the source's
    bind pose is found from its roles, lengths follow the target (any source unit works: the root
    travel is scaled by the leg-length ratio); `floor` and `stance` as in `retarget_animation`."""
    drop = synthetic_tpose_frames(anim)
    if drop:
        anim = Animation(skeleton=anim.skeleton, positions=anim.positions[drop:], rotations=anim.rotations[drop:],
                         fps=anim.fps, source=anim.source, tags=list(anim.tags))
    return retarget_animation(anim, target, target_bind_frame=0, floor=floor, stance=stance)


# ----------------------------------------------------------------------------------------------
# Joint correspondence

_SYNONYMS = {"clavicle": "shoulder", "collar": "shoulder", "forearm": "lowerarm", "arm": "upperarm",
             "elbow": "lowerarm", "wrist": "hand", "upleg": "upperleg", "thigh": "upperleg",
             "leg": "lowerleg", "shin": "lowerleg", "calf": "lowerleg", "knee": "lowerleg"}
_HELPER = re.compile(r"(?i)twist|roll|helper|share|nub|_end$|end$")


def name_key(name: str) -> str:
    """Joint name without namespace, side markers, separators and case; common synonyms unified."""
    n = name.rsplit(":", 1)[-1]
    n = re.sub(r"(?i)left|right", "", n)
    n = re.sub(r"^[LlRr](?=[_.\- ])", "", n)
    n = re.sub(r"(?<=[_.\- ])[LlRr]$", "", n)
    n = re.sub(r"[^a-z0-9]", "", n.lower())
    return _SYNONYMS.get(n, n)


_CHAINS = [("hips", "spine"), ("spine", "chest"), ("chest", "head"), ("chest", "left_hand"),
           ("chest", "right_hand")] + [(f"{s}_{a}", f"{s}_{b}") for s in ("left", "right")
                                       for a, b in zip(LEG_ROLES[:-1], LEG_ROLES[1:])]


def auto_mapping(src: Skeleton, src_roles: dict, tgt: Skeleton, tgt_roles: dict) -> dict[int, int]:
    """Target joint index -> source joint index: roles, then the joints between roles along chains."""
    pairs = {tgt_roles[r]: src_roles[r] for r in tgt_roles if r in src_roles}
    for a, b in _CHAINS:
        if not all(r in src_roles and r in tgt_roles for r in (a, b)):
            continue
        ps, pt = _path(src.parents, src_roles[a], src_roles[b]), _path(tgt.parents, tgt_roles[a], tgt_roles[b])
        if ps is None or pt is None:
            continue
        si, ti = ps[1:-1], pt[1:-1]
        used_s = set()
        free_t = []
        for t in ti:
            key = name_key(tgt.names[t])
            hit = next((s for s in si if s not in used_s and name_key(src.names[s]) == key), None)
            if hit is not None:
                pairs[t] = hit
                used_s.add(hit)
            else:
                free_t.append(t)
        # Remaining joints paired from the distal end inwards, skipping helper bones; order kept.
        rest_s = [s for s in si if s not in used_s and not _HELPER.search(src.names[s])]
        rest_t = [t for t in free_t if not _HELPER.search(tgt.names[t])]
        for t, s in zip(reversed(rest_t), reversed(rest_s)):
            # Keep the chain order monotonic with respect to name-matched pairs.
            pairs[t] = s
    return pairs


def _explicit_pairs(src: Skeleton, tgt: Skeleton, joints: dict[str, str]) -> dict[int, int]:
    pairs, bad = {}, []
    for t, s in joints.items():
        if t not in tgt.names:
            bad.append(f"target joint {t!r}")
        elif s not in src.names:
            bad.append(f"source joint {s!r}")
        else:
            pairs[tgt.names.index(t)] = src.names.index(s)
    if bad:
        raise RetargetError(f"mapping names joints that do not exist: {', '.join(bad)}")
    return pairs


# ----------------------------------------------------------------------------------------------
# Retargeting


def _roles(skel: Skeleton, role_map, what: str) -> dict:
    try:
        return find_roles(skel.names, role_map, required=("hips",) + tuple(f"{s}_{r}" for s in ("left", "right")
                                                                           for r in ("upper_leg", "lower_leg", "foot")))
    except SkeletonError as e:
        raise RetargetError(f"{what} skeleton: {e}") from None


def _leg_height(gpos: np.ndarray, roles: dict) -> float:
    feet = [gpos[roles[f"{s}_foot"], 1] for s in ("left", "right")]
    return float(gpos[roles["hips"], 1] - np.mean(feet))


def _lowest_foot(gpos: np.ndarray, roles: dict) -> np.ndarray:
    js = [roles[r] for r in ("left_foot", "right_foot", "left_toe", "right_toe") if r in roles]
    return gpos[..., js, 1].min(axis=-1)


def foot_floor(gpos: np.ndarray, roles: dict) -> float:
    """Where a clip's feet rest: 5th percentile over frames of the lowest foot/toe joint height
    (gpos (F, J, 3) global positions)."""
    return float(np.percentile(_lowest_foot(gpos, roles), 5))


def planted_foot_pitch(gpos: np.ndarray, roles: dict, fps: float) -> float | None:
    """Median pitch (degrees below horizontal) of the ankle-to-toe line while a foot is planted, both
    feet (gpos (F, J, 3) global positions), or None with fewer than 10 planted frames. A property of the
    rig as much as of the motion: where its toe joint sits (jlpm22 ~31, Bandai-Namco ~40, CMU ~14).
    Planted: ankle and toe within 3 % of the hips' height of their lowest and the ankle slower than 0.35
    hips heights per second (unit free: some sources are not in metres)."""
    if "left_toe" not in roles or "right_toe" not in roles:
        return None
    scale = max(float(np.median(gpos[:, roles["hips"], 1] - _lowest_foot(gpos, roles))), 1e-9)
    pitches = []
    for side in ("left", "right"):
        ankle, toe = gpos[:, roles[f"{side}_foot"]], gpos[:, roles[f"{side}_toe"]]
        speed = np.r_[np.inf, np.linalg.norm(np.diff(ankle[:, [0, 2]], axis=0), axis=1) * fps]
        low = ((ankle[:, 1] < np.percentile(ankle[:, 1], 5) + 0.03 * scale)
               & (toe[:, 1] < np.percentile(toe[:, 1], 5) + 0.03 * scale))
        d = toe[(speed < 0.35 * scale) & low] - ankle[(speed < 0.35 * scale) & low]
        pitches.append(np.degrees(np.arctan2(-d[:, 1], np.linalg.norm(d[:, [0, 2]], axis=1))))
    p = np.concatenate(pitches)
    return float(np.median(p)) if len(p) >= 10 else None


def walking_knee_deg(gpos: np.ndarray, roles: dict, fps: float) -> float | None:
    """Median knee angle (degrees) while the hips move faster than 0.55 hips heights per second (~0.5
    m/s: walking and running; unit free), or None when the clip never moves that fast (or its roles
    lack posture.POSTURE_ROLES): how extended an actor keeps the legs in motion (jlpm22 ~143,
    Bandai-Namco backward walking ~157)."""
    if not all(r in roles for r in POSTURE_ROLES):
        return None
    hips = gpos[:, roles["hips"]]
    scale = max(float(np.median(hips[:, 1] - _lowest_foot(gpos, roles))), 1e-9)
    speed = np.r_[0.0, np.linalg.norm(np.diff(hips[:, [0, 2]], axis=0), axis=1) * fps]
    moving = speed > 0.55 * scale
    knees = knee_angles_deg(gpos[moving][:, posture_joints(roles)])
    return float(np.median(knees)) if moving.sum() >= 10 else None


def planted_toe_height(gpos: np.ndarray, roles: dict, fps: float) -> float | None:
    """Median height of the toe joints while planted (moving slower than 0.55 hips heights per second on
    the ground plane, ~0.5 m/s: posture.planted_toe_heights_cm's contact, unit free), both feet, or None."""
    scale = max(float(np.median(gpos[:, roles["hips"], 1] - _lowest_foot(gpos, roles))), 1e-9)
    hs = []
    for side in ("left", "right"):
        toe = gpos[:, roles[f"{side}_toe"]]
        slow = np.linalg.norm(np.diff(toe[:, [0, 2]], axis=0), axis=1) * fps < 0.55 * scale
        hs.append(toe[1:, 1][slow])
    h = np.concatenate(hs)
    return float(np.median(h)) if len(h) >= 10 else None


def median_hand_spread(gpos: np.ndarray, roles: dict) -> float:
    """Median distance between the hands along the hips' left-right axis (posture.hand_spread_cm), in
    the clip's units."""
    return float(np.median(hand_spread_cm(gpos[:, posture_joints(roles)]))) / 100.0


class Stance(NamedTuple):
    """How an actor stands and moves, measured on their own captures (`actor_stance`): what clips of other
    actors retargeted onto their skeleton are made to share, so a database of several sources moves like
    one person. Each figure None when the captures do not show it."""

    foot_pitch_deg: float | None    # planted_foot_pitch
    knee_deg: float | None          # walking_knee_deg
    planted_toe: float | None       # planted_toe_height (the captures' units: metres)
    hand_spread: float | None       # median_hand_spread
    # Per gait (posture.gait_bins of posture.travel_velocity) the knee angles and posture ranges
    # (posture.gait_figures' source): a clip's knees are matched to the actor's at the clip's own gaits.
    gaits: list | None = None
    trunk: list | None = None       # per gait the trunk's median lean (trunk.actor_trunk), matched likewise


def actor_stance(gpos, roles: dict, fps: float) -> Stance:
    """The Stance of the actor of a clip (gpos (F, J, 3) global positions) or of several captures of
    theirs (a list of such arrays: measured over all of them, the skeleton file alone may lack a gait)."""
    caps = [np.asarray(g) for g in gpos] if isinstance(gpos, (list, tuple)) else [np.asarray(gpos)]
    gpos = np.concatenate(caps)
    body = all(r in roles for r in POSTURE_ROLES)
    gaits = trunk = None
    if body:
        p = gpos[:, posture_joints(roles)]
        bins = gait_bins(p, np.concatenate([travel_velocity(c[:, roles["hips"]], fps) for c in caps]))
        gaits, trunk = gait_source(p, bins), actor_trunk(p, bins)
    return Stance(planted_foot_pitch(gpos, roles, fps), walking_knee_deg(gpos, roles, fps),
                  planted_toe_height(gpos, roles, fps) if "left_toe" in roles and "right_toe" in roles else None,
                  median_hand_spread(gpos, roles) if body else None, gaits, trunk)


def _stance_drop(knee_from: float, knee_to: float, thigh: float, shin: float) -> float:
    """How far (m) the hips come down when a leg of these bone lengths bends from knee_from to knee_to
    (degrees), feet in place."""
    def reach(deg):
        return math.sqrt(thigh * thigh + shin * shin - 2.0 * thigh * shin * math.cos(math.radians(deg)))
    return reach(knee_from) - reach(knee_to)


def _mapped_roles(src: Skeleton, tgt: Skeleton, mapping) -> tuple[dict, dict, dict]:
    """(source roles, target roles, target joint -> source joint) from a mapping (None, a dict of joint
    names or load_joint_mapping's tables); roles no body has raise RetargetError."""
    explicit = None
    src_role_map = tgt_role_map = None
    if isinstance(mapping, dict) and "joints" in mapping and isinstance(mapping["joints"], dict):
        explicit = mapping["joints"]
        src_role_map = mapping.get("source_roles") or None
        tgt_role_map = mapping.get("target_roles") or None
    elif isinstance(mapping, dict):
        explicit = mapping
    elif mapping is not None:
        raise TypeError("mapping must be None, a dict or a path to a TOML file")

    src_roles = _roles(src, src_role_map, "source")
    if explicit is not None:
        pairs = _explicit_pairs(src, tgt, explicit)
        try:
            tgt_roles = find_roles(tgt.names, tgt_role_map, required=())
        except SkeletonError as e:
            raise RetargetError(f"target skeleton: {e}") from None
        # Roles the target names do not reveal follow the mapping from the source roles.
        by_src = {s: t for t, s in pairs.items()}
        for r, sj in src_roles.items():
            if r not in tgt_roles and sj in by_src:
                tgt_roles[r] = by_src[sj]
        missing = [r for r in ("hips", "left_foot", "right_foot", "left_upper_leg", "right_upper_leg")
                   if r not in tgt_roles]
        if missing:
            raise RetargetError(f"target roles {', '.join(missing)} unknown: map the source's joints for them "
                                f"in [joints] or name them in [target_roles]")
    else:
        tgt_roles = _roles(tgt, tgt_role_map, "target")
        pairs = auto_mapping(src, src_roles, tgt, tgt_roles)
    for skel, roles, what in ((src, src_roles, "source"), (tgt, tgt_roles, "target")):
        try:
            check_role_joints(skel.names, skel.parents, roles)
        except SkeletonError as e:
            raise RetargetError(f"{what} skeleton: {e}") from None
    return src_roles, tgt_roles, pairs


def retarget_animation(anim: Animation, target, mapping=None, target_bind_frame: int = 0,
                       source_bind_frame: int | None = None, fit_ground: bool = True,
                       floor: float | None = None, stance: Stance | None = None) -> Animation:
    """Retarget `anim` onto the target skeleton; returns an Animation of the target skeleton.

    target: an Animation (frame `target_bind_frame` is its bind pose) or a Skeleton (rest pose).
    mapping: None (automatic, see module docstring), a dict target joint name -> source joint name,
    a path to a TOML mapping file, or a dict as load_joint_mapping returns. source_bind_frame: frame of
    `anim` used as the source bind pose; None finds one (`find_source_bind`: the rest pose when it
    shows a standing body, else the clip's most upright frame).
    fit_ground: shift the hips vertically so the feet rest on the ground like the source's, or, when
    `floor` is given, so that the 5th percentile of the lowest foot/toe joint height is `floor` (metres;
    e.g. the target's own captures' `foot_floor`, as toe joints sit at different heights in each rig).
    stance: the target actor's Stance (`actor_stance` of their captures). Given it, the clip is made to
    stand and move like that actor, as each figure allows:
    - feet: a planted source foot lands planted. The canonical pose lays every foot bone flat, but each
      rig plants its foot at its own pitch (its toe joint sits elsewhere), so the target's feet are
      turned by the difference to this clip's `planted_foot_pitch`. Without it a Bandai-Namco foot stood
      on its toes on the jlpm22 skeleton and a CMU one on its heels, and the fitted floor bent the knees;
    - knees: the hips come down (or up) by what turns the clip's own walking knee angle into the
      actor's, and leg IK keeps the feet where they were (Bandai-Namco walks backward with knees 14
      degrees straighter than jlpm22 walks);
    - arms: the upper arms turn about the body's forward axis until the hands hang as far apart as the
      actor's (Bandai-Namco's walking backward: 32 cm, jlpm22's walks: about 51);
    - floor: last, the clip moves vertically until its planted toes sit at the actor's height (instead
      of `floor`, which a backward walk, planting toe first, reaches too often).
    """
    src = anim.skeleton
    if isinstance(target, Animation):
        tgt = target.skeleton
        if not -target.num_frames <= target_bind_frame < target.num_frames:
            raise RetargetError(f"target bind frame {target_bind_frame} out of range (0..{target.num_frames - 1})")
        t_lpos = np.asarray(target.positions[target_bind_frame], np.float64)
        t_lrot = np.asarray(target.rotations[target_bind_frame], np.float64)
    elif isinstance(target, Skeleton):
        tgt = target
        t_lpos = np.asarray(tgt.offsets, np.float64)
        t_lrot = quat_identity(tgt.num_joints)
    else:
        raise TypeError("target must be an Animation or a Skeleton")

    where = f"{mapping}: " if isinstance(mapping, (str, Path)) else ""     # errors name a mapping file
    if where:
        try:
            mapping = load_joint_mapping(mapping)
        except SkeletonError as e:
            raise RetargetError(str(e)) from None
    try:
        src_roles, tgt_roles, pairs = _mapped_roles(src, tgt, mapping)
    except RetargetError as e:
        raise RetargetError(f"{where}{e}") from None

    # Bind poses, normalised to the canonical T-pose.
    if source_bind_frame is None:
        source_bind_frame = find_source_bind(anim, src_roles)
    if source_bind_frame is None:
        s_lpos, s_lrot = np.asarray(src.offsets, np.float64), quat_identity(src.num_joints)
        s_lpos = s_lpos.copy()
        s_lpos[0] = anim.positions[0, 0]
    else:
        if not -anim.num_frames <= source_bind_frame < anim.num_frames:
            raise RetargetError(f"source bind frame {source_bind_frame} out of range (0..{anim.num_frames - 1})")
        s_lpos = np.asarray(anim.positions[source_bind_frame], np.float64)
        s_lrot = np.asarray(anim.rotations[source_bind_frame], np.float64)
    _, s_gpos0, s_grot0, _ = canonical_tpose(src, src_roles, s_lpos, s_lrot)
    t_lrot0, t_gpos0, t_grot0, _ = canonical_tpose(tgt, tgt_roles, t_lpos, t_lrot)

    # World rotations of the target per frame (eq. 3.23 for mapped joints, bind-relative otherwise).
    s_gpos, s_grot = anim.global_transforms()
    foot_pitch = stance.foot_pitch_deg if stance is not None else None
    src_pitch = planted_foot_pitch(s_gpos, src_roles, anim.fps) if foot_pitch is not None else None
    if src_pitch is not None:
        # Canonical feet point along +Z with the left towards +X: a turn about +X pitches the toes down.
        half = np.radians(foot_pitch - src_pitch) / 2
        turn = np.array([np.cos(half), np.sin(half), 0.0, 0.0])
        t_grot0 = t_grot0.copy()
        for side in ("left", "right"):
            t_grot0[tgt_roles[f"{side}_foot"]] = quat_mul(turn, t_grot0[tgt_roles[f"{side}_foot"]])
    F, Jt = anim.num_frames, tgt.num_joints
    t_grot = np.empty((F, Jt, 4))
    for j in range(Jt):
        if j in pairs:
            s = pairs[j]
            offset = quat_mul(quat_inv(s_grot0[s]), t_grot0[j])
            t_grot[:, j] = quat_mul(s_grot[:, s], offset)
        elif tgt.parents[j] < 0:
            t_grot[:, j] = t_lrot0[j]
        else:
            t_grot[:, j] = quat_mul(t_grot[:, tgt.parents[j]], t_lrot0[j])
    P = tgt.parents
    par = np.where(P < 0, 0, P)
    t_rot = quat_mul(quat_inv(t_grot[:, par]), t_grot)
    t_rot[:, P < 0] = t_grot[:, P < 0]
    t_pos = np.repeat(t_lpos[None], F, axis=0).copy()

    # Hips position: source hips scaled by the leg-length ratio.
    ratio = _leg_height(t_gpos0, tgt_roles) / _leg_height(s_gpos0, src_roles)
    hips_world = s_gpos[:, src_roles["hips"]] * ratio
    _place_hips(tgt, tgt_roles["hips"], t_pos, t_grot, hips_world)
    if fit_ground:
        t_gpos, _ = forward_kinematics(t_pos, t_rot, P)
        # The source floor scaled like the hips (the source may be in another unit).
        want = foot_floor(s_gpos, src_roles) * ratio if floor is None else floor
        shift = want - foot_floor(t_gpos, tgt_roles)
        hips_world[:, 1] += shift
        _place_hips(tgt, tgt_roles["hips"], t_pos, t_grot, hips_world)
    if stance is not None and stance.knee_deg is not None:
        knee_from, knee_to = walking_knee_deg(s_gpos, src_roles, anim.fps), stance.knee_deg
        if stance.gaits is not None and all(r in src_roles for r in POSTURE_ROLES):
            # The actor's knees at the clip's own gaits: the jlpm22 actor walks backward and side-steps
            # with the knees 15-20 degrees straighter than forward, so one pooled angle bent them.
            gait = gait_figures(s_gpos[:, posture_joints(src_roles)], travel_velocity(hips_world, anim.fps),
                                stance.gaits)
            if gait["knee_deg"] is not None:
                knee_from, knee_to = gait["knee_deg"], gait["knee_actor_deg"]
        _match_knees(tgt, tgt_roles, t_pos, t_rot, knee_from, knee_to, t_gpos0)
    if stance is not None and stance.trunk is not None and all(r in tgt_roles for r in POSTURE_ROLES):
        match_trunk(P, tgt_roles, t_pos, t_rot, anim.fps, stance.trunk)
    if stance is not None and stance.hand_spread is not None and all(r in tgt_roles for r in POSTURE_ROLES):
        _match_arms(tgt, tgt_roles, t_pos, t_rot, t_grot0, t_gpos0, stance.hand_spread)
    if stance is not None and stance.planted_toe is not None and tgt.parents[0] < 0:
        # The root's frame is the world's: moving its translation moves the clip.
        toe = planted_toe_height(forward_kinematics(t_pos, t_rot, P)[0], tgt_roles, anim.fps)
        if toe is not None:
            t_pos[:, 0, 1] += stance.planted_toe - toe

    return Animation(skeleton=tgt, positions=t_pos, rotations=t_rot, fps=anim.fps,
                     source=anim.source, tags=list(anim.tags))


def _match_arms(tgt: Skeleton, roles: dict, t_pos: np.ndarray, t_rot: np.ndarray, bind_grot: np.ndarray,
               bind_gpos: np.ndarray, spread: float) -> None:
    """Turn both upper arms of a retargeted clip in place, about the canonical body's forward axis (+Z) in
    their parents' frames, so the hands' median spread becomes `spread` (retarget_animation's stance)."""
    chains = arm_chains(tgt.parents, roles)
    if not chains:
        return
    P = tgt.parents
    upper = {side: c[1] if len(c) >= 3 else c[0] for side, c in chains.items()}
    reach = float(np.linalg.norm(bind_gpos[roles["left_hand"]] - bind_gpos[upper["left"]]))
    if reach < 1e-6:
        return
    base = {side: t_rot[:, j].copy() for side, j in upper.items()}

    def turn(angle):
        for side, j in upper.items():
            a = angle if side == "left" else -angle   # the left arm swings out towards +X
            r = np.array([math.cos(a / 2), 0.0, 0.0, math.sin(a / 2)])
            g = bind_grot[P[j]]
            t_rot[:, j] = quat_mul(quat_mul(quat_mul(quat_inv(g), r), g), base[side])
        return median_hand_spread(forward_kinematics(t_pos, t_rot, P)[0], roles)

    # Each hand moves about reach * angle sideways: two secant steps from that guess.
    a0, s0 = 0.0, median_hand_spread(forward_kinematics(t_pos, t_rot, P)[0], roles)
    a1 = (spread - s0) / (2.0 * reach)
    for _ in range(2):
        s1 = turn(a1)
        if abs(s1 - s0) < 1e-9:
            break
        a0, s0, a1 = a1, s1, a1 + (spread - s1) * (a1 - a0) / (s1 - s0)
    turn(a1)


def _match_knees(tgt: Skeleton, roles: dict, t_pos: np.ndarray, t_rot: np.ndarray, knee_from: float | None,
                 knee_to: float, bind_gpos: np.ndarray) -> None:
    """Lower (or raise) the hips of a retargeted clip in place so its walking knee angle becomes knee_to,
    the feet kept where they are by leg IK (retarget_animation's stance). A clip that never walks
    (knee_from None) is left alone."""
    if knee_from is None:
        return
    thigh = float(np.linalg.norm(bind_gpos[roles["left_lower_leg"]] - bind_gpos[roles["left_upper_leg"]]))
    shin = float(np.linalg.norm(bind_gpos[roles["left_foot"]] - bind_gpos[roles["left_lower_leg"]]))
    drop = _stance_drop(knee_from, knee_to, thigh, shin)
    if abs(drop) < 1e-3:
        return
    P = np.ascontiguousarray(tgt.parents, dtype=np.int64)
    legs = leg_chains(roles)
    gpos, grot = forward_kinematics(t_pos, t_rot, P)
    for f in range(len(t_pos)):
        lp, lr = np.ascontiguousarray(t_pos[f]), np.ascontiguousarray(t_rot[f])
        gp, gr = np.ascontiguousarray(gpos[f]), np.ascontiguousarray(grot[f])
        ankles = gp[legs[:, 2]].copy()
        # The root (joint 0, whose frame is the world's) comes down, then the legs reach the ankles again.
        apply_leg_ik_in_place(lp, lr, gp, gr, P, legs, ankles[0], ankles[1], drop=drop)
        t_pos[f], t_rot[f] = lp, lr


def _place_hips(tgt: Skeleton, hips: int, t_pos: np.ndarray, t_grot: np.ndarray, hips_world: np.ndarray) -> None:
    """Set local translations so the hips land on hips_world (F, 3). When the hips are not the root and
    have no position channels, the root moves instead, so a BVH writer keeps the motion."""
    P = tgt.parents
    chans = tgt.channels[hips] if len(tgt.channels) == tgt.num_joints else ()
    mover = hips if (P[hips] < 0 or any(c.endswith("position") for c in chans)) else _root_of(P, hips)
    # World transform of the mover's parent, and the hips' position relative to the mover.
    gpos, _ = forward_kinematics(t_pos, _locals(t_grot, P), P)
    rel = gpos[:, hips] - gpos[:, mover]
    target_mover = hips_world - rel
    p = P[mover]
    if p < 0:
        t_pos[:, mover] = target_mover
    else:
        t_pos[:, mover] = quat_rotate(quat_inv(t_grot[:, p]), target_mover - gpos[:, p])


def _root_of(P, j):
    while P[j] >= 0:
        j = int(P[j])
    return j


def _locals(grot, P):
    par = np.where(P < 0, 0, P)
    loc = quat_mul(quat_inv(grot[:, par]), grot)
    loc[:, P < 0] = grot[:, P < 0]
    return loc


# ----------------------------------------------------------------------------------------------
# Command line
