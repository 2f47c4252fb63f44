"""The runtime character on the real default database: following input, determinism,
inertialization, style filter, boundedness."""
import math

import numpy as np
import pytest

from motionmatch.runtime.character import Character, CharacterSettings
from motionmatch.runtime.controller import GamepadInput
from motionmatch.offline.scenario import parse_scenario, random_scenario
from motionmatch.search import TagExpressionError
from motionmatch.offline.synth import change_frames, run_scenario
from motionmatch.motion.metrics import compute_metrics, source_foot_sliding_cm_s

WALK_TURN = {"duration": 8.0, "inputs": [
    {"t": 0.0, "move": [0.0, 1.0], "run": False, "strafe": False, "look": None},
    {"t": 4.0, "move": [1.0, 0.0], "run": False, "strafe": False, "look": None}]}


def test_walks_forward_at_a_plausible_speed(jlpm_db):
    ch = Character(jlpm_db)
    for _ in range(180):
        ch.step(GamepadInput(move=(0.0, 1.0)))
    z0 = ch.root_pos[2]
    for _ in range(120):
        ch.step(GamepadInput(move=(0.0, 1.0)))
    speed = (ch.root_pos[2] - z0) / 2.0
    assert 0.9 < speed < 1.8, speed
    assert abs(ch.root_pos[0]) < 0.3
    assert abs(math.degrees(ch.root_yaw)) < 10
    # The pose is a person: head above hips above feet.
    g = ch.global_positions
    r = jlpm_db.roles
    assert g[r["head"], 1] > g[r["hips"], 1] > g[r["left_foot"], 1]


def test_turns_and_stops(jlpm_db):
    ch = Character(jlpm_db)
    for _ in range(120):
        ch.step(GamepadInput(move=(0.0, 1.0)))
    for _ in range(150):
        ch.step(GamepadInput(move=(1.0, 0.0)))
    assert abs(math.degrees(ch.root_yaw) - 90.0) < 20.0
    for _ in range(120):
        ch.step(GamepadInput())
    assert np.linalg.norm(ch.root_velocity) < 0.2


def test_scenario_metrics_within_loose_bounds(jlpm_db):
    scen = parse_scenario(WALK_TURN)
    rec = run_scenario(jlpm_db, scen)
    m = compute_metrics(rec, jlpm_db.fps, source_foot_sliding_cm_s(jlpm_db), change_frames(scen, jlpm_db.fps))
    assert m["frames"] == 480 and m["nan_frames"] == 0
    assert m["trajectory_error_cm"]["mean"] < 20 and m["trajectory_error_cm"]["p95"] < 35
    assert m["responsiveness_s"] is not None and m["responsiveness_s"] < 0.8
    assert m["foot_sliding_cm_s"] < 3.0 * m["foot_sliding_source_cm_s"]
    assert 0 < m["transitions_per_s"] < 10


def test_same_scenario_same_output(jlpm_db):
    scen = parse_scenario(WALK_TURN)
    a = run_scenario(jlpm_db, scen)
    b = run_scenario(jlpm_db, scen)
    assert np.array_equal(a["frames"], b["frames"])
    assert np.array_equal(a["local_rot"], b["local_rot"])
    assert np.array_equal(a["root_pos"], b["root_pos"])


def _transition_jump(rec):
    """Mean, over transition frames, of the largest root-relative joint acceleration (m/s^2)."""
    g = rec["global_positions"] - rec["root_pos"][:, None]
    acc = np.linalg.norm(np.diff(g, 2, axis=0), axis=2).max(axis=1) * 60 ** 2
    tf = rec["transition_frames"]
    tf = tf[(tf >= 1) & (tf < len(acc))]
    return acc[tf - 1].mean(), len(tf)


def test_inertialization_hides_transition_jumps(jlpm_db):
    scen = random_scenario(20.0, seed=3)
    on = run_scenario(jlpm_db, scen, CharacterSettings(inertialization="spring"))
    off = run_scenario(jlpm_db, scen, CharacterSettings(inertialization="off"))
    quintic = run_scenario(jlpm_db, scen, CharacterSettings(inertialization="quintic"))
    j_on, n_on = _transition_jump(on)
    j_off, n_off = _transition_jump(off)
    j_q, n_q = _transition_jump(quintic)
    assert n_on > 10 and n_off > 10 and n_q > 10
    assert j_off > 2.0 * j_on, (j_off, j_on)
    assert j_off > 2.0 * j_q, (j_off, j_q)


def test_long_random_run_stays_bounded(jlpm_db):
    scen = random_scenario(60.0, seed=11)
    rec = run_scenario(jlpm_db, scen)
    assert np.isfinite(rec["global_positions"]).all()
    d = np.linalg.norm((rec["root_pos"] - rec["sim_pos"])[:, [0, 2]], axis=1)
    assert d.max() <= CharacterSettings().clamp_radius + 1e-6


def test_style_filter_switches_at_runtime(bandai_walk_db):
    db = bandai_walk_db
    ch = Character(db)
    for _ in range(60):
        ch.step(GamepadInput(move=(0.0, 1.0)))
    ch.set_tag_filter("exhausted")
    seen = set()
    for _ in range(120):
        ch.step(GamepadInput(move=(0.0, 1.0)))
        seen.add(db.range_names[db.range_of(ch.frame)])
    assert seen and all("exhausted" in n for n in seen)
    assert np.isfinite(ch.global_positions).all()
    with pytest.raises(TagExpressionError):
        ch.set_tag_filter("exhaustd")


def test_characters_share_database_work_but_not_settings(jlpm_db):
    a = Character(jlpm_db)
    b = Character(jlpm_db, CharacterSettings(weights={"trajectory_position": 3.0}))
    assert a.vel is b.vel                                  # per-database arrays computed once
    assert a.searcher is not b.searcher                   # different weights, different normalization
    c = Character(jlpm_db)
    assert c.searcher is a.searcher
    before = jlpm_db.features.normalized.copy()
    inp = GamepadInput(move=(0.7, 0.7))
    for _ in range(120):
        a.step(inp)
        b.step(inp)
    # b's weights never leak into a's queries nor into the database's own normalization.
    ref = Character(jlpm_db)
    for _ in range(120):
        ref.step(inp)
    assert np.array_equal(ref.global_positions, a.global_positions)
    assert np.array_equal(jlpm_db.features.normalized, before)
    hv = a.slices["trajectory_position"]
    assert np.allclose(b.features_norm[:, hv], 3.0 * a.features_norm[:, hv], rtol=1e-5, atol=1e-5)
