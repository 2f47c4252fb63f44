"""`motionmatch demo`, the main job: build the default database (once) and serve the browser app."""
from __future__ import annotations

import argparse

from . import serve
from .database import print_summary


def register(sub) -> None:
    p = sub.add_parser("demo", help="the main job: build the default database and open the browser app")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--data", dest="data_root", help="data root (else $MOTIONMATCH_DATA, else ../shared/mocap)")
    p.add_argument("--no-serve", action="store_true", help="only build the database and print its summary")
    p.add_argument("--jlpm22-only", action="store_true",
                   help="the jlpm22-only database instead of the mixed default (jlpm22 + CMU + Bandai-Namco clips)")
    p.set_defaults(func=run_demo)


def run_demo(args) -> int:
    from ..posedb.database import build_default_database, load_database
    from ..posedb.datapaths import print_licences
    path = build_default_database(data=args.data_root, progress=True, mixed=not args.jlpm22_only)
    db = load_database(path)
    print(f"default database: {path}")
    print_licences(db.range_tags)
    print_summary(db.summary())
    if args.no_serve:
        return 0
    # The serve command's own defaults, so every option it reads is present.
    parser = argparse.ArgumentParser()
    serve.add_serve_args(parser)
    ns = parser.parse_args(["--db", str(path), "--host", args.host, "--port", str(args.port)])
    return serve.run_serve(ns)
