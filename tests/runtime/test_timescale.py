"""Timescale by predicted error: the predicted speeds on both sides and the rate they give."""
import numpy as np
import pytest

from motionmatch.runtime.character import Character, CharacterSettings
from motionmatch.runtime.controller import GamepadInput, new_state, ControllerSettings, GOAL_VX, GOAL_VZ, VX, VZ
from motionmatch.runtime.timescale import desired_future_speed, future_speeds
from motionmatch.runtime.warping import WarpSettings


def test_future_speeds_follow_the_path_and_stop_at_the_clip_end():
    # Two clips: 100 frames walking a circle at 1.5 m/s (the path counts, not the chord), then 50 frames
    # speeding up from 0 to 2 m/s.
    ang = np.linspace(0, 2 * np.pi, 100)
    v1 = np.stack([1.5 * np.cos(ang), np.zeros(100), 1.5 * np.sin(ang)], 1)
    v2 = np.zeros((50, 3))
    v2[:, 2] = np.linspace(0.0, 2.0, 50)
    speeds, horizons = future_speeds(np.concatenate([v1, v2]), np.array([100, 150]), 20, 60.0)
    np.testing.assert_allclose(speeds[:80], 1.5, rtol=1e-6)
    np.testing.assert_allclose(horizons[:80], 20 / 60, rtol=1e-6)
    # Close to a clip's end only what is left counts; its last frame predicts nothing.
    assert horizons[95] == pytest.approx(4 / 60) and speeds[99] == 0.0 and horizons[99] == 0.0
    # Accelerating: the predicted average is ahead of the speed now.
    assert speeds[110] == pytest.approx(v2[10:30, 2].mean(), rel=1e-5) and speeds[110] > v2[10, 2]


def test_desired_future_speed_anticipates_the_spring():
    st = new_state(1, ControllerSettings())
    st[0, VZ], st[0, GOAL_VZ] = 1.0, 1.0
    assert desired_future_speed(st, 0, 0.5) == pytest.approx(1.0)
    st[0, GOAL_VZ], st[0, GOAL_VX] = 0.0, 0.0            # stopping: the average over the next 0.5 s is lower
    assert 0.05 < desired_future_speed(st, 0, 0.5) < 0.6


def test_timescale_rate_follows_the_predicted_ratio_within_bounds(jlpm_db):
    warp = WarpSettings(play_rate=True, stride=False, timescale=True, rate_min=0.8, rate_max=1.2)
    ch = Character(jlpm_db, CharacterSettings(warp=warp))
    speeds, horizons = ch.crowd.future_speeds
    rates, targets = [], []
    for k in range(360):
        ch.step(GamepadInput(move=(0.0, 1.0) if k < 240 else (0.0, 0.4)))
        f = ch.crowd.frame[0]
        if speeds[f] > 0.1:
            targets.append(np.clip(desired_future_speed(ch.crowd.ctrl, 0, horizons[f]) / speeds[f], 0.8, 1.2))
            rates.append(ch.crowd.rate[0])
    rates, targets = np.array(rates[60:]), np.array(targets[60:])
    assert rates.min() >= 0.8 - 1e-9 and rates.max() <= 1.2 + 1e-9
    # The rate springs (0.1 s halflife) toward the predicted ratio, which jumps at transitions: it follows.
    assert np.ptp(targets) > 0.1 and np.corrcoef(rates, targets)[0, 1] > 0.5
    assert np.median(np.abs(rates - targets)) < 0.1
