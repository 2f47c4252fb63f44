"""Databases from mixed sources (clips retargeted onto one skeleton) and the twist / shoulder metrics."""
import math
from pathlib import Path

import numpy as np
import pytest

from motionmatch.cli import main
from motionmatch.posedb.database import BuildSettings, build_database, load_database
from motionmatch.posedb.datapaths import list_bvh_files, mixed_default_files, source_tags
from motionmatch.io.bvh import read_bvh
from motionmatch.motion.metrics import held_fraction, shoulder_facing_yaw, twist_deg
from motionmatch.motion.retarget import planted_toe_height, synthetic_tpose_frames
from motionmatch.maths.rotations import quat_inv, quat_rotate
from motionmatch.runtime.character import CharacterSettings
from motionmatch.runtime.matching import trajectory_layout
from motionmatch.runtime.warping import has_side_steps
from motionmatch.offline.scenario import load_scenario, parse_scenario
from motionmatch.motion.skeleton import shoulder_joints
from motionmatch.offline.synth import change_frames, run_scenario

MOCAP = Path(__file__).resolve().parents[2].parent / "shared" / "mocap"
JLPM = MOCAP / "jlpm22-locomotion"
CMU = MOCAP / "cmu-locomotion" / "143_40.bvh"
WALK_BACK = MOCAP / "bandai-namco" / "dataset-1"


@pytest.fixture(scope="module")
def mixed_db():
    """jlpm22 takes + the CMU side-steps + the 15 Bandai-Namco backward walks on the jlpm22 skeleton
    (mirrored): ~31k frames."""
    roots = [JLPM, CMU] + sorted(WALK_BACK.glob("dataset-1_walk-back_*.bvh"))
    for r in roots[:2]:
        if not r.exists():
            pytest.fail(f"test data missing: {r} (the tests need ../shared/mocap beside the project)")
    files = list_bvh_files(roots)
    settings = BuildSettings(skeleton=str(JLPM / "locomotion_take1.bvh"), file_tags=source_tags(roots, files))
    return build_database(files, settings, progress=False)


def _clip(db, name):
    i = db.range_names.index(name)
    return int(db.range_starts[i]), int(db.range_stops[i]), db.range_tags[i]


def _ground_velocity(db, a, b):
    """Simulation-bone velocity (m/s) in its own frame: x right... (left at +x), z forward."""
    v = np.diff(db.positions[a:b, 0].astype(np.float64), axis=0) * db.fps
    return quat_rotate(quat_inv(db.rotations[a + 1:b, 0].astype(np.float64)), v)


def test_mixed_build_has_one_skeleton_and_every_source_tagged(mixed_db, jlpm_db):
    db = mixed_db
    assert db.skeleton.names == jlpm_db.skeleton.names and db.num_joints == jlpm_db.num_joints
    sources = [[t for t in tags if t.startswith("source:")] for tags in db.range_tags]
    assert all(len(s) == 1 for s in sources)
    assert {s[0] for s in sources} == {"source:jlpm22-locomotion", "source:cmu-locomotion", "source:dataset-1"}
    assert "walk-back" in db.known_tags and "mirrored" in db.known_tags

    # CMU: 120 fps, CMU units, synthetic T-pose frame 0 dropped -> 965 frames = 8.03 s at 60 fps.
    a, b, tags = _clip(db, "143_40.bvh")
    assert "source:cmu-locomotion" in tags and b - a == int(math.floor(964 / 120 * 60 + 1e-6)) + 1
    v = _ground_velocity(db, a, b)
    assert np.median(np.abs(v[:, 0])) > 1.0          # side-steps: sideways at ~1.2 m/s
    assert np.median(np.abs(v[:, 2])) < 0.3          # not forward or backward
    # Backward walks go backward.
    a, b, _ = _clip(db, "dataset-1_walk-back_normal_001.bvh")
    assert np.median(_ground_velocity(db, a, b)[:, 2]) < -0.4

    # Every source plants its toes at the jlpm22 actor's height and carries its hips like the jlpm22 captures
    # (retarget.Stance; the lowest toe's 5th percentile differs: a backward walk plants toe first).
    gp, _ = db.global_transforms()
    floors, hips = {}, {}
    for (a, b), s in zip(zip(db.range_starts, db.range_stops), sources):
        floors.setdefault(s[0], []).append(planted_toe_height(gp[a:b], db.roles, db.fps))
        hips.setdefault(s[0], []).append(np.median(gp[a:b, db.roles["hips"], 1]))
    ref_floor, ref_hips = np.median(floors["source:jlpm22-locomotion"]), np.median(hips["source:jlpm22-locomotion"])
    for s in floors:
        assert abs(np.median(floors[s]) - ref_floor) < 0.01, s
        assert abs(np.median(hips[s]) / ref_hips - 1) < 0.1, s


def test_mixed_default_set_is_one_ordinary_person():
    """The default set's Bandai-Namco clips are `normal` ones only: the backward walk and six straight runs
    (014-019), no styled clip, no walk to the left or right."""
    files, tags, skeleton = mixed_default_files(MOCAP)
    bandai = sorted(f.name for f in files if tags[str(f)] == ["source:bandai-namco"])
    assert bandai == ["dataset-1_walk-back_normal_001.bvh"] + [f"dataset-2_run_normal_{i:03d}.bvh" for i in range(14, 20)]
    assert skeleton.endswith("locomotion_take1.bvh")


def test_build_command_skeleton_from(tmp_path, capsys):
    out = tmp_path / "mixed.npz"
    walk = WALK_BACK / "dataset-1_walk-back_tired_001.bvh"
    # Without a skeleton the second skeleton is refused, naming the way out.
    assert main(["build", str(JLPM / "locomotion_take1.bvh"), str(walk), "-o", str(out), "--quiet"]) == 1
    assert "--skeleton-from" in capsys.readouterr().err
    assert main(["build", str(JLPM / "locomotion_take1.bvh"), str(walk), str(CMU), "--skeleton-from", str(JLPM),
                 "-o", str(out), "--quiet", "--no-mirror"]) == 0
    db = load_database(out)
    assert sorted(db.range_names) == ["143_40.bvh", "dataset-1_walk-back_tired_001.bvh", "locomotion_take1.bvh"]
    assert db.meta["settings"]["skeleton"].endswith("locomotion_take1.bvh")
    assert {"source:cmu-locomotion", "source:dataset-1", "source:jlpm22-locomotion"} <= db.known_tags


def test_synthetic_tpose_frame_detected():
    assert synthetic_tpose_frames(read_bvh(CMU)) == 1
    assert synthetic_tpose_frames(read_bvh(JLPM / "locomotion_take1.bvh")) == 0
    assert synthetic_tpose_frames(read_bvh(WALK_BACK / "dataset-1_walk-back_tired_001.bvh")) == 0


def test_twist_and_shoulder_facing_on_a_synthetic_body():
    """Joints 0/1 = left/right hip, 2/3 = left/right shoulder; the hips face yaw h, the shoulders h + t."""
    h = np.radians([0.0, 30.0, 170.0, -90.0, 10.0])
    t = np.radians([0.0, 45.0, 20.0, -60.0, 179.0])
    g = np.zeros((len(h), 4, 3))

    def side(yaw, half):        # left side of a body facing `yaw` is +x turned by yaw
        return np.stack([np.cos(yaw), np.zeros_like(yaw), -np.sin(yaw)], -1) * half

    g[:, 0], g[:, 1] = side(h, 0.1), -side(h, 0.1)
    g[:, 2], g[:, 3] = side(h + t, 0.2) + [0, 1.4, 0], -side(h + t, 0.2) + [0, 1.4, 0]
    np.testing.assert_allclose(twist_deg(g, (0, 1), (2, 3)), np.degrees(np.abs(t)), atol=1e-9)
    yaw = shoulder_facing_yaw(g, (2, 3))
    wrapped = np.remainder(yaw - (h + t) + np.pi, 2 * np.pi) - np.pi
    np.testing.assert_allclose(wrapped, 0.0, atol=1e-9)
    # Yaw 0 faces +Z: a body whose left is +x faces +z.
    assert abs(yaw[0]) < 1e-12
    ok = np.array([True] * 40 + [False] * 20 + [True] * 60)
    assert held_fraction([0, 60], ok, 60.0, settle_s=0.0) == {"mean": 0.833, "min": 0.667}


def test_backward_requests_play_backward_walks(mixed_db, jlpm_db):
    """Backward stick with the look held forward: the mixed database answers with real backward walks
    at the asked speed; the jlpm22-only database tracks the request less often."""
    scen = parse_scenario({"duration": 5.0, "inputs": [
        {"t": 0.0, "move": [0.0, 1.0], "run": False, "strafe": False, "look": None},
        {"t": 1.0, "move": [0.0, -1.0], "run": False, "strafe": True, "look": [0.0, 1.0]}]})
    rec = run_scenario(mixed_db, scen)
    held = slice(int(1.6 * mixed_db.fps), None)
    clips = np.searchsorted(mixed_db.range_stops, rec["frames"][held], side="right")
    assert np.mean(["walk-back" in mixed_db.range_tags[c] for c in clips]) > 0.8
    v = np.median(rec["root_vel"][held][:, [0, 2]], axis=0)
    want = rec["desired_vel"][-1][[0, 2]]
    assert want[1] < -0.8 and abs(np.linalg.norm(v) / np.linalg.norm(want) - 1) < 0.2
    assert math.degrees(math.acos(v @ want / np.linalg.norm(v) / np.linalg.norm(want))) < 15

    def tracked(db, r):
        return held_fraction(change_frames(scen, db.fps)[1:], _velocity_ok(r), db.fps)["mean"]
    assert tracked(mixed_db, rec) > tracked(jlpm_db, run_scenario(jlpm_db, scen)) + 0.1


def _velocity_ok(rec):
    """Per frame: root velocity within 15 degrees and 20 % of the desired velocity."""
    v, w = rec["root_vel"][:, [0, 2]], rec["desired_vel"][:, [0, 2]]
    sv, sw = np.linalg.norm(v, axis=1), np.linalg.norm(w, axis=1)
    cos = (v * w).sum(1) / np.maximum(sv * sw, 1e-9)
    return (cos >= math.cos(math.radians(15))) & (np.abs(sv - sw) <= 0.2 * sw)


def test_shoulder_joints_of_the_known_skeletons(jlpm_db):
    names = jlpm_db.skeleton.names
    l, r = shoulder_joints(jlpm_db.skeleton.parents, jlpm_db.roles)
    assert (names[l], names[r]) == ("LeftUpperArm", "RightUpperArm")
    cmu = read_bvh(CMU).skeleton
    from motionmatch.motion.skeleton import find_roles
    l, r = shoulder_joints(cmu.parents, find_roles(cmu.names))
    assert (cmu.names[l], cmu.names[r]) == ("LeftArm", "RightArm")


def test_strafe_plays_the_side_steps_when_the_database_has_them(mixed_db, jlpm_db):
    """Strafing right (Q + D): with the CMU side-steps in the database the search plays them (the played
    frames travel sideways) and the pelvis stays with the shoulders; with side-step mode off the warp plays
    a forward walk turned 90 degrees with the pelvis twisted against the shoulders. The jlpm22 takes have
    no straight side-step (their side-steps curve): side-step mode stays off there and the strafe moves."""
    layout = lambda db: trajectory_layout(db.features.schema, db.features.channel_slices)[1]
    assert has_side_steps(mixed_db.features.raw, layout(mixed_db), mixed_db.fps)
    assert not has_side_steps(jlpm_db.features.raw, layout(jlpm_db), jlpm_db.fps)
    scen = load_scenario(Path(__file__).resolve().parents[2] / "scenarios" / "strafe_right.json")

    def measure(db, settings):
        v = np.zeros((db.num_frames, 3))
        v[:-1] = _ground_velocity(db, 0, db.num_frames)
        sideways = (np.abs(v[:, 0]) > 0.5) & (np.abs(v[:, 0]) > 2.0 * np.abs(v[:, 2]))
        rec = run_scenario(db, scen, settings)
        held = slice(int(1.0 * db.fps), int(5.0 * db.fps))
        twist = twist_deg(rec["body_positions"], (0, 1), (2, 3))[held]
        speed = np.median(np.linalg.norm(rec["root_vel"][held][:, [0, 2]], axis=1))
        return sideways[rec["frames"][held].astype(int)].mean(), np.percentile(twist, 95), speed

    # Measured: 100 % sideways, twist p95 7.9 deg, 1.09 m/s; mode off 0 %, 62 deg; jlpm22 0 %, 1.10 m/s.
    side, twist, speed = measure(mixed_db, CharacterSettings())
    assert side >= 0.8 and twist <= 20.0 and speed >= 0.8
    off = CharacterSettings()
    off.warp.side_step_angle_deg = 180.0
    side, twist, speed = measure(mixed_db, off)
    assert side <= 0.2 and twist >= 35.0 and speed >= 0.8
    side, twist, speed = measure(jlpm_db, CharacterSettings())
    assert side <= 0.2 and speed >= 0.8
