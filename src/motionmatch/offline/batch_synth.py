"""Batches of scenario or crowd files synthesized as `synth` does one: here, one after another, or spread
over the distributed engine (offline/cluster.py: `--workers K` or `--address`). One output folder per file under
the batch folder, named by the file's stem, written exactly as a single `synth --scenario` / `--crowd`
writes its folder (the same functions, write_scenario and write_crowd, through a staging folder).

Faults lose nothing and leave nothing looking whole: an item's folder holds either its earlier outputs
or the new complete ones (a killed item leaves a hidden `.partial-*` folder, files/output_folder.py); the
batch folder holds an INCOMPLETE file from the start of a batch until its end (a killed batch leaves it)
and then batch.json, written whole, naming each item done or failed with its error. A failing item (a
bad file, an error, a task that took its worker down twice) is reported by name and the others go on.

With `--address`, the workers read the database and the input files and write the outputs at the paths
this machine names: the machines share a file system, as for `tune`.
"""
from __future__ import annotations

import copy
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..files.atomic_file import replacing
from ..files.output_folder import INCOMPLETE_MARKER, staged_output
from .synth import synthesize
from .crowd_synth import synthesize_crowd
from .cluster import open_client, worker_count, worker_database
from .quality import scenario_files
from .scenario import load_scenario
from .crowd_synth import check_agents, load_crowd
from ..body.export import export_gltf
from ..io.bvh import read_bvh

SCENARIO_STALE = ("motion.glb", "terrain.npy")      # outputs only some runs write
CROWD_STALE = ("agent_*.bvh",)                      # a smaller crowd must not leave a larger one's agents
SUMMARY = "batch.json"
# Per-run timings in metrics.json (microseconds of this machine's clock): the only figures two runs of
# the same input do not share.
TIMING_KEYS = ("search_us", "frame_us", "tick_us")


@dataclass(frozen=True)
class Item:
    """One file of a batch: kind "scenario" or "crowd", its output folder's name, its path."""
    kind: str
    name: str
    path: str


def batch_items(kind: str, specs) -> list[Item]:
    """The files of a batch, in order: scenario folders (their *.json), files and .list files
    (quality.scenario_files), or crowd folders (their *.json) and files. ValueError when two share a
    name (their output folders would collide) or none is found."""
    flag = "--scenarios" if kind == "scenario" else "--crowd"
    if kind == "scenario":
        try:
            paths = scenario_files(specs)
        except FileNotFoundError as e:
            raise ValueError(f"{flag}: {e}") from None
    else:
        paths = []
        for spec in map(Path, specs):
            if spec.is_dir():
                paths += sorted(spec.glob("*.json"))
            elif spec.is_file():
                paths.append(spec)
            else:
                raise ValueError(f"{flag} {spec}: no such crowd file or folder")
        if not paths:
            raise ValueError(f"{flag}: no crowd files (*.json) in {', '.join(map(str, specs))}")
    seen: dict[str, Path] = {}
    for p in paths:
        if p.stem in seen:
            raise ValueError(f"{flag}: {seen[p.stem]} and {p} are both named {p.stem!r}: each file gets the "
                             f"output folder of its name, so names must differ")
        seen[p.stem] = p
    return [Item(kind, p.stem, str(p.resolve())) for p in paths]


def write_scenario(db, scenario, out, settings, progress: bool = False, retarget_to=None, retarget_map=None,
                   gltf: bool = False) -> dict:
    """`synth --scenario`: run `scenario` (path or Scenario) with RuntimeSettings `settings` and fill `out`
    with motion.bvh, metrics.json, trajectory.png (and motion.glb with gltf) through a staging folder;
    returns the metrics."""
    with staged_output(out, stale=SCENARIO_STALE) as stage:
        metrics = synthesize(db, scenario, stage, settings.character, progress=progress, retarget_to=retarget_to,
                             retarget_map=retarget_map, controller_settings=settings.controller)
        if gltf:
            export_gltf(read_bvh(stage / "motion.bvh"), stage / "motion.glb")
    return metrics


def write_crowd(db, spec, out, character, progress: bool = False) -> dict:
    """`synth --crowd`: run CrowdSpec `spec` with CharacterSettings `character` and fill `out` with
    agent_000.bvh ..., metrics.json, crowd.png through a staging folder; returns the metrics."""
    with staged_output(out, stale=CROWD_STALE) as stage:
        return synthesize_crowd(db, spec, stage, character, progress=progress)


def run_item(item: Item, db_path, out: str, settings, options: dict) -> dict:
    """One item into out/item.name, on an engine worker or here (the database opened once per process,
    memory-mapped; db_path: one file or a list of files joined, cluster.worker_database). settings:
    RuntimeSettings (copied: a run sets the tag filter); options:
    write_scenario's retarget_to, retarget_map, gltf. Returns {"metrics", "seconds", "pid"}."""
    t0 = time.perf_counter()
    db = worker_database(db_path)
    rs = copy.deepcopy(settings)
    target = Path(out) / item.name
    if item.kind == "scenario":
        scenario = load_scenario(item.path)         # a bad file fails before its folder is made
        metrics = write_scenario(db, scenario, target, rs, **options)
    else:
        spec = load_crowd(item.path)
        check_agents(db, spec, item.path)
        metrics = write_crowd(db, spec, target, rs.character)
    return {"metrics": metrics, "seconds": round(time.perf_counter() - t0, 3), "pid": os.getpid()}


def run_batch(items: list[Item], db_path, out, settings, options: dict | None = None, workers: int | None = None,
              address: str | None = None, progress: bool = True) -> dict:
    """Synthesize every item into out/NAME (see the module docstring): on the engine with `workers` (a
    local cluster) or `address`, else here one after another. db_path: a database file or a list of files
    joined as one (repeated `--db`). Returns the summary batch.json holds:
    {"items": [{"name", "kind", "path", "status": "done"|"failed", "seconds" | "error"}], "done",
    "failed", "workers", "seconds" (wall clock, engine start included), "items_per_minute"}; metrics of
    the done items in "metrics" {name: metrics} (not in batch.json: each folder has its metrics.json)."""
    from tqdm import tqdm

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / SUMMARY).unlink(missing_ok=True)
    marker = out / INCOMPLETE_MARKER
    marker.write_text("a batch is running (or was stopped): until batch.json appears and this file goes, some "
                      "folders may be missing or hold an earlier run's outputs\n")
    options = options or {}
    db_path = str(db_path) if isinstance(db_path, (str, Path)) else [str(p) for p in db_path]
    rows: dict[str, dict] = {}
    metrics: dict[str, dict] = {}
    t0 = time.perf_counter()
    bar = tqdm(total=len(items), desc=f"{items[0].kind if items else 'item'}s", unit="item",
               disable=not progress, file=sys.stderr)

    def record(item: Item, result=None, error: BaseException | None = None) -> None:
        row = {"name": item.name, "kind": item.kind, "path": item.path}
        if error is None:
            row.update(status="done", seconds=result["seconds"])
            metrics[item.name] = result["metrics"]
        else:
            row.update(status="failed", error=f"{type(error).__name__}: {error}"[:500])
            bar.write(f"{item.name}: FAILED ({row['error']})", file=sys.stderr)
        rows[item.name] = row
        bar.set_postfix_str(item.name, refresh=False)
        bar.update()

    n_workers = 1
    try:
        if workers or address:
            from dask.distributed import as_completed

            with open_client(workers, address) as client:
                n_workers = worker_count(client)
                futures = {client.submit(run_item, it, db_path, str(out), settings, options, pure=False): it
                           for it in items}
                for fut in as_completed(futures):
                    try:
                        record(futures[fut], fut.result())
                    except Exception as e:  # noqa: BLE001 - an item's failure is reported, the others go on
                        record(futures[fut], error=e)
        else:
            for it in items:
                try:
                    record(it, run_item(it, db_path, str(out), settings, options))
                except Exception as e:  # noqa: BLE001 - as above
                    record(it, error=e)
    finally:
        bar.close()
    seconds = time.perf_counter() - t0
    ordered = [rows[it.name] for it in items]
    done = sum(r["status"] == "done" for r in ordered)
    summary = {"items": ordered, "done": done, "failed": len(ordered) - done, "workers": n_workers,
               "seconds": round(seconds, 2), "items_per_minute": round(done / max(seconds / 60.0, 1e-9), 2)}
    with replacing(out / SUMMARY, "w") as f:
        f.write(json.dumps(summary, indent=1))
    marker.unlink()
    return {**summary, "metrics": metrics}


def without_timings(metrics):
    """metrics.json's figures less the per-run timings (TIMING_KEYS, at any depth): what two runs of
    the same input, settings and database share exactly."""
    if isinstance(metrics, dict):
        return {k: without_timings(v) for k, v in metrics.items() if k not in TIMING_KEYS}
    if isinstance(metrics, list):
        return [without_timings(v) for v in metrics]
    return metrics
