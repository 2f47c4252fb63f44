"""The pose source of learned characters (Holden et al. 2020): the model's projector where classic motion
matching searches, its stepper where classic plays the next database frame, its decompressor for the pose.

The decompressed poses are laid out like a database of 2n frames (rows 0..n-1: each agent's pose this
tick, rows n..2n-1: the pose a search projected to), so the playback, transition and touch-up stages
run unchanged on them: agent i always "plays" row i of a one-frame clip. See runtime/crowd.py.
Conventions: metres, seconds; quaternions (w, x, y, z).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..lmm.inference import decompress, normalize_query, project, step
from ..lmm.model import LearnedModel, check_model_fits, load_model

# A stop no frame reaches: learned agents never run out of clip.
NEVER = np.iinfo(np.int64).max // 4


class LearnedSource(NamedTuple):
    """Per-crowd state of learned agents (n of them)."""

    model: LearnedModel
    x: np.ndarray            # (n, F) float32 normalized features (the model's normalization)
    z: np.ndarray            # (n, Z) float32 latents
    raw: np.ndarray          # (n, F) float64 features of each agent's current x in database units
    pose: tuple              # positions, rotations, velocities, angular velocities (2n, J, ...), root vel/ang (2n, 3)
    contacts: np.ndarray     # (2n, 2) bool
    speeds: np.ndarray       # (2n,) float32 horizontal root speed m/s (what stride warping compares with)
    frame: np.ndarray        # (n,) int64 the row each agent plays (its own)
    frac: np.ndarray         # (n,) always 0
    stop: np.ndarray         # (2n,) int64 row + 1: every row is a one-frame clip
    never: np.ndarray        # (n,) int64 stops the search planner never reaches


def learned_model(db, path) -> LearnedModel:
    """The model at `path`, checked against the database (ModelError naming the file when it does not fit)."""
    model = load_model(path)
    check_model_fits(model, db, model_name=str(path))
    return model


def new_source(model: LearnedModel, db, n: int) -> LearnedSource:
    """Zeroed learned state for n agents, arrays typed like the database's so the stages compile once."""
    J, F = db.num_joints, model.num_features
    pos_t, rot_t = np.asarray(db.positions).dtype, np.asarray(db.rotations).dtype
    pose = (np.zeros((2 * n, J, 3), pos_t), np.zeros((2 * n, J, 4), rot_t), np.zeros((2 * n, J, 3), np.float32),
            np.zeros((2 * n, J, 3), np.float32), np.zeros((2 * n, 3), np.float32), np.zeros((2 * n, 3), np.float32))
    return LearnedSource(model, np.zeros((n, F), np.float32), np.zeros((n, model.latent_size), np.float32),
                         np.zeros((n, F)), pose, np.zeros((2 * n, 2), dtype=np.asarray(db.contacts).dtype),
                         np.zeros(2 * n, np.float32), np.arange(n, dtype=np.int64), np.zeros(n),
                         np.arange(1, 2 * n + 1, dtype=np.int64), np.full(n, NEVER, dtype=np.int64))


def write_pose(src: LearnedSource, rows: np.ndarray, x: np.ndarray, z: np.ndarray) -> None:
    """Decompress (x, z) (len(rows), ...) into pose rows `rows`."""
    p = decompress(src.model, x, z)
    positions, rotations, vel, ang, root_vel, root_ang = src.pose
    positions[rows], rotations[rows] = p.positions, p.rotations
    vel[rows], ang[rows] = p.velocities, p.angular_velocities
    root_vel[rows], root_ang[rows] = p.velocities[:, 0], p.angular_velocities[:, 0]
    src.contacts[rows] = p.contacts
    src.speeds[rows] = np.hypot(p.velocities[:, 0, 0], p.velocities[:, 0, 2])


def set_state(src: LearnedSource, agents: np.ndarray, x: np.ndarray, z: np.ndarray) -> None:
    """Agents continue from features x and latent z (their raw features follow)."""
    m = src.model
    src.x[agents], src.z[agents] = x, z
    src.raw[agents] = x.astype(np.float64) * m.feature_scale + m.feature_offset


def start(src: LearnedSource, i: int, raw_features: np.ndarray) -> None:
    """Agent i starts at the projection of a database frame's raw features, its pose in row i."""
    x, z = project(src.model, raw_features[None])
    set_state(src, np.array([i]), x, z)
    write_pose(src, np.array([i]), x, z)


def search(src: LearnedSource, agents: np.ndarray, raw_queries: np.ndarray, bias: np.ndarray):
    """Project the raw queries of `agents`; an agent jumps when the projected features are closer to its
    query than its current ones by more than `bias` (squared distances in the model's normalization, as
    classic search keeps the playing frame). Returns (jump mask, projected costs, normalized queries);
    the jumpers' new poses are written to rows n + agent."""
    q = normalize_query(src.model, raw_queries)
    px, pz = project(src.model, raw_queries)
    q64 = q.astype(np.float64)
    cost = np.sum((q64 - px) ** 2, axis=1)
    current = np.sum((q64 - src.x[agents]) ** 2, axis=1)
    # A rollout that left the numbers (a poorly trained stepper) is taken back to the data at once.
    jump = (cost + bias < current) | ~np.isfinite(current)
    if jump.any():
        n = len(src.frame)
        write_pose(src, n + agents[jump], px[jump], pz[jump])
        set_state(src, agents[jump], px[jump], pz[jump])
    return jump, cost, q


def advance(src: LearnedSource, rate: np.ndarray, dt: float) -> None:
    """Step every agent's features and latent dt seconds (scaled by its play rate) and decompress its pose."""
    x, z = step(src.model, src.x, src.z, 1.0)
    # step() answers x + dt * rate; per-agent dt: scale the increments here.
    h = (dt * rate).astype(np.float32)[:, None]
    x = src.x + h * (x - src.x)
    z = src.z + h * (z - src.z)
    set_state(src, src.frame, x, z)
    write_pose(src, src.frame, x, z)
