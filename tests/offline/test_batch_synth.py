"""Batches of scenarios and crowd files (`synth --scenarios DIR`, several `--crowd` files) on the distributed
engine: each folder as a single `synth` writes it, failures named, a stopped batch marked incomplete."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from motionmatch.offline.batch_synth import SUMMARY, without_timings
from motionmatch.cli import main
from motionmatch.files.output_folder import INCOMPLETE_MARKER
from motionmatch.runtime.crowd import PARALLEL_FROM

WALK_TURN = [{"t": 0.0, "move": [0.0, 1.0]}, {"t": 1.0, "move": [1.0, 0.0]}]


@pytest.fixture(scope="module")
def cluster():
    """A local one-worker cluster on loopback for the module."""
    from motionmatch.offline.cluster import open_client
    with open_client(workers=1) as client:
        yield client


def _write(path: Path, data) -> Path:
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def _visible(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


def _same_as_single(batch_dir: Path, single_dir: Path, files: list[str]) -> None:
    assert _visible(batch_dir) == _visible(single_dir) and set(files) <= set(_visible(single_dir))
    for f in files:
        if f == "metrics.json":
            a, b = (json.loads((d / f).read_text()) for d in (batch_dir, single_dir))
            assert without_timings(a) == without_timings(b)
            assert a.keys() == b.keys()
        else:
            assert (batch_dir / f).read_bytes() == (single_dir / f).read_bytes(), f


@pytest.mark.slow
def test_a_scenario_batch_on_the_engine_writes_what_single_runs_write_and_names_a_failure(
        cluster, jlpm_db_path, tmp_path, capsys):
    scen = tmp_path / "scen"
    scen.mkdir()
    _write(scen / "walk_turn.json", {"duration": 2.0, "inputs": WALK_TURN})
    _write(scen / "stand_run.json", {"duration": 1.5, "inputs": [{"t": 0.0, "move": [0.0, 0.0]},
                                                                 {"t": 0.5, "move": [0.0, 1.0], "run": True}]})
    _write(scen / "broken.json", '{"duration": 2.0, "inputs": [{"t": 0.0, "move": [0.0')
    out = tmp_path / "batch"
    # An earlier run's folder for a scenario of this batch: replaced whole.
    (out / "walk_turn").mkdir(parents=True)
    (out / "walk_turn" / "motion.glb").write_text("an earlier run's")
    code = main(["synth", "--db", str(jlpm_db_path), "--scenarios", str(scen), "-o", str(out),
                 "--address", cluster.scheduler.address])
    captured = capsys.readouterr()
    assert code == 1
    assert "broken" in captured.err and "2 of 3 scenarios written" in captured.out
    summary = json.loads((out / SUMMARY).read_text())
    assert [(r["name"], r["status"]) for r in summary["items"]] == [
        ("broken", "failed"), ("stand_run", "done"), ("walk_turn", "done")]
    assert "broken.json" in summary["items"][0]["error"] and summary["workers"] == 1
    assert _visible(out) == [SUMMARY, "stand_run", "walk_turn"]       # no INCOMPLETE, nothing of broken
    for name in ("walk_turn", "stand_run"):
        single = tmp_path / f"single_{name}"
        assert main(["synth", "--db", str(jlpm_db_path), "--scenario", str(scen / f"{name}.json"), "--out",
                     str(single), "--quiet"]) == 0
        _same_as_single(out / name, single, ["motion.bvh", "metrics.json"])
        assert not list((out / name).glob(".partial-*"))


@pytest.mark.slow
def test_several_crowd_files_on_the_engine_write_what_single_runs_write(cluster, jlpm_db_path, tmp_path, capsys):
    crowds = [_write(tmp_path / "pair.json", {"duration": 2, "avoidance": True, "agents": [
                  {"start": [0, 0], "inputs": WALK_TURN}, {"start": [0, 6], "yaw": 180, "goal": [0, 1]}]}),
              _write(tmp_path / "runner.json", {"duration": 1.5, "agents": [
                  {"start": [5, 0], "goal": [5, 6], "run": True}]}),
              # As many agents as make the crowd's stages parallel (PARALLEL_FROM): the workers run them
              # on one numba thread, the single run here on all.
              _write(tmp_path / "rows.json", {"duration": 1.0, "agents": [
                  {"start": [1.5 * (i % 8), 2.0 * (i // 8)], "goal": [1.5 * (i % 8), 2.0 * (i // 8) + 4]}
                  for i in range(PARALLEL_FROM)]})]
    import numba
    # A worker's numba reads the engine's one-thread setting before any task (offline/cluster.py's plugin): it
    # used to keep the core count and fail the first compile after a parallel crowd tick.
    assert set(cluster.run(lambda: numba.config.NUMBA_NUM_THREADS).values()) == {1}
    out = tmp_path / "batch"
    assert main(["synth", "--db", str(jlpm_db_path), "--crowd", *map(str, crowds), "-o", str(out),
                 "--address", cluster.scheduler.address, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["done"] == 3 and printed["failed"] == 0 and set(printed["metrics"]) == {"pair", "runner", "rows"}
    assert _visible(out) == [SUMMARY, "pair", "rows", "runner"]
    for path, agents in zip(crowds, (2, 1, PARALLEL_FROM)):
        single = tmp_path / f"single_{path.stem}"
        assert main(["synth", "--db", str(jlpm_db_path), "--crowd", str(path), "--out", str(single),
                     "--quiet"]) == 0
        _same_as_single(out / path.stem, single,
                        ["metrics.json"] + [f"agent_{i:03d}.bvh" for i in range(agents)])


def test_a_stopped_batch_leaves_its_folder_marked_incomplete(jlpm_db_path, tmp_path, monkeypatch):
    from motionmatch.offline import batch_synth
    for name in ("a", "b"):
        _write(tmp_path / f"{name}.json", {"duration": 1.0, "inputs": WALK_TURN[:1]})
    items = batch_synth.batch_items("scenario", [tmp_path / "a.json", tmp_path / "b.json"])
    real = batch_synth.run_item

    def stopped_on_b(item, *a, **k):
        if item.name == "b":
            raise KeyboardInterrupt
        return real(item, *a, **k)
    monkeypatch.setattr(batch_synth, "run_item", stopped_on_b)
    from motionmatch.runtime.settings_file import settings_from_dict
    out = tmp_path / "batch"
    with pytest.raises(KeyboardInterrupt):
        batch_synth.run_batch(items, jlpm_db_path, out, settings_from_dict({}), progress=False)
    # Here (no engine) one after another: a is whole, b never started, and the folder says so.
    assert _visible(out) == [INCOMPLETE_MARKER, "a"] and "metrics.json" in _visible(out / "a")


def test_batch_names_colliding_files_and_engine_flags_need_a_batch(jlpm_db_path, tmp_path, capsys):
    for d in ("x", "y"):
        (tmp_path / d).mkdir()
        _write(tmp_path / d / "walk.json", {"duration": 1.0, "inputs": WALK_TURN[:1]})
    assert main(["synth", "--db", str(jlpm_db_path), "--scenarios", str(tmp_path / "x"), str(tmp_path / "y"),
                 "-o", str(tmp_path / "o"), "--workers", "1"]) == 1
    assert "both named 'walk'" in capsys.readouterr().err
    assert main(["synth", "--db", str(jlpm_db_path), "--scenario", str(tmp_path / "x" / "walk.json"),
                 "-o", str(tmp_path / "o"), "--workers", "2"]) == 1
    assert "--workers spreads a batch" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
