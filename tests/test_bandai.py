"""The Bandai-Namco locomotion database: hips hung off the simulation bone, toe contacts measured on the
rig, the file selection of `motionmatch build --default bandai` (a few clips only: the full build is
~1,100 clips)."""
from __future__ import annotations

import numpy as np
import pytest

from motionmatch.database import BuildSettings, build_database, hips_rooted
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
    from motionmatch.metrics import toe_floor_m
    assert 0.03 < bandai_few.meta["toe_floor_m"] < 0.07       # Bandai toes sit inside a thick sole
    assert abs(jlpm_db.meta["toe_floor_m"]) < 0.01
    assert toe_floor_m(jlpm_db) == max(0.0, jlpm_db.meta["toe_floor_m"])
    # Databases built before the key existed: measured from their clips, the same way.
    old = type(bandai_few)(**{k: getattr(bandai_few, k) for k in bandai_few.__dataclass_fields__
                              if k not in ("runtime_cache", "meta")}, meta={})
    assert toe_floor_m(old) == pytest.approx(bandai_few.meta["toe_floor_m"], abs=0.01)


def test_foot_sliding_on_terrain_sees_bandai_contacts(bandai_few):
    """On steps, Bandai toes rest ~4.5 cm above the terrain: a fixed 3 cm test found no contact at all."""
    from motionmatch.metrics import compute_metrics, toe_contacts
    from motionmatch.runtime.terrain import Heightfield
    from motionmatch.scenario import Scenario
    from motionmatch.runtime.controller import GamepadInput
    from motionmatch.synth import run_scenario
    terrain = Heightfield.from_spec({"kind": "steps", "step_height": 0.08, "step_length": 0.6, "start": 1.0})
    scen = Scenario(duration=4.0, inputs=((0.0, GamepadInput(move=(0.0, 1.0))),), style=None)
    rec = run_scenario(bandai_few, scen, terrain=terrain)
    floor = rec["toe_floor_m"]
    assert floor == bandai_few.meta["toe_floor_m"]
    toes = [rec["toe_positions"][:, i] for i in range(2)]
    with_floor = sum(toe_contacts(t, bandai_few.fps, g + floor)[0].sum() for t, g in zip(toes, rec["toe_ground"]))
    without = sum(toe_contacts(t, bandai_few.fps, g)[0].sum() for t, g in zip(toes, rec["toe_ground"]))
    assert with_floor > 4 * without and with_floor > 0.2 * len(toes[0])
    m = compute_metrics(rec, bandai_few.fps, 1.0, [0])
    assert 0.0 < m["foot_sliding_cm_s"] < 30.0 and m["foot_float_cm"]["mean"] < 3.0


def test_bandai_locomotion_selection(bandai_dir):
    from motionmatch.database import default_database_path
    from motionmatch.datapaths import bandai_locomotion_files
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
