"""Files named by their extension: a command that writes a file whose format the name's extension
chooses checks the extension first, before it reads any input, and refuses any other with one message
naming the extension and the accepted ones (exit code 2, a usage error). No numpy here: the check runs
before a command imports its stages."""
from __future__ import annotations

from pathlib import Path

PLOT_SUFFIXES = (".png", ".svg", ".pdf")      # what the figures are drawn to (matplotlib picks by extension)


class UsageError(ValueError):
    """A command line that cannot be carried out as written; `main` prints it and exits with code 2."""


def output_suffix(path, accepted: tuple[str, ...], flag: str, command: str) -> str:
    """The lower-case extension of `path` when it is one of `accepted`, else UsageError naming the flag,
    the path, its extension and the accepted ones."""
    suffix = Path(path).suffix.lower()
    if suffix not in accepted:
        listed = ", ".join(accepted[:-1]) + (" or " if len(accepted) > 1 else "") + accepted[-1]
        raise UsageError(f"{flag + ' ' if flag else ''}{path}: {command} writes {listed} files, chosen by the "
                         f"extension; {suffix or 'no extension'} is none of them")
    return suffix


MOTION_FILE_SUFFIXES = (".bvh", ".glb", ".gltf", ".fbx", ".usd", ".usda", ".usdc", ".usdz")


def output_folder(path, flag: str, command: str) -> None:
    """UsageError when an output folder is named like a motion file (`synth --out walk.usda`): the command
    writes a folder of files it names itself, so the format such a name asks for would not be written."""
    suffix = Path(path).suffix.lower()
    if suffix in MOTION_FILE_SUFFIXES:
        raise UsageError(f"{flag} {path}: {command} writes a folder (its files named by {command}), not a {suffix} "
                         f"file; `motionmatch export FOLDER -o OUT{suffix}` converts its motion")
