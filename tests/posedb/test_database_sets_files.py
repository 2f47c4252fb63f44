"""Database sets across several files (issue 29, docs/ANNOTATIONS.md "Several files"): database files of one
skeleton and feature schema join into one runtime database whose clips carry `db:NAME` of their file, so a
set can name a file with its own weights; files that do not fit are refused, naming the file and what
differs."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import BANDAI, _need

from motionmatch.cli import main
from motionmatch.posedb.database import (BuildSettings, DatabaseError, build_database, load_database,
                                         save_database)
from motionmatch.posedb.database_join import load_databases
from motionmatch.runtime.character import Character
from motionmatch.runtime.controller import GamepadInput
from motionmatch.runtime.database_sets import parse_sets
from motionmatch.runtime.matching import FORCE, TIMER

D1 = BANDAI / "dataset-1"


def _build(names, path):
    db = build_database([_need(D1) / f"dataset-1_{n}.bvh" for n in names], BuildSettings(), progress=False)
    save_database(db, path)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """locomotion.npz (two walks, a run) and actions.npz (a walk and a side-step: still locomotion, so a
    character under a stick keeps moving in either), each mirrored."""
    d = tmp_path_factory.mktemp("sets")
    return (_build(("walk_active_001", "walk_active_002", "run_active_001"), d / "locomotion.npz"),
            _build(("walk_normal_001", "walk-left_active_001"), d / "actions.npz"))


@pytest.fixture(scope="module")
def joined(files):
    return load_databases(files)


def file_of(db, frame):
    return [t for t in db.range_tags[db.range_of(frame)] if t.startswith("db:")]


def test_files_join_with_a_tag_per_file(files, joined):
    a, b = (load_database(f) for f in files)
    assert joined.num_frames == a.num_frames + b.num_frames
    assert joined.range_names == a.range_names + b.range_names
    assert all(t[-1] == "db:locomotion" for t in joined.range_tags[:len(a.range_names)])
    assert all(t[-1] == "db:actions" for t in joined.range_tags[len(a.range_names):])
    assert joined.range_tags[0][:-1] == a.range_tags[0]                       # the clip's own tags stay
    np.testing.assert_array_equal(joined.features.raw[a.num_frames:], b.features.raw)
    np.testing.assert_array_equal(joined.range_starts[len(a.range_names):], b.range_starts + a.num_frames)
    assert [j["tag"] for j in joined.meta["joined"]] == ["db:locomotion", "db:actions"]
    assert load_databases(files[:1]).range_tags == a.range_tags             # one file: as it was


def walking(db, spec):
    ch = Character(db)
    ch.use_set(spec)
    for _ in range(60):
        ch.step(GamepadInput(move=(0.0, 0.8)))
        assert file_of(db, ch.frame) == ["db:" + spec.name]
    return ch


def test_a_set_naming_a_file_plays_only_its_frames_with_interrupt(joined):
    sets = parse_sets({"locomotion": {"tags": "db:locomotion"},
                       "actions": {"tags": "db:actions", "weights": {"hips_velocity": 2.0}}})
    ch = walking(joined, sets["locomotion"])
    ch.use_set(sets["actions"], interrupt=True)
    for _ in range(120):
        ch.step(GamepadInput(move=(0.0, 0.8)))
        assert file_of(joined, ch.frame) == ["db:actions"]                  # from the very next tick
    assert ch.settings.weights["hips_velocity"] == 2.0


def test_a_set_naming_a_file_takes_over_at_the_next_search_without_interrupt(joined):
    sets = parse_sets({"locomotion": {"tags": "db:locomotion"}, "actions": {"tags": "db:actions"}})
    ch = walking(joined, sets["locomotion"])
    ch.crowd.search_state[0, TIMER] = 0.05             # the next search of its own phase is 3 ticks away
    ch.use_set(sets["actions"], interrupt=False)
    assert ch.crowd.search_state[0, FORCE] == 0.0
    seen = []
    for _ in range(120):
        ch.step(GamepadInput(move=(0.0, 0.8)))
        seen.append(file_of(joined, ch.frame))
    assert seen[0] == ["db:locomotion"] and seen[1] == ["db:locomotion"]
    first = seen.index(["db:actions"])
    assert first <= 4 and all(s == ["db:actions"] for s in seen[first:])


def test_files_that_do_not_fit_are_refused_naming_the_file(files, tmp_path, walk_bvh):
    other = build_database([walk_bvh], BuildSettings(mirror=False), progress=False)     # jlpm22's skeleton
    jl = tmp_path / "jlpm.npz"
    save_database(other, jl)
    with pytest.raises(DatabaseError, match=r"jlpm\.npz: cannot join locomotion\.npz: skeleton differs"):
        load_databases([files[0], jl])
    with pytest.raises(DatabaseError, match="already taken"):
        load_databases([files[0], files[0]])


def test_cli_synth_joins_repeated_db_flags(files, tmp_path):
    scen = tmp_path / "s.json"
    scen.write_text('{"duration": 2.0, "sets": {"a": {"tags": "db:actions"}}, '
                    '"inputs": [{"t": 0.0, "move": [0, 0.8]}, {"t": 0.0, "set": "a"}]}')
    assert main(["synth", "--db", str(files[0]), "--db", str(files[1]), "--scenario", str(scen),
                 "--out", str(tmp_path / "out"), "--quiet"]) == 0
    assert (tmp_path / "out" / "motion.bvh").is_file()


def test_a_batch_joins_repeated_db_flags_as_a_single_run_does(files, tmp_path):
    """`synth --scenarios DIR --db A --db B`: every scenario's folder is what `synth --scenario` writes with the
    same two files (here, without workers: the items run in this process through cluster.worker_database)."""
    import json
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    (scenarios / "in_actions.json").write_text(
        '{"duration": 1.5, "sets": {"a": {"tags": "db:actions"}}, '
        '"inputs": [{"t": 0.0, "move": [0, 0.8]}, {"t": 0.0, "set": "a"}]}')
    (scenarios / "walk.json").write_text('{"duration": 1.0, "inputs": [{"t": 0.0, "move": [0.5, 0.5]}]}')
    dbs = ["--db", str(files[0]), "--db", str(files[1])]
    assert main(["synth", *dbs, "--scenarios", str(scenarios), "--out", str(tmp_path / "batch"), "--quiet"]) == 0
    summary = json.loads((tmp_path / "batch" / "batch.json").read_text())
    assert summary["done"] == 2 and summary["failed"] == 0
    for name in ("in_actions", "walk"):
        single = tmp_path / f"single_{name}"
        assert main(["synth", *dbs, "--scenario", str(scenarios / f"{name}.json"), "--out", str(single),
                     "--quiet"]) == 0
        assert (tmp_path / "batch" / name / "motion.bvh").read_bytes() == (single / "motion.bvh").read_bytes()
