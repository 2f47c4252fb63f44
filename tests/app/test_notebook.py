"""Notebook widgets: the Python side (motion from a BVH, a synth folder or arrays; the live character
stepped by view messages, bad messages answered with errors) and the ES module rendering a skinned
character in chromium from a static page with a stand-in for anywidget's model."""
from __future__ import annotations

import json

import numpy as np
import pytest

from browser_pages import probe
from motionmatch.app.assets import STATIC_DIR
from motionmatch.io.bvh import read_bvh, write_bvh
from motionmatch.notebook import LiveCharacterWidget, MotionWidget

BYTE_TRAITS = ("positions", "rotations", "glb")


@pytest.fixture(scope="module")
def walk_bvh(jlpm_dir, tmp_path_factory):
    anim = read_bvh(jlpm_dir / "locomotion_take1.bvh")
    anim.positions, anim.rotations = anim.positions[840:960], anim.rotations[840:960]
    folder = tmp_path_factory.mktemp("synth_out")
    write_bvh(folder / "motion.bvh", anim)
    return folder / "motion.bvh"


def test_motion_widget_from_bvh_folder_and_arrays(walk_bvh):
    anim = read_bvh(walk_bvh)
    w = MotionWidget(walk_bvh, body=False)
    F, J = anim.num_frames, anim.skeleton.num_joints
    pos = np.frombuffer(w.positions, "<f4").reshape(F, J, 3)
    assert w.frames == F and w.names == anim.skeleton.names and w.glb == b"" and w.character is None
    assert np.abs(pos - anim.global_transforms()[0]).max() < 1e-5
    assert "build/three.module.js" in w.three and "export class SkinnedBody" in w.three["skinned.js"]
    folder = MotionWidget(walk_bvh.parent)            # a synth output folder, with the default body
    assert folder.positions == w.positions and folder.glb[:4] == b"glTF" and folder.character["hips"] == "Hips"
    arr = MotionWidget.from_arrays(anim.skeleton.names, anim.skeleton.parents, anim.positions, anim.rotations,
                                   fps=60, body=False)
    assert np.abs(np.frombuffer(arr.positions, "<f4") - np.frombuffer(w.positions, "<f4")).max() < 1e-4
    with pytest.raises(ValueError, match="expected positions"):
        MotionWidget.from_arrays(anim.skeleton.names, anim.skeleton.parents, anim.positions[:, :3], anim.rotations)
    with pytest.raises(FileNotFoundError, match="no motion.bvh"):
        MotionWidget(walk_bvh.parent.parent)
    with pytest.raises(FileNotFoundError, match="nope.bvh"):
        MotionWidget(walk_bvh.parent / "nope.bvh")


def _live(jlpm_db):
    w = LiveCharacterWidget(jlpm_db, body=False)
    sent = []
    w.send = lambda content, buffers=None: sent.append((content, buffers))
    return w, sent


def test_live_widget_steps_on_view_messages(jlpm_db):
    w, sent = _live(jlpm_db)
    start = np.asarray(w.character_sim.global_positions)[0].copy()
    for _ in range(45):
        w._on_message(w, {"type": "step", "move": [0.0, 1.0], "run": False, "steps": 2}, [])
    assert all(c["type"] == "frame" for c, _ in sent) and len(sent) == 45
    J = len(w.names)
    pos = np.frombuffer(sent[-1][1][0], np.float32).reshape(J, 3)
    rot = np.frombuffer(sent[-1][1][1], np.float32).reshape(J, 4)
    assert np.allclose(np.linalg.norm(rot, axis=1), 1, atol=1e-4)
    assert 0.8 < pos[0, 2] - start[2] < 3.5        # 1.5 s walking forward (+z)
    sent.clear()
    for bad in ({"type": "step", "move": [5, 0]}, {"type": "step", "move": [0, 1], "steps": 40},
                {"type": "jump"}, [1, 2], {"type": "step", "move": [0, 1], "fly": True}):
        w._on_message(w, bad, [])
    assert [c["type"] for c, _ in sent] == ["error"] * 5


def _write_state(widget, folder, replies=()):
    folder.mkdir(parents=True, exist_ok=True)
    traits = {k: v for k, v in widget.get_state().items() if k not in BYTE_TRAITS and not k.startswith("_")}
    spec = {"traits": traits, "bytes": {}, "replies": len(replies)}
    for k in BYTE_TRAITS:
        if getattr(widget, k, b""):
            (folder / f"{k}.bin").write_bytes(getattr(widget, k))
            spec["bytes"][k] = f"{k}.bin"
    (folder / "frames").mkdir(exist_ok=True)
    for i, (pos, rot) in enumerate(replies):
        (folder / "frames" / f"{i}.pos").write_bytes(pos.tobytes())
        (folder / "frames" / f"{i}.rot").write_bytes(rot.tobytes())
    (folder / "state.json").write_text(json.dumps(spec))


@pytest.mark.slow
def test_widget_module_renders_a_skinned_character(walk_bvh, jlpm_db, tmp_path):
    # A small view: software WebGL in headless chromium draws a few frames a second.
    _write_state(MotionWidget(walk_bvh, height=160), tmp_path / "motion")
    r = probe({"page": "/pages/widget_page.html", "routes": {"/files/": tmp_path / "motion", "/esm/": STATIC_DIR}})["result"]
    assert "error" not in r, r["error"]
    assert r["body"]["loaded"] and r["body"]["bones"] == 22 and r["body"]["poses"] >= 20
    assert r["variance"] > 50 and r["buttons"] == 1
    # Live: recorded poses of a character walking forward answer the view's step messages.
    w, _ = _live(jlpm_db)
    w.height = 160
    w._set_body(jlpm_db.skeleton, jlpm_db.roles, None)
    replies = [w.step((0.0, 1.0), steps=2) for _ in range(30)]
    _write_state(w, tmp_path / "live", replies)
    rep = probe({"page": "/pages/widget_page.html", "routes": {"/files/": tmp_path / "live", "/esm/": STATIC_DIR},
                 "waitFor": "window.testResult !== undefined", "hold": {"key": "KeyW", "ms": 1500},
                 "result": "({...window.testResult, forward: window.sent.filter((m) => m.move[1] === 1 && m.move[0] === 0).length})"})
    live = rep["result"]
    assert "error" not in live, live["error"]
    assert live["body"]["loaded"] and live["frames"] >= 20
    assert all(m["type"] == "step" and 1 <= m["steps"] <= 4 for m in live["sent"])
    assert live["forward"] >= 1            # holding W asked for forward steps
