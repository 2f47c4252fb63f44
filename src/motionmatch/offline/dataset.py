"""Labelled motion datasets: `motionmatch generate SPEC -o OUT` turns a short spec into many synthesized
sequences (diverse styles, routes round random obstacles, drivers), each with its motion and per-frame
labels, a manifest and a dataset card (docs/datasets.md).

Spec (TOML or JSON; metres, seconds):

    sequences = 200            # how many, 1 .. 100000
    duration_s = 20.0          # each, 1 .. 600
    seed = 0                   # sequence i draws everything from (seed, i): a sequence does not depend on the others
    formats = ["bvh"]          # motion files per sequence: "bvh" (always written), "glb", "usda", "usdc" (extra usd)
    speed_m_s = [1.0, 3.5]     # the goals and path drivers' speed, drawn per sequence

    [styles]                   # tag expression -> weight, the share of sequences searching only those clips
    normal = 1.0               # (default: {"" = 1}, the whole database)
    "elderly | tired" = 0.5

    [drivers]                  # how a sequence is driven -> weight (default: goals = 1)
    goals = 1.0                # to 2-5 random goals in the arena, in a straight line each (steered round obstacles)
    path = 1.0                 # along a wandering path (a waypoint every 2 m, turns up to 60 degrees)
    stick = 1.0                # random stick input: directions, runs, strafes and stops (scenario.random_scenario)

    [layout]
    kind = "random"            # "none" (open ground) or "random"
    count = [2, 8]             # circles per sequence, inclusive
    radius_m = [0.3, 1.0]
    arena_m = 16.0             # the square the goals, paths and obstacles lie in, centred on the start
    passage_m = 1.2            # gap kept free between two obstacles and round the start

Output (OUT): spec.json (the spec with its defaults), sequences/NNNNNN/ per sequence (motion.bvh, motion.glb on
request, labels.csv.gz, scenario.json, summary.json), manifest.csv (one row per sequence), statistics.png and
README.md (the dataset card). A sequence's folder appears whole or not at all (files/output_folder.py), so a
stopped run resumes where it stopped: folders already there are kept, the rest are made. The same spec and
database give byte-identical files.

labels.csv.gz (gzip CSV, one row per frame at the database's rate; pandas.read_csv reads it as it is):
frame, time_s; root_x, root_y, root_z (m, the character's root on the ground), root_yaw_rad (its facing about
+Y, 0 facing +Z), root_vx, root_vz (m/s), desired_vx, desired_vz (m/s, what the driver asked); speed_m_s;
gait ("stand" below 0.5 m/s, "walk" below RUN_SPEED, else "run"); direction ("forward", "side", "backward";
"none" standing: the travel against the hips' facing, motion/posture.gait_bins); contact_left, contact_right
(0/1, the toes planted); style (the playing clip's style tags joined by "+", "none" without); source (its capture set: the
`source:NAME` tags, joined by "+"), clip (the playing clip's name), clip_frame; events (the database's event marks on the playing frame, joined by "+", empty
without); then JOINT_x, JOINT_y, JOINT_z (m, world space, Y up) for every joint of motion.bvh in its order.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import math
import shutil
import sys
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..body.export import export_gltf, export_usd
from ..files.atomic_file import replacing
from ..files.output_folder import staged_output
from ..io.bvh import read_bvh, write_bvh
from ..io.usd import require_usd
from ..motion.metrics import compute_metrics, source_foot_sliding_cm_s
from ..motion.posture import GAIT_DIRECTIONS, MOVING_SPEED, gait_bins
from ..motion.styles import clip_styles
from ..search import range_mask
from ..world.obstacles import penetration
from .batch_synth import without_timings
from .cluster import open_client, worker_count, worker_database
from .scenario import parse_scenario, random_scenario
from .synth import change_frames, record_animation, run_scenario

MAX_SEQUENCES = 100_000
DURATION_RANGE_S = (1.0, 600.0)
MAX_SPEED_M_S = 8.0
MAX_ARENA_M = 1000.0
MAX_OBSTACLES = 200
RUN_SPEED = 2.0           # m/s: jlpm22's walks reach about 1.7 m/s and its jogs start above 2
FORMATS = ("bvh", "glb", "usda", "usdc")
DRIVERS = ("goals", "path", "stick")
PACKING = 0.35            # most of an arena's area obstacles (grown by half a passage) may cover: denser
#                          random layouts fail to place or wall the start in
PLACE_TRIES = 400         # random centres tried per obstacle before a layout counts as impossible
LABELS = "labels.csv.gz"
LABEL_COLUMNS = ("frame", "time_s", "root_x", "root_y", "root_z", "root_yaw_rad", "root_vx", "root_vz", "desired_vx",
                 "desired_vz", "speed_m_s", "gait", "direction", "contact_left", "contact_right", "style", "source", "clip",
                 "clip_frame", "events")
MANIFEST = "manifest.csv"
SEQUENCES = "sequences"
# The sources a database's clips name (tag `source:NAME`) and their terms, from ../shared/mocap/README.md.
# A set is known by the start of a source tag or a folder tag (the folder a clip was built from).
LICENCES = {
    ("jlpm22",): "MIT licence, Copyright (c) 2022-present Jose Luis Ponton (JLPM22/MotionMatching).",
    ("cmu", "143_"): "Free for all uses. Credit: \"The data used in this project was obtained from mocap.cs.cmu.edu. The "
           "database was created with funding from NSF EIA-0196217.\"",
    ("bandai", "dataset-1", "dataset-2"): "CC BY-NC 4.0 (non-commercial), Bandai Namco Research Inc., 2022. Cite: Kobayashi et al., \"Motion "
              "Capture Dataset for Practical Use of AI-based Motion Editing and Stylization\", arXiv:2306.08861.",
}


class SpecError(ValueError):
    """A dataset spec that cannot be honoured; the message names the field and what it accepts."""


@dataclass
class Layout:
    kind: str = "none"
    count: tuple[int, int] = (2, 8)
    radius_m: tuple[float, float] = (0.3, 1.0)
    arena_m: float = 16.0
    passage_m: float = 1.2


@dataclass
class DatasetSpec:
    sequences: int
    duration_s: float = 20.0
    seed: int = 0
    formats: tuple[str, ...] = ("bvh",)
    speed_m_s: tuple[float, float] = (1.0, 3.5)
    styles: dict[str, float] = field(default_factory=lambda: {"": 1.0})
    drivers: dict[str, float] = field(default_factory=lambda: {"goals": 1.0})
    layout: Layout = field(default_factory=Layout)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["formats"], d["speed_m_s"] = list(self.formats), list(self.speed_m_s)
        d["layout"].update(count=list(self.layout.count), radius_m=list(self.layout.radius_m))
        return d


def _number(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


def _int_in(d: dict, key: str, lo: int, hi: int, name: str, default=None) -> int:
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise SpecError(f"{name}: expected an integer in [{lo}, {hi}], got {v!r}")
    return v


def _float_in(d: dict, key: str, lo: float, hi: float, name: str, default=None) -> float:
    v = d.get(key, default)
    if not _number(v) or not lo <= v <= hi:
        raise SpecError(f"{name}: expected a number in [{lo:g}, {hi:g}], got {v!r}")
    return float(v)


def _range(d: dict, key: str, lo: float, hi: float, name: str, default, integer: bool = False) -> tuple:
    v = d.get(key, list(default))
    ok = isinstance(v, list) and len(v) == 2 and all(_number(x) and (not integer or isinstance(x, int)) for x in v)
    if not ok or not lo <= v[0] <= v[1] <= hi:
        kind = "integers" if integer else "numbers"
        raise SpecError(f"{name}: expected two {kind} [low, high] with {lo:g} <= low <= high <= {hi:g}, got {v!r}")
    return (int(v[0]), int(v[1])) if integer else (float(v[0]), float(v[1]))


def _weights(d: dict, key: str, name: str, default: dict, allowed=None) -> dict[str, float]:
    v = d.get(key, default)
    if not isinstance(v, dict) or not v:
        raise SpecError(f"{name}: expected a table of name = weight")
    out = {}
    for k, w in v.items():
        if allowed is not None and k not in allowed:
            raise SpecError(f"{name}.{k}: unknown; expected one of {', '.join(allowed)}")
        if not _number(w) or not 0.0 <= w <= 1e6:
            raise SpecError(f"{name}.{k}: expected a weight in [0, 1e6], got {w!r}")
        out[str(k)] = float(w)
    if sum(out.values()) <= 0.0:
        raise SpecError(f"{name}: every weight is 0; at least one must be positive")
    return out


def _unknown(d: dict, allowed: set, name: str) -> None:
    extra = sorted(set(d) - allowed)
    if extra:
        raise SpecError(f"{name + '.' if name else ''}{extra[0]}: unknown field; expected {', '.join(sorted(allowed))}")


def parse_spec(data, range_tags=None) -> DatasetSpec:
    """A DatasetSpec from the spec's dict (see the module docstring); SpecError names the first bad field.
    range_tags: the database's per-clip tags, to check that every style selects clips."""
    if not isinstance(data, dict):
        raise SpecError("spec: expected a table of fields")
    _unknown(data, {"sequences", "duration_s", "seed", "formats", "speed_m_s", "styles", "drivers", "layout"}, "")
    spec = DatasetSpec(sequences=_int_in(data, "sequences", 1, MAX_SEQUENCES, "sequences"))
    spec.duration_s = _float_in(data, "duration_s", *DURATION_RANGE_S, "duration_s", spec.duration_s)
    spec.seed = _int_in(data, "seed", 0, 2**63 - 1, "seed", 0)
    formats = data.get("formats", ["bvh"])
    if not isinstance(formats, list) or not all(f in FORMATS for f in formats):
        raise SpecError(f"formats: expected a list of {', '.join(map(repr, FORMATS))}, got {formats!r}")
    spec.formats = tuple(f for f in FORMATS if f in formats or f == "bvh")
    if {"usda", "usdc"} & set(spec.formats):
        try:
            require_usd("formats")
        except ValueError as e:
            raise SpecError(str(e)) from None
    spec.speed_m_s = _range(data, "speed_m_s", 0.1, MAX_SPEED_M_S, "speed_m_s", spec.speed_m_s)
    spec.styles = _weights(data, "styles", "styles", spec.styles)
    if range_tags is not None:
        for expr in spec.styles:
            try:
                mask = range_mask(expr or None, range_tags)
            except ValueError as e:
                raise SpecError(f"styles.{expr!r}: {e}") from None
            if not mask.any():
                raise SpecError(f"styles.{expr!r}: selects no clip of the database")
    spec.drivers = _weights(data, "drivers", "drivers", spec.drivers, DRIVERS)
    lay = data.get("layout", {})
    if not isinstance(lay, dict):
        raise SpecError("layout: expected a table")
    _unknown(lay, {"kind", "count", "radius_m", "arena_m", "passage_m"}, "layout")
    L = Layout()
    L.kind = lay.get("kind", "none")
    if L.kind not in ("none", "random"):
        raise SpecError(f"layout.kind: expected 'none' or 'random', got {L.kind!r}")
    L.count = _range(lay, "count", 0, MAX_OBSTACLES, "layout.count", L.count, integer=True)
    L.radius_m = _range(lay, "radius_m", 0.05, 50.0, "layout.radius_m", L.radius_m)
    L.arena_m = _float_in(lay, "arena_m", 4.0, MAX_ARENA_M, "layout.arena_m", L.arena_m)
    L.passage_m = _float_in(lay, "passage_m", 0.6, 20.0, "layout.passage_m", L.passage_m)
    if L.kind == "random":
        grown = math.pi * (L.radius_m[1] + L.passage_m / 2) ** 2 * L.count[1]
        if grown > PACKING * L.arena_m ** 2:
            raise SpecError(f"layout: {L.count[1]} obstacles of up to {L.radius_m[1]:g} m with {L.passage_m:g} m "
                            f"passages cover {grown / L.arena_m ** 2:.0%} of a {L.arena_m:g} m arena; at most "
                            f"{PACKING:.0%} leaves room to walk: fewer or smaller obstacles, or a larger arena_m")
    spec.layout = L
    return spec


def load_spec(path, range_tags=None) -> DatasetSpec:
    """parse_spec of a .toml or .json file; SpecError names the file."""
    path = Path(path)
    try:
        text = path.read_text()
        data = tomllib.loads(text) if path.suffix.lower() == ".toml" else json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise SpecError(f"{path}: {type(e).__name__}: {str(e)[:200]}") from None
    try:
        return parse_spec(data, range_tags)
    except SpecError as e:
        raise SpecError(f"{path}: {e}") from None


def _pick(rng, weights: dict[str, float]) -> str:
    names = list(weights)
    p = np.array([weights[n] for n in names])
    return names[int(rng.choice(len(names), p=p / p.sum()))]


def _obstacles(rng, L: Layout, index: int) -> list[dict]:
    """Random circles in the arena, `passage_m` apart and from the start; SpecError when they do not fit."""
    n = int(rng.integers(L.count[0], L.count[1] + 1))
    half = L.arena_m / 2
    placed: list[tuple[float, float, float]] = []
    for _ in range(n):
        r = float(rng.uniform(*L.radius_m))
        for _ in range(PLACE_TRIES):
            x, z = (float(c) for c in rng.uniform(-half + r, half - r, 2))
            if math.hypot(x, z) < r + L.passage_m:
                continue
            if all(math.hypot(x - a, z - b) >= r + q + L.passage_m for a, b, q in placed):
                placed.append((x, z, r))
                break
        else:
            raise SpecError(f"layout: sequence {index}: found no place for obstacle {len(placed) + 1} of {n} in "
                            f"{PLACE_TRIES} tries; fewer or smaller obstacles, or a larger arena_m")
    return [{"center": [round(x, 4), round(z, 4)], "radius": round(r, 4)} for x, z, r in placed]


def _free(point, obstacles, margin: float) -> bool:
    return all(math.hypot(point[0] - o["center"][0], point[1] - o["center"][1]) >= o["radius"] + margin
               for o in obstacles)


def _goal_points(rng, L: Layout, obstacles, wandering: bool) -> list[list[float]]:
    """Route points from the start (0, 0): 2-5 goals anywhere, or a wandering path (2 m steps, turns up to
    60 degrees, turned back at the arena's edge); every point clear of the obstacles by half a passage."""
    half, margin = L.arena_m / 2 - 0.5, L.passage_m / 2 + 0.3
    pts, heading = [[0.0, 0.0]], float(rng.uniform(-math.pi, math.pi))
    count = int(rng.integers(2, 6)) if not wandering else int(L.arena_m * 2)
    while len(pts) <= count:
        for _ in range(PLACE_TRIES):
            if wandering:
                h = heading + float(rng.uniform(-math.pi / 3, math.pi / 3))
                p = [pts[-1][0] + 2.0 * math.sin(h), pts[-1][1] + 2.0 * math.cos(h)]
                if max(abs(p[0]), abs(p[1])) > half:
                    h = math.atan2(-pts[-1][0], -pts[-1][1]) + float(rng.uniform(-0.5, 0.5))   # back inwards
                    p = [pts[-1][0] + 2.0 * math.sin(h), pts[-1][1] + 2.0 * math.cos(h)]
            else:
                h, p = heading, [float(c) for c in rng.uniform(-half, half, 2)]
            if _free(p, obstacles, margin) and max(abs(p[0]), abs(p[1])) <= half:
                pts.append([round(p[0], 4), round(p[1], 4)])
                heading = h
                break
        else:
            break           # a crowded corner: the route ends here
    return pts


def sequence_plan(spec: DatasetSpec, index: int) -> dict:
    """Sequence `index`'s seed, style, driver and scenario dict (offline/scenario.py), drawn from
    (spec.seed, index) alone."""
    seed = int(np.random.SeedSequence([spec.seed, index]).generate_state(1, np.uint64)[0] >> 1)
    rng = np.random.default_rng(seed)
    style = _pick(rng, spec.styles)
    driver = _pick(rng, spec.drivers)
    obstacles = _obstacles(rng, spec.layout, index) if spec.layout.kind == "random" else []
    speed = round(float(rng.uniform(*spec.speed_m_s)), 3)
    if driver == "stick":
        speed = None                   # the stick's own walks and runs
        scenario = random_scenario(spec.duration_s, seed=seed % 2**32).to_dict()
    else:
        points = _goal_points(rng, spec.layout, obstacles, wandering=driver == "path")
        scenario = {"duration": spec.duration_s, "path": {"points": points, "speed": speed, "loop": False}}
    scenario.update(style=style or None, seed=seed % 2**32,
                    description=f"motionmatch generate: sequence {index}, driver {driver}")
    if obstacles:
        scenario["obstacles"] = obstacles
    return {"sequence": index, "seed": seed, "style": style, "driver": driver, "speed_m_s": speed,
            "obstacles": len(obstacles), "scenario": scenario}


def folder_name(index: int) -> str:
    return f"{index:06d}"


def _labels_table(db, rec: dict) -> tuple[list[str], list[list]]:
    """The labels' header and rows (see the module docstring) from a run_scenario record with poses."""
    F, fps = len(rec["root_pos"]), db.fps
    frames = rec["frames"]
    clips = np.searchsorted(db.range_stops, frames, side="right")
    styled = clip_styles(db.range_tags, db.style_tags)
    styles = ["+".join(t for t in s if not t.startswith("source:")) or "none" for s in styled]
    sources = ["+".join(t.removeprefix("source:") for t in s if t.startswith("source:")) for s in styled]
    marks: dict[int, list[str]] = {}
    for f, t in zip(db.events.frames, db.events.types):
        marks.setdefault(int(f), []).append(t)
    v = rec["root_vel"][:, [0, 2]]
    speed = np.linalg.norm(v, axis=1)
    bins = gait_bins(rec["posture_positions"], rec["root_vel"])
    direction = np.where(bins == 0, "none", np.array(GAIT_DIRECTIONS)[(np.maximum(bins, 1) - 1) % len(GAIT_DIRECTIONS)])
    gait = np.where(speed < MOVING_SPEED, "stand", np.where(speed < RUN_SPEED, "walk", "run"))
    names = db.skeleton.names[1:]              # motion.bvh's joints: the simulation bone folded into the root
    joints = rec["global_positions"][:, 1:]
    header = [*LABEL_COLUMNS, *(f"{n}_{a}" for n in names for a in "xyz")]
    r5 = lambda a: [f"{x:.5f}" for x in a]                                      # noqa: E731 - 10 um, 1e-5 rad
    rows = []
    for k in range(F):
        c = int(clips[k])
        rows.append([k, f"{k / fps:.5f}", *r5(rec["root_pos"][k]), f"{rec['root_yaw'][k]:.5f}", *r5(v[k]),
                     *r5(rec["desired_vel"][k, [0, 2]]), f"{speed[k]:.5f}", gait[k], direction[k],
                     int(rec["contacts"][k, 0]), int(rec["contacts"][k, 1]), styles[c], sources[c], db.range_names[c],
                     int(frames[k] - db.range_starts[c]), "+".join(marks.get(int(frames[k]), ())),
                     *r5(joints[k].ravel())])
    return header, rows


def _write_gzip_csv(path: Path, header: list[str], rows: list[list]) -> None:
    text = io.StringIO()
    w = csv.writer(text, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    # mtime 0 and no file name in the header: the same rows give the same bytes
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        gz.write(text.getvalue().encode())


def _summary(plan: dict, metrics: dict, gait: list[str], contacts: np.ndarray, speed: np.ndarray) -> dict:
    m = without_timings(metrics)
    g = np.array(gait)
    return {k: plan[k] for k in ("sequence", "seed", "style", "driver", "speed_m_s", "obstacles")} | {
        "frames": m["frames"], "duration_s": round(m["frames"] / m["fps"], 4),
        "foot_sliding_cm_s": m["foot_sliding_cm_s"], "foot_sliding_source_cm_s": m["foot_sliding_source_cm_s"],
        "trajectory_error_cm": m["trajectory_error_cm"]["mean"], "transitions_per_s": m["transitions_per_s"],
        "obstacle_penetration_cm": (m.get("obstacle_penetration_cm") or {}).get("max", 0.0),
        "mean_speed_m_s": round(float(speed.mean()), 4),
        "stand_share": round(float((g == "stand").mean()), 4), "walk_share": round(float((g == "walk").mean()), 4),
        "run_share": round(float((g == "run").mean()), 4),
        "contact_share": round(float(contacts.any(axis=1).mean()), 4)}


def write_sequence(db, plan: dict, out, formats=("bvh",)) -> dict:
    """Synthesize one planned sequence (sequence_plan) into out (motion files, labels.csv.gz, scenario.json,
    summary.json) through a staging folder; returns its summary (a manifest row)."""
    scenario = parse_scenario(plan["scenario"])
    rec = run_scenario(db, scenario)
    allowed = np.flatnonzero(range_mask(scenario.style, db.range_tags)) if scenario.style else None
    metrics = compute_metrics(rec, db.fps, source_foot_sliding_cm_s(db, allowed_ranges=allowed),
                              change_frames(scenario, db.fps))
    if scenario.obstacles is not None:
        metrics["obstacle_penetration_cm"] = penetration(scenario.obstacles, rec["root_pos"][:, [0, 2]], db.fps)
    header, rows = _labels_table(db, rec)
    speed = np.array([float(r[10]) for r in rows])
    summary = _summary(plan, metrics, [r[11] for r in rows], rec["contacts"], speed)
    with staged_output(out) as stage:
        write_bvh(stage / "motion.bvh", record_animation(db, rec))
        if "glb" in formats:
            export_gltf(read_bvh(stage / "motion.bvh"), stage / "motion.glb")
        for usd in {"usda", "usdc"} & set(formats):
            export_usd([read_bvh(stage / "motion.bvh")], stage / f"motion.{usd}", ["character"])
        _write_gzip_csv(stage / LABELS, header, rows)
        (stage / "scenario.json").write_text(json.dumps(plan["scenario"], indent=1) + "\n")
        (stage / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def _run_one(db_path, plan: dict, out: str, formats) -> dict:
    """write_sequence on an engine worker (the database opened once per process)."""
    return write_sequence(worker_database(db_path), plan, Path(out) / SEQUENCES / folder_name(plan["sequence"]),
                          formats)


def _check_out(out: Path, spec: DatasetSpec) -> None:
    """OUT is new, or holds a dataset of this very spec (a resumed run); else SpecError."""
    saved = out / "spec.json"
    if saved.exists():
        try:
            earlier = json.loads(saved.read_text())
        except ValueError:
            earlier = None
        if earlier != spec.to_dict():
            raise SpecError(f"{out}: holds a dataset of another spec ({saved}); give a new output folder, or the "
                            f"same spec to resume")
    elif out.exists() and any(p for p in out.iterdir() if not p.name.startswith(".")):
        raise SpecError(f"{out}: not empty and not a dataset folder (no spec.json); give a new or empty folder")


def generate(spec: DatasetSpec, db_path, out, workers: int | None = None, address: str | None = None,
             progress: bool = True) -> dict:
    """Write the dataset of `spec` on the database file `db_path` into `out` (see the module docstring):
    sequences not yet there, on the engine (`workers` local processes or a cluster at `address`) or here one
    after another; then manifest.csv, statistics.png and README.md from every sequence's summary.json.
    Returns {"sequences", "made", "kept", "workers", "seconds"}. Layouts are drawn before any work starts
    (an impossible one is a SpecError)."""
    import time

    from tqdm import tqdm

    out = Path(out)
    _check_out(out, spec)
    plans = [sequence_plan(spec, i) for i in range(spec.sequences)]
    out.mkdir(parents=True, exist_ok=True)
    with replacing(out / "spec.json", "w") as f:
        f.write(json.dumps(spec.to_dict(), indent=1) + "\n")
    todo = [p for p in plans if not (out / SEQUENCES / folder_name(p["sequence"]) / "summary.json").exists()]
    t0, n_workers = time.perf_counter(), 1
    bar = tqdm(total=len(plans), initial=len(plans) - len(todo), desc="sequences", unit="seq",
               disable=not progress, file=sys.stderr)
    try:
        if todo and (workers or address):
            from dask.distributed import as_completed
            with open_client(workers, address, allowed_failures=3) as client:
                n_workers = worker_count(client)
                futures = [client.submit(_run_one, str(db_path), p, str(out.resolve()), spec.formats, pure=False)
                           for p in todo]
                for fut in as_completed(futures):
                    fut.result()
                    bar.update()
        else:
            db = worker_database(db_path) if todo else None
            for p in todo:
                write_sequence(db, p, out / SEQUENCES / folder_name(p["sequence"]), spec.formats)
                bar.update()
    finally:
        bar.close()
    # A task killed while moving its files in (its worker died) left its staging folder; every task is over now.
    for stale in (out / SEQUENCES).glob("*/.partial-*"):
        shutil.rmtree(stale, ignore_errors=True)
    rows = [json.loads((out / SEQUENCES / folder_name(i) / "summary.json").read_text()) for i in range(spec.sequences)]
    write_card(out, spec, rows, worker_database(db_path))
    return {"sequences": spec.sequences, "made": len(todo), "kept": spec.sequences - len(todo),
            "workers": n_workers, "seconds": round(time.perf_counter() - t0, 2)}


def _sources(db) -> list[tuple[str, str]]:
    """(source, its terms) of the database's clips: their `source:NAME` tags, else (a database built from
    files without them) their tags that name a known set (the folder tag `jlpm22-locomotion`), else
    "unknown"."""
    names = set()
    for tags in db.range_tags:
        named = [t.removeprefix("source:") for t in tags if t.startswith("source:")]
        names.update(named or [t for t in tags if _licence(t)] or ["unknown"])
    return [(n, _licence(n) or "terms not known to motionmatch: see the data's own licence") for n in sorted(names)]


def _licence(name: str) -> str | None:
    return next((text for keys, text in LICENCES.items() if name.startswith(keys)), None)


def write_card(out: Path, spec: DatasetSpec, rows: list[dict], db) -> None:
    """manifest.csv, statistics.png (speed, gait and contact histograms) and README.md (the card)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with replacing(out / MANIFEST, "w") as f:
        w = csv.DictWriter(f, fieldnames=["folder", *rows[0]], lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({"folder": f"{SEQUENCES}/{folder_name(r['sequence'])}", **r})
    col = lambda k: np.array([r[k] for r in rows], dtype=float)                 # noqa: E731
    fig, ax = plt.subplots(1, 3, figsize=(11, 3.2))
    ax[0].hist(col("mean_speed_m_s"), bins=20, color="#4a90d9")
    ax[0].set_xlabel("mean speed per sequence (m/s)")
    shares = [col(k).mean() for k in ("stand_share", "walk_share", "run_share")]
    ax[1].bar(["stand", "walk", "run"], shares, color="#f0a24a")
    ax[1].set_ylabel("share of frames")
    ax[2].hist(col("foot_sliding_cm_s"), bins=20, color="#7bb661")
    ax[2].set_xlabel("foot sliding per sequence (cm/s)")
    fig.tight_layout()
    fig.savefig(out / "statistics.png", dpi=80, metadata={"Software": None})
    plt.close(fig)

    def stat(k, unit):
        v = col(k)
        return f"| {k} | {v.mean():.3f} | {np.percentile(v, 5):.3f} | {np.percentile(v, 95):.3f} | {unit} |"
    styles = {s or "(whole database)": sum(r["style"] == s for r in rows) for s in spec.styles}
    drivers = {d: sum(r["driver"] == d for r in rows) for d in spec.drivers}
    lines = [
        "# Motion dataset", "",
        f"{spec.sequences} sequences of {spec.duration_s:g} s synthesized by motionmatch's motion matching "
        f"(`motionmatch generate`) from a database of {db.num_frames} frames at {db.fps:g} fps in {len(db.range_names)} "
        "clips. Each folder under `sequences/` holds `motion.bvh` (and the formats asked for), `labels.csv.gz` "
        "(per-frame labels; `pandas.read_csv` reads it), `scenario.json` (what drove it) and `summary.json` "
        "(its row of `manifest.csv`).", "",
        "## Spec", "", "```json", json.dumps(spec.to_dict(), indent=1), "```", "",
        "## Sources and licences", "",
        "The motion comes from these motion capture sets; their terms apply to this dataset:", "",
        *[f"- `{n}`: {text}" for n, text in _sources(db)], "",
        "## Contents", "",
        "Sequences per style: " + ", ".join(f"{k} {v}" for k, v in styles.items()) + ".",
        "Sequences per driver: " + ", ".join(f"{k} {v}" for k, v in drivers.items()) + ".", "",
        "| label (per sequence) | mean | p5 | p95 | unit |", "|---|---|---|---|---|",
        stat("mean_speed_m_s", "m/s"), stat("stand_share", "frames"), stat("walk_share", "frames"),
        stat("run_share", "frames"), stat("contact_share", "frames with a toe planted"),
        stat("foot_sliding_cm_s", "cm/s"), stat("trajectory_error_cm", "cm"), stat("obstacles", "circles"), "",
        "![speeds, gaits and foot sliding](statistics.png)", "",
        "## Labels", "",
        "`labels.csv.gz` columns: " + ", ".join(f"`{c}`" for c in LABEL_COLUMNS) + ", then `JOINT_x`, `JOINT_y`, "
        "`JOINT_z` (metres, world space, Y up) per joint of motion.bvh. Gait: stand below "
        f"{MOVING_SPEED:g} m/s, walk below {RUN_SPEED:g} m/s, run above; see motionmatch's docs/datasets.md.", ""]
    with replacing(out / "README.md", "w") as f:
        f.write("\n".join(lines))
