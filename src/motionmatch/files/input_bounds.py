"""Bounds every reader of a user's file applies before it parses or allocates: regular files of a bounded
size, JSON/TOML nested no deeper than a bound, integers small enough to be floats, no NaN or infinity.

Each reader passes its own error class (a ValueError subclass: CrowdError, EventError, ...) and the file's
path, so the messages name the file and the field, as docs/ROBUSTNESS.md promises.
"""
from __future__ import annotations

import json
import math
import os
import re
import stat
import tomllib
from pathlib import Path

import numpy as np

MAX_NESTING = 32              # objects/lists inside each other (the formats need 4 or 5)
MAX_INTEGER = 2 ** 63         # a JSON/TOML integer beyond this is no count, seed or coordinate
MAX_INTEGER_DIGITS = 20

# Strings and comments, so brackets inside them do not count as nesting.
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_TOML_SKIP = re.compile(rb'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*')


def read_bounded(path, max_bytes: int, error=ValueError, what: str = "file") -> bytes:
    """The bytes of a regular file of at most max_bytes; devices, pipes and folders are refused (so
    `/dev/zero` cannot feed a reader forever). Raises `error` naming the file and the bound."""
    path = Path(path)
    try:
        st = os.stat(path)
    except OSError as e:
        raise error(f"{path}: cannot read the {what}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{path}: the {what} is not a regular file")
    if st.st_size > max_bytes:
        raise error(f"{path}: the {what} holds {st.st_size:,} bytes, beyond the bound of {max_bytes:,}")
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise error(f"{path}: cannot read the {what}: {e.strerror or e}") from None
    if len(data) > max_bytes:       # grew while we read
        raise error(f"{path}: the {what} holds more than {max_bytes:,} bytes")
    return data


def nesting_depth(raw: bytes, toml: bool = False) -> int:
    """Deepest bracket nesting of JSON (or TOML) text, strings and comments left out: linear time, no
    recursion, so it runs before a recursive parser sees the text."""
    raw = (_TOML_SKIP if toml else _JSON_STRING).sub(b'""', raw)
    b = np.frombuffer(raw, np.uint8)
    step = (np.isin(b, (ord("["), ord("{"))).astype(np.int64) - np.isin(b, (ord("]"), ord("}"))))
    return int(np.cumsum(step).max(initial=0))


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise ValueError(f"an integer of {len(text.lstrip('-'))} digits")
    return int(text)


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number a file may hold")


def check_plain(data, error=ValueError, where: str = "", max_nesting: int = MAX_NESTING) -> None:
    """Parsed JSON/TOML data: nested at most max_nesting deep, integers within +-2^63, floats finite.
    Iterative (a recursion would fail on the very input it checks)."""
    stack = [(data, where, 0)]
    while stack:
        value, name, depth = stack.pop()
        if isinstance(value, dict):
            items = value.items()
        elif isinstance(value, list):
            items = ((f"[{i}]", v) for i, v in enumerate(value))
        else:
            if isinstance(value, bool):
                continue
            if isinstance(value, int) and abs(value) > MAX_INTEGER:
                raise error(f"{name}: the integer is beyond +-2^63")
            if isinstance(value, float) and not math.isfinite(value):
                raise error(f"{name}: {value} is not a finite number")
            continue
        if depth >= max_nesting:
            raise error(f"{name or 'file'}: nested deeper than {max_nesting} levels")
        for k, v in items:
            key = k if isinstance(k, str) and k.startswith("[") else f".{k}"
            stack.append((v, f"{name}{key}" if name else key.lstrip("."), depth + 1))


def _parse(raw: bytes, error, where: str, max_nesting: int, toml: bool):
    kind = "TOML" if toml else "JSON"
    if nesting_depth(raw, toml) > max_nesting:
        raise error(f"{where}: nested deeper than {max_nesting} levels")
    try:
        text = raw.decode("utf-8")
        data = tomllib.loads(text) if toml else json.loads(text, parse_int=_bounded_int,
                                                           parse_constant=_no_constant)
    except UnicodeDecodeError as e:
        raise error(f"{where}: not UTF-8 text (byte {e.start})") from None
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as e:
        raise error(f"{where}: invalid {kind}: {e}") from None
    except (ValueError, RecursionError) as e:
        raise error(f"{where}: {e}") from None
    check_plain(data, error, where, max_nesting)
    return data


def parse_json(raw: bytes, error=ValueError, where: str = "", max_nesting: int = MAX_NESTING):
    """JSON bytes (UTF-8) -> data, refusing deep nesting, huge integers, NaN and Infinity by name."""
    return _parse(raw, error, where, max_nesting, toml=False)


def parse_toml(raw: bytes, error=ValueError, where: str = "", max_nesting: int = MAX_NESTING) -> dict:
    """TOML bytes (UTF-8) -> dict, with the same bounds as parse_json."""
    return _parse(raw, error, where, max_nesting, toml=True)


def finite_number(value, error, name: str, low: float = -math.inf, high: float = math.inf) -> float:
    """value as a float, refusing booleans, non-numbers, integers too large for a float, NaN, infinity
    and values outside [low, high], with `error` naming the field and the bound."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise error(f"{name}: expected a number, got {type(value).__name__}")
    if isinstance(value, int) and abs(value) > MAX_INTEGER:
        raise error(f"{name}: the integer is beyond +-2^63")
    x = float(value)
    if not math.isfinite(x):
        raise error(f"{name}: {x} is not a finite number")
    if not low <= x <= high:
        raise error(f"{name}: {x:g} is outside [{low:g}, {high:g}]")
    return x


def check_npz(path, error=ValueError, max_member_bytes: int = 256 << 20, max_total_bytes: int = 1 << 30) -> None:
    """Refuse an .npz whose zip directory declares a member larger than max_member_bytes, members
    larger than max_total_bytes together, or a member that is not an .npy array, before numpy inflates
    anything (a zip bomb declares its true size there; a member whose data is longer than declared fails
    numpy's own read)."""
    import zipfile
    path = Path(path)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise error(f"{path}: not a regular file")
        with zipfile.ZipFile(path) as z:
            infos = z.infolist()
    except (OSError, zipfile.BadZipFile, ValueError, EOFError) as e:
        raise error(f"{path}: not an .npz archive ({e})") from None
    total = 0
    for info in infos:
        if not info.filename.endswith(".npy"):
            raise error(f"{path}: member {info.filename[:80]!r} is not an .npy array")
        if info.file_size > max_member_bytes:
            raise error(f"{path}: member {info.filename[:80]!r} inflates to {info.file_size:,} bytes, beyond the "
                        f"bound of {max_member_bytes:,}")
        total += info.file_size
    if total > max_total_bytes:
        raise error(f"{path}: members inflate to {total:,} bytes, beyond the bound of {max_total_bytes:,}")
