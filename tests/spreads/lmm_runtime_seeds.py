"""The spread of tests/lmm/test_lmm_runtime.py's bounds on its trained model over training seeds (not a
test: run it by hand).

    PYTHONPATH=src python tests/spreads/lmm_runtime_seeds.py [seeds=20]

Trains the test's tiny model (300 iterations, 64-wide layers, 200 frames, projector noise 1.0) once per
seed and prints each bounded figure's min / median / max over the seeds."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from spread_table import print_seed, print_spread  # noqa: E402
from conftest import JLPM, _need  # noqa: E402

from motionmatch.lmm.train import TrainSettings, train_model  # noqa: E402
from motionmatch.posedb.database import build_database  # noqa: E402
from motionmatch.runtime.character import Character  # noqa: E402
from motionmatch.runtime.controller import GamepadInput  # noqa: E402
from motionmatch.runtime.settings import CharacterSettings  # noqa: E402


def walk(db, model) -> dict:
    """test_learned_character_walks_a_scenario_without_nan's figures."""
    ch = Character(db, CharacterSettings(mode="lmm", model=str(model), lmm_bias=-1000.0))
    hips = []
    script = [GamepadInput(move=(0.0, 1.0))] * 90 + [GamepadInput(move=(1.0, 0.0))] * 60 + [GamepadInput()] * 30
    for inp in script:
        ch.step(inp)
        hips.append(ch.global_positions[1, 1])
    return {"transitions": ch.transitions, "hips median m": np.median(hips),
            "moved m": float(np.hypot(*ch.crowd.root_pos[0, [0, 2]]))}


def switch_step(db, model, inertialization):
    """test_live_switch_between_classic_and_learned_is_inertialized's _switch_step."""
    ch = Character(db, CharacterSettings(inertialization=inertialization))
    steps, across = [], []

    def run(k, record):
        for _ in range(k):
            before = ch.global_positions.copy()
            ch.step(GamepadInput(move=(0.0, 1.0)))
            record.append(float(np.abs(ch.global_positions - before).max()))

    run(60, [])
    run(20, steps)
    ch.settings.mode, ch.settings.model = "lmm", str(model)
    ch.apply_settings()
    run(1, across)
    run(40, steps)
    ch.settings.mode = "classic"
    ch.apply_settings()
    run(1, across)
    run(20, steps)
    return max(across), float(np.percentile(steps, 95))


def main(seeds: int = 20) -> None:
    db = build_database(sorted(_need(JLPM).glob("*.bvh")), progress=False)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(seeds):
            out = Path(tmp) / f"model{seed}.npz"
            train_model(db, out, TrainSettings(iterations=300, hidden=64, max_frames=200, progress=False,
                                               projector_noise=1.0, seed=seed))
            f = walk(db, out)
            smooth, typical = switch_step(db, out, "spring")
            popped, _ = switch_step(db, out, "off")
            f["switch / typical step (spring)"] = smooth / typical
            f["popped / smooth"] = popped / smooth
            rows.append(f)
            print_seed(seed, f)
    print_spread(rows)


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
