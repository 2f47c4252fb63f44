"""The app's HTTP routes besides the WebSocket: the page, static files and three.js, status, the body's
GLB, and per-session downloads and uploads under `/api/session/<id>/...` (BVH recording, settings file,
scenario, clips, terrain).
"""
from __future__ import annotations

import asyncio
import json
import logging
import math
import tempfile
import time
from pathlib import Path

from aiohttp import web

from ..runtime.settings_schema import describe
from .assets import STATIC_DIR
from .messages import MessageError, number, reject_constant
from .session import Session
from .limits import DT
from .state import STATE
from .uploads import read_body, upload_name
from ..motion.animation import Animation
from ..io.bvh import write_bvh
from ..runtime.input_log import InputLogError
from ..runtime.settings_file import dumps_settings
from ..world.terrain import Heightfield, TerrainError

log = logging.getLogger("motionmatch.app")

MAX_SCENARIO_BYTES = 1 << 20
MAX_TERRAIN_BYTES = 4 << 20     # PNG heightmap upload


def _session_or_404(request: web.Request) -> Session:
    s = request.app[STATE].sessions.get(request.match_info["sid"])
    if s is None:
        raise web.HTTPNotFound(text="no such session (closed tab?)\n")
    return s


def recording_animation(session: Session):
    """The session's recorded local poses as an Animation (60 fps)."""
    if not len(session.recorded):
        raise web.HTTPNotFound(text="nothing recorded: press Record first\n")
    positions, rotations = session.recorded.arrays()
    return Animation(skeleton=session.ch.skeleton, positions=positions, rotations=rotations, fps=1.0 / DT,
                     source="motionmatch serve")


async def record_handler(request: web.Request) -> web.StreamResponse:
    session = _session_or_404(request)
    anim = recording_animation(session)

    def build() -> bytes:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "recording.bvh"
            write_bvh(path, anim)
            return path.read_bytes()

    data = await asyncio.get_running_loop().run_in_executor(None, build)
    name = time.strftime("motionmatch-%Y%m%d-%H%M%S.bvh")
    return web.Response(body=data, content_type="application/octet-stream",
                        headers={"Content-Disposition": f'attachment; filename="{name}"'})


async def replay_log_handler(request: web.Request) -> web.Response:
    """The session's input log (runtime/input_log.py) since its character's last reset, with the
    recorded windows: `motionmatch synth --replay FILE` regenerates the recorded motion bit for bit."""
    session = _session_or_404(request)
    log = session.ch.input_log
    if log is None:
        raise web.HTTPNotFound(text="this character keeps no input log\n")
    try:    # the database digest takes a moment: off the event loop
        data = await asyncio.get_running_loop().run_in_executor(None, lambda: json.dumps(log.to_dict()))
    except InputLogError as exc:
        raise web.HTTPConflict(text=f"{exc}\n") from None
    name = time.strftime("motionmatch-%Y%m%d-%H%M%S.replay.json")
    return web.Response(text=data, content_type="application/json",
                        headers={"Content-Disposition": f'attachment; filename="{name}"'})


async def settings_file_handler(request: web.Request) -> web.Response:
    """The session's live settings as a settings file (TOML, see runtime/settings_file.py) to download."""
    ch = _session_or_404(request).ch
    text = dumps_settings(ch.settings, ch.controller.settings, comment="saved from the motionmatch app; "
                          "load with --settings FILE (synth, serve, bench quality)")
    name = time.strftime("motionmatch-settings-%Y%m%d-%H%M%S.toml")
    return web.Response(text=text, content_type="application/toml",
                        headers={"Content-Disposition": f'attachment; filename="{name}"'})


async def scenario_handler(request: web.Request) -> web.Response:
    session = _session_or_404(request)
    loader = request.app[STATE].backend.load_scenario
    if loader is None:
        raise web.HTTPNotImplemented(text="scenarios are not available with this backend\n")
    name = upload_name(request, "scenario")
    raw = await read_body(request, MAX_SCENARIO_BYTES)
    try:
        obj = json.loads(raw, parse_constant=reject_constant)
        if not isinstance(obj, dict):
            raise ValueError("a scenario file is a JSON object")
        scenario = loader(obj)
        duration = float(scenario.duration)
        if not math.isfinite(duration) or duration <= 0:
            raise ValueError("scenario has no duration")
    except ImportError as exc:
        raise web.HTTPNotImplemented(text=f"scenario support missing: {exc}\n")
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError, MessageError) as exc:
        # ValueError covers UnicodeDecodeError and Python's limit on integer digits.
        return web.json_response({"type": "error", "message": f"bad scenario: {str(exc)[:300]}"}, status=400)
    try:
        session.start_scenario(scenario, name)
    except MessageError as exc:
        return web.json_response({"type": "error", "message": f"bad scenario: {exc}"}, status=400)
    obstacles = scenario.obstacles
    return web.json_response({"type": "scenario", "state": "playing", "name": name, "duration": duration,
                              "obstacles": [] if obstacles is None else obstacles.to_list()})


async def clips_handler(request: web.Request) -> web.Response:
    return web.json_response(_session_or_404(request).clips())


async def terrain_get_handler(request: web.Request) -> web.Response:
    return web.json_response(_session_or_404(request).terrain_heights())


async def terrain_png_handler(request: web.Request) -> web.Response:
    """A grey-scale PNG heightmap for this session's character: ?scale= metres for white (default 1),
    ?cell= metres per pixel (default 0.1), centred on the world origin."""
    session = _session_or_404(request)
    name = upload_name(request, "heightmap.png")
    raw = await read_body(request, MAX_TERRAIN_BYTES)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "heightmap.png"
        try:
            scale = number(-20.0, 20.0)(float(request.query.get("scale", 1.0)), "scale")
            cell = number(0.01, 10.0)(float(request.query.get("cell", 0.1)), "cell")
            path.write_bytes(raw)
            # Decoding a large image takes a while: off the loop that streams every page's frames.
            terrain = await asyncio.get_running_loop().run_in_executor(
                None, lambda: Heightfield.from_png(path, scale=scale, cell=cell))
        except (ValueError, MessageError, TerrainError) as exc:
            msg = str(exc).replace(str(path), name)
            return web.json_response({"type": "error", "message": f"bad heightmap: {msg[:300]}"}, status=400)
    session.set_terrain(terrain, name)
    return web.json_response(session.terrain_status())


async def character_handler(request: web.Request) -> web.Response:
    c = request.app[STATE].backend.character
    if c is None:
        raise web.HTTPNotFound(text="no character body: the app draws capsules\n")
    return web.Response(body=c["glb"], content_type="model/gltf-binary", headers={"Cache-Control": "no-cache"})


async def index_handler(request: web.Request) -> web.StreamResponse:
    return web.FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})


async def status_handler(request: web.Request) -> web.Response:
    sessions = request.app[STATE].sessions.values()
    return web.json_response({"sessions": len(request.app[STATE].sessions),
                              "step_us": [round(s.step_us, 1) for s in sessions],
                              "three": request.app[STATE].three_dir is not None})



async def settings_schema_handler(request: web.Request) -> web.Response:
    """The settings schema (`motionmatch settings --json` for the served database): the page builds its
    tuning panel from it."""
    return web.json_response(describe(request.app[STATE].backend.channel_weights),
                             headers={"Cache-Control": "no-cache"})


async def _three_missing(request: web.Request) -> web.Response:
    return web.Response(status=503, text="three.js is not installed: run `make node_modules` (npm ci) in the "
                                         "project root or set MOTIONMATCH_NODE_MODULES\n")

def add_routes(app: web.Application, three: Path | None) -> None:
    """The page, the session API and the static files; `three`: node_modules/three (None: its routes
    answer 503 saying how to install it)."""
    app.router.add_get("/", index_handler)
    app.router.add_get("/api/status", status_handler)
    app.router.add_get("/api/settings/schema", settings_schema_handler)
    app.router.add_get("/api/character.glb", character_handler)
    app.router.add_get("/api/session/{sid}/record.bvh", record_handler)
    app.router.add_get("/api/session/{sid}/record.replay.json", replay_log_handler)
    app.router.add_get("/api/session/{sid}/settings.toml", settings_file_handler)
    app.router.add_post("/api/session/{sid}/scenario", scenario_handler)
    app.router.add_get("/api/session/{sid}/clips", clips_handler)
    app.router.add_get("/api/session/{sid}/terrain", terrain_get_handler)
    app.router.add_post("/api/session/{sid}/terrain", terrain_png_handler)
    # Static routes refuse paths that resolve outside their folder (aiohttp normalizes and checks).
    app.router.add_static("/static/", STATIC_DIR, follow_symlinks=False)
    if three is not None:
        app.router.add_static("/vendor/three/build/", three / "build", follow_symlinks=False)
        app.router.add_static("/vendor/three/examples/jsm/", three / "examples" / "jsm", follow_symlinks=False)
    else:
        log.warning("three.js not found: run `npm ci` (make node_modules) or set MOTIONMATCH_NODE_MODULES")
        app.router.add_get("/vendor/three/{tail:.*}", _three_missing)
