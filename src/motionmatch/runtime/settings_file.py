"""Settings files: a character's runtime settings as TOML, loaded with validation.

Layout: the tables of the settings schema, which `motionmatch settings --json` lists (every table and
key optional; a missing key keeps the runtime's default):

    [character]             # CharacterSettings fields (seconds, metres, degrees)
    search_interval = 0.1
    [warp]                  # WarpSettings fields (CharacterSettings.warp)
    orientation_limit_deg = 90.0
    [controller]            # ControllerSettings fields (m/s, seconds, radians)
    velocity_halflife = 0.15
    [weights]               # feature channel -> weight (missing: the database's weight)
    foot_position = 0.75

The weights may also be nested as [character.weights], which is how save_settings writes them (files
written before [weights] was read keep loading); a file gives them one way or the other.

Every key, its type and its bounds come from the settings schema (runtime/settings_schema.py), as they
do for the runtime, the app and `tune`. An unknown table or key, a setting the schema does not store in
files (stored: false, set at run time), a table that is not a table, a wrong type or a value out of range
(NaN, inf and huge integers included) is a `SettingsError` naming the file, `table.key` and the bound.
"""
from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import NamedTuple

from .character import CharacterSettings
from ..files.atomic_file import replacing
from ..files.input_bounds import MAX_NESTING, nesting_depth, read_bounded
from .controller import ControllerSettings
from .settings_schema import TABLES, SettingError, rows, setting


MAX_SETTINGS_BYTES = 1 << 20     # a full settings file is about 3 kB


class SettingsError(ValueError):
    """A settings file that cannot be used; the message names the file and the key."""


class RuntimeSettings(NamedTuple):
    """What a settings file sets: the character's settings (warp inside) and its controller's."""
    character: CharacterSettings
    controller: ControllerSettings


def _tables(rs: RuntimeSettings) -> dict:
    """table name -> the dataclass instance holding its fields (the weights table is a dict: see _weights)."""
    return {"character": rs.character, "warp": rs.character.warp, "controller": rs.controller}


def _stored(table: str) -> list[str]:
    """The keys of a table that settings files hold."""
    return [s.key for s in rows(table) if s.stored]


def _check(table: str, key: str, value, where: str):
    try:
        return setting(table, key).check(value)
    except SettingError as e:
        raise SettingsError(f"{where}: {e}") from None


def _weights(data: dict, nested, where: str, channels) -> dict:
    """{channel: weight} of [weights] or [character.weights] (`nested`), checked against the schema's
    weights row and, given `channels`, the database's channel names."""
    given = {head: w for head, w in (("[weights]", data.get("weights")), ("[character.weights]", nested))
             if w is not None}
    if len(given) > 1:
        raise SettingsError(f"{where}: weights given twice, in [weights] and [character.weights]; keep one")
    out = {}
    for head, weights in given.items():
        if not isinstance(weights, dict):
            raise SettingsError(f"{where}: {head} must be a table of channel = weight, got {type(weights).__name__}")
        for ch, w in weights.items():
            if channels is not None and ch not in channels:
                raise SettingsError(f"{where}: {head} unknown channel {ch!r}; channels: {', '.join(channels)}")
            out[ch] = _check("weights", ch, w, where)
    return out


def settings_from_dict(data: dict, where: str = "settings", channels=None) -> RuntimeSettings:
    """RuntimeSettings from a parsed settings file (defaults for what it leaves out).

    channels: the database's feature channel names, to reject unknown weights early (None: unchecked).
    """
    if not isinstance(data, dict):
        raise SettingsError(f"{where}: expected tables of settings, got {type(data).__name__}")
    rs = RuntimeSettings(CharacterSettings(), ControllerSettings())
    unknown = sorted(set(data) - set(TABLES), key=str)
    if unknown:
        raise SettingsError(f"{where}: unknown table(s) {', '.join(map(str, unknown))}; known: {', '.join(TABLES)}")
    nested = None
    for table, obj in _tables(rs).items():
        if not isinstance(data.get(table, {}), dict):
            raise SettingsError(f"{where}: [{table}] must be a table of key = value, "
                                f"got {type(data[table]).__name__}")
        given = dict(data.get(table, {}))
        if table == "character":
            nested = given.pop("weights", None)
        known = _stored(table)
        for key, value in given.items():
            if key not in known:
                if any(s.key == key for s in rows(table)):
                    raise SettingsError(f"{where}: [{table}] {key} is set at run time, not in settings files "
                                        f"(stored: false in `motionmatch settings --json`)")
                raise SettingsError(f"{where}: [{table}] unknown key {key!r}; known: {', '.join(sorted(known))}")
            setattr(obj, key, _check(table, key, value, where))
    rs.character.weights.update(_weights(data, nested, where, channels))
    return rs


def load_settings(path, channels=None) -> RuntimeSettings:
    """Read and validate a settings TOML file (see the module docstring); at most MAX_SETTINGS_BYTES,
    nested no deeper than input_bounds allows, read before anything is parsed."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such settings file")
    raw = read_bounded(path, MAX_SETTINGS_BYTES, SettingsError, "settings file")
    # Nesting is bounded before the recursive parser; values (NaN, inf, huge integers) are left to the
    # schema, whose errors name table.key and the bound.
    if nesting_depth(raw, toml=True) > MAX_NESTING:
        raise SettingsError(f"{path}: not a TOML file (nested deeper than {MAX_NESTING} levels)")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise SettingsError(f"{path}: not a TOML file ({e})") from None
    return settings_from_dict(data, str(path), channels)


def settings_to_dict(character: CharacterSettings, controller: ControllerSettings | None = None) -> dict:
    """Every stored field of the settings, as the tables of a settings file (None values left out)."""
    rs = RuntimeSettings(character, controller or ControllerSettings())
    out = {}
    for table, obj in _tables(rs).items():
        out[table] = {k: getattr(obj, k) for k in _stored(table) if getattr(obj, k) is not None}
    out["character"]["weights"] = {k: float(v) for k, v in character.weights.items()}
    return out


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))       # a JSON string is a valid TOML basic string


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def dumps_settings(character: CharacterSettings, controller: ControllerSettings | None = None,
                   comment: str = "") -> str:
    """The settings as TOML text (what save_settings writes)."""
    lines = [f"# {c}" for c in comment.splitlines()] + ([""] if comment else [])
    data = settings_to_dict(character, controller)
    for table, values in data.items():
        sub = {k: v for k, v in values.items() if isinstance(v, dict)}
        lines.append(f"[{table}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items() if not isinstance(v, dict)]
        for name, inner in sub.items():
            lines += ["", f"[{table}.{name}]"] + [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in inner.items()]
        lines.append("")
    return "\n".join(lines)


def save_settings(path, character: CharacterSettings, controller: ControllerSettings | None = None,
                  comment: str = "") -> None:
    """Write a settings file atomically (a temporary file renamed over the target)."""
    with replacing(path, "w") as f:
        f.write(dumps_settings(character, controller, comment))
