"""The app's VR mode (issue 12): a replayed tracker stream drives the page's character with the devices and
the ground-truth ghost in each frame; device poses streamed over the WebSocket (the WebXR path) drive the
avatar; bad tracker messages get errors naming the field; the page in chromium."""
from __future__ import annotations

import asyncio
import json

import aiohttp
import numpy as np
import pytest

from conftest import BANDAI, JLPM, _need
from motionmatch.app import backend as app_backend
from motionmatch.app import server as srv
from motionmatch.app import session as app_session
from motionmatch.app.vr import load_replay, setup_vr
from motionmatch.maths.rotations import quat_rotate
from motionmatch.vr.driver import VRDriverSettings, crouch_databases
from motionmatch.vr.orientation import save_networks
from motionmatch.vr.trackers import TrackerSettings, read_trackers, slice_stream, write_trackers_json
from app_fixtures import Client, ServerThread, run_browser_script
from vr_fixtures import hmd_forward_network

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
VR_SCRIPT = ROOT / "tests" / "browser" / "vr_test.mjs"
SAD_WALK = BANDAI / "dataset-1" / "dataset-1_walk_sad_001.bvh"


@pytest.fixture(scope="module")
def walk_stream():
    """Six seconds of the held-out tail of jlpm22 take 2: simulated devices on the database's skeleton."""
    stream, truth = read_trackers(_need(JLPM / "locomotion_take2.bvh"))
    start = int(0.8 * stream.num_frames)
    return slice_stream(stream, truth, start, start + 361)


@pytest.fixture(scope="module")
def vr_server(jlpm_db, walk_stream, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vr")
    model, trackers = tmp / "vr.npz", tmp / "walk.json"
    save_networks(model, {"network": hmd_forward_network()})
    write_trackers_json(trackers, walk_stream[0])
    app = srv.make_app(app_backend.runtime_backend(jlpm_db))
    # Height switching on (the mirrored clips standing in for crouching ones; the walk never crouches).
    setup_vr(app, jlpm_db, model, trackers, VRDriverSettings(height_databases=crouch_databases("mirrored")),
             clips=[("walk sad", _need(SAD_WALK), (0.0, 1.0))])
    s = ServerThread(app)
    yield s
    s.stop()


async def frames_since(c: Client, changed, n: int) -> list[bytes]:
    """The first frame whose debug satisfies `changed` and the n after it: frames streamed before a
    change (an HTTP request's) may still be on their way when it returns."""
    c.frames.clear()
    for _ in range(600):
        await c.pump_frames(1)
        if changed(c.debug(c.frames[-1])):
            break
    first = len(c.frames) - 1
    await c.pump_frames(n)
    return c.frames[first:]


def frame_arrays(client: Client, frame: bytes):
    """World joint positions (J, 3) and the debug JSON of one streamed frame."""
    J = len(client.hello["names"])
    pos = np.frombuffer(frame, "<f4", J * 3, app_session.FRAME_HEADER.size).reshape(J, 3)
    return pos, client.debug(frame)


def test_replay_streams_devices_ghost_and_the_clamped_avatar(vr_server, jlpm_db, walk_stream):
    head = jlpm_db.roles["head"]

    async def go():
        async with aiohttp.ClientSession() as http:
            async with http.get(vr_server.url + "/api/vr") as r:
                info = await r.json()
            c = await Client.open(http, vr_server.url)
            await c.pump_frames(150)
            replay = [frame_arrays(c, f) for f in c.frames[-30:]]
            sid = c.hello["session"]
            # A held-out mocap clip: ground truth, so a ghost skeleton and root errors.
            async with http.post(f"{vr_server.url}/api/session/{sid}/vr/clip/0") as r:
                clip = await r.json()
            ghosted = [frame_arrays(c, f) for f in await frames_since(
                c, lambda d: d["vr"] and d["vr"]["source"] == "walk sad", 30)]
            async with http.post(f"{vr_server.url}/api/session/{sid}/vr/clip/7") as r:
                bad_clip = (r.status, await r.json())
            async with http.post(f"{vr_server.url}/api/session/{sid}/vr/clip/-1") as r:
                negative_clip = (r.status, await r.json())
            # One 200 kB CSV field: beyond the csv module's field limit, a 400 naming the file, not a 500.
            async with http.post(f"{vr_server.url}/api/session/{sid}/vr/trackers?name=big.csv",
                                 data=b"t,hmd_x\n" + b"0," + b"1" * 200_000 + b"\n") as r:
                big_field = (r.status, await r.json())
            async with http.post(f"{vr_server.url}/api/session/{sid}/vr/trackers?name=t.json",
                                 data=b'{"fps": 60, "frames": [{"hmd": {"position": [0, 1.6, 0]}}]}') as r:
                bad_file = (r.status, await r.json())
            async with http.post(f"{vr_server.url}/api/session/{sid}/vr/trackers?name=../up.json",
                                 data=upload) as r:
                uploaded = await r.json()
            async with http.post(f"{vr_server.url}/api/session/{sid}/vr/stop") as r:
                stopped = await r.json()
            after_stop = [c.debug(f)["vr"] for f in await frames_since(c, lambda d: d["vr"] is None, 10)]
            await c.ws.close()
            return info, replay, clip, ghosted, (bad_clip, negative_clip, big_field), bad_file, uploaded, stopped, after_stop

    upload = json.dumps({"fps": 72, "frames": [tracker_message(walk_stream[0], f, 0)
                                                 for f in range(0, 120)]}).replace('"type": "trackers", "t": 0, ', '')
    info, replay, clip, ghosted, bad_clip, bad_file, uploaded, stopped, after_stop = run(go())
    assert info == {"enabled": True, "model": "vr.npz", "alpha": 0.3, "clips": ["walk sad"]}
    for pos, dbg in replay:
        vr = dbg["vr"]
        assert vr["source"] == "walk.json" and not vr["live"] and vr["ghost"] is None
        devices = np.array(vr["devices"])
        assert devices.shape == (3, 7)
        # The root is within the clamp of the HMD's floor projection; hands sit on reachable controllers.
        target = np.array(vr["target"])
        assert np.linalg.norm(pos[0, [0, 2]] - target[[0, 2]]) <= 0.3 + 1e-3
        assert np.linalg.norm(pos[head] - devices[0, :3]) < 0.6
        # Standing height calibrated over the first 2 s; upright: the character's own clips.
        assert 1.4 < vr["height"]["standing"] < 2.0 and vr["height"]["database"] == 1
        assert vr["height"]["tag_filter"] is None
    # Hands on the controllers where the arms reach them (most frames; see docs/VR.md).
    assert np.median([d["vr"]["hands_cm"] for _, d in replay]) < 1.0
    assert clip["source"] == "walk sad" and clip["frames"] > 100 and len(clip["ghost_parents"]) > 15
    for pos, dbg in ghosted:
        vr = dbg["vr"]
        ghost = np.array(vr["ghost"]).reshape(-1, 3)
        assert ghost.shape[0] == len(clip["ghost_parents"])
        # The ghost is the actor the devices were simulated on: its head is just below the HMD.
        assert np.min(np.linalg.norm(ghost - np.array(vr["devices"])[0, :3], axis=1)) < 0.2
        assert vr["root_cm"] <= 30.0 + 0.1 and vr["facing_deg"] >= 0.0
    bad_clip, negative_clip, big_field = bad_clip
    assert bad_clip[0] == 400 and "clip" in bad_clip[1]["message"]
    assert negative_clip[0] == 400 and "clip: expected 0..0" in negative_clip[1]["message"]
    assert big_field[0] == 400 and "big.csv" in big_field[1]["message"], big_field
    assert bad_file[0] == 400 and "t.json" in bad_file[1]["message"] and "frames[0].hmd.rotation" in bad_file[1]["message"]
    # An uploaded tracker file (120 frames at 72 fps: 100 at 60) replaces the stream; stop: the gamepad.
    assert uploaded["source"] == "up.json" and uploaded["frames"] == 100 and uploaded["ghost_parents"] is None
    assert stopped["source"] is None and not stopped["live"]
    assert len(after_stop) >= 11 and all(vr is None for vr in after_stop)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 90))


def tracker_message(stream, f: int, t: float) -> dict:
    msg = {"type": "trackers", "t": t}
    for d, name in enumerate(("hmd", "left", "right")):
        msg[name] = {"position": [round(float(x), 5) for x in stream.positions[f, d]],
                     "rotation": [round(float(x), 6) for x in stream.rotations[f, d]]}
    return msg


def test_streamed_device_poses_drive_the_avatar(vr_server, jlpm_db, walk_stream):
    """The WebXR path: the page sends device poses at 72 Hz (resampled to 60 by the server); the avatar's
    head follows the sent HMD and its hands the controllers; bad messages get errors naming the field
    and the stream goes on."""
    stream = walk_stream[0]
    head, hands = jlpm_db.roles["head"], [jlpm_db.roles["left_hand"], jlpm_db.roles["right_hand"]]
    hmd_offset = np.array(TrackerSettings.hmd_offset)
    fps = 72.0
    times = np.arange(0.0, (stream.num_frames - 1) / stream.fps, 1.0 / fps)

    async def go():
        async with aiohttp.ClientSession() as http:
            c = await Client.open(http, vr_server.url)
            await c.pump_frames(5)
            bad = []
            for text in ['{"type": "trackers", "hmd": {"position": [0, 1], "rotation": [1, 0, 0, 0]}, '
                         '"left": null, "right": null}',
                         '{"type": "trackers", "t": 1, "hmd": {"position": [0, 1, 0], "rotation": [0, 0, 0, 0]}, '
                         '"left": null, "right": null}',
                         '{"type": "trackers", "t": 1, "hmd": null, "left": null}',
                         '{"type": "trackers", "t": "soon", "hmd": null, "left": null, "right": null}']:
                await c.ws.send_str(text)
                bad.append((await c.next_text("error"))["message"])
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            sent, started = [], None
            for i, t in enumerate(times):
                # Interpolate the 60 fps stream at the headset's own 72 Hz times.
                x = t * stream.fps
                f = min(int(x), stream.num_frames - 2)
                a = x - f
                msg = tracker_message(stream, f if a < 0.5 else f + 1, 100.0 + t)
                await c.ws.send_str(json.dumps(msg))
                sent.append((loop.time(), t))
                if started is None:
                    started = await c.next_text("vr")
                if i == 100:
                    # A second late (a clock running back further restarts the stream instead).
                    await c.ws.send_str(json.dumps({"type": "trackers", "t": 100.0 + t - 1.0, "hmd": None,
                                                    "left": None, "right": None}))
                await c.pump(max(0.0, t0 + t - loop.time()))
            await c.pump(0.2)
            errors = [m["message"] for m in c.texts if m["type"] == "error"]
            await c.ws.close()
            return bad, started, errors, c

    bad, started, errors, c = run(go())
    assert "hmd.position: expected 3 numbers" in bad[0]
    assert "hmd.rotation: zero quaternion" in bad[1]
    assert "right" in bad[2] and "t" in bad[3] and "seconds" in bad[3]
    assert started["live"] and started["source"] == "live"
    assert any("t: times must increase" in e for e in errors)     # the late message, answered in stride
    live = [frame_arrays(c, f) for f in c.frames]
    live = [(p, d) for p, d in live if d["vr"] and d["vr"]["live"] and d["vr"]["devices"] is not None]
    assert len(live) > 200                        # the connection lived through the bad messages
    head_err, hand_err = [], []
    for pos, dbg in live[60:]:
        dev = np.array(dbg["vr"]["devices"])
        centre = dev[0, :3] - quat_rotate(dev[0, 3:], hmd_offset)
        head_err.append(np.linalg.norm(pos[head] - centre))
        hand_err.append(np.linalg.norm(pos[hands] - dev[1:, :3], axis=1))
    head_err, hand_err = np.array(head_err), np.array(hand_err)
    print("live: head error cm mean/max", 100 * head_err.mean(), 100 * head_err.max(),
          "hand error cm median", 100 * np.median(hand_err))
    assert np.mean(head_err) < 0.08 and np.max(head_err) < 0.25
    assert np.median(hand_err) < 0.02


@pytest.mark.slow
def test_vr_page_in_chromium(vr_server, walk_stream, tmp_path):
    stream = walk_stream[0]
    frames = [[{"position": stream.positions[f, d].round(5).tolist(), "rotation": stream.rotations[f, d].round(6).tolist()}
               for d in range(3)] for f in range(stream.num_frames)]
    (tmp_path / "frames.json").write_text(json.dumps(frames))
    report = run_browser_script(VR_SCRIPT, vr_server.url + "/?quality=low", tmp_path, timeout=180)
    assert not report["pageErrors"], report["pageErrors"]
    replay, clip, live, after = report["replay"], report["clip"], report["live"], report["after"]
    # The replay: the devices are drawn where the server's frame puts them; no ghost without ground truth.
    assert replay["enabled"] and replay["controls"] and replay["source"] == "walk.json"
    assert replay["devicesVisible"] and not replay["ghostVisible"] and len(replay["devices"]) == 3
    assert not replay["enterShown"]            # no immersive-vr in headless chromium: no Enter VR button
    # A held-out clip picked in the page: the ground-truth skeleton is drawn as a ghost.
    assert clip["source"] == "walk sad" and clip["ghostVisible"] and clip["ghostJoints"] > 15
    # Device poses streamed from the page drive the avatar: head on the HMD, hands on the controllers.
    head, hands = np.array(live["headErrors"]), np.array(live["handErrors"])
    print("page live: head error cm mean/max", 100 * head.mean(), 100 * head.max(), "hands median cm",
          100 * np.median(hands))
    # sent counts the 72 Hz timer's ticks: a loaded machine delays them (56 of the ~100 seen with a training
    # running alongside), so ask for half a second of them.
    assert live["live"] and live["sent"] > 30 and len(head) >= 30
    assert head.mean() < 0.08 and np.median(hands) < 0.02
    # The malformed message got an error naming the field; the connection and the stream went on.
    assert any("hmd.position" in e for e in live["errors"]), live["errors"]
    assert after["connected"] and after["frames"] > live["frames"]
