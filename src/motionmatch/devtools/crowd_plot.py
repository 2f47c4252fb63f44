"""The crowd scaling figure: tick time against crowd size, one curve per `motionmatch bench crowd --json`
result (a database, a thread choice), with the 60 Hz budget drawn across (docs/performance.md)."""
from __future__ import annotations

from pathlib import Path

__all__ = ["plot_crowd_curves"]

BUDGET_MS = 1000.0 / 60.0


def _label(run: dict) -> str:
    name = Path(str(run.get("database", "?"))).stem
    frames = run.get("frames")
    threads = run.get("thread_choice", run.get("threads"))
    size = f", {frames:,} frames" if frames else ""
    return f"{name}{size}, threads {threads}"


def plot_crowd_curves(runs: list[dict], out, title: str | None = None) -> Path:
    """Draw median (solid) and p99 (dotted) tick ms against agents, log-log, for each bench result in
    `runs` (the JSON of `bench crowd`), and the median CPU ms per tick (dashed) where the result has it
    (on a loaded machine the wall clock is mostly other processes' time); writes the PNG `out` and
    returns its path."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 4.6), dpi=100)
    for run in runs:
        rows = sorted(run["results"], key=lambda r: r["n"])
        n = [r["n"] for r in rows]
        line, = ax.plot(n, [r["tick_ms"]["median"] for r in rows], marker="o", label=_label(run) + " (median)")
        ax.plot(n, [r["tick_ms"]["p99"] for r in rows], linestyle=":", color=line.get_color(), label="p99")
        if all("tick_cpu_ms" in r for r in rows):
            ax.plot(n, [r["tick_cpu_ms"]["median"] for r in rows], linestyle="--", color=line.get_color(),
                    label="CPU ms (median, all threads)")
    ax.axhline(BUDGET_MS, color="k", linewidth=0.8)
    ax.text(1.0, BUDGET_MS * 1.08, "60 Hz budget (16.7 ms)", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("agents (foot locking, IK and warping on)")
    ax.set_ylabel("ms per tick")
    ax.set_title(title or "Crowd tick time")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
