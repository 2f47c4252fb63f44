"""`motionmatch generate`: labelled datasets from a spec (offline/dataset.py): labels pandas reads alone,
identical reruns, resuming, a killed worker, and bad specs refused before any work."""
from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from motionmatch.cli import main
from motionmatch.offline.dataset import LABEL_COLUMNS, SEQUENCES, folder_name
from cluster_fixtures import kill_a_worker_once_it_runs_a_task

# Two tag sets of the jlpm22 database (it has one actor and no named styles): mirrored clips and the rest.
SPEC = """sequences = 3
duration_s = 3.0
seed = 5
formats = ["bvh", "glb", "usdc"]
[styles]
mirrored = 1
"!mirrored" = 1
[drivers]
goals = 1
path = 1
stick = 1
[layout]
kind = "random"
count = [1, 3]
radius_m = [0.3, 0.6]
arena_m = 10.0
"""


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def spec_file(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("spec") / "spec.toml"
    p.write_text(SPEC)
    return p


@pytest.fixture(scope="module")
def dataset(jlpm_db_path, spec_file, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ds") / "out"
    assert main(["generate", str(spec_file), "-o", str(out), "--db", str(jlpm_db_path), "--quiet"]) == 0
    return out


def test_labels_load_with_pandas_alone_and_say_what_played(dataset, jlpm_db):
    import pandas as pd
    manifest = pd.read_csv(dataset / "manifest.csv", keep_default_na=False)
    assert list(manifest["sequence"]) == [0, 1, 2] and (manifest["frames"] == 180).all()
    assert set(manifest["driver"]) <= {"goals", "path", "stick"} and set(manifest["style"]) <= {"mirrored", "!mirrored"}
    joints = jlpm_db.skeleton.names[1:]
    for row in manifest.itertuples():
        folder = dataset / row.folder
        assert {p.name for p in folder.iterdir()} == {"motion.bvh", "motion.glb", "motion.usdc", "labels.csv.gz",
                                                     "scenario.json", "summary.json"}
        labels = pd.read_csv(folder / "labels.csv.gz", keep_default_na=False)
        assert list(labels.columns) == [*LABEL_COLUMNS, *(f"{j}_{a}" for j in joints for a in "xyz")]
        assert len(labels) == 180 and labels["frame"].tolist() == list(range(180))
        assert set(labels["gait"]) <= {"stand", "walk", "run"} and set(labels["contact_left"]) <= {0, 1}
        # The tag set asked for is what played: every frame from a clip it selects.
        mirrored = labels["clip"].str.endswith("(mirrored)")
        assert mirrored.all() if row.style == "mirrored" else not mirrored.any(), row.style
        sources = {n: "+".join(t.removeprefix("source:") for t in tags if t.startswith("source:"))
                   for n, tags in zip(jlpm_db.range_names, jlpm_db.range_tags)}
        assert (labels["source"] == labels["clip"].map(sources)).all()
        # Labels agree with themselves: the hips stand about a metre up, the speed is the root velocity's.
        assert labels["Hips_y"].between(0.7, 1.2).all()
        assert (abs((labels["root_vx"] ** 2 + labels["root_vz"] ** 2) ** 0.5 - labels["speed_m_s"]) < 1e-4).all()
        # Events are the database's foot plants on the playing frames: some in 3 s of motion.
        assert labels["events"].str.contains("foot_plant").any()
        scenario = json.loads((folder / "scenario.json").read_text())
        assert len(scenario.get("obstacles", [])) == row.obstacles and 1 <= row.obstacles <= 3
        assert row.obstacle_penetration_cm < 5.0
    card = (dataset / "README.md").read_text()
    assert "MIT licence" in card and "statistics.png" in card and (dataset / "statistics.png").stat().st_size > 5000


def test_a_second_run_gives_identical_files_and_a_resumed_run_completes_the_rest(dataset, spec_file, jlpm_db_path,
                                                                                tmp_path, capsys):
    again = tmp_path / "again"
    assert main(["generate", str(spec_file), "-o", str(again), "--db", str(jlpm_db_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["made"] == 3
    assert _files(again) == _files(dataset)
    # A stopped run: one sequence folder missing, the manifest and card not written yet.
    import shutil
    shutil.rmtree(again / SEQUENCES / folder_name(1))
    (again / "manifest.csv").unlink()
    assert main(["generate", str(spec_file), "-o", str(again), "--db", str(jlpm_db_path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["made"], summary["kept"]) == (1, 2)
    assert _files(again) == _files(dataset)


@pytest.mark.parametrize("change, needle", [
    ('sequences = -3', "sequences: expected an integer in [1, 100000], got -3"),
    ('[styles]\nhappy = 1', "styles.'happy'"),
    ('[drivers]\njetpack = 1', "drivers.jetpack: unknown"),
    ('duration_s = 1e9', "duration_s: expected a number in [1, 600]"),
    ('[layout]\nkind = "random"\ncount = [40, 40]\nradius_m = [1.0, 2.0]\narena_m = 10.0', "layout: 40 obstacles"),
    ('colour = "red"', "colour: unknown field"),
])
def test_a_bad_spec_is_one_error_naming_the_field_before_any_work(change, needle, jlpm_db_path, tmp_path, capsys):
    spec = tmp_path / "bad.toml"
    spec.write_text(change if change.startswith("sequences") else f"sequences = 2\n{change}")
    out = tmp_path / "out"
    assert main(["generate", str(spec), "-o", str(out), "--db", str(jlpm_db_path)]) == 1
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and err.count("motionmatch: error") == 1, err
    assert not out.exists()


def test_an_output_folder_of_another_spec_is_refused(dataset, jlpm_db_path, tmp_path, capsys):
    other = tmp_path / "other.toml"
    other.write_text(SPEC.replace("seed = 5", "seed = 6"))
    before = _files(dataset)
    assert main(["generate", str(other), "-o", str(dataset), "--db", str(jlpm_db_path)]) == 1
    assert "holds a dataset of another spec" in capsys.readouterr().err and _files(dataset) == before


@pytest.mark.slow
def test_a_worker_killed_mid_dataset_loses_and_duplicates_nothing(dataset, spec_file, jlpm_db_path, tmp_path):
    from motionmatch.offline.cluster import open_client
    out = tmp_path / "cluster"
    with open_client(workers=2) as client:
        killed: list = []
        killer = threading.Thread(target=kill_a_worker_once_it_runs_a_task, args=(client, killed))
        killer.start()
        code = main(["generate", str(spec_file), "-o", str(out), "--db", str(jlpm_db_path), "--quiet",
                     "--address", client.scheduler.address])
        killer.join()
    assert killed and code == 0
    # Every sequence once, each as the serial run wrote it; no staging folder left behind.
    assert _files(out) == _files(dataset)
    assert not [p for p in out.rglob(".partial-*")]
