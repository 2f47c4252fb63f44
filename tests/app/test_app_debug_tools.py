"""The app's debugging tools: the inspect / play_clip / debug / terrain messages, the clips and terrain
endpoints, and the page's panels driven in chromium at 1280x720 (tests/browser/debug_tools_test.mjs)."""
from __future__ import annotations

import io
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from motionmatch.app import messages
from motionmatch.app import server as srv
from motionmatch.app import session as app_session
from motionmatch.world.terrain import Heightfield
from app_fixtures import Client, ServerThread, default_backend, run, run_browser_script

SCRIPT = Path(__file__).resolve().parents[1] / "browser" / "debug_tools_test.mjs"


@pytest.fixture(scope="module")
def server():
    s = ServerThread(srv.make_app(default_backend()))
    yield s
    s.stop()


def test_debug_messages_are_validated():
    assert messages.parse_message('{"type":"play_clip","clip":null}') == ("play_clip", {"clip": None})
    assert messages.parse_message('{"type":"terrain","kind":"steps"}') == ("terrain", {"kind": "steps"})
    for bad, needle in (('{"type":"play_clip","clip":-1}', "clip"), ('{"type":"play_clip","clip":1.5}', "clip"),
                        ('{"type":"terrain","kind":"lava"}', "kind"),
                        ('{"type":"inspect","query":[],"current":0,"bias":0}', "query"),
                        ('{"type":"inspect","query":[1,"a"],"current":0,"bias":0}', r"query\[1\]"),
                        ('{"type":"debug","ghosts":1}', "ghosts")):
        with pytest.raises(messages.MessageError, match=needle):
            messages.parse_message(bad)


def test_inspect_play_clip_ghosts_and_terrain_over_the_socket(server):
    from PIL import Image

    async def go():
        async with aiohttp.ClientSession() as s:
            c = await Client.open(s, server.url)
            sid = c.hello["session"]
            async with s.get(f"{server.url}/api/session/{sid}/clips") as r:
                clips = (await r.json())["clips"]
            assert len(clips) >= 2 and all(c_["frames"] > 60 and c_["tags"] for c_ in clips)
            await c.ws.send_json({"type": "input", "move": [0.0, 1.0], "run": True})
            await c.pump(1.0)
            rec = c.debug(c.frames[-1])["search"]
            assert rec is not None and rec["t"] > 0
            # The graphs' posture: a running knee bends, the actor's moving median is the database's.
            posture = c.debug(c.frames[-1])["posture"]
            assert 60.0 < posture["knee_deg"] <= 180.0 and 130.0 < posture["knee_source_deg"] < 155.0
            await c.ws.send_json({"type": "inspect", "query": rec["query"], "current": rec["current"],
                                  "bias": rec["bias"], "tag_filter": rec["tag_filter"]})
            ins = await c.next_text("inspect")
            assert len(ins["candidates"]) == 8 and ins["best"] == rec["frame"], (ins["best"], rec)
            first = ins["candidates"][0]
            assert set(first["channels"]) == set(c.hello["channels"])
            assert clips[first["clip"]]["start"] + first["clip_frame"] == first["frame"]
            assert len(ins["query_raw"]) == len(first["raw"]) == len(rec["query"])
            assert [ch["name"] for ch in ins["schema"]] == c.hello["channels"]
            # A wrong query length is an error reply, not a crash.
            await c.ws.send_json({"type": "inspect", "query": [0.0], "current": -1, "bias": 0.0})
            assert "query must hold" in (await c.next_text("error"))["message"]
            # Play clip 1 from frame 100: the playhead walks through it.
            await c.ws.send_json({"type": "play_clip", "clip": 1, "offset": 100})
            await c.next_text("play_clip")
            c.frames.clear()
            await c.pump_frames(20)
            d = c.debug(c.frames[-1])
            assert d["frame"] - clips[1]["start"] == d["clip_frame"] and 100 < d["clip_frame"] < 100 + 60, d["frame"]
            await c.ws.send_json({"type": "play_clip", "clip": len(clips)})
            assert "outside" in (await c.next_text("error"))["message"]
            # Ghosts: two (J*3) poses per frame while on.
            await c.ws.send_json({"type": "debug", "ghosts": True})
            await c.next_text("debug")
            c.frames.clear()
            await c.pump_frames(10)
            g = c.debug(c.frames[-1])["ghosts"]
            assert len(g["raw"]) == len(g["before_touchups"]) == 3 * len(c.hello["names"])
            assert "speed" in c.debug(c.frames[-1])
            # Terrain: procedural, then a PNG heightmap; a broken PNG names the upload.
            await c.ws.send_json({"type": "terrain", "kind": "slope"})
            assert (await c.next_text("terrain"))["name"] == "slope"
            async with s.get(f"{server.url}/api/session/{sid}/terrain") as r:
                t = await r.json()
            h = np.array(t["heights"]).reshape(t["shape"])
            assert h.shape[0] <= app_session.TERRAIN_SAMPLES and np.ptp(h) > 1.0      # a 10 degree slope over 40 m
            buf = io.BytesIO()
            Image.fromarray(np.tile(np.linspace(0, 255, 64, dtype=np.uint8), (64, 1))).save(buf, "PNG")
            async with s.post(f"{server.url}/api/session/{sid}/terrain?name=ramp.png&scale=0.5&cell=0.1",
                              data=buf.getvalue()) as r:
                assert r.status == 200 and (await r.json())["name"] == "ramp.png"
            async with s.get(f"{server.url}/api/session/{sid}/terrain") as r:
                t = await r.json()
            assert t["shape"] == [64, 64] and max(t["heights"]) == pytest.approx(0.5)
            async with s.post(f"{server.url}/api/session/{sid}/terrain?name=junk.png", data=b"not a png") as r:
                body = await r.json()
                assert r.status == 400 and "junk.png" in body["message"] and "/tmp" not in body["message"]
            await c.ws.send_json({"type": "terrain", "kind": "flat"})
            await c.next_text("terrain")
            async with s.get(f"{server.url}/api/session/{sid}/terrain") as r:
                assert (await r.json())["heights"] is None
            await c.ws.close()
    run(go())


@pytest.mark.slow
def test_debug_tools_in_chromium_at_1280x720(server, tmp_path):
    r = run_browser_script(SCRIPT, server.url + "/?quality=low", tmp_path)
    assert not r["pageErrors"] and not r["console"], (r["pageErrors"], r["console"])
    # 1280x720: Defaults inside the window, no label or value cut off; the example uses real tags.
    lay = r["layout"]
    assert 0 <= lay["defaults"][0] and lay["defaults"][2] <= lay["width"] and lay["defaults"][3] <= lay["height"]
    assert lay["cut"] == []
    # Every overlay and ghost toggle in sight: inside the window and the panel, which needs no scrolling.
    assert len(lay["toggles"]) == 9 and lay["hud"]["scroll"] <= lay["hud"]["client"] + 1, lay["hud"]
    assert all(0 < t["top"] and t["bottom"] <= min(lay["height"], lay["hud"]["bottom"]) for t in lay["toggles"]), lay["toggles"]
    assert any(t in lay["placeholder"] for t in lay["tags"])
    # Search inspector: a jump picked from the timeline ticks shows 8 candidates with costs per channel.
    ins = r["inspector"]
    assert r["tick"]["j"] >= 0 and ins["tab"] == "search" and ins["mode"] == "rewind"
    assert ins["jumped"] and ins["record"]["t"] == r["tick"]["t"]
    assert len(ins["candidates"]) == 8 and ins["rows"] == 9            # 8 + the continuing frame
    assert ins["best"] == ins["candidates"][0]["frame"] == ins["record"]["frame"]
    assert all(c["cost"] > 0 and len(c["channels"]) >= 7 for c in ins["candidates"])
    assert ins["continue"]["cost"] > ins["candidates"][0]["cost"]       # it jumped: continuing cost more
    # Every cost shown in full, the query-vs-match view on screen without scrolling the panel, and nothing
    # it draws reaches its label strip or the canvas edge (the view's ink box is in canvas pixels).
    assert len(ins["costCells"]) == 9 and all(sw <= cw for _, sw, cw in ins["costCells"]), ins["costCells"]
    assert ins["hud"]["scroll"] <= ins["hud"]["client"] + 1 and ins["plotBox"][3] <= min(720, ins["hud"]["bottom"]), ins["hud"]
    plot = ins["plot"]
    x0, y0, x1, y1 = plot["ink"]
    assert y0 >= plot["strip"] + 6 and x0 >= 6 and x1 <= plot["width"] - 6 and y1 <= plot["height"] - 6, plot
    assert r["pause"]["before"] == r["pause"]["after"] and r["pause"]["mode"] == "rewind"
    # The panel's database set: switched at the next search, its tags shown as the tag filter.
    st = r["set"]
    assert st["set"] == {"type": "search_set", "name": st["tag"], "interrupt": False}, st
    assert st["filter"] == st["shown"] == st["tag"], st
    # Database browser: clip 1 plays from its start; the playhead names it by clip and frame.
    cl = r["clips"]
    assert cl["rows"] >= 2 and cl["resume"]
    assert cl["frame"] - cl["clip1"]["start"] == cl["clipFrame"] and 20 < cl["clipFrame"] < 200
    name = cl["clip1"]["name"].replace(".bvh", "").replace(" (mirrored)", "")
    assert cl["playhead"].startswith(f"{name} +") and cl["playhead"].endswith("(mirrored)") == ("mirrored" in cl["clip1"]["tags"])
    # Ghosts appear and go.
    assert r["ghostsOn"]["shown"] == {"raw": True, "before_touchups": True} and r["ghostsOn"]["joints"] > 30
    assert r["ghostsOff"]["shown"] == {"raw": False, "before_touchups": False} and not r["ghostsOff"]["sent"]
    # Graphs drew every series over the history, with transitions.
    gr = r["graphs"]
    transitions = gr["series"].pop("transitions")
    assert gr["series"].pop("style_switches") >= 0
    assert gr["frames"] > 200 and min(gr["series"].values()) > 100 and transitions > 0 and gr["ink"] > 0.2
    # Terrain: the steps are drawn and walking forward climbed them.
    t = r["terrain"]
    assert t["name"] == "steps" and t["samples"] > 10_000
    assert t["hips"][1] > t["hips0"] + 0.3
    # The steps are drawn as the runtime's heightfield: flat treads and one-cell risers, no ramps between
    # subsampled heights; the overlays lie on it, and it reaches 100 m past the character and more.
    steps = Heightfield.procedural("steps")
    x, y, z = np.array(t["profile"], dtype=float).T
    assert np.abs(y - steps.height(x, z)).max() < 2e-3
    assert len(np.unique(y.round(3))) >= 10                  # 10 m of profile climb through the steps
    grounded = [p for name in ("disc", "desired", "matched", "contacts") for p in t["overlays"][name]]
    assert len(grounded) >= 10 and max(p[1] for p in grounded) > 0.3
    for px, py, pz in grounded:
        assert abs(py - steps.height(px, pz)) < 2e-3, (px, py, pz)
    for view in (t, r["flat"]):
        (xmin, xmax, zmin, zmax), (rx, _, rz) = view["extent"], view["root"]
        assert xmin < rx - 95 and xmax > rx + 95 and zmin < rz - 95 and zmax > rz + 95, view["extent"]
    assert all(abs(p[1]) < 1e-6 for p in r["flat"]["overlays"]["disc"])
    # A bad tag filter: one error, its caret line kept.
    te = r["tagError"]
    assert te["count"] == 1 and "^" in te["errors"][-1]
    assert te["toasts"] and te["toasts"][-1]["pre"]
    assert (tmp_path / "inspector.png").stat().st_size > 10_000
    # Software rendering is slow: without ?quality=low the page switches by itself and says so.
    q = r["quality"]
    assert q["quality"].startswith("low (auto:") and q["hud"] == q["quality"], q
