"""Database sets (issue 29, docs/ANNOTATIONS.md): a character switches the part of the database it searches,
with its own weights, now or at its next search; scenario steps switch sets too."""
from __future__ import annotations

import pytest
from conftest import BANDAI, _need

from motionmatch.posedb.database import BuildSettings, build_database
from motionmatch.runtime.character import Character
from motionmatch.runtime.controller import GamepadInput
from motionmatch.runtime.database_sets import SetSpec, parse_sets
from motionmatch.runtime.matching import FORCE, TIMER
from motionmatch.offline.scenario import ScenarioError, parse_scenario
from motionmatch.offline.synth import run_scenario

D1 = BANDAI / "dataset-1"


@pytest.fixture(scope="module")
def db():
    files = [_need(D1) / f"dataset-1_{n}.bvh" for n in ("walk_active_001", "run_active_001", "bow_active_001")]
    return build_database(files, BuildSettings(), progress=False)


def tags_of(db, ch):
    return db.range_tags[db.range_of(ch.frame)]


def walking(db, spec):
    ch = Character(db)
    ch.use_set(spec)
    for _ in range(60):
        ch.step(GamepadInput(move=(0.0, 0.8)))
    assert "walk" in tags_of(db, ch)
    return ch


def test_a_set_switches_now_with_interrupt(db):
    sets = parse_sets({"walk": {"tags": "walk"}, "run": {"tags": "run", "weights": {"hips_velocity": 2.0}}})
    ch = walking(db, sets["walk"])
    ch.use_set(sets["run"], interrupt=True)
    assert ch.crowd.search_state[0, FORCE] == 1.0
    ch.step(GamepadInput(move=(0.0, 0.8)))
    assert "run" in tags_of(db, ch)                     # the very next tick plays the run clips
    assert ch.settings.weights["hips_velocity"] == 2.0 and ch.crowd.active_set == ["run"]
    for _ in range(120):
        ch.step(GamepadInput(move=(0.0, 0.8)))
        assert "run" in tags_of(db, ch)
    ch.use_set(sets["walk"], interrupt=True)           # back: the weights before the first switch return
    assert "hips_velocity" not in ch.settings.weights


def test_a_set_switches_at_the_next_search_without_interrupt(db):
    sets = parse_sets({"walk": {"tags": "walk"}, "run": {"tags": "run"}})
    ch = walking(db, sets["walk"])
    ch.crowd.search_state[0, TIMER] = 0.05             # the next search of its own phase is 3 ticks away
    ch.use_set(sets["run"], interrupt=False)
    assert ch.crowd.search_state[0, FORCE] == 0.0
    seen = []
    for _ in range(12):
        ch.step(GamepadInput(move=(0.0, 0.8)))
        seen.append("run" in tags_of(db, ch))
    assert not any(seen[:2]) and seen[-1] and sum(seen) >= 8


def test_bad_sets_name_the_field(db):
    with pytest.raises(ValueError, match=r"sets\.a\.weights"):
        parse_sets({"a": {"weights": {"hips_velocity": -1}}})
    with pytest.raises(ValueError, match=r"sets\.a: expected an object"):
        parse_sets({"a": {"tag": "walk"}})
    ch = Character(db)
    with pytest.raises(ValueError, match="nothing"):
        ch.use_set(SetSpec("x", weights={"nothing": 1.0}))
    assert ch.settings.weights == {} and ch.crowd.active_set == [None]      # nothing changed


def test_scenario_steps_switch_sets(db):
    sc = parse_scenario({"duration": 4.0, "sets": {"walk": {"tags": "walk"}, "run": {"tags": "run"}},
                         "inputs": [{"t": 0.0, "move": [0, 0.8]}, {"t": 0.0, "set": "walk"},
                                    {"t": 2.0, "set": "run", "interrupt": False}]})
    rec = run_scenario(db, sc, pose_sink=lambda lp, lr: None)
    frames = rec["frames"]
    assert all("walk" in db.range_tags[db.range_of(f)] for f in frames[10:110])
    assert all("run" in db.range_tags[db.range_of(f)] for f in frames[140:])
    with pytest.raises(ScenarioError, match=r"inputs\[1\]\.set: no set named 'jog'"):
        parse_scenario({"duration": 4.0, "sets": {"walk": {}}, "inputs": [{"t": 0.0, "move": [0, 1]},
                                                                          {"t": 1.0, "set": "jog"}]})


def test_app_switches_sets_and_lists_annotations(db, tmp_path):
    """The page's search_set message switches the set; the clips endpoint lists each clip's annotations."""
    import dataclasses
    import json

    import aiohttp
    from app_fixtures import Client, ServerThread, run

    from motionmatch.posedb.annotations import load_annotations, resolve
    from motionmatch.app import backend as app_backend
    from motionmatch.app import messages
    from motionmatch.app import server as srv

    assert messages.parse_message('{"type":"search_set","name":"run","tags":"run","interrupt":false}') == (
        "search_set", {"name": "run", "tags": "run", "interrupt": False})
    with pytest.raises(messages.MessageError, match="interrupt"):
        messages.parse_message('{"type":"search_set","name":"run","interrupt":3}')
    side = tmp_path / "a.json"
    side.write_text(json.dumps([{"clip": "dataset-1_run_active_001.bvh", "kind": "cost_bias", "cost": -2.5,
                                 "time": [0.5, 1.0]}]))
    ann = resolve(load_annotations(side), db.range_names, db.range_starts, db.range_stops, db.fps)
    server = ServerThread(srv.make_app(app_backend.runtime_backend(dataclasses.replace(db, annotations=ann))))

    async def go():
        async with aiohttp.ClientSession() as s:
            c = await Client.open(s, server.url)
            sid = c.hello["session"]
            async with s.get(f"{server.url}/api/session/{sid}/clips") as r:
                clips = (await r.json())["clips"]
            run_clip = next(x for x in clips if x["name"] == "dataset-1_run_active_001.bvh")
            assert run_clip["annotations"] == [{"kind": "cost_bias", "start": 30, "stop": 61, "cost": -2.5}]
            assert all(x["annotations"] == [] for x in clips if "run" not in x["tags"])
            await c.ws.send_json({"type": "input", "move": [0, 0.8]})
            await c.ws.send_json({"type": "search_set", "name": "run", "tags": "run"})
            assert (await c.next_text("search_set"))["name"] == "run"
            assert (await c.next_text("settings"))["settings"]["tag_filter"] == "run"   # the page's panel shows it
            c.frames.clear()
            await c.pump_frames(20)
            assert all("run" in c.debug(f)["tags"] for f in c.frames[5:])
            await c.ws.send_json({"type": "search_set", "name": "x", "tags": "swim"})
            assert "swim" in (await c.next_text("error"))["message"]
    try:
        run(go())
    finally:
        server.stop()
