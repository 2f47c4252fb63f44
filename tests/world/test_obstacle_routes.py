"""Routes round static obstacles (world/obstacle_routes.py): the grid A*'s paths keep clear of every shape and
find the one way through, following them, and crowds that reach goals a straight walk (with steering)
cannot."""
import numpy as np
import pytest

from motionmatch.offline.crowd_synth import parse_crowd, run_crowd
from motionmatch.world.obstacles import parse_obstacles, segment_clearance, signed_distance
from motionmatch.world.obstacle_routes import (HARD_CLEARANCE, RoutePlanner, RouteState, pack_routes, route_targets)

# A wall across the way with its only opening at the far right end, a pillar in the opening's approach:
# from below the wall the goal above is 4 m away in a straight line and about 14 m round.
BAFFLE = [{"min": [-8.0, -0.15], "max": [3.0, 0.15]}, {"min": [5.0, -4.0], "max": [5.4, 4.0]},
          {"min": [-8.4, -4.0], "max": [-8.0, 4.0]}, {"center": [4.0, -2.0], "radius": 0.35}]


def _length(p):
    return float(np.linalg.norm(np.diff(p, axis=0), axis=1).sum())


def test_a_route_goes_through_the_one_opening_and_keeps_clear():
    o = parse_obstacles(BAFFLE)
    planner = RoutePlanner(o, [[-2.0, -2.0], [-2.0, 2.0]])
    p = planner.plan([-2.0, -2.0], [-2.0, 2.0])
    assert np.array_equal(p[0], [-2.0, -2.0]) and np.array_equal(p[-1], [-2.0, 2.0])
    crossing = p[np.argmin(np.abs(p[:, 1]))]
    assert 3.0 < crossing[0] < 5.0                              # through the opening between x 3 and 5
    clear = min(segment_clearance(o, *p[k], *p[k + 1]) for k in range(len(p) - 1))
    assert clear >= 0.5                                          # the opening is 2 m wide: room for 0.5 m
    # Round the wall's end: at least 2 x 5 m sideways plus the 4 m, and not much more (the middle of gaps
    # and the keep-right lane cost a little).
    assert 14.0 < _length(p) < 19.0


def test_no_way_through_gives_the_straight_line_and_walls_are_snapped_out_of():
    ring = [{"min": [-2.0, -2.0], "max": [2.0, -1.8]}, {"min": [-2.0, 1.8], "max": [2.0, 2.0]},
            {"min": [-2.0, -2.0], "max": [-1.8, 2.0]}, {"min": [1.8, -2.0], "max": [2.0, 2.0]}]
    o = parse_obstacles(ring)
    planner = RoutePlanner(o, [[-5.0, 0.0], [0.0, 0.0]])
    assert np.array_equal(planner.plan([-5.0, 0.0], [0.0, 0.0]), [[-5.0, 0.0], [0.0, 0.0]])   # walled in
    # A start 0.1 m from a wall (inside the agents' radius) still gets a route, which leaves the wall.
    p = planner.plan([-2.1, 0.0], [-2.1, 4.0])
    assert len(p) > 2 and np.array_equal(p[0], [-2.1, 0.0])
    assert signed_distance(o, p[1:-1]).min() >= HARD_CLEARANCE - 0.05


def test_open_ground_is_a_straight_line():
    o = parse_obstacles([{"center": [20.0, 20.0], "radius": 1.0}])
    assert np.array_equal(RoutePlanner(o, [[0, 0], [5, 5]]).plan([0.0, 0.0], [5.0, 5.0]), [[0, 0], [5, 5]])


def test_following_aims_ahead_on_the_route_and_replans_when_pushed_off():
    o = parse_obstacles(BAFFLE)
    starts, goals = np.array([[-2.0, -2.0], [0.0, -3.0]]), np.array([[-2.0, 2.0], [0.0, 3.0]])
    state = RouteState(o, starts, goals, [0, 1])
    target = route_targets(state, starts, 0.0)
    for i in range(2):                       # toward the opening (+x), not at the wall (+z)
        d = target[i] - starts[i]
        assert d[0] > 1.0 and abs(d[1]) < d[0] and np.linalg.norm(d) == pytest.approx(2.0, abs=0.35)
    plans = state.plans
    pushed = starts.copy()
    pushed[0] = [-6.0, -3.0]                 # 4 m off its route
    route_targets(state, pushed, 5.0)
    assert state.plans == plans + 1 and state.paths[0][0].tolist() == [-6.0, -3.0]
    pushed[0] = [-6.0, -0.5]                 # lost again within REPLAN_EVERY: no new plan yet
    route_targets(state, pushed, 5.5)
    assert state.plans == plans + 1 and state.lost[0]
    r = pack_routes([np.array([[0.0, 0.0], [3.0, 4.0]]), np.array([[1.0, 1.0]])])
    assert r.arc.tolist() == [0.0, 5.0, 0.0] and r.first.tolist() == [0, 2] and r.count.tolist() == [2, 1]


def test_a_crowd_round_a_baffle_reaches_every_goal_with_no_root_inside(jlpm_db):
    """Four agents, two each way, whose goals lie straight across a wall with one opening at its far end
    (a layout of our own, unlike the corridor's): every one walks round through the opening."""
    agents = [{"start": [x, -2.5], "yaw": 0, "goal": [x, 2.5]} for x in (-3.0, -1.0)]
    agents += [{"start": [x, 2.5], "yaw": 180, "goal": [x, -2.5]} for x in (-2.0, 0.0)]
    spec = parse_crowd({"duration": 24.0, "obstacles": BAFFLE, "agents": agents})
    rec = run_crowd(jlpm_db, spec)
    root = rec["root_pos"][:, :, [0, 2]]
    assert signed_distance(spec.obstacles, root.reshape(-1, 2)).min() > 0.0      # no root ever inside
    goals = np.array([a.goal for a in spec.agents])
    assert np.linalg.norm(root[-1] - goals, axis=1).max() < 0.75


def test_a_packed_goal_block_behind_a_doorway_fills_in_the_worst_order(jlpm_db):
    """A second layout (a hall: a wall across with a 1.6 m doorway, a pillar): nine agents in three files
    walk into a 3 x 3 goal block 0.8 m apart, the first in line bound for the nearest goals, so later
    arrivals must walk in between agents already standing on theirs, and one agent crosses the other way.
    Arrived agents hold their place and are passed close (crowd_synth.holding_distances): all ten arrive
    (5 / 10 with holding switched off: pushed off and walked round)."""
    hall = [{"min": [-8.0, 3.0], "max": [8.0, 3.4]}, {"min": [-8.0, -3.4], "max": [8.0, -3.0]},
            {"min": [-0.2, 0.8], "max": [0.2, 3.0]}, {"min": [-0.2, -3.0], "max": [0.2, -0.8]},
            {"center": [-2.5, 1.5], "radius": 0.4}]
    agents = [{"start": [-3.5 - 0.9 * k, z * 1.1], "yaw": 90, "goal": [x, z]}
              for k, x in enumerate((3.0, 3.8, 4.6)) for z in (-0.8, 0.0, 0.8)]
    agents.append({"start": [5.0, 2.2], "yaw": -90, "goal": [-5.0, -2.0]})
    spec = parse_crowd({"duration": 24.0, "obstacles": hall, "agents": agents})
    rec = run_crowd(jlpm_db, spec)
    root = rec["root_pos"][:, :, [0, 2]]
    assert signed_distance(spec.obstacles, root.reshape(-1, 2)).min() > 0.0      # no root ever inside
    goals = np.array([a.goal for a in spec.agents])
    assert np.linalg.norm(root[-1] - goals, axis=1).max() < 0.75               # all ten reached (0.12-0.15 m)
