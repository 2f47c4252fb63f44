"""Spine pitch bending on slopes: the upper body leans with the ground, the legs are left alone."""
import numpy as np
import pytest

from motionmatch.runtime.character import Character, CharacterSettings
from motionmatch.runtime.controller import GamepadInput
from motionmatch.world.terrain import Heightfield
from motionmatch.runtime.warping import WarpSettings


def walk_up_and_down(db, spine_pitch, terrain):
    """(lean of the head over the hips along the facing (F,) degrees, toe positions (F, 2, 3))."""
    ch = Character(db, CharacterSettings(warp=WarpSettings(play_rate=False, spine_pitch=spine_pitch)))
    ch.set_terrain(terrain)
    r = db.roles
    leans, toes = [], []
    for k in range(400):
        ch.step(GamepadInput(move=(0.0, 1.0) if k < 240 else (0.0, -1.0)))
        g = ch.global_positions
        d = g[r["head"]] - g[r["hips"]]
        yaw = ch.crowd.root_yaw[0]
        leans.append(np.degrees(np.arctan2(d[0] * np.sin(yaw) + d[2] * np.cos(yaw), d[1])))
        toes.append(g[[r["left_toe"], r["right_toe"]]].copy())
    return np.array(leans), np.array(toes)


def test_upper_body_leans_into_the_slope_and_legs_stay(jlpm_db):
    slope = Heightfield.from_spec({"kind": "slope", "angle_deg": 10, "direction_deg": 0, "size": 40})
    lean0, toes0 = walk_up_and_down(jlpm_db, 0.0, slope)
    lean1, toes1 = walk_up_and_down(jlpm_db, 0.5, slope)
    # Half the 10 degree slope at the spine: the head-over-hips line leans ~3 degrees more forward
    # walking up, ~3 degrees back walking down (the hips below the spine do not bend).
    up = (lean1 - lean0)[150:240].mean()
    down = (lean1 - lean0)[340:].mean()
    assert 1.5 < up < 5.0 and -5.0 < down < -1.5, (up, down)
    # Smooth: no frame-to-frame jump of the lean beyond what walking itself does.
    assert np.abs(np.diff(lean1 - lean0)).max() < 0.5
    np.testing.assert_allclose(toes1, toes0, atol=1e-5)       # the legs are not touched


def test_no_lean_on_flat_ground(jlpm_db):
    flat = Heightfield.from_spec({"kind": "flat", "size": 40})
    lean0, _ = walk_up_and_down(jlpm_db, 0.0, flat)
    lean1, _ = walk_up_and_down(jlpm_db, 0.5, flat)
    np.testing.assert_allclose(lean1, lean0, atol=1e-6)
