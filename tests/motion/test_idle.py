"""Standing still after a walk: the idle hold (runtime/matching.py plan_agent, still_stretch_ends) plays
the actor's own still stretches instead of hopping between similar standing poses."""
import numpy as np

from motionmatch.runtime.frame_velocities import database_velocities
from motionmatch.runtime.matching import STILL_MARGIN_S, still_stretch_ends
from motionmatch.offline.scenario import parse_scenario
from motionmatch.offline.synth import run_scenario

WALK_THEN_STAND = {"duration": 9.0, "inputs": [
    {"t": 0.0, "move": [0.0, 1.0], "run": False, "strafe": False, "look": None},
    {"t": 2.5, "move": [0.0, 0.0], "run": False, "strafe": False, "look": None}]}


def test_still_stretches_end_before_the_clip_moves(jlpm_db):
    _, _, rvel, rang = database_velocities(jlpm_db)
    ends = still_stretch_ends(rvel, rang, jlpm_db.range_stops, jlpm_db.fps)
    margin = int(round(STILL_MARGIN_S * jlpm_db.fps))
    speed = np.hypot(rvel[:, 0], rvel[:, 2])
    held = np.flatnonzero(np.arange(len(ends)) < ends)
    assert len(held) > 2 * jlpm_db.fps          # the takes stand still for seconds
    for f in held[::97]:
        # every frame up to the stretch's end (plus the margin) stands: nothing moves on a held frame
        assert (speed[f:ends[f] + margin] < 0.15).all(), f
    assert (ends <= np.repeat(jlpm_db.range_stops, np.diff(np.r_[0, jlpm_db.range_stops])) - margin).all()


def test_standing_after_a_walk_holds_still_stretches_and_breathes(jlpm_db):
    rec = run_scenario(jlpm_db, parse_scenario(WALK_THEN_STAND))
    fps = jlpm_db.fps
    rest = int(3.0 * fps)                           # from 0.5 s after the release
    transitions = np.asarray(rec["transition_frames"])
    resting = transitions[transitions >= rest]
    # each still stretch plays 1-2 s, and the idle search lands only on one with 1 s or more ahead
    assert len(resting) <= (len(rec["frames"]) - rest) / fps / 2.0, resting
    speed = np.hypot(rec["root_vel"][rest:, 0], rec["root_vel"][rest:, 2])
    assert (speed < 0.1).all(), speed.max()
    # alive: head and hands move relative to the hips (the actor breathes and shifts weight)
    gp = rec["global_positions"][rest:]
    r = jlpm_db.roles
    rel = gp[:, [r["head"], r["left_hand"], r["right_hand"]]] - gp[:, [r["hips"]]]
    rms = np.sqrt((np.linalg.norm(np.diff(rel, axis=0), axis=-1) ** 2).mean()) * fps * 100
    assert rms > 1.0, rms


def test_idle_search_skips_the_frozen_take_starts(jlpm_db):
    """The takes open with the actor standing before the first step, head and hands against the hips at
    0.7-0.9 cm/s (take1 frames 0-105, take2 0-120): an idle hold there looked frozen (strafe_right's rest on
    the mixed default: take2 0-106 for 2 s, 0.8 cm/s). The idle search lands only on still stretches that
    move IDLE_MIN_ALIVE_CM_S or more (the others 5.8-6.6 cm/s); take starts were half the holdable frames."""
    from motionmatch.runtime.crowd import Crowd
    from motionmatch.runtime.character import CharacterSettings
    from motionmatch.runtime.matching import IDLE_MIN_HOLD_S, lively_holds

    crowd = Crowd(jlpm_db, 1, CharacterSettings())
    still_to = crowd.still_to
    any_hold = still_to - np.arange(jlpm_db.num_frames) >= IDLE_MIN_HOLD_S * jlpm_db.fps
    lively = lively_holds(jlpm_db, any_hold, still_to)
    assert (crowd.holdable == lively).all()
    assert lively.any() and not (lively & ~any_hold).any()
    starts = np.zeros(jlpm_db.num_frames, dtype=bool)
    for a in jlpm_db.range_starts:
        starts[a:a + int(2 * jlpm_db.fps)] = True
    assert (any_hold & starts).sum() > 0.4 * any_hold.sum()      # without the test: the take starts
    assert not (lively & starts).any()
