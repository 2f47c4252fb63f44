"""Input logs replay bit for bit (docs/REPLAY.md): a Character or Crowd records its inputs and calls,
`motionmatch synth --replay` regenerates the identical motion, with one numba thread or two."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from motionmatch.world.obstacles import parse_obstacles
from motionmatch.offline.replay import replay_poses, window_ticks
from motionmatch.runtime.character import Character, CharacterSettings
from motionmatch.runtime.controller import GamepadInput
from motionmatch.runtime.crowd import Crowd
from motionmatch.runtime.database_sets import SetSpec
from motionmatch.runtime.input_log import InputLogError, load_log
from motionmatch.world.terrain import Heightfield


def drive_character(ch: Character, ticks: int) -> dict:
    """A session as a player makes it: stick changes, a settings change, a terrain, a stop request,
    a clip played, a second dt. Returns the poses after every tick."""
    moves = [GamepadInput(move=(0.0, 1.0)), GamepadInput(move=(0.7, 0.3), run=True),
             GamepadInput(move=(-1.0, 0.0), strafe=True, look=(0.0, 1.0)), GamepadInput()]
    lp, lr, gp = [], [], []
    for k in range(ticks):
        if k == 50:
            ch.settings.bias = 0.3
            ch.settings.warp.stride = False
            ch.apply_settings()
        if k == 90:
            ch.set_terrain(Heightfield.procedural("slope", size=8.0, cell=0.2, angle_deg=5.0))
        if k == 100:
            ch.set_obstacles(parse_obstacles([{"center": [0.5, 2.5], "radius": 0.4},
                                              {"min": [-2.0, 1.0], "max": [-1.0, 1.5]}]))
        if k == 130:
            ch.request_stop_at((1.0, 2.0))
        if k == 170:
            ch.cancel_request()
            ch.play_clip(1, 30)
        if k == 185:
            ch.use_set(SetSpec("mirrored", "mirrored", {ch.channel_names[0]: 2.0}), interrupt=False)
        ch.step(moves[(k // 25) % len(moves)], 1.0 / 60.0 if k < 200 else 1.0 / 50.0)
        p, r = ch.local_pose()
        lp.append(p)
        lr.append(r)
        gp.append(ch.global_positions.copy())
    return {"local_pos": np.array(lp), "local_rot": np.array(lr), "global_positions": np.array(gp)}


def synth_replay(log_path, db_path, out, threads: int) -> dict:
    env = {**os.environ, "NUMBA_NUM_THREADS": str(threads)}
    r = subprocess.run([sys.executable, "-m", "motionmatch", "synth", "--replay", str(log_path), "--db", str(db_path),
                        "--out", str(out), "--json"], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    with np.load(out / "poses.npz") as z:
        return summary, {k: z[k] for k in z.files}


@pytest.mark.slow
def test_character_log_replays_bit_for_bit_with_one_or_two_threads(jlpm_db, jlpm_db_path, tmp_path):
    ch = Character(jlpm_db, CharacterSettings())
    log = ch.start_input_log(seed=7)
    recorded = drive_character(ch, 240)
    path = log.save(tmp_path / "session.json")
    d = load_log(path)
    assert d["ticks"] == 240 and d["seed"] == 7 and d["dt"] == [[0, 1 / 60], [200, 1 / 50]]
    names = [next(k for k in e if k != "tick") for e in d["entries"]]
    assert {"input", "settings", "terrain", "request_stop_at", "cancel_request", "play_clip", "use_set",
            "obstacles"} <= set(names)

    again = replay_poses(jlpm_db, path)          # in this process
    for k in recorded:
        assert np.array_equal(again[k][:, 0], recorded[k]), k
    runs = {n: synth_replay(path, jlpm_db_path, tmp_path / f"out{n}", n) for n in (1, 2)}
    for n, (summary, poses) in runs.items():
        for k in recorded:
            assert np.array_equal(poses[k][:, 0], recorded[k]), (n, k)
        assert summary["frames_written"] == 240
    assert runs[1][0]["motion_sha256"] == runs[2][0]["motion_sha256"]
    assert (tmp_path / "out1" / "motion.bvh").read_text() == (tmp_path / "out2" / "motion.bvh").read_text()


@pytest.mark.slow
def test_crowd_log_replays_bit_for_bit_through_the_parallel_stages(jlpm_db, jlpm_db_path, tmp_path):
    # 40 agents: at least runtime.crowd.PARALLEL_FROM, so the ticks run the numba thread pool's stages.
    n, rng = 40, np.random.default_rng(3)
    crowd = Crowd(jlpm_db, n)
    log = crowd.start_input_log(seed=3)
    for i in range(n):
        crowd.reset_agent(i, (float(i % 8), 0.0, float(i // 8)), float(rng.uniform(-3, 3)))
    gp = []
    for k in range(90):
        if k % 30 == 0:
            move = rng.uniform(-1, 1, (n, 2))
            run = rng.random(n) < 0.3
        look = np.full((n, 2), np.nan)
        look[::5] = (0.0, 1.0)
        if k == 45:
            crowd.request_stop_at(2, (3.0, 1.0))
        if k == 60:
            crowd.use_set(5, SetSpec("mirrored", "mirrored"))
        crowd.step(move, run, np.zeros(n, bool), look)
        gp.append(crowd.global_positions.copy())
    path = log.save(tmp_path / "crowd.json")
    runs = {t: synth_replay(path, jlpm_db_path, tmp_path / f"crowd{t}", t) for t in (1, 2)}
    for t, (summary, poses) in runs.items():
        assert np.array_equal(poses["global_positions"], np.array(gp)), t
    assert runs[1][0]["motion_sha256"] == runs[2][0]["motion_sha256"]
    assert (tmp_path / "crowd1" / "agent_039.bvh").is_file()


def test_a_reset_starts_a_new_log_and_windows_mark_the_recorded_ticks(jlpm_db):
    ch = Character(jlpm_db)
    log = ch.start_input_log()
    for _ in range(10):
        ch.step(GamepadInput(move=(0.0, 1.0)))
    ch.reset(position=(1.0, 0.0, 2.0), yaw=0.5)
    log = ch.input_log
    assert log.ticks == 0 and log.start == {"frame": None, "position": [1.0, 0.0, 2.0], "yaw": 0.5}
    for k in range(30):
        if k == 5:
            log.open_window()
        if k == 20:
            log.close_window()
        ch.step(GamepadInput(move=(0.0, 1.0)))
    d = log.to_dict()
    assert d["windows"] == [[5, 20]] and list(window_ticks(d)) == list(range(5, 20))


def test_a_log_names_its_database_and_refuses_another(jlpm_db, bandai_walk_db, tmp_path):
    ch = Character(jlpm_db)
    log = ch.start_input_log()
    ch.step(GamepadInput(move=(0.0, 1.0)))
    path = log.save(tmp_path / "log.json")
    with pytest.raises(InputLogError, match="another database"):
        replay_poses(bandai_walk_db, path)
    bad = json.loads(path.read_text())
    bad["entries"].append({"tick": 0, "teleport": [1, 2]})
    with pytest.raises(InputLogError, match=r"entries\[\d+\]"):
        load_log(bad)
    ch.set_driver(object())
    with pytest.raises(InputLogError, match="replay_spec"):
        ch.input_log.to_dict()
