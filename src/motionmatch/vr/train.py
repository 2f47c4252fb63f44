"""Training the body-orientation network with JAX + optax (the only VR module importing them; needs the
`learn` extra). Seed 002, section 4.1.2.

Each sample is a window of r consecutive frames of one clip. The first step is fed the true facing
of the frame before the window; every later step is fed the network's own previous output, turned
into the current HMD floor frame, and the loss is the mean squared error of the outputs against the
true facing over all r steps (gradients flow through the fed-back outputs). With r = 1 the network
only ever sees true previous facings and learns to copy them; with r = 50 it must recover from its
own errors. Both are trained (the r = 1 network is the baseline `vr eval` reports).

A checkpoint beside the output (`OUT.ckpt.npz`) is written every `checkpoint_every` iterations; a new
run with the same settings and data resumes from it, and it is removed when training finishes.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm import tqdm

from .orientation import NUM_NETWORK_INPUTS, OrientationNetwork, save_networks
from ..files.atomic_file import replacing
from .trackers import NUM_INPUTS

CHECKPOINT_VERSION = 1


@dataclass
class TrainSettings:
    """Training options; sizes follow the thesis (two hidden layers of 32, r = 50)."""

    rollout: int = 50
    iterations: int = 9000           # per network
    batch: int = 256
    hidden: int = 32
    learning_rate: float = 1e-3
    final_learning_rate: float = 1e-4
    seed: int = 0
    checkpoint_every: int = 500
    backprop_rollout: bool = False   # gradients through the fed-back outputs (unstable in our trials)
    weight_decay: float = 0.0
    input_noise: float = 0.3         # Gaussian noise on the normalized inputs (regularization)
    progress: bool = True

    def identity(self) -> dict:
        """What a checkpoint must share with this run to be resumed."""
        return {k: v for k, v in asdict(self).items() if k not in ("progress", "checkpoint_every")}


@dataclass
class TrainResult:
    networks: dict[str, OrientationNetwork]
    history: dict[str, np.ndarray]          # network name -> loss per iteration
    seconds: dict[str, float] = field(default_factory=dict)
    resumed: bool = False


# ---------------------------------------------------------------------------------------------
# Data: all sequences end to end, with the window starts that stay inside one clip.

def _stack(sequences, rollout: int):
    x = np.concatenate([s.features for s in sequences]).astype(np.float32)
    hmd = np.concatenate([s.hmd_yaw for s in sequences])
    body = np.concatenate([s.body_yaw for s in sequences])
    starts, offset = [], 0
    for s in sequences:
        F = len(s.body_yaw)
        # Frame t - 1 gives the first true previous facing, so windows start at 1.
        if F - rollout >= 1:
            starts.append(np.arange(offset + 1, offset + F - rollout + 1))
        offset += F
    if not starts:
        raise ValueError(f"no training clip has more than {rollout} frames")
    rel = body - hmd
    facing = np.stack([np.sin(rel), np.cos(rel)], axis=-1).astype(np.float32)
    return x, hmd.astype(np.float32), body.astype(np.float32), facing, np.concatenate(starts)


def _normalization(x, facing):
    both = np.concatenate([x, facing], axis=-1)
    mean = both.mean(0)
    # A floor keeps nearly constant inputs (e.g. a rotation column) from being blown up.
    std = np.maximum(both.std(0), 0.1)
    return mean.astype(np.float32), std.astype(np.float32)


# ---------------------------------------------------------------------------------------------
# Network

def _init(key, hidden: int):
    sizes = [NUM_NETWORK_INPUTS, hidden, hidden, 2]
    params = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        key, sub = jax.random.split(key)
        params.append((jax.random.normal(sub, (a, b)) * np.sqrt(2.0 / a), jnp.zeros(b)))
    return params


def _forward(params, h):
    for w, b in params[:-1]:
        h = jax.nn.relu(h @ w + b)
    w, b = params[-1]
    return h @ w + b


def _loss(params, batch, mean, std, backprop_rollout=False, noise=None):
    x, facing, hmd, prev0 = batch          # (B, r, I), (B, r, 2), (B, r + 1), (B, 2)

    def step(prev, k):
        h = (jnp.concatenate([x[:, k], prev], axis=-1) - mean) / std
        out = _forward(params, h if noise is None else h + noise[:, k])
        d = out / jnp.maximum(jnp.linalg.norm(out, axis=-1, keepdims=True), 1e-6)
        turn = hmd[:, k] - hmd[:, k + 1]
        c, s = jnp.cos(turn), jnp.sin(turn)
        nxt = jnp.stack([d[:, 0] * c + d[:, 1] * s, d[:, 1] * c - d[:, 0] * s], axis=-1)
        return (nxt if backprop_rollout else jax.lax.stop_gradient(nxt)), jnp.mean((out - facing[:, k]) ** 2)

    _, losses = jax.lax.scan(step, prev0, jnp.arange(x.shape[1]))
    return losses.mean()


@lru_cache(maxsize=8)
def _optimizer(learning_rate: float, final_learning_rate: float, iterations: int, weight_decay: float):
    schedule = optax.exponential_decay(learning_rate, iterations, final_learning_rate / learning_rate)
    # Rolled-out gradients pass through the fed-back outputs r times and can spike: clip them.
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=weight_decay))


@lru_cache(maxsize=8)
def _make_step(optimizer, rollout: int, batch: int, backprop_rollout: bool, input_noise: float):
    """The jitted training step; cached so runs with the same settings compile once per process."""
    @jax.jit
    def train_step(params, opt_state, key, data, mean, std):
        x, hmd, body, facing, starts = data
        key, noise_key = jax.random.split(key)
        noise = input_noise * jax.random.normal(noise_key, (batch, rollout, NUM_NETWORK_INPUTS)) if input_noise > 0 else None
        idx = starts[jax.random.randint(key, (batch,), 0, starts.shape[0])]
        win = idx[:, None] + jnp.arange(rollout)[None]
        hmd_win = hmd[jnp.concatenate([win, win[:, -1:] + 1], axis=1).clip(0, hmd.shape[0] - 1)]
        rel0 = body[idx - 1] - hmd[idx]
        prev0 = jnp.stack([jnp.sin(rel0), jnp.cos(rel0)], axis=-1)
        loss, grads = jax.value_and_grad(_loss)(params, (x[win], facing[win], hmd_win, prev0), mean, std,
                                                  backprop_rollout, noise)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss
    return train_step


# ---------------------------------------------------------------------------------------------
# Checkpoints

def _checkpoint_path(out) -> Path:
    return Path(str(out) + ".ckpt.npz")


def _save_checkpoint(path, identity, name, iteration, params, opt_state, key, history, done):
    leaves = jax.tree_util.tree_leaves((params, opt_state))
    arrays = {f"leaf{i}": np.asarray(v) for i, v in enumerate(leaves)}
    arrays.update(version=np.array(CHECKPOINT_VERSION), identity=np.array(repr(identity)), name=np.array(name),
                  iteration=np.array(iteration), key=np.asarray(jax.random.key_data(key)))
    for n, h in history.items():
        arrays[f"history/{n}"] = np.asarray(h, np.float32)
    for n, net in done.items():
        for i, (w, b) in enumerate(zip(net.weights, net.biases)):
            arrays[f"done/{n}/w{i}"], arrays[f"done/{n}/b{i}"] = w, b
    with replacing(path) as fh:
        np.savez(fh, **arrays)


def _load_checkpoint(path, identity):
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as z:
        if int(z["version"]) != CHECKPOINT_VERSION or str(z["identity"]) != repr(identity):
            return None
        leaves = [z[k] for k in sorted((k for k in z.files if k.startswith("leaf")), key=lambda k: int(k[4:]))]
        history = {k.split("/", 1)[1]: list(z[k]) for k in z.files if k.startswith("history/")}
        done = {}
        for k in z.files:
            if k.startswith("done/") and k.endswith("/w0"):
                n = k.split("/")[1]
                layers = sum(1 for f in z.files if f.startswith(f"done/{n}/w"))
                done[n] = ([z[f"done/{n}/w{i}"] for i in range(layers)], [z[f"done/{n}/b{i}"] for i in range(layers)])
        return {"name": str(z["name"]), "iteration": int(z["iteration"]), "leaves": leaves,
                "key": jax.random.wrap_key_data(z["key"]), "history": history, "done": done}


# ---------------------------------------------------------------------------------------------

def train_orientation(sequences, out, settings: TrainSettings | None = None, meta: dict | None = None) -> TrainResult:
    """Train the r = 1 baseline and the rollout network on dataset.Sequence items, write the model
    file `out` (orientation.save_networks) and return the networks and loss histories."""
    settings = settings or TrainSettings()
    if settings.rollout < 1 or settings.iterations < 1:
        raise ValueError("rollout and iterations must be at least 1")
    identity = {**settings.identity(), "frames": int(sum(len(s.body_yaw) for s in sequences)),
                "clips": len(sequences), "inputs": NUM_INPUTS}
    ckpt_path = _checkpoint_path(out)
    ckpt = _load_checkpoint(ckpt_path, identity)
    resumed = ckpt is not None
    x, hmd, body, facing, _ = _stack(sequences, 1)
    mean, std = _normalization(x, facing)
    optimizer = _optimizer(settings.learning_rate, settings.final_learning_rate, settings.iterations,
                           settings.weight_decay)
    history: dict[str, list] = ckpt["history"] if ckpt else {}
    networks: dict[str, OrientationNetwork] = {}
    if ckpt:
        for n, (ws, bs) in ckpt["done"].items():
            networks[n] = OrientationNetwork(ws, bs, mean.astype(np.float64), std.astype(np.float64),
                                             1 if n == "network_r1" else settings.rollout)
    seconds = {}
    for name, rollout in (("network_r1", 1), ("network", settings.rollout)):
        if name in networks:
            continue
        starts = _stack(sequences, rollout)[4]
        data = tuple(jnp.asarray(a) for a in (x, hmd, body, facing, starts))
        key = jax.random.key(settings.seed + (0 if rollout == 1 else 1))
        key, init_key = jax.random.split(key)
        params = _init(init_key, settings.hidden)
        opt_state = optimizer.init(params)
        first = 0
        if ckpt and ckpt["name"] == name:
            treedef = jax.tree_util.tree_structure((params, opt_state))
            params, opt_state = jax.tree_util.tree_unflatten(treedef, [jnp.asarray(v) for v in ckpt["leaves"]])
            first, key = ckpt["iteration"], ckpt["key"]
        losses = history.setdefault(name, [])
        del losses[first:]
        train_step = _make_step(optimizer, rollout, settings.batch, settings.backprop_rollout,
                                settings.input_noise)
        t0 = time.perf_counter()
        bar = tqdm(range(first, settings.iterations), desc=f"train r={rollout}", unit="it",
                   disable=not settings.progress, initial=first, total=settings.iterations)
        for it in bar:
            key, sub = jax.random.split(key)
            params, opt_state, loss = train_step(params, opt_state, sub, data, mean, std)
            losses.append(float(loss))
            if it % 100 == 0:
                bar.set_postfix(loss=f"{np.mean(losses[-100:]):.4f}")
            if (it + 1) % settings.checkpoint_every == 0 and it + 1 < settings.iterations:
                _save_checkpoint(ckpt_path, identity, name, it + 1, params, opt_state, key, history,
                                 {n: net for n, net in networks.items()})
        seconds[name] = round(time.perf_counter() - t0, 1)
        networks[name] = OrientationNetwork([np.asarray(w, np.float64) for w, _ in params],
                                            [np.asarray(b, np.float64) for _, b in params],
                                            mean.astype(np.float64), std.astype(np.float64), rollout)
        _save_checkpoint(ckpt_path, identity, "", 0, params, opt_state, key, history, networks)
    save_networks(out, networks, {"train_settings": identity, **(meta or {})})
    ckpt_path.unlink(missing_ok=True)
    return TrainResult(networks, {k: np.asarray(v, np.float32) for k, v in history.items()}, seconds, resumed)


def plot_loss_curves(history: dict[str, np.ndarray], path) -> None:
    """Loss per iteration of each network (a running mean over 50 iterations), log scale, as a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, h in history.items():
        k = min(50, len(h))
        smooth = np.convolve(h, np.ones(k) / k, mode="valid") if k else h
        ax.plot(np.arange(len(smooth)) + k - 1, smooth, label=name)
    ax.set_yscale("log")
    ax.set_xlabel("iteration")
    ax.set_ylabel("facing MSE (rolled out)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
