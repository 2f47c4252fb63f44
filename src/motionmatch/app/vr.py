"""The app's VR mode (`motionmatch serve --vr-model VR.npz [--trackers FILE]`, docs/VR.md): each page's
character is driven by a tracker stream instead of the gamepad, with the VR touch-ups (root clamped
near the HMD, arms to the controllers, head to the HMD) on every frame.

A stream is a replay (the --trackers file, a held-out mocap clip or an uploaded tracker file; looped)
or live device poses the page sends over its WebSocket (WebXR), one message per frame in the tracker
file's frame format:

    {"type": "trackers", "t": 12.345, "hmd": {"position": [x, y, z], "rotation": [w, x, y, z]},
     "left": {...}, "right": {...}}          (a device null: lost, it holds its last pose)

Each frame's debug JSON gets a `vr` object: the stream (`source`, `live`, `stream` id, `frame`,
`frames`), the devices consumed (`devices`: 3 x [px, py, pz, qw, qx, qy, qz], world), the HMD floor
target and clamp radius (`target`, `alpha`), the ground-truth skeleton's joint positions (`ghost`, flat,
world; null without ground truth), the frame's errors (`head_cm`, `hands_cm`, and with ground truth
`root_cm`, `facing_deg`) and with database switching by HMD height `height` (`standing` m, the
`database` index, the `tag_filter` in use). HTTP: `GET /api/vr` (the mode and the held-out clips),
`GET /api/session/<id>/vr` (the session's stream and the ghost's parents), `POST .../vr/clip/<i>`,
`POST .../vr/trackers?name=FILE` (a tracker file as the body), `POST .../vr/stop` (back to the gamepad).
Metres, seconds, quaternions (w, x, y, z), Y up.
"""
from __future__ import annotations

import asyncio
import csv
import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from aiohttp import web

from ..motion.animation import Skeleton
from ..posedb.database import Database
from ..runtime.controller import Controller
from ..runtime.database_sets import SetSpec
from ..runtime.input_log import InputLog
from ..runtime.settings import CharacterSettings
from ..search import Searcher
from ..vr.driver import VRDriver, VRDriverSettings, facing_yaw, vr_character_settings
from ..vr.live import MAX_TIME_S, LiveTrackerFeed, LiveVRDriver
from ..vr.trackers import (DEVICES, STREAM_FPS, BodyTruth, TrackerFileError, TrackerStream, device_pose,
                           read_trackers, slice_stream)
from .messages import MessageError
from .state import STATE
from .uploads import read_body, upload_name
from ..io.bvh import read_bvh
from ..motion.preprocess import resample
from ..vr.trackers import calibrate_file, simulate_trackers
from ..vr.dataset import default_files, split_held_out
from ..vr.orientation import load_networks
from ..vr.synth import check_height_databases, database_calibration
from ..vr.synth import VRTouchUp

log = logging.getLogger("motionmatch.app")

MAX_TRACKER_BYTES = 4 << 20      # an uploaded tracker file (the app's request limit)
TOUCH_UP_WINDOW = 60 * 60 * 10   # frames of errors kept per stream (10 minutes)


@dataclass
class Replay:
    """A tracker stream to play: the stream, its ground truth and the mocap skeleton's world joint
    positions `ghost` (F, Jt, 3) with their `ghost_parents` (both None without ground truth), a name."""

    stream: TrackerStream
    truth: BodyTruth | None
    ghost: np.ndarray | None
    ghost_parents: list | None
    name: str


def load_replay(path, name: str | None = None, part: tuple[float, float] = (0.0, 1.0)) -> Replay:
    """A Replay from a tracker file (read_trackers: JSON, CSV, or a BVH clip the devices are simulated
    from, then with ground truth and ghost); `part`: the (start, stop) fractions of it to keep."""
    path = Path(path)
    ghost = parents = None
    if path.name.lower().endswith((".bvh", ".bvh.gz")):
        anim = read_bvh(path)
        stream, truth = simulate_trackers(anim, calibration=calibrate_file(path, anim))
        ghost = resample(anim, STREAM_FPS).global_transforms()[0].astype(np.float32)
        parents = [int(p) for p in anim.skeleton.parents]
    else:
        stream, truth = read_trackers(path)
    F = stream.num_frames
    start, stop = int(round(part[0] * F)), int(round(part[1] * F))
    stream, truth = slice_stream(stream, truth, start, stop)
    if stream.num_frames < 2:
        raise TrackerFileError(f"{name or path}: expected at least two tracker frames")
    return Replay(stream, truth, None if ghost is None else ghost[start:stop], parents, name or path.name)


def held_out_clips(data_root=None) -> list[tuple[str, Path, tuple[float, float]]]:
    """(name, path, part) of the held-out clips of the orientation network (vr/dataset.py), the jlpm22
    take first; empty (with a warning) when the motion capture is not found."""
    try:
        _, held = split_held_out(default_files(data_root))
    except (FileNotFoundError, ValueError) as exc:
        log.warning("VR mode: no held-out clips to replay (%s)", exc)
        return []
    held.sort(key=lambda p: (p.start == 0.0, p.path.name))
    return [(p.path.name + (f" (last {100 * (p.stop - p.start):.0f} %)" if p.start > 0 else ""), p.path,
             (p.start, p.stop)) for p in held]


class VRCharacter:
    """A runtime Character driven by a tracker stream (a Replay, looped, or a LiveTrackerFeed) with
    the VR touch-ups on every output pose; without a stream, the ordinary gamepad character. It is a
    DrivenCharacter (app/driven.py): the members a Session uses that the stream does not change are the
    inner character's, forwarded one by one."""

    def __init__(self, inner, network, calibration, settings: VRDriverSettings, replay: Replay | None = None):
        self.inner, self.network, self.calibration, self.vr_settings = inner, network, calibration, settings
        self.replay: Replay | None = None
        self.feed: LiveTrackerFeed | None = None
        self.driver = self.touch = self.pose = None
        self.stream_id = 0
        if replay is not None:
            self.set_replay(replay)

    # -- the inner character's ------------------------------------------------------------------

    @property
    def db(self) -> Database:
        return self.inner.db

    @property
    def settings(self) -> CharacterSettings:
        # A property, not a copy: use_set replaces the inner character's settings object.
        return self.inner.settings

    @property
    def skeleton(self) -> Skeleton:
        return self.inner.skeleton

    @property
    def channel_names(self) -> Sequence[str]:
        return self.inner.channel_names

    @property
    def known_tags(self) -> Sequence[str]:
        return self.inner.known_tags

    @property
    def slices(self) -> dict[str, slice]:
        return self.inner.slices

    @property
    def controller(self) -> Controller:
        return self.inner.controller

    @property
    def input_log(self) -> InputLog | None:
        return self.inner.input_log

    @property
    def searcher(self) -> Searcher:
        return self.inner.searcher

    @property
    def time(self) -> float:
        return self.inner.time

    @property
    def root_pos(self) -> np.ndarray:
        return self.inner.root_pos

    @property
    def root_velocity(self) -> np.ndarray:
        return self.inner.root_velocity

    def apply_settings(self) -> None:
        self.inner.apply_settings()

    def pose_before_inertialization(self) -> np.ndarray:
        return self.inner.pose_before_inertialization()

    def pose_before_touchups(self) -> np.ndarray:
        return self.inner.pose_before_touchups()

    def set_obstacles(self, obstacles) -> None:
        self.inner.set_obstacles(obstacles)

    def set_terrain(self, terrain) -> None:
        self.inner.set_terrain(terrain)

    def play_clip(self, range_index: int | None, offset_frames: int = 0) -> None:
        self.inner.play_clip(range_index, offset_frames)

    def request_action(self, event: str, event_in: float) -> None:
        self.inner.request_action(event, event_in)

    def use_set(self, spec: SetSpec, interrupt: bool = True) -> None:
        self.inner.use_set(spec, interrupt)

    # -- streams -------------------------------------------------------------------------------

    def set_replay(self, replay: Replay | None) -> None:
        """Play `replay` from its start (looping), or None: back to the gamepad."""
        self.replay, self.feed = replay, None
        self.stream_id += 1
        if replay is None:
            self.driver = self.touch = self.pose = None
            self.inner.reset()
        else:
            self._start(VRDriver(replay.stream, self.network, self.vr_settings))

    def push_live(self, t: float, positions, rotations) -> bool:
        """Add live device poses (LiveTrackerFeed.push); the first switches the character to the live
        stream (it starts at the next step). True when this push started the live stream."""
        fresh = self.feed is None
        if fresh:
            feed = LiveTrackerFeed()
            feed.push(t, positions, rotations)       # a bad first message leaves the replay playing
            self.replay, self.feed, self.driver, self.touch = None, feed, None, None
            self.stream_id += 1
        else:
            self.feed.push(t, positions, rotations)
        return fresh

    def _start(self, driver: VRDriver) -> None:
        self.driver = driver
        self.touch = VRTouchUp(self.inner.db, driver, self.calibration,
                               self.replay.truth if self.replay is not None else None)
        self.inner.reset(position=driver.target(), yaw=facing_yaw(driver.state.facing))
        self.inner.set_driver(driver)

    def reset(self, *args, **kwargs) -> None:
        """Restart the stream (a replay from its start, a live stream from the latest poses)."""
        if self.replay is not None:
            self._start(VRDriver(self.replay.stream, self.network, self.vr_settings))
        elif self.feed is not None:
            self.driver = self.touch = None     # the next step starts from the next sample
        else:
            self.inner.reset(*args, **kwargs)

    def start_input_log(self, *args, **kwargs):
        """Record the inner character's inputs (Character.start_input_log). Starting a log resets the
        inner character, which would detach a playing tracker stream's driver (the stream then never
        advances): the stream restarts with the log, which then refuses to save, as tracker drivers
        cannot be replayed (docs/REPLAY.md)."""
        self.inner.start_input_log(*args, **kwargs)
        if self.replay is not None or self.feed is not None:
            self.reset()
        return self.inner.input_log

    def set_driver(self, driver) -> None:
        """A scenario takes over: the stream stops."""
        if driver is not None and (self.replay is not None or self.feed is not None):
            self.replay = self.feed = self.driver = self.touch = self.pose = None
            self.stream_id += 1
        self.inner.set_driver(driver)

    # -- the loop ------------------------------------------------------------------------------

    def step(self, inp=None, dt: float = 1.0 / 60.0) -> None:
        if self.feed is not None and self.driver is None:
            if not self.feed.pending:            # live, but no poses yet: stand
                self.inner.step(None, dt)
                self.pose = None
                return
            self._start(LiveVRDriver(self.feed, self.network, self.vr_settings))
        if self.driver is None:
            self.inner.step(inp, dt)
            self.pose = None
            return
        if self.replay is not None and self.driver.index >= self.replay.stream.num_frames - 1:
            self._start(VRDriver(self.replay.stream, self.network, self.vr_settings))   # loop
        if len(self.touch.head_cm) > TOUCH_UP_WINDOW:
            self._forget_errors()
        self.inner.step(None, dt)
        lp, lr = self.inner.local_pose()
        lp, lr, gp = self.touch(self.inner, 0, lp, lr)
        self.pose = (lp.astype(np.float32), lr.astype(np.float32), gp.astype(np.float32))

    def _forget_errors(self) -> None:
        for errors in (self.touch.head_cm, self.touch.hand_cm, self.touch.reachable, self.touch.root_cm,
                       self.touch.facing_deg):
            errors.clear()

    @property
    def global_positions(self) -> np.ndarray:
        return self.inner.global_positions if self.pose is None else self.pose[2]

    def local_pose(self):
        return self.inner.local_pose() if self.pose is None else (self.pose[0], self.pose[1])

    def debug(self) -> dict:
        out = dict(self.inner.debug())
        out["vr"] = self.vr_debug()
        return out

    def vr_debug(self) -> dict | None:
        """The `vr` object of the frame's debug JSON (module docstring)."""
        d, touch = self.driver, self.touch
        if d is None:
            return None if self.feed is None else {"source": "live", "live": True, "stream": self.stream_id,
                                                   "frame": 0, "frames": None, "devices": None}
        replay = self.replay
        f = d.index
        out = {"source": replay.name if replay else "live", "live": replay is None, "stream": self.stream_id,
               "frame": f, "frames": replay.stream.num_frames if replay else None,
               "devices": np.concatenate([d.state.positions, d.state.rotations], axis=1),
               "target": d.target(), "alpha": d.settings.alpha,
               "ghost": replay.ghost[f].ravel() if replay is not None and replay.ghost is not None else None}
        if touch.head_cm:
            out["head_cm"], out["hands_cm"] = touch.head_cm[-1], touch.hand_cm[-2:]
        if touch.root_cm:
            out["root_cm"], out["facing_deg"] = touch.root_cm[-1], touch.facing_deg[-1]
        if d.database is not None:
            out["height"] = {"standing": d.standing_height, "database": d.database,
                             "tag_filter": self.inner.settings.tag_filter}
        return out

    def status(self) -> dict:
        """The session's stream for the page: name, live or not, length, the ghost's parents."""
        r = self.replay
        return {"type": "vr", "stream": self.stream_id, "live": self.feed is not None,
                "source": r.name if r else ("live" if self.feed is not None else None),
                "frames": r.stream.num_frames if r else None,
                "ghost_parents": r.ghost_parents if r is not None else None}


# ---------------------------------------------------------------------------------------------------
# Live tracker messages


def _device(v, name):
    if v is None:
        return None
    try:
        return device_pose(v, name)
    except TrackerFileError as exc:
        raise MessageError(str(exc)) from None


def _time(v, name):
    # Compared before float(): an integer too large for a float must not raise OverflowError.
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not -MAX_TIME_S <= v <= MAX_TIME_S:
        raise MessageError(f"{name} must be a finite number of seconds within +-{MAX_TIME_S:g}")
    return float(v)


TRACKER_MESSAGE = {"t": (_time, False), **{d: (_device, True) for d in DEVICES}}


def handle_trackers(session, f: dict) -> dict | None:
    """A `trackers` message: live device poses for the session's character; a reply only when it
    switches to the live stream."""
    ch = session.ch
    names = DEVICES
    try:
        started = ch.push_live(f.get("t", time.monotonic()), [f[n] and f[n][0] for n in names],
                               [f[n] and f[n][1] for n in names])
    except TrackerFileError as exc:
        raise MessageError(str(exc)) from None
    return ch.status() if started else None


# ---------------------------------------------------------------------------------------------------
# Backend and routes

VR_MODE = web.AppKey("vr_mode", dict)


def setup_vr(app: web.Application, db, model_path, trackers=None, settings: VRDriverSettings | None = None,
             clips: list | None = None) -> None:
    """Turn VR mode on: the app's characters wrapped in VRCharacter, driven by the orientation model
    `model_path`, each page starting with `trackers` (a tracker file) or else the first held-out clip;
    `clips`: the (name, path, part) clips the page offers (default held_out_clips())."""
    settings = settings or VRDriverSettings()
    check_height_databases(db, settings)
    network = load_networks(model_path)["network"]
    calibration = database_calibration(db)
    clips = held_out_clips() if clips is None else clips
    if trackers is not None:
        first = load_replay(trackers)
    elif clips:
        name, path, part = clips[0]
        first = load_replay(path, name, part)
    else:
        first = None
    backend = app[STATE].backend
    make = backend.new_character

    def new_character():
        inner = make()
        if inner.settings.adjustment_max_ratio == CharacterSettings().adjustment_max_ratio:
            # the defaults (no settings file chose another value): the VR ones
            inner.settings.adjustment_max_ratio = vr_character_settings().adjustment_max_ratio
            inner.apply_settings()
        return VRCharacter(inner, network, calibration, settings, first)

    backend.new_character = new_character
    backend.messages = {**backend.messages, "trackers": (TRACKER_MESSAGE, handle_trackers)}
    app[VR_MODE] = {"clips": clips, "model": Path(model_path).name, "alpha": settings.alpha}


def _vr_session(request: web.Request):
    s = request.app[STATE].sessions.get(request.match_info["sid"])
    if s is None:
        raise web.HTTPNotFound(text="no such session (closed tab?)\n")
    if not isinstance(s.ch, VRCharacter):
        raise web.HTTPNotFound(text="VR mode is off (motionmatch serve --vr-model VR.npz)\n")
    return s


def _vr_info(request: web.Request) -> dict | None:
    return request.app.get(VR_MODE)


async def vr_info_handler(request: web.Request) -> web.Response:
    info = _vr_info(request)
    if info is None:
        return web.json_response({"enabled": False})
    return web.json_response({"enabled": True, "model": info["model"], "alpha": info["alpha"],
                              "clips": [name for name, _, _ in info["clips"]]})


async def vr_status_handler(request: web.Request) -> web.Response:
    return web.json_response(_vr_session(request).ch.status())


async def vr_clip_handler(request: web.Request) -> web.Response:
    session = _vr_session(request)
    clips = _vr_info(request)["clips"]
    try:
        i = int(request.match_info["index"])
        if not 0 <= i < len(clips):     # -1 would play the last clip
            raise IndexError(i)
        name, path, part = clips[i]
    except (ValueError, IndexError):
        return web.json_response({"type": "error", "message": f"clip: expected 0..{len(clips) - 1}"}, status=400)
    replay = await asyncio.get_running_loop().run_in_executor(None, load_replay, path, name, part)
    session.ch.set_replay(replay)
    return web.json_response(session.ch.status())


async def vr_trackers_handler(request: web.Request) -> web.Response:
    """An uploaded tracker file (JSON, CSV or BVH; ?name= gives its name and type)."""
    session = _vr_session(request)
    name = upload_name(request, "trackers.json")
    raw = await read_body(request, MAX_TRACKER_BYTES)

    def load():
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / name
            path.write_bytes(raw)
            try:
                return load_replay(path, name)
            # TrackerFileError and BVHError are ValueErrors; csv.Error: a field beyond csv's size limit.
            except (ValueError, KeyError, OSError, RecursionError, OverflowError, csv.Error) as exc:
                raise TrackerFileError(str(exc).replace(str(path), name)) from None

    try:
        replay = await asyncio.get_running_loop().run_in_executor(None, load)
    except TrackerFileError as exc:
        return web.json_response({"type": "error", "message": f"bad tracker file: {str(exc)[:300]}"}, status=400)
    session.ch.set_replay(replay)
    return web.json_response(session.ch.status())


async def vr_stop_handler(request: web.Request) -> web.Response:
    session = _vr_session(request)
    session.ch.set_replay(None)
    return web.json_response(session.ch.status())


def add_vr_routes(app: web.Application) -> None:
    """The VR mode's routes (answering "VR mode is off" until setup_vr is called)."""
    app.router.add_get("/api/vr", vr_info_handler)
    app.router.add_get("/api/session/{sid}/vr", vr_status_handler)
    app.router.add_post("/api/session/{sid}/vr/clip/{index}", vr_clip_handler)
    app.router.add_post("/api/session/{sid}/vr/trackers", vr_trackers_handler)
    app.router.add_post("/api/session/{sid}/vr/stop", vr_stop_handler)
