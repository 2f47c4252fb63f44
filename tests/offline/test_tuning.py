"""Settings files, the distributed engine (a local Dask cluster on loopback) and `motionmatch tune`."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from motionmatch.cli import main
from motionmatch.runtime.settings_file import (SettingsError, dumps_settings, load_settings, save_settings,
                                               settings_from_dict)

ROOT = Path(__file__).resolve().parents[2]


def _scenario(path: Path, turn: tuple[float, float], duration: float = 3.0) -> Path:
    path.write_text(json.dumps({"duration": duration, "inputs": [
        {"t": 0.0, "move": [0.0, 1.0]}, {"t": duration / 2, "move": list(turn)}]}))
    return path


@pytest.fixture(scope="module")
def cluster():
    """One local two-worker cluster on loopback for the module (tasks that kill a worker are
    reported at once: allowed_failures=0)."""
    from motionmatch.offline.cluster import open_client
    with open_client(workers=2, allowed_failures=0) as client:
        yield client


@pytest.fixture(scope="module")
def tiny_scenarios(tmp_path_factory) -> list[Path]:
    d = tmp_path_factory.mktemp("scen")
    return [_scenario(d / "walk_right.json", (1.0, 0.0)), _scenario(d / "walk_back.json", (0.0, -1.0))]


# ---------------------------------------------------------------------------------------------
# settings files

def test_settings_file_round_trip(tmp_path):
    rs = settings_from_dict({"character": {"bias": 0.25, "inertialization": "quintic",
                                           "weights": {"hips_velocity": 2.0}},
                             "warp": {"stride_max": 1.4, "play_rate": True},
                             "controller": {"velocity_halflife": 0.09}})
    save_settings(tmp_path / "s.toml", rs.character, rs.controller, comment="round trip")
    back = load_settings(tmp_path / "s.toml")
    assert back.character.bias == 0.25 and back.character.inertialization == "quintic"
    assert back.character.weights == {"hips_velocity": 2.0}
    assert back.character.warp.stride_max == 1.4 and back.character.warp.play_rate is True
    assert back.controller.velocity_halflife == 0.09
    # Everything else is stored too and comes back unchanged.
    assert dumps_settings(back.character, back.controller, "round trip") == (tmp_path / "s.toml").read_text()


@pytest.mark.parametrize("text, words", [
    ("[character]\nbias = 0.2\nsearch_intervall = 0.1\n", ["[character]", "'search_intervall'"]),
    ("[controller]\nvelocity_halflife = 9.0\n", ["controller.velocity_halflife", "out of range", "maximum 5"]),
    ("[warp]\nstride_min = -1.0\n", ["warp.stride_min", "out of range", "minimum 0.1"]),
    ("[character]\nfoot_locking = 1\n", ["character.foot_locking", "true or false"]),
    ("[character]\ninertialization = \"cubic\"\n", ["character.inertialization", "spring"]),
    ("[character.weights]\nhips_velocity = 20.0\n", ["weights.hips_velocity", "out of range"]),
    ("[characters]\nbias = 0.1\n", ["unknown table", "characters"]),
    ("[character\n", ["not a TOML file"]),
])
def test_bad_settings_file_names_the_key(tmp_path, text, words):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(SettingsError) as e:
        load_settings(p)
    for w in words + [str(p)]:
        assert w in str(e.value)


def test_unknown_weight_channel_is_named(tmp_path):
    p = tmp_path / "w.toml"
    p.write_text("[character.weights]\nknee_velocity = 1.0\n")
    with pytest.raises(SettingsError, match="unknown channel 'knee_velocity'"):
        load_settings(p, channels=["hips_velocity"])


def test_synth_loads_settings_and_cli_reports_a_bad_file(jlpm_db_path, tmp_path, capsys):
    scen = _scenario(tmp_path / "s.json", (1.0, 0.0), 2.0)
    bad = tmp_path / "bad.toml"
    bad.write_text("[controller]\nrotation_halflife = 0.0\n")
    assert main(["synth", "--db", str(jlpm_db_path), "--scenario", str(scen), "--out", str(tmp_path / "o"),
                 "--settings", str(bad), "--quiet"]) == 1
    assert "rotation_halflife = 0.0 is out of range" in capsys.readouterr().err
    slow = tmp_path / "slow.toml"
    slow.write_text("[controller]\nvelocity_halflife = 1.5\nrotation_halflife = 1.5\n")
    out = {}
    for name, extra in (("default", []), ("slow", ["--settings", str(slow)])):
        assert main(["synth", "--db", str(jlpm_db_path), "--scenario", str(scen), "--out", str(tmp_path / name),
                     "--quiet"] + extra) == 0
        out[name] = json.loads((tmp_path / name / "metrics.json").read_text())
    # A sluggish controller makes the character slower to follow the turn.
    assert out["slow"]["responsiveness_s"] > out["default"]["responsiveness_s"]


# ---------------------------------------------------------------------------------------------
# the engine

@pytest.mark.slow
def test_local_cluster_on_loopback_matches_in_process_runs(cluster, jlpm_db_path, tiny_scenarios):
    from motionmatch.offline.cluster import ordered_map, worker_count
    from motionmatch.offline.quality import quality_runs

    assert cluster.scheduler.address.startswith("tcp://127.0.0.1:")
    assert worker_count(cluster) == 2
    assert all(a.startswith("tcp://127.0.0.1:") for a in cluster.nthreads())
    assert os.getpid() not in set(ordered_map(cluster, lambda _: os.getpid(), range(8)))

    def opened(_):
        from motionmatch.offline.cluster import worker_database
        db = worker_database(jlpm_db_path)
        return os.getpid(), id(db), isinstance(db.positions.base, np.memmap)
    seen = list(ordered_map(cluster, opened, range(6)))
    assert all(mapped for _, _, mapped in seen)                 # memory-mapped, not read into memory
    assert len({(pid, ident) for pid, ident, _ in seen}) == len({pid for pid, _, _ in seen})  # once per worker
    rs = settings_from_dict({})
    here = quality_runs(jlpm_db_path, tiny_scenarios, rs)
    there = quality_runs(jlpm_db_path, tiny_scenarios, rs, address=cluster.scheduler.address)
    assert list(there) == ["walk_right", "walk_back"]
    for name in here:   # runs are deterministic: the same figures wherever they ran
        for key in ("foot_sliding_cm_s", "trajectory_error_cm", "responsiveness_s", "pops"):
            assert here[name][key] == there[name][key]
        assert 0.0 < here[name]["pops"]["ratio"] < 5.0


@pytest.mark.slow
def test_build_on_the_engine_equals_a_local_build(cluster, bandai_dir, tmp_path):
    from motionmatch.posedb.database import load_database
    files = [str(p) for p in sorted((bandai_dir / "dataset-2").glob("dataset-2_walk_normal_*.bvh"))[:20]]
    assert len(files) == 20      # two chunks of files
    assert main(["build", *files, "-o", str(tmp_path / "a.npz"), "--quiet", "--no-mirror"]) == 0
    assert main(["build", *files, "-o", str(tmp_path / "b.npz"), "--quiet", "--no-mirror",
                 "--address", cluster.scheduler.address]) == 0
    a, b = load_database(tmp_path / "a.npz"), load_database(tmp_path / "b.npz")
    assert a.range_names == b.range_names and len(a.range_names) == 20
    np.testing.assert_array_equal(a.positions, b.positions)
    np.testing.assert_array_equal(a.features.raw, b.features.raw)


# ---------------------------------------------------------------------------------------------
# tune

@pytest.mark.slow
def test_two_trial_tune_writes_a_loadable_settings_file_and_resumes(cluster, jlpm_db_path, tiny_scenarios, tmp_path,
                                                                    capsys):
    import optuna
    from motionmatch.runtime.settings import CharacterSettings
    from motionmatch.offline.tuning import STUDY_NAME

    out = tmp_path / "tuned.toml"
    # On the module's running cluster (warm workers); `--workers K` starts the same kind of cluster.
    args = ["tune", "--db", str(jlpm_db_path), "--scenarios", *map(str, tiny_scenarios), "-o", str(out),
            "--address", cluster.scheduler.address]
    assert main(args + ["--trials", "2"]) == 0
    rs = load_settings(out)
    assert rs.character.search_interval > 0 and rs.controller.velocity_halflife > 0
    assert (tmp_path / "tuned.pareto.png").stat().st_size > 10_000
    table = (tmp_path / "tuned.table.md").read_text()
    assert "| walk_right |" in table and "| walk_back |" in table
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / "tuned.study.jsonl")))
    first = optuna.load_study(study_name=STUDY_NAME, storage=storage).trials
    assert [t.state.name for t in first] == ["COMPLETE", "COMPLETE"]
    assert first[0].user_attrs["defaults"] and first[0].params["character.search_interval"] == pytest.approx(
        CharacterSettings().search_interval)
    # Asking for three trials runs one more and keeps the first two.
    assert main(args + ["--trials", "3"]) == 0
    again = optuna.load_study(study_name=STUDY_NAME, storage=storage).trials
    assert len(again) == 3 and [t.values for t in again[:2]] == [t.values for t in first]
    assert "trial 2:" in capsys.readouterr().err
    out.unlink()
    assert main(args + ["--trials", "3"]) == 0      # the same number: no new trial, the outputs again
    assert len(optuna.load_study(study_name=STUDY_NAME, storage=storage).trials) == 3
    assert load_settings(out).character.search_interval > 0


@pytest.mark.slow
def test_a_trial_that_raises_or_kills_its_worker_is_recorded_and_the_study_goes_on(cluster, jlpm_db_path,
                                                                                   tiny_scenarios, tmp_path):
    from motionmatch.runtime.settings_file import settings_to_dict
    from motionmatch.offline.tuning import evaluate_trial, open_study, run_study, search_space

    marker = tmp_path / "calls"
    marker.mkdir()

    def flaky(db_path, scenario_paths, tables):
        # The first call raises, the second takes its worker process down, the rest run for real.
        n = len(list(marker.iterdir()))
        (marker / str(n)).touch()
        if n == 0:
            raise RuntimeError("bad settings")
        if n == 1:
            os._exit(3)
        return evaluate_trial(db_path, scenario_paths, tables)

    study = open_study(tmp_path / "study.jsonl")
    space = search_space()
    base = settings_to_dict(*settings_from_dict({}))
    run_study(study, space, base, str(jlpm_db_path), tiny_scenarios[:1], 4, cluster, {}, log=lambda s: None,
              evaluate=flaky)
    states = [t.state.name for t in study.trials]
    assert sorted(states) == ["COMPLETE", "COMPLETE", "FAIL", "FAIL"] and states[0] == "FAIL"
    errors = [t.user_attrs.get("error", "") for t in study.trials]
    assert "RuntimeError: bad settings" in errors[0]
    assert sum("KilledWorker" in e for e in errors) == 1
    assert all(t.values[0] > 0.0 for t in study.trials if t.state.name == "COMPLETE")


@pytest.mark.slow
def test_only_searches_the_named_tables_and_keys_the_rest_stays_at_the_start(cluster, jlpm_db, jlpm_db_path,
                                                                              tiny_scenarios, tmp_path, capsys):
    from motionmatch.runtime.settings_file import settings_to_dict
    from motionmatch.offline.tuning import evaluate_trial, open_study, restrict, run_study, search_space

    channels = list(jlpm_db.features.schema.names)
    start = settings_from_dict({"character": {"bias": 0.2}, "controller": {"velocity_halflife": 0.12}})
    space = restrict(search_space(channels), ["weights", "search_interval"])
    assert {p.name for p in space} == {"character.search_interval", "weights.foot_position", "weights.foot_velocity",
                                       "weights.hips_velocity", "weights.trajectory_position",
                                       "weights.trajectory_direction"}
    seen = tmp_path / "tables"
    seen.mkdir()

    def recording(db_path, scenario_paths, tables):
        (seen / f"{len(list(seen.iterdir()))}.json").write_text(json.dumps(tables))
        return evaluate_trial(db_path, scenario_paths, tables)

    base = settings_to_dict(*start)
    study = open_study(tmp_path / "study.jsonl", seed=3)
    run_study(study, space, base, str(jlpm_db_path), tiny_scenarios[:1], 3, cluster, {}, log=lambda s: None,
              evaluate=recording)
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 3
    for f in seen.iterdir():
        tables = json.loads(f.read_text())
        weights = tables["character"].pop("weights")
        assert set(weights) == set(channels)          # every searched group, both sides of a pair
        assert weights["left_foot_position"] == weights["right_foot_position"]
        interval = tables["character"].pop("search_interval")
        assert 0.04 <= interval <= 0.2
        unchanged = {**base, "character": {k: v for k, v in base["character"].items()
                                           if k not in ("weights", "search_interval")}}
        assert json.loads(json.dumps(unchanged)) == tables      # everything else: the start's values
    assert len({f.read_text() for f in seen.iterdir()}) == 3

    # A name that is not searched is an error listing the valid ones, before any trial runs.
    args = ["tune", "--db", str(jlpm_db_path), "--scenarios", str(tiny_scenarios[0]), "-o", str(tmp_path / "t.toml"),
            "--trials", "1", "--address", cluster.scheduler.address]
    assert main(args + ["--only", "weights", "foot_positions"]) == 1
    err = capsys.readouterr().err
    assert "foot_positions" in err and "foot_position," in err and "controller" in err and "bias" in err
    assert not (tmp_path / "t.study.jsonl").exists()
    # A study resumes only over the settings it searched.
    assert main(args + ["--only", "bias"]) == 0
    assert load_settings(tmp_path / "t.toml").character.bias == settings_from_dict({}).character.bias  # trial 0
    assert main(args + ["--only", "weights"]) == 1
    assert "resume it with the same --only" in capsys.readouterr().err


def test_tuning_and_validation_sets_both_walk_backward_and_strafe_diagonally():
    from motionmatch.offline.quality import scenario_files
    from motionmatch.offline.scenario import load_scenario

    def kinds(lst):
        found = set()
        for path in scenario_files([ROOT / "scenarios" / lst]):
            assert path.stem != "random_10min"          # 600 s: in neither set
            for _, inp in load_scenario(path).inputs:
                x, z = inp.move
                facing_held = inp.strafe or inp.look is not None
                if facing_held and z < -0.5 and abs(x) > 0.3:
                    found.add("backward diagonal")
                elif facing_held and z < -0.5:
                    found.add("backward")
                if facing_held and z > 0.3 and abs(x) > 0.3:
                    found.add("forward diagonal strafe")
        return found
    tuning, validation = kinds("tuning.list"), kinds("validation.list")
    assert {"backward", "backward diagonal", "forward diagonal strafe"} <= tuning & validation
    assert not set(scenario_files([ROOT / "scenarios" / "tuning.list"])) & set(
        scenario_files([ROOT / "scenarios" / "validation.list"]))


def _finished_trial(number, resp, objectives, scenarios, defaults=False):
    import optuna
    return optuna.trial.create_trial(value=resp, params={}, distributions={}, user_attrs={
        "defaults": defaults, "objectives": {"responsiveness_s": resp, **objectives}, "scenarios": scenarios})


def test_pick_is_the_most_responsive_trial_no_worse_than_the_defaults_on_every_guard():
    import optuna
    from motionmatch.offline.tuning import constraints, pick

    base_obj = {"trajectory_cm": 3.0, "sliding_ratio": 0.8, "pops_ratio": 1.0, "tracking_miss": 0.1}
    base_rows = {"walk": {"trajectory_cm": 3.0, "sliding_cm_s": 6.0, "pops_ratio": 1.0},
                 "back": {"trajectory_cm": 3.0, "sliding_cm_s": 1.0, "pops_ratio": 1.0}}
    # Means better everywhere, but backward walking slides 2.5x: the failure a mean hides.
    hides = {"walk": {**base_rows["walk"], "sliding_cm_s": 3.0}, "back": {**base_rows["back"], "sliding_cm_s": 2.5}}
    better = {"trajectory_cm": 2.5, "sliding_ratio": 0.6, "pops_ratio": 0.9, "tracking_miss": 0.08}
    slides = {**better, "sliding_ratio": 0.81}                    # the mean sliding worse than the defaults
    ok_rows = {"walk": {**base_rows["walk"], "sliding_cm_s": 5.5}, "back": {**base_rows["back"], "sliding_cm_s": 1.1}}
    c = constraints(better, hides, base_obj, base_rows)
    assert c["sliding_cm_s_per_scenario"] > 0 and all(c[k] <= 0 for k in c if k != "sliding_cm_s_per_scenario")
    assert all(v <= 0 for v in constraints(better, ok_rows, base_obj, base_rows).values())
    # Facing the look for a much shorter share of the held time on one scenario is a failure too.
    facing_base = {k: {**r, "facing_ok": 0.99} for k, r in base_rows.items()}
    turns_away = {k: {**r, "facing_ok": 0.84 if k == "back" else 0.99} for k, r in ok_rows.items()}
    c = constraints(better, turns_away, base_obj, facing_base)
    assert c["facing_ok_per_scenario"] > 0 and all(c[k] <= 0 for k in c if k != "facing_ok_per_scenario")
    assert constraints(better, {k: {**r, "facing_ok": 0.97} for k, r in ok_rows.items()}, base_obj,
                       facing_base)["facing_ok_per_scenario"] <= 0

    study = optuna.create_study(direction="minimize")
    study.add_trials([_finished_trial(0, 0.40, base_obj, base_rows, defaults=True),
                      _finished_trial(1, 0.20, better, hides), _finished_trial(2, 0.25, slides, ok_rows),
                      _finished_trial(3, 0.33, better, ok_rows), _finished_trial(4, 0.36, better, ok_rows)])
    chosen, defaults = pick(study)
    assert defaults.number == 0 and chosen.number == 3
    # Nothing feasible more responsive than the defaults: the defaults stay.
    study2 = optuna.create_study(direction="minimize")
    study2.add_trials([_finished_trial(0, 0.40, base_obj, base_rows, defaults=True),
                       _finished_trial(1, 0.20, better, hides), _finished_trial(2, 0.45, better, ok_rows)])
    assert pick(study2)[0].number == 0


def test_bench_quality_compare_shows_before_and_after_per_scenario(jlpm_db_path, tiny_scenarios, tmp_path, capsys):
    before = tmp_path / "slow.toml"
    before.write_text("[controller]\nvelocity_halflife = 0.4\nrotation_halflife = 0.4\n")
    assert main(["bench", "quality", "--db", str(jlpm_db_path), "--scenarios", *map(str, tiny_scenarios),
                 "--compare", str(before), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out["before"]) == list(out["after"]) == ["walk_right", "walk_back"]
    # A controller four times slower answers the stick later: the defaults are more responsive.
    for name in out["before"]:
        assert out["after"][name]["responsiveness_s"] < out["before"][name]["responsiveness_s"]
    assert main(["bench", "quality", "--db", str(jlpm_db_path), "--scenarios", str(tiny_scenarios[0]),
                 "--compare", str(before)]) == 0
    text = capsys.readouterr().out
    assert f"### {before} -> defaults" in text and "| walk_right | " in text and "| **mean** |" in text
    assert "Better: " in text


# ---------------------------------------------------------------------------------------------
# the app: characters start from --settings; the live settings download as a settings file

def test_app_starts_from_a_settings_file_and_saves_its_live_settings(jlpm_db, tmp_path):
    import aiohttp
    from motionmatch.app import backend as app_backend
    from motionmatch.app import server as srv
    from app_fixtures import Client, ServerThread, run

    start = tmp_path / "start.toml"
    start.write_text("[character]\nbias = 0.3\n[controller]\nvelocity_halflife = 0.2\n")
    server = ServerThread(srv.make_app(app_backend.runtime_backend(jlpm_db, settings=load_settings(start))))
    try:
        async def go():
            async with aiohttp.ClientSession() as s:
                c = await Client.open(s, server.url)
                assert c.hello["settings"]["bias"] == 0.3
                await c.ws.send_str(json.dumps({"type": "settings", "halflife": 0.2, "warp_limit_deg": 45}))
                await c.next_text("settings")
                async with s.get(f"{server.url}/api/session/{c.hello['session']}/settings.toml") as r:
                    assert r.status == 200 and "attachment" in r.headers["Content-Disposition"]
                    (tmp_path / "saved.toml").write_text(await r.text())
                async with s.get(f"{server.url}/api/session/nope/settings.toml") as r:
                    assert r.status == 404
                await c.ws.close()
        run(go())
    finally:
        server.stop()
    saved = load_settings(tmp_path / "saved.toml", channels=jlpm_db.features.schema.names)
    assert saved.character.bias == 0.3 and saved.character.halflife == 0.2
    assert saved.character.warp.orientation_limit_deg == 45
    assert saved.controller.velocity_halflife == 0.2


def test_search_space_moves_channel_weights_in_pairs_and_the_transition_method():
    from motionmatch.posedb.features import default_schema
    from motionmatch.runtime.settings_file import settings_to_dict
    from motionmatch.offline.tuning import default_params, search_space, suggest, trial_tables

    schema = default_schema()
    base = settings_from_dict({"character": {"weights": {"hips_velocity": 2.0}}})
    space = search_space(schema.names)
    names = {p.name for p in space}
    assert {"weights.foot_position", "weights.trajectory_direction", "character.inertialization",
            "character.clamping", "character.adjustment_rotation_halflife"} <= names
    # Only groups whose channels the database has are searched (a pair needs both sides).
    assert [p.key for p in search_space(["hips_velocity", "left_foot_position"])
            if p.table == "weights"] == ["hips_velocity"]
    params = default_params(space, base, {c.name: c.weight for c in schema.channels})
    w = {c.name: c.weight for c in schema.channels}
    assert params["weights.foot_position"] == w["left_foot_position"]
    assert params["weights.trajectory_direction"] == w["trajectory_direction"]
    assert params["weights.hips_velocity"] == 2.0 and params["character.inertialization"] == "spring"

    chosen = {**params, "weights.foot_position": 1.25, "character.inertialization": "dead_blending"}

    class Finished:             # a finished trial's parameters, as trial_tables reads them
        params = chosen
    tables = trial_tables(Finished, space, settings_to_dict(*base))
    rs = settings_from_dict(tables, "trial", channels=schema.names)
    assert rs.character.weights["left_foot_position"] == rs.character.weights["right_foot_position"] == 1.25
    assert rs.character.weights["hips_velocity"] == 2.0 and rs.character.inertialization == "dead_blending"
    # Suggesting from the same parameters writes the same tables.
    assert suggest(type("T", (), {"suggest_float": lambda self, n, lo, hi, log=False: Finished.params[n],
                                  "suggest_categorical": lambda self, n, c: Finished.params[n]})(),
                   space, settings_to_dict(*base)) == tables
