"""Sub-commands of the `motionmatch` command line. Work lives in the stage modules; this file only
parses arguments and prints."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def _human_bytes(n) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024


def print_summary(s: dict, file=sys.stdout) -> None:
    print(f"clips:      {s['clips']} ({s['mirrored_clips']} mirrored)", file=file)
    print(f"frames:     {s['frames']} at {s['fps']:g} fps ({s['seconds']:.1f} s of motion)", file=file)
    print(f"joints:     {s['joints']}", file=file)
    print(f"features:   {s['features']} ({', '.join(s['feature_channels'])})", file=file)
    tags = s["tags"]
    print(f"tags:       {len(tags)}: {' '.join(tags[:30])}{' ...' if len(tags) > 30 else ''}", file=file)
    print(f"size:       {_human_bytes(s['bytes'])}", file=file)
    if s.get("build_seconds") is not None:
        print(f"build time: {s['build_seconds']:.2f} s", file=file)


# ---------------------------------------------------------------------------------------------
# build / info

def _add_build(sub):
    p = sub.add_parser("build", help="build a pose database from BVH files or folders")
    p.add_argument("data", nargs="*", help="BVH files or folders (default: the jlpm22 locomotion set)")
    p.add_argument("-o", "--out", required=True, help="database file to write (.npz)")
    p.add_argument("--data", dest="data_root", help="data root (else $MOTIONMATCH_DATA, else ../shared/mocap)")
    p.add_argument("--include", action="append", default=None, help="glob on file names to keep (repeatable)")
    p.add_argument("--exclude", action="append", default=None, help="glob on file names to drop (repeatable)")
    p.add_argument("--no-mirror", action="store_true", help="do not add mirrored copies")
    p.add_argument("--fps", type=float, default=60.0, help="database frame rate (default 60)")
    p.add_argument("--unit", default="auto", help="BVH length unit: auto, m, cm (default auto)")
    p.add_argument("--schema", help="feature schema TOML (default: the 27-d locomotion set)")
    p.add_argument("--map", dest="mapping", help="role mapping TOML for an unknown skeleton")
    p.add_argument("--tag", action="append", default=[], metavar="TAG[=GLOB]",
                   help="add a user tag to clips whose file name matches GLOB (default all)")
    p.add_argument("--strict", action="store_true", help="fail on the first bad file instead of skipping it")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run_build)


def run_build(args) -> int:
    from .database import BuildSettings, build_database, save_database
    from .datapaths import find_data, list_bvh_files
    from .features import default_schema, load_schema
    from .skeleton import load_mapping

    t0 = time.perf_counter()
    roots = [Path(d) for d in args.data] if args.data else [find_data("jlpm22-locomotion", args.data_root)]
    for r in roots:
        if not r.exists():
            raise FileNotFoundError(f"{r}: no such file or folder")
    files = list_bvh_files(roots, include=args.include, exclude=args.exclude)
    user_tags = []
    for t in args.tag:
        tag, _, pat = t.partition("=")
        user_tags.append((tag, pat or "*"))
    settings = BuildSettings(fps=args.fps, mirror=not args.no_mirror, unit=args.unit, strict=args.strict,
                             role_mapping=load_mapping(args.mapping) if args.mapping else None,
                             user_tags=user_tags)
    schema = load_schema(args.schema) if args.schema else default_schema()
    db = build_database(files, settings, schema, progress=not args.quiet)
    save_database(db, args.out)
    db.meta["build_seconds"] = round(time.perf_counter() - t0, 3)
    print(f"wrote {args.out}")
    print_summary(db.summary())
    if db.meta.get("skipped"):
        print(f"skipped:    {len(db.meta['skipped'])} bad file(s) (see warnings above)")
    return 0


def _add_info(sub):
    p = sub.add_parser("info", help="print a database's summary")
    p.add_argument("db")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_info)


def run_info(args) -> int:
    from .database import load_database
    t0 = time.perf_counter()
    db = load_database(args.db)
    s = db.summary()
    s["load_seconds"] = round(time.perf_counter() - t0, 3)
    if args.json:
        print(json.dumps(s, indent=1))
    else:
        print_summary(s)
        print(f"load time:  {s['load_seconds']:.3f} s")
    return 0


# ---------------------------------------------------------------------------------------------
# demo (the main job)

def _add_demo(sub):
    p = sub.add_parser("demo", help="the main job: build the default database and open the browser app")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--data", dest="data_root", help="data root (else $MOTIONMATCH_DATA, else ../shared/mocap)")
    p.add_argument("--no-serve", action="store_true", help="only build the database and print its summary")
    p.set_defaults(func=run_demo)


def run_demo(args) -> int:
    from .database import build_default_database, load_database
    path = build_default_database(data=args.data_root, progress=True)
    db = load_database(path)
    print(f"default database: {path}")
    print_summary(db.summary())
    if args.no_serve:
        return 0
    try:
        from .app.server import run_serve
    except ImportError:
        return 0
    ns = argparse.Namespace(db=str(path), host=args.host, port=args.port)
    return run_serve(ns)


# ---------------------------------------------------------------------------------------------

def register_cli(sub) -> None:
    _add_build(sub)
    _add_info(sub)
    _add_demo(sub)
