"""The browser app: HTTP routes, WebSocket validation and isolation, recording, and the page in chromium.

The server runs in a background thread on a free 127.0.0.1 port. It uses the library's runtime character
over $MOTIONMATCH_TEST_DB (or the cached default database). The browser test needs node, npm packages (`make node_modules`) and Debian chromium
(`make browser-deps`); it is skipped only when one of them is absent.
"""
from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import aiohttp
import numpy as np
import pytest
from aiohttp import web
from yarl import URL

from motionmatch.app import assets
from motionmatch.app import backend as app_backend
from motionmatch.app import messages
from motionmatch.app import server as srv
from motionmatch.app import session as app_session
from motionmatch.app import websocket as app_websocket
from motionmatch.app.state import STATE

from app_fixtures import (Client, ServerThread, browser_tools, database_path, default_backend, run,
                          run_browser_script)

ROOT = Path(__file__).resolve().parents[2]
BROWSER_SCRIPT = ROOT / "tests" / "browser" / "app_test.mjs"



@pytest.fixture(scope="module")
def server():
    s = ServerThread(srv.make_app(default_backend()))
    yield s
    s.stop()



def test_parse_message_rejects_bad_input():
    ok = messages.parse_message('{"type":"input","move":[0.6,-0.8],"run":true}')
    assert ok == ("input", {"move": (0.6, -0.8), "run": True})
    kind, f = messages.parse_message('{"type":"input","move":[1,-1]}')       # a gamepad's corner: clamped to 1
    assert f["move"] == pytest.approx((math.sqrt(0.5), -math.sqrt(0.5)))
    bad = ['{"type":"input","move":[2,0]}', '{"type":"input","move":[0]}', '{"type":"input","move":"up"}',
           '{"type":"input","move":[0,0],"run":1}', '{"type":"input","move":[NaN,0]}',
           '{"type":"input","move":[0,0],"x":1}', '{"type":"nope"}', '[1,2]', '{"type":"settings","bias":11}',
           '{"type":"settings","inertialization":"cubic"}', '{"type":"pause"}', "{", b"\x00\x01",
           '{"type":"settings","halflife":1e999}', " " * 5000]
    for text in bad:
        with pytest.raises(messages.MessageError):
            messages.parse_message(text)


def test_settings_weights_are_checked_at_the_door():
    schemas = messages.session_schemas(["a", "b"])
    assert messages.parse_message('{"type":"settings","weights":{"a":2}}', schemas) == ("settings", {"weights": {"a": 2.0}})
    with pytest.raises(messages.MessageError, match="unknown feature channel"):
        messages.parse_message('{"type":"settings","weights":{"a":2,"c":1}}', schemas)
    assert list(schemas) == list(messages.SCHEMAS)     # the same types, settings' weights narrowed


def test_every_message_type_has_one_handler():
    # The door (messages.SCHEMAS) and the dispatch table (websocket.HANDLERS) list the same types.
    assert list(app_websocket.HANDLERS) == list(messages.SCHEMAS)


# --------------------------------------------------------------------------------------------------
# HTTP


def test_page_static_vendor_and_traversal(server):
    async def go():
        async with aiohttp.ClientSession() as s:
            async with s.get(server.url + "/") as r:
                assert r.status == 200 and "importmap" in await r.text()
            async with s.get(server.url + "/static/app.js") as r:
                assert r.status == 200 and "window.motionmatch" in await r.text()
            three = server.app[STATE].three_dir is not None
            async with s.get(server.url + "/vendor/three/build/three.module.js") as r:
                assert r.status == (200 if three else 503)
                if three:
                    assert "javascript" in r.headers["Content-Type"]
            evil = ["/static/..%2f..%2fserver.py", "/static/%2e%2e/%2e%2e/server.py", "/static/../server.py",
                    "/static/..%5c..%5cserver.py", "/static/%2e%2e%2f%2e%2e%2fserver.py",
                    "/vendor/three/build/..%2f..%2fpackage.json", "/vendor/three/build/../../package.json",
                    "/vendor/three/examples/jsm/..%2f..%2f..%2fpackage.json", "/static/%2fetc%2fpasswd",
                    "/static//etc/passwd", "/static/..%252f..%252fserver.py", "/..%2fsrc%2fmotionmatch%2fapp%2fserver.py"]
            for path in evil:
                async with s.get(URL(server.url + path, encoded=True), allow_redirects=False) as r:
                    body = await r.text()
                    assert r.status in (400, 403, 404), (path, r.status)
                    assert "def make_app" not in body and "root:" not in body and '"version"' not in body, path
    run(go())


# --------------------------------------------------------------------------------------------------
# WebSocket


def test_malformed_messages_leave_server_and_other_clients_running(server):
    async def go():
        async with aiohttp.ClientSession() as s:
            a = await Client.open(s, server.url)
            b = await Client.open(s, server.url)
            assert a.hello["session"] != b.hello["session"]
            bad = ["{oops", json.dumps({"type": "input", "move": [3, 0]}),
                   json.dumps({"type": "input", "move": [0, 1], "jump": True}), json.dumps({"type": 7}),
                   json.dumps({"type": "settings", "search_interval": "often"}), "x" * 5000, "null", "[]"]
            for m in bad:
                await a.ws.send_str(m)
            await a.ws.send_bytes(b"\x00\xff binary")
            errors = [await a.next_text("error") for _ in range(len(bad) + 1)]
            assert any("binary" in e["message"] for e in errors)
            assert any("4096" in e["message"] for e in errors)
            # Both still stream; b walks forward undisturbed by a's garbage.
            n_a = len(a.frames)
            await b.ws.send_str(json.dumps({"type": "input", "move": [0.0, 1.0]}))
            b.frames.clear()
            await asyncio.gather(a.pump(1.0), b.pump(1.0))
            assert len(a.frames) > n_a + 20 and len(b.frames) > 30
            moved = b.debug(b.frames[-1])["sim_position"][2] - b.debug(b.frames[0])["sim_position"][2]
            assert 0.2 < moved < 4.0
            # Rate limit: a burst far above 120 messages/s is dropped with a warning.
            for _ in range(400):
                await a.ws.send_str(json.dumps({"type": "reset"}))
            warning = await a.next_text("warning")
            assert "messages/s" in warning["message"]
            # An oversize frame beyond the hard limit closes only that connection.
            await a.ws.send_str("y" * (app_websocket.MAX_FRAME_BYTES + 10))
            await a.pump(2.0)
            # 1009 (message too big) when the close frame arrives; 1006 when the server drops the
            # transport first under load. Either way only this connection ends.
            assert a.ws.closed and a.ws.close_code in (1009, 1006)
            b.frames.clear()
            await b.pump(0.5)
            assert len(b.frames) > 10
            async with s.get(server.url + "/api/status") as r:
                assert (await r.json())["sessions"] == 1
            await b.ws.close()
            await asyncio.sleep(0.2)
            async with s.get(server.url + "/api/status") as r:
                assert (await r.json())["sessions"] == 0   # a closed tab frees its character
    run(go())


def test_settings_are_validated_and_applied_live(server):
    async def go():
        async with aiohttp.ClientSession() as s:
            c = await Client.open(s, server.url)
            ch0 = c.hello["channels"][0]
            await c.ws.send_str(json.dumps({"type": "settings", "bias": 1.5, "weights": {ch0: 2.5},
                                            "inertialization": "off", "foot_locking": False}))
            st = (await c.next_text("settings"))["settings"]
            assert st["bias"] == 1.5 and st["weights"][ch0] == 2.5 and st["inertialization"] == "off"
            assert st["foot_locking"] is False
            assert st["warp_orientation"] is True
            await c.ws.send_str(json.dumps({"type": "settings", "warp_orientation": False, "warp_limit_deg": 45}))
            st = (await c.next_text("settings"))["settings"]
            assert st["warp_orientation"] is False and st["warp_limit_deg"] == 45
            assert (st["warp_hip_twist_limit_deg"], st["warp_spine_twist_limit_deg"]) == (50, 35)
            await c.ws.send_str(json.dumps({"type": "settings", "warp_hip_twist_limit_deg": 30,
                                            "warp_spine_twist_limit_deg": 20}))
            st = (await c.next_text("settings"))["settings"]
            assert (st["warp_hip_twist_limit_deg"], st["warp_spine_twist_limit_deg"]) == (30, 20)
            await c.ws.send_str(json.dumps({"type": "settings", "warp_limit_deg": 400}))
            assert "warp_limit_deg" in (await c.next_text("error"))["message"]
            await c.ws.send_str(json.dumps({"type": "settings", "weights": {"no_such_channel": 1.0}}))
            assert "no_such_channel" in (await c.next_text("error"))["message"]
            await c.ws.send_str(json.dumps({"type": "settings", "tag_filter": "walk & (("}))
            await c.next_text("error")
            if c.hello["tags"]:
                await c.ws.send_str(json.dumps({"type": "settings", "tag_filter": c.hello["tags"][0]}))
                assert (await c.next_text("settings"))["settings"]["tag_filter"] == c.hello["tags"][0]
            await c.ws.close()
    run(go())


def test_settings_schema_route_bounds_every_settings_message(server):
    """GET /api/settings/schema is the schema the messages are checked with: every numeric setting of the
    panel is accepted at its maximum and refused one beyond, naming the message field and `table.key`."""
    from motionmatch.runtime.settings_schema import app_fields, describe

    async def go():
        async with aiohttp.ClientSession() as s:
            async with s.get(server.url + "/api/settings/schema") as r:
                assert r.status == 200
                schema = await r.json()
            assert schema == json.loads(json.dumps(describe(server.app[STATE].backend.channel_weights)))
            # `motionmatch settings --json` over the served database prints the same object.
            out = subprocess.run([str(Path(sys.executable).parent / "motionmatch"), "settings", "--json", "--db",
                                  str(database_path())], capture_output=True, text=True, check=True).stdout
            assert json.loads(out) == schema and len(out.strip().splitlines()) == 1
            c = await Client.open(s, server.url)
            assert set(c.hello["channels"]) == set(schema["weights"])
            defaults = c.hello["settings"]
            checked = 0
            for field, row in app_fields().items():
                desc = schema[row.table][row.key]
                assert desc["app"]["field"] == field
                if desc["type"] != "float":
                    continue
                await c.ws.send_str(json.dumps({"type": "settings", field: desc["max"]}))
                assert (await c.next_text("settings"))["settings"][field] == desc["max"]
                await c.ws.send_str(json.dumps({"type": "settings", field: desc["max"] + 1e-6}))
                msg = (await c.next_text("error"))["message"]
                assert field in msg and row.name in msg and f"maximum {desc['max']:g}" in msg, msg
                checked += 1
            assert checked >= 8
            ch0 = c.hello["channels"][0]
            await c.ws.send_str(json.dumps({"type": "settings", "weights": {ch0: schema["weights"][ch0]["max"] + 1}}))
            assert f"weights.{ch0}" in (await c.next_text("error"))["message"]
            await c.ws.send_str(json.dumps({"type": "settings", **defaults}))
            assert (await c.next_text("settings"))["settings"] == defaults
            await c.ws.close()
    run(go())


def test_record_downloads_bvh(server, tmp_path):
    from motionmatch.io.bvh import read_bvh

    async def go():
        async with aiohttp.ClientSession() as s:
            c = await Client.open(s, server.url)
            sid = c.hello["session"]
            async with s.get(f"{server.url}/api/session/{sid}/record.bvh") as r:
                assert r.status == 404          # nothing recorded yet
            await c.ws.send_str(json.dumps({"type": "input", "move": [0.0, 1.0], "run": True}))
            await c.ws.send_str(json.dumps({"type": "record", "action": "start"}))
            await c.pump(0.6)
            await c.ws.send_str(json.dumps({"type": "record", "action": "stop"}))
            status = await c.next_text("record")
            while status["recording"]:
                status = await c.next_text("record")
            async with s.get(f"{server.url}/api/session/{sid}/record.bvh") as r:
                assert r.status == 200
                (tmp_path / "rec.bvh").write_bytes(await r.read())
            async with s.get(f"{server.url}/api/session/not-a-session/record.bvh") as r:
                assert r.status == 404
            await c.ws.close()
            return status["frames"]

    frames = run(go())
    anim = read_bvh(tmp_path / "rec.bvh")
    assert anim.num_frames == frames and frames >= 20
    assert abs(anim.fps - 60) < 0.01
    travel = anim.global_transforms()[0][-1, 0] - anim.global_transforms()[0][0, 0]
    assert 0.2 < float(travel[2]) < 3.0     # ran forward while recording


def test_recorded_session_replays_bit_for_bit(server, tmp_path):
    """The Record button's window, downloaded as an input log, replays (synth --replay's code) to exactly
    the poses the session recorded: stick changes, a settings change and a scenario inside it."""
    from motionmatch.posedb import database
    from motionmatch.offline.replay import replay_poses, window_ticks
    from motionmatch.runtime.input_log import load_log

    async def go():
        async with aiohttp.ClientSession() as s:
            c = await Client.open(s, server.url)
            sid = c.hello["session"]
            await c.ws.send_str(json.dumps({"type": "input", "move": [0.0, 1.0]}))
            await c.pump_frames(10)
            await c.ws.send_str(json.dumps({"type": "record", "action": "start"}))
            await c.pump_frames(15)
            await c.ws.send_str(json.dumps({"type": "settings", "bias": 0.2}))
            await c.ws.send_str(json.dumps({"type": "input", "move": [1.0, 0.0], "run": True}))
            await c.pump_frames(15)
            async with s.post(f"{server.url}/api/session/{sid}/scenario?name=turn",
                              json={"duration": 0.5, "inputs": [{"t": 0.0, "move": [0.0, -1.0]}]}) as r:
                assert r.status == 200
            await c.pump_frames(40)
            await c.ws.send_str(json.dumps({"type": "record", "action": "stop"}))
            status = await c.next_text("record")
            while status["recording"]:
                status = await c.next_text("record")
            async with s.get(f"{server.url}/api/session/{sid}/record.replay.json") as r:
                assert r.status == 200
                (tmp_path / "session.replay.json").write_bytes(await r.read())
            recorded = server.app[STATE].sessions[sid].recorded.arrays()
            await c.ws.close()
            return recorded

    pos, rot = run(go())
    log = load_log(tmp_path / "session.replay.json")
    names = {next(k for k in e if k != "tick") for e in log["entries"]}
    assert {"input", "settings", "driver"} <= names
    ticks = window_ticks(log)
    # 70 frames were received after the start was sent, but those already on their way when the server read
    # it were ticked before the recording began (69 under two test workers on a loaded machine).
    assert len(ticks) == len(pos) >= 60
    again = replay_poses(database.load_database(database_path()), log)
    assert np.array_equal(again["local_pos"][ticks, 0].astype(np.float32), pos)
    assert np.array_equal(again["local_rot"][ticks, 0].astype(np.float32), rot)


def test_scenario_upload_plays_and_bad_one_is_refused(server):
    async def go():
        async with aiohttp.ClientSession() as s:
            c = await Client.open(s, server.url)
            url = f"{server.url}/api/session/{c.hello['session']}/scenario"
            async with s.post(url, data=b"{not json", headers={"Content-Type": "application/json"}) as r:
                assert r.status == 400
            async with s.post(url, json={"duration": 1.0, "inputs": [{"t": 0.0, "move": [0, 1], "jump": 1}]}) as r:
                assert r.status == 400 and "jump" in (await r.json())["message"]
            scen = {"duration": 1.5, "inputs": [{"t": 0.0, "move": [-1.0, 0.0]}]}
            async with s.post(url + "?name=left", json=scen) as r:
                assert r.status == 200 and (await r.json())["state"] == "playing"
            done = await c.next_text("scenario", timeout=5.0)
            assert done["state"] == "finished"
            assert c.debug(c.frames[-1])["sim_position"][0] < -0.2
            await c.ws.close()
    run(go())


# --------------------------------------------------------------------------------------------------
# The page in a browser



@pytest.mark.slow
def test_scenario_obstacles_are_drawn_and_cleared_in_chromium(server, tmp_path):
    """A scenario's obstacles stand in the terrain panel while it plays (issue 29) and go when it stops."""
    report = run_browser_script(ROOT / "tests" / "browser" / "obstacles_test.mjs", server.url + "/?quality=low",
                                tmp_path, timeout=180)
    assert not report["pageErrors"], report["pageErrors"]
    circle, box = report["drawn"]
    assert circle["center"] == [0.0, 3.0] and circle["radius"] == 0.6
    assert box["min"] == [1.5, 4.0] and box["max"] == [2.5, 6.0]
    assert circle["drawnAt"][0] == 0.0 and circle["drawnAt"][2] == 3.0 and circle["drawnAt"][1] > 0.4
    assert box["drawnAt"][0] == 2.0 and box["drawnAt"][2] == 5.0
    assert report["cleared"] and (tmp_path / "obstacles.png").stat().st_size > 10_000
    # Walking +z at the pillar: past it, and no root the page showed inside it (radius 0.6 m).
    path = report["path"]
    assert path[-1][1] > 4.0, path[-5:]
    assert min(math.hypot(x, z - 3.0) for x, z in path) > 0.6


@pytest.mark.slow
def test_page_in_chromium(server, tmp_path):
    report = run_browser_script(BROWSER_SCRIPT, server.url + "/?quality=low", tmp_path, timeout=180)
    assert not report["pageErrors"], report["pageErrors"]
    start, fwd, turn = report["start"], report["afterForward"], report["afterTurn"]
    assert start["connected"] and start["names"] >= 15 and start["session"]
    # Holding W for 2 s walks forward (+z: the camera starts looking along +z) a plausible distance.
    dz = fwd["root"][2] - start["root"][2]
    dx = fwd["root"][0] - start["root"][0]
    assert 0.8 < dz < 8.0 and abs(dx) < 0.5 * dz, (start["root"], fwd["root"])
    # Holding D turns the character towards screen right.
    dyaw = (turn["yaw"] - fwd["yaw"] + math.pi) % (2 * math.pi) - math.pi
    assert abs(dyaw) > 0.6, (fwd["yaw"], turn["yaw"])
    # Malformed messages from the page were answered with errors and the stream went on.
    after = report["afterMalformed"]
    assert after["connected"] and len(after["errors"]) >= 6 and report["framesDuringMalformed"] > 5
    # The canvas shows something (ground, character, overlays), not a flat colour.
    assert report["canvas"]["variance"] > 50
    # Rewind shows an earlier frame while paused; resuming continues the simulation.
    rw = report["rewind"]
    assert rw["mode"] == "rewind" and rw["shownTime"] < rw["liveTime"] - 0.5
    assert report["resumed"]["time"] > rw["liveTime"]
    assert (tmp_path / "forward.png").stat().st_size > 10_000
