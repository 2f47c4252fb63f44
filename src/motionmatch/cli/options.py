"""Argument groups several commands share, and how they are read: the character options (synth, bench
runtime/quality), the distributed engine (build, bench quality), VR crouching (synth, serve) and the
database a command runs on (--db or the cached default)."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..runtime.settings_schema import SettingError, setting
from .inputs import database_file


def database_path(db: str | None, progress: bool = True, **default_options) -> Path:
    """The --db file, else the cached default database (built on first use with `default_options`), as
    `serve` and `synth` use."""
    from ..posedb.database import build_default_database
    if db:
        return database_file(db)
    return build_default_database(progress=progress, **default_options)


def database_paths(dbs, progress: bool = True, **default_options) -> list[Path]:
    """The --db files (the flag given once or more: several files are joined into one runtime database,
    database_join.join_databases, docs/cli.md), else the cached default database."""
    if isinstance(dbs, (str, Path)):
        dbs = [dbs]
    if not dbs:
        return [database_path(None, progress, **default_options)]
    return [database_path(str(d), progress) for d in dbs]


def load_cli_database(dbs, progress: bool = True, **default_options):
    """The Database of the --db files (one, or several joined with a `db:NAME` tag per file's clips)."""
    from ..posedb.database_join import load_databases
    return load_databases(database_paths(dbs, progress, **default_options))


DB_HELP = ("database file (default: build or reuse the cached default database); give --db again to join "
           "several files of one skeleton and feature schema into one database whose clips are tagged "
           "db:NAME by file name (locomotion.npz: db:locomotion), for database sets (docs/ANNOTATIONS.md)")


# Character settings the command line sets directly: flag -> (schema row, attribute of args). Their types,
# choices and bounds come from the settings schema, as for settings files and the app.
SETTING_FLAGS = {"--inertialization": ("inertialization", "inertialization"), "--halflife": ("halflife", "halflife"),
                 "--search-interval": ("search_interval", "search_interval"), "--bias": ("bias", "bias"),
                 "--backend": ("search_backend", "backend"), "--responsiveness": ("responsiveness", "responsiveness"),
                 "--quality": ("quality", "quality"),
                 "--collision-weight": ("collision_weight", "collision_weight")}


def _schema_value(row):
    """An argparse type: the text as the schema row's type, checked against its bounds."""
    def parse(text: str):
        try:
            return row.check(int(text) if row.type == "int" else float(text) if row.type == "float" else text)
        except SettingError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    parse.__name__ = row.name
    return parse


def add_character_options(p):
    for flag, (key, dest) in SETTING_FLAGS.items():
        row = setting("character", key)
        bounds = (f"{row.lo:g}..{row.hi:g}{' ' + row.unit if row.unit else ''}; " if row.lo is not None else "")
        p.add_argument(flag, dest=dest, type=_schema_value(row), choices=row.choices or None, default=None,
                       help=f"{row.doc} ({bounds}character.{key}, default {row.default})")
    p.add_argument("--no-adjustment", action="store_true")
    p.add_argument("--no-clamping", action="store_true")
    p.add_argument("--foot-locking", action=argparse.BooleanOptionalAction, default=None,
                   help="lock feet in contact with leg IK (default on)")
    p.add_argument("--warping", action=argparse.BooleanOptionalAction, default=None,
                   help="orientation, play-rate, stride and slope warping (default on)")
    p.add_argument("--settings", default=None,
                   help="settings file (TOML, e.g. from `motionmatch tune`); the options above override it")
    p.add_argument("--lmm", metavar="MODEL.npz", default=None,
                   help="learned motion matching: poses from this model (`motionmatch lmm train`), not the database")


def runtime_settings_from_args(args, db):
    """--settings FILE (checked against the database's feature channels), then the options over it."""
    from ..runtime.settings_file import load_settings, settings_from_dict
    rs = load_settings(args.settings, db.features.schema.names) if args.settings else settings_from_dict({})
    character_settings_from_args(args, rs.character)
    if getattr(args, "lmm", None):      # a bad model stops the command here, before it writes anything
        from ..runtime.learned import learned_model
        learned_model(db, args.lmm)
    return rs


def character_settings_from_args(args, s=None):
    """CharacterSettings `s` (default: new defaults) with the character options that were given."""
    from ..runtime.character import CharacterSettings
    s = s if s is not None else CharacterSettings()
    for key, dest in SETTING_FLAGS.values():
        v = getattr(args, dest, None)
        if v is not None:
            setattr(s, key, v)
    if getattr(args, "lmm", None):
        s.mode, s.model = "lmm", args.lmm
    if getattr(args, "no_adjustment", False):
        s.adjustment = False
    if getattr(args, "no_clamping", False):
        s.clamping = False
    if getattr(args, "foot_locking", None) is not None:
        s.foot_locking = bool(args.foot_locking)
    if getattr(args, "warping", None) is not None:
        for flag in ("orientation", "play_rate", "stride", "slope"):
            setattr(s.warp, flag, bool(args.warping))
    return s


def add_engine_options(p, what: str):
    g = p.add_mutually_exclusive_group()
    g.add_argument("--workers", type=int, default=None,
                   help=f"spread the {what} over a local cluster of K worker processes on 127.0.0.1")
    g.add_argument("--address", default=None, help="spread them over a running Dask cluster (tcp://HOST:PORT)")


def add_crouch_args(p) -> None:
    """--crouch-tags / --crouch-below: VR database switching by HMD height (synth --trackers, serve --vr-model)."""
    p.add_argument("--crouch-tags", default=None, metavar="EXPR",
                   help="VR: search only clips matching this tag expression while the HMD is low (docs/VR.md)")
    p.add_argument("--crouch-below", type=float, default=0.8, metavar="RATIO",
                   help="VR: 'low' is under this ratio of the standing HMD height, calibrated over the "
                        "first 2 s (default 0.8)")


def crouch_settings(args) -> tuple:
    """VRDriverSettings.height_databases from --crouch-tags / --crouch-below (empty without tags)."""
    from ..vr.driver import crouch_databases
    return crouch_databases(args.crouch_tags, args.crouch_below) if args.crouch_tags else ()
