"""The search's collision term (issue 29, runtime/collision_term.py, docs/OBSTACLES.md): every back-end's
answer with the term is the brute-force least (feature cost + penalty) under the same rule, with masks,
skips, bias and annotations; the term is off without obstacles or avoiding agents."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from conftest import BANDAI, _need

from motionmatch.posedb.annotations import load_annotations, resolve
from motionmatch.posedb.database import BuildSettings, build_database
from motionmatch.world.obstacles import parse_obstacles
from motionmatch.runtime.collision_term import (Group, Placed, apply_collision_term, brute_with_penalty,
                                                candidate_paths, collision_world, penalty)
from motionmatch.runtime.crowd import Crowd
from motionmatch.runtime.matching import trajectory_layout
from motionmatch.runtime.search_sets import search_set
from motionmatch.runtime.settings import CharacterSettings

D1 = BANDAI / "dataset-1"
NAMES = ("walk_active_001", "run_active_001", "walk-left_active_001", "bow_active_001")


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    """Four dataset-1 clips (mirrored) with a cost bias, an excluded stretch and a branch-in clip, so the
    annotations' frame costs and entry rules take part."""
    db = build_database([_need(D1) / f"dataset-1_{n}.bvh" for n in NAMES], BuildSettings(), progress=False)
    path = tmp_path_factory.mktemp("ann") / "ann.json"
    path.write_text(json.dumps({"annotation": [
        {"clip": "dataset-1_walk_active_001.bvh", "kind": "cost_bias", "time": [0.5, 2.0], "cost": -0.3},
        {"clip": "dataset-1_run_active_001.bvh", "kind": "exclude", "time": [0.2, 0.8]},
        {"clip": "dataset-1_walk-left_active_001.bvh", "kind": "branch_in", "time": [0.5, 0.5]}]}))
    ann = resolve(load_annotations(path), db.range_names, db.range_starts, db.range_stops, db.fps)
    return dataclasses.replace(db, annotations=ann)


OBSTACLES = parse_obstacles([{"center": [0.0, 1.2], "radius": 0.4}, {"min": [0.6, -0.5], "max": [1.0, 2.5]},
                             {"center": [-3.0, 9.0], "radius": 0.5}])


@pytest.mark.parametrize("backend", ["brute_numpy", "brute", "aabb"])
def test_every_backend_matches_brute_force_with_the_penalty(db, backend):
    ss = search_set(db, CharacterSettings(search_backend=backend))
    offsets, layout = trajectory_layout(db.features.schema, db.features.channel_slices)
    times = offsets / db.fps
    cand = candidate_paths(np.ascontiguousarray(db.features.raw), layout)
    paths, point_k, reach = cand
    assert paths.shape == (db.num_frames, len(offsets), 2) and 0.5 < reach < 10.0
    walk = ss.mask(db, "walk")[1]
    rng = np.random.default_rng(7)
    settled = same_as_base = 0
    for trial in range(120):
        n = 6
        roots = np.zeros((n, 3))
        roots[:, [0, 2]] = rng.uniform(-1.0, 1.5, (n, 2))
        roots[0, [0, 2]] = rng.uniform(-0.6, 0.3, 2)
        yaws = rng.uniform(-np.pi, np.pi, n)
        vel = rng.uniform(-1.2, 1.2, (n, 2))
        use_agents = trial % 3 != 0
        obstacles = OBSTACLES if trial % 3 != 1 else None
        world = collision_world(obstacles, roots[:, [0, 2]], vel, times, use_agents)
        f0 = int(rng.integers(db.num_frames))
        q = ss.normalize(db.features.raw[f0] + rng.normal(0.0, 0.3, db.features.raw.shape[1]))
        current = int(rng.integers(-1, db.num_frames))
        skip, bias = int(rng.choice([0, 5, 30])), float(rng.choice([0.0, 0.04, 0.5]))
        weight = float(rng.choice([1.0, 10.0, 100.0]))
        mask = walk if trial % 4 == 0 else None
        b, c = ss.searcher.search(q, current=current, skip=skip, bias=bias, mask=mask)
        best, cost = np.array([b]), np.array([c])
        group = Group(np.array([0]), q[None], np.array([current]), np.array([weight]), roots, yaws)
        settled += apply_collision_term(ss.searcher, mask, group, skip, bias, world, cand, best, cost)
        agents = world.others[1:] if use_agents else np.zeros((0, len(offsets), 2))
        obs = obstacles if obstacles is not None else parse_obstacles([])
        ref = brute_with_penalty(ss.searcher, mask, q, current, skip, bias, weight, cand,
                                 Placed(roots[0, 0], roots[0, 2], yaws[0], obs, agents))
        assert (int(best[0]), float(cost[0])) == ref, trial
        same_as_base += ref[0] == b
        if ref[0] >= 0:                      # the answer's own total: its feature cost plus its penalty
            pen = penalty(paths, point_k, ref[0], roots[0, 0], roots[0, 2], yaws[0], tuple(obs), agents)
            assert ref[1] >= pen * weight
    assert settled > 30                       # most trials put the plain answer in a collision ...
    assert same_as_base < 100                 # ... and the term changed many answers


def test_the_term_is_off_without_obstacles_or_avoiding_agents(db):
    crowd = Crowd(db, 3)
    assert crowd.collision_world() is None               # no obstacles, agents not counted
    crowd.set_collision_agents(True)
    assert crowd.collision_world() is not None
    crowd.settings = [CharacterSettings(collision_weight=0.0)] * 3
    crowd.apply_settings()
    assert crowd.collision_world() is None               # weight 0: off
    single = Crowd(db, 1)
    single.set_collision_agents(True)
    assert single.collision_world() is None              # alone: no agents to meet
    single.set_obstacles(OBSTACLES)
    assert single.collision_world() is not None
