"""The spread of tests/lmm/test_lmm.py's bounds over training seeds (not a test: run it by hand).

    PYTHONPATH=src python tests/spreads/lmm_seeds.py [seeds=20] [iterations=500]

Trains the test's model (500 iterations, 64-wide layers, the first 200 frames of the default database)
once per seed and prints, for each figure a test bounds, its min / median / max over the seeds."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from spread_table import print_seed, print_spread  # noqa: E402
from conftest import JLPM, _need  # noqa: E402

from motionmatch.lmm import inference  # noqa: E402
from motionmatch.lmm.model import load_model  # noqa: E402
from motionmatch.lmm.train import TrainSettings, train_model  # noqa: E402
from motionmatch.maths.kinematics import forward_kinematics  # noqa: E402
from motionmatch.posedb.database import build_database  # noqa: E402

FRAMES = 200


def character_space(positions, rotations, parents):
    pos = np.array(positions, dtype=np.float64)
    rot = np.array(rotations, dtype=np.float64)
    pos[..., 0, :] = 0.0
    rot[..., 0, :] = (1.0, 0.0, 0.0, 0.0)
    return forward_kinematics(pos, rot, parents)[0]


def nearest_median(x, data) -> float:
    return float(np.median(np.sqrt(((x[:, None, :] - data[None]) ** 2).sum(-1)).min(1)))


def figures(db, out, result) -> dict:
    model = load_model(out)
    f = {}
    f["worst last/first loss ratio"] = max(max(np.mean(c[-25:]) / np.mean(c[:25]) for c in losses.values())
                                          for losses in result.history.values())
    x = db.features.normalized[:FRAMES]
    pose = inference.decompress(model, x, result.latents)
    parents = db.skeleton.parents
    got = character_space(pose.positions, pose.rotations, parents)
    want = character_space(db.positions[:FRAMES], db.rotations[:FRAMES], parents)
    err = 100.0 * np.linalg.norm(got - want, axis=-1)
    f["decompressor median cm"] = np.median(err)
    f["decompressor p95 cm"] = np.percentile(err, 95)
    f["contacts agree"] = np.mean(pose.contacts == np.asarray(db.contacts[:FRAMES]))
    speed = np.linalg.norm(pose.velocities[:, 0], axis=-1)
    want_speed = np.linalg.norm(np.diff(np.asarray(db.positions[:FRAMES + 1, 0], dtype=np.float64), axis=0),
                                axis=-1) * db.fps
    f["root speed median error m/s"] = np.median(np.abs(speed - want_speed))
    data = db.features.normalized[:FRAMES]
    for label, frames in (("10 starts", np.arange(20, 120, 10)), ("45 starts", np.arange(10, 190, 4))):
        xs, z = inference.project(model, np.asarray(db.features.raw[frames], dtype=np.float64))
        f[f"projector median error, {label}"] = np.median(np.abs(xs - data[frames]))
        for k in range(40):
            xs, z = inference.step(model, xs, z, 1 / 60)
            pose = inference.decompress(model, xs, z)
            if k == 19:
                f[f"rollout median nearest, 20 steps, {label}"] = nearest_median(xs, data)
        f[f"rollout median nearest, {label}"] = nearest_median(xs, data)
        speed = np.linalg.norm(pose.velocities[:, 0], axis=-1)
        f[f"rollout max root speed m/s, {label}"] = speed.max()
        f[f"rollout median root speed m/s, {label}"] = np.median(speed)
    f["rollout max |quat|-1"] = np.abs(np.linalg.norm(pose.rotations, axis=-1) - 1).max()
    f.update(against_jax(db, model, result))
    return f


def against_jax(db, model, result) -> dict:
    """test_numpy_inference_matches_jax's figures: numpy's float32 error in float32 epsilons of the largest
    output, and the absolute differences its 1e-5 tolerances bound."""
    import jax.numpy as jnp

    from motionmatch.lmm.train import character_space as jax_character_space
    from motionmatch.lmm.train import mlp
    rng = np.random.default_rng(3)
    f, z = model.num_features, model.latent_size
    xz = np.concatenate([db.features.normalized[:FRAMES], result.latents], axis=1)
    xz = (xz + 0.3 * rng.normal(size=xz.shape)).astype(np.float32)
    out = {}
    worst = 0.0
    for name, inp in {"decompressor": xz, "stepper": xz, "projector": xz[:, :f]}.items():
        net = getattr(model, name)
        layers = [(jnp.asarray(w), jnp.asarray(b)) for w, b in zip(net.weights, net.biases)]
        stats = tuple(jnp.asarray(a) for a in (net.in_mean, net.in_std, net.out_mean, net.out_std))
        want = np.asarray(mlp(layers, stats, jnp.asarray(inp), net.activation))
        got = inference.evaluate(net, inp)
        worst = max(worst, np.abs(got - want).max() / (np.finfo(np.float32).eps * np.abs(want).max()))
    out["numpy-jax error, eps of max output"] = worst
    y = inference.evaluate(model.decompressor, xz)
    pose = inference.decompress(model, xz[:, :f], xz[:, f:])
    got = character_space(pose.positions, pose.rotations, db.skeleton.parents)[:, 1:]
    want = np.asarray(jax_character_space(jnp.asarray(y), tuple(int(p) for p in model.parents))[0])
    out["character-space positions vs jax"] = np.abs(got - want).max()
    xs, zs = inference.step(model, xz[:, :f], xz[:, f:], 1 / 60)
    x1, z1 = inference.step(model, xz[7, :f], xz[7, f:], 1 / 60)
    out["one row vs batch"] = max(np.abs(x1 - xs[7]).max(), np.abs(z1 - zs[7]).max())
    return out


def main(seeds: int = 20, iterations: int = 500) -> None:
    """iterations: the test's 500; a handful shows what an untrained model scores."""
    db = build_database(sorted(_need(JLPM).glob("*.bvh")), progress=False)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(seeds):
            out = Path(tmp) / f"model{seed}.npz"
            result = train_model(db, out, TrainSettings(iterations=iterations, hidden=64, max_frames=FRAMES, progress=False,
                                                        seed=seed))
            rows.append(figures(db, out, result))
            print_seed(seed, rows[-1])
    print_spread(rows)


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
