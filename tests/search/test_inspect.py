"""Search inspector (top-k candidates with per-channel costs) and the character's debugging members:
last search record, ghosts (pose before inertialization / touch-ups), play_clip."""
from __future__ import annotations

import numpy as np
import pytest

from motionmatch.runtime.character import Character, CharacterSettings
from motionmatch.runtime.controller import GamepadInput
from motionmatch.search import Searcher, frame_mask
from motionmatch.search.inspect import inspect_search
from motionmatch.offline.synth import recorded_queries


@pytest.fixture(scope="module")
def walked(jlpm_db):
    """A character after 2 s of walking then a sharp turn (so the last search jumped)."""
    ch = Character(jlpm_db, CharacterSettings())
    for k in range(150):
        ch.step(GamepadInput(move=(0.0, 1.0) if k < 120 else (1.0, 0.0), run=k >= 120))
    return ch


def test_top_k_agrees_with_the_search_on_recorded_queries(jlpm_db):
    ch = Character(jlpm_db, CharacterSettings())
    feats = ch.searcher.features
    ft = np.ascontiguousarray(feats.T)
    queries, current = recorded_queries(jlpm_db, 30, seed=3)
    mask = frame_mask("!mirrored", jlpm_db.range_tags, jlpm_db.range_starts, jlpm_db.range_stops,
                      jlpm_db.num_frames)
    brute = Searcher(feats, jlpm_db.range_starts, jlpm_db.range_stops, backend="brute")
    jumps = 0
    for i, (q, cur) in enumerate(zip(queries, current)):
        bias = (0.0, 0.1, 2.0)[i % 3]
        m = mask if i % 2 else None
        frame, cost = brute.search(q, current=int(cur), bias=bias, mask=m)
        out = inspect_search(feats, q, ch.slices, jlpm_db.range_starts, jlpm_db.range_stops, k=8,
                             current=int(cur), bias=bias, mask=m, features_t=ft)
        assert out["best"] == frame
        assert out["best_cost"] == pytest.approx(cost, rel=1e-6)
        cands = out["candidates"]
        assert len(cands) == 8
        costs = [c["cost"] for c in cands]
        assert costs == sorted(costs)
        # Per-channel costs add up to the total; no candidate is the playing frame.
        for c in cands:
            assert sum(c["channels"].values()) == pytest.approx(c["cost"], rel=1e-4, abs=1e-5)
            assert c["frame"] != cur
            if m is not None:
                assert m[c["frame"]]
        assert out["continue"]["frame"] == cur
        jumps += out["jumped"]
        # The best other frame is the first candidate; nothing searchable beats it.
        other = brute.search(q, current=int(cur), skip=0, bias=-1e9, mask=m)[0]
        assert cands[0]["frame"] == other
    assert 0 < jumps < len(queries)


def test_top_k_skip_window_and_empty():
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(200, 4)).astype(np.float32)
    q = feats[50] + 0.01
    slices = {"a": slice(0, 2), "b": slice(2, 4)}
    out = inspect_search(feats, q, slices, [0], [200], k=5, current=50, skip=3, end_exclude=0)
    assert all(abs(c["frame"] - 50) > 3 for c in out["candidates"])
    assert out["best"] == 50 and not out["jumped"]        # the continuing frame is the nearest
    none = inspect_search(feats, q, slices, [0], [200], k=5, mask=np.zeros(200, bool), end_exclude=0)
    assert none["best"] == -1 and none["candidates"] == [] and none["continue"] is None
    with pytest.raises(ValueError, match="shape"):
        inspect_search(feats, q[:3], slices, [0], [200])


def test_debug_reports_the_last_search(walked, jlpm_db):
    s = walked.debug()["search"]
    assert s is not None
    assert len(s["query"]) == jlpm_db.features.raw.shape[1]
    assert 0 <= s["frame"] < jlpm_db.num_frames and s["current"] >= 0
    assert s["bias"] == walked.settings.bias and s["tag_filter"] is None
    assert 0 < s["t"] <= walked.time
    # The recorded query reproduces the recorded answer through the inspector (the search leaves out the
    # frames just around the playing one).
    out = inspect_search(walked.searcher.features, np.array(s["query"], np.float32), walked.slices,
                         jlpm_db.range_starts, jlpm_db.range_stops, current=s["current"], bias=s["bias"],
                         skip=walked.settings.no_rewind_frames)
    assert out["best"] == s["frame"]
    assert s["cost"] == pytest.approx(out["best_cost"], rel=1e-6)
    if s["continue_cost"] is not None:
        assert s["continue_cost"] == pytest.approx(out["continue"]["cost"], rel=1e-6)
    assert Character(jlpm_db).debug()["search"] is None      # no search before the first step


def test_ghost_poses(walked, jlpm_db):
    before_ti = walked.pose_before_touchups()
    raw = walked.pose_before_inertialization()
    out = walked.global_positions
    J = jlpm_db.num_joints
    assert raw.shape == before_ti.shape == (J, 3)
    assert np.isfinite(raw).all() and np.isfinite(before_ti).all()
    # Same body in the same place (within a body length), but touch-ups and inertialization change it.
    assert np.abs(raw[0, [0, 2]] - out[0, [0, 2]]).max() < 1e-6     # the output is float32
    # The hips' height touch-up moves the root up or down (keeping the played legs' extension), at most MAX_LIFT
    # plus MAX_DROP (a leg out of reach); here, turning into a run, it is a few millimetres either way.
    assert abs(raw[0, 1] - out[0, 1]) < 0.02
    assert np.linalg.norm(raw.mean(0) - out.mean(0)) < 0.5
    toes = [jlpm_db.roles["left_toe"], jlpm_db.roles["right_toe"]]
    ch = Character(jlpm_db, CharacterSettings())
    moved = 0.0
    for k in range(90):
        ch.step(GamepadInput(move=(0.0, 1.0)))
        moved = max(moved, float(np.abs(ch.pose_before_touchups()[toes] - ch.global_positions[toes]).max()))
    assert moved > 1e-3      # foot locking moved a toe
    ch.settings.ik = False         # no locking, stride IK or terrain: nothing touches the pose up
    ch.apply_settings()
    ch.step(GamepadInput(move=(0.0, 1.0)))
    np.testing.assert_allclose(ch.pose_before_touchups(), ch.global_positions)


def test_play_clip_plays_through_without_searching(jlpm_db):
    ch = Character(jlpm_db, CharacterSettings())
    for _ in range(10):
        ch.step(GamepadInput())
    r = 1
    start, stop = int(jlpm_db.range_starts[r]), int(jlpm_db.range_stops[r])
    ch.play_clip(r, 363)
    assert ch.frame == start + 363
    for k in range(60):
        ch.step(GamepadInput(move=(1.0, 0.0), run=True))    # input would make the search jump
        assert ch.frame == start + 364 + k
    ch.play_clip(None)
    ch.step(GamepadInput(move=(1.0, 0.0), run=True))
    assert ch.debug()["search"]["t"] == pytest.approx(ch.time - 1 / 60)
    with pytest.raises(ValueError, match="range_index 4 outside"):
        ch.play_clip(len(jlpm_db.range_starts))
    with pytest.raises(ValueError, match="offset"):
        ch.play_clip(0, stop - start)
    # Near its end the clip hands back to the search.
    ch.play_clip(0, int(jlpm_db.range_stops[0] - jlpm_db.range_starts[0]) - 5)
    for _ in range(6):
        ch.step(GamepadInput(move=(0.0, 1.0)))
    assert ch.debug()["search"]["t"] > ch.time - 0.1
