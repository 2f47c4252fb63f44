"""Preprocessing on real clips: resampling, mirroring, simulation bone, contacts, tags."""
import numpy as np
import pytest

from motionmatch.io.bvh import read_bvh
from motionmatch.motion.preprocess import (add_simulation_bone, foot_contacts, hips_forward_axis, mirror,
                                           mirror_simulation_bone, resample, simulation_bone, tags_from_filename)
from motionmatch.maths.rotations import quat_angle, quat_inv_mul
from motionmatch.motion.skeleton import find_roles, mirror_pairs


@pytest.fixture(scope="module")
def bandai_walk(bandai_dir):
    return read_bvh(bandai_dir / "dataset-2" / "dataset-2_walk_normal_010.bvh")


@pytest.fixture(scope="module")
def jlpm_take1(jlpm_dir):
    a = read_bvh(jlpm_dir / "locomotion_take1.bvh")
    a.positions, a.rotations = a.positions[:900], a.rotations[:900]
    return a


def test_resample_30_to_60_keeps_source_frames_and_speed(bandai_walk):
    r = resample(bandai_walk, 60.0)
    F = bandai_walk.num_frames
    assert r.fps == 60.0 and r.num_frames == 2 * F - 1
    assert r.duration == pytest.approx((F - 1) / 30.0 + 1 / 60.0, abs=1e-9)
    g0, _ = bandai_walk.global_transforms()
    g1, _ = r.global_transforms()
    # Even frames sit exactly on source frames.
    assert np.abs(g1[::2] - g0).max() < 1e-6
    # In-between rotations lie on the arc between their neighbours (slerp, not Euler lerp).
    q0, q1, qm = bandai_walk.rotations[:-1], bandai_walk.rotations[1:], r.rotations[1::2]
    full = quat_angle(quat_inv_mul(q0, q1))
    half_a = quat_angle(quat_inv_mul(q0, qm))
    half_b = quat_angle(quat_inv_mul(qm, q1))
    assert np.allclose(half_a, full / 2, atol=1e-6) and np.allclose(half_b, full / 2, atol=1e-6)
    assert np.allclose(np.linalg.norm(r.rotations, axis=-1), 1.0)


def test_mirror_reflects_and_swaps_and_is_an_involution(bandai_walk, jlpm_take1):
    for anim in (resample(bandai_walk), jlpm_take1):
        pairs = mirror_pairs(anim.skeleton.names)
        assert (pairs != np.arange(len(pairs))).sum() >= 12   # legs, arms, shoulders swap
        m = mirror(anim)
        g, _ = anim.global_transforms()
        gm, _ = m.global_transforms()
        assert np.abs(gm - g[:, pairs] * np.array([-1.0, 1.0, 1.0])).max() < 1e-6
        assert "mirrored" in m.tags
        mm = mirror(m)
        gmm, _ = mm.global_transforms()
        assert np.abs(gmm - g).max() < 1e-6
        assert np.abs(np.abs((mm.rotations * anim.rotations).sum(-1)) - 1.0).max() < 1e-6
        assert "mirrored" not in mm.tags


def test_simulation_bone_follows_hips_and_facing(jlpm_take1, bandai_walk):
    for anim in (jlpm_take1, resample(bandai_walk)):
        roles = find_roles(anim.skeleton.names)
        g, r = anim.global_transforms()
        s = add_simulation_bone(anim, roles)
        assert s.skeleton.names[0] == "Simulation" and s.skeleton.parents[1] == 0
        gs, _ = s.global_transforms()
        assert np.abs(gs[:, 1:] - g).max() < 1e-6          # the pose itself is unchanged
        assert np.abs(s.positions[:, 0, 1]).max() == 0.0     # on the ground
        d = np.linalg.norm(s.positions[:, 0, [0, 2]] - g[:, roles["hips"]][:, [0, 2]], axis=1)
        assert d.mean() < 0.03 and np.percentile(d, 95) < 0.08
        # Facing agrees with the body's forward direction (left-right hip axis crossed with up).
        across = g[:, roles["left_upper_leg"]] - g[:, roles["right_upper_leg"]]
        body = np.cross(across, [0.0, 1.0, 0.0])[:, [0, 2]]
        yaw = 2 * np.arctan2(s.rotations[:, 0, 2], s.rotations[:, 0, 0])
        fwd = np.stack([np.sin(yaw), np.cos(yaw)], 1)
        cos = (body * fwd).sum(1) / np.linalg.norm(body, axis=1)
        assert np.degrees(np.arccos(np.clip(cos, -1, 1))).mean() < 15.0


def test_hips_forward_axis_is_derived_from_data(jlpm_take1, bandai_walk):
    # jlpm22's hips face -Z in their own frame, Bandai's +Z (measured in ../shared/mocap/README.md).
    axes = []
    for anim in (jlpm_take1, bandai_walk):
        roles = find_roles(anim.skeleton.names)
        g, r = anim.global_transforms()
        a = hips_forward_axis(g, r, roles)
        assert np.linalg.norm(a) == pytest.approx(1.0)
        axes.append(a)
    assert axes[0][2] < -0.9 and axes[1][2] > 0.9


def test_mirrored_simulation_bone_equals_filtering_the_mirrored_clip(jlpm_take1):
    roles = find_roles(jlpm_take1.skeleton.names)
    g, r = jlpm_take1.global_transforms()
    axis = hips_forward_axis(g, r, roles)
    p, q = simulation_bone(g, r, roles, axis)
    mp, mq = mirror_simulation_bone(p, q)
    m = mirror(jlpm_take1)
    gm, rm = m.global_transforms()
    # The mirrored skeleton's hips axis is the reflected axis.
    p2, q2 = simulation_bone(gm, rm, roles, hips_forward_axis(gm, rm, roles))
    assert np.abs(mp - p2).max() < 1e-3
    ang = np.degrees(quat_angle(quat_inv_mul(mq, q2)))
    assert ang.max() < 2.0


def test_contacts_alternate_on_a_walk(bandai_walk):
    anim = resample(bandai_walk)
    roles = find_roles(anim.skeleton.names)
    g, _ = anim.global_transforms()
    c = foot_contacts(g, anim.fps, [roles["left_toe"], roles["right_toe"]])
    onsets = []
    for side in (0, 1):
        on = np.flatnonzero(np.diff(c[:, side].astype(int)) == 1) + 1
        onsets += [(f, side) for f in on]
    onsets.sort()
    sides = [s for _, s in onsets]
    assert len(sides) >= 4
    alternating = np.mean([a != b for a, b in zip(sides[:-1], sides[1:])])
    assert alternating >= 0.8
    # Both feet are on the ground a good part of a walk cycle, and never both in the air for long.
    assert 0.3 < c.mean() < 0.9
    assert (~c.any(axis=1)).mean() < 0.3


def test_tags_from_bandai_file_names():
    assert tags_from_filename("x/dataset-1_walk-left_happy_003.bvh") == ["dataset-1", "walk-left", "happy", "walk"]
    assert tags_from_filename("dataset-2_run_elderly_010.bvh.gz") == ["dataset-2", "run", "elderly"]
    assert tags_from_filename("/d/jlpm22-locomotion/locomotion_take1.bvh") == ["jlpm22-locomotion"]
