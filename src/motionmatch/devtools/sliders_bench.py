"""`motionmatch bench sliders`: the quality figures along one of the two sliders (responsiveness, quality).

Each slider value runs every scenario with the starting settings and that slider set (the other at its
setting), and the means of `tune`'s five figures are tabled; the check of docs/tuning.md is that mean
responsiveness_s falls as the responsiveness slider rises (`monotonic` in the result).
"""
from __future__ import annotations

import copy
import json
import sys

import numpy as np

from ..posedb.database import load_database
from ..offline.quality import quality_runs, scenario_files
from ..runtime.settings_file import RuntimeSettings, load_settings, settings_from_dict
from ..offline.tuning import objectives

SLIDERS = ("responsiveness", "quality")


def slider_sweep(db_path, paths, base: RuntimeSettings, slider: str, values, workers=None, address=None,
                 log=print) -> list[dict]:
    """[{slider value, the five figures of tuning.objectives}] for each value, scenarios `paths`."""
    if slider not in SLIDERS:
        raise ValueError(f"--slider: expected one of {', '.join(SLIDERS)}, got {slider!r}")
    out = []
    for v in values:
        rs = copy.deepcopy(base)
        setattr(rs.character, slider, float(v))
        rows = quality_runs(db_path, paths, rs, workers=workers, address=address)
        out.append({slider: float(v), **{k: round(x, 4) for k, x in objectives(rows).items()},
                    "responsiveness_s_per_scenario": {k: m["responsiveness_s"] for k, m in rows.items()}})
        log(f"{slider} {v:.2f}: " + " ".join(f"{k}={out[-1][k]:.3f}" for k in objectives(rows)))
    return out


def falls_monotonically(rows: list[dict], key: str = "responsiveness_s") -> bool:
    """Whether `key` never rises from one row to the next (rows in rising slider order)."""
    xs = np.array([r[key] for r in rows])
    return bool(np.all(np.diff(xs) <= 0.0))


def add_bench_sliders_args(p) -> None:
    p.add_argument("--db", required=True, help="database file (.npz)")
    p.add_argument("--scenarios", nargs="+", default=["scenarios/validation.list"],
                   help="scenario files, folders or .list files (default: scenarios/validation.list)")
    p.add_argument("--slider", choices=SLIDERS, default="responsiveness")
    p.add_argument("--steps", type=int, default=5, help="slider values from 0 to 1 (default 5: 0, 0.25, ... 1)")
    p.add_argument("--settings", default=None, help="settings file to start from (default: the runtime's)")
    p.add_argument("--workers", type=int, default=None, help="run the scenarios on a local cluster of N workers")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")


def run_bench_sliders(args) -> int:
    """The sweep's table (or JSON) for the parsed arguments."""
    if args.steps < 2:
        raise ValueError("--steps must be at least 2")
    paths = scenario_files(args.scenarios)
    channels = list(load_database(args.db).features.schema.names)
    base = load_settings(args.settings, channels) if args.settings else settings_from_dict({})
    values = np.linspace(0.0, 1.0, args.steps)
    rows = slider_sweep(args.db, paths, base, args.slider, values, args.workers,
                        log=lambda s: print(s, file=sys.stderr))
    result = {"slider": args.slider, "scenarios": [p.stem for p in paths], "rows": rows,
              "responsiveness_s_falls_monotonically": falls_monotonically(rows)}
    if args.json:
        print(json.dumps(result))
        return 0
    keys = [k for k in rows[0] if k not in (args.slider, "responsiveness_s_per_scenario")]
    print(f"| {args.slider} | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for r in rows:
        print(f"| {r[args.slider]:.2f} | " + " | ".join(f"{r[k]:.3f}" for k in keys) + " |")
    print(f"responsiveness_s falls monotonically: {'yes' if result['responsiveness_s_falls_monotonically'] else 'no'}")
    return 0
