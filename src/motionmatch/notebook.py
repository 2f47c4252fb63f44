"""Jupyter widgets (anywidget, the `notebook` extra): play a motion, or drive a live character with the
keyboard, in a three.js view like the app's (the skinned body from body/mesh.py, capsules as a debug toggle,
the root's path on the ground).

    from motionmatch.notebook import MotionWidget, LiveCharacterWidget
    MotionWidget("out/walk")                      # a synth output folder, a .bvh file or an Animation
    MotionWidget.from_arrays(names, parents, local_positions, local_rotations, fps=60)
    LiveCharacterWidget("~/.cache/motionmatch/jlpm22-locomotion.npz")   # click the view, then WASD + Shift

three.js travels with the widget: its modules (node_modules, or the copy a wheel carries; see
app.assets.find_three) are sent once as text and linked in the browser from blob URLs, so the notebook
needs neither network nor bundler. Motion is sent as world joint positions (F, J, 3) and local joint
rotations (F, J, 4, w x y z) in float32, metres, Y up.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import anywidget
import numpy as np
import traitlets

from .motion.animation import Animation
from .app.assets import STATIC_DIR, find_three
from .app.messages import MessageError, parse_message
from .io.bvh import read_bvh
from .io.gltf import write_gltf
from .body.mesh import body_mesh
from .body.rigged_model import identity_retarget
from .motion.skeleton import find_roles
from .motion.animation import Skeleton
from .posedb.database import load_database
from .runtime.character import Character, CharacterSettings
from .runtime.controller import GamepadInput
from .body.mesh import ensure_body_glb

THREE_FILES = ("build/three.core.js", "build/three.module.js", "examples/jsm/utils/BufferGeometryUtils.js",
               "examples/jsm/utils/SkeletonUtils.js", "examples/jsm/loaders/GLTFLoader.js")
LIVE_FPS = 60.0
MAX_STEPS_PER_MESSAGE = 4       # the view asks for the 60 Hz steps it missed, up to this many


def three_sources() -> dict[str, str]:
    """three.js modules the widget links (path under three/ -> source), plus the app's skinned.js."""
    three = find_three()
    if three is None:
        raise FileNotFoundError("three.js not found: run `npm ci` in the project, set MOTIONMATCH_NODE_MODULES, "
                                "or install the motionmatch wheel (it carries three.js)")
    out = {}
    for rel in THREE_FILES:
        path = three / rel
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing from the three.js install")
        out[rel] = path.read_text(encoding="utf-8")
    out["skinned.js"] = (STATIC_DIR / "skinned.js").read_text(encoding="utf-8")
    return out


def load_motion(motion) -> Animation:
    """An Animation from a .bvh path, a synth output folder (its motion.bvh) or an Animation."""
    if isinstance(motion, Animation):
        return motion
    path = Path(motion).expanduser()
    if path.is_dir():
        if not (path / "motion.bvh").is_file():
            raise FileNotFoundError(f"{path}: no motion.bvh in this folder (expected a synth output folder)")
        path = path / "motion.bvh"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such motion file")
    return read_bvh(path)


def _body_glb(skeleton, roles) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        return write_gltf(Path(tmp) / "body.glb", skeleton=skeleton, mesh=body_mesh(skeleton, roles)).read_bytes()


class _View(anywidget.AnyWidget):
    """Traits shared by both widgets (synced to the ES module static/widget.js)."""

    _esm = STATIC_DIR / "widget.js"
    mode = traitlets.Unicode("motion").tag(sync=True)
    names = traitlets.List(traitlets.Unicode()).tag(sync=True)
    parents = traitlets.List(traitlets.Int()).tag(sync=True)
    fps = traitlets.Float(60.0).tag(sync=True)
    character = traitlets.Dict(allow_none=True, default_value=None).tag(sync=True)
    glb = traitlets.Bytes(b"").tag(sync=True)
    three = traitlets.Dict().tag(sync=True)
    height = traitlets.Int(420).tag(sync=True)

    def _set_body(self, skeleton, roles, glb: bytes | None) -> None:
        roles = roles or find_roles(skeleton.names)
        self.glb = glb if glb is not None else _body_glb(skeleton, roles)
        self.character = {"name": "default body", **identity_retarget(skeleton, roles)}


class MotionWidget(_View):
    """Plays a motion in a loop (play/pause, scrub, capsules toggle). body=False draws capsules only."""

    positions = traitlets.Bytes(b"").tag(sync=True)      # float32 (F, J, 3) world, metres
    rotations = traitlets.Bytes(b"").tag(sync=True)      # float32 (F, J, 4) local, w x y z
    frames = traitlets.Int(0).tag(sync=True)
    playing = traitlets.Bool(True).tag(sync=True)

    def __init__(self, motion, body: bool = True, **kwargs):
        super().__init__(**kwargs)
        anim = load_motion(motion)
        gpos, _ = anim.global_transforms()
        skel = anim.skeleton
        self.mode = "motion"
        self.names, self.parents = list(skel.names), [int(p) for p in skel.parents]
        self.fps = float(anim.fps)
        self.frames = anim.num_frames
        self.positions = np.ascontiguousarray(gpos, "<f4").tobytes()
        self.rotations = np.ascontiguousarray(anim.rotations, "<f4").tobytes()
        self.three = three_sources()
        if body:
            self._set_body(skel, None, None)

    @classmethod
    def from_arrays(cls, names, parents, local_positions, local_rotations, fps: float = 60.0, **kwargs):
        """A motion given as arrays: local_positions (F, J, 3) metres, local_rotations (F, J, 4) w x y z."""
        pos = np.asarray(local_positions, np.float64)
        rot = np.asarray(local_rotations, np.float64)
        J = len(names)
        if pos.ndim != 3 or pos.shape[1:] != (J, 3) or rot.shape != pos.shape[:2] + (4,) or len(parents) != J:
            raise ValueError(f"arrays: expected positions (F, {J}, 3), rotations (F, {J}, 4) and {J} parents; "
                             f"got {pos.shape}, {rot.shape} and {len(parents)}")
        skel = Skeleton(names=list(names), parents=np.asarray(parents), offsets=pos[0].copy())
        return cls(Animation(skeleton=skel, positions=pos, rotations=rot, fps=float(fps)), **kwargs)


class LiveCharacterWidget(_View):
    """A runtime character on a database, driven from the view: click it, then WASD/arrows to move,
    Shift to run, Q to strafe. The view asks for the 60 Hz steps it needs; each reply carries one pose."""

    def __init__(self, db, settings=None, body: bool = True, **kwargs):
        super().__init__(**kwargs)
        db_path = None
        if not hasattr(db, "skeleton"):
            db_path = Path(db).expanduser()
            db = load_database(db_path)
        self.db = db
        self.character_sim = Character(db, settings or CharacterSettings())
        self.mode = "live"
        self.names, self.parents = list(db.skeleton.names), [int(p) for p in db.skeleton.parents]
        self.fps = LIVE_FPS
        self.three = three_sources()
        if body:
            glb = None
            if db_path is not None:
                glb = ensure_body_glb(db_path, db.skeleton, db.roles).read_bytes()
            self._set_body(db.skeleton, db.roles, glb)
        self.on_msg(self._on_message)

    def step(self, move=(0.0, 0.0), run: bool = False, strafe: bool = False, steps: int = 1):
        """Advance the character `steps` frames with one input (move: world-plane (x, z) in [-1, 1]);
        returns the world joint positions (J, 3) and local rotations (J, 4) after them."""
        inp = GamepadInput(move=tuple(move), run=run, strafe=strafe)
        for _ in range(steps):
            self.character_sim.step(inp, 1.0 / LIVE_FPS)
        return (np.asarray(self.character_sim.global_positions, np.float32),
                self.character_sim.local_pose()[1].astype(np.float32))

    def _on_message(self, _widget, content, _buffers) -> None:
        if not isinstance(content, dict) or content.get("type") != "step":
            self.send({"type": "error", "message": "expected {type: 'step', move, run, strafe, steps}"})
            return
        steps = content.get("steps", 1)
        try:
            if not isinstance(steps, int) or isinstance(steps, bool) or not 1 <= steps <= MAX_STEPS_PER_MESSAGE:
                raise MessageError(f"steps must be an integer in [1, {MAX_STEPS_PER_MESSAGE}]")
            fields = {k: v for k, v in content.items() if k not in ("type", "steps")}   # others are refused
            _, f = parse_message(json.dumps({"type": "input", **fields}))
        except MessageError as exc:
            self.send({"type": "error", "message": str(exc)})
            return
        pos, rot = self.step(f["move"], f.get("run", False), f.get("strafe", False), steps)
        self.send({"type": "frame", "time": float(getattr(self.character_sim, "time", 0.0))},
                  buffers=[pos.tobytes(), rot.tobytes()])
