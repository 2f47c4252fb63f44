"""Feature schema, raw features and normalization on the real default database."""
import numpy as np
import pytest

from motionmatch.posedb.features import (FeatureError, FeatureSet, FeatureSchema, compute_features, default_schema,
                                         load_schema, schema_from_dict)
from motionmatch.maths.rotations import quat_inv, quat_rotate


def test_default_schema_is_the_27d_locomotion_set():
    s = default_schema()
    assert s.dims == 27
    w = {c.name: c.weight for c in s.channels}
    assert w == {"left_foot_position": 0.75, "right_foot_position": 0.75, "left_foot_velocity": 1.0,
                 "right_foot_velocity": 1.0, "hips_velocity": 1.0, "trajectory_position": 1.0,
                 "trajectory_direction": 1.5}
    sl = s.slices()
    assert sl["trajectory_position"] == slice(15, 21) and sl["trajectory_direction"] == slice(21, 27)


def test_raw_features_match_hand_computation(jlpm_db):
    db = jlpm_db
    f = int(db.range_starts[0]) + 500
    gp, gr = db.global_transforms(slice(f, f + 61))
    inv = quat_inv(gr[0, 0])
    # Trajectory position 20 frames ahead, in the simulation bone's frame now.
    d = quat_rotate(inv, gp[20, 0] - gp[0, 0])
    assert np.allclose(db.features.raw[f, 15:17], d[[0, 2]], atol=1e-4)
    d60 = quat_rotate(inv, gp[60, 0] - gp[0, 0])
    assert np.allclose(db.features.raw[f, 19:21], d60[[0, 2]], atol=1e-4)
    # Facing 40 frames ahead.
    fwd = quat_rotate(inv, quat_rotate(gr[40, 0], np.array([0.0, 0, 1])))
    assert np.allclose(db.features.raw[f, 23:25], fwd[[0, 2]], atol=1e-4)
    # Left foot position in character space, and its central-difference velocity.
    lf = db.roles["left_foot"]
    assert np.allclose(db.features.raw[f, 0:3], quat_rotate(inv, gp[0, lf] - gp[0, 0]), atol=1e-4)
    gprev, _ = db.global_transforms(slice(f - 1, f))
    v = (gp[1, lf] - gprev[0, lf]) * db.fps / 2
    assert np.allclose(db.features.raw[f, 6:9], quat_rotate(inv, v), atol=1e-3)


def test_trajectory_offsets_clamp_at_clip_end(jlpm_db):
    db = jlpm_db
    last = int(db.range_stops[0]) - 1
    # At the last frame of a clip every future offset clamps to the frame itself.
    assert np.allclose(db.features.raw[last, 15:21], 0.0, atol=1e-6)
    assert np.allclose(db.features.raw[last, 21:27], np.tile([0.0, 1.0], 3), atol=1e-5)


def test_normalization_properties(jlpm_db):
    fs = FeatureSet(jlpm_db.features.schema, jlpm_db.features.raw)
    n = fs.normalized.astype(np.float64)
    assert np.abs(n.mean(0)).max() < 1e-3
    for c in fs.schema.channels:
        sl = fs.channel_slices[c.name]
        # Mean per-dimension std of a channel equals its weight.
        assert n[:, sl].std(0).mean() == pytest.approx(c.weight, rel=1e-3)
    # Doubling a channel's weight doubles its part of any distance; the others are unchanged.
    a, b = 100, 5000
    before = fs.normalized[a] - fs.normalized[b]
    fs.set_weights({"hips_velocity": 2.0})
    after = fs.normalized[a] - fs.normalized[b]
    hv = fs.channel_slices["hips_velocity"]
    assert np.allclose(after[hv], 2.0 * before[hv], rtol=1e-5)
    other = np.ones(27, bool)
    other[hv] = False
    assert np.allclose(after[other], before[other], rtol=1e-6)
    # Queries normalize like the database.
    assert np.allclose(fs.normalize(fs.raw[a]), fs.normalized[a], atol=1e-5)
    with pytest.raises(FeatureError, match="unknown feature channel"):
        fs.set_weights({"nose_velocity": 1.0})


def test_zero_spread_channel_is_an_error_naming_it():
    schema = schema_from_dict({"channel": [
        {"name": "ok", "kind": "position", "joint": "hips"},
        {"name": "frozen", "kind": "velocity", "joint": "hips"}]})
    raw = np.random.default_rng(0).normal(size=(50, 6)).astype(np.float32)
    raw[:, 3:] = 1.0
    with pytest.raises(FeatureError, match="'frozen'"):
        FeatureSet(schema, raw)


def test_toml_schema_round_trip_and_errors(tmp_path):
    s = default_schema()
    p = tmp_path / "s.toml"
    p.write_text(s.to_toml())
    assert load_schema(p) == s
    bad = tmp_path / "bad.toml"
    bad.write_text('[[channel]]\nname = "x"\nkind = "speed"\n')
    with pytest.raises(FeatureError, match="kind"):
        load_schema(bad)
    bad.write_text('[[channel]]\nname = "t"\nkind = "trajectory_position"\noffsets = []\n')
    with pytest.raises(FeatureError, match="offsets"):
        load_schema(bad)
    bad.write_text('[[channel]]\nname = "p"\nkind = "position"\njoint = "hips"\nweight = -1\n')
    with pytest.raises(FeatureError, match="weight"):
        load_schema(bad)


def test_custom_schema_with_past_offsets_and_hand_position(jlpm_db):
    db = jlpm_db
    schema = schema_from_dict({"channel": [
        {"name": "past", "kind": "trajectory_position", "offsets": [-20, 20]},
        {"name": "hand", "kind": "position", "joint": "LeftHand", "weight": 0.5}]})
    sl = slice(int(db.range_starts[0]), int(db.range_stops[0]))
    gp, gr = db.global_transforms(sl)
    n = len(gp)
    raw = compute_features(schema, gp, gr, db.fps, np.array([0]), np.array([n]), db.joint_index)
    assert raw.shape == (n, 7)
    f = 300
    d = quat_rotate(quat_inv(gr[f, 0]), gp[f - 20, 0] - gp[f, 0])
    assert np.allclose(raw[f, 0:2], d[[0, 2]], atol=1e-5)
    assert np.allclose(raw[0, 0:2], 0.0, atol=1e-6)   # clamped at the clip start
