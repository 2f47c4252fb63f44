"""VR avatar pieces on real motion capture: tracker simulation and files, the body-orientation network,
upper-body IK, root clamp and the tracker driver."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import BANDAI, JLPM, _need
from motionmatch.cli import main
from motionmatch.io.bvh import read_bvh
from motionmatch.maths.kinematics import forward_kinematics
from motionmatch.motion.preprocess import resample
from motionmatch.maths.rotations import quat_angle, quat_inv_mul, quat_mul_inv, quat_rotate
from motionmatch.motion.skeleton import find_roles
from motionmatch.vr.dataset import load_sequences, split_held_out
from motionmatch.vr.driver import desired_trajectory, driver_start, driver_step, select_database
from motionmatch.vr.orientation import angle_error_deg, evaluate, load_networks
from motionmatch.vr.trackers import (TrackerFileError, TrackerSettings, calibrate_file, device_features,
                                     mirror_trackers, read_trackers, simulate_trackers, write_trackers_json)
from motionmatch.vr.upper_body import arm_chain, clamp_root, device_targets, reach_arms

TAKE1 = JLPM / "locomotion_take1.bvh"


@pytest.fixture(scope="module")
def take1():
    anim = read_bvh(_need(TAKE1))
    return anim, calibrate_file(TAKE1, anim)


def test_held_out_split_follows_the_issue():
    files = sorted(_need(BANDAI).rglob("*.bvh")) + sorted(_need(JLPM).glob("*.bvh"))
    train, held = split_held_out(files)
    held_names = {p.path.name for p in held}
    assert all(("_sad_" in n and n.startswith("dataset-1")) or ("_youthful_" in n and n.startswith("dataset-2"))
               or n == "locomotion_take2.bvh" for n in held_names)
    assert any("_sad_" in n for n in held_names) and any("_youthful_" in n for n in held_names)
    assert not any("_sad_" in p.path.name and "dataset-1" in p.path.name for p in train)
    take2 = [p for p in train + held if p.path.name == "locomotion_take2.bvh"]
    assert sorted((p.start, p.stop) for p in take2) == [(0.0, 0.75), (0.75, 1.0)]
    assert len(train) + len(held) == len(files) + 1


def test_simulated_devices_follow_the_joints(take1):
    anim, calib = take1
    anim = resample(anim, 60.0)
    settings = TrackerSettings()
    stream, truth = simulate_trackers(anim, settings, calibration=calib)
    roles = find_roles(anim.skeleton.names)
    gpos, grot = anim.global_transforms()
    assert stream.num_frames == anim.num_frames
    # Controllers sit on the wrists; the HMD at its fixed offset from the head, rigidly attached.
    assert np.abs(stream.positions[:, 1] - gpos[:, roles["left_hand"]]).max() < 1e-9
    assert np.abs(stream.positions[:, 2] - gpos[:, roles["right_hand"]]).max() < 1e-9
    off = stream.positions[:, 0] - gpos[:, roles["head"]]
    assert np.allclose(np.linalg.norm(off, axis=-1), np.linalg.norm(settings.hmd_offset), atol=1e-9)
    rel = quat_inv_mul(grot[:, roles["head"]], stream.rotations[:, 0])
    assert quat_angle(quat_mul_inv(rel, rel[:1])).max() < 1e-6
    # The HMD looks roughly where the body faces (a walking take), not sideways.
    err = angle_error_deg(np.arctan2(*quat_rotate(stream.rotations[:, 0], np.array([0, 0, 1.0]))[:, [0, 2]].T),
                          truth.facing_yaw)
    assert 2.0 < np.median(err) < 25.0
    # Velocities in the inputs are the joints' own finite differences.
    x, yaw = device_features(stream)
    assert x.shape == (anim.num_frames, 36) and np.isfinite(x).all()
    v_hand = np.linalg.norm(np.diff(gpos[:, roles["left_hand"]], axis=0) * 60.0, axis=-1)
    assert np.allclose(np.linalg.norm(x[1:, 12:15], axis=-1), v_hand, atol=1e-3)


def test_tracker_json_round_trip_and_resampling(take1, tmp_path):
    anim, calib = take1
    stream, _ = simulate_trackers(anim, TrackerSettings(position_noise=0.002, rotation_noise_deg=1.0,
                                                        dropout_rate=0.5), rng=3, calibration=calib)
    assert not stream.valid.all() and stream.valid.mean() > 0.6
    path = tmp_path / "t.json"
    write_trackers_json(path, stream)
    back, truth = read_trackers(path)
    assert truth is None and back.num_frames == stream.num_frames
    assert np.abs(back.positions - stream.positions).max() < 1e-5
    assert np.array_equal(back.valid, stream.valid)
    # The same motion at 30 Hz with explicit times comes back at 60 fps, close to the original.
    doc = json.loads(path.read_text())
    frames = doc["frames"][::2]
    for i, fr in enumerate(frames):
        fr["t"] = i / 30.0
    path.write_text(json.dumps({"frames": frames}))
    half, _ = read_trackers(path)
    n = min(half.num_frames, stream.num_frames)
    ok = stream.valid[:n].all(1) & half.valid[:n].all(1)
    assert abs(half.num_frames - stream.num_frames) <= 2
    assert np.median(np.linalg.norm(half.positions[:n][ok] - stream.positions[:n][ok], axis=-1)) < 0.01


def test_mirrored_stream_mirrors_the_truth(take1):
    anim, calib = take1
    stream, truth = simulate_trackers(anim, calibration=calib)
    m, mt = mirror_trackers(stream, truth)
    x, yaw = device_features(stream)
    mx, myaw = device_features(m)
    assert np.allclose(myaw, -yaw) and np.allclose(mt.facing_yaw, -truth.facing_yaw)
    # A mirrored HMD forward error equals the original's.
    assert np.allclose(angle_error_deg(myaw, mt.facing_yaw), angle_error_deg(yaw, truth.facing_yaw))


@pytest.mark.parametrize("content, where", [
    ('{"fps": 60, "frames": [{"hmd": {"position": [0, 1.6, 0], "rotation": [1, 0, 0, 0]}, '
     '"left": {"position": [0, 1, 0]}, "right": null}]}', "frames[0].left.rotation"),
    ('{"fps": 60, "frames": [{"hmd": {"position": [0, 1.6], "rotation": [1, 0, 0, 0]}}]}',
     "frames[0].hmd.position"),
    ('{"frames": [{"hmd": null, "left": null, "right": null}]}', "frames[0].t"),
    ('{"fps": 60, "frames": [\n{"hmd": 3,}]}', "line 2"),
    ('{"fps": -1, "frames": [{}]}', "fps"),
])
def test_bad_json_tracker_files_name_the_field(tmp_path, content, where):
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(TrackerFileError, match=__import__("re").escape(where)):
        read_trackers(p)


def test_bad_csv_tracker_files_name_the_line(tmp_path, capsys):
    header = "t," + ",".join(f"{d}_{c}" for d in ("hmd", "left", "right")
                             for c in ("px", "py", "pz", "qw", "qx", "qy", "qz"))
    good = "0.0," + ",".join(["0", "1.6", "0", "1", "0", "0", "0"] * 3)
    bad = "0.1," + ",".join(["0", "1.6", "0", "1", "0", "0", "0"] * 2 + ["0", "x", "0", "1", "0", "0", "0"])
    p = tmp_path / "bad.csv"
    p.write_text("\n".join([header, good, bad]) + "\n")
    with pytest.raises(TrackerFileError, match=r"line 3: field right_py"):
        read_trackers(p)
    p.write_text("\n".join([header.replace(",left_qw", ""), good]) + "\n")
    with pytest.raises(TrackerFileError, match=r"line 1: header lacks left_qw"):
        read_trackers(p)
    p.write_text("\n".join([header, good, good]) + "\n")
    with pytest.raises(TrackerFileError, match=r"line 3: field t: times must increase"):
        read_trackers(p)
    # Through the command line: one line naming the file, no traceback.
    model = tmp_path / "m.npz"
    model.write_bytes(b"not a model")
    assert main(["vr", "eval", "--model", str(model)]) == 1
    err = capsys.readouterr().err
    assert "m.npz" in err and "Traceback" not in err


def test_csv_tracker_file_is_read_and_resampled(tmp_path):
    header = "t," + ",".join(f"{d}_{c}" for d in ("hmd", "left", "right")
                             for c in ("px", "py", "pz", "qw", "qx", "qy", "qz"))
    rows = [header]
    for i in range(46):  # 1 s at 45 Hz, walking along +Z at 1 m/s; left controller lost in the middle
        t = i / 45.0
        dev = [[0, 1.6, t, 1, 0, 0, 0], [-0.2, 1.0, t, 1, 0, 0, 0], [0.2, 1.0, t, 1, 0, 0, 0]]
        if 20 <= i < 25:
            dev[1] = [""] * 7
        rows.append(",".join([f"{t:.6f}"] + [str(v) for d in dev for v in d]))
    p = tmp_path / "walk.csv"
    p.write_text("\n".join(rows) + "\n")
    stream, _ = read_trackers(p)
    assert stream.fps == 60.0 and stream.num_frames == 61
    assert np.allclose(stream.positions[:, 0, 2], np.arange(61) / 60.0, atol=1e-9)
    assert not stream.valid[:, 1].all() and stream.valid[:, [0, 2]].all()
    x, yaw = device_features(stream)
    assert np.allclose(x[5:, 2], 1.0, atol=1e-4)      # HMD forward velocity in its floor frame
    assert np.allclose(yaw, 0.0)


# ---------------------------------------------------------------------------------------------
# Network (needs the `learn` extra, installed by `make test`)

# 800 iterations: over 20 training seeds (tests/spreads/vr_seeds.py) the rollout network's mean error over
# HMD-forward's on the held-out take was 0.45 / 0.59 / 0.74 (min / median / max); with 400 it was 0.57 / 0.81 /
# 0.9994, one seed short of failing test_tiny_network_beats_hmd_forward_on_held_out (untrained: 7.7-19).
TINY = dict(iterations=800, batch=64, rollout=20, checkpoint_every=300, progress=False)


@pytest.fixture(scope="module")
def tiny_data():
    take2 = _need(JLPM / "locomotion_take2.bvh")
    return load_sequences(split_held_out([TAKE1, take2])[0], mirrored=True, progress=False)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, tiny_data):
    from motionmatch.vr.train import TrainSettings, train_orientation
    out = tmp_path_factory.mktemp("vr") / "vr.npz"
    return out, train_orientation(tiny_data, out, TrainSettings(**TINY))


@pytest.mark.slow
def test_tiny_network_beats_hmd_forward_on_held_out(tiny_model):
    path, result = tiny_model
    nets = load_networks(path)
    assert nets["network"].rollout == 20 and nets["network_r1"].rollout == 1
    held = split_held_out([TAKE1, JLPM / "locomotion_take2.bvh"])[1]
    assert [(p.path.name, p.start) for p in held] == [("locomotion_take2.bvh", 0.75)]
    doc = evaluate(nets, load_sequences(held, progress=False))
    assert doc["frames"] > 1000
    assert doc["network"]["mean_deg"] < doc["hmd_forward"]["mean_deg"]
    assert set(doc) == {"hmd_forward", "network_r1", "network", "frames"}


@pytest.mark.slow
def test_rollout_training_feeds_back_its_outputs(tiny_model):
    import jax
    import jax.numpy as jnp
    from motionmatch.vr import train as tr
    loss = jax.jit(tr._loss)
    _, result = tiny_model
    assert len(result.history["network"]) == len(result.history["network_r1"]) == 800
    net = result.networks["network"]
    params = [(jnp.asarray(w), jnp.asarray(b)) for w, b in zip(net.weights, net.biases)]
    mean, std = jnp.asarray(net.input_mean), jnp.asarray(net.input_std)
    rng = np.random.default_rng(0)
    north, east = jnp.array([[0.0, 1.0]]), jnp.array([[1.0, 0.0]])
    # Only the first step sees the given previous facing; the second sees the first's output, fed back, so
    # turning the given facing changes the second step's own loss (l2 = 2 L2 - L1) too: 0 if each step
    # were given the true previous facing instead. One sample at a time: averaged over samples (and over
    # 20 steps, as this test did before) the changes cancelled, and 13 of 20 training seeds failed.
    # tests/spreads/vr_seeds.py, 20 seeds: the largest of 32 samples' |change of l2| / |change of l1| is
    # 1.3 / 13 / 432 (min / median / max; 1.2 / 10 / 108 at 400 iterations).
    shares = []
    for _ in range(32):
        x = jnp.asarray(rng.normal(size=(1, 2, 36)).astype(np.float32))
        facing = jnp.asarray(np.tile([0.0, 1.0], (1, 2, 1)).astype(np.float32))
        hmd = jnp.zeros((1, 3))
        d1 = float(loss(params, (x[:, :1], facing[:, :1], hmd[:, :2], east), mean, std)
                   - loss(params, (x[:, :1], facing[:, :1], hmd[:, :2], north), mean, std))
        d2 = float(loss(params, (x, facing, hmd, east), mean, std) - loss(params, (x, facing, hmd, north), mean, std))
        shares.append(abs(2 * d2 - d1) / abs(d1))
    assert max(shares) > 0.1, shares


@pytest.mark.slow
def test_training_resumes_from_a_checkpoint(tmp_path, tiny_data, tiny_model):
    from motionmatch.vr import train as tr
    out = tmp_path / "vr.npz"
    settings = tr.TrainSettings(**TINY)
    # A run cut short (here in the rollout network's training) leaves a checkpoint; the next run picks
    # it up and ends where the uninterrupted run (tiny_model) ended.
    saved = {}
    real = tr._save_checkpoint

    def interrupt_at_fourth(path, *a):
        real(path, *a)
        saved["n"] = saved.get("n", 0) + 1
        if saved["n"] == 4:
            raise KeyboardInterrupt
    tr._save_checkpoint = interrupt_at_fourth
    try:
        with pytest.raises(KeyboardInterrupt):
            tr.train_orientation(tiny_data, out, settings)
    finally:
        tr._save_checkpoint = real
    assert tr._checkpoint_path(out).exists() and not out.exists()
    resumed = tr.train_orientation(tiny_data, out, settings)
    assert resumed.resumed and not tr._checkpoint_path(out).exists()
    full = tiny_model[1]
    for name in ("network_r1", "network"):
        for a, b in zip(full.networks[name].weights, resumed.networks[name].weights):
            assert np.allclose(a, b, atol=1e-5)
        assert np.allclose(full.history[name], resumed.history[name], atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Upper body and driver

def test_arm_ik_puts_hands_on_reachable_controllers(take1):
    anim, calib = take1
    roles = find_roles(anim.skeleton.names)
    parents = anim.skeleton.parents
    gpos, grot = anim.global_transforms()
    chest = roles["chest"]
    for i, j in [(100, 900), (400, 1500), (1200, 300)]:
        # Controllers where frame j's hands were relative to its upper arms (turned with the chest),
        # carried to frame i: reachable by construction, yet far from frame i's own hands.
        uppers = [arm_chain(parents, roles, s)[0] for s in ("left", "right")]
        rel = quat_rotate(quat_mul_inv(grot[i, chest], grot[j, chest]),
                          gpos[j, [roles["left_hand"], roles["right_hand"]]] - gpos[j, uppers])
        targets = gpos[i, uppers] + rel
        assert np.linalg.norm(targets - gpos[i, [roles["left_hand"], roles["right_hand"]]], axis=-1).max() > 0.05
        new_rot = reach_arms(anim.positions[i], anim.rotations[i], parents, roles, targets)
        p, _ = forward_kinematics(anim.positions[i][None], new_rot[None], parents)
        err = np.linalg.norm(p[0, [roles["left_hand"], roles["right_hand"]]] - targets, axis=-1)
        assert err.max() < 0.01, (i, j, err)
        assert np.isfinite(new_rot).all()


def test_chest_leans_toward_out_of_reach_controllers(take1):
    anim, _ = take1
    roles = find_roles(anim.skeleton.names)
    parents = anim.skeleton.parents
    gpos, _ = anim.global_transforms()
    i = 200
    # Both controllers 0.15 m beyond the arms' reach straight ahead of the shoulders.
    fwd = np.cross(gpos[i, roles["left_upper_leg"]] - gpos[i, roles["right_upper_leg"]], [0, 1.0, 0])
    fwd /= np.linalg.norm(fwd)
    targets = np.array([gpos[i, roles["left_hand"]], gpos[i, roles["right_hand"]]]) + 0.0
    for k, side in enumerate(("left", "right")):
        up, lo, ha = arm_chain(parents, roles, side)
        reach = np.linalg.norm(gpos[i, lo] - gpos[i, up]) + np.linalg.norm(gpos[i, ha] - gpos[i, lo])
        targets[k] = gpos[i, up] + fwd * (reach + 0.15)
    no_lean = reach_arms(anim.positions[i], anim.rotations[i], parents, roles, targets, max_lean_deg=0.0)
    lean = reach_arms(anim.positions[i], anim.rotations[i], parents, roles, targets)
    hands = [roles["left_hand"], roles["right_hand"]]
    p0, _ = forward_kinematics(anim.positions[i][None], no_lean[None], parents)
    p1, _ = forward_kinematics(anim.positions[i][None], lean[None], parents)
    e0 = np.linalg.norm(p0[0, hands] - targets, axis=-1)
    e1 = np.linalg.norm(p1[0, hands] - targets, axis=-1)
    assert (e1 < e0 - 0.05).all(), (e0, e1)


def test_device_targets_and_root_clamp(take1):
    anim, calib = take1
    stream, truth = simulate_trackers(anim, calibration=calib)
    hand_pos, hand_rot, head_rot = device_targets(stream.positions[10], stream.rotations[10], calib)
    assert np.allclose(hand_pos, [truth.left_hand[10], truth.right_hand[10]])
    roles = find_roles(anim.skeleton.names)
    _, grot = resample(anim, 60.0).global_transforms()
    assert quat_angle(quat_mul_inv(head_rot, grot[10, roles["head"]])) < 1e-6
    root = np.array([[1.0, 0.2, 0.0], [0.05, 0.0, 0.0]])
    target = np.zeros((2, 3))
    for alpha in (0.1, 0.3):
        c = clamp_root(root, target, alpha)
        d = np.linalg.norm(c[:, [0, 2]], axis=-1)
        assert d[0] == pytest.approx(alpha) and d[1] == pytest.approx(0.05) and c[0, 1] == 0.2


@pytest.mark.slow
def test_driver_follows_a_walking_stream(take1, tiny_model):
    anim, calib = take1
    nets = load_networks(tiny_model[0])
    stream, truth = simulate_trackers(anim, calibration=calib)
    state = driver_start(stream.positions[0], stream.rotations[0])
    speeds, errs = [], []
    for f in range(1, 900):
        state = driver_step(state, nets["network"], stream.positions[f], stream.rotations[f], 1 / 60)
        pos, facing = desired_trajectory(state)
        assert np.isfinite(pos).all() and np.isfinite(facing).all()
        speeds.append(np.linalg.norm(state.velocity))
        yaw = np.arctan2(*quat_rotate(state.facing, np.array([0, 0, 1.0]))[[0, 2]])
        errs.append(float(angle_error_deg(yaw, truth.facing_yaw[f])))
    hmd_speed = np.linalg.norm(np.diff(stream.positions[:900, 0, [0, 2]], axis=0) * 60, axis=-1)
    # Smoothed, the speed tracks the head's average speed without its per-step bobbing.
    assert abs(np.mean(speeds[200:]) - hmd_speed[200:].mean()) < 0.1 * hmd_speed[200:].mean() + 0.05
    assert np.std(np.diff(speeds[200:])) < np.std(np.diff(hmd_speed[200:]))
    # tests/spreads/vr_seeds.py, 20 training seeds: median error 4.3 / 5.3 / 7.6 degrees (min / median / max);
    # networks trained 5 iterations (3 seeds): 50-163.
    assert np.median(errs) < 20.0


def test_database_choice_by_hmd_height():
    ranges = [(0.0, 0.7), (0.7, 0.93), (0.93, 10.0)]
    assert select_database(1.70, 1.72, ranges) == 2
    assert select_database(1.45, 1.72, ranges) == 1
    assert select_database(0.9, 1.72, ranges) == 0
    assert select_database(0.5, 1.72, [(0.7, 0.93), (0.93, 10.0)]) == 0
