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
_LONG_INTEGER = re.compile(rb"(?<![.\w])\d{%d,}(?![.\deE])" % (MAX_INTEGER_DIGITS + 1))

_OPEN, _CLOSE = (ord("["), ord("{")), (ord("]"), ord("}"))
_DEPTH_CHUNK = 1 << 20
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
            # Ask for the size the file has: read(max_bytes + 1) allocates the whole bound first (512 MB
            # for a .glb of 40 MB).
            data = f.read(st.st_size + 1)
            if len(data) > st.st_size:      # grew since the stat
                data += f.read(max_bytes + 1 - len(data))
    except OSError as e:
        raise error(f"{path}: cannot read the {what}: {e.strerror or e}") from None
    if len(data) > max_bytes:       # grew while we read
        raise error(f"{path}: the {what} holds more than {max_bytes:,} bytes")
    return data


def nesting_depth(raw: bytes, toml: bool = False) -> int:
    """Deepest bracket nesting of JSON (or TOML) text, strings and comments left out: linear time, no
    recursion, so it runs before a recursive parser sees the text."""
    return _depth((_TOML_SKIP if toml else _JSON_STRING).sub(b'""', raw))


def _depth(text: bytes) -> int:
    """Deepest bracket nesting of text without strings, in chunks of _DEPTH_CHUNK bytes, so the arrays
    stay small whatever the file's size."""
    b = np.frombuffer(text, np.uint8)
    depth = deepest = 0
    for at in range(0, len(b), _DEPTH_CHUNK):
        c = b[at:at + _DEPTH_CHUNK]
        step = np.isin(c, _OPEN).astype(np.int32) - np.isin(c, _CLOSE)
        levels = np.cumsum(step, dtype=np.int32) + depth
        deepest, depth = max(deepest, int(levels.max())), int(levels[-1])
    return deepest


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number a file may hold")


def check_plain(data, error=ValueError, where: str = "", max_nesting: int = MAX_NESTING) -> None:
    """Parsed JSON/TOML data: nested at most max_nesting deep, integers within +-2^63, floats finite.
    Iterative, holding one iterator a level: a recursion would fail on the very input it checks, and a
    stack of every value (with its name) took gigabytes on a list of millions of numbers."""
    def name(keys, last) -> str:     # built only for an error; None: the root
        out = where
        for k in (*keys, last):
            if k is not None:
                out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
        return out

    stack, keys = [iter([(None, data)])], []
    while stack:
        for k, v in stack[-1]:      # every value of the file: builtins only on the common paths
            t = type(v)
            if t is str or t is bool or v is None:
                continue
            if t is list and len(v) > 64 and _plain_list(v):
                continue
            if t is dict or t is list or isinstance(v, (dict, list)):
                if len(stack) > max_nesting:
                    raise error(f"{name(keys, k) or 'file'}: nested deeper than {max_nesting} levels")
                stack.append(iter(v.items()) if isinstance(v, dict) else enumerate(v))
                keys.append(k)
                break
            if isinstance(v, float):
                if not math.isfinite(v):
                    raise error(f"{name(keys, k)}: {v} is not a finite number")
            elif isinstance(v, int) and not isinstance(v, bool) and not -MAX_INTEGER <= v <= MAX_INTEGER:
                raise error(f"{name(keys, k)}: the integer is beyond +-2^63")
        else:
            stack.pop()
            if keys:
                keys.pop()


_NUMBERS, _TEXTS = {int, float, bool}, {str, bool, type(None)}


def _plain_list(v: list) -> bool:
    """Whether a list holds only strings, booleans and nulls, or only numbers that are finite, integers
    within +-2^63: found in bulk (a long list of numbers is what a large file holds). False: look at each
    value (check_plain names the first bad one)."""
    kinds = set(map(type, v))
    if kinds <= _TEXTS:
        return True
    if not kinds <= _NUMBERS:
        return False
    try:
        a = np.array(v, dtype=np.float64)
    except OverflowError:       # an integer beyond any float
        return False
    return bool(np.isfinite(a).all()) and (int not in kinds or float(np.abs(a).max()) <= MAX_INTEGER)


def _parse(raw: bytes, error, where: str, max_nesting: int, toml: bool):
    kind = "TOML" if toml else "JSON"
    bare = (_TOML_SKIP if toml else _JSON_STRING).sub(b'""', raw)
    if _depth(bare) > max_nesting:
        raise error(f"{where}: nested deeper than {max_nesting} levels")
    # Integer digits counted in the text, not by a hook per number: a parse_int hook made a JSON of
    # millions of numbers take seconds each.
    long = None if toml else _LONG_INTEGER.search(bare)
    if long:
        raise error(f"{where}: an integer of {len(long.group())} digits")
    try:
        text = raw.decode("utf-8")
        data = tomllib.loads(text) if toml else json.loads(text, parse_constant=_no_constant)
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
    anything (a zip bomb declares its true size there); then read each member's .npy header and refuse
    one whose declared shape and dtype need more (or fewer) bytes than the member holds, or that holds
    Python objects: a forged header declaring a (10^7, 10^7) array would make numpy allocate it first."""
    import zipfile
    path = Path(path)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise error(f"{path}: not a regular file")
        z = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile, ValueError, EOFError) as e:
        raise error(f"{path}: not an .npz archive ({e})") from None
    with z:
        total = 0
        for info in z.infolist():
            if not info.filename.endswith(".npy"):
                raise error(f"{path}: member {info.filename[:80]!r} is not an .npy array")
            if info.file_size > max_member_bytes:
                raise error(f"{path}: member {info.filename[:80]!r} inflates to {info.file_size:,} bytes, beyond "
                            f"the bound of {max_member_bytes:,}")
            total += info.file_size
        if total > max_total_bytes:
            raise error(f"{path}: members inflate to {total:,} bytes, beyond the bound of {max_total_bytes:,}")
        for info in z.infolist():
            _check_npy_header(z, info, path, error)


def _check_npy_header(z, info, path: Path, error) -> None:
    """The member's .npy header (read from its first bytes only) declares exactly the bytes it holds."""
    import zipfile
    name = info.filename[:80]
    try:
        with z.open(info) as f:
            version = np.lib.format.read_magic(f)
            if version not in ((1, 0), (2, 0)):
                raise ValueError(f"format version {version[0]}.{version[1]}, expected 1.0 or 2.0")
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, dtype = read(f)
            data_bytes = info.file_size - f.tell()
    except (OSError, ValueError, TypeError, SyntaxError, EOFError, RuntimeError, zipfile.BadZipFile) as e:
        raise error(f"{path}: member {name!r}: not an .npy array ({str(e)[:120]})") from None
    if dtype.hasobject:
        raise error(f"{path}: member {name!r} holds Python objects ({dtype}); only arrays of numbers are read")
    declared = math.prod(shape) * dtype.itemsize
    if declared != data_bytes:
        shown = "x".join(str(n) for n in shape) or "scalar"
        raise error(f"{path}: member {name!r}: its header declares a {shown[:80]} {dtype} array of {declared:,} "
                    f"bytes, the member holds {data_bytes:,} bytes of data (a damaged or forged header)")
