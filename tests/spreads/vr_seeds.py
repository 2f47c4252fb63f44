"""The spread of tests/vr/test_vr.py's bounds on its trained orientation networks over training seeds
(not a test: run it by hand).

    PYTHONPATH=src python tests/spreads/vr_seeds.py [seeds=20] [iterations=800]

Trains the test's tiny networks (TINY: 800 iterations, batch 64, rollout 20) once per seed and prints each
bounded figure's min / median / max over the seeds."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from spread_table import print_seed, print_spread  # noqa: E402
from conftest import JLPM, _need  # noqa: E402

from motionmatch.io.bvh import read_bvh  # noqa: E402
from motionmatch.maths.rotations import quat_rotate  # noqa: E402
from motionmatch.vr.dataset import load_sequences, split_held_out  # noqa: E402
from motionmatch.vr.driver import driver_start, driver_step  # noqa: E402
from motionmatch.vr.orientation import angle_error_deg, evaluate, load_networks  # noqa: E402
from motionmatch.vr.trackers import calibrate_file, simulate_trackers  # noqa: E402
from motionmatch.vr.train import TrainSettings, train_orientation  # noqa: E402

TINY = dict(iterations=800, batch=64, rollout=20, checkpoint_every=300, progress=False)
TAKE1 = JLPM / "locomotion_take1.bvh"


def rollout_ratio(result) -> tuple[float, float, float]:
    """test_rollout_training_feeds_back_its_outputs: turning the given previous facing changes the 20-step
    loss (a mean over the steps) by d20 and the first step's by d1. Returns |d20| / (|d1| / 20), the old
    figure (1 when only the first step sees the change, whichever way the later ones move), and
    |20 d20 - d1| / |d1|, the later steps' share (0 exactly when only the first step sees the change; their
    changes can cancel), and |d(l2)| / |d1|, the second step's own (it cannot cancel with later steps)."""
    import jax
    import jax.numpy as jnp

    from motionmatch.vr import train as tr
    loss = jax.jit(tr._loss)
    net = result.networks["network"]
    params = [(jnp.asarray(w), jnp.asarray(b)) for w, b in zip(net.weights, net.biases)]
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(4, 20, 36)).astype(np.float32))
    facing = jnp.asarray(np.tile([0.0, 1.0], (4, 20, 1)).astype(np.float32))
    hmd = jnp.zeros((4, 21))
    mean, std = jnp.asarray(net.input_mean), jnp.asarray(net.input_std)
    a, b = jnp.tile(jnp.array([0.0, 1.0]), (4, 1)), jnp.tile(jnp.array([1.0, 0.0]), (4, 1))
    full = float(loss(params, (x, facing, hmd, b), mean, std) - loss(params, (x, facing, hmd, a), mean, std))
    first = float(loss(params, (x[:, :1], facing[:, :1], hmd[:, :2], b), mean, std)
                  - loss(params, (x[:, :1], facing[:, :1], hmd[:, :2], a), mean, std))
    # The second step's own loss, l2 = 2 L2 - L1: it sees the first step's output, fed back.
    two = float(loss(params, (x[:, :2], facing[:, :2], hmd[:, :3], b), mean, std)
                - loss(params, (x[:, :2], facing[:, :2], hmd[:, :3], a), mean, std))
    return abs(full) / (abs(first) / 20), abs(20 * full - first) / abs(first), abs(2 * two - first) / abs(first)


def second_step_per_sample(result, n: int = 32) -> float:
    """The largest over n samples of one (a batch of one: no averaging over samples) of |d(l2)| / |d1|: the
    second step's loss change over the first step's when the given previous facing turns."""
    import jax
    import jax.numpy as jnp

    from motionmatch.vr import train as tr
    loss = jax.jit(tr._loss)
    net = result.networks["network"]
    params = [(jnp.asarray(w), jnp.asarray(b)) for w, b in zip(net.weights, net.biases)]
    mean, std = jnp.asarray(net.input_mean), jnp.asarray(net.input_std)
    rng = np.random.default_rng(0)
    a, b = jnp.array([[0.0, 1.0]]), jnp.array([[1.0, 0.0]])
    shares = []
    for _ in range(n):
        x = jnp.asarray(rng.normal(size=(1, 2, 36)).astype(np.float32))
        facing = jnp.asarray(np.tile([0.0, 1.0], (1, 2, 1)).astype(np.float32))
        hmd = jnp.zeros((1, 3))
        d1 = float(loss(params, (x[:, :1], facing[:, :1], hmd[:, :2], b), mean, std)
                   - loss(params, (x[:, :1], facing[:, :1], hmd[:, :2], a), mean, std))
        d2 = float(loss(params, (x, facing, hmd, b), mean, std) - loss(params, (x, facing, hmd, a), mean, std))
        shares.append(abs(2 * d2 - d1) / abs(d1))
    return max(shares)


def driver_error(nets, anim, calib) -> float:
    """test_driver_follows_a_walking_stream: the median facing error (degrees) over 900 frames."""
    stream, truth = simulate_trackers(anim, calibration=calib)
    state = driver_start(stream.positions[0], stream.rotations[0])
    errs = []
    for f in range(1, 900):
        state = driver_step(state, nets["network"], stream.positions[f], stream.rotations[f], 1 / 60)
        yaw = np.arctan2(*quat_rotate(state.facing, np.array([0, 0, 1.0]))[[0, 2]])
        errs.append(float(angle_error_deg(yaw, truth.facing_yaw[f])))
    return float(np.median(errs))


def main(seeds: int = 20, iterations: int = 800) -> None:
    """iterations: the test's 800; a handful shows what an untrained network scores."""
    take2 = _need(JLPM / "locomotion_take2.bvh")
    train, held = split_held_out([TAKE1, take2])
    data = load_sequences(train, mirrored=True, progress=False)
    held_data = load_sequences(held, progress=False)
    anim = read_bvh(_need(TAKE1))
    calib = calibrate_file(TAKE1, anim)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(seeds):
            out = Path(tmp) / f"vr{seed}.npz"
            result = train_orientation(data, out, TrainSettings(seed=seed, **{**TINY, "iterations": iterations}))
            nets = load_networks(out)
            doc = evaluate(nets, held_data)
            old, later, second = rollout_ratio(result)
            f = {"network / hmd_forward mean deg": doc["network"]["mean_deg"] / doc["hmd_forward"]["mean_deg"],
                 "network_r1 / hmd_forward mean deg": doc["network_r1"]["mean_deg"] / doc["hmd_forward"]["mean_deg"],
                 "rollout loss ratio (old)": old, "later steps' share": later,
                 "second step's share": second, "second step's share, largest of 32 single samples":
                 second_step_per_sample(result),
                 "driver median error deg": driver_error(nets, anim, calib)}
            rows.append(f)
            print_seed(seed, f)
    print_spread(rows)


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
