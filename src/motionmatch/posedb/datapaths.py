"""Where motion capture data lives: an explicit --data path, $MOTIONMATCH_DATA, the shared folder next to
the project (`../shared/mocap/<name>`), or the `motionmatch fetch-data` cache."""
from __future__ import annotations

import fnmatch
import hashlib
import json
import os
from pathlib import Path

# The file names io/clips.py's readers take (by suffix, case-insensitive). Here, not in io/, so finding
# data does not load the readers (numpy, scipy): `motionmatch fetch-data --help` answers at once.
MOTION_SUFFIXES = (".bvh", ".bvh.gz", ".glb", ".gltf", ".fbx")

ENV_VAR = "MOTIONMATCH_DATA"
DEFAULT_NAME = "jlpm22-locomotion"


class DataNotFoundError(FileNotFoundError):
    """No motion capture found; the message lists every place looked and how to get the data."""


def cache_root() -> Path:
    """Folder of `motionmatch fetch-data` downloads: $XDG_CACHE_HOME/motionmatch or ~/.cache/motionmatch."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "motionmatch"


def project_root(start: Path | None = None) -> Path:
    """The folder holding pyproject.toml above this module (a source checkout), else the cwd."""
    for d in Path(start or __file__).resolve().parents:
        if (d / "pyproject.toml").is_file():
            return d
    return Path.cwd()


def candidate_paths(name: str = DEFAULT_NAME, data: str | os.PathLike | None = None) -> list[tuple[str, Path]]:
    """(origin, path) in the order find_data tries them."""
    out: list[tuple[str, Path]] = []

    def given(p) -> Path:
        # Either the set's own folder or a mocap root holding it (like ../shared/mocap).
        p = Path(p).expanduser()
        return p / name if (p / name).is_dir() else p

    if data:
        out.append(("--data", given(data)))
    env = os.environ.get(ENV_VAR)
    if env:
        out.append((f"${ENV_VAR}", given(env)))
    roots = [project_root()]
    if Path.cwd().resolve() != roots[0]:
        roots.append(Path.cwd().resolve())
    for r in roots:
        out.append(("shared folder", r.parent / "shared" / "mocap" / name))
    out.append(("fetch cache", cache_root() / name))
    return out


def find_data(name: str = DEFAULT_NAME, data: str | os.PathLike | None = None) -> Path:
    """Path of the data set `name` (a folder, or a file when `data` names one).

    Order: `data` (the --data argument), $MOTIONMATCH_DATA (each either the set's folder or a folder
    holding `<name>`), `<project root>/../shared/mocap/<name>`,
    the fetch cache (`~/.cache/motionmatch/<name>`). An explicit --data path that does not exist is an
    error at once rather than a silent fall-back. Raises DataNotFoundError listing the places looked.
    """
    looked = []
    for origin, path in candidate_paths(name, data):
        if path.exists():
            return path
        looked.append(f"  {origin}: {path}")
        if origin == "--data":
            break
    raise DataNotFoundError(
        f"motion capture data {name!r} not found. Looked in:\n" + "\n".join(looked) +
        f"\nGet it with `motionmatch fetch-data --name {name}`, or pass --data PATH, "
        f"or set {ENV_VAR}=PATH.")


def _is_bvh(p: Path) -> bool:
    return is_motion_file(p)


def is_motion_file(path) -> bool:
    """True for a file name the readers take (by its suffix, case-insensitive)."""
    return Path(path).name.lower().endswith(MOTION_SUFFIXES)


def list_bvh_files(paths, include=None, exclude=None) -> list[Path]:
    """Motion files (.bvh, .bvh.gz, .glb, .fbx: io.clips) under paths (files or folders, searched recursively), sorted, unique.

    include / exclude: glob pattern(s) on the file name (e.g. "*walk*"); a file is kept when it matches
    any include pattern (all when None) and no exclude pattern.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    inc = [include] if isinstance(include, str) else list(include or [])
    exc = [exclude] if isinstance(exclude, str) else list(exclude or [])
    found: set[Path] = set()
    for p in map(Path, paths):
        if p.is_dir():
            found.update(f for f in p.rglob("*") if f.is_file() and _is_bvh(f))
        elif p.is_file():
            found.add(p)
        else:
            raise FileNotFoundError(f"no such file or folder: {p}")
    keep = []
    for f in found:
        if inc and not any(fnmatch.fnmatch(f.name, g) for g in inc):
            continue
        if any(fnmatch.fnmatch(f.name, g) for g in exc):
            continue
        keep.append(f)
    return sorted(keep)


def source_tags(roots, files) -> dict[str, list[str]]:
    """file path -> [`source:NAME`]: NAME is the data argument a file came from (a folder's name, or a
    file's folder name), so clips of mixed sets can be told apart (tag filter `source:cmu-locomotion`)."""
    out: dict[str, list[str]] = {}
    for r in map(Path, roots):
        name = r.name if r.is_dir() else r.parent.name
        for f in files:
            f = Path(f)
            if str(f) not in out and (f == r or r in f.parents):
                out[str(f)] = [f"source:{name}"]
    return out


# The mixed default database: each set with the file-name globs it contributes (None: all). One ordinary
# person: the jlpm22 takes give complete locomotion and the skeleton; the CMU trial adds true side-steps,
# Bandai-Namco's `normal` backward walk real backward walking. No exaggerated style (elderly, chimpira,
# tired, ...): with them the search played a hunched elderly walk for a plain forward walk and a swagger
# for a backward one, because they tracked the stick a little better. Nor Bandai-Namco's `normal` walks
# towards the left and right: they are forward walks, and the search then played the Bandai actor instead
# of the main one for a plain forward walk (press W: 9.3 of 10 s; docs/look.md). Six of Bandai-Namco's
# `normal` straight runs (dataset-2 014-019, 2.6-3.2 m/s): the jlpm22 actor runs in curves, and a straight
# run looped over the 8 frames of a sprint start (run: 28 % of frames outside the actor's posture at the
# gait). Only six: every clip shifts the features' normalization (walks) and the toe floor's median; with
# 18 (002-019) run_turns was 12 % outside against 5 % with six. Changing this changes the cached
# database's definition key (default_definition), so its cache is rebuilt on first use.
MIXED_DEFAULT_SETS = (("jlpm22-locomotion", None), ("cmu-locomotion", None),
                      ("bandai-namco", ("dataset-1_walk-back_normal_*", "dataset-2_run_normal_01[4-9].bvh")))
LICENCES = {
    "jlpm22-locomotion": "MIT (Jose Luis Ponton)",
    "cmu-locomotion": "free for all uses; credit: \"The data used in this project was obtained from "
                      "mocap.cs.cmu.edu. The database was created with funding from NSF EIA-0196217.\"",
    "bandai-namco": "CC BY-NC 4.0 (Bandai Namco Research Inc.): non-commercial use only",
}


def mixed_default_files(data: str | os.PathLike | None = None, warn=None) -> tuple[list[Path], dict[str, list[str]], str]:
    """Files of the mixed default database, their `source:` tags and the skeleton file (the first jlpm22
    take) every clip is retargeted onto. The jlpm22 set is required; a missing optional set is reported
    through `warn` and left out."""
    files: list[Path] = []
    tags: dict[str, list[str]] = {}
    for name, include in MIXED_DEFAULT_SETS:
        try:
            root = find_data(name, data)
            # A --data path naming one set's folder stands for that set only.
            if name != DEFAULT_NAME and root.name != name:
                raise DataNotFoundError(f"motion capture data {name!r} not found at {root}")
        except DataNotFoundError as e:
            if name == DEFAULT_NAME:
                raise
            if warn:
                warn(f"left out of the mixed database: {str(e).splitlines()[0]}")
            continue
        found = list_bvh_files([root], include=include)
        files += found
        tags.update(source_tags([root], found))
    skeleton = str(next(f for f in files if tags[str(f)] == [f"source:{DEFAULT_NAME}"]))
    return files, tags, skeleton


def print_licences(tags, file=None) -> None:
    """Print the licence of every set named by a `source:` tag in `tags` (a dict file -> tags, or a list
    of per-clip tag lists), so a user of a mixed database knows the terms (Bandai-Namco: non-commercial)."""
    import sys
    groups = tags.values() if isinstance(tags, dict) else tags
    names = sorted({t[len("source:"):] for g in groups for t in g if t.startswith("source:")})
    for n in names:
        if n in LICENCES:
            print(f"licence of {n}: {LICENCES[n]}", file=file or sys.stdout)


# The action database (docs/ACTIONS.md): the mixed default set plus Bandai-Namco dataset-1 gestures and fights,
# tagged `action` and `action:NAME` (CC BY-NC 4.0: non-commercial use only).
ACTION_NAMES = ("bow", "bye", "byebye", "call", "guide", "kick", "punch", "respond", "slash", "dash")


def action_files(data: str | os.PathLike | None = None) -> tuple[list[Path], dict[str, list[str]]]:
    """Bandai-Namco dataset-1 clips of ACTION_NAMES and their tags (`source:bandai-namco`, `action`,
    `action:NAME`)."""
    root = find_data("bandai-namco", data)
    files, tags = [], {}
    for name in ACTION_NAMES:
        found = list_bvh_files([root], include=f"dataset-1_{name}_*")
        files += found
        for f in found:
            tags[str(f)] = ["source:bandai-namco", "action", f"action:{name}"]
    if not files:
        raise DataNotFoundError(f"no dataset-1 action clips (dataset-1_bow_*.bvh, ...) under {root}")
    return files, tags


def actions_default_files(data: str | os.PathLike | None = None, warn=None) -> tuple[list[Path], dict[str, list[str]], str]:
    """Files of the action database: the mixed default set and the dataset-1 actions; their tags and the
    skeleton file (as mixed_default_files)."""
    files, tags, skeleton = mixed_default_files(data, warn=warn)
    more, more_tags = action_files(data)
    return files + more, {**tags, **more_tags}, skeleton


# The Bandai-Namco locomotion database (`motionmatch build --default bandai`, docs/BANDAI.md): every
# walking and running clip of both datasets on Bandai's own skeleton (CC BY-NC 4.0: non-commercial use
# only): dataset-2 walks, walking turns and runs (7 styles), dataset-1 walks (forward, backward, towards
# the left / right), runs and dashes (15 styles).
BANDAI_LOCOMOTION = ("dataset-2_walk_*", "dataset-2_walk-turn-left_*", "dataset-2_walk-turn-right_*", "dataset-2_run_*",
                     "dataset-1_walk_*", "dataset-1_walk-back_*", "dataset-1_walk-left_*", "dataset-1_walk-right_*",
                     "dataset-1_run_*", "dataset-1_dash_*")


def bandai_locomotion_files(data: str | os.PathLike | None = None) -> tuple[list[Path], dict[str, list[str]]]:
    """Files of the Bandai-Namco locomotion database (BANDAI_LOCOMOTION) and their `source:` tags."""
    root = find_data("bandai-namco", data)
    files = list_bvh_files([root], include=BANDAI_LOCOMOTION)
    if not files:
        raise DataNotFoundError(f"no Bandai-Namco locomotion clips (dataset-2_walk_*.bvh, ...) under {root}")
    return files, {str(f): ["source:bandai-namco"] for f in files}


# Bumped when building the same files gives another database (retargeting, contacts): part of the
# default databases' definitions, so their caches are rebuilt.
BUILD_REVISION = ("2026-11-28 retargeted trunk lean matched on the clip's moving frames only (bows keep their depth); "
                  "Bandai-Namco normal straight runs in the mixed set")


def default_definition(mixed: bool = False, kind: str | None = None) -> str | None:
    """Key of what a default database is built from (its sets, file globs and BUILD_REVISION), stored in
    its meta "definition"; a cache holding another key is rebuilt (database.build_default_database).
    None for the single-rig databases (jlpm22-only, Bandai-Namco), which nothing retargets."""
    if kind not in ("actions",) and not (mixed and kind is None):
        return None
    spec = [MIXED_DEFAULT_SETS, ACTION_NAMES if kind == "actions" else None, BUILD_REVISION]
    return hashlib.sha1(json.dumps(spec).encode()).hexdigest()[:12]
