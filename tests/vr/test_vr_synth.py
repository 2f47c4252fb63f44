"""VR synthesis on a held-out clip: a tracker stream drives the character, the root stays within the
clamp of the HMD's floor projection, the hands reach the controllers, no NaN."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import JLPM, _need
from motionmatch.cli import main
from motionmatch.io.bvh import read_bvh
from motionmatch.offline.synth import run_scenario
from motionmatch.offline.scenario import Scenario
from motionmatch.vr.driver import VRDriver, VRDriverSettings, facing_yaw
from motionmatch.vr.orientation import NUM_NETWORK_INPUTS, OrientationNetwork, save_networks
from motionmatch.vr.synth import VRTouchUp, database_calibration, synthesize_vr
from motionmatch.vr.trackers import read_trackers, slice_stream, write_trackers_json
from motionmatch.vr.upper_body import hmd_floor_target
from vr_fixtures import hmd_forward_network

SECONDS = 5.0


@pytest.fixture(scope="module")
def held_out():
    """SECONDS of the held-out last quarter of locomotion_take2 (docs/VR.md), simulated devices and truth."""
    stream, truth = read_trackers(_need(JLPM / "locomotion_take2.bvh"))
    start = int(0.8 * stream.num_frames)
    return slice_stream(stream, truth, start, start + int(SECONDS * stream.fps) + 1)


@pytest.mark.parametrize("alpha", [0.1, 0.3])
def test_vr_synth_keeps_the_root_clamped_and_the_hands_on_the_controllers(jlpm_db, held_out, alpha):
    stream, truth = held_out
    driver = VRDriver(stream, hmd_forward_network(), VRDriverSettings(alpha=alpha))
    touch = VRTouchUp(jlpm_db, driver, database_calibration(jlpm_db), truth)
    start = (hmd_floor_target(stream.positions[0, 0], stream.rotations[0, 0]), facing_yaw(driver.state.facing))
    consumed = []
    rec = run_scenario(jlpm_db, Scenario(duration=SECONDS), driver=driver, start=start,
                       touch_up=lambda ch, k, lp, lr: (consumed.append(driver.index), touch(ch, k, lp, lr))[1])
    assert not rec["nan"].any() and np.isfinite(rec["local_rot"]).all()
    assert consumed[-1] == stream.num_frames - 1
    targets = hmd_floor_target(stream.positions[consumed, 0], stream.rotations[consumed, 0])
    dist = np.linalg.norm(rec["root_pos"][:, [0, 2]] - targets[:, [0, 2]], axis=-1)
    assert dist.max() <= alpha + 1e-6
    # The character walks with the user: the root leaves where it started as the HMD does.
    assert np.linalg.norm(rec["root_pos"][-1, [0, 2]] - rec["root_pos"][0, [0, 2]]) > 1.0
    m = touch.metrics()
    # Controllers the arms can reach (most of them; the others are a few cm beyond the avatar's
    # shoulders, which stand where motion matching put them) are reached within a centimetre.
    assert m["reachable_fraction"] > 0.5
    assert m["hand_error_reachable_cm"]["max"] < 1.0 and m["hand_error_cm"]["mean"] < 3.0
    assert m["root_error_cm"]["mean"] < 100 * alpha + 15.0
    # The upper body bends so that the head reaches the HMD's head point (the root stays within alpha).
    assert m["head_error_cm"]["mean"] < 8.0


def test_synth_cli_from_a_tracker_file(tmp_path, jlpm_db_path, held_out, capsys):
    stream, _ = held_out
    trackers, model = tmp_path / "trackers.json", tmp_path / "vr.npz"
    write_trackers_json(trackers, slice_stream(stream, None, 0, 121)[0])
    save_networks(model, {"network": hmd_forward_network()})
    out = tmp_path / "out"
    assert main(["synth", "--db", str(jlpm_db_path), "--trackers", str(trackers), "--vr-model", str(model),
                 "--alpha", "0.1", "--out", str(out), "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics == json.loads((out / "metrics.json").read_text())
    assert metrics["frames"] == 120 and metrics["nan_frames"] == 0
    assert "root_error_cm" not in metrics         # no ground truth in a tracker file
    assert metrics["hand_error_reachable_cm"]["max"] < 1.0 and metrics["head_error_cm"]["mean"] < 15.0
    assert read_bvh(out / "motion.bvh").num_frames == 120


def test_synth_vr_refuses_a_missing_model(tmp_path, held_out, jlpm_db_path, capsys):
    trackers = tmp_path / "trackers.json"
    write_trackers_json(trackers, slice_stream(held_out[0], None, 0, 10)[0])
    code = main(["synth", "--db", str(jlpm_db_path), "--trackers", str(trackers), "--out", str(tmp_path / "o")])
    assert code != 0 and "--vr-model" in capsys.readouterr().err
    with pytest.raises(ValueError, match="alpha"):
        synthesize_vr(None, trackers, tmp_path / "none.npz", tmp_path / "o", alpha=0.0)
