"""The spread of tests/app/test_app_limits.py's bound on a short soak's memory slope over runs (not a
test: run it by hand; each run starts a server).

    PYTHONPATH=src python tests/spreads/soak_slope.py [runs=20] [database=the jlpm22 default]

Runs the test's soak (200 visits, 10 pages, 1 s visits, 60 of warm-up) once per seed and prints the slope of the
server's RSS after the warm-up (kB a visit) and the end / start ratio: min / median / max."""
from __future__ import annotations

import statistics
import sys

from motionmatch.devtools.soak import soak_visits
from motionmatch.posedb.database import build_default_database


def main(runs: int = 20, db: str | None = None) -> None:
    db = db or str(build_default_database(progress=False))
    slopes, ratios = [], []
    for seed in range(runs):
        d = soak_visits(db, visits=200, pages=10, visit_s=1.0, warmup=60, progress=None,
                        seed=seed).to_dict()
        slopes.append(d["slope_kb_per_visit"])
        ratios.append(d["rss_mb"]["end_over_start"])
        print(f"seed {seed}: slope {slopes[-1]:.2f} kB a visit, end/start {ratios[-1]:.3f}, "
              f"failed downloads {d['failed_downloads']}", flush=True)
    for name, v in (("slope kB a visit", slopes), ("end/start", ratios)):
        print(f"{name}: min {min(v):.3f} / median {statistics.median(v):.3f} / max {max(v):.3f} over {runs} runs")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20, sys.argv[2] if len(sys.argv) > 2 else None)
