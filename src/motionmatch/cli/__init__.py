"""The `motionmatch` command line: one module per command group, each with `register(subparsers)`; a
sub-parser sets func=callable(args) -> int. The work lives in the stage modules; these parse and print.

`main` imports only the module of the command it runs: the others appear in `--help` from the table
below, so `--help`, `--version` and a command's `--help` answer without importing numpy, scipy or numba."""
from __future__ import annotations

import argparse
import importlib
import sys

from .. import __version__
from .outputs import UsageError

# Command -> (module in this folder that registers it, one-line help), in the order `--help` lists them.
# A module's `register` must use the same help strings (tests/cli/test_cli.py compares them).
COMMANDS = {
    "build": ("database", "build a pose database from motion files (BVH, glTF, FBX) or folders"),
    "info": ("database", "print a database's summary"),
    "synth": ("synth", "run a scenario (or a crowd) offline: BVH, metrics.json, a top-view PNG"),
    "bench": ("bench", "benchmarks (search, runtime, io)"),
    "features": ("features", "feature matrix tools"),
    "fetch-data": ("fetch", "download and unpack the public motion capture sets into a cache folder"),
    "retarget": ("retarget", "retarget a BVH to another skeleton"),
    "export": ("export", "write motion as glTF (.glb), USD (.usda/.usdc/.usdz) or BVH, optionally with a skinned body"),
    "convert": ("export", "convert a motion file (.bvh, .glb, .fbx) to .bvh or .glb, one file per clip"),
    "serve": ("serve", "run the browser app"),
    "demo": ("demo", "the main job: build the default database and open the browser app"),
    "settings": ("settings", "every setting: table, key, type, unit, bounds, default, doc"),
    "generate": ("generate", "a labelled motion dataset from a spec (TOML or JSON), on Dask"),
    "tune": ("tune", "search the character's settings against the quality metrics (Optuna, Dask)"),
    "vr": ("vr", "VR avatar from three trackers: the body-orientation network"),
    "lmm": ("lmm", "learned motion matching: networks that replace the pose database"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with `command`, only that command's module is imported and registered, the
    others are listed by name and help."""
    parser = argparse.ArgumentParser(prog="motionmatch", description="Motion matching from motion capture.")
    parser.add_argument("--version", action="version", version=f"motionmatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    if command is None:
        wanted = dict.fromkeys(module for module, _ in COMMANDS.values())
    else:
        wanted = {COMMANDS[command][0]: None} if command in COMMANDS else {}
    registered = set()
    for name, (module, text) in COMMANDS.items():
        if name in registered:
            continue
        if module in wanted:
            before = set(sub.choices)
            importlib.import_module(f"{__name__}.{module}").register(sub)
            registered |= set(sub.choices) - before
            wanted.pop(module)
        else:
            sub.add_parser(name, help=text)
            registered.add(name)
    return parser


def _command_in(argv: list[str]) -> str | None:
    """The command named in argv: its first word that is not an option (the top level takes no values)."""
    for word in argv:
        if not word.startswith("-"):
            return word
    return None


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command_in(argv) or "")
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except UsageError as exc:         # the command line itself is wrong (cli/outputs.py): argparse's code
        print(f"motionmatch: error: {exc}", file=sys.stderr)
        return 2
    except (ValueError, OSError, KeyError) as exc:  # user errors (the project's error classes are
        # ValueErrors; unreadable files are OSErrors): say what and where, no trace
        # Some errors carry no message (a TimeoutError): the class name is better than nothing.
        print(f"motionmatch: error: {exc or type(exc).__name__}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
