"""Hostile-input campaigns: seeded mutants of BVH files, damaged copies of a database, bad scenarios.

Each campaign feeds its inputs to the public entry point (read_bvh, load_database, load_scenario)
and sorts the outcomes: a clean error (the module's own error class, naming the file), an accepted
input, or anything else (an exception of another class: a bug). BVH mutants that change the number
of values on a frame line must never be accepted. `motionmatch bench fuzz` runs the long version;
the test suite runs a short one.
"""
from __future__ import annotations

import gzip
import json
import re
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from ..io.bvh import BVHError, read_bvh
from ..posedb.database import DatabaseError, load_database
from ..offline.scenario import ScenarioError, load_scenario
from ..runtime.character import Character

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_ODD_VALUES = ("1e308", "-1e308", "1e-320", "nan", "inf", "-inf", "9" * 400, "", "abc", "1,5", "0x10",
               "1e999", "-0", "1e5", "99999999999999999999")


SLOW_INPUT_S = 20.0              # one input taking longer than this counts as a hang
BLOWUP_BYTES = 2 << 30           # the process's peak memory growing by more than this on one input


@dataclass
class Outcome:
    """Counts of one campaign: clean errors, accepted inputs, other exceptions (with examples), accepted
    inputs that must not be (wrong value counts, damaged files), inputs slower than SLOW_INPUT_S and
    inputs that raised the peak memory by more than BLOWUP_BYTES."""

    clean_errors: int = 0
    accepted: int = 0
    other: list[str] = field(default_factory=list)
    silent: list[str] = field(default_factory=list)
    slow: list[str] = field(default_factory=list)
    blowups: list[str] = field(default_factory=list)

    @property
    def inputs(self) -> int:
        return self.clean_errors + self.accepted + len(self.other)

    @property
    def findings(self) -> list[str]:
        return self.other + self.silent + self.slow + self.blowups

    def as_dict(self) -> dict:
        return {"inputs": self.inputs, "clean_errors": self.clean_errors, "accepted": self.accepted,
                "other_exceptions": len(self.other), "silent_accepts": len(self.silent),
                "hangs": len(self.slow), "memory_blowups": len(self.blowups), "examples": self.findings[:5]}


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024     # Linux reports kB


def classify(out: Outcome, name: str, path, refuse: bool, errors: tuple, run) -> None:
    """Run one hostile input (`run()` feeds `path` to a door) and count its outcome in `out`: a clean
    error is one of `errors` naming the file; an accepted input is a finding when `refuse`."""
    peak, t0 = _peak_rss_bytes(), time.perf_counter()
    try:
        run()
        out.accepted += 1
        if refuse:
            out.silent.append(f"{name}: accepted")
    except errors as e:
        out.clean_errors += 1
        if str(path) not in str(e):
            out.other.append(f"{name}: error does not name the file: {str(e)[:160]}")
    except Exception as e:  # the campaign's point: any other exception is a finding
        out.other.append(f"{name}: {type(e).__name__}: {str(e)[:160]}")
    seconds, grown = time.perf_counter() - t0, _peak_rss_bytes() - peak
    if seconds > SLOW_INPUT_S:
        out.slow.append(f"{name}: {seconds:.0f} s")
    if grown > BLOWUP_BYTES:
        out.blowups.append(f"{name}: peak memory +{grown / 2 ** 30:.1f} GB")


# ---------------------------------------------------------------------------------------------
# BVH

def _motion_start(lines: list[str]) -> int:
    """Index of the first frame line (after 'Frame Time:'), or len(lines)."""
    for i, line in enumerate(lines):
        if line.strip().lower().startswith("frame time"):
            return i + 1
    return len(lines)


def mutate_bvh(text: str, rng: np.random.Generator) -> tuple[str, str]:
    """One random mutation of a BVH text: (mutated text, mutation name). Mutations named `count*`
    change how many values a frame line holds; a reader must refuse them."""
    lines = text.split("\n")
    first = _motion_start(lines)
    frame_rows = [i for i in range(first, len(lines)) if lines[i].strip()]
    kind = rng.choice(["value", "value", "header_value", "delete_line", "duplicate_line", "truncate",
                       "count_drop", "count_add", "count_shift", "frames", "frame_time", "bytes", "bom",
                       "swap_lines", "channels"])
    if kind == "value" and frame_rows or kind == "header_value":
        rows = frame_rows if kind == "value" else list(range(first))
        i = int(rng.choice(rows))
        toks = lines[i].split()
        nums = [k for k, t in enumerate(toks) if _NUMBER.fullmatch(t)]
        if nums:
            k = int(rng.choice(nums))
            toks[k] = str(rng.choice(_ODD_VALUES)) or "x"
            lines[i] = " ".join(toks)
    elif kind == "delete_line" and len(lines) > 1:
        del lines[int(rng.integers(len(lines)))]
    elif kind == "duplicate_line":
        i = int(rng.integers(len(lines)))
        lines.insert(i, lines[i])
    elif kind == "truncate":
        return text[:int(rng.integers(len(text)))], kind
    elif kind.startswith("count") and len(frame_rows) >= 2:
        i = int(rng.choice(frame_rows[:-1]))
        j = frame_rows[frame_rows.index(i) + 1]
        a, b = lines[i].split(), lines[j].split()
        if kind == "count_drop":
            lines[i] = " ".join(a[:-1])
        elif kind == "count_add":
            lines[i] = " ".join(a + ["0.0"])
        else:  # one value moves to the next line: the total stays right, the columns shift
            lines[i], lines[j] = " ".join(a[:-1]), " ".join([a[-1]] + b)
    elif kind == "frames":
        value = str(rng.choice(["0", "-5", "1000000000000", "1e3", "abc", "99999999999999999999999", "1"]))
        lines = [re.sub(r"(?i)^(\s*frames:).*", rf"\g<1> {value}", ln) for ln in lines]
    elif kind == "frame_time":
        value = str(rng.choice(["1e-320", "1e308", "0", "-0.1", "nan", "inf", "1e-4", "100", "x"]))
        lines = [re.sub(r"(?i)^(\s*frame time:).*", rf"\g<1> {value}", ln) for ln in lines]
    elif kind == "bytes":
        raw = bytearray(text.encode())
        for _ in range(int(rng.integers(1, 8))):
            raw[int(rng.integers(len(raw)))] = int(rng.integers(256))
        return raw.decode("utf-8", errors="replace"), kind
    elif kind == "bom":
        return "\ufeff" + text, kind
    elif kind == "swap_lines" and first > 2:
        i, j = (int(v) for v in rng.integers(first, size=2))
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == "channels":
        i = next((k for k in range(first) if "CHANNELS" in lines[k]), None)
        if i is not None:
            lines[i] = lines[i].replace("Zrotation", str(rng.choice(["Wrotation", "Zrotation Zrotation", ""])), 1)
    return "\n".join(lines), kind


def fuzz_bvh(paths, mutants_per_file: int, seed: int = 0, tmp_dir=None, progress: bool = False) -> Outcome:
    """Read `mutants_per_file` seeded mutants of each BVH file (plus a corrupt .gz copy of each)."""
    import tempfile

    from tqdm import tqdm

    out = Outcome()
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory(dir=tmp_dir) as tmp:
        target = Path(tmp) / "mutant.bvh"
        jobs = [(Path(p), k) for p in paths for k in range(mutants_per_file + 1)]
        texts = {}
        for p, k in tqdm(jobs, desc="BVH mutants", unit="file", disable=not progress, file=sys.stderr):
            text = texts.setdefault(p, p.read_text())
            if k == mutants_per_file:  # a damaged gzip stream
                raw = bytearray(gzip.compress(text.encode()))
                raw[len(raw) // 2:len(raw) // 2 + 16] = bytes(16)
                path, kind = Path(tmp) / "mutant.bvh.gz", "gzip"
                path.write_bytes(bytes(raw))
            else:
                mutated, kind = mutate_bvh(text, rng)
                path = target
                path.write_text(mutated)
            classify(out, f"{p.name} mutant {k} ({kind})", path, kind.startswith("count"), (BVHError,),
                     lambda: read_bvh(path))
    return out


# ---------------------------------------------------------------------------------------------
# Databases

def _database_damages(members: dict, header: dict) -> list[tuple[str, dict]]:
    """(name, members) of damaged copies: each changes one member or header field."""
    N, J = members["positions"].shape[:2]

    def with_header(**kw):
        h = json.loads(json.dumps(header))
        for k, v in kw.items():
            if k.startswith("roles_"):
                h["roles"][k[6:]] = v
            else:
                h[k] = v
        return h

    def with_member(name, value):
        return {**members, name: value}

    parents = members["parents"]
    cycle = parents.copy()
    cycle[2], cycle[3] = 3, 2
    stops = members["range_stops"]
    d = [
        ("version string", with_header(format_version="1")),
        ("version float", with_header(format_version=1.0)),
        ("version 2", with_header(format_version=2)),
        ("fps 0", with_header(fps=0)),
        ("fps string", with_header(fps="60")),
        ("fps negative", with_header(fps=-60)),
        ("fps huge", with_header(fps=1e300)),
        ("fps bool", with_header(fps=True)),
        ("role index huge", with_header(roles_left_toe=10 ** 6)),
        ("role index negative", with_header(roles_hips=-1)),
        ("role index string", with_header(roles_left_foot="3")),
        ("role missing", {**with_header(), "roles": {}}),
        ("names short", with_header(names=header["names"][:-1])),
        ("names not strings", with_header(names=list(range(J)))),
        ("range names short", with_header(range_names=[])),
        ("schema bogus joint", with_header(schema={"channel": [{"name": "x", "kind": "position", "joint": "Nope"}]})),
        ("schema not a dict", with_header(schema=[1])),
        ("end sites bad", with_header(end_sites={"999": [0, 0, 0]})),
        ("header a list", []),
        ("header deep", json.loads("[" * 200 + "]" * 200)),
    ]
    out = [(name, {**members, "header": h}) for name, h in d]
    out += [
        ("parents huge", with_member("parents", np.where(np.arange(J) == 3, 10 ** 6, parents))),
        ("parents 2^40", with_member("parents", np.where(np.arange(J) == 3, 2 ** 40, parents))),
        ("parents -1e9", with_member("parents", np.where(np.arange(J) == 3, -10 ** 9, parents))),
        ("parents cycle", with_member("parents", cycle)),
        ("parents float", with_member("parents", parents.astype(np.float64))),
        ("parents object", with_member("parents", np.array(list(parents), dtype=object))),
        ("positions object", with_member("positions", np.empty((N, J, 3), dtype=object))),
        ("positions 2-D", with_member("positions", members["positions"].reshape(N, -1))),
        ("positions int32", with_member("positions", members["positions"].astype(np.int32))),
        ("positions float16", with_member("positions", members["positions"].astype(np.float16))),
        ("rotations complex", with_member("rotations", members["rotations"].astype(np.complex64))),
        ("rotations short", with_member("rotations", members["rotations"][:-1])),
        ("contacts float", with_member("contacts", members["contacts"].astype(np.float32))),
        ("range_stops beyond N", with_member("range_stops", np.where(stops == stops[-1], N + 100, stops))),
        ("range_stops negative", with_member("range_stops", -stops)),
        ("range_starts unsorted", with_member("range_starts", members["range_starts"][::-1].copy())),
        ("features strings", with_member("features", members["features"].astype("U8"))),
        ("features NaN", with_member("features", np.where(np.arange(N)[:, None] == 5, np.nan,
                                                          members["features"]).astype(np.float32))),
        ("features narrow", with_member("features", members["features"][:, :-1])),
        ("feature_offset inf", with_member("feature_offset", np.full_like(members["feature_offset"], np.inf))),
        ("offsets nan", with_member("offsets", np.full_like(members["offsets"], np.nan))),
        ("member missing", {k: v for k, v in members.items() if k != "rotations"}),
    ]
    return out


def _first_frames(members: dict, header: dict, n: int) -> None:
    """Cut a database's members (in place) to about n frames: the first n / R frames of each of its R
    clip ranges, so small damaged copies keep several ranges."""
    starts, stops = members["range_starts"], members["range_stops"]
    per = max(2, n // len(starts))
    idx = np.concatenate([np.arange(a, min(b, a + per)) for a, b in zip(starts, stops)])
    for k in ("positions", "rotations", "contacts", "features"):
        members[k] = members[k][idx]
    lengths = np.minimum(stops - starts, per)
    members["range_stops"] = np.cumsum(lengths).astype(stops.dtype)
    members["range_starts"] = (members["range_stops"] - lengths).astype(starts.dtype)
    events = header.get("events")
    if events:   # event marks follow their frames; marks in cut frames go
        new_of = {int(old): new for new, old in enumerate(idx)}
        keep = [k for k, f in enumerate(events["frame"]) if f in new_of]
        header["events"] = {"frame": [new_of[events["frame"][k]] for k in keep],
                            **{key: [events[key][k] for k in keep] for key in ("type", "tags", "origin")}}


def damaged_databases(path, out_dir, frames: int = 600) -> list[tuple[str, Path]]:
    """Write damaged copies of the first `frames` frames of the database at `path` into out_dir:
    [(damage, file)], plus a truncated file and one whose members are compressed."""
    path, out_dir = Path(path), Path(out_dir)
    with np.load(path, allow_pickle=False) as z:
        members = {k: np.array(z[k]) for k in z.files}
    header = json.loads(bytes(members.pop("header")).decode())
    _first_frames(members, header, frames)
    files = []
    for k, (name, m) in enumerate(_database_damages(members, header)):
        m = dict(m)
        h = m.pop("header", header)
        f = out_dir / f"damaged_{k:02d}.npz"
        with open(f, "wb") as fh:
            np.savez(fh, header=np.frombuffer(json.dumps(h).encode(), dtype=np.uint8), **m)
        files.append((name, f))
    intact = out_dir / "intact.npz"
    with open(intact, "wb") as fh:
        np.savez(fh, header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8), **members)
    raw = intact.read_bytes()
    intact.unlink()
    (out_dir / "truncated.npz").write_bytes(raw[:len(raw) // 2])
    files.append(("truncated", out_dir / "truncated.npz"))
    with open(out_dir / "compressed.npz", "wb") as fh:
        np.savez_compressed(fh, header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8), **members)
    files.append(("compressed", out_dir / "compressed.npz"))
    return files


def fuzz_databases(damaged: list[tuple[str, Path]], steps: int = 30) -> Outcome:
    """Load each damaged copy (from damaged_databases); an accepted one also drives a character for
    `steps` frames (a crash there would be a kernel reading crafted indices)."""
    out = Outcome()
    for name, f in damaged:
        try:
            db = load_database(f)
        except DatabaseError as e:
            out.clean_errors += 1
            if str(f) not in str(e):
                out.other.append(f"{name}: error does not name the file: {e}")
            continue
        except Exception as e:
            out.other.append(f"{name}: {type(e).__name__}: {str(e)[:120]}")
            continue
        out.accepted += 1
        out.silent.append(f"{name}: accepted")
        try:
            ch = Character(db)
            for _ in range(steps):
                ch.step(None, 1.0 / 60.0)
        except Exception as e:
            out.other.append(f"{name}: accepted, then {type(e).__name__}: {str(e)[:120]}")
    return out


# ---------------------------------------------------------------------------------------------
# Scenarios

_BASE_SCENARIO = {"duration": 4.0, "inputs": [{"t": 0.0, "move": [0, 1]}, {"t": 2.0, "move": [1, 0]}]}


def bad_scenarios() -> list[tuple[str, bytes]]:
    """(name, file bytes) of scenario files a user or a hostile client could send."""
    big = "9" * 400

    def sc(**kw):
        d = json.loads(json.dumps(_BASE_SCENARIO))
        d.update(kw)
        return json.dumps(d).encode()

    def inp(i, **kw):
        d = json.loads(json.dumps(_BASE_SCENARIO))
        d["inputs"][i].update(kw)
        return json.dumps(d).encode()

    path = lambda pts, speed=1.0: json.dumps({"duration": 5, "path": {"points": pts, "speed": speed}}).encode()
    return [
        ("deep nesting", b'{"duration": 4, "terrain": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5001),
        ("deep terrain", sc(terrain={"kind": "flat", "x": json.loads("[" * 60 + "]" * 60)})),
        ("400-digit duration", b'{"duration": ' + big.encode() + b', "inputs": [{"t": 0, "move": [0, 1]}]}'),
        ("400-digit t", b'{"duration": 4, "inputs": [{"t": ' + big.encode() + b', "move": [0, 1]}]}'),
        ("400-digit move", b'{"duration": 4, "inputs": [{"t": 0, "move": [' + big.encode() + b', 1]}]}'),
        ("400-digit seed", b'{"duration": 4, "seed": ' + big.encode() + b', "inputs": [{"t": 0, "move": [0, 1]}]}'),
        ("5000-digit number", b'{"duration": ' + b"9" * 5000 + b', "inputs": [{"t": 0, "move": [0, 1]}]}'),
        ("duration 1e9", sc(duration=1e9)),
        ("duration zero frames", sc(duration=0.001, inputs=[{"t": 0.0, "move": [0, 1]}])),
        ("duration NaN", b'{"duration": NaN, "inputs": [{"t": 0, "move": [0, 1]}]}'),
        ("duration Infinity", b'{"duration": Infinity, "inputs": [{"t": 0, "move": [0, 1]}]}'),
        ("terrain 10^7 cells", sc(terrain={"kind": "noise", "size": 316.0, "cell": 0.1})),
        ("terrain 1e300 size", sc(terrain={"kind": "flat", "size": 1e300})),
        ("not UTF-8", b'{"duration": 4, "description": "\xff\xfe\xfa", "inputs": [{"t": 0, "move": [0, 1]}]}'),
        ("UTF-16", json.dumps(_BASE_SCENARIO).encode("utf-16")),
        ("path 1e300", path([[0, 0], [1e300, 0]])),
        ("path 1.7e308", path([[0, 0], [1.7e308, 1.7e308]])),
        ("path inf", b'{"duration": 5, "path": {"points": [[0, 0], [Infinity, 0]], "speed": 1}}'),
        ("path speed 1e308", path([[0, 0], [3, 0]], 1e308)),
        ("move 1e400", b'{"duration": 4, "inputs": [{"t": 0, "move": [1e400, 0]}]}'),
        ("move 2", inp(0, move=[2, 0])),
        ("look NaN", b'{"duration": 4, "inputs": [{"t": 0, "move": [0, 1], "look": [NaN, 0]}]}'),
        ("negative seed", sc(seed=-1)),
        ("empty", b""),
        ("null", b"null"),
        ("list", b"[1, 2]"),
    ]


def fuzz_scenarios(out_dir) -> Outcome:
    """Load each bad scenario file; every one must be a ScenarioError naming the file."""
    out = Outcome()
    for k, (name, raw) in enumerate(bad_scenarios()):
        f = Path(out_dir) / f"bad_{k:02d}.json"
        f.write_bytes(raw)
        classify(out, name, f, True, (ScenarioError,), lambda: load_scenario(f))
    return out
