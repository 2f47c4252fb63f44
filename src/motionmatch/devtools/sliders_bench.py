"""`motionmatch bench sliders`: the quality figures along one of the two sliders (responsiveness, quality).

Each slider value runs every scenario with the starting settings and that slider set (the other at its
setting), and the means of `tune`'s five figures are tabled; the check of docs/tuning.md is that mean
responsiveness_s falls as the responsiveness slider rises (`monotonic` in the result).
"""
from __future__ import annotations

import copy

import numpy as np

from ..offline.quality import quality_runs
from ..runtime.settings_file import RuntimeSettings
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
