"""Preprocessing of clips before they enter the pose database.

Each step is a pure function Animation -> Animation or Animation -> arrays: resampling to the
database rate, mirroring across the sagittal (YZ) plane, the simulation bone (the character root on
the ground), contact labels and tags. Seeds: 000 section 3.2, 001, 002 section 3.1.1, 004.
"""
from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy.interpolate import CubicSpline
from scipy.ndimage import median_filter, percentile_filter
from scipy.signal import savgol_filter

from .animation import Animation, Skeleton
from ..maths.rotations import (quat_abs, quat_between, quat_from_matrix, quat_from_yaw, quat_inv, quat_mul,
                               quat_normalize, quat_rotate, quat_slerp)
from .skeleton import mirror_pairs

SIMULATION_BONE = "Simulation"


# ---------------------------------------------------------------------------------------------
# Resampling

def resample(anim: Animation, fps: float = 60.0) -> Animation:
    """Resample to `fps` at the same speed: cubic splines for positions, slerp for rotations.

    The clip keeps its duration: frame k of the result is at time k / fps, up to the last source frame.
    """
    F = anim.num_frames
    if abs(anim.fps - fps) < 1e-3 * fps or F < 2:
        return replace(anim, fps=fps) if F < 2 else anim
    t_src = np.arange(F) / anim.fps
    n_new = int(np.floor(t_src[-1] * fps + 1e-6)) + 1
    t_new = np.arange(n_new) / fps
    pos = CubicSpline(t_src, anim.positions, axis=0)(t_new)
    x = np.clip(t_new * anim.fps, 0, F - 1)
    i0 = np.minimum(np.floor(x).astype(np.int64), F - 2)
    alpha = (x - i0)[:, None]
    rot = quat_slerp(anim.rotations[i0], anim.rotations[i0 + 1], alpha[..., None] * np.ones((1, anim.rotations.shape[1], 1)))
    return replace(anim, positions=pos, rotations=rot, fps=fps)


# ---------------------------------------------------------------------------------------------
# Mirroring

_REFLECT = np.array([-1.0, 1.0, 1.0])


def _kabsch(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Rotation (quaternion) that best maps vectors src (K,3) onto dst (K,3)."""
    if len(src) == 1:
        return quat_between(src[0], dst[0])
    h = src.T @ dst
    u, _, vt = np.linalg.svd(h)
    d = np.sign(np.linalg.det(vt.T @ u.T))
    r = vt.T @ np.diag([1.0, 1.0, d]) @ u.T
    return quat_from_matrix(r)


def _motion_correction(grot: np.ndarray, pair_grot: np.ndarray) -> np.ndarray:
    """The correction the motion asks for: the one that makes the reflected pose's rotation of a joint
    (the reflected rotation of its pair, then the correction) equal its own, averaged over frames of
    global rotations (F, 4); exact for mirror-symmetric poses, the average over a gait cycle."""
    refl = pair_grot * np.array([1.0, 1.0, -1.0, -1.0])
    want = quat_mul(quat_inv(refl), grot)
    want = want * np.sign((want * want[:1]).sum(-1, keepdims=True) + 1e-12)
    return quat_normalize(want.mean(0))


def _turned_about(c0: np.ndarray, axis: np.ndarray, target: np.ndarray) -> np.ndarray:
    """c0 turned about `axis` (a direction c0 maps a child to, so the turn keeps that child in place) to
    come closest to the rotation `target`: the twist part of target * c0^-1 about the axis, then c0."""
    q = quat_mul(target, quat_inv(c0))
    a = axis / np.linalg.norm(axis)
    twist = np.concatenate([q[:1], (q[1:] @ a) * a])
    if np.linalg.norm(twist) < 1e-8:
        return c0
    return quat_normalize(quat_mul(quat_normalize(twist), c0))


def mirror_corrections(skel: Skeleton, pairs: np.ndarray, grot: np.ndarray | None = None) -> np.ndarray:
    """Per-joint fixed rotations C_k so that a reflected pose rebuilt on the same skeleton puts every
    child where reflection puts it. Needed because rest orientations are not mirror-symmetric.

    grot: global rotations (F, J, 4) of a clip on this skeleton. The children fix C_k only up to a turn
    about them when they lie on one line (a single child), and not at all without children. Where the
    shortest choice is then more than 90 degrees from what the motion asks for (_motion_correction),
    the free part is taken from the motion: otherwise a mirrored clip's local rotations land up to 180
    degrees from the original's (Bandai-Namco, whose bones lie along the mirror axis: legs 177, feet
    116, spine 179 degrees apart on average), and inertialization between a clip and a mirrored one
    spins those joints. jlpm22's shortest choices are all within 25 degrees of the motion's."""
    J = skel.num_joints
    corr = np.zeros((J, 4))
    corr[:, 0] = 1.0
    for k in range(J):
        kids = skel.children(k)
        src, dst = [], []
        for c in kids:
            src.append(skel.offsets[c])
            dst.append(skel.offsets[pairs[c]] * _REFLECT)
        if k in skel.end_sites and pairs[k] in skel.end_sites:
            src.append(skel.end_sites[k])
            dst.append(skel.end_sites[pairs[k]] * _REFLECT)
        src = [s for s, d in zip(src, dst) if np.linalg.norm(s) > 1e-6 and np.linalg.norm(d) > 1e-6]
        dst = [d for d in dst if np.linalg.norm(d) > 1e-6][:len(src)]
        if src:
            corr[k] = _kabsch(np.array(src), np.array(dst))
        if grot is None:
            continue
        motion = _motion_correction(grot[:, k], grot[:, pairs[k]])
        if abs(float(np.dot(motion, corr[k]))) > math.cos(math.radians(45.0)):    # within 90 degrees
            continue
        if not src:
            corr[k] = motion
        elif np.linalg.matrix_rank(np.array(src), tol=1e-3 * np.abs(np.array(src)).max()) == 1:
            corr[k] = _turned_about(corr[k], np.array(dst[0]), motion)
    return corr


def mirror(anim: Animation, corrections: np.ndarray | None = None) -> Animation:
    """Mirror across the YZ plane (x -> -x) with left/right joints swapped, on the same skeleton.

    World positions of the result are the reflected, left/right-swapped world positions of the input;
    mirroring twice gives back the original.
    """
    skel = anim.skeleton
    pairs = mirror_pairs(skel.names)
    gpos, grot = anim.global_transforms()
    corr = mirror_corrections(skel, pairs) if corrections is None else corrections
    # Reflection M R M of a rotation R is (w, x, -y, -z) for M = diag(-1, 1, 1).
    mrot = grot[:, pairs] * np.array([1.0, 1.0, -1.0, -1.0])
    mrot = quat_mul(mrot, corr[None])
    mpos = gpos[:, pairs] * _REFLECT
    parents = skel.parents
    lrot = np.empty_like(mrot)
    lpos = np.empty_like(mpos)
    root = parents < 0
    lrot[:, root] = mrot[:, root]
    lpos[:, root] = mpos[:, root]
    nr = ~root
    par = parents[nr]
    inv_parent = quat_inv(mrot[:, par])
    lrot[:, nr] = quat_mul(inv_parent, mrot[:, nr])
    lpos[:, nr] = quat_rotate(inv_parent, mpos[:, nr] - mpos[:, par])
    tags = list(anim.tags)
    tags = [t for t in tags if t != "mirrored"] if "mirrored" in tags else tags + ["mirrored"]
    return replace(anim, positions=lpos, rotations=quat_abs(quat_normalize(lrot)), tags=tags,
                   source=anim.source)


# ---------------------------------------------------------------------------------------------
# Joints above the hips

def fold_into_hips(anim: Animation, hips: int) -> Animation:
    """The clip with the joints above the hips (e.g. Bandai-Namco's `joint_Root`) folded into the hips,
    which become the root: their world transforms (full forward kinematics, so a moving `joint_Root`
    is kept) are the hips' new local ones. Unchanged when the hips are already the root, or when a joint
    above them has other children (folding would lose those).

    Why: the simulation bone is inserted above the root. Bandai's `joint_Root` stays at the origin
    while the hips carry the capture's translation, so with it in place `joint_Root` sits metres from
    the simulation bone and the hips metres from `joint_Root`, differently in every clip; blending those
    local offsets at a transition swings the hips on a lever of metres (docs/tuning.md, Bandai).
    """
    skel = anim.skeleton
    above = []
    j = int(skel.parents[hips])
    while j >= 0:
        above.append(j)
        j = int(skel.parents[j])
    if not above or any(len(skel.children(a)) != 1 for a in above):
        return anim
    gpos, grot = anim.global_transforms()
    keep = np.array([k for k in range(skel.num_joints) if k not in above])
    new_index = np.full(skel.num_joints, -1, dtype=np.int64)
    new_index[keep] = np.arange(len(keep))
    parents = np.where(np.isin(skel.parents[keep], above), -1, new_index[np.maximum(skel.parents[keep], 0)])
    positions = anim.positions[:, keep].copy()
    rotations = anim.rotations[:, keep].copy()
    positions[:, new_index[hips]] = gpos[:, hips]
    rotations[:, new_index[hips]] = quat_abs(quat_normalize(grot[:, hips]))
    # Rest offsets compose along the chain (rest rotations are the identity).
    offsets = skel.offsets[keep].copy()
    offsets[new_index[hips]] = skel.offsets[above + [hips]].sum(0)
    hips_channels = skel.channels[hips] if skel.channels else ()
    channels = [skel.channels[k] for k in keep] if skel.channels else []
    if channels and len(hips_channels) < 6:
        channels[new_index[hips]] = ("Xposition", "Yposition", "Zposition") + tuple(hips_channels)
    out = Skeleton(names=[skel.names[k] for k in keep], parents=parents.astype(np.int64), offsets=offsets,
                   end_sites={int(new_index[k]): v for k, v in skel.end_sites.items() if new_index[k] >= 0},
                   channels=channels)
    return replace(anim, skeleton=out, positions=positions, rotations=rotations)


# ---------------------------------------------------------------------------------------------
# Simulation bone

def hips_forward_axis(gpos: np.ndarray, grot: np.ndarray, roles: dict[str, int]) -> np.ndarray:
    """The hips' local forward axis, derived from data: the body's forward direction (the right-to-left
    hip vector crossed with up; a right-handed body facing +Z has its left side at +X), averaged over
    frames and expressed in the hips' frame."""
    hips = roles["hips"]
    across = gpos[:, roles["left_upper_leg"]] - gpos[:, roles["right_upper_leg"]]
    fwd = np.cross(across, np.array([0.0, 1.0, 0.0]))
    fwd[:, 1] = 0.0
    fwd /= np.maximum(np.linalg.norm(fwd, axis=-1, keepdims=True), 1e-8)
    local = quat_rotate(quat_inv(grot[:, hips]), fwd).mean(0)
    return local / max(np.linalg.norm(local), 1e-8)


def _savgol(x: np.ndarray, window: int, order: int = 3) -> np.ndarray:
    n = x.shape[0]
    w = min(window, n if n % 2 == 1 else n - 1)
    if w <= order:
        return x
    return savgol_filter(x, w, order, axis=0, mode="interp")


def simulation_bone(gpos: np.ndarray, grot: np.ndarray, roles: dict[str, int], forward_axis: np.ndarray,
                    position_window: int = 31, rotation_window: int = 61) -> tuple[np.ndarray, np.ndarray]:
    """Simulation bone positions (F,3) on the ground (y = 0) and yaw rotations (F,4).

    Position: the hips projected on the ground; facing: the hips' forward axis projected on the
    ground; both smoothed with a third-order Savitzky-Golay filter (widths 31 and 61 at 60 fps, seed 000).
    """
    hips = roles["hips"]
    pos = gpos[:, hips].copy()
    pos[:, 1] = 0.0
    pos = _savgol(pos, position_window)
    pos[:, 1] = 0.0
    fwd = quat_rotate(grot[:, hips], forward_axis[None])
    fwd[:, 1] = 0.0
    fwd /= np.maximum(np.linalg.norm(fwd, axis=-1, keepdims=True), 1e-8)
    fwd = _savgol(fwd, rotation_window)
    yaw = np.arctan2(fwd[:, 0], fwd[:, 2])
    return pos, quat_from_yaw(yaw)


def add_simulation_bone(anim: Animation, roles: dict[str, int], forward_axis: np.ndarray | None = None) -> Animation:
    """Insert the simulation bone as joint 0; the old root becomes its child, re-expressed relative to it."""
    gpos, grot = anim.global_transforms()
    if forward_axis is None:
        forward_axis = hips_forward_axis(gpos, grot, roles)
    window_scale = anim.fps / 60.0
    pw = int(round(31 * window_scale)) | 1
    rw = int(round(61 * window_scale)) | 1
    sim_pos, sim_rot = simulation_bone(gpos, grot, roles, forward_axis, pw, rw)
    return attach_simulation_bone(anim, sim_pos, sim_rot)


def mirror_simulation_bone(sim_pos: np.ndarray, sim_rot: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The simulation bone of a mirrored clip: reflected position, negated yaw (the filter is linear,
    so this equals filtering the mirrored clip, at half the cost)."""
    return sim_pos * _REFLECT, sim_rot * np.array([1.0, 1.0, -1.0, -1.0])


def attach_simulation_bone(anim: Animation, sim_pos: np.ndarray, sim_rot: np.ndarray) -> Animation:
    """Insert a given simulation bone (F,3)/(F,4) as joint 0 above the old root."""
    skel = anim.skeleton
    inv = quat_inv(sim_rot)
    root_pos = quat_rotate(inv, anim.positions[:, 0] - sim_pos)
    root_rot = quat_mul(inv, anim.rotations[:, 0])
    positions = np.concatenate([sim_pos[:, None], root_pos[:, None], anim.positions[:, 1:]], axis=1)
    rotations = np.concatenate([sim_rot[:, None], root_rot[:, None], anim.rotations[:, 1:]], axis=1)
    new_skel = Skeleton(
        names=[SIMULATION_BONE] + list(skel.names),
        parents=np.concatenate([[-1], np.where(skel.parents < 0, 0, skel.parents + 1)]).astype(np.int64),
        offsets=np.concatenate([np.zeros((1, 3)), skel.offsets]),
        end_sites={k + 1: v for k, v in skel.end_sites.items()},
        channels=[("Xposition", "Yposition", "Zposition", "Zrotation", "Xrotation", "Yrotation")] + list(skel.channels),
    )
    return replace(anim, skeleton=new_skel, positions=positions, rotations=rotations)


def remove_simulation_bone(skel: Skeleton, positions: np.ndarray, rotations: np.ndarray) -> tuple[Skeleton, np.ndarray, np.ndarray]:
    """Fold joint 0 (the simulation bone) back into the original root: the source skeleton's layout."""
    root_pos = positions[..., 0, :] + quat_rotate(rotations[..., 0, :], positions[..., 1, :])
    root_rot = quat_mul(rotations[..., 0, :], rotations[..., 1, :])
    pos = np.concatenate([root_pos[..., None, :], positions[..., 2:, :]], axis=-2)
    rot = np.concatenate([root_rot[..., None, :], rotations[..., 2:, :]], axis=-2)
    out = Skeleton(names=list(skel.names[1:]),
                   parents=np.where(skel.parents[1:] <= 0, -1, skel.parents[1:] - 1).astype(np.int64),
                   offsets=skel.offsets[1:].copy(),
                   end_sites={k - 1: v for k, v in skel.end_sites.items() if k > 0},
                   channels=list(skel.channels[1:]))
    return out, pos, rot


# ---------------------------------------------------------------------------------------------
# Contacts

CONTACT_HEIGHT = 0.05     # m above the local floor
CONTACT_SPEED = 0.4       # m/s


def foot_contacts(gpos: np.ndarray, fps: float, toe_joints: list[int], height_threshold: float = CONTACT_HEIGHT,
                  speed_threshold: float = CONTACT_SPEED, filter_size: int = 5) -> np.ndarray:
    """Contact labels (F, len(toe_joints)): the toe within `height_threshold` m of the local floor
    and slower than `speed_threshold` m/s, median filtered.

    The local floor is a low percentile of the toe height over a 2 s window, which follows the
    slow vertical drift of some captures.
    """
    F = gpos.shape[0]
    out = np.zeros((F, len(toe_joints)), dtype=bool)
    win = max(3, int(round(2.0 * fps)))
    for i, t in enumerate(toe_joints):
        p = gpos[:, t]
        v = np.zeros(F)
        if F > 1:
            d = np.linalg.norm(np.diff(p, axis=0), axis=-1) * fps
            v[1:] = d
            v[0] = d[0]
        floor = percentile_filter(p[:, 1], 5, size=min(win, F), mode="nearest")
        c = ((p[:, 1] - floor) < height_threshold) & (v < speed_threshold)
        out[:, i] = median_filter(c.astype(np.uint8), size=filter_size, mode="nearest").astype(bool)
    return out


def toe_floor_height(gpos: np.ndarray, toe_joints: list[int]) -> float:
    """Height (m) of the toe joints above the capture's floor (y = 0) when planted: the 5th percentile
    of their heights over a clip's frames (F, J, 3). A property of the rig: the toe joint sits inside
    the foot, about 0 cm up in jlpm22, 4-5 cm in Bandai-Namco."""
    return float(np.percentile(gpos[:, toe_joints, 1], 5))


# ---------------------------------------------------------------------------------------------
# Tags

_BANDAI = re.compile(r"^(dataset-\d+)_(.+?)_([^_]+?)_(\d+)$")


def planted_toe_height_m(db) -> float:
    """Height (m) of the database's toe joints above the capture floor when planted: a property of the
    rig (about 0 in jlpm22, 4 cm in Bandai-Namco), stored at build (meta "toe_floor_m"), measured here
    on up to 60 clips for databases built before that (and kept in db.meta)."""
    if "toe_floor_m" not in db.meta:
        R = len(db.range_starts)
        toes = [db.roles["left_toe"], db.roles["right_toe"]]
        per_clip = [toe_floor_height(db.global_transforms(slice(int(db.range_starts[r]), int(db.range_stops[r])))[0],
                                     toes) for r in np.unique(np.linspace(0, R - 1, min(R, 60)).round().astype(int))]
        db.meta["toe_floor_m"] = round(float(np.median(per_clip)), 4)
    return float(db.meta["toe_floor_m"])


def _bandai_match(name: str):
    stem = name
    for suf in (".gz", ".bvh"):
        if stem.endswith(suf):
            stem = stem[: -len(suf)]
    return _BANDAI.match(stem)


def bandai_style(name: str) -> str | None:
    """The style of a Bandai-Namco file name (`dataset-1_walk-left_happy_003.bvh` -> happy), else None."""
    m = _bandai_match(name)
    return m.group(3) if m else None


def tags_from_filename(path: str | Path) -> list[str]:
    """Tags parsed from a file name: dataset, content and style for Bandai-Namco names
    (`dataset-1_walk-left_happy_003.bvh` -> dataset-1, walk-left, happy); otherwise the parent folder."""
    p = Path(path)
    m = _bandai_match(p.name)
    if m:
        dataset, content, style, _ = m.groups()
        tags = [dataset, content, style]
        # Broad content tags so `walk` selects every walking clip.
        base = content.split("-")[0]
        if base != content:
            tags.append(base)
        return tags
    parent = p.parent.name
    return [parent] if parent else []
