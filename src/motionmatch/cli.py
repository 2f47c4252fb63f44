"""The `motionmatch` command line. Each stage module registers its own sub-commands."""
from __future__ import annotations

import argparse
import importlib
import sys

# Modules that define register_cli(subparsers); each sub-parser sets func=callable(args) -> int.
_COMMAND_MODULES = (
    "motionmatch.commands",
    "motionmatch.tuning",
    "motionmatch.vr.commands",
    "motionmatch.lmm.commands",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="motionmatch", description="Motion matching from motion capture.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register_cli(sub)
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
        print(f"motionmatch: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
