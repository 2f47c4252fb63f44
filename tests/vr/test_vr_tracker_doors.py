"""Tracker files (`synth --trackers`) and `synth --alpha`: a field the format does not have is refused, not
ignored; a radius outside its range is a usage error; a bad VR model stops the run before anything is
written."""
from __future__ import annotations

import json

import numpy as np
import pytest

from motionmatch.cli import main as cli_main
from motionmatch.vr.orientation import NUM_NETWORK_INPUTS, OrientationNetwork, save_networks
from motionmatch.vr.trackers import TrackerFileError, read_trackers


def _tracker_doc(**extra):
    pose = {"position": [0, 1.6, 0], "rotation": [1, 0, 0, 0]}
    return {**extra, "frames": [{"t": 0.1 * k, "hmd": pose, "left": pose, "right": pose} for k in range(3)]}


def test_tracker_file_fields_it_does_not_know_are_refused(tmp_path):
    f = tmp_path / "t.json"
    f.write_text(json.dumps(_tracker_doc()))
    assert read_trackers(f)[0].num_frames >= 3
    f.write_text(json.dumps(_tracker_doc(settings={"alpha": 1e308})))
    with pytest.raises(TrackerFileError, match=r"t.json: settings: unknown field \(known: fps, frames\)"):
        read_trackers(f)
    doc = json.loads(json.dumps(_tracker_doc()))        # frames of their own, not one shared pose
    doc["frames"][1]["hmd"]["velocity"] = [0, 0, 0]
    f.write_text(json.dumps(doc))
    with pytest.raises(TrackerFileError, match=r"frames\[1\].hmd.velocity: unknown field \(known: position, "
                                               r"rotation\)"):
        read_trackers(f)
    header = "t," + ",".join(f"{d}_{c}" for d in ("hmd", "left", "right")
                             for c in ("px", "py", "pz", "qw", "qx", "qy", "qz"))
    row = ",".join(["0,1.6,0,1,0,0,0"] * 3)
    (tmp_path / "t.csv").write_text(f"{header},alpha\n0,{row},1e308\n0.1,{row},1e308\n")
    with pytest.raises(TrackerFileError, match=r"t.csv: line 1: unknown column 'alpha'"):
        read_trackers(tmp_path / "t.csv")


@pytest.mark.parametrize("alpha", ["1e308", "0", "nan", "-0.3", "abc"])
def test_synth_alpha_outside_its_range_is_a_usage_error(tmp_path, capsys, alpha):
    f = tmp_path / "t.json"
    f.write_text(json.dumps(_tracker_doc()))
    with pytest.raises(SystemExit) as e:
        cli_main(["synth", "--trackers", str(f), "--vr-model", "missing.npz", "--alpha", alpha,
                  "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "argument --alpha" in err and "Traceback" not in err
    assert ("outside [0.01, 2]" in err) or ("not a finite number" in err) or ("expected a radius" in err)
    assert not (tmp_path / "out").exists()


def _save_three_outputs(path):
    rng = np.random.default_rng(3)
    net = OrientationNetwork([rng.normal(0, 0.1, (NUM_NETWORK_INPUTS, 8)), rng.normal(0, 0.1, (8, 3))],
                             [np.zeros(8), np.zeros(3)], np.zeros(NUM_NETWORK_INPUTS), np.ones(NUM_NETWORK_INPUTS), 4)
    save_networks(path, {"network": net})
    return path


def test_synth_with_a_bad_vr_model_writes_nothing(tmp_path, capsys):
    f = tmp_path / "t.json"
    f.write_text(json.dumps(_tracker_doc()))
    bad = _save_three_outputs(tmp_path / "three.npz")
    code = cli_main(["synth", "--trackers", str(f), "--vr-model", str(bad), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and err.count("three.npz: field network/w1") == 1
    assert not (tmp_path / "out").exists()
