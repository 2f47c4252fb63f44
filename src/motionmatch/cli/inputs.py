"""The door of every command: the files it reads exist and are of the right kind, checked before the
command imports its stages (numpy, scipy, numba take a second or more to load), so a mistyped path or a
wrong file is reported at once. The readers check everything again, in depth."""
from __future__ import annotations

import json
from pathlib import Path

_ZIP_MAGIC = b"PK\x03\x04"          # an .npz is a zip archive; an empty archive starts PK\x05\x06
_EMPTY_ZIP = b"PK\x05\x06"
_JSON_CHECK_BYTES = 16 << 20      # larger scenario files are left to the reader's size bound


def existing_file(path, flag: str, what: str) -> Path:
    """`path` as a Path when it is a file; FileNotFoundError naming the flag and what was expected."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{_named(flag, path)}: no such {what}")
    return p


def existing_path(path, flag: str, what: str) -> Path:
    """`path` as a Path when it is a file or a folder."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{_named(flag, path)}: no such {what}")
    return p


def database_file(path, flag: str = "--db") -> Path:
    """A database file: it exists and is a zip archive (what `motionmatch build` writes)."""
    p = Path(path)
    if not p.is_file():
        default = ", or leave --db out to use the default database" if flag == "--db" else ""
        raise FileNotFoundError(f"{_named(flag, path)}: no such database file (build one with `motionmatch "
                                f"build`{default})")
    with p.open("rb") as f:
        head = f.read(4)
    if head not in (_ZIP_MAGIC, _EMPTY_ZIP):
        raise ValueError(f"{path}: not a motionmatch database (an .npz archive written by `motionmatch build`)")
    return p


def database_files(paths, flag: str = "--db") -> None:
    """database_file for each of the (repeatable) flag's values; None or [] is the default database."""
    for path in [paths] if isinstance(paths, (str, Path)) else paths or ():
        database_file(path, flag)


def scenario_file(path) -> Path:
    """A scenario: a file holding JSON (the scenario reader checks its fields)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"--scenario {path}: no such file; expected a scenario JSON file "
                                f"({{\"duration\": ..., \"inputs\": [...]}} or {{\"duration\": ..., \"path\": {{...}}}}, "
                                f"see README 'Scenario files')")
    if p.stat().st_size > _JSON_CHECK_BYTES:
        return p                    # the reader refuses it with its own bound
    try:
        json.loads(p.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"scenario: invalid JSON in {path}: {e}") from None
    return p


def _named(flag: str, path) -> str:
    return f"{flag} {path}" if flag else str(path)
