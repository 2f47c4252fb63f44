"""`motionmatch synth`: the output contract, checked by the shared independent tool too."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from motionmatch.cli import main
from motionmatch.io.bvh import read_bvh

SHARED = Path(__file__).resolve().parents[3] / "shared"
KEYS = ["frames", "fps", "nan_frames", "foot_sliding_cm_s", "foot_sliding_source_cm_s", "trajectory_error_cm",
        "heading_error_deg", "responsiveness_s", "transitions_per_s", "search_us", "frame_us"]


def test_synth_writes_the_contract_and_passes_the_independent_check(jlpm_db_path, tmp_path, capsys):
    scen = SHARED / "scenarios" / "walk_turn_stop.json"
    out = tmp_path / "walk"
    assert main(["synth", "--db", str(jlpm_db_path), "--scenario", str(scen), "--out", str(out), "--quiet"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert list(m)[:len(KEYS)] == KEYS
    assert set(m["tracking"]) == {"velocity", "facing"}
    assert m["frames"] == 720 and m["fps"] == 60.0 and m["nan_frames"] == 0
    assert set(m["trajectory_error_cm"]) == {"mean", "p95", "max"}
    assert m["responsiveness_s"] is not None
    assert (out / "trajectory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    anim = read_bvh(out / "motion.bvh")
    assert anim.num_frames == 720 and anim.fps == pytest.approx(60.0)
    assert anim.skeleton.names[0] == "Hips"           # the source skeleton, no simulation bone
    g, _ = anim.global_transforms()
    assert 0.8 < np.median(g[:, 0, 1]) < 1.1            # hips height in metres
    r = subprocess.run([sys.executable, str(SHARED / "tools" / "check_synth.py"), str(out), str(scen)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    ind = json.loads(r.stdout[: r.stdout.rindex("}") + 1])["independent"]
    # Our foot sliding agrees with the independent measurement from the BVH alone.
    assert abs(ind["foot_sliding_cm_s"] - m["foot_sliding_cm_s"]) < 0.25 * ind["foot_sliding_cm_s"] + 1.0


def test_path_scenario_has_no_responsiveness_and_follows_the_path(jlpm_db_path, tmp_path):
    scen = SHARED / "scenarios" / "square_path.json"
    out = tmp_path / "square"
    assert main(["synth", "--db", str(jlpm_db_path), "--scenario", str(scen), "--out", str(out), "--quiet"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["responsiveness_s"] is None and m["nan_frames"] == 0
    r = subprocess.run([sys.executable, str(SHARED / "tools" / "check_synth.py"), str(out), str(scen)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout
    ind = json.loads(r.stdout[: r.stdout.rindex("}") + 1])["independent"]
    assert ind["path_error_cm_mean"] < 40


def test_bad_scenario_names_the_field(jlpm_db_path, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"duration": 5, "inputs": [{"t": 0, "move": [3, 0], "run": False,
                                                          "strafe": False, "look": None}]}))
    assert main(["synth", "--db", str(jlpm_db_path), "--scenario", str(bad), "--out", str(tmp_path / "o")]) == 1
    assert "inputs[0].move" in capsys.readouterr().err
