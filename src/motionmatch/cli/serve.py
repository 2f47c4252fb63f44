"""`motionmatch serve`: load (or build) the database and serve the browser app (app/server.py)."""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from ..app.limits import MAX_SESSIONS, PORT_TRIES
from .inputs import database_files, existing_file
from .options import DB_HELP, add_crouch_args, crouch_settings, database_paths

log = logging.getLogger("motionmatch.app")


def add_serve_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", action="append", metavar="DB", help=DB_HELP)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000,
                        help=f"TCP port (default 8000; if busy, the next {PORT_TRIES - 1} are tried; 0 picks a free one)")
    parser.add_argument("--jlpm22-only", action="store_true",
                        help="without --db: the jlpm22-only default database instead of the mixed default")
    parser.add_argument("--node-modules", default=None,
                        help="folder holding three/ (default: $MOTIONMATCH_NODE_MODULES or ./node_modules)")
    parser.add_argument("--crowd", type=int, default=0, metavar="N",
                        help="crowd mode: N agents roam around your character (see app/crowd/mode.py)")
    parser.add_argument("--character", default=None, metavar="MODEL.glb",
                        help="a rigged humanoid glTF to drive (default: a body generated for the database skeleton)")
    parser.add_argument("--character-map", default=None, metavar="ROLES.toml",
                        help="[roles] table (role = \"joint name\") for a model whose joint names are not recognised")
    parser.add_argument("--max-sessions", type=int, default=MAX_SESSIONS, metavar="N",
                        help=f"pages connected at once; one more is told the server is full (default {MAX_SESSIONS}: "
                             "what keeps every page at 60 fps on a 2-core machine, docs/ROBUSTNESS.md)")
    parser.add_argument("--settings", default=None, help="settings file (TOML) every character starts from")
    parser.add_argument("--lmm", default=None, metavar="MODEL.npz",
                        help="learned motion matching: characters take their poses from this model (docs/LMM.md)")
    parser.add_argument("--vr-model", default=None, metavar="VR.npz",
                        help="VR replay mode: a tracker stream drives the character (docs/VR.md)")
    parser.add_argument("--trackers", default=None, metavar="FILE",
                        help="with --vr-model: the tracker file (JSON, CSV or BVH) replayed first "
                             "(default: the first held-out clip)")
    add_crouch_args(parser)


def run_serve(args) -> int:
    """`motionmatch serve`: load (or build) the database, serve the page, print the URL."""
    database_files(args.db)
    for flag, what in (("settings", "settings file"), ("lmm", "learned model file"), ("vr_model", "VR model file"),
                       ("trackers", "tracker file"), ("character_map", "role map file")):
        if getattr(args, flag, None):
            existing_file(getattr(args, flag), f"--{flag.replace('_', '-')}", what)
    from ..app.assets import find_three
    from ..app.backend import character_for, runtime_backend
    from ..app.server import make_app, run_app
    from ..posedb.database_join import load_databases
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    if find_three(args.node_modules) is None:
        print("motionmatch: three.js not found: run `make node_modules` (npm ci) in the project root, "
              "or pass --node-modules", file=sys.stderr)
        return 1
    if args.character and not Path(args.character).is_file():
        raise FileNotFoundError(f"{args.character}: no such model file")
    for flag in ("trackers", "crouch_tags"):
        if getattr(args, flag, None) and not getattr(args, "vr_model", None):
            raise ValueError(f"--{flag.replace('_', '-')} needs --vr-model VR.npz (the app's VR mode, docs/VR.md)")
    paths = database_paths(args.db, mixed=not args.jlpm22_only)
    path = paths[0]             # the default body is cached beside the first file (one skeleton for all)
    db = load_databases(paths)
    settings = None
    if getattr(args, "settings", None):
        from ..runtime.settings_file import load_settings
        settings = load_settings(args.settings, db.features.schema.names)
    if getattr(args, "lmm", None):
        from ..runtime.learned import learned_model
        from ..runtime.settings_file import settings_from_dict
        learned_model(db, args.lmm)           # a model that does not fit fails here, before serving
        settings = settings or settings_from_dict({})
        settings.character.mode, settings.character.model = "lmm", args.lmm
    try:
        character = character_for(db, path, args.character, args.character_map)
    except ImportError as exc:   # the body needs scikit-image and pygltflib; the capsules do not
        log.warning("no character body (%s): drawing capsules", exc)
        character = None
    if not 1 <= args.max_sessions <= 10_000:
        raise ValueError(f"--max-sessions: expected 1..10000, got {args.max_sessions}")
    app = make_app(runtime_backend(db, character, settings), node_modules=args.node_modules, host=args.host,
                   max_sessions=args.max_sessions)
    if getattr(args, "vr_model", None):
        from ..vr.driver import VRDriverSettings
        from ..app.vr import setup_vr
        setup_vr(app, db, args.vr_model, args.trackers, VRDriverSettings(height_databases=crouch_settings(args)))
    if args.crowd:
        from ..app.crowd.mode import setup_crowd
        setup_crowd(app, path, args.crowd)
    return run_app(app, args.host, args.port)


def register(sub) -> None:
    p = sub.add_parser("serve", help="run the browser app")
    add_serve_args(p)
    p.set_defaults(func=run_serve)
