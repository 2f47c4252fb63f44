"""Backward walking on the mixed default database: backward requests track the asked velocity, and the
twist limits are live settings; backward diagonals and a walk from standing answer the stick in time; a straight
run plays the straight runs the set holds, a forward walk the
main actor."""
from pathlib import Path

import numpy as np
import pytest

from motionmatch.posedb.database import build_default_database, load_database
from motionmatch.motion.metrics import compute_metrics, velocity_ok
from motionmatch.runtime import settings as S
from motionmatch.runtime.character import CharacterSettings
from motionmatch.offline.scenario import load_scenario
from motionmatch.offline.synth import appearance_metrics, change_frames, run_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
MOCAP = Path(__file__).resolve().parents[2].parent / "shared" / "mocap"


@pytest.fixture(scope="module")
def mixed_default(tmp_path_factory):
    """The mixed default database (datapaths.MIXED_DEFAULT_SETS), built from ../shared/mocap."""
    if not (MOCAP / "bandai-namco").is_dir():
        pytest.fail(f"test data missing: {MOCAP} (the tests need ../shared/mocap beside the project)")
    path = tmp_path_factory.mktemp("mixed") / "mixed.npz"
    return load_database(build_default_database(path, data=MOCAP, progress=False, mixed=True))


def _backward_tracking(db, name):
    scen = load_scenario(SCENARIOS / name)
    rec = run_scenario(db, scen)
    return compute_metrics(rec, db.fps, 0.0, change_frames(scen, db.fps))["backward_tracking"]


def test_backward_requests_track_on_the_mixed_default(mixed_default):
    """Backward and back-diagonal requests (from standing, after forward walking, while strafing a box):
    the root velocity within 15 degrees and 20 % of the asked >= 55 % of held time, pooled over the
    held inputs. Stops after backward walking are measured but not held to it (no capture stops from
    backward walking; see docs/mixed_sources.md)."""
    fractions, held = 0.0, 0
    # (scenario, backward held inputs, stops right after one): strafe_box stops after a forward diagonal.
    for name, backward, stops in (("walk_backward.json", 5, 1), ("warp_backward.json", 4, 1),
                                  ("strafe_box.json", 3, 0)):
        t = _backward_tracking(mixed_default, name)
        assert t["travel"]["held_inputs"] == backward, name
        assert (t["stops"] or {"held_inputs": 0})["held_inputs"] == stops, name
        fractions += t["travel"]["mean"] * backward
        held += backward
    # One person's backward walk (Bandai-Namco's `normal`, ~0.9 m/s; the 14 styled ones are gone since the
    # default database holds no exaggerated style) does not answer the half-stick (0.45 m/s) requests:
    # 0.59 measured; the slow styled clips answered them (docs/look.md).
    assert fractions / held >= 0.55, fractions / held


def _seconds_by_source(db, rec) -> dict:
    """Seconds the run played of each `source:` tag, the Bandai-Namco runs apart."""
    clip = np.searchsorted(db.range_stops, np.asarray(rec["frames"]), side="right")
    out = {}
    for c in clip:
        name = db.range_names[c]
        key = "bandai-run" if "_run_normal_" in name else next(t for t in db.range_tags[c] if t.startswith("source:"))
        out[key] = out.get(key, 0.0) + 1.0 / db.fps
    return out


def test_straight_run_plays_straight_runs_and_a_walk_the_main_actor(mixed_default):
    """The jlpm22 actor runs in curves: without Bandai-Namco's `normal` straight runs a straight run looped
    over the 8 frames of a sprint start (24 % of the frames outside the actor's posture at the gait, pops
    1.05 of the source's p99). Measured with them: run plays them 10 of 10 s, 1 % outside; press W plays the
    main actor 12 of 12 s (docs/look.md)."""
    db = mixed_default
    run = run_scenario(db, load_scenario(SCENARIOS / "run.json"))
    seconds = _seconds_by_source(db, run)
    assert seconds.get("bandai-run", 0.0) >= 0.8 * sum(seconds.values()), seconds
    assert appearance_metrics(db, run)["posture_gait"]["outside_source"] <= 0.08
    walk = run_scenario(db, load_scenario(SCENARIOS / "press_w.json"))
    seconds = _seconds_by_source(db, walk)
    assert seconds.get("source:jlpm22-locomotion", 0.0) >= 0.9 * sum(seconds.values()), seconds


def test_twist_limits_are_flat_settings_packed_for_the_runtime():
    cs = CharacterSettings()
    assert (cs.warp_hip_twist_limit_deg, cs.warp_spine_twist_limit_deg) == (50.0, 35.0)
    cs.warp_hip_twist_limit_deg, cs.warp_spine_twist_limit_deg = 30.0, 20.0
    row = cs.packed()
    assert row[S.W_HIP_LIMIT] == pytest.approx(0.5236, abs=1e-4)
    assert row[S.W_SPINE_LIMIT] == pytest.approx(0.3491, abs=1e-4)


def _answer_s(rec, f0, f1, fps) -> float:
    """Seconds from frame f0 until the root velocity is within 15 degrees and 20 % of the velocity asked
    just after f0 (metrics.responsiveness_s for one input change; f1 - f0 frames when never met)."""
    want = np.repeat(rec["desired_vel"][f0 + 1][None], f1 - f0, axis=0)
    hit = np.flatnonzero(velocity_ok(want, rec["root_vel"][f0:f1]))
    return (hit[0] if len(hit) else f1 - f0) / fps


def test_backward_diagonals_turn_the_root(mixed_default):
    """No clip turns while walking backward: between the backward diagonals the root turns only through the
    adjustment, which at adjustment_max_ratio (0.42) took 1.12 s to meet back-left -> back-right
    (walk_backward at 13 s, warp_backward at 10 s the other way). adjustment_backward_turn_ratio lets it turn
    faster while walking backward, and adjustment_backward_rotation_halflife (0.1 s against the 0.19 of
    adjustment_rotation_halflife) sooner. Measured on the four backward-diagonal changes: mean 0.72 s at 0.42,
    0.50 s at the turn ratio 6, 0.32 s with the backward halflife 0.1 (docs/look.md)."""
    db = mixed_default
    times = {}
    for name, at in (("walk_backward.json", (11.0, 13.0)), ("warp_backward.json", (8.0, 10.0))):
        scen = load_scenario(SCENARIOS / name)
        rec = run_scenario(db, scen)
        frames = change_frames(scen, db.fps) + [len(rec["root_vel"])]
        for t in at:
            k = frames.index(int(round(t * db.fps)))
            times[(name, t)] = _answer_s(rec, frames[k], frames[k + 1], db.fps)
    assert np.mean(list(times.values())) <= 0.40, times
    cs = CharacterSettings()
    assert cs.adjustment_backward_turn_ratio > cs.adjustment_max_ratio
    assert cs.adjustment_backward_rotation_halflife < cs.adjustment_rotation_halflife


def test_walk_from_standing_meets_the_stick(mixed_default):
    """A walk from standing plays a captured walk start (take2 from 0.3 m/s, 1.04 m/s after 0.48 s) while the
    simulation reaches the walk in 0.18 s; the stride may lengthen up to stride_max (1.6) until the clip has
    caught up, and lengthens on stride_up_halflife (0.08 s) while the stick asks for more speed than the simulation
    has. Measured on press W (walk.json's start): 0.333 s at stride_max 1.2, 0.233 at 1.6, 0.217 with
    stride_up_halflife 0.08 (speed_halflife's 0.1 before; docs/look.md)."""
    db = mixed_default
    scen = load_scenario(SCENARIOS / "walk.json")
    rec = run_scenario(db, scen)
    frames = change_frames(scen, db.fps) + [len(rec["root_vel"])]
    assert frames[0] == 0
    assert _answer_s(rec, frames[0], frames[1], db.fps) <= 0.225
