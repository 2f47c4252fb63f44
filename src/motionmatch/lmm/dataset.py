"""Training data for learned motion matching, read from a pose database batch by batch (numpy only).

Training builds the pose vectors of every frame once (`pose_table`: 78 MB for the default database,
0.86 GB for the 667k frames of Bandai-Namco's) and gathers its batches from that table inside the
compiled step: built per batch in numpy they took longer than the step itself. Velocities are forward
differences inside a clip, backward at its last frame: the velocity of the step f -> f + 1, which the
runtime reads for frame f (central differences half a frame ahead, docs/ARCHITECTURE.md).

Joints between the simulation bone and the hips (Bandai-Namco's `joint_Root`) may carry the clip's world
translation, which no feature can predict. The learned pose puts them at the simulation bone (zero
translation, identity rotation) and gives the hips their transform relative to the simulation bone, so
the hips and everything below keep their exact world pose.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..maths.rotations import quat_inv_rotate, quat_mul, quat_mul_inv, quat_rotate, quat_to_matrix, quat_to_scaled_angle_axis
from .model import pose_layout, pose_size


@dataclass
class PoseFrames:
    """The frames training may use: the database arrays, clip ranges and finite-difference pairs."""

    positions: np.ndarray       # (N, J, 3) float32, the database's (possibly memory-mapped)
    rotations: np.ndarray       # (N, J, 4)
    contacts: np.ndarray        # (N, 2) bool
    features: np.ndarray        # (N, F) float32 normalized with the database's schema weights
    range_starts: np.ndarray    # (R,) int64
    range_stops: np.ndarray     # (R,) int64, exclusive
    diff_from: np.ndarray       # (N,) int64: velocity of frame f = (frame diff_to[f] - frame diff_from[f]) * fps
    diff_to: np.ndarray
    fps: float
    hips: int = 1                   # the hips joint
    above_hips: tuple = ()          # joints strictly between the simulation bone and the hips, top down

    @property
    def num_frames(self) -> int:
        return len(self.diff_from)

    @property
    def num_joints(self) -> int:
        return self.positions.shape[1]


def pose_frames(db, max_frames: int | None = None) -> PoseFrames:
    """The database's frames for training; max_frames keeps only the first frames (clips cut there)."""
    n = db.num_frames if max_frames is None else min(int(max_frames), db.num_frames)
    starts = np.asarray(db.range_starts, dtype=np.int64)
    stops = np.minimum(np.asarray(db.range_stops, dtype=np.int64), n)
    keep = stops - starts >= 2
    starts, stops = starts[keep], stops[keep]
    if not len(starts):
        raise ValueError(f"no clip of 2 frames or more in the first {n} frames of the database")
    n = int(stops[-1])
    last = np.zeros(n, dtype=bool)
    last[stops - 1] = True
    f = np.arange(n)
    diff_from = np.where(last, f - 1, f)
    diff_to = np.where(last, f, f + 1)
    hips = int(db.roles.get("hips", 1))
    above, j = [], int(db.skeleton.parents[hips])
    while j > 0:
        above.insert(0, j)
        j = int(db.skeleton.parents[j])
    # Frames between kept clips (dropped one-frame clips) are never sampled; pairs stay in range.
    return PoseFrames(db.positions, db.rotations, db.contacts, db.features.normalized[:n],
                      starts, stops, diff_from, diff_to, float(db.fps), hips, tuple(above))


def learned_local_pose(data: PoseFrames, frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Local positions (M, J, 3) and rotations (M, J, 4), float64, of frames, with the joints above the
    hips moved onto the simulation bone (see the module docstring)."""
    pos = np.asarray(data.positions[frames], dtype=np.float64)
    rot = np.asarray(data.rotations[frames], dtype=np.float64)
    if data.above_hips:
        top = data.above_hips[0]
        p, q = pos[:, top].copy(), rot[:, top].copy()
        for j in data.above_hips[1:] + (data.hips,):
            p = p + quat_rotate(q, pos[:, j])
            q = quat_mul(q, rot[:, j])
        pos[:, data.hips], rot[:, data.hips] = p, q
        for j in data.above_hips:
            pos[:, j] = 0.0
            rot[:, j] = (1.0, 0.0, 0.0, 0.0)
    return pos, rot


def pose_vectors(data: PoseFrames, frames: np.ndarray) -> np.ndarray:
    """Pose vectors y (..., D) float32 of the given frame indices (layout: model.pose_layout)."""
    frames = np.asarray(frames, dtype=np.int64)
    flat = frames.reshape(-1)
    pos, rot = learned_local_pose(data, flat)
    pos_a, rot_a = learned_local_pose(data, data.diff_from[flat])
    pos_b, rot_b = learned_local_pose(data, data.diff_to[flat])
    vel = (pos_b - pos_a) * data.fps
    ang = quat_to_scaled_angle_axis(quat_mul_inv(rot_b, rot_a)) * data.fps
    m = len(flat)
    k = data.num_joints - 1
    lay = pose_layout(data.num_joints)
    y = np.empty((m, pose_size(data.num_joints)), dtype=np.float32)
    y[:, lay["positions"]] = pos[:, 1:].reshape(m, 3 * k)
    y[:, lay["rotations"]] = two_columns(rot[:, 1:]).reshape(m, 6 * k)
    y[:, lay["velocities"]] = vel[:, 1:].reshape(m, 3 * k)
    y[:, lay["angular_velocities"]] = ang[:, 1:].reshape(m, 3 * k)
    y[:, lay["root_velocity"]] = quat_inv_rotate(rot[:, 0], vel[:, 0])
    y[:, lay["root_angular_velocity"]] = quat_inv_rotate(rot[:, 0], ang[:, 0])
    y[:, lay["contacts"]] = data.contacts[flat]
    return y.reshape(frames.shape + (y.shape[1],))


def two_columns(q: np.ndarray) -> np.ndarray:
    """Quaternions (..., 4) -> the first two columns of their rotation matrices (..., 6)."""
    m = quat_to_matrix(q)
    return np.concatenate([m[..., :, 0], m[..., :, 1]], axis=-1)


def window_starts(data: PoseFrames, window: int) -> np.ndarray:
    """First frames of every run of `window` consecutive frames inside one clip."""
    out = [np.arange(s, e - window + 1) for s, e in zip(data.range_starts, data.range_stops) if e - s >= window]
    if not out:
        raise ValueError(f"no clip holds {window} consecutive frames; use more frames")
    return np.concatenate(out)


def pose_table(data: PoseFrames, chunk: int = 8192) -> np.ndarray:
    """Pose vectors (N, D) float32 of every frame, built chunk by chunk."""
    n = data.num_frames
    out = np.empty((n, pose_size(data.num_joints)), dtype=np.float32)
    for s in range(0, n, chunk):
        out[s:s + chunk] = pose_vectors(data, np.arange(s, min(s + chunk, n)))
    return out


def projector_samples(data: PoseFrames, searcher, rng: np.random.Generator, count: int,
                      noise: float) -> tuple[np.ndarray, np.ndarray]:
    """`count` projector queries and their targets: searchable frames' normalized features plus Gaussian
    noise of a random size (uniform in [0, noise] normalized units per query), and the exact nearest
    searchable frame of each (searcher: a search.Searcher over data.features). Returns queries (count, F)
    float32 and frames (count,) int64."""
    searchable = np.flatnonzero(searcher.searchable)
    k = searchable[rng.integers(0, len(searchable), size=count)]
    f = data.features.shape[1]
    query = (data.features[k] + rng.normal(size=(count, f)) * rng.uniform(0.0, noise, size=(count, 1)))
    query = query.astype(np.float32)
    nearest, _ = searcher.search_batch(query)
    return query, nearest


def sample_starts(rng: np.random.Generator, starts: np.ndarray, shape) -> np.ndarray:
    """Random window first frames (int32, of the given shape) drawn from `starts`."""
    return starts[rng.integers(0, len(starts), size=shape)].astype(np.int32)
