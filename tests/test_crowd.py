"""The batched runtime: a crowd of one reproduces the recorded single character; agents are
independent; per-agent tag filters hold."""
from __future__ import annotations

import numpy as np
import pytest

from runtime_reference import REFERENCE, run, scenarios


@pytest.mark.parametrize("name", list(scenarios()))
def test_reproduces_recorded_character(jlpm_db, name):
    ref = np.load(REFERENCE)
    scenario, terrain = scenarios()[name]
    frames, pos = run(jlpm_db, scenario, terrain)
    np.testing.assert_array_equal(frames, ref[f"{name}_frames"])
    err = np.abs(pos - ref[f"{name}_positions"]).max()
    assert err < 1e-4, f"{name}: joint positions differ by {err:.2e} m"


def _drive(crowd, ticks, seed=0):
    """Step a crowd with per-agent random sticks held for 1 s; returns agent 0's joints per tick."""
    rng = np.random.default_rng(seed)
    n = crowd.n
    out = []
    for k in range(ticks):
        if k % 60 == 0:
            ang = rng.uniform(-np.pi, np.pi, n)
            move = np.stack([np.sin(ang), np.cos(ang)], 1)
            move[0] = (0.6, 0.8)          # agent 0 always gets the same input
            run = rng.random(n) < 0.3
            run[0] = k >= 120
        crowd.step(move, run, np.zeros(n, bool), np.full((n, 2), np.nan))
        out.append(crowd.global_positions[0].copy())
    return np.stack(out)


def test_agents_are_independent(jlpm_db):
    from motionmatch.runtime.crowd import Crowd
    alone = _drive(Crowd(jlpm_db, 1), 240)
    crowd = Crowd(jlpm_db, 6)
    for i in range(1, 6):
        crowd.reset_agent(i, (0.3 * i, 0.0, 0.0), yaw=0.5 * i)   # close by: no avoidance, no effect
    among = _drive(crowd, 240, seed=1)
    assert np.array_equal(alone, among)
    assert np.ptp(crowd.root_positions[:, 0]) > 0.5                # the others did move their own way


def test_crowd_of_one_equals_character(jlpm_db):
    from motionmatch.runtime.character import Character
    from motionmatch.runtime.controller import GamepadInput
    from motionmatch.runtime.crowd import Crowd
    ch, crowd = Character(jlpm_db), Crowd(jlpm_db, 1)
    for k in range(300):
        move = (0.0, 1.0) if k < 150 else (1.0, 0.0)
        ch.step(GamepadInput(move=move, run=k > 200))
        crowd.step([move], [k > 200], [False], [(np.nan, np.nan)])
        assert ch.frame == crowd.frame[0]
    assert np.array_equal(ch.global_positions, crowd.global_positions[0])


def test_per_agent_tag_filters_hold(bandai_walk_db):
    from motionmatch.runtime.crowd import Crowd
    from motionmatch.runtime.settings import CharacterSettings
    db = bandai_walk_db
    filters = ["exhausted", "normal & walk", None, "run"]
    crowd = Crowd(db, 4, [CharacterSettings(tag_filter=f) for f in filters])
    seen = [set() for _ in filters]
    for k in range(600):
        crowd.step(np.tile([0.0, 1.0], (4, 1)) if k < 300 else np.tile([1.0, 0.0], (4, 1)), np.zeros(4, bool),
                   np.zeros(4, bool), np.full((4, 2), np.nan))
        for i in range(4):
            seen[i].add(db.range_names[db.range_of(int(crowd.frame[i]))])
    assert all("exhausted" in name for name in seen[0])
    assert all("walk_normal" in name for name in seen[1])
    assert all("run" in name for name in seen[3])
    assert np.isfinite(crowd.global_positions).all()
    # Switching one agent's filter leaves the others' settings alone.
    crowd.set_tag_filter(1, "exhausted")
    assert crowd.settings[1].tag_filter == "exhausted" and crowd.settings[0].tag_filter == "exhausted"
    assert crowd.settings[3].tag_filter == "run"


def _frozen_run_s(db, seconds=60.0, seed=3):
    """Longest time (s) a character driven by random input stays on a clip's last frame."""
    from motionmatch.runtime.character import Character
    from motionmatch.scenario import random_scenario
    ch = Character(db)
    ch.set_driver(random_scenario(seconds, seed=seed).make_driver())
    last = np.asarray(db.range_stops) - 1
    run = longest = 0
    for _ in range(int(seconds * db.fps)):
        ch.step(None, 1.0 / db.fps)
        run = run + 1 if ch.frame in last else 0
        longest = max(longest, run)
    return longest / db.fps


def test_no_frozen_frames_on_short_clips(bandai_walk_db):
    assert _frozen_run_s(bandai_walk_db) <= 1.0 / 60.0


def test_play_clip_debug_and_inspection_poses(jlpm_db):
    from motionmatch.runtime.character import Character
    from motionmatch.runtime.controller import GamepadInput
    ch = Character(jlpm_db)
    assert ch.debug()["search"] is None or ch.debug()["search"]["frame"] >= -1
    for _ in range(30):
        ch.step(GamepadInput(move=(0.0, 1.0)))
    d = ch.debug()["search"]
    assert len(d["query"]) == jlpm_db.features.raw.shape[1] and d["frame"] >= 0 and d["t"] >= 0.0
    assert set(d) == {"query", "frame", "cost", "current", "continue_cost", "bias", "tag_filter", "jumped", "t"}
    assert ch.pose_before_inertialization().shape == ch.pose_before_touchups().shape == (jlpm_db.num_joints, 3)
    # Play a clip: it plays on without searches (stick pushed elsewhere) until play_clip(None).
    start = int(jlpm_db.range_starts[1])
    ch.play_clip(1, 100)
    assert ch.frame == start + 100
    for k in range(60):
        ch.step(GamepadInput(move=(-1.0, 0.0), run=True))
        assert ch.frame == start + 101 + k
    ch.play_clip(None)
    ch.step(GamepadInput(move=(-1.0, 0.0), run=True))
    assert ch.debug()["search"]["t"] == pytest.approx(ch.time - 1 / 60)
