"""Database switching by HMD height (issue 12; seed 002, 4.2.3): the standing height is calibrated over
the stream's first seconds; a lowered HMD switches the character to the crouch clips (a tag filter) and
back when it rises again."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import JLPM, _need
from motionmatch.cli import main
from motionmatch.offline.scenario import Scenario
from motionmatch.search import frame_mask
from motionmatch.offline.synth import run_scenario
from motionmatch.vr.driver import VRDriver, VRDriverSettings, crouch_databases, facing_yaw, select_database
from motionmatch.vr.synth import VRTouchUp, database_calibration
from motionmatch.vr.trackers import read_trackers, slice_stream, write_trackers_json
from motionmatch.vr.upper_body import hmd_floor_target
from vr_fixtures import hmd_forward_network

SECONDS = 8.0
DOWN, UP = (3.5, 4.0), (6.0, 6.5)        # s: the HMD goes down to 60 % of its height, then back up


def test_height_choice_keeps_its_range_within_the_hysteresis():
    ranges = [(0.0, 0.8), (0.8, 10.0)]
    assert select_database(1.30, 1.70, ranges) == 0                      # 0.76
    assert select_database(1.38, 1.70, ranges, current=0, hysteresis=0.03) == 0   # 0.81: still crouching
    assert select_database(1.42, 1.70, ranges, current=0, hysteresis=0.03) == 1   # 0.835: up
    assert select_database(1.33, 1.70, ranges, current=1, hysteresis=0.03) == 1   # 0.78
    assert crouch_databases("crouch", 0.7) == ((0.0, 0.7, "crouch"), (0.7, np.inf, None))
    with pytest.raises(ValueError, match="crouch threshold"):
        crouch_databases("crouch", 1.2)


@pytest.fixture(scope="module")
def crouching_walk():
    """SECONDS of the held-out tail of take 2 with every device lowered by 40 % of the standing HMD
    height between DOWN and UP (smooth ramps): a user crouching and standing up again."""
    stream, _ = read_trackers(_need(JLPM / "locomotion_take2.bvh"))
    start = int(0.8 * stream.num_frames)
    stream, _ = slice_stream(stream, None, start, start + int(SECONDS * stream.fps) + 1)
    t = np.arange(stream.num_frames) / stream.fps
    ramp = lambda a, b: np.clip((t - a) / (b - a), 0.0, 1.0)  # noqa: E731
    lowered = 0.4 * (ramp(*DOWN) - ramp(*UP))
    stream.positions = stream.positions.copy()
    stream.positions[:, :, 1] -= lowered[:, None] * np.median(stream.positions[:120, 0, 1])
    return stream


def test_a_crouch_switches_to_the_crouch_clips_and_back(jlpm_db, crouching_walk):
    stream = crouching_walk
    # Our databases hold no crouching clips: the mirrored half of the jlpm22 takes stands in for them.
    settings = VRDriverSettings(height_databases=crouch_databases("mirrored", 0.8))
    driver = VRDriver(stream, hmd_forward_network(), settings)
    touch = VRTouchUp(jlpm_db, driver, database_calibration(jlpm_db))
    start = (hmd_floor_target(stream.positions[0, 0], stream.rotations[0, 0]), facing_yaw(driver.state.facing))
    seen = []

    def touch_up(ch, k, lp, lr):
        out = touch(ch, k, lp, lr)
        seen.append((driver.database, ch.settings.tag_filter))
        return out
    rec = run_scenario(jlpm_db, Scenario(duration=SECONDS), driver=driver, start=start, touch_up=touch_up)
    assert not rec["nan"].any()
    standing = np.median(stream.positions[:120, 0, 1])
    assert driver.standing_height == pytest.approx(standing, abs=0.02)
    database = np.array([d for d, _ in seen])
    filters = [f for _, f in seen]
    fps = jlpm_db.fps
    # Upright (database 1, the character's own clips) while calibrating and walking; the crouch clips
    # once the HMD is under 80 % of the standing height; back up after it rises again.
    assert (database[: int(DOWN[0] * fps)] == 1).all() and all(f is None for f in filters[: int(DOWN[0] * fps)])
    down = np.nonzero(database == 0)[0]
    assert len(down) and DOWN[0] * fps < down[0] < DOWN[1] * fps and UP[0] * fps < down[-1] < UP[1] * fps
    assert all(filters[k] == "mirrored" for k in down)
    assert (database[int(UP[1] * fps):] == 1).all() and filters[-1] is None
    assert driver.switches == 2
    # The switch forces a search: while crouching the character plays only mirrored clips.
    mirrored = frame_mask("mirrored", jlpm_db.range_tags, jlpm_db.range_starts, jlpm_db.range_stops,
                          jlpm_db.num_frames)
    crouched = rec["frames"][down[0] + 2: down[-1]]
    assert mirrored[crouched].all()
    assert touch.metrics()["database_switches"] == 2


def test_crouch_tags_matching_nothing_are_refused(tmp_path, jlpm_db_path, crouching_walk, capsys):
    trackers, model = tmp_path / "t.json", tmp_path / "vr.npz"
    write_trackers_json(trackers, slice_stream(crouching_walk, None, 0, 30)[0])
    from motionmatch.vr.orientation import save_networks
    save_networks(model, {"network": hmd_forward_network()})
    code = main(["synth", "--db", str(jlpm_db_path), "--trackers", str(trackers), "--vr-model", str(model),
                 "--crouch-tags", "crouch", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code != 0 and "'crouch'" in err and "mirrored" in err and "Traceback" not in err
