"""What the spread scripts print: one line per seed as it finishes, then each figure's min / median / max."""
from __future__ import annotations

import numpy as np


def print_seed(seed: int, figures: dict) -> None:
    print(seed, {k: round(float(v), 4) for k, v in figures.items()}, flush=True)


def print_spread(rows: list[dict]) -> None:
    print(f"\n{len(rows)} seeds: min / median / max")
    for k in rows[0]:
        v = np.array([r[k] for r in rows], dtype=float)
        print(f"  {k:32s} {v.min():.4g} / {np.median(v):.4g} / {v.max():.4g}")
