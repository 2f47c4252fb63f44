"""`motionmatch fetch-data`: download and unpack the public motion capture sets into a cache folder."""
from __future__ import annotations

import argparse
import sys

from ..posedb.datapaths import list_bvh_files
from ..posedb.fetch import DEFAULT_NAME, SOURCES, FetchError, fetch


def add_fetch_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", default=DEFAULT_NAME,
                        help=f"data set to fetch: {', '.join(SOURCES)}, or 'all' (default {DEFAULT_NAME})")
    parser.add_argument("--url", default=None,
                        help="download this archive (zip or tar.gz) instead of the known source of --name")
    parser.add_argument("--cache", default=None,
                        help="cache folder (default $XDG_CACHE_HOME/motionmatch or ~/.cache/motionmatch)")
    parser.add_argument("--force", action="store_true", help="download and unpack again")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def run_fetch(args) -> int:
    """CLI entry: fetch the data set(s); prints where they are. Returns a process exit code."""
    names = list(SOURCES) if args.name == "all" and not args.url else [args.name]
    status = 0
    for name in names:
        try:
            path = fetch(name, url=args.url, cache=args.cache, force=args.force,
                         progress=not getattr(args, "quiet", False))
        except FetchError as e:
            print(f"fetch-data: {e}", file=sys.stderr)
            status = 1
            continue
        n = len(list_bvh_files(path))
        print(f"{name}: {n} BVH files in {path}")
        if name in SOURCES and SOURCES[name].note:
            print(f"  source: {SOURCES[name].note}")
    return status


def register(sub) -> None:
    p = sub.add_parser("fetch-data", help="download and unpack the public motion capture sets into a cache folder")
    add_fetch_args(p)
    p.set_defaults(func=run_fetch)
