"""The `motionmatch` command line: one module per command group, each with `register(subparsers)`; a
sub-parser sets func=callable(args) -> int. The work lives in the stage modules; these parse and print."""
from __future__ import annotations

import argparse
import sys

from .. import __version__
from . import bench, database, demo, export, features, fetch, lmm, retarget, serve, settings, synth, tune, vr

# In the order `motionmatch --help` lists them.
_GROUPS = (database, synth, bench, features, fetch, retarget, export, serve, demo, settings, tune, vr, lmm)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="motionmatch", description="Motion matching from motion capture.")
    parser.add_argument("--version", action="version", version=f"motionmatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for group in _GROUPS:
        group.register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (ValueError, OSError, KeyError) as exc:  # user errors (the project's error classes are
        # ValueErrors; unreadable files are OSErrors): say what and where, no trace
        # Some errors carry no message (a TimeoutError): the class name is better than nothing.
        print(f"motionmatch: error: {exc or type(exc).__name__}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
