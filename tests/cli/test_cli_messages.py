"""Command-line rough edges: a busy port, `synth --json` / `--quiet`, the default database, error messages."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from motionmatch.app import assets
from motionmatch.app import server as srv
from motionmatch.cli import main

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
SCENARIO = SHARED / "scenarios" / "walk_turn_stop.json"


def _short_scenario(tmp_path) -> Path:
    p = tmp_path / "short.json"
    p.write_text(json.dumps({"duration": 1.0, "inputs": [{"t": 0.0, "move": [0.0, 1.0], "run": False,
                                                          "strafe": False, "look": None}]}))
    return p


def test_synth_json_prints_exactly_one_object(jlpm_db_path, tmp_path, capfd):
    out = tmp_path / "o"
    assert main(["synth", "--db", str(jlpm_db_path), "--scenario", str(_short_scenario(tmp_path)),
                 "--out", str(out), "--json"]) == 0
    stdout = capfd.readouterr().out
    metrics = json.loads(stdout)                       # the whole of stdout is one JSON object
    assert metrics == json.loads((out / "metrics.json").read_text())
    assert metrics["frames"] == 60


def test_synth_quiet_prints_nothing(jlpm_db_path, tmp_path, capfd):
    assert main(["synth", "--db", str(jlpm_db_path), "--scenario", str(_short_scenario(tmp_path)),
                 "--out", str(tmp_path / "o"), "--quiet"]) == 0
    cap = capfd.readouterr()
    assert cap.out == "" and cap.err == ""


def test_synth_errors_name_the_file(jlpm_db_path, tmp_path, capsys):
    missing = tmp_path / "nope.json"
    assert main(["synth", "--db", str(jlpm_db_path), "--scenario", str(missing), "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert str(missing) in err and "scenario JSON file" in err and "Errno" not in err
    assert main(["synth", "--db", str(tmp_path / "x.npz"), "--scenario", str(SCENARIO), "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "x.npz: no such database file" in err and "Traceback" not in err


def test_synth_without_db_uses_the_default_database(tmp_path, monkeypatch, jlpm_db_path):
    from motionmatch.cli import options
    used = []
    monkeypatch.setattr("motionmatch.posedb.database.build_default_database",
                        lambda progress=True, **options: used.append((progress, options)) or jlpm_db_path)
    assert options.database_path(None, progress=False) == jlpm_db_path and used == [(False, {})]
    assert main(["synth", "--scenario", str(_short_scenario(tmp_path)), "--out", str(tmp_path / "o"),
                 "--quiet"]) == 0
    assert used[1] == (False, {"mixed": True}) and (tmp_path / "o" / "metrics.json").exists()


def _serve(port: int, db: Path, host: str = "127.0.0.1"):
    return subprocess.Popen([sys.executable, "-m", "motionmatch", "serve", "--db", str(db), "--host", host,
                             "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _wait_for(proc, needle: str, timeout: float = 60.0) -> str:
    seen = ""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        seen += line
        if needle in line:
            return seen
    return seen


def test_busy_port_moves_on_with_a_clear_message(jlpm_db_path):
    if assets.find_three() is None:
        pytest.fail("node_modules/three missing: run `make node_modules`")
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        proc = _serve(port, jlpm_db_path)
        try:
            out = _wait_for(proc, "serving on")
            assert "serving on http://127.0.0.1:" in out, out
            served = int(out.split("127.0.0.1:")[-1].split("/")[0])
            assert served != port
            with socket.create_connection(("127.0.0.1", served), timeout=5):
                pass
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=20)
    assert f"port {port} is busy" in err and "Traceback" not in err


def test_all_interfaces_prints_addresses_and_warns():
    addrs = srv.reachable_addresses("0.0.0.0")
    assert addrs[0] == "127.0.0.1" and all(a.count(".") == 3 for a in addrs)
    lines, warning = srv.announcement("0.0.0.0", 8123)
    assert lines == [f"motionmatch: serving on http://{a}:8123/  (Ctrl+C to stop)" for a in addrs]
    assert "0.0.0.0" not in "".join(lines) and "anyone who can reach this machine" in warning
    assert srv.announcement("127.0.0.1", 8000) == (["motionmatch: serving on http://127.0.0.1:8000/  (Ctrl+C to stop)"],
                                                   None)
