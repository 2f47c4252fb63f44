"""The Bandai-Namco locomotion database: hips hung off the simulation bone, toe contacts measured on the
rig, the file selection of `motionmatch build --default bandai` (a few clips only: the full build is
~1,100 clips)."""
from __future__ import annotations

import numpy as np
import pytest

from motionmatch.posedb.database import BuildSettings, build_database, hips_rooted
from motionmatch.io.bvh import read_bvh


@pytest.fixture(scope="module")
def bandai_few(bandai_dir):
    """Two dataset-2 walks, a dataset-2 run and the dataset-1 walk-back whose joint_Root moves 1.2 m."""
    d1, d2 = bandai_dir / "dataset-1", bandai_dir / "dataset-2"
    files = [d1 / "dataset-1_walk-back_normal_001.bvh", d2 / "dataset-2_walk_normal_001.bvh",
             d2 / "dataset-2_walk_normal_002.bvh", d2 / "dataset-2_run_normal_001.bvh"]
    return build_database(files, BuildSettings(), progress=False, workers=1)


def test_joints_above_the_hips_fold_into_them_with_full_kinematics(bandai_dir):
    anim = read_bvh(bandai_dir / "dataset-1" / "dataset-1_walk-back_normal_001.bvh")
    assert anim.skeleton.names[:2] == ["joint_Root", "Hips"]
    assert np.abs(anim.positions[:, 0]).max() > 1.0          # this clip's joint_Root moves
    folded = hips_rooted(anim)
    assert folded.skeleton.names == anim.skeleton.names[1:] and folded.skeleton.parents[0] == -1
    want, want_rot = anim.global_transforms()
    got, got_rot = folded.global_transforms()
    np.testing.assert_allclose(got, want[:, 1:], atol=1e-9)
    np.testing.assert_allclose(np.abs((got_rot * want_rot[:, 1:]).sum(-1)), 1.0, atol=1e-9)
    jl = read_bvh(bandai_dir.parent / "jlpm22-locomotion" / "locomotion_take1.bvh")
    assert hips_rooted(jl) is jl                               # hips already the root: untouched


def test_bandai_hips_hang_off_the_simulation_bone(bandai_few):
    db = bandai_few
    assert db.skeleton.names[:3] == ["Simulation", "Hips", "Spine"] and db.roles["hips"] == 1
    # The hips' local offset is their offset from the character root: centimetres sideways, not metres.
    assert np.abs(np.asarray(db.positions[:, 1, [0, 2]])).max() < 0.3
    assert 0.8 < float(np.median(db.positions[:, 1, 1])) < 1.1
    # Consecutive frames (inside clips) differ little in every local transform: no lever left to swing.
    inner = np.setdiff1d(np.arange(db.num_frames - 1), db.range_stops - 1)
    step = np.linalg.norm(np.diff(np.asarray(db.positions), axis=0)[inner], axis=-1)[:, 1:]
    assert step.max() < 0.1


def test_toe_floor_measured_on_the_rig(bandai_few, jlpm_db):
    from motionmatch.motion.metrics import toe_floor_m
    assert 0.03 < bandai_few.meta["toe_floor_m"] < 0.07       # Bandai toes sit inside a thick sole
    assert abs(jlpm_db.meta["toe_floor_m"]) < 0.01
    assert toe_floor_m(jlpm_db) == max(0.0, jlpm_db.meta["toe_floor_m"])
    # Databases built before the key existed: measured from their clips, the same way.
    old = type(bandai_few)(**{k: getattr(bandai_few, k) for k in bandai_few.__dataclass_fields__
                              if k not in ("runtime_cache", "meta")}, meta={})
    assert toe_floor_m(old) == pytest.approx(bandai_few.meta["toe_floor_m"], abs=0.01)


def test_terrain_contacts_see_bandai_toes(bandai_few):
    """Bandai toes rest ~4.5 cm above the ground: on flat terrain (height 0) a fixed 3 cm test found
    almost no contact in the database's own walks; at terrain + toe_floor_m it agrees with the
    local-floor test used on flat ground."""
    from motionmatch.motion.metrics import toe_contacts, toe_floor_m
    db = bandai_few
    floor = toe_floor_m(db)
    agree, fixed, local_n = 0, 0, 0
    for r in range(len(db.range_starts)):
        gp, _ = db.global_transforms(slice(int(db.range_starts[r]), int(db.range_stops[r])))
        for t in (db.roles["left_toe"], db.roles["right_toe"]):
            local = toe_contacts(gp[:, t], db.fps)[0]
            flat = np.zeros(len(gp))
            agree += (toe_contacts(gp[:, t], db.fps, flat + floor)[0] == local).sum()
            fixed += toe_contacts(gp[:, t], db.fps, flat)[0].sum()
            local_n += local.sum()
    total = sum(int(b - a - 1) for a, b in zip(db.range_starts, db.range_stops)) * 2
    assert local_n > 0.3 * total and fixed < 0.1 * local_n and agree > 0.9 * total


def test_synth_records_the_toe_floor_on_terrain(bandai_few):
    from motionmatch.runtime.controller import GamepadInput
    from motionmatch.world.terrain import Heightfield
    from motionmatch.offline.scenario import Scenario
    from motionmatch.offline.synth import run_scenario
    terrain = Heightfield.from_spec({"kind": "steps", "step_height": 0.08, "step_length": 0.6, "start": 1.0})
    scen = Scenario(duration=2.0, inputs=((0.0, GamepadInput(move=(0.0, 1.0))),), style=None)
    assert run_scenario(bandai_few, scen, terrain=terrain)["toe_floor_m"] == bandai_few.meta["toe_floor_m"]


def test_bandai_locomotion_selection(bandai_dir):
    from motionmatch.posedb.database import default_database_path
    from motionmatch.posedb.datapaths import bandai_locomotion_files
    files, tags = bandai_locomotion_files(bandai_dir.parent)
    names = [f.name for f in files]
    contents = {n.split("_")[0] + "_" + n.split("_")[1] for n in names}
    assert contents == {"dataset-2_walk", "dataset-2_walk-turn-left", "dataset-2_walk-turn-right", "dataset-2_run",
                        "dataset-1_walk", "dataset-1_walk-back", "dataset-1_walk-left", "dataset-1_walk-right",
                        "dataset-1_run", "dataset-1_dash"}
    assert sum(n.startswith("dataset-2_") for n in names) == 962                    # all of dataset 2
    assert sum(n.startswith("dataset-1_walk-back_") for n in names) == 15            # every style
    assert set(map(tuple, tags.values())) == {("source:bandai-namco",)}
    assert default_database_path(kind="bandai").name == "bandai-locomotion.npz"


def _mean_rotation(q):
    q = q * np.sign((q * q[:1]).sum(-1, keepdims=True) + 1e-12)
    m = q.mean(0)
    return m / np.linalg.norm(m)


def test_mirrored_bandai_clips_keep_their_joints_local_rotations(bandai_dir):
    """Bandai bones lie along the mirror axis, so the children alone leave each mirror correction a free
    turn; taken from the motion, a mirrored clip's local rotations stay near the original's (blending
    one into the other no longer spins joints) and world positions are still exactly mirrored."""
    from motionmatch.motion.preprocess import mirror, mirror_corrections
    from motionmatch.motion.skeleton import mirror_pairs
    d2 = bandai_dir / "dataset-2"
    sample = [hips_rooted(read_bvh(d2 / f"dataset-2_{c}_normal_001.bvh")) for c in ("walk", "run", "walk-turn-left")]
    skel = sample[0].skeleton
    pairs = mirror_pairs(skel.names)
    grot = np.concatenate([a.global_transforms()[1] for a in sample])
    clip = hips_rooted(read_bvh(d2 / "dataset-2_walk_normal_002.bvh"))

    def worst_joint_deg(corr):
        m = mirror(clip, corr)
        got, want = m.global_transforms()[0], clip.global_transforms()[0][:, pairs] * np.array([-1.0, 1.0, 1.0])
        np.testing.assert_allclose(got, want, atol=1e-9)
        return max(np.degrees(2 * np.arccos(min(1.0, abs(float(np.dot(_mean_rotation(m.rotations[:, j]),
                                                                       _mean_rotation(clip.rotations[:, j])))))))
                   for j in range(1, skel.num_joints))

    assert worst_joint_deg(mirror_corrections(skel, pairs)) > 150          # offsets alone: joints flipped
    assert worst_joint_deg(mirror_corrections(skel, pairs, grot)) < 30
    jl = read_bvh(bandai_dir.parent / "jlpm22-locomotion" / "locomotion_take1.bvh")
    jp = mirror_pairs(jl.skeleton.names)
    np.testing.assert_array_equal(mirror_corrections(jl.skeleton, jp, jl.global_transforms()[1]),
                                  mirror_corrections(jl.skeleton, jp))    # jlpm22: nothing to choose
