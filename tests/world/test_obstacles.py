"""Static obstacles (issue 29): the shapes and their distances, steering around them, crowds that keep
every root outside, the penetration metric and the files' validation."""
import json

import numpy as np
import pytest

from motionmatch.world.avoidance import AvoidanceState, avoid
from motionmatch.offline.crowd_synth import CrowdError, parse_crowd, run_crowd
from motionmatch.world.obstacles import (no_obstacles, parse_obstacles, penetration, segment_clearance, signed_distance,
                                         steer, time_to_hit)
from motionmatch.offline.scenario import ScenarioError, parse_scenario
from motionmatch.offline.synth import synthesize

SHAPES = [{"center": [0.0, 5.0], "radius": 1.0}, {"min": [2.0, 2.0], "max": [4.0, 3.0]}]


def test_signed_distance_of_circles_and_boxes():
    o = parse_obstacles(SHAPES)
    d = signed_distance(o, [[0, 0], [0, 5], [0, 4.5], [3, 2.5], [3, 2.1], [5, 4], [3, 0]])
    assert d == pytest.approx([2.828427, -1.0, -0.5, -0.5, -0.1, np.sqrt(2), 2.0], abs=1e-6)
    assert signed_distance(no_obstacles(), [[0, 0]])[0] == np.inf


def test_segment_clearance_and_time_to_hit_agree_with_dense_sampling():
    o = parse_obstacles(SHAPES)
    rng = np.random.default_rng(3)
    for _ in range(300):
        a, b = rng.uniform(-2, 6, 2), rng.uniform(-2, 6, 2)
        t = np.linspace(0, 1, 4001)[:, None]
        sampled = signed_distance(o, a + t * (b - a))
        c = segment_clearance(o, a[0], a[1], b[0], b[1])
        if sampled.min() > 0:
            assert c == pytest.approx(sampled.min(), abs=2e-3)      # exact apart
        else:
            assert c <= 0.0                                          # crossing: a non-positive bound
        # The time the moving point comes within 0.4 m, against sampling its path over 2 s.
        v = (b - a) / 2.0
        ts = np.linspace(0, 2, 8001)
        close = np.flatnonzero(signed_distance(o, a + ts[:, None] * v) <= 0.4)
        th = time_to_hit(o, a[0], a[1], v[0], v[1], 0.4)
        if len(close):
            assert th == pytest.approx(ts[close[0]], abs=1e-3)
        else:
            assert th > 2.0 - 1e-3


def test_steering_turns_only_when_blocked_and_keeps_the_speed():
    o = parse_obstacles([{"center": [0.0, 2.0], "radius": 0.5}])
    assert steer(o, 3.0, 0.0, 0.0, 1.3, 0.5, 1.5, 1.0) == (0.0, 1.3)        # clear ahead: untouched
    vx, vz = steer(o, 0.0, 0.0, 0.0, 1.3, 0.5, 1.5, 1.0)                     # dead ahead: to the right (+x)
    assert vx > 0.3 and np.hypot(vx, vz) == pytest.approx(1.3)
    d = np.array([vx, vz]) / 1.3
    assert segment_clearance(o, 0.0, 0.0, 1.95 * d[0], 1.95 * d[1]) >= 0.5   # the chosen run is clear
    vx2, _ = steer(o, -0.2, 0.0, 0.0, 1.3, 0.5, 1.5, 1.0)                   # left of centre: left
    assert vx2 < 0.0


@pytest.mark.parametrize("value, message", [
    ([{"center": [0, 0]}], r"obstacles\[0\].radius: missing"),
    ([{"center": [0, 0], "radius": 1}, {"center": [0, 0], "radius": -1}], r"obstacles\[1\].radius: expected metres"),
    ([{"min": [0, 0], "max": [1, 0]}], r"obstacles\[0\].max: z 0 is not above min 0"),
    ([{"center": [0, "a"], "radius": 1}], r"obstacles\[0\].center: expected two numbers"),
    ([{"center": [0, 0], "radius": 1, "min": [0, 0]}], r"obstacles\[0\].min: expected exactly"),
    ({"center": [0, 0], "radius": 1}, "obstacles: expected a list"),
])
def test_bad_obstacles_name_the_entry_and_field(value, message):
    with pytest.raises(ScenarioError, match=message):
        parse_scenario({"duration": 2, "inputs": [{"t": 0, "move": [0, 1]}], "obstacles": value})
    with pytest.raises(CrowdError, match=message):
        parse_crowd({"duration": 2, "agents": [{"start": [5, 5], "goal": [6, 6]}], "obstacles": value})


def test_crowd_agents_may_not_start_or_end_inside_an_obstacle():
    with pytest.raises(CrowdError, match=r"agents\[1\].goal: \[0, 5\] lies inside an obstacle"):
        parse_crowd({"duration": 2, "obstacles": SHAPES,
                     "agents": [{"start": [-3, 0], "goal": [-3, 3]}, {"start": [-2, 0], "goal": [0, 5]}]})
    sc = parse_scenario({"duration": 2, "inputs": [{"t": 0, "move": [0, 1]}], "obstacles": SHAPES})
    assert parse_scenario(json.loads(json.dumps(sc.to_dict()))).obstacles.to_list() == SHAPES


def test_penetration_is_the_deepest_root_and_the_time_inside():
    o = parse_obstacles([{"center": [0.0, 0.0], "radius": 1.0}])
    path = np.stack([np.linspace(-2, 2, 61), np.zeros(61)], axis=1)     # straight through, 1/15 m per frame
    p = penetration(o, path, 60.0)
    assert p["max_cm"] == pytest.approx(100.0)
    assert p["seconds_inside"] == pytest.approx(29 / 60, abs=1e-3)
    assert penetration(o, path + [0, 3], 60.0) == {"max_cm": 0.0, "seconds_inside": 0.0}


def test_avoidance_without_obstacles_is_unchanged():
    rng = np.random.default_rng(0)
    pos, vel = rng.uniform(-3, 3, (30, 2)), rng.uniform(-1, 1, (30, 2))
    pref, top = rng.uniform(-1.3, 1.3, (30, 2)), np.full(30, 1.3)
    a = avoid(AvoidanceState.zeros(30), pos, vel, pref, top)
    b = avoid(AvoidanceState.zeros(30), pos, vel, pref, top, obstacles=no_obstacles())
    far = avoid(AvoidanceState.zeros(30), pos, vel, pref, top,
                obstacles=parse_obstacles([{"center": [500.0, 500.0], "radius": 1.0}]))
    assert np.array_equal(a, b) and np.array_equal(a, far)


def test_a_scenario_walking_at_an_obstacle_passes_around_it(jlpm_db, tmp_path):
    """Walking straight at a pillar: the simulation bends around it, the root never enters it, and the
    character ends up beyond it, back on its heading."""
    sc = {"duration": 6.0, "inputs": [{"t": 0.0, "move": [0, 1]}],
          "obstacles": [{"center": [0.0, 3.0], "radius": 0.6}]}
    m = synthesize(jlpm_db, sc, tmp_path, progress=False)
    assert m["obstacle_penetration_cm"] == {"max_cm": 0.0, "seconds_inside": 0.0}
    from motionmatch.offline.synth import run_scenario
    rec = run_scenario(jlpm_db, parse_scenario(sc))
    root = rec["root_pos"]
    assert root[-1, 2] > 5.0                                  # went past the pillar (z = 3)
    side = root[np.argmin(np.abs(root[:, 2] - 3.0))]
    assert abs(side[0]) > 0.6 + 0.3                           # beside it, with room


def test_a_small_corridor_crowd_keeps_every_root_outside_and_arrives(jlpm_db):
    """Six agents, three each way, through a 2.5 m doorway in a wall across a 6 m corridor with a
    pillar on each side (the small version of scenarios/crowds/corridor50.json)."""
    obstacles = [{"min": [-9.0, 3.0], "max": [9.0, 3.5]}, {"min": [-9.0, -3.5], "max": [9.0, -3.0]},
                 {"min": [-0.2, 1.25], "max": [0.2, 3.0]}, {"min": [-0.2, -3.0], "max": [0.2, -1.25]},
                 {"center": [-3.0, 0.0], "radius": 0.5}, {"center": [3.0, 0.0], "radius": 0.5}]
    agents = [{"start": [-6.0, z], "yaw": 90, "goal": [6.0, z]} for z in (-1.8, 0.0, 1.8)]
    agents += [{"start": [6.0, z], "yaw": -90, "goal": [-6.0, z]} for z in (-0.9, 0.9, 2.2)]
    spec = parse_crowd({"duration": 16.0, "obstacles": obstacles, "agents": agents})
    rec = run_crowd(jlpm_db, spec)
    root = rec["root_pos"][:, :, [0, 2]]
    depth = signed_distance(spec.obstacles, root.reshape(-1, 2))
    assert depth.min() > 0.0                                   # no root ever inside a shape
    goals = np.array([a.goal for a in spec.agents])
    assert np.linalg.norm(root[-1] - goals, axis=1).max() < 0.75
