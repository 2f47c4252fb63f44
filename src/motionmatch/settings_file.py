"""Settings files: a character's runtime settings as TOML, loaded with validation.

Layout (every table and key optional; a missing key keeps the runtime's default):

    [character]             # CharacterSettings fields (seconds, metres, degrees)
    search_interval = 0.1
    [character.weights]     # feature channel -> weight (missing: the schema's weight)
    foot_position = 0.75
    [warp]                  # WarpSettings fields (CharacterSettings.warp)
    orientation_limit_deg = 90.0
    [controller]            # ControllerSettings fields (m/s, seconds, radians)
    velocity_halflife = 0.15

The fields come from the runtime dataclasses themselves, so a field added there is accepted here;
`RANGES` bounds the numeric ones it knows. An unknown table or key, a wrong type or a value out of
range is a `SettingsError` naming the file and the key.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import tomllib
from pathlib import Path
from typing import NamedTuple

from .runtime.character import CharacterSettings
from .runtime.controller import ControllerSettings
from .runtime.settings import INERTIALIZATION_METHODS

# (low, high) inclusive, per table and field. Times in s, distances in m, angles in degrees
# (the controller's camera yaw, radians, is a view direction, never stored).
RANGES: dict[str, dict[str, tuple[float, float]]] = {
    "character": {
        "search_interval": (0.01, 2.0), "bias": (0.0, 10.0), "lmm_bias": (0.0, 10.0), "lmm_push": (0.0, 10.0), "lmm_drift": (0.0, 10.0), "halflife": (0.005, 2.0), "blend_time": (0.01, 2.0),
        "adjustment_position_halflife": (0.005, 5.0), "adjustment_rotation_halflife": (0.005, 5.0),
        "adjustment_max_ratio": (0.0, 5.0), "clamp_radius": (0.0, 5.0), "clamp_angle_deg": (0.0, 180.0),
        "foot_unlock_radius": (0.0, 2.0), "foot_lock_halflife": (0.005, 2.0),
        "foot_lock_glide_halflife": (0.001, 1.0), "end_exclude": (0, 600),
        "no_rewind_frames": (0, 600), "sharp_change_speed": (0.0, 20.0), "sharp_change_angle_deg": (0.0, 360.0),
    },
    "weights": {"*": (0.0, 10.0)},
    "warp": {
        "orientation_limit_deg": (0.0, 180.0), "backward_angle_deg": (90.0, 180.0),
        "orientation_halflife": (0.005, 2.0), "min_travel_speed": (0.0, 5.0), "rate_min": (0.1, 1.0),
        "rate_max": (1.0, 5.0), "rate_share": (0.0, 1.0), "stride_min": (0.1, 1.0), "stride_max": (1.0, 3.0),
        "speed_halflife": (0.005, 2.0), "query_speed_floor": (0.0, 5.0), "slope_max_deg": (0.0, 80.0),
        "spine_pitch": (0.0, 2.0), "spine_pitch_max_deg": (0.0, 45.0),
        "hips_halflife": (0.005, 2.0), "hip_twist_limit_deg": (0.0, 90.0), "spine_twist_limit_deg": (0.0, 180.0),
    },
    "controller": {
        "dead_zone": (0.0, 0.95), "response_exponent": (0.1, 5.0), "look_dead_zone": (0.0, 0.95),
        "walk_forward_speed": (0.0, 20.0), "walk_side_speed": (0.0, 20.0), "walk_backward_speed": (0.0, 20.0),
        "run_forward_speed": (0.0, 20.0), "run_side_speed": (0.0, 20.0), "run_backward_speed": (0.0, 20.0),
        "velocity_halflife": (0.005, 5.0), "stop_halflife": (0.005, 5.0), "rotation_halflife": (0.005, 5.0),
        "gait_halflife": (0.005, 5.0),
    },
}
CHOICES = {("character", "inertialization"): INERTIALIZATION_METHODS,
           ("character", "search_backend"): ("brute_numpy", "brute", "aabb")}
# The learned model is chosen on the command line (--lmm), not pinned in a tuning file.
NOT_STORED = {("controller", "camera_yaw"), ("character", "warp"), ("character", "weights"),
              ("character", "mode"), ("character", "model")}


class SettingsError(ValueError):
    """A settings file that cannot be used; the message names the file and the key."""


class RuntimeSettings(NamedTuple):
    """What a settings file sets: the character's settings (warp inside) and its controller's."""
    character: CharacterSettings
    controller: ControllerSettings


def _tables(rs: RuntimeSettings) -> dict:
    """table name -> the dataclass instance holding its fields."""
    return {"character": rs.character, "warp": rs.character.warp, "controller": rs.controller}


def _fields(obj, table: str) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(obj) if (table, f.name) not in NOT_STORED}


def _check_value(table: str, key: str, value, field: dataclasses.Field | None, default, where: str):
    """The value converted to the field's type, or a SettingsError naming `where`."""
    name = f"{where}: [{table}] {key}"
    choices = CHOICES.get((table, key))
    if choices is not None:
        if value not in choices:
            raise SettingsError(f"{name} = {value!r}: expected one of {', '.join(choices)}")
        return value
    kind = type(default) if default is not None else None
    text = str(field.type) if field is not None else "float"
    if kind is bool:
        if not isinstance(value, bool):
            raise SettingsError(f"{name} = {value!r}: expected true or false")
        return value
    if kind is str or (kind is None and "str" in text):
        if not isinstance(value, str):
            raise SettingsError(f"{name} = {value!r}: expected a string")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SettingsError(f"{name} = {value!r}: expected a number")
    if kind is int and not isinstance(value, int):
        raise SettingsError(f"{name} = {value!r}: expected an integer")
    if not math.isfinite(value):
        raise SettingsError(f"{name} = {value!r}: expected a finite number")
    ranges = RANGES.get(table, {})
    lo, hi = ranges.get(key, ranges.get("*", (-math.inf, math.inf)))
    if not lo <= value <= hi:
        raise SettingsError(f"{name} = {value!r} is out of range [{lo:g}, {hi:g}]")
    return int(value) if kind is int else float(value)


def settings_from_dict(data: dict, where: str = "settings", channels=None) -> RuntimeSettings:
    """RuntimeSettings from a parsed settings file (defaults for what it leaves out).

    channels: the database's feature channel names, to reject unknown weights early (None: unchecked).
    """
    rs = RuntimeSettings(CharacterSettings(), ControllerSettings())
    tables = _tables(rs)
    unknown = sorted(set(data) - set(tables))
    if unknown:
        raise SettingsError(f"{where}: unknown table(s) {', '.join(unknown)}; known: {', '.join(tables)}")
    for table, obj in tables.items():
        given = dict(data.get(table, {}))
        if not isinstance(data.get(table, {}), dict):
            raise SettingsError(f"{where}: {table} must be a table")
        weights = given.pop("weights", None) if table == "character" else None
        fields = _fields(obj, table)
        for key, value in given.items():
            if key not in fields:
                raise SettingsError(f"{where}: [{table}] unknown key {key!r}; known: {', '.join(sorted(fields))}")
            setattr(obj, key, _check_value(table, key, value, fields[key], getattr(obj, key), where))
        if weights is not None:
            if not isinstance(weights, dict):
                raise SettingsError(f"{where}: character.weights must be a table of channel = weight")
            for ch, w in weights.items():
                if channels is not None and ch not in channels:
                    raise SettingsError(f"{where}: [character.weights] unknown channel {ch!r}; "
                                        f"channels: {', '.join(channels)}")
                rs.character.weights[ch] = _check_value("weights", ch, w, None, 1.0, where)
    return rs


def load_settings(path, channels=None) -> RuntimeSettings:
    """Read and validate a settings TOML file (see the module docstring)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such settings file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise SettingsError(f"{path}: not a TOML file ({e})") from None
    return settings_from_dict(data, str(path), channels)


def settings_to_dict(character: CharacterSettings, controller: ControllerSettings | None = None) -> dict:
    """Every stored field of the settings, as the tables of a settings file (None values left out)."""
    rs = RuntimeSettings(character, controller or ControllerSettings())
    out = {}
    for table, obj in _tables(rs).items():
        out[table] = {k: getattr(obj, k) for k in _fields(obj, table) if getattr(obj, k) is not None}
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
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(dumps_settings(character, controller, comment))
    os.replace(tmp, path)
