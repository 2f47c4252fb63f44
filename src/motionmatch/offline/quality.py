"""Scenario quality runs: a scenario's metrics under given settings, in this process or spread over
the distributed engine (the work behind `motionmatch bench quality` and `motionmatch tune`).

The metrics are synth's (metrics.json, see the README) plus `pops`: the 99th percentile of joint
acceleration (m/s^2) over the 0.1 s after each transition, and the same percentile over the
database's own motion (`source`, up to 60 clips of the scenario's style); `ratio` = output / source.
"""
from __future__ import annotations

import copy
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..motion.metrics import compute_metrics, joint_acceleration_p99, source_foot_sliding_cm_s
from .scenario import load_scenario
from ..runtime.settings_file import RuntimeSettings, settings_from_dict, settings_to_dict
from .synth import appearance_metrics, change_frames, run_scenario
from .cluster import worker_database
from ..world.terrain import Heightfield
from ..posedb.database import load_database
from .synth import synthesize
from .cluster import parallel_map
from ..search import range_mask

PROJECT_SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"
POP_WINDOW_S = 0.1

_baselines: dict = {}


def scenario_files(specs=None) -> list[Path]:
    """Scenario JSON files from folders (their *.json), files, and `.list` files (one scenario path per
    line, relative to the list's folder, # starts a comment). Default: the project's scenarios/."""
    out = []
    for spec in map(Path, specs or [PROJECT_SCENARIOS]):
        if spec.is_dir():
            out += sorted(spec.glob("*.json"))
        elif spec.suffix == ".list":
            if not spec.is_file():
                raise FileNotFoundError(f"{spec}: no such scenario list")
            for line in spec.read_text().splitlines():
                line = line.split("#", 1)[0].strip()
                if line:
                    out.append(spec.parent / line)
        else:
            out.append(spec)
    for p in out:
        if not p.is_file():
            raise FileNotFoundError(f"{p}: no such scenario file")
    if not out:
        raise FileNotFoundError(f"no scenario files in {', '.join(map(str, specs or [PROJECT_SCENARIOS]))}")
    return out


def source_baselines(db, style: str | None) -> tuple[float, float]:
    """(foot sliding cm/s, joint acceleration p99 m/s^2) of the database's own motion, restricted to
    clips matching `style`; computed once per database and style in a process."""
    key = (id(db), style)     # the entry keeps its database alive, so the id is not reused
    if key not in _baselines:
        allowed = None
        if style:
            allowed = np.flatnonzero(range_mask(style, db.range_tags))
        ranges = np.arange(len(db.range_starts)) if allowed is None else allowed
        if len(ranges) > 60:
            ranges = ranges[np.linspace(0, len(ranges) - 1, 60).round().astype(int)]
        # The clips end to end, the frames next to a seam left out.
        clips = [db.global_transforms(slice(int(db.range_starts[r]), int(db.range_stops[r])))[0] for r in ranges]
        seams = np.cumsum([len(c) for c in clips])
        inner = np.setdiff1d(np.arange(seams[-1]), np.concatenate([seams - 1, seams, [0]]))
        acc = joint_acceleration_p99(np.concatenate(clips), db.fps, inner)
        _baselines[key] = (db, source_foot_sliding_cm_s(db, allowed_ranges=allowed), acc)
    return _baselines[key][1:]


def scenario_metrics(db, scenario, settings: RuntimeSettings | None = None) -> dict:
    """Run a Scenario with the settings (copied: the run sets the tag filter) and return its metrics."""

    rs = copy.deepcopy(settings) if settings is not None else settings_from_dict({})
    terrain = None
    if scenario.terrain:
        terrain = Heightfield.from_spec(scenario.terrain)
    rec = run_scenario(db, scenario, rs.character, terrain=terrain, controller_settings=rs.controller)
    sliding, acc_src = source_baselines(db, scenario.style)
    m = compute_metrics(rec, db.fps, sliding, change_frames(scenario, db.fps))
    m.update(appearance_metrics(db, rec))
    window = np.arange(int(round(POP_WINDOW_S * db.fps)))
    acc = joint_acceleration_p99(rec["global_positions"], db.fps,
                                 (np.asarray(rec["transition_frames"])[:, None] + window).ravel())
    m["pops"] = {"acc_p99_m_s2": round(acc, 2), "source_acc_p99_m_s2": round(acc_src, 2),
                 "ratio": round(acc / max(acc_src, 1e-9), 4)}
    return m


def run_on_worker(db_path: str, scenario_path: str, settings: dict, style: str | None = None) -> dict:
    """One scenario's metrics on an engine worker: the database opened once per worker, memory-mapped;
    settings as a settings file's tables (see runtime/settings_file.py)."""
    db = worker_database(db_path)
    scen = load_scenario(scenario_path)
    if style:
        scen = replace(scen, style=style)
    return scenario_metrics(db, scen, settings_from_dict(settings, "settings"))


def quality_runs(db_path, paths: list[Path], settings: RuntimeSettings, style: str | None = None,
                 workers: int | None = None, address: str | None = None, out=None) -> dict:
    """{scenario name: metrics} for each scenario file. With workers or address the scenarios run on
    the distributed engine; otherwise here, one after the other. out: also write each scenario's
    synth output (motion.bvh, metrics.json, trajectory.png) under this folder (in this process)."""
    table = settings_to_dict(*settings)
    if out is not None:
        db = load_database(db_path)
        rows = {}
        for p in paths:
            scen = load_scenario(p)
            scen = replace(scen, style=style) if style else scen
            rs = copy.deepcopy(settings)
            rows[p.stem] = synthesize(db, scen, Path(out) / p.stem, rs.character, progress=False,
                                      controller_settings=rs.controller)
            print(f"  {p.stem}: done", file=sys.stderr)
        return rows
    if workers or address:
        results = parallel_map(lambda p: run_on_worker(str(db_path), str(p), table, style), paths,
                               workers, address, progress="scenarios")
        return {p.stem: m for p, m in zip(paths, results)}
    rows = {}
    for p in paths:
        rows[p.stem] = run_on_worker(str(db_path), str(p), table, style)
        print(f"  {p.stem}: done", file=sys.stderr)
    return rows
