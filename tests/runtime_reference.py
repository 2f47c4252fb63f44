"""Recorded runtime output on fixed scenarios: the reference the batched runtime must reproduce.

`python tests/runtime_reference.py` (re)writes tests/data/runtime_reference.npz from the code checked
out. First generated on the runtime before the crowd redesign (commit 8c309cf), which the batched
runtime reproduced exactly (commit 8bee844); regenerated only by commits that change the behaviour on
purpose (each says so, with before/after figures). Per scenario: the
database frame chosen at every step and the world joint positions every STRIDE steps (float32).
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REFERENCE = HERE / "data" / "runtime_reference.npz"
SCENARIOS_DIR = HERE.parent.parent / "shared" / "scenarios"
STRIDE = 5


def scenarios():
    """name -> (Scenario, terrain spec or None)."""
    from motionmatch.runtime.controller import GamepadInput
    from motionmatch.offline.scenario import Scenario, load_scenario, random_scenario

    def inputs(*items):
        return tuple((t, GamepadInput(**kw)) for t, kw in items)

    return {
        "walk": (load_scenario(SCENARIOS_DIR / "walk_turn_stop.json"), None),
        "turn180": (Scenario(duration=8.0, inputs=inputs((0.0, dict(move=(0.0, 1.0))),
                                                         (3.0, dict(move=(0.0, -1.0))),
                                                         (6.0, dict(move=(0.0, 0.0)))), style=None), None),
        "strafe": (Scenario(duration=8.0, inputs=inputs((0.0, dict(move=(1.0, 0.0), strafe=True, look=(0.0, 1.0))),
                                                        (3.0, dict(move=(-0.7, -0.7), strafe=True)),
                                                        (6.0, dict(move=(0.0, 1.0), run=True))), style=None), None),
        "terrain_slope": (Scenario(duration=8.0, inputs=inputs((0.0, dict(move=(0.0, 1.0))),
                                                               (5.0, dict(move=(math.sqrt(0.5), math.sqrt(0.5))))),
                                   style=None), {"kind": "slope", "angle_deg": 12, "size": 20}),
        "path": (load_scenario(SCENARIOS_DIR / "square_path.json"), None),
        "random60": (random_scenario(60.0, seed=7), None),
    }


def run(db, scenario, terrain_spec):
    """(frames (F,) int32, joint positions every STRIDE steps (F//STRIDE, J, 3) float32)."""
    from motionmatch.runtime.character import Character, CharacterSettings
    from motionmatch.world.terrain import Heightfield

    ch = Character(db, CharacterSettings())
    if terrain_spec is not None:
        ch.set_terrain(Heightfield.from_spec(terrain_spec))
    ch.set_driver(scenario.make_driver())
    F = int(round(scenario.duration * db.fps))
    frames = np.empty(F, dtype=np.int32)
    pos = []
    for k in range(F):
        ch.step(None, 1.0 / db.fps)
        frames[k] = ch.frame
        if k % STRIDE == 0:
            pos.append(np.asarray(ch.global_positions, dtype=np.float32).copy())
    return frames, np.stack(pos)


def default_database():
    """The full jlpm22 database built as the test fixture builds it."""
    import tempfile
    from motionmatch.posedb.database import build_database, load_database, save_database
    files = sorted((HERE.parent.parent / "shared" / "mocap" / "jlpm22-locomotion").glob("*.bvh"))
    db = build_database(files, progress=False)
    with tempfile.TemporaryDirectory() as d:
        save_database(db, Path(d) / "db.npz")
        return load_database(Path(d) / "db.npz")


def main() -> int:
    db = default_database()
    out = {}
    for name, (scenario, terrain) in scenarios().items():
        frames, pos = run(db, scenario, terrain)
        out[f"{name}_frames"], out[f"{name}_positions"] = frames, pos
        print(name, len(frames), "steps", len(np.unique(frames)), "distinct frames")
    REFERENCE.parent.mkdir(exist_ok=True)
    np.savez_compressed(REFERENCE, **out)
    print(REFERENCE, REFERENCE.stat().st_size, "bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
