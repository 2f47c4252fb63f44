"""The command line answers at once: `--help`, `--version`, a command's `--help` and a missing or wrong
input file are handled without loading numpy, scipy, numba or the server (cli/__init__.py, cli/inputs.py).
What each costs in seconds is a benchmark (docs/performance.md), not a test; what is imported is a fact."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from motionmatch.cli import COMMANDS, build_parser

HEAVY = ("numpy", "scipy", "numba", "aiohttp")

# Runs argv through the CLI in a fresh interpreter and prints the exit code and the heavy modules loaded.
PROBE = """
import json, sys
from motionmatch.cli import main
try:
    code = main(json.loads(sys.argv[1]))
except SystemExit as e:
    code = e.code
heavy = sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r})
print(json.dumps({{"code": code, "heavy": sorted({{m.split('.')[0] for m in heavy}})}}), file=sys.stderr)
""".format(heavy=HEAVY)


def probe(argv):
    r = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv)], capture_output=True, text=True,
                       timeout=120)
    last = r.stderr.strip().splitlines()[-1]
    return json.loads(last), r.stdout, r.stderr


@pytest.mark.parametrize("argv", [["--version"], ["--help"], []])
def test_the_top_level_loads_nothing_heavy(argv):
    res, out, err = probe(argv)
    assert res["heavy"] == []
    assert res["code"] in (0, 2)
    assert "motionmatch 0.1.0" in out if argv == ["--version"] else "synth" in out


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_commands_help_loads_nothing_heavy(command):
    res, out, _ = probe([command, "--help"])
    assert res["code"] == 0 and res["heavy"] == [], (command, res)
    assert f"usage: motionmatch {command}" in out


def test_the_table_lists_every_command_with_its_modules_help():
    """COMMANDS (what `--help` shows without importing) says what the modules register."""
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    registered = {c.dest: c.help for c in sub._choices_actions}
    assert registered == {name: text for name, (_, text) in COMMANDS.items()}


@pytest.mark.parametrize("argv, message", [
    (["info", "/no/such.npz"], "/no/such.npz: no such database file"),
    (["synth", "--db", "/no/such.npz", "--scenario", "/no/s.json", "--out", "/tmp/never"], "no such file; expected a scenario JSON"),
    (["serve", "--db", "/no/such.npz"], "--db /no/such.npz: no such database file"),
    (["bench", "crowd", "--db", "/no/such.npz"], "--db /no/such.npz: no such database file"),
    (["settings", "--db", "/no/such.npz"], "--db /no/such.npz: no such database file"),
    (["build", "/no/such/folder", "-o", "/tmp/never.npz"], "/no/such/folder: no such file or folder"),
    (["export", "/no/such.bvh", "-o", "/tmp/never.glb"], "/no/such.bvh: no such file"),
    (["convert", "/no/such.bvh", "/tmp/never.glb"], "/no/such.bvh: no such motion file"),
])
def test_a_missing_input_is_reported_before_anything_heavy_loads(argv, message):
    res, _, err = probe(argv)
    assert res["code"] == 1 and message in err and "Traceback" not in err, err
    assert res["heavy"] == [], res


def test_a_file_of_the_wrong_kind_is_reported_before_anything_heavy_loads(tmp_path):
    not_a_db = tmp_path / "notes.npz"
    not_a_db.write_text("these are my notes\n")
    res, _, err = probe(["info", str(not_a_db)])
    assert res["code"] == 1 and f"{not_a_db}: not a motionmatch database" in err and res["heavy"] == []
    broken = tmp_path / "walk.json"
    broken.write_text('{"duration": 3, "inputs": [')
    res, _, err = probe(["synth", "--scenario", str(broken), "--out", str(tmp_path / "o")])
    assert res["code"] == 1 and f"invalid JSON in {broken}" in err and res["heavy"] == []


def test_the_probe_sees_what_a_real_command_loads(jlpm_db_path):
    """The checks above could pass by a probe that sees nothing: a command that does its work loads numpy."""
    res, out, _ = probe(["info", str(jlpm_db_path), "--json"])
    assert res["code"] == 0 and "numpy" in res["heavy"] and json.loads(out)["frames"] > 0
