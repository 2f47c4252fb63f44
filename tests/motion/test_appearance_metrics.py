"""What the output looks like (metrics.json `posture`, `posture_source`, `style`, `idle`), on real data:
knee angle, planted toe height, style switches, idle stretches, style tags of a database."""
import json

import numpy as np
import pytest

from motionmatch.posedb.database import BuildSettings, build_database, load_database, save_database
from motionmatch.motion.idle import idle_figures, rest_stretches, shortest_loop_frames
from motionmatch.maths.kinematics import forward_kinematics
from motionmatch.motion.posture import (GAIT_DIRECTIONS, frame_posture, gait_figures, knee_angles_deg, main_actor_ranges,
                                        posture_joints, source_posture)
from motionmatch.maths.rotations import quat_angle
from motionmatch.offline.scenario import parse_scenario
from motionmatch.motion.styles import StyleError, clip_styles, default_style_tags, style_figures
from motionmatch.offline.synth import appearance_metrics, run_scenario

WALK_REST = {"duration": 7.0, "inputs": [
    {"t": 0.0, "move": [0.0, 1.0], "run": False, "strafe": False, "look": None},
    {"t": 2.0, "move": [0.0, 0.0], "run": False, "strafe": False, "look": None}]}


@pytest.fixture(scope="module")
def walk_rest(jlpm_db):
    """Walk 2 s, then the stick rests 5 s, on the jlpm22 database: the run record and its figures."""
    rec = run_scenario(jlpm_db, parse_scenario(WALK_REST))
    return rec, appearance_metrics(jlpm_db, rec)


def test_knee_angle_is_180_for_a_straight_leg_and_follows_the_knee_rotation(jlpm_db):
    J = jlpm_db.num_joints
    rest = np.zeros((1, J, 4))
    rest[..., 0] = 1.0
    gp, _ = forward_kinematics(jlpm_db.skeleton.offsets[None], rest, jlpm_db.skeleton.parents)
    assert np.allclose(knee_angles_deg(gp[:, posture_joints(jlpm_db.roles)]), 180.0, atol=0.5)
    # On a walk clip, the angle from positions vs 180 - the knee joint's own rotation angle (flexion
    # plus a few degrees of twist: measured median difference 0.14 deg, p99 5.3 deg).
    sl = slice(int(jlpm_db.range_starts[0]), int(jlpm_db.range_starts[0]) + 1500)
    gp, _ = jlpm_db.global_transforms(sl)
    knees = knee_angles_deg(gp[:, posture_joints(jlpm_db.roles)])
    legs = [jlpm_db.roles["left_lower_leg"], jlpm_db.roles["right_lower_leg"]]
    flex = np.degrees(quat_angle(np.asarray(jlpm_db.rotations[sl][:, legs], dtype=np.float64)))
    assert knees.min() < 120.0 < 170.0 < knees.max()      # a real walk bends and straightens them
    assert np.median(np.abs(knees - (180.0 - flex))) < 1.0
    # The app's per-frame figure (plain floats) is the same angle.
    for f in range(0, 1500, 97):
        assert frame_posture(jlpm_db, gp[f])["knee_deg"] == pytest.approx(knees[f].mean(), abs=0.01)


def test_the_source_walk_has_the_source_posture(jlpm_db, walk_rest):
    _, m = walk_rest
    src = m["posture_source"]
    assert set(m["posture"]) == set(src) == {"knee_deg", "planted_toe_cm", "trunk_lean_deg", "outside_source"}
    # The jlpm22 takes: knees ~144 deg while moving, planted toes ~2 cm (the 143 deg).
    assert 138.0 < src["knee_deg"] < 150.0 and 0.5 < src["planted_toe_cm"] < 3.5
    # Motion matching on the actor's own clips keeps the actor's posture: its knees at the walk's own gait
    # (measured +1.7 deg; the pooled figure mixes in the runs: the actor walks at 149, pools at 144).
    assert abs(m["posture_gait"]["knee_gap_deg"]) < 6.0
    assert abs(m["posture"]["knee_deg"] - src["knee_deg"]) < 8.0
    assert abs(m["posture"]["planted_toe_cm"] - src["planted_toe_cm"]) < 1.0
    assert m["posture"]["outside_source"] < 0.2
    # 1st-99th percentile bounds on two figures: 2-4 % of the source's own frames fall outside.
    assert 0.015 < src["outside_source"] < 0.045
    assert src == source_posture(jlpm_db)["figures"]


def test_a_raised_floor_shows_in_planted_toe_height(jlpm_db, walk_rest):
    rec, m = walk_rest
    lifted = dict(rec, toe_positions=rec["toe_positions"] + [0.0, 0.05, 0.0])
    assert appearance_metrics(jlpm_db, lifted)["posture"]["planted_toe_cm"] == pytest.approx(
        m["posture"]["planted_toe_cm"] + 5.0, abs=0.01)


def test_a_scripted_rest_of_5_s_is_one_idle_entry(walk_rest, jlpm_db):
    rec, m = walk_rest
    assert len(m["idle"]) == 1
    idle = m["idle"][0]
    assert set(idle) == {"settle_s", "alive_cm_s", "shortest_loop_s"}
    assert 0.1 < idle["settle_s"] < 2.0
    speed = np.linalg.norm(rec["root_vel"][:, [0, 2]], axis=1)
    (a, b), = rest_stretches(rec["desired_vel"], rec["desired_yaw"], jlpm_db.fps)
    assert abs(a - 120) <= 1 and b == len(speed)        # from the release at 2 s to the end
    settled = a + int(round(idle["settle_s"] * jlpm_db.fps))
    assert speed[settled - 1] >= 0.1 and (speed[settled:] < 0.1).all()
    assert 0.0 < idle["alive_cm_s"] < 20.0
    assert idle["shortest_loop_s"] is None or idle["shortest_loop_s"] > 0.0
    # Rests under 4 s are not idle: the same run cut at 5.9 s (3.9 s of rest) has none.
    cut = {k: v[:354] for k, v in rec.items() if isinstance(v, np.ndarray) and len(v) == len(rec["root_vel"])}
    assert idle_figures(cut["desired_vel"], cut["desired_yaw"], cut["root_vel"], cut["root_pos"],
                        cut["posture_positions"], jlpm_db.fps) == []


def test_a_looping_pose_is_found_and_a_still_one_is_not(walk_rest):
    rec, _ = walk_rest
    pose = rec["posture_positions"][:60] - rec["root_pos"][:60, None]       # 1 s of walking poses
    loop = np.concatenate([pose[:23]] * 10)                                # a 23-frame cycle
    assert shortest_loop_frames(loop, 600) == 23
    still = np.repeat(pose[:1], 200, axis=0) + np.linspace(0.0, 0.01, 200)[:, None, None]  # drifting 1 cm
    assert shortest_loop_frames(still, 600) is None
    assert shortest_loop_frames(pose, 600) is None


def test_style_switches_are_counted_on_known_clips():
    stops = np.array([100, 200, 300, 400])
    tags = [["source:a"], ["source:a", "mirrored"], ["source:b", "elderly"], ["walk"]]
    styles = clip_styles(tags, ["elderly", "source:a", "source:b"])
    assert styles == [("source:a",), ("source:a",), ("elderly", "source:b"), ()]
    # 60 fps: clip 0 1 s, clip 1 (same style) 0.5 s, clip 2 1 s, clip 0 0.5 s, clip 3 1 s = 4 s.
    frames = np.r_[np.arange(0, 60), np.arange(100, 130), np.arange(200, 260), np.arange(30, 60),
                   np.arange(300, 360)]
    got = style_figures(frames, stops, styles, 60.0)
    assert got["switches_per_min"] == pytest.approx(3 / (4 / 60))
    assert got["seconds"] == {"source:a": 2.0, "elderly": 1.0, "source:b": 1.0, "none": 1.0}


def test_style_tags_default_set_stored_and_checked(bandai_dir, tmp_path):
    d2 = bandai_dir / "dataset-2"
    files = sorted(d2.glob("dataset-2_walk_normal_*.bvh"))[:1] + sorted(d2.glob("dataset-2_walk_elderly_*.bvh"))[:1]
    tags = {str(f): ["source:bandai-namco"] for f in files}
    db = build_database(files, BuildSettings(file_tags=tags), progress=False)
    assert db.style_tags == ["elderly", "normal", "source:bandai-namco"]
    assert db.summary()["style_tags"] == db.style_tags
    assert default_style_tags(["locomotion_take1.bvh", "dataset-1_walk_happy_001.bvh (mirrored)"],
                              [["source:jlpm22-locomotion"], ["walk", "happy"]]) == ["happy", "source:jlpm22-locomotion"]
    # A single-source database: its main actor is every clip.
    assert list(main_actor_ranges(db)) == list(range(len(db.range_starts)))
    chosen = build_database(files, BuildSettings(file_tags=tags, style_tags=["elderly"]), progress=False)
    path = tmp_path / "styled.npz"
    save_database(chosen, path)
    assert load_database(path).style_tags == ["elderly"]
    with pytest.raises(StyleError, match="'happy'.*elderly"):
        build_database(files, BuildSettings(file_tags=tags, style_tags=["happy"]), progress=False)
    # A file saved before style tags (and the stored source posture) existed: the defaults, measured again.
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    header = json.loads(arrays["header"].tobytes())
    del header["style_tags"]
    del header["meta"]["posture_source"]
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    older = tmp_path / "older.npz"
    with open(older, "wb") as f:
        np.savez(f, **arrays)
    old = load_database(older)
    assert old.style_tags == db.style_tags
    assert source_posture(old)["figures"] == source_posture(chosen)["figures"]


def test_the_actor_is_compared_at_the_same_gait(jlpm_db, walk_rest):
    """The jlpm22 actor bends the knees more running than walking and less walking backward or sideways
    (measured: 150 deg forward at 0.5-1 m/s, 161 sideways, 163 backward, 121 forward at 3-4 m/s), so
    posture_gait weighs the actor's per-gait figures by the output's gaits; the actor's own clips then
    sit at the actor's figure."""
    gaits = source_posture(jlpm_db)["gaits"]
    median = lambda b: gaits[b]["knee_deg"][len(gaits[b]["knee_deg"]) // 2]
    nd = len(GAIT_DIRECTIONS)
    walk_fwd, walk_side, walk_back, run_fwd = 1, 2, 3, 1 + 5 * nd       # 0.5-1 m/s; 3-4 m/s forward
    assert median(walk_side) > median(walk_fwd) + 5.0 and median(walk_back) > median(walk_fwd) + 5.0
    assert median(run_fwd) < median(walk_fwd) - 15.0
    # A clip of the actor against the actor, per gait: gap ~0, few frames outside.
    start = int(jlpm_db.range_starts[0])
    gp, _ = jlpm_db.global_transforms(slice(start, start + 3000))
    vel = np.diff(gp[:, 0], axis=0, prepend=gp[:1, 0]) * jlpm_db.fps
    own = gait_figures(gp[:, posture_joints(jlpm_db.roles)], vel, gaits)
    assert abs(own["knee_gap_deg"]) < 2.0 and own["outside_source"] < 0.1, own     # measured 0.005, 0.063
    # A run on the actor's clips (walk, rest): the same figure in metrics.json, close to the actor's.
    _, m = walk_rest
    g = m["posture_gait"]
    assert set(g) == {"knee_deg", "knee_actor_deg", "knee_gap_deg", "outside_source"}
    assert g["knee_deg"] == m["posture"]["knee_deg"] and abs(g["knee_gap_deg"]) < 6.0 and g["outside_source"] < 0.2


def test_tune_may_not_trade_the_look_away(walk_rest):
    from motionmatch.offline.tuning import SCENARIO_LOOK, constraints, look_summary, scenario_summary
    _, look = walk_rest
    m = {**look, "responsiveness_s": 0.3, "trajectory_error_cm": {"mean": 3.0}, "foot_sliding_cm_s": 2.0,
         "foot_sliding_source_cm_s": 2.0, "pops": {"ratio": 1.0}}
    base = scenario_summary(m)
    assert base["knee_gap_deg"] == look_summary(m)["knee_gap_deg"] < 6.0 and base["idle_settle_s"] > 0
    obj = {"trajectory_cm": 3.0, "sliding_ratio": 1.0, "pops_ratio": 1.0, "tracking_miss": 0.1}

    def trial(**changes):
        return constraints(obj, {"walk_rest": {**base, **changes}}, obj, {"walk_rest": base})

    assert all(v <= 0 for v in trial().values())
    # Within the tolerance: feasible; beyond it on any one figure: infeasible on that figure only.
    worse = {"knee_gap_deg": base["knee_gap_deg"] + 8.0, "toe_gap_cm": base["toe_gap_cm"] + 5.0,
             "outside_source": base["outside_source"] + 0.1, "style_switches_per_min": 60.0,
             "idle_settle_s": base["idle_settle_s"] + 0.5, "idle_alive_cm_s": base["idle_alive_cm_s"] - 2.0,
             "idle_loop_s": 0.3}
    for k, v in worse.items():
        c = trial(**{k: v})
        assert c[f"{k}_per_scenario"] > 0 and all(c[j] <= 0 for j in c if j != f"{k}_per_scenario"), k
    for k, tol in SCENARIO_LOOK.items():
        assert all(v <= 0 for v in trial(**{k: base[k] + 0.9 * tol}).values()), k
