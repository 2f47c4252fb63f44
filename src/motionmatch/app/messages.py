"""The app's client messages: every text message a page sends over its WebSocket is a JSON object with a
`type`, checked here against `SCHEMAS` (a connection's: `session_schemas`) before the session sees it, and
only here; a bad one raises MessageError, whose text goes back to the page as an `error` reply (the
message is dropped).
"""
from __future__ import annotations

import json
import math
from typing import Any, Callable, Iterable

from ..runtime.settings_schema import Setting, SettingError, app_fields, setting
from ..offline.scenario import clamp_stick

MAX_TEXT_BYTES = 4096           # larger client messages get an error reply and are dropped
TERRAIN_KINDS = ("flat", "slope", "steps", "noise")


class MessageError(ValueError):
    """A client message that is malformed or out of range; the text goes back to the client."""


def _finite(v) -> bool:
    """A JSON number that is finite as a float (a 400-digit integer is not; math.isfinite would raise)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return abs(v) <= 1e300 if isinstance(v, int) else math.isfinite(v)


def number(lo: float, hi: float) -> Callable[[Any, str], float]:
    def check(v, name):
        if not _finite(v):
            raise MessageError(f"{name} must be a finite number")
        if not lo <= v <= hi:
            raise MessageError(f"{name} must be in [{lo}, {hi}], got {v}")
        return float(v)
    return check


def _boolean(v, name) -> bool:
    if not isinstance(v, bool):
        raise MessageError(f"{name} must be true or false")
    return v


def _vec2(v, name) -> tuple[float, float]:
    """A stick [x, z], forgiving like scenarios: components within [-1.5, 1.5], magnitude clamped to 1."""
    return clamp_stick(v, name, error=MessageError)


def _optional(check):
    def inner(v, name):
        return None if v is None else check(v, name)
    return inner


def _text(max_len: int):
    def check(v, name):
        if not isinstance(v, str) or len(v) > max_len:
            raise MessageError(f"{name} must be a string of at most {max_len} characters")
        return v
    return check


def _choice(options):
    def check(v, name):
        if v not in options:
            raise MessageError(f"{name} must be one of {', '.join(options)}")
        return v
    return check


def _integer(lo: int, hi: int):
    def check(v, name):
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise MessageError(f"{name} must be an integer in [{lo}, {hi}]")
        return v
    return check


def _numbers(max_len: int):
    def check(v, name):
        if not isinstance(v, list) or not 0 < len(v) <= max_len:
            raise MessageError(f"{name} must be a list of 1..{max_len} numbers")
        num = number(-1e6, 1e6)
        return [num(x, f"{name}[{i}]") for i, x in enumerate(v)]
    return check


def _weights(v, name):
    if not isinstance(v, dict) or len(v) > 64:
        raise MessageError(f"{name} must be an object {{channel: weight}}")
    return {str(k): _schema_check(setting("weights", str(k)[:64]), x, f"{name}.{k}") for k, x in v.items()}


def _schema_check(row: Setting, v, name: str):
    """A value checked by its settings schema row; the error names the message field and `table.key`."""
    try:
        return row.check(v)
    except SettingError as e:
        raise MessageError(str(e) if name in (row.name, row.key) else f"{name}: {e}") from None


def _setting(row: Setting):
    text = _optional(_text(200)) if row.type == "text" else None

    def check(v, name):
        return _schema_check(row, v if text is None else text(v, name), name)
    return check


# The settings a page may change: every setting the schema gives an app control (message field -> check).
SETTINGS_FIELDS = {"weights": _weights, **{field: _setting(row) for field, row in app_fields().items()}}

# type -> {field: (validator, required)}
SCHEMAS: dict[str, dict[str, tuple[Callable, bool]]] = {
    "input": {"move": (_vec2, True), "look": (_optional(_vec2), False), "run": (_boolean, False),
              "strafe": (_boolean, False)},
    "settings": {k: (f, False) for k, f in SETTINGS_FIELDS.items()},
    "reset": {},
    "pause": {"paused": (_boolean, True)},
    "record": {"action": (_choice(("start", "stop", "clear")), True)},
    "scenario_stop": {},
    "ping": {"t": (number(-1e15, 1e15), True)},
    # Debugging tools: extra per-frame payloads (ghost poses), one search's candidates (the page sends
    # back a search record from its history), playing a clip directly, live terrain.
    "debug": {"ghosts": (_boolean, False)},
    "inspect": {"query": (_numbers(256), True), "current": (_integer(-1, 2**31), True),
                "bias": (number(0.0, 1e6), True), "tag_filter": (_optional(_text(200)), False),
                "k": (_integer(1, 32), False)},
    "play_clip": {"clip": (_optional(_integer(0, 2**31)), True), "offset": (_integer(0, 2**31), False)},
    "terrain": {"kind": (_choice(TERRAIN_KINDS), True)},
    # A request with an event constraint (docs/ACTIONS.md): the action's event `event_in` s from now.
    "action": {"event": (_text(64), True), "event_in": (number(0.05, 10.0), True)},
    # A database set (runtime/database_sets.py): the clips of `tags` with `weights`, now or at the next search.
    "search_set": {"name": (_text(64), True), "tags": (_optional(_text(200)), False), "weights": (_weights, False),
                   "interrupt": (_boolean, False)},
}


def _channel_weights(channels: Iterable[str]):
    """A settings message's weights for one character: checked as _weights, and naming only its feature
    channels."""
    known = frozenset(channels)

    def check(v, name):
        weights = _weights(v, name)
        unknown = sorted(set(weights) - known)
        if unknown:
            raise MessageError(f"unknown feature channel(s): {', '.join(unknown)}"[:300])
        return weights
    return check


def session_schemas(channels: Iterable[str], extra: dict | None = None) -> dict:
    """The schemas of one connection's messages: SCHEMAS with the settings' weights limited to its
    character's feature `channels`, and a mode's own types (extra: Backend.messages, {type: (schema,
    handler)}). Checked there, a setting is applied as it comes."""
    settings = {**SCHEMAS["settings"], "weights": (_channel_weights(channels), False)}
    return {**SCHEMAS, "settings": settings, **{kind: schema for kind, (schema, _) in (extra or {}).items()}}


def reject_constant(name):
    raise MessageError(f"{name} is not valid JSON")


def parse_message(data: str | bytes, schemas: dict = SCHEMAS) -> tuple[str, dict]:
    """Validate one client text message against `schemas` (a connection's: session_schemas); return
    (type, fields) or raise MessageError."""
    if not isinstance(data, str):
        raise MessageError("binary frames are not accepted; send JSON text")
    if len(data.encode("utf-8", "replace")) > MAX_TEXT_BYTES:
        raise MessageError(f"message larger than {MAX_TEXT_BYTES} bytes")
    try:
        obj = json.loads(data, parse_constant=reject_constant)
    except MessageError:
        raise
    except (ValueError, RecursionError) as exc:
        raise MessageError(f"malformed JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise MessageError("a message must be a JSON object with a 'type'")
    kind = obj.get("type")
    if not isinstance(kind, str) or kind not in schemas:
        raise MessageError(f"unknown message type {kind!r}; expected one of {', '.join(schemas)}")
    schema = schemas[kind]
    unknown = sorted(set(obj) - set(schema) - {"type"})
    if unknown:
        raise MessageError(f"unknown field(s) for {kind!r}: {', '.join(map(str, unknown))}")
    fields = {}
    for name, (check, required) in schema.items():
        if name in obj:
            try:
                fields[name] = check(obj[name], name)
            except (TypeError, ValueError, OverflowError) as exc:  # MessageError is a ValueError
                raise MessageError(str(exc) if isinstance(exc, MessageError) else f"{name}: bad value") from None
        elif required:
            raise MessageError(f"{kind!r} needs field {name!r}")
    return kind, fields

