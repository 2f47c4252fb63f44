"""Figures for the tutorial, made by the library itself at docs build (`make docs`): feature space, one
search's candidate costs, a transition with and without inertialization, foot locking before/after.

Usage: python docs/make_figures.py OUT_DIR [--db DB]   (default: the cached default database)
"""
from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from motionmatch.posedb.database import build_default_database, load_database  # noqa: E402
from motionmatch.runtime.character import CharacterSettings  # noqa: E402
from motionmatch.offline.scenario import parse_scenario  # noqa: E402
from motionmatch.offline.synth import run_scenario  # noqa: E402

TURN = {"duration": 6.0, "inputs": [{"t": 0.0, "move": [0.0, 1.0]}, {"t": 2.0, "move": [1.0, 0.0]},
                                    {"t": 4.0, "move": [0.0, 1.0], "run": True}]}


def feature_space(db, out: Path) -> None:
    """Two principal axes of the normalized features, coloured by the character's ground speed."""
    X = np.asarray(db.features.normalized, np.float64)
    Xc = X - X.mean(0)
    _, _, vt = np.linalg.svd(Xc[::7], full_matrices=False)
    P = Xc @ vt[:2].T
    sim = np.asarray(db.positions[:, 0], np.float64)      # the simulation bone, in the world
    speed = np.r_[0.0, np.linalg.norm(np.diff(sim[:, [0, 2]], axis=0), axis=1) * db.fps]
    speed[db.range_starts] = speed[np.minimum(db.range_starts + 1, len(speed) - 1)]   # no jumps between clips
    fig, ax = plt.subplots(figsize=(6.5, 4.5), dpi=100)
    sc = ax.scatter(P[:, 0], P[:, 1], c=speed, s=1, cmap="viridis", vmax=np.percentile(speed, 99))
    fig.colorbar(sc, label="ground speed (m/s)")
    ax.set_xlabel("principal axis 1")
    ax.set_ylabel("principal axis 2")
    ax.set_title(f"{len(X)} database frames in feature space")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def candidate_costs(db, out: Path) -> None:
    """The cost of every frame for one query (a frame of the second take, looked up in the whole database)."""
    X = np.asarray(db.features.normalized, np.float64)
    r = min(1, len(db.range_starts) - 1)
    k = int(db.range_starts[r] + 600)
    cost = np.sum((X - X[k]) ** 2, axis=1)
    cost[max(0, k - 30):k + 30] = np.nan          # not its own neighbourhood
    best = int(np.nanargmin(cost))
    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=100)
    ax.plot(cost, lw=0.5, color="0.4")
    ax.scatter([best], [cost[best]], color="tab:red", zorder=3, label=f"best: frame {best}")
    ax.set_yscale("log")
    ax.set_xlabel("database frame")
    ax.set_ylabel("cost (squared normalized distance)")
    ax.set_title(f"candidate costs for the query of frame {k}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def _run(db, **settings):
    s = CharacterSettings()
    for key, value in settings.items():
        setattr(s, key, value)
    return run_scenario(db, parse_scenario(TURN), s)


def inertialization(db, out: Path) -> None:
    """Hips height around transitions, with spring inertialization and with none."""
    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=100)
    t = None
    for mode, color in (("off", "tab:red"), ("spring", "tab:blue")):
        rec = _run(db, inertialization=mode)
        hips = rec["global_positions"][:, db.roles["hips"], 1]
        t = np.arange(len(hips)) / db.fps
        ax.plot(t, hips, color=color, lw=1, label=f"inertialization {mode}")
        if mode == "off":
            for f in rec["transition_frames"]:
                ax.axvline(f / db.fps, color="0.85", lw=0.6, zorder=0)
    ax.set_xlim(1.5, 3.5)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("hips height (m)")
    ax.set_title("transitions (grey): jumps without inertialization, smooth with it")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def foot_locking(db, out: Path) -> None:
    """Left toe's horizontal speed while in contact, with and without foot locking."""
    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=100)
    toe = db.roles["left_toe"]
    for on, color in ((False, "tab:red"), (True, "tab:blue")):
        rec = _run(db, foot_locking=on)
        p = rec["global_positions"][:, toe, [0, 2]]
        v = np.r_[0.0, np.linalg.norm(np.diff(p, axis=0), axis=1) * db.fps]
        v[~rec["contacts"][:, 0]] = np.nan
        ax.plot(np.arange(len(v)) / db.fps, v * 100, color=color, lw=1,
                label=f"foot locking {'on' if on else 'off'}: median {np.nanmedian(v) * 100:.1f} cm/s")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("toe speed in contact (cm/s)")
    ax.set_title("foot sliding during contacts")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--db", help="database (default: the cached default database)")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    db = load_database(args.db or build_default_database(progress=False))
    for name, make in (("feature_space", feature_space), ("candidate_costs", candidate_costs),
                       ("inertialization", inertialization), ("foot_locking", foot_locking)):
        make(db, out / f"{name}.png")
        print(f"wrote {out / name}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
