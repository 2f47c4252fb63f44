"""Crowds offline (issue 10): the crowd file, drivers, local avoidance and `motionmatch synth --crowd`."""
import json
import math

import numpy as np
import pytest

from motionmatch.world.avoidance import AvoidanceState, avoid
from motionmatch.cli import main
from motionmatch.offline.crowd_synth import (CrowdError, goal_spacing, parse_crowd, run_crowd, separation, stick_to_velocity,
                                             velocity_to_stick)
from motionmatch.io.bvh import read_bvh
from motionmatch.motion.metrics import foot_sliding_cm_s
from motionmatch.runtime.character import CharacterSettings
from motionmatch.runtime.controller import ControllerSettings
from motionmatch.offline.synth import synthesize

WALK_TURN = [{"t": 0.0, "move": [0, 1]}, {"t": 1.5, "move": [1, 0]}, {"t": 3.0, "move": [0, 1], "run": True},
             {"t": 4.5, "move": [0, 0]}]


def circle(n: int, radius: float, duration: float, avoidance: bool) -> dict:
    """n agents on a circle, each walking to the opposite point: they all cross at the centre."""
    agents = []
    for i in range(n):
        a = 2 * math.pi * i / n
        x, z = radius * math.sin(a), radius * math.cos(a)
        agents.append({"start": [x, z], "yaw": math.degrees(a) + 180.0, "goal": [-x, -z]})
    return {"duration": duration, "avoidance": avoidance, "agents": agents}


@pytest.mark.parametrize("data, field", [
    ({"agents": [{"start": [0, 0], "goal": [1, 1]}]}, "duration: missing"),
    ({"duration": 5, "agents": []}, "agents: expected a non-empty list"),
    ({"duration": 5, "agents": [{"start": [0, 0], "goal": [1, 1]}] * 1001}, "agents: 1001 agents"),
    ({"duration": 600, "agents": [{"start": [0, 0], "goal": [1, 1]}] * 10}, "agent-seconds"),
    ({"duration": 5, "avoidance": "yes", "agents": [{"start": [0, 0], "goal": [1, 1]}]}, "avoidance:"),
    ({"duration": 5, "agents": [{"start": [0, 0], "goal": [1, 1]}, {"start": [0, 0], "goal": [1]}]},
     "agents[1].goal: expected two numbers"),
    ({"duration": 5, "agents": [{"goal": [1, 1]}]}, "agents[0].start: missing"),
    ({"duration": 5, "agents": [{"start": [0, 0]}]}, "agents[0].goal: expected exactly one"),
    ({"duration": 5, "agents": [{"start": [0, 0], "goal": [1, 1], "path": {}}]}, "agents[0].path: expected exactly one"),
    ({"duration": 5, "agents": [{"start": [0, 0], "goal": [1, 1], "speed": 2}]}, "agents[0].speed: unknown field"),
    ({"duration": 5, "agents": [{"start": [0, 0], "yaw": "north", "goal": [1, 1]}]}, "agents[0].yaw:"),
    ({"duration": 5, "agents": [{"start": [0, 0], "inputs": [{"t": 0, "move": [0, 1]}], "run": True}]},
     "agents[0].run: only with a goal"),
    ({"duration": 5, "agents": [{"start": [0, 0], "inputs": [{"t": 0, "move": [3, 0]}]}]},
     "agents[0].inputs[0].move: expected two numbers"),
    ({"duration": 5, "agents": [{"start": [0, 0], "path": {"points": [[0, 0]], "speed": 1}}]},
     "agents[0].path.points:"),
    ({"duration": 5, "agents": [{"start": [0, 0], "goal": [1, 1], "tags": 3}]}, "agents[0].tags:"),
])
def test_a_bad_crowd_file_names_the_field(data, field):
    with pytest.raises(CrowdError) as e:
        parse_crowd(data)
    assert field in str(e.value)


def test_bad_crowd_through_the_command_line(jlpm_db_path, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"duration": 3, "agents": [{"start": [0, 0], "goal": [2, 0]},
                                                         {"start": [1, 0], "goal": [2, "x"]}]}))
    assert main(["synth", "--db", str(jlpm_db_path), "--crowd", str(bad), "--out", str(tmp_path / "o")]) == 1
    assert "agents[1].goal" in capsys.readouterr().err
    tags = tmp_path / "tags.json"
    tags.write_text(json.dumps({"duration": 1, "agents": [{"start": [0, 0], "goal": [2, 0], "tags": "jogging"}]}))
    assert main(["synth", "--db", str(jlpm_db_path), "--crowd", str(tags), "--out", str(tmp_path / "o")]) == 1
    assert "agents[0].tags" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["synth", "--db", str(jlpm_db_path), "--crowd", str(bad), "--scenario", str(bad), "--out", "o"])
    assert "not allowed with" in capsys.readouterr().err


def test_sticks_and_velocities_invert_each_other():
    cs = ControllerSettings()
    rng = np.random.default_rng(0)
    ang = rng.uniform(-np.pi, np.pi, 50)
    mag = rng.uniform(0.25, 1.0, 50)
    move = np.stack([mag * np.sin(ang), mag * np.cos(ang)], axis=1)
    run = rng.random(50) < 0.5
    v = stick_to_velocity(move, run, cs)
    assert np.allclose(np.linalg.norm(v[~run & (mag == 1.0)], axis=1), cs.walk_forward_speed)
    assert np.allclose(velocity_to_stick(v, run, cs), move)
    assert np.all(np.linalg.norm(velocity_to_stick(v * 3.0, run, cs), axis=1) <= 1.0 + 1e-12)


def test_agents_without_avoidance_are_independent(jlpm_db):
    a0 = {"start": [0, 0], "inputs": WALK_TURN}
    others = [{"start": [2, 2], "yaw": -90, "goal": [-2, 2]},            # walks through agent 0's path
              {"start": [1, 3], "path": {"points": [[1, 3], [0, 1], [-1, 3]], "speed": 1.6}}]
    alone = run_crowd(jlpm_db, parse_crowd({"duration": 5, "avoidance": False, "agents": [a0]}))
    crowd = run_crowd(jlpm_db, parse_crowd({"duration": 5, "avoidance": False, "agents": [a0] + others}))
    assert np.abs(crowd["global_positions"][:, 0] - alone["global_positions"][:, 0]).max() < 1e-5
    # The others did move, and came close to agent 0: independence is not distance.
    assert np.linalg.norm(crowd["root_pos"][-1, 1] - crowd["root_pos"][0, 1]) > 2.0
    assert separation(crowd["root_pos"][:, :, [0, 2]], 0.8)[1] >= 1


def test_avoidance_keeps_twenty_crossing_agents_apart(jlpm_db):
    spec = parse_crowd(circle(20, 5.0, 14.0, avoidance=True))
    rec = run_crowd(jlpm_db, spec)
    min_d, collisions, _ = separation(rec["root_pos"][:, :, [0, 2]])
    assert collisions == 0 and min_d >= 0.3
    goals = np.array([a.goal for a in spec.agents])
    left = np.linalg.norm(rec["root_pos"][-1][:, [0, 2]] - goals, axis=1)
    assert (left < 0.5).sum() >= 15               # most got through instead of standing apart
    # The same crossing without avoidance collides (so the check above can fail).
    short = parse_crowd(circle(20, 5.0, 5.0, avoidance=False))
    assert separation(run_crowd(jlpm_db, short)["root_pos"][:, :, [0, 2]])[1] > 0


def _walk_between(hold):
    """A walker at 1.3 m/s toward two agents standing 0.9 m apart across its way, 3 s of avoidance stepped
    at 60 Hz: the walker's position and the standers' largest displacement (m)."""
    pos = np.array([[-2.0, 0.02], [0.0, -0.45], [0.0, 0.45]])
    start = pos.copy()
    state, vel = AvoidanceState.zeros(3), np.zeros((3, 2))
    pref, top = np.array([[1.3, 0.0], [0.0, 0.0], [0.0, 0.0]]), np.full(3, 1.3)
    for _ in range(180):
        vel = avoid(state, pos, vel, pref, top, hold=hold)
        pos = pos + vel / 60.0
    return pos[0], float(np.linalg.norm(pos[1:] - start[1:], axis=1).max())


def test_parallel_avoidance_chooses_the_same_velocities():
    """avoid(parallel=True) shares the agents out among numba's threads: the same velocities, bit for bit, as
    on the calling thread (a crowd's poses do not depend on its thread count), with obstacles and holders."""
    from motionmatch.world.obstacles import parse_obstacles
    rng = np.random.default_rng(4)
    n = 400
    pos = rng.uniform(-12.0, 12.0, (n, 2))
    vel = rng.normal(0.0, 0.8, (n, 2))
    pref = rng.normal(0.0, 1.0, (n, 2))
    top = rng.uniform(1.0, 3.5, n)
    hold = np.where(rng.random(n) < 0.2, 0.35, 0.0)
    walls = parse_obstacles([{"center": [0.0, 0.0], "radius": 1.5}, {"min": [4.0, -6.0], "max": [5.0, 6.0]}])
    got = {}
    for parallel in (False, True):
        state = AvoidanceState(vel.copy())
        got[parallel] = [avoid(state, pos, vel, pref, top, obstacles=walls, hold=hold, parallel=parallel).copy()]
        got[parallel].append(avoid(state, pos + 0.01, vel, pref, top, parallel=parallel).copy())
    for serial, threaded in zip(got[False], got[True]):
        assert np.array_equal(serial, threaded)
    # Not a trivial answer: the crowd is dense enough that most agents deviate from what they prefer.
    assert (np.linalg.norm(got[False][0] - pref, axis=1) > 1e-6).mean() > 0.5


def test_the_neighbour_grid_finds_the_k_d_trees_neighbours():
    """avoidance.neighbour_table (a uniform grid) against scipy's k-d tree: the same nearest others closer than
    the distance, nearest first, on a crowd with a far cluster (cells wider than the distance) and a small one;
    equal distances come in index order; agents with no finite position have none and are nobody's."""
    from scipy.spatial import cKDTree
    from motionmatch.world.avoidance import neighbour_table
    rng = np.random.default_rng(2)
    for n, half in ((1500, 60.0), (40, 3.0)):
        pos = rng.uniform(-half, half, (n, 2))
        pos[: n // 10] += 4000.0
        dist, idx = cKDTree(pos).query(pos, k=11, distance_upper_bound=6.0)
        want = np.where(np.isfinite(dist[:, 1:]), idx[:, 1:], -1)
        got = neighbour_table(pos, 10, 6.0)
        assert got.shape == (n, 10) and np.array_equal(got, want)
        assert np.array_equal(neighbour_table(pos, 10, 6.0, parallel=True), got)
        assert (got >= 0).sum() > n          # not an empty table
    square = np.array([[0.0, 0.0], [1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0], [np.nan, 0.0], [0.0, 6.0]])
    table = neighbour_table(square, 10, 6.0)
    assert table[0].tolist() == [1, 2, 3, 4, -1, -1]           # 6.0 m away is not closer than 6.0
    assert table[5].tolist() == [-1] * 6 and not (table == 5).any()


def test_agents_holding_their_goals_stand_and_are_walked_between():
    # Goals 0.9 m apart: others may pass 0.3375 m from an agent standing on its goal.
    spacing = goal_spacing(np.array([[0.0, -0.45], [0.0, 0.45], [5.0, 0.0], [9.0, 9.0]]), [True, True, True, False])
    assert spacing.tolist() == pytest.approx([0.3375, 0.3375, 0.6, 0.0])
    walker, moved = _walk_between(np.array([0.0, 0.3375, 0.3375]))
    assert walker[0] > 1.0 and moved == 0.0           # through the gap; the standers never stepped
    # Without holding, the pair keeps 0.6 m: the walker cannot pass between them without pushing them.
    walker, moved = _walk_between(None)
    assert walker[0] < 0.0 or moved > 0.1


def _nearest_clips(db, local_rot: np.ndarray) -> np.ndarray:
    """Clip index of the database frame whose spine, neck and arm rotations are nearest each pose."""
    roles_legs = {db.roles[k] for k in db.roles if any(s in k for s in ("foot", "toe", "knee", "hip", "leg"))}
    joints = [j for j in range(2, db.num_joints) if j not in roles_legs]
    ref = db.rotations[:, joints].astype(np.float64)
    clip_of = np.repeat(np.arange(len(db.range_starts)), db.range_stops - db.range_starts)
    out = []
    for q in local_rot[:, joints]:
        d = (1.0 - np.abs((ref * q[None]).sum(-1))).sum(1)
        out.append(clip_of[int(np.argmin(d))])
    return np.array(out)


def test_per_agent_tag_filters_hold(bandai_walk_db):
    db = bandai_walk_db
    settings = CharacterSettings(foot_locking=False)
    for flag in ("orientation", "stride", "slope", "play_rate"):
        setattr(settings.warp, flag, False)
    walk = [{"t": 0.0, "move": [0, 1]}, {"t": 2.0, "move": [1, 0]}]
    spec = parse_crowd({"duration": 4, "avoidance": False, "agents": [
        {"start": [0, 0], "inputs": walk, "tags": "exhausted"},
        {"start": [5, 0], "inputs": walk, "tags": "walk & normal"}]})
    rec = run_crowd(db, spec, settings)
    allowed = [{r for r, t in enumerate(db.range_tags) if "exhausted" in t},
               {r for r, t in enumerate(db.range_tags) if "walk" in t and "normal" in t}]
    for i in range(2):
        clips = _nearest_clips(db, rec["local_rot"][60::10, i])
        inside = np.mean([c in allowed[i] for c in clips])
        outside = np.mean([c in allowed[1 - i] for c in clips])
        assert inside >= 0.85 and outside <= 0.15, (i, inside, outside)


def _bvh_sliding(path) -> tuple[float, bool]:
    anim = read_bvh(path)
    g, _ = anim.global_transforms()
    names = anim.skeleton.names
    toes = [g[:, names.index(n)] for n in names if "toe" in n.lower() and "end" not in n.lower()][:2]
    return foot_sliding_cm_s(toes, anim.fps), bool(np.isfinite(g).all())


def test_synth_crowd_writes_one_bvh_per_agent_and_the_metrics(jlpm_db, jlpm_db_path, tmp_path):
    path = [[30, 0], [33, 0], [33, 3], [30, 3]]
    crowd = {"duration": 6, "avoidance": True, "agents": [
        {"start": [0, 0], "inputs": WALK_TURN},
        {"start": [30, 0], "yaw": 90, "path": {"points": path, "speed": 1.2, "loop": True}},
        {"start": [-30, 0], "goal": [-30, 6], "run": True, "tags": "!mirrored"},
        {"start": [-30, 8], "yaw": 180, "goal": [-30, 1]}]}
    (tmp_path / "c.json").write_text(json.dumps(crowd))
    out = tmp_path / "crowd"
    assert main(["synth", "--db", str(jlpm_db_path), "--crowd", str(tmp_path / "c.json"), "--out", str(out),
                 "--quiet"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["frames"] == 360 and len(m["agents"]) == 4
    assert m["collisions"] == 0 and 0.3 <= m["min_distance_m"] < 6.0     # the two goal agents meet
    for a in m["agents"]:
        assert {"nan_frames", "foot_sliding_cm_s", "foot_sliding_source_cm_s", "trajectory_error_cm",
                "responsiveness_s"} <= set(a) and a["nan_frames"] == 0 and a["frames"] == 360
    assert (out / "crowd.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Each agent's BVH reads back without NaN and slides less than the database's own motion; the
    # scripted agent slides no more than one character synthesized alone from the same input.
    for i in range(4):
        slide, finite = _bvh_sliding(out / f"agent_{i:03d}.bvh")
        assert finite and read_bvh(out / f"agent_{i:03d}.bvh").num_frames == 360
        assert slide < m["agents"][i]["foot_sliding_source_cm_s"], (i, slide)
    alone = synthesize(jlpm_db, {"duration": 6, "inputs": WALK_TURN}, tmp_path / "single", progress=False)
    single, _ = _bvh_sliding(tmp_path / "single" / "motion.bvh")
    # Every agent carries the keys a single synth writes (path agents: as a path scenario's, which
    # has no input changes to hold).
    for i in (0, 2, 3):
        assert set(m["agents"][i]) == set(alone), (i, set(m["agents"][i]) ^ set(alone))
    path_alone = synthesize(jlpm_db, {"duration": 1, "path": {"points": path, "speed": 1.2}}, tmp_path / "p",
                            progress=False)
    assert set(m["agents"][1]) == set(path_alone)
    a0 = m["agents"][0]
    assert a0["transitions_per_s"] > 0 and a0["search_us"]["median"] > 0 and a0["frame_us"]["median"] > 0
    assert 0 <= a0["heading_error_deg"]["mean"] < 30 and a0["tracking"]["velocity"]["mean"] > 0.5
    assert _bvh_sliding(out / "agent_000.bvh")[0] <= single * 1.05 + 0.2, single
    # The goal agents arrived and stopped.
    end = [read_bvh(out / f"agent_{i:03d}.bvh").global_transforms()[0][-1, 0] for i in (2, 3)]
    assert abs(end[0][2] - 6.0) < 0.5 and abs(end[1][2] - 1.0) < 0.5
