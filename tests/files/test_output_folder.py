"""Staging folders (files/output_folder.py, issue 43): a killed run's `.partial-*` folder is removed by the
next run into the same folder, a live run's never; runs killed at random moments leave the folder either
the old complete outputs or the new complete ones.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest

from motionmatch.files.output_folder import (INCOMPLETE_MARKER, STALE_UNLOCKED_S, STAGING_PREFIX,
                                             remove_dead_staging, staged_output)

# A child process that opens a staging folder in argv[1], says where, and waits to be killed.
_HOLDER = """
import sys
from motionmatch.files.output_folder import staged_output
with staged_output(sys.argv[1]) as stage:
    (stage / "motion.bvh").write_text("half")
    print(stage, flush=True)
    sys.stdin.readline()
"""


def _staging(out):
    return sorted(p.name for p in out.glob(STAGING_PREFIX + "*"))


def test_a_live_runs_staging_is_kept_and_a_killed_runs_removed_by_the_next_run(tmp_path):
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(out)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        held = holder.stdout.readline().strip()
        assert held and os.path.isdir(held)
        # Another run into the same folder, here, while the holder lives: it keeps the holder's staging.
        with staged_output(out) as stage:
            (stage / "metrics.json").write_text("{}")
            assert os.path.isdir(held) and len(_staging(out)) == 2
        assert os.path.isdir(held) and (out / "metrics.json").is_file()
        assert remove_dead_staging(out) == []
    finally:
        holder.send_signal(signal.SIGKILL)
    assert holder.wait() == -signal.SIGKILL
    assert os.path.isdir(held)                       # SIGKILL: no cleanup of its own
    with staged_output(out) as stage:                # the next run removes it
        (stage / "metrics.json").write_text("{}")
    assert _staging(out) == [] and sorted(p.name for p in out.iterdir()) == ["metrics.json"]


def test_only_staging_folders_are_removed_and_unlocked_ones_only_when_old(tmp_path):
    out = tmp_path / "out"
    for name in (".partial-old", ".partial-new", ".partialx", ".git"):
        (out / name).mkdir(parents=True)
        (out / name / "motion.bvh").write_text("x")
    (out / ".partial-file").write_text("a file, not a staging folder")
    (out / ".partial-link").symlink_to(out / ".git")
    old = time.time() - STALE_UNLOCKED_S - 60     # a staging folder without a lock (an older motionmatch)
    for p in (out / ".partial-old" / "motion.bvh", out / ".partial-old"):
        os.utime(p, (old, old))
    assert [p.name for p in remove_dead_staging(out)] == [".partial-old"]
    assert sorted(p.name for p in out.iterdir()) == [".git", ".partial-file", ".partial-link", ".partial-new",
                                                     ".partialx"]
    assert (out / ".git" / "motion.bvh").is_file()    # the link's target is untouched


def test_a_failing_run_removes_its_staging_and_keeps_the_earlier_outputs(tmp_path):
    out = tmp_path / "out"
    with staged_output(out) as stage:
        (stage / "motion.bvh").write_text("first")
    try:
        with staged_output(out) as stage:
            (stage / "motion.bvh").write_text("second, never finished")
            raise OSError("disk full")
    except OSError:
        pass
    assert sorted(p.name for p in out.iterdir()) == ["motion.bvh"] and (out / "motion.bvh").read_text() == "first"


# -- real runs killed at random moments ------------------------------------------------------------

KILLS = 20


def _scenario(path, turn: float, duration: float):
    path.write_text(json.dumps({"duration": duration, "inputs": [{"t": 0.0, "move": [0, 1]},
                                                                 {"t": 0.5, "move": [turn, 1]}]}))
    return path


def _visible(folder) -> dict:
    """The outputs in `folder` (hidden staging aside) as what tells runs apart: the bytes of each file, but
    of metrics.json the frame count only (it holds timings, different at every run)."""
    return {p.name: json.loads(p.read_text())["frames"] if p.name == "metrics.json" else p.read_bytes()
            for p in folder.iterdir() if not p.name.startswith(".")}


@pytest.mark.slow       # 20 synth processes: 167 s with numba's cache compiled by its first run
def test_runs_killed_at_random_moments_leave_old_or_new_outputs_and_no_staging(jlpm_db_path, tmp_path):
    """20 `motionmatch synth` processes killed (SIGKILL) at seeded random moments of their run, two
    scenarios taking turns so the old and the new outputs differ: after each kill the folder's outputs are
    exactly one run's, whole; a killed run's staging folder is gone once a later run has begun staging;
    a last run to the end leaves no staging folder at all."""
    scenarios = [_scenario(tmp_path / "a.json", 0.0, 1.0), _scenario(tmp_path / "b.json", 0.7, 1.2)]

    def command(k, out):
        return [sys.executable, "-m", "motionmatch", "synth", "--db", str(jlpm_db_path), "--scenario",
                str(scenarios[k]), "-o", str(out), "--quiet"]

    complete, seconds = [], []
    for k in (0, 1):
        t0 = time.monotonic()
        subprocess.run(command(k, tmp_path / f"ref{k}"), check=True)
        seconds.append(time.monotonic() - t0)
        complete.append(_visible(tmp_path / f"ref{k}"))
    assert complete[0]["metrics.json"] == 60 and complete[1]["metrics.json"] == 72
    assert sorted(complete[0]) == ["metrics.json", "motion.bvh", "trajectory.png"]
    run_s = min(seconds)       # the first run may have compiled numba's cache (after an edit of the sources)
    out = tmp_path / "out"
    shutil.copytree(tmp_path / "ref0", out)
    rng = random.Random(43)
    now, staged_kills, leftovers = 0, 0, []
    for i in range(KILLS):
        new = 1 - now
        proc = subprocess.Popen(command(new, out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if i % 2:
            # Every other kill comes while the run stages (its simulation runs inside the staging folder):
            # the case the cleanup is for, however fast the machine is at the moment.
            deadline = time.monotonic() + 120.0
            while proc.poll() is None and not set(_staging(out)) - set(leftovers) and time.monotonic() < deadline:
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.2 * run_s))
        else:
            # Anywhere from the start (imports, the database) to a little past a whole run's time.
            time.sleep(rng.uniform(0.0, 1.1 * run_s))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        got = _visible(out)
        # A kill inside the move (a few renames, ~0.1 ms of a run of seconds) would leave INCOMPLETE and a
        # mix: odds about 1e-4 over the 20 kills.
        assert INCOMPLETE_MARKER not in got and got in (complete[now], complete[new]), got.get("metrics.json")
        staging = _staging(out)
        if got == complete[new]:   # the run finished its move: no staging folder of any run is left
            assert staging == [], staging
            now = new
        fresh = [s for s in staging if s not in leftovers]
        assert len(fresh) <= 1
        if fresh:                  # this run got as far as staging: the earlier killed runs' are gone
            assert staging == fresh
            staged_kills += 1
        leftovers = staging
    assert staged_kills >= 5, f"only {staged_kills} of {KILLS} kills came while a run was staging"
    subprocess.run(command(1 - now, out), check=True)
    assert _staging(out) == [] and _visible(out) == complete[1 - now]
