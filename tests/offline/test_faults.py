"""Faults lose nothing (issue 31): a build killed while writing, a training or a settings save failing on
a full disk leave the earlier file whole and no visible temporary file; the next run cleans up."""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from motionmatch.files.atomic_file import replacing
from motionmatch.cli import main as cli_main
from motionmatch.posedb.database import load_database
from cluster_fixtures import kill_a_worker_once_it_runs_a_task

# Runs the CLI with numpy's savez replaced by one that writes a few bytes and then kills its own process
# (SIGKILL: no finally block, no atexit), i.e. a kill at the worst moment, every time.
DIE_WHILE_WRITING = """
import os, signal, sys
import numpy as np
def dying(f, *a, **k):
    f.write(b"PK\\x03\\x04 half a file")
    f.flush()
    os.kill(os.getpid(), signal.SIGKILL)
np.savez = dying
from motionmatch.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _visible(folder):
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


def test_build_killed_while_writing_keeps_the_earlier_database(bandai_dir, tmp_path):
    out = tmp_path / "db.npz"
    clip = bandai_dir / "dataset-1" / "dataset-1_walk_normal_001.bvh"
    args = ["build", str(clip), "-o", str(out), "--quiet", "--no-mirror"]
    assert cli_main(args) == 0
    before = out.read_bytes()
    proc = subprocess.run([sys.executable, "-c", DIE_WHILE_WRITING] + args, env={**os.environ}, timeout=300)
    assert proc.returncode == -signal.SIGKILL
    assert out.read_bytes() == before and _visible(tmp_path) == ["db.npz"]
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] != []      # the killed write's
    # The next build replaces the database whole and removes the dead process's temporary file.
    assert cli_main(args) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db.npz"]
    assert load_database(out).num_frames > 100


def _full_disk(f, *a, **k):
    f.write(b"PK\x03\x04 half")
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.slow
def test_training_on_a_full_disk_is_one_error_and_keeps_the_earlier_model(jlpm_db_path, tmp_path, monkeypatch,
                                                                         capsys):
    out = tmp_path / "m.npz"
    out.write_bytes(b"an earlier model")
    # The fixture's layer width (tests/lmm/test_lmm.py): compiled training steps are reused.
    args = ["lmm", "train", "--db", str(jlpm_db_path), "-o", str(out), "--iterations", "5", "--frames", "150",
            "--hidden", "64", "--quiet"]
    monkeypatch.setattr(np, "savez", _full_disk)
    code = cli_main(args)
    err = capsys.readouterr().err
    assert code == 1 and "No space left on device" in err and "Traceback" not in err
    assert out.read_bytes() == b"an earlier model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz"]      # no .tmp.npz, no half checkpoint


def test_replacing_keeps_the_old_file_on_any_error_and_writes_whole_files(tmp_path):
    target = tmp_path / "settings.toml"
    target.write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with replacing(target, "w") as f:
            f.write("half")
            raise KeyboardInterrupt
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["settings.toml"]
    # A temporary file of a dead process is removed by the next write; one of a live process is kept.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".settings.toml.{int(dead.stdout)}.tmp"
    stale.write_text("stale")
    live = tmp_path / f".settings.toml.{os.getppid()}.tmp"
    live.write_text("another writer")
    with replacing(target, "w") as f:
        f.write("new")
    assert target.read_text() == "new" and not stale.exists() and live.exists()


@pytest.mark.slow
def test_a_worker_killed_mid_study_costs_at_most_its_trial(jlpm_db_path, tmp_path, capsys):
    """`tune` on a one-worker cluster whose worker is killed while it runs the first trial (the defaults,
    which every later trial is compared with): that trial is lost, asked again, and the study finishes with
    the trials asked for; a run stopped with a trial in flight resumes the same way."""
    import json
    import threading

    import optuna
    from motionmatch.offline.cluster import open_client
    from motionmatch.runtime.settings_file import load_settings
    from motionmatch.offline.tuning import STUDY_NAME

    scen = tmp_path / "walk_turn.json"
    scen.write_text(json.dumps({"duration": 2.0, "inputs": [{"t": 0.0, "move": [0.0, 1.0]},
                                                            {"t": 1.0, "move": [1.0, 0.0]}]}))
    out = tmp_path / "tuned.toml"
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / "tuned.study.jsonl")))
    with open_client(workers=1, allowed_failures=0) as client:
        args = ["tune", "--db", str(jlpm_db_path), "--scenarios", str(scen), "-o", str(out), "--only", "bias",
                "--address", client.scheduler.address]
        killed = []
        killer = threading.Thread(target=kill_a_worker_once_it_runs_a_task, args=(client, killed))
        killer.start()
        code = cli_main(args + ["--trials", "2"])
        killer.join()
        err = capsys.readouterr().err
        assert killed and code == 0, err
        trials = optuna.load_study(study_name=STUDY_NAME, storage=storage).trials
        assert [t.state.name for t in trials] == ["FAIL", "COMPLETE", "COMPLETE"], err
        assert trials[0].user_attrs["error"].startswith("KilledWorker") and "asked again" in err
        assert trials[0].user_attrs["defaults"] and trials[1].user_attrs["defaults"]
        assert trials[1].params == trials[0].params
        assert load_settings(out).character.bias > 0

        # A tune stopped with a trial in flight (left RUNNING in the journal): the next run marks it
        # failed and goes on; asking for one more trial runs exactly one more.
        study = optuna.load_study(study_name=STUDY_NAME, storage=storage)
        study.ask()
        assert cli_main(args + ["--trials", "5"]) == 0
        states = [t.state.name for t in optuna.load_study(study_name=STUDY_NAME, storage=storage).trials]
        assert states == ["FAIL", "COMPLETE", "COMPLETE", "FAIL", "COMPLETE"]
