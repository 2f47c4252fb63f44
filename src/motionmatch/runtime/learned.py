"""The pose source of learned characters (Holden et al. 2020): the model's projector where classic motion
matching searches, its stepper where classic plays the next database frame, its decompressor for the pose.

The decompressed poses are laid out like a database of 2n frames (rows 0..n-1: each agent's pose this
tick, rows n..2n-1: the pose a search projected to), so the playback, transition and touch-up stages
run unchanged on them: agent i always "plays" row i of a one-frame clip. See runtime/crowd.py.
Conventions: metres, seconds; quaternions (w, x, y, z).
"""
from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

from ..lmm.inference import forward, project, scratch, unpack_pose
from ..maths.scalar_quat import cross3, qmul, qrot
from ..lmm.model import LearnedModel, check_model_fits, load_model
from ..motion.preprocess import CONTACT_HEIGHT, CONTACT_SPEED, planted_toe_height_m
from .playback import Frames

# m/s: the fastest decompressed toe that can be planted. The database's rule (CONTACT_SPEED, 0.4) is
# made for captured plants; a decompressed planted toe moves faster (its velocity is a network output
# summed down the leg): mixed database, run, at the output's own contacts the decompressed toes moved
# at a median 0.3 and 1.3 m/s (left, right), swinging toes at 2.5-4. With 0.4 m/s the right foot never
# locked and the learned run slid 1.7-2.3x classic (docs/LMM.md).
LEARNED_TOE_SPEED = 3.0 * CONTACT_SPEED

# m/s: a learned foot unlocked by drifting locks again once its animated toe is slower than this, though
# its contact has not ended (touchups.foot_lock_update). The database's contacts end at every step; the
# learned ones (regressed outputs or the rule above) are held through whole steps, so a foot that drifted
# out of its lock stayed free and slid: mixed database, stop_and_go, 39 % of the learned sliding came
# from contact frames of such feet (classic: none), 5.2 -> 2.8 cm/s with this (docs/LMM.md).
LEARNED_RELOCK_SPEED = 0.5 * CONTACT_SPEED

# A stop no frame reaches: learned agents never run out of clip.
NEVER = np.iinfo(np.int64).max // 4


class LearnedSource(NamedTuple):
    """Per-crowd state of learned agents (n of them)."""

    model: LearnedModel
    x: np.ndarray            # (n, F) float32 normalized features (the model's normalization)
    z: np.ndarray            # (n, Z) float32 latents
    raw: np.ndarray          # (n, F) float64 features of each agent's current x in database units
    pose: Frames             # (2n, ...) rows: each agent's pose this tick, then the poses searches projected to
    contacts: np.ndarray     # (2n, 2) bool
    speeds: np.ndarray       # (2n,) float32 horizontal root speed m/s (what stride warping compares with)
    frame: np.ndarray        # (n,) int64 the row each agent plays (its own)
    frac: np.ndarray         # (n,) always 0
    stop: np.ndarray         # (2n,) int64 row + 1: every row is a one-frame clip
    never: np.ndarray        # (n,) int64 stops the search planner never reaches
    work: tuple              # preallocated kernel buffers (new_source): no allocation per tick
    parents: np.ndarray      # (J,) int64
    pose_channels: np.ndarray  # (C, 3) int64 per position/velocity feature channel: kind (0/1), joint, column
    shown: np.ndarray        # (F,) bool: the feature columns a learned query takes from the decompressed pose
    moving: np.ndarray       # (F,) bool: those of them that are velocities (feet, hips)
    toes: np.ndarray         # (2,) int64 left and right toe joints
    toe_floor: np.ndarray    # (2,) float64 m: each toe's height when planted (preprocess.planted_toe_height_m)


def learned_model(db, path) -> LearnedModel:
    """The model at `path`, checked against the database (ModelError naming the file when it does not fit)."""
    model = load_model(path)
    check_model_fits(model, db, model_name=str(path))
    return model


def new_source(model: LearnedModel, db, n: int) -> LearnedSource:
    """Zeroed learned state for n agents, arrays typed like the database's so the stages compile once."""
    J, F = db.num_joints, model.num_features
    pos_t, rot_t = np.asarray(db.positions).dtype, np.asarray(db.rotations).dtype
    pose = Frames(np.zeros((2 * n, J, 3), pos_t), np.zeros((2 * n, J, 4), rot_t), np.zeros((2 * n, J, 3), np.float32),
                  np.zeros((2 * n, J, 3), np.float32), np.zeros((2 * n, 3), np.float32),
                  np.zeros((2 * n, 3), np.float32))
    xz = F + model.latent_size
    work = (np.zeros((n, xz), np.float32), np.zeros((n, xz), np.float32),
            np.zeros((n, model.decompressor.outputs), np.float32), np.zeros((n, F), np.float32),
            *scratch(model, n))
    names = list(db.skeleton.names)
    toes = np.array([db.roles["left_toe"], db.roles["right_toe"]], dtype=np.int64)
    channels = [(0 if c.kind == "position" else 1, db.roles[c.joint] if c.joint in db.roles else names.index(c.joint),
                 db.features.channel_slices[c.name].start)
                for c in db.features.schema.channels if c.kind in ("position", "velocity")]
    shown, moving = np.zeros(F, dtype=np.bool_), np.zeros(F, dtype=np.bool_)
    for kind, _, col in channels:
        shown[col:col + 3] = True
        moving[col:col + 3] = kind == 1
    return LearnedSource(model, np.zeros((n, F), np.float32), np.zeros((n, model.latent_size), np.float32),
                         np.zeros((n, F)), pose, np.zeros((2 * n, 2), dtype=np.asarray(db.contacts).dtype),
                         np.zeros(2 * n, np.float32), np.arange(n, dtype=np.int64), np.zeros(n),
                         np.arange(1, 2 * n + 1, dtype=np.int64), np.full(n, NEVER, dtype=np.int64), work,
                         np.asarray(db.skeleton.parents, dtype=np.int64),
                         np.array(channels, dtype=np.int64).reshape(-1, 3), shown, moving, toes,
                         np.full(2, planted_toe_height_m(db)))


@numba.njit(cache=True)
def _join(x, z, out):
    """Rows of [x | z] (the networks' input) into the first len(x) rows of out."""
    F = x.shape[1]
    for r in range(x.shape[0]):
        for c in range(F):
            out[r, c] = x[r, c]
        for c in range(z.shape[1]):
            out[r, F + c] = z[r, c]


@numba.njit(cache=True)
def _write_pose(rows, x, z, decompressor, work, feet, pose, contacts, speeds):
    """Decompress (x, z) (m, ...) into rows `rows` (m,) of `pose` (Frames), contacts and speeds.

    A foot is in contact when the decompressor says so or when the decompressed toe is near its floor
    (the database build's CONTACT_HEIGHT, preprocess.foot_contacts) and slower than the speed limit of
    `feet` (LEARNED_TOE_SPEED). The contact outputs are regressions of 0/1 labels: on a database of many
    styles they stay below 0.5 through a whole run (1 % of frames in contact against 10 % for classic),
    and the foot lock needs the contact of the pose it shows. The toe's speed is the decompressor's
    velocity output (a finite difference between ticks measured worse: every projection jump breaks it)."""
    xz, _, y, _, a, b = work
    parents, toes, floor, toe_speed = feet
    pos, rot, vel, ang, root_vel, root_ang = pose
    J = parents.shape[0]
    gp, gv, gw, gr = np.zeros((J, 3)), np.zeros((J, 3)), np.zeros((J, 3)), np.zeros((J, 4))
    m = x.shape[0]
    _join(x, z, xz)
    forward(xz[:m], decompressor, a, b, y[:m])
    unpack_pose(y[:m], rows, pos, rot, vel, ang, contacts)
    for r in range(m):
        i = rows[r]
        for c in range(3):
            root_vel[i, c] = vel[i, 0, c]
            root_ang[i, c] = ang[i, 0, c]
        speeds[i] = np.hypot(vel[i, 0, 0], vel[i, 0, 2])
        character_space(i, parents, pos, rot, vel, ang, gp, gv, gw, gr)
        for s in range(2):
            t = toes[s]
            speed = np.sqrt(gv[t, 0] ** 2 + gv[t, 1] ** 2 + gv[t, 2] ** 2)
            if gp[t, 1] - floor[s] < CONTACT_HEIGHT and speed < toe_speed:
                contacts[i, s] = True


def write_pose(src: LearnedSource, rows: np.ndarray, x: np.ndarray, z: np.ndarray) -> None:
    """Decompress (x, z) (len(rows), ...) into pose rows `rows`."""
    m = src.model
    _write_pose(np.asarray(rows, dtype=np.int64), np.ascontiguousarray(x, np.float32),
                np.ascontiguousarray(z, np.float32), m.decompressor.kernel_args, src.work, contact_rule(src), src.pose,
                src.contacts, src.speeds)


def contact_rule(src: LearnedSource) -> tuple:
    """What the contact rule of _write_pose reads: parents, toe joints, their floor heights and the
    planted toe's speed limit (m/s)."""
    return src.parents, src.toes, src.toe_floor, LEARNED_TOE_SPEED


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


def enter(src: LearnedSource, i: int, raw_features: np.ndarray) -> None:
    """Agent i of n switches in from classic playing a frame with these raw features: it starts at their
    projection (start), whose pose is also written to row n + i, where the switch's transition goes."""
    start(src, i, raw_features)
    write_pose(src, np.array([len(src.frame) + i]), src.x[i:i + 1], src.z[i:i + 1])


@numba.njit(cache=True)
def character_space(i, parents, pos, rot, vel, ang, gp, gv, gw, gr):
    """Character-space positions gp, velocities gv, angular velocities gw (J, 3) and rotations gr (J, 4) of
    pose row i (joint 0 at the origin; velocities include the root's own motion, like the database's
    features)."""
    J = parents.shape[0]
    gr[0, 0] = 1.0
    for c in range(3):
        gv[0, c], gw[0, c] = vel[i, 0, c], ang[i, 0, c]
    for j in range(1, J):
        p = parents[j]
        w, x, y, z = gr[p, 0], gr[p, 1], gr[p, 2], gr[p, 3]
        ox, oy, oz = qrot(w, x, y, z, pos[i, j, 0], pos[i, j, 1], pos[i, j, 2])
        gp[j, 0], gp[j, 1], gp[j, 2] = gp[p, 0] + ox, gp[p, 1] + oy, gp[p, 2] + oz
        gr[j, 0], gr[j, 1], gr[j, 2], gr[j, 3] = qmul(w, x, y, z, rot[i, j, 0], rot[i, j, 1], rot[i, j, 2],
                                                      rot[i, j, 3])
        ax, ay, az = qrot(w, x, y, z, ang[i, j, 0], ang[i, j, 1], ang[i, j, 2])
        gw[j, 0], gw[j, 1], gw[j, 2] = gw[p, 0] + ax, gw[p, 1] + ay, gw[p, 2] + az
        cx, cy, cz = cross3(gw[p, 0], gw[p, 1], gw[p, 2], ox, oy, oz)
        vx, vy, vz = qrot(w, x, y, z, vel[i, j, 0], vel[i, j, 1], vel[i, j, 2])
        gv[j, 0], gv[j, 1], gv[j, 2] = gv[p, 0] + cx + vx, gv[p, 1] + cy + vy, gv[p, 2] + cz + vz


@numba.njit(cache=True)
def pose_features(agents, parents, channels, pos, rot, vel, ang, raw):
    """Overwrite the position/velocity feature columns of raw queries (len(agents), F) with the values of
    each agent's decompressed pose (row agents[a]), in character space like the database's features
    (velocities include the root's own motion). The stepped features x drift between searches; the
    pose is what the character shows."""
    J = parents.shape[0]
    gp, gv, gw, gr = np.zeros((J, 3)), np.zeros((J, 3)), np.zeros((J, 3)), np.zeros((J, 4))
    for a in range(agents.shape[0]):
        i = agents[a]
        character_space(i, parents, pos, rot, vel, ang, gp, gv, gw, gr)
        for k in range(channels.shape[0]):
            kind, j, col = channels[k, 0], channels[k, 1], channels[k, 2]
            for c in range(3):
                raw[a, col + c] = gp[j, c] if kind == 0 else gv[j, c]


@numba.njit(cache=True)
def _search(agents, raw_queries, push, drift, projector, normalization, columns, x, work, results):
    """Normalized queries q, projections (px, pz), their costs and the costs of staying of `agents`, into
    results = (q, pushed, px, pz, cost, current); normalization = (feature offset, scale); columns = (shown,
    moving) (LearnedSource).

    The projector regresses toward the data's mean: its projections fall short of what the query's
    trajectory asks (a walk start projects to poses slower than the frames they stand for, a stop to
    poses that creep on). With push[r] > 0 the query's trajectory columns are moved past the first
    projection by push times its shortfall and projected again; the cost stays measured against the
    query itself.

    The current state's cost is the trajectory's mismatch, like classic search's whose query takes its pose
    columns from the playing frame, plus drift[r] times the squared difference of the stepped x's
    velocity columns (`moving`) from those of the pose it shows (the query's): a stepped state drifts
    off the data, and when its features no longer describe the motion they stop being a fair
    measure of it. The position columns are left out: counted in full with the velocities, jumps won
    too often (a walk start was re-projected to its first frames at every search). The projection
    pays the same drift, measured on its decompressed pose (search)."""
    offset, scale = normalization
    shown, moving = columns
    q, pushed, px, pz, cost, current = results
    _, out, _, _, a, b = work
    m, F = raw_queries.shape
    for r in range(m):
        for c in range(F):
            q[r, c] = np.float32((raw_queries[r, c] - offset[c]) / scale[c])
    forward(q, projector, a, b, out[:m])
    again = False
    for r in range(m):
        again |= push[r] != 0.0
        for c in range(F):
            pushed[r, c] = q[r, c] if shown[c] else q[r, c] + np.float32(push[r]) * (q[r, c] - out[r, c])
    if again:
        forward(pushed, projector, a, b, out[:m])
    for r in range(m):
        best, stay = 0.0, 0.0
        i = agents[r]
        for c in range(F):
            px[r, c] = out[r, c]
            d = np.float64(q[r, c]) - out[r, c]
            best += d * d
            e = np.float64(q[r, c]) - x[i, c]
            if not shown[c]:
                stay += e * e
            elif moving[c]:
                stay += drift[r] * e * e
        for c in range(pz.shape[1]):
            pz[r, c] = out[r, F + c]
        cost[r], current[r] = best, stay


def search(src: LearnedSource, agents: np.ndarray, raw_queries: np.ndarray, bias: np.ndarray,
           push: np.ndarray | None = None, drift: np.ndarray | None = None):
    """Project the raw queries of `agents`; an agent jumps when the projected features are closer to its
    query than its current ones by more than `bias` (squared distances in the model's normalization, as
    classic search keeps the playing frame). The queries' pose features are taken from the agents'
    decompressed poses (pose_features). push (per agent, settings' lmm_push; None: 0): project a second
    time with the query's trajectory pushed past the first projection by push times its shortfall (_search).
    drift (per agent, settings' lmm_drift; None: 0): weight of the stepped features' velocity drift in
    the cost of staying (_search).
    The projection pays drift too, from its own decompressed pose: a projection whose pose disagrees
    with its features as much as the stepped state's does is no better a state. Charged to the current
    state only, it made a loop (mixed database, seed-0 model, walk): every search jumped back to the
    same projection, whose pose glided with frozen legs for 9 s (sliding 10x classic).
    Returns (jump mask, the projections' costs with their drift, normalized queries); the projected
    poses are written to rows n + agent (with drift 0: the jumpers' only)."""
    raw_queries = np.array(raw_queries, dtype=np.float64)
    pose_features(agents, src.parents, src.pose_channels, *src.pose[:4], raw_queries)
    m, F, Z = len(agents), src.model.num_features, src.model.latent_size
    q, pushed = np.empty((m, F), np.float32), np.empty((m, F), np.float32)
    px, pz = np.empty((m, F), np.float32), np.empty((m, Z), np.float32)
    cost, current = np.empty(m), np.empty(m)
    push = np.zeros(m) if push is None else np.asarray(push, dtype=np.float64)
    drift = np.zeros(m) if drift is None else np.asarray(drift, dtype=np.float64)
    mod = src.model
    _search(agents, raw_queries, push, drift, mod.projector.kernel_args, (mod.feature_offset, mod.feature_scale),
            (src.shown, src.moving), src.x, src.work, (q, pushed, px, pz, cost, current))
    rows = len(src.frame) + agents
    if drift.any():
        write_pose(src, rows, px, pz)
        shown = np.zeros((m, F))
        pose_features(rows, src.parents, src.pose_channels, *src.pose[:4], shown)
        mv = src.moving
        e = (shown[:, mv] - mod.feature_offset[mv]) / mod.feature_scale[mv] - px[:, mv]
        cost += drift * np.einsum("ij,ij->i", e, e)
    # A rollout that left the numbers (a poorly trained stepper) is taken back to the data at once.
    jump = (cost + np.asarray(bias, dtype=np.float64) < current) | ~np.isfinite(current)
    if jump.any():
        if not drift.any():
            write_pose(src, rows[jump], px[jump], pz[jump])
        set_state(src, agents[jump], px[jump], pz[jump])
    return jump, cost, q


@numba.njit(cache=True)
def _advance(rate, dt, state, stepper, decompressor, work, feet, normalization, rows, pose, contacts, speeds):
    """x, z += dt * play rate * their stepped rates of change, raw follows (state = (x, z, raw);
    normalization = (feature offset, scale)); rows `rows` of `pose` (Frames) get the pose."""
    x, z, raw = state
    offset, scale = normalization
    xz, change, _, _, a, b = work
    n, F = x.shape
    _join(x, z, xz)
    forward(xz, stepper, a, b, change)
    for r in range(n):
        h = np.float32(dt * rate[r])
        for c in range(F):
            x[r, c] += h * change[r, c]
            raw[r, c] = x[r, c] * scale[c] + offset[c]
        for c in range(z.shape[1]):
            z[r, c] += h * change[r, F + c]
    _write_pose(rows, x, z, decompressor, work, feet, pose, contacts, speeds)


def advance(src: LearnedSource, rate: np.ndarray, dt: float) -> None:
    """Step every agent's features and latent dt seconds (scaled by its play rate) and decompress its pose.

    On the calling thread even for a crowd: the layers run blocks of agents (inference.dense), and
    parallel regions of tuples of arrays are not available in numba."""
    m = src.model
    _advance(rate, float(dt), (src.x, src.z, src.raw), m.stepper.kernel_args, m.decompressor.kernel_args, src.work,
             contact_rule(src), (m.feature_offset, m.feature_scale), src.frame, src.pose, src.contacts, src.speeds)
