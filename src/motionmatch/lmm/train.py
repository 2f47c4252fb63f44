"""Training the learned motion matching networks with JAX + optax (the only module importing them).

Stages, in order (Holden et al. 2020):
1. compressor + decompressor: the compressor maps a pose (local values plus its forward-kinematics
   character-space positions and rotations) to a latent z; the decompressor rebuilds the pose from the
   features x and z. Losses: local pose values, character-space (FK) positions and rotations, their
   finite-difference velocities over two frames, contacts, and L1 / L2 / temporal regularisation of z.
2. stepper: (x, z) -> their rates of change, trained by rolling out windows of frames.
3. projector: a noisy query -> (x, z) of its nearest searchable frame (exact search), so queries that
   match no frame still land on the data.

The time budget (--minutes) is split between the stages; the learning rate decays exponentially over
each stage. Each compiled call (`train_block`) runs `steps_per_call` optimizer steps on batches it
gathers from tables already on the device (pose vectors of every frame, features, latents, the
projector's pool of searched targets), so the host draws indices, searches new projector targets and
reads the losses once per call. A checkpoint beside the output is written every minute and at each stage's end; a new run
with the same database and settings resumes from it.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .dataset import (PoseFrames, pose_frames, pose_table, pose_vectors, projector_samples, sample_starts,
                      window_starts)
from .model import LearnedModel, Network, database_fingerprint, pose_layout, save_model
from ..files.atomic_file import replacing
from ..search import Searcher

STAGES = ("decompressor", "stepper", "projector")
STAGE_SHARES = {"decompressor": 0.4, "stepper": 0.2, "projector": 0.4}
# Training minutes; loading, compressing and the tables add about a minute, so a default run ends
# within the 30 minutes (the measured models of docs/LMM.md trained 30).
DEFAULT_MINUTES = 28.0
CHECKPOINT_VERSION = 2


@dataclass
class TrainSettings:
    """Training options (the paper's 32-d latent; narrower layers, see `hidden`)."""

    minutes: float | None = None        # total time budget, split by STAGE_SHARES (default DEFAULT_MINUTES)
    iterations: int | None = None       # or a fixed number of iterations per stage
    seed: int = 0
    hidden: int = 128                   # the paper: 512; 128 runs a frame 2x faster and trains far more iterations
    latent: int = 32
    batch: int = 32                     # decompressor and stepper (compute-bound: samples/s do not grow with it)
    projector_batch: int = 256          # the projector's network is cheap: larger batches learn more per second
    steps_per_call: int = 16            # optimizer steps per compiled call (lax.scan); losses reach the host once per call
    stepper_window: int = 20            # frames rolled out per stepper sample
    max_frames: int | None = None       # train on the first frames only (tests, quick trials)
    learning_rate: float = 1e-3         # at a batch of 32; scaled by sqrt(batch / 32)
    final_learning_rate_ratio: float = 0.05
    # Largest query noise, in normalized feature units. 1.0 before: paired with the same decompressor and
    # stepper, 0.5 missed fewer quality goals (docs/LMM.md, Measured, 2026-11-27).
    projector_noise: float = 0.5
    projector_pool: int = 32768         # (noisy query, nearest frame) pairs searched ahead of the steps
    projector_reuse: float = 8.0        # batches draw from the pool; new pairs replace 1/reuse of what they draw
    checkpoint_seconds: float = 60.0
    progress: bool = True

    def budget(self, stage: str) -> tuple[int | None, float | None]:
        """(iterations, seconds) for a stage: exactly one is set."""
        if self.iterations is not None:
            return int(self.iterations), None
        return None, 60.0 * (self.minutes if self.minutes is not None else DEFAULT_MINUTES) * STAGE_SHARES[stage]

    def identity(self) -> dict:
        """What a checkpoint must share with this run to be resumed."""
        return {k: v for k, v in asdict(self).items() if k not in ("progress", "checkpoint_seconds")}


@dataclass
class TrainResult:
    model: LearnedModel
    history: dict          # stage -> loss name -> (iterations,) float32
    latents: np.ndarray    # (N, Z) float32: the compressor's z of every training frame
    checkpoint_resumed: bool = False
    seconds: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Networks as pytrees: a list of (w, b) per network; normalization statistics stay fixed.

def init_layers(key, sizes: list[int]) -> list[tuple[jnp.ndarray, jnp.ndarray]]:
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        key, sub = jax.random.split(key)
        layers.append((jax.random.normal(sub, (a, b), jnp.float32) * np.float32(np.sqrt(2.0 / a)),
                       jnp.zeros((b,), jnp.float32)))
    return layers


def mlp(layers, stats, inputs, activation: str):
    """The network of inference.evaluate in JAX: standardize, hidden layers, linear output, de-standardize."""
    in_mean, in_std, out_mean, out_std = stats
    h = (inputs - in_mean) / in_std
    act = jax.nn.relu if activation == "relu" else jax.nn.elu
    for w, b in layers[:-1]:
        h = act(h @ w + b)
    w, b = layers[-1]
    return (h @ w + b) * out_std + out_mean


def _stats(a: np.ndarray, floor: float = 1e-3):
    a = np.asarray(a, dtype=np.float64).reshape(-1, a.shape[-1])
    return a.mean(0).astype(np.float32), np.maximum(a.std(0), floor).astype(np.float32)


def _unit_stats(n: int):
    return np.zeros(n, np.float32), np.ones(n, np.float32)


# ---------------------------------------------------------------------------------------------
# Forward kinematics in character space (simulation bone at the origin), for losses and the compressor

def two_columns_to_matrix(t):
    """(..., 6) first two matrix columns -> (..., 3, 3) rotation matrices (Gram-Schmidt)."""
    a = t[..., :3] / (jnp.linalg.norm(t[..., :3], axis=-1, keepdims=True) + 1e-8)
    b = t[..., 3:] - jnp.sum(a * t[..., 3:], axis=-1, keepdims=True) * a
    b = b / (jnp.linalg.norm(b, axis=-1, keepdims=True) + 1e-8)
    return jnp.stack([a, b, jnp.cross(a, b)], axis=-1)


def character_space(y, parents: tuple[int, ...]):
    """Pose vectors (..., D) -> character-space joint positions (..., K, 3) and two-column rotations (..., K, 6)."""
    j = len(parents)
    lay = pose_layout(j)
    lead = y.shape[:-1]
    pos = y[..., lay["positions"]].reshape(lead + (j - 1, 3))
    mat = two_columns_to_matrix(y[..., lay["rotations"]].reshape(lead + (j - 1, 6)))
    gp, gr = [None] * j, [None] * j
    for i in range(1, j):
        p = parents[i]
        lp, lr = pos[..., i - 1, :], mat[..., i - 1, :, :]
        if p == 0:
            gp[i], gr[i] = lp, lr
        else:
            gr[i] = gr[p] @ lr
            gp[i] = gp[p] + (gr[p] @ lp[..., None])[..., 0]
    cpos = jnp.stack(gp[1:], axis=-2)
    crot = jnp.stack(gr[1:], axis=-3)
    return cpos, jnp.concatenate([crot[..., :, 0], crot[..., :, 1]], axis=-1)


@partial(jax.jit, static_argnames=("parents",))
def _compressor_inputs(y, *, parents: tuple):
    return compressor_input(y, parents)


def compressor_input(y, parents):
    cpos, ctxy = character_space(y, parents)
    lead = y.shape[:-1]
    return jnp.concatenate([y, cpos.reshape(lead + (-1,)), ctxy.reshape(lead + (-1,))], axis=-1)


# ---------------------------------------------------------------------------------------------
# Losses (weights after the paper's training scripts; metres, seconds, normalized features)

DECOMPRESSOR_WEIGHTS = {
    "loc_pos": 75.0, "loc_rot": 10.0, "loc_vel": 10.0, "loc_ang": 1.25, "root": 2.0, "contacts": 2.0,
    "chr_pos": 15.0, "chr_rot": 15.0, "lvel_pos": 10.0, "lvel_rot": 1.75, "cvel_pos": 2.0, "cvel_rot": 1.0,
    "z_l1": 0.1, "z_l2": 0.1, "z_vel": 0.01,
}
STEPPER_WEIGHTS = {"x": 2.0, "z": 7.5, "x_vel": 0.2, "z_vel": 0.5}
PROJECTOR_WEIGHTS = {"x": 1.0, "z": 5.0, "dist": 0.3}


def decompressor_losses(params, y, x, *, nets, parents, dt):
    """y: (B, 2, D) true pose vectors of two consecutive frames; x: (B, 2, F)."""
    j = len(parents)
    lay = pose_layout(j)
    z = mlp(params["compressor"], nets["compressor"], compressor_input(y, parents), "elu")
    yp = mlp(params["decompressor"], nets["decompressor"], jnp.concatenate([x, z], axis=-1), "relu")
    l1 = lambda a, b: jnp.mean(jnp.abs(a - b))
    cp_t, cr_t = character_space(y, parents)
    cp_p, cr_p = character_space(yp, parents)
    d = lambda a: (a[:, 1] - a[:, 0]) / dt
    root = slice(lay["root_velocity"].start, lay["root_angular_velocity"].stop)
    return {
        "loc_pos": l1(yp[..., lay["positions"]], y[..., lay["positions"]]),
        "loc_rot": l1(yp[..., lay["rotations"]], y[..., lay["rotations"]]),
        "loc_vel": l1(yp[..., lay["velocities"]], y[..., lay["velocities"]]),
        "loc_ang": l1(yp[..., lay["angular_velocities"]], y[..., lay["angular_velocities"]]),
        "root": l1(yp[..., root], y[..., root]),
        "contacts": l1(yp[..., lay["contacts"]], y[..., lay["contacts"]]),
        "chr_pos": l1(cp_p, cp_t),
        "chr_rot": l1(cr_p, cr_t),
        "lvel_pos": l1(d(yp[..., lay["positions"]]), d(y[..., lay["positions"]])),
        "lvel_rot": l1(d(yp[..., lay["rotations"]]), d(y[..., lay["rotations"]])),
        "cvel_pos": l1(d(cp_p), d(cp_t)),
        "cvel_rot": l1(d(cr_p), d(cr_t)),
        "z_l1": jnp.mean(jnp.abs(z)),
        "z_l2": jnp.mean(z * z),
        "z_vel": jnp.mean(jnp.abs(d(z))),
    }


def stepper_losses(params, x, z, *, nets, z_scale, dt):
    """x: (B, W, F), z: (B, W, Z) true values of a window; the stepper rolls out from the first frame."""
    f = x.shape[-1]

    def advance(carry, _):
        xc, zc = carry
        rate = mlp(params["stepper"], nets["stepper"], jnp.concatenate([xc, zc], axis=-1), "relu")
        nxt = (xc + dt * rate[:, :f], zc + dt * rate[:, f:])
        return nxt, nxt

    _, (xs, zs) = jax.lax.scan(advance, (x[:, 0], z[:, 0]), None, length=x.shape[1] - 1)
    xp = jnp.concatenate([x[:, :1], jnp.swapaxes(xs, 0, 1)], axis=1)
    zp = jnp.concatenate([z[:, :1], jnp.swapaxes(zs, 0, 1)], axis=1) / z_scale
    zt = z / z_scale
    d = lambda a: (a[:, 1:] - a[:, :-1]) / dt
    return {"x": jnp.mean(jnp.abs(xp - x)), "z": jnp.mean(jnp.abs(zp - zt)),
            "x_vel": jnp.mean(jnp.abs(d(xp) - d(x))), "z_vel": jnp.mean(jnp.abs(d(zp) - d(zt)))}


def projector_losses(params, query, x, z, *, nets, z_scale):
    """query: (B, F) noisy normalized queries; x, z: their nearest frame's features and latent."""
    f = x.shape[-1]
    out = mlp(params["projector"], nets["projector"], query, "relu")
    xp, zp = out[:, :f], out[:, f:]
    dist = lambda a: jnp.sum((query - a) ** 2, axis=-1)
    return {"x": jnp.mean(jnp.abs(xp - x)), "z": jnp.mean(jnp.abs(zp - z) / z_scale),
            "dist": jnp.mean(jnp.abs(dist(xp) - dist(x)))}


def _stage_loss(sub, inputs, nets, z_scale, *, stage: str, parents: tuple, dt: float):
    """(weighted total, named losses) of a stage's trainable networks `sub` on one batch."""
    if stage == "decompressor":
        losses, weights = decompressor_losses(sub, *inputs, nets=nets, parents=parents, dt=dt), DECOMPRESSOR_WEIGHTS
    elif stage == "stepper":
        losses, weights = stepper_losses(sub, *inputs, nets=nets, z_scale=z_scale, dt=dt), STEPPER_WEIGHTS
    else:
        losses, weights = projector_losses(sub, *inputs, nets=nets, z_scale=z_scale), PROJECTOR_WEIGHTS
    return sum(weights[k] * v for k, v in losses.items()), losses


# One optimizer object for every run: the learning rate is a state entry each step sets from the stage's
# progress, and compiled steps are reused by later runs in the same process (tests, notebooks).
OPTIMIZER = optax.inject_hyperparams(optax.adamw)(learning_rate=1e-3, weight_decay=1e-3)


def gather_batch(stage: str, tables, starts, window: int):
    """A stage's batch inputs from its tables (device arrays) for starts (B,): window first frames
    (decompressor: tables = pose table and features; stepper: features and latents) or pool rows
    (projector: tables = pool queries, pool nearest frames, features, latents)."""
    if stage == "projector":
        queries, nearest, features, latents = tables
        k = nearest[starts]
        return queries[starts], features[k], latents[k]
    a, b = tables
    w = starts[:, None] + jnp.arange(window)[None, :]
    return a[w], b[w]


@partial(jax.jit, static_argnames=("stage", "parents", "dt", "window"))
def train_block(sub, opt_state, lr, tables, starts, nets, z_scale, *, stage: str, parents: tuple, dt: float,
                window: int):
    """One optimizer step of a stage per row of starts (K, B), in one compiled call (the Python loop and
    the host sync per step cost more than a step of these small networks); returns the new networks,
    optimizer state and every step's named losses and weighted `total`, each (K,)."""
    opt_state.hyperparams["learning_rate"] = lr

    def one(carry, idx):
        sub, opt_state = carry
        (total, losses), grads = jax.value_and_grad(_stage_loss, has_aux=True)(
            sub, gather_batch(stage, tables, idx, window), nets, z_scale, stage=stage, parents=parents, dt=dt)
        updates, opt_state = OPTIMIZER.update(grads, opt_state, sub)
        return (optax.apply_updates(sub, updates), opt_state), dict(losses, total=total)

    (sub, opt_state), losses = jax.lax.scan(one, (sub, opt_state), starts)
    return sub, opt_state, losses


@partial(jax.jit, static_argnames=("parents",))
def compress(layers, stats, y, *, parents: tuple):
    """The compressor's latent z (..., Z) of pose vectors y (..., D)."""
    return mlp(layers, stats, compressor_input(y, parents), "elu")


# ---------------------------------------------------------------------------------------------
# Checkpoints: plain arrays, so they need no pickling

def _flat_params(params) -> dict:
    return {f"p.{n}.{i}.{k}": np.asarray(a) for n, layers in params.items()
            for i, wb in enumerate(layers) for k, a in zip("wb", wb)}


def _unflat_params(arrays: dict) -> dict:
    out: dict = {}
    for key in sorted(k for k in arrays if k.startswith("p.")):
        _, n, i, k = key.split(".")
        out.setdefault(n, {}).setdefault(int(i), {})[k] = jnp.asarray(arrays[key])
    return {n: [(layers[i]["w"], layers[i]["b"]) for i in sorted(layers)] for n, layers in out.items()}


def _save_checkpoint(path: Path, meta: dict, params, opt_state, history, extra: dict | None = None) -> None:
    arrays = dict(_flat_params(params), **(extra or {}))
    for i, leaf in enumerate(jax.tree_util.tree_leaves(opt_state)):
        arrays[f"opt.{i}"] = np.asarray(leaf)
    for stage, losses in history.items():
        for name, values in losses.items():
            arrays[f"h.{stage}.{name}"] = np.asarray(values, dtype=np.float32)
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    with replacing(path) as f:
        np.savez(f, **arrays)


def _load_checkpoint(path: Path, identity: dict):
    """(meta, arrays) of a checkpoint made with the same identity, else None."""
    if not path.exists():
        return None
    try:
        with np.load(path) as z:
            arrays = {k: z[k] for k in z.files}
        meta = json.loads(bytes(arrays.pop("meta")).decode())
    except Exception as e:  # a damaged checkpoint costs a restart, not the run
        print(f"warning: ignoring unreadable checkpoint {path} ({e})", file=sys.stderr)
        return None
    if meta.get("version") != CHECKPOINT_VERSION or meta.get("identity") != identity:
        print(f"warning: {path} was made with other settings or another database; starting afresh",
              file=sys.stderr)
        return None
    return meta, arrays


def checkpoint_path(out_path) -> Path:
    out_path = Path(out_path)
    return out_path.with_name(out_path.stem + ".checkpoint.npz")


def curves_path(out_path) -> Path:
    out_path = Path(out_path)
    return out_path.with_name(out_path.stem + ".losses.png")


# ---------------------------------------------------------------------------------------------
# Training

def _network(layers, stats, activation: str) -> Network:
    return Network(weights=[np.asarray(w, np.float32) for w, _ in layers],
                   biases=[np.asarray(b, np.float32) for _, b in layers], activation=activation,
                   in_mean=stats[0], in_std=stats[1], out_mean=stats[2], out_std=stats[3])


def _compress_all(params, nets, data: PoseFrames, parents, chunk: int = 4096) -> np.ndarray:
    out = []
    for s in range(0, data.num_frames, chunk):
        y = pose_vectors(data, np.arange(s, min(s + chunk, data.num_frames)))
        out.append(np.asarray(compress(params["compressor"], nets["compressor"], jnp.asarray(y), parents=parents)))
    return np.concatenate(out).astype(np.float32)


def _rates(data: PoseFrames, values: np.ndarray) -> np.ndarray:
    """Finite-difference rates of change per second of per-frame values, inside clips."""
    return (values[data.diff_to] - values[data.diff_from]) * data.fps


def train_model(db, out_path, settings: TrainSettings | None = None) -> TrainResult:
    """Train all three networks on a database and write the model file (and its loss curves PNG)."""
    from tqdm import tqdm


    s = settings or TrainSettings()
    out_path = Path(out_path)
    data = pose_frames(db, s.max_frames)
    parents = tuple(int(p) for p in db.skeleton.parents)
    n, f, zs, h = data.num_frames, data.features.shape[1], s.latent, s.hidden
    dt = float(1.0 / data.fps)
    identity = {"settings": s.identity(), "fingerprint": database_fingerprint(db), "frames": n}
    ckpt_file = checkpoint_path(out_path)
    resumed = _load_checkpoint(ckpt_file, identity)

    # Fixed normalization statistics, from a sample drawn with its own generator (the same on resume).
    sample = np.sort(np.random.default_rng(s.seed + 1).choice(n, size=min(n, 20000), replace=False))
    y_sample = pose_vectors(data, sample)
    x_stats = _stats(data.features)
    comp_in = np.asarray(_compressor_inputs(jnp.asarray(y_sample), parents=parents))
    nets = {"compressor": (*_stats(comp_in), *_unit_stats(zs)),
            "decompressor": (np.concatenate([x_stats[0], np.zeros(zs, np.float32)]),
                             np.concatenate([x_stats[1], np.ones(zs, np.float32)]), *_stats(y_sample))}

    key = jax.random.PRNGKey(s.seed)
    keys = jax.random.split(key, 4)
    y_size = y_sample.shape[1]
    params = {
        "compressor": init_layers(keys[0], [comp_in.shape[1], h, h, h, zs]),
        "decompressor": init_layers(keys[1], [f + zs, h, y_size]),
        "stepper": init_layers(keys[2], [f + zs, h, h, f + zs]),
        "projector": init_layers(keys[3], [f, h, h, h, h, f + zs]),
    }
    rng = np.random.default_rng(s.seed)
    history: dict = {}
    start_stage, start_iter, start_elapsed, opt_leaves = 0, 0, 0.0, None
    if resumed:
        meta, arrays = resumed
        params.update(_unflat_params(arrays))
        rng.bit_generator.state = meta["rng"]
        start_stage, start_iter, start_elapsed = meta["stage"], meta["iteration"], meta["elapsed"]
        opt_leaves = [arrays[f"opt.{i}"] for i in range(meta["opt_leaves"])]
        for k, v in arrays.items():
            if k.startswith("h."):
                _, stage, name = k.split(".", 2)
                history.setdefault(stage, {})[name] = list(v)
        print(f"resuming from {ckpt_file} ({STAGES[start_stage]}, iteration {start_iter})", file=sys.stderr)

    latents = None
    z_scale = None
    stage_seconds = dict(resumed[0].get("seconds", {})) if resumed else {}
    for si, stage in enumerate(STAGES):
        if si < start_stage:
            continue
        if stage != "decompressor" and latents is None:
            latents = _compress_all(params, nets, data, parents)
            _, z_std = _stats(latents, floor=1e-4)
            z_scale = jnp.asarray(z_std)
            xz = np.concatenate([data.features, latents], axis=1)
            nets["stepper"] = (*_stats(xz), *_stats(_rates(data, xz)))
            nets["projector"] = (*x_stats, *_stats(xz))
        trainable = ("compressor", "decompressor") if stage == "decompressor" else (stage,)
        sub = {k: params[k] for k in trainable}
        opt_state = OPTIMIZER.init(sub)
        if opt_leaves is not None and si == start_stage:
            opt_state = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(opt_state),
                                                     [jnp.asarray(a) for a in opt_leaves])
        first_iter = start_iter if si == start_stage else 0
        elapsed0 = start_elapsed if si == start_stage else 0.0

        # Batches are gathered inside the compiled block from tables on the device; the host only draws
        # window starts (or pool rows), and refreshes the projector's pool of searched targets. Building
        # the tables counts in the stage's time.
        t_start = time.perf_counter() - elapsed0
        pool = None
        if stage == "decompressor":
            window, starts = 2, window_starts(data, 2)
            tables = (jnp.asarray(pose_table(data)), jnp.asarray(data.features))
        elif stage == "stepper":
            window, starts = s.stepper_window, window_starts(data, s.stepper_window)
            tables = (jnp.asarray(data.features), jnp.asarray(latents))
        else:
            window = 1
            searcher = Searcher(data.features, data.range_starts, data.range_stops, backend="aabb")
            if resumed and si == start_stage and "pool.query" in resumed[1]:
                pool = [resumed[1]["pool.query"], resumed[1]["pool.nearest"], int(resumed[0]["pool_next"])]
            else:
                pool = [*projector_samples(data, searcher, rng, s.projector_pool, s.projector_noise), 0]
            device_data = (jnp.asarray(data.features), jnp.asarray(latents))

        batch = s.projector_batch if stage == "projector" else s.batch

        def draw(k: int) -> np.ndarray:
            if pool is None:
                return sample_starts(rng, starts, (k, batch))
            return rng.integers(0, len(pool[0]), size=(k, batch)).astype(np.int32)

        def refresh_pool(k: int) -> None:
            """Replace the oldest pairs of the pool by new searched ones, k batches' worth / reuse."""
            m = min(len(pool[0]), max(1, round(k * batch / s.projector_reuse)))
            rows = (pool[2] + np.arange(m)) % len(pool[0])
            query, nearest = pool[0].copy(), pool[1].copy()   # the running block may still read the old ones
            query[rows], nearest[rows] = projector_samples(data, searcher, rng, m, s.projector_noise)
            pool[0], pool[1] = query, nearest
            pool[2] = int((pool[2] + m) % len(pool[0]))

        def checkpoint(stage_index, iteration, elapsed, opt_state, rng_state) -> None:
            extra, meta = {}, {}
            if pool is not None and stage_index == si:
                extra = {"pool.query": pool[0], "pool.nearest": pool[1]}
                meta = {"pool_next": pool[2]}
            _save_checkpoint(ckpt_file, {"version": CHECKPOINT_VERSION, "identity": identity, "stage": stage_index,
                                         "iteration": iteration, "elapsed": elapsed, "rng": rng_state,
                                         "opt_leaves": len(jax.tree_util.tree_leaves(opt_state)),
                                         "seconds": stage_seconds, **meta},
                             params, opt_state, history, extra)

        stage_nets = {k: tuple(jnp.asarray(a) for a in v) for k, v in nets.items()}
        scale = z_scale if z_scale is not None else jnp.ones((zs,), jnp.float32)

        iters, seconds = s.budget(stage)
        hist = history.setdefault(stage, {})
        bar = tqdm(total=iters if iters is not None else round(seconds), initial=first_iter if iters else round(elapsed0),
                   desc=f"lmm {stage}", unit="it" if iters else "s", disable=not s.progress, file=sys.stderr,
                   bar_format=None if iters else "{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s {postfix}")
        last_ckpt = time.perf_counter()
        it = first_iter
        while True:
            elapsed = time.perf_counter() - t_start
            progress = it / iters if iters is not None else elapsed / seconds
            if progress >= 1.0:
                break
            k = s.steps_per_call if iters is None else min(s.steps_per_call, iters - it)
            lr = np.float32(s.learning_rate * np.sqrt(batch / 32) * s.final_learning_rate_ratio ** progress)
            if pool is not None:
                tables = (jnp.asarray(pool[0]), jnp.asarray(pool[1]), *device_data)
            sub, opt_state, losses = train_block(sub, opt_state, lr, tables, jnp.asarray(draw(k)), stage_nets, scale,
                                                 stage=stage, parents=parents, dt=dt, window=window)
            if pool is not None:
                refresh_pool(k)    # searches while the block computes
            losses = jax.device_get(losses)
            it += k
            if not np.all(np.isfinite(losses["total"])):
                bad = it - k + int(np.argmin(np.isfinite(losses["total"])))
                raise FloatingPointError(f"training diverged in the {stage} stage at iteration {bad + 1} "
                                         f"(loss {losses['total'].max()}); try a lower learning rate or another --seed")
            for name, v in losses.items():
                hist.setdefault(name, []).extend(v.tolist())
            if iters is not None:
                bar.update(k)
            else:
                # tqdm drops the total (and fails on the format) once n passes it; the last block may overrun
                bar.update(min(round(time.perf_counter() - t_start), bar.total) - bar.n)
            bar.set_postfix_str(" ".join(f"{name}={np.mean(hist[name][-100:]):.3g}"
                                         for name in ("total", *[k for k in losses if k != "total"][:3])))
            if time.perf_counter() - last_ckpt > s.checkpoint_seconds:
                params.update(sub)
                checkpoint(si, it, time.perf_counter() - t_start, opt_state, rng.bit_generator.state)
                last_ckpt = time.perf_counter()
        bar.close()
        params.update(sub)
        stage_seconds[stage] = round(time.perf_counter() - t_start, 1)
        if si + 1 < len(STAGES):
            # The next stage starts from here after an interruption.
            checkpoint(si + 1, 0, 0.0, OPTIMIZER.init({STAGES[si + 1]: params[STAGES[si + 1]]}),
                       rng.bit_generator.state)

    if latents is None:   # resumed past the first stage with nothing left to train
        latents = _compress_all(params, nets, data, parents)
    hist_arrays = {st: {k: np.asarray(v, dtype=np.float32) for k, v in losses.items()} for st, losses in history.items()}
    info = {
        "frames": n, "database_frames": db.num_frames, "settings": s.identity(),
        "iterations": {st: len(v.get("total", [])) for st, v in hist_arrays.items()},
        "seconds": stage_seconds,
        "final_losses": {st: {k: round(float(np.mean(v[-100:])), 6) for k, v in losses.items()}
                         for st, losses in hist_arrays.items()},
    }
    model = LearnedModel(
        joint_names=list(db.skeleton.names), parents=np.asarray(db.skeleton.parents, dtype=np.int64),
        fps=float(db.fps), schema=db.features.schema.to_dict(), fingerprint=database_fingerprint(db),
        feature_offset=np.asarray(db.features.offset, dtype=np.float64),
        feature_scale=np.asarray(db.features.scale, dtype=np.float64), latent_size=zs,
        decompressor=_network(params["decompressor"], nets["decompressor"], "relu"),
        stepper=_network(params["stepper"], nets["stepper"], "relu"),
        projector=_network(params["projector"], nets["projector"], "relu"), info=info)
    save_model(model, out_path)
    plot_curves(hist_arrays, curves_path(out_path))
    ckpt_file.unlink(missing_ok=True)
    return TrainResult(model, hist_arrays, latents, checkpoint_resumed=resumed is not None, seconds=stage_seconds)


def plot_curves(history: dict, path) -> None:
    """Loss curves of every stage (log scale, running mean over 1 % of the run) as one PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stages = [st for st in STAGES if st in history]
    fig, axes = plt.subplots(1, len(stages), figsize=(5.5 * len(stages), 4), squeeze=False)
    for ax, st in zip(axes[0], stages):
        ax.set_prop_cycle(color=plt.cm.tab20.colors)
        for name, v in history[st].items():
            k = max(1, len(v) // 100)
            smooth = np.convolve(v, np.ones(k) / k, mode="valid") if len(v) >= k else v
            ax.plot(np.arange(len(smooth)) + k - 1, np.maximum(smooth, 1e-8), label=name,
                    lw=2.0 if name == "total" else 1.0)
        ax.set_yscale("log")
        ax.set_title(f"{st} ({len(next(iter(history[st].values())))} iterations)")
        ax.set_xlabel("iteration")
        ax.legend(fontsize=6, ncol=2, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
