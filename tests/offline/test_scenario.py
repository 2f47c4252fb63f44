import json

import numpy as np
import pytest

from conftest import MOCAP
from motionmatch.runtime.controller import Controller, GamepadInput, PathFollower
from motionmatch.offline.scenario import (
                                          InputDriver, Scenario, ScenarioError, load_scenario, parse_scenario, random_scenario, simulate,
                                          )

SHARED = MOCAP.parent / "scenarios"     # beside the motion capture (conftest: $MOTIONMATCH_DATA/..)
BASE = {"duration": 12.0, "style": None, "inputs": [
    {"t": 0.0, "move": [0.0, 1.0], "run": False, "strafe": False, "look": None},
    {"t": 4.0, "move": [1.0, 0.0], "run": True, "strafe": False, "look": None},
    {"t": 8.0, "move": [0.0, 0.0]},
]}


def test_parse_inputs_and_lookup():
    sc = parse_scenario(BASE)
    assert not sc.is_path and sc.duration == 12.0 and sc.style is None
    assert sc.input_at(0.0).move == (0.0, 1.0)
    assert sc.input_at(3.999).move == (0.0, 1.0)
    assert sc.input_at(4.0) == GamepadInput(move=(1.0, 0.0), run=True)
    assert sc.input_at(100.0).move == (0.0, 0.0)
    assert sc.change_times == (0.0, 4.0, 8.0)
    assert isinstance(sc.make_driver(), InputDriver)
    assert parse_scenario(sc.to_dict()) == sc


def test_neutral_before_first_input_and_repeated_inputs():
    sc = parse_scenario({"duration": 5, "inputs": [{"t": 1.0, "move": [0, 1]}, {"t": 2.0, "move": [0, 1]},
                                                   {"t": 3.0, "move": [0, 0.5]}]})
    assert sc.input_at(0.5) == GamepadInput()
    assert sc.change_times == (0.0, 1.0, 3.0)


@pytest.mark.parametrize("name", ["walk_turn_stop.json", "square_path.json"])
def test_shared_examples_load_and_simulate(name):
    sc = load_scenario(SHARED / name)
    pos, yaw = simulate(sc, fps=30)
    assert pos.shape == (int(sc.duration * 30) + 1, 3)
    assert np.all(np.isfinite(pos)) and np.ptp(pos[:, 2]) > 2.0


def test_path_scenario():
    sc = load_scenario(SHARED / "square_path.json")
    assert sc.is_path and sc.path.loop and sc.path.speed == 1.2
    assert isinstance(sc.make_driver(), PathFollower)
    assert sc.change_times == (0.0,)
    assert parse_scenario(sc.to_dict()) == sc


def bad(mod):
    d = json.loads(json.dumps(BASE))
    mod(d)
    return d


@pytest.mark.parametrize("data, field", [
    (bad(lambda d: d["inputs"][2].update(move=[1.6, 0.0])), "inputs[2].move: expected two numbers in [-1.5, 1.5]"),
    (bad(lambda d: d["inputs"][2].update(move=[float("nan"), 0.0])), "inputs[2].move"),
    (bad(lambda d: d["inputs"][1].update(move=[1.0])), "inputs[1].move"),
    (bad(lambda d: d["inputs"][1].update(move=["a", 0])), "inputs[1].move"),
    (bad(lambda d: d["inputs"][0].update(look=[3, 0])), "inputs[0].look"),
    (bad(lambda d: d["inputs"][0].update(jump=True)), "inputs[0].jump: unknown field"),
    (bad(lambda d: d.update(speed=3)), "speed: unknown field"),
    (bad(lambda d: d["inputs"][1].update(t=0.0)), "inputs[1].t: times must increase"),
    (bad(lambda d: d["inputs"][1].update(t=20.0)), "inputs[1].t"),
    (bad(lambda d: d["inputs"][1].update(run="yes")), "inputs[1].run"),
    (bad(lambda d: d["inputs"][1].pop("move")), "inputs[1].move: missing"),
    (bad(lambda d: d.update(duration=-1)), "duration"),
    (bad(lambda d: d.pop("duration")), "duration: missing"),
    (bad(lambda d: d.update(style=3)), "style"),
    (bad(lambda d: d.update(seed=1.5)), "seed"),
    (bad(lambda d: d.update(terrain=[1])), "terrain"),
    (bad(lambda d: d.update(inputs=[])), "inputs"),
    (bad(lambda d: d.update(path={"points": [[0, 0], [1, 0]], "speed": 1})), "exactly one"),
    ({"duration": 5, "path": {"points": [[0, 0]], "speed": 1}}, "path.points"),
    ({"duration": 5, "path": {"points": [[0, 0], [0, "x"]], "speed": 1}}, "path.points[1]"),
    ({"duration": 5, "path": {"points": [[0, 0], [1, 0]], "speed": 0}}, "path.speed"),
    ({"duration": 5, "path": {"points": [[0, 0], [1, 0]], "speed": 1, "laps": 2}}, "path.laps: unknown field"),
    ({"duration": 5, "path": {"points": [[0, 0], [0, 0]], "speed": 1}}, "zero length"),
    ([1, 2], "scenario"),
])
def test_validation_errors_name_the_field(data, field):
    with pytest.raises(ScenarioError) as e:
        parse_scenario(data)
    assert field in str(e.value)
    assert isinstance(e.value, ValueError)


def test_optional_fields_pass_through(tmp_path):
    d = dict(BASE, terrain={"kind": "bumps", "height": 0.1}, seed=3, style="walk & !injured")
    p = tmp_path / "s.json"
    p.write_text(json.dumps(d))
    sc = load_scenario(p)
    assert sc.terrain == {"kind": "bumps", "height": 0.1} and sc.seed == 3 and sc.style == "walk & !injured"
    sc.save(tmp_path / "t.json")
    assert load_scenario(tmp_path / "t.json") == sc
    p.write_text("{not json")
    with pytest.raises(ScenarioError):
        load_scenario(p)


def test_random_scenario_is_valid_reproducible_and_varied():
    a = random_scenario(120.0, seed=4)
    assert a == random_scenario(120.0, seed=4) and a != random_scenario(120.0, seed=5)
    again = parse_scenario(a.to_dict())                   # passes validation
    assert again.inputs == a.inputs
    inputs = [i for _, i in a.inputs]
    assert len(inputs) > 30
    assert any(i.run for i in inputs) and any(i.strafe for i in inputs) and any(i.move == (0.0, 0.0) for i in inputs)
    pos, yaw = simulate(a, fps=30)
    assert np.all(np.isfinite(pos))
    speed = np.linalg.norm(np.diff(pos, axis=0), axis=1) * 30
    assert speed.max() < Controller().settings.run_forward_speed * 1.05
