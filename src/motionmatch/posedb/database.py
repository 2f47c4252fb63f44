"""The preprocessed pose database: one skeleton, all frames of all clips as structure-of-arrays.

Joint 0 is the simulation bone (the character root on the ground); the source root is its child.
One `.npz` file holds the arrays, the skeleton, tags, features and metadata (sources, fps, settings,
format version). Building writes to a temporary file and renames, so a failed build never replaces
an existing database.
"""
from __future__ import annotations

import fnmatch
import json
import numbers
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..motion.animation import Animation, Skeleton
from .annotations import AnnotationError, Annotations, load_annotations, resolve
from ..files.atomic_file import replacing
from .events import (DEFAULT_HORIZON_S, EventError, EventMarks, action_tags, auto_marks, load_sidecar, merge_marks,
                     sidecar_marks, time_to_event, with_action_channels)
from .features import (BANDAI_WEIGHTS, TUNED_WEIGHTS, Channel, FeatureSchema, FeatureSet, compute_features,
                       default_schema, schema_from_dict)
from ..io.clips import CLIP_ERRORS, read_clips, read_first_clip
from ..maths.kinematics import forward_kinematics
from ..files.npz_map import NpzError, map_npz
from ..motion.preprocess import (attach_simulation_bone, fold_into_hips, foot_contacts, hips_forward_axis, mirror,
                                 mirror_corrections, mirror_simulation_bone, resample, simulation_bone,
                                 tags_from_filename, toe_floor_height)
from ..motion.posture import source_posture
from .datapaths import ACTION_NAMES, default_definition
from ..motion.retarget import RetargetError, actor_stance, bind_pose_of, foot_floor, retarget_onto
from ..motion.skeleton import SkeletonError, check_role_joints, find_roles, mirror_pairs
from ..motion.styles import check_style_tags, default_style_tags
from .datapaths import (actions_default_files, bandai_locomotion_files, find_data, list_bvh_files,
                    mixed_default_files, source_tags)
from .datapaths import print_licences

FORMAT_VERSION = 1


class DatabaseError(ValueError):
    """A database that cannot be built or loaded; the message says what to do."""


# The runtime's per-database arrays (about 8: velocities, clip speeds, idle tables...) and up to 8
# weight sets; with 8 in all, a second character's weight set evicted the first's searcher.
MAX_SHARED_ENTRIES = 16


class SharedCache(dict):
    """Values derived once per database and shared by the characters on it (the runtime keeps its
    velocities and, per feature-weight set, a normalized copy of the features with a search index).
    Least recently used entries beyond `limit` are dropped: every client can ask for new weights, and a
    weight set costs a copy of the features (4.7 MB for the default database, 80 MB for Bandai-Namco).
    Characters keep references to what they use, so dropping an entry never breaks one. Thread-safe:
    the server builds weight sets off its event loop."""

    def __init__(self, limit: int = MAX_SHARED_ENTRIES):
        super().__init__()
        self.limit = limit
        self.lock = threading.Lock()

    def __getitem__(self, key):
        with self.lock:
            value = super().pop(key)
            super().__setitem__(key, value)   # most recently used last
            return value

    def __setitem__(self, key, value):
        with self.lock:
            super().pop(key, None)
            super().__setitem__(key, value)
            while len(self) > self.limit:
                super().pop(next(iter(self)))

    def __reduce__(self):
        return SharedCache, (self.limit,)     # a copied database (other process) starts empty


@dataclass
class Database:
    """Structure-of-arrays pose database (see docs/ARCHITECTURE.md)."""

    skeleton: Skeleton
    roles: dict[str, int]
    fps: float
    positions: np.ndarray          # (N, J, 3) float32 local
    rotations: np.ndarray          # (N, J, 4) float32 local
    contacts: np.ndarray           # (N, 2) bool (left, right)
    range_starts: np.ndarray       # (R,) int64
    range_stops: np.ndarray        # (R,) int64, exclusive
    range_names: list[str]
    range_tags: list[list[str]]
    features: FeatureSet
    meta: dict = field(default_factory=dict)
    events: EventMarks = field(default_factory=EventMarks)   # event marks (posedb/events.py)
    annotations: Annotations = field(default_factory=Annotations)   # annotation windows (posedb/annotations.py)
    # Tags that name a style (motion/styles.py); None: the default for these clips (styles.default_style_tags).
    style_tags: list[str] | None = None
    # The runtime's per-database cache (runtime.character looks it up under this name), bounded.
    runtime_cache: SharedCache = field(default_factory=SharedCache, init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.style_tags is None:
            self.style_tags = default_style_tags(self.range_names, self.range_tags)

    @property
    def num_frames(self) -> int:
        return self.positions.shape[0]

    @property
    def num_joints(self) -> int:
        return self.positions.shape[1]

    @property
    def known_tags(self) -> set[str]:
        return set(t for tags in self.range_tags for t in tags)

    def joint_index(self, name: str) -> int:
        """Index of a role (e.g. 'left_foot') or a joint name."""
        if name in self.roles:
            return self.roles[name]
        return self.skeleton.index(name)

    def range_of(self, frame: int) -> int:
        return int(np.searchsorted(self.range_stops, frame, side="right"))

    def global_transforms(self, frames=None) -> tuple[np.ndarray, np.ndarray]:
        """World positions/rotations of the given frames (all by default)."""
        sl = slice(None) if frames is None else frames
        return forward_kinematics(self.positions[sl], self.rotations[sl], self.skeleton.parents)

    def summary(self) -> dict:
        n = self.num_frames
        return {
            "clips": len(self.range_starts),
            "mirrored_clips": sum("mirrored" in t for t in self.range_tags),
            "frames": n,
            "fps": self.fps,
            "seconds": round(n / self.fps, 2),
            "joints": self.num_joints,
            "features": self.features.raw.shape[1],
            "feature_channels": self.features.schema.names,
            "tags": sorted(self.known_tags),
            "style_tags": list(self.style_tags),
            "events": self.events.counts(),
            "annotations": self.annotations.counts(),
            "bytes": self.meta.get("bytes"),
            "build_seconds": self.meta.get("build_seconds"),
            "sources": len(self.meta.get("sources", [])),
            "format_version": self.meta.get("format_version", FORMAT_VERSION),
        }


# ---------------------------------------------------------------------------------------------
# Building

@dataclass
class BuildSettings:
    fps: float = 60.0
    mirror: bool = True
    unit: str = "auto"
    contact_height: float = 0.05     # m above the local floor
    contact_speed: float = 0.6       # m/s (toe speed; 0.4 missed the end of many steps)
    strict: bool = False
    role_mapping: dict | None = None
    user_tags: list[tuple[str, str]] = field(default_factory=list)   # (tag, glob on file name)
    # One skeleton for clips from several sources: a BVH whose skeleton every other clip is retargeted
    # onto (its bind pose found as retarget.find_source_bind does); None keeps the first file's
    # skeleton and refuses others.
    skeleton: str | None = None
    file_tags: dict[str, list[str]] = field(default_factory=dict)    # file path -> extra tags (sources)
    events: str | None = None        # annotation sidecar of event marks (events.load_sidecar)
    annotations: str | None = None   # annotation windows sidecar (annotations.load_annotations)
    style_tags: list[str] | None = None   # tags naming a style (motion/styles.py); None: the default

    def to_dict(self) -> dict:
        return {"fps": self.fps, "mirror": self.mirror, "unit": self.unit,
                "contact_height": self.contact_height, "contact_speed": self.contact_speed,
                "user_tags": [list(t) for t in self.user_tags], "skeleton": self.skeleton, "events": self.events,
                "annotations": self.annotations,
                "style_tags": self.style_tags}


def _actor_captures(files, settings: BuildSettings, skeleton_gp: np.ndarray) -> list[np.ndarray]:
    """Global positions of the skeleton file's captures and of the files sharing its tags (its actor's
    other takes: the jlpm22 actor walks backward in the second only), for retarget.actor_stance."""
    own = settings.file_tags.get(str(settings.skeleton))
    same = [f for f in files if own and str(f) != str(settings.skeleton) and settings.file_tags.get(str(f)) == own]
    return [skeleton_gp] + [hips_rooted(read_first_clip(f, unit=settings.unit), settings.role_mapping).global_transforms()[0]
                            for f in same]


def file_tags(path: Path, settings: BuildSettings) -> list[str]:
    """Tags of the clip built from file `path`: from its name, the user tags matching it, its file tags."""
    tags = (tags_from_filename(path) + [t for t, pat in settings.user_tags if fnmatch.fnmatch(path.name, pat)]
            + settings.file_tags.get(str(path), []))
    return tags + action_tags(tags)


def _same_skeleton(a: Skeleton, b: Skeleton) -> bool:
    return a.names == b.names and np.array_equal(a.parents, b.parents)


def _clip_arrays(anim: Animation, sim_pos, sim_rot, ctx: dict) -> dict:
    """Arrays of one preprocessed clip: local pose with the simulation bone, contacts, raw features."""
    sim = attach_simulation_bone(anim, sim_pos, sim_rot)
    gpos, grot = sim.global_transforms()
    s = ctx["settings"]
    roles_db = ctx["roles_db"]
    joint_index = lambda name: roles_db[name] if name in roles_db else sim.skeleton.index(name)
    f = sim.num_frames
    toes = [roles_db["left_toe"], roles_db["right_toe"]]
    contacts = foot_contacts(gpos, s.fps, toes, s.contact_height, s.contact_speed)
    return {
        "toe_floor": toe_floor_height(gpos, toes),
        "positions": sim.positions.astype(np.float32),
        "rotations": sim.rotations.astype(np.float32),
        "contacts": contacts,
        "events": auto_marks(gpos, contacts, s.fps, roles_db, anim.tags),
        # Features per clip: the whole database's world transforms never need to exist at once.
        "features": compute_features(ctx["schema"], gpos, grot, s.fps, np.array([0]), np.array([f]), joint_index),
        "name": clip_name(anim) + (" (mirrored)" if "mirrored" in anim.tags else ""),
        "tags": list(dict.fromkeys(anim.tags)),
        "skeleton": sim.skeleton,
    }


def clip_name(anim: Animation) -> str:
    """A clip's name in the database: its file's name, with the animation's for a file of several."""
    return Path(anim.source).name + (f":{anim.name}" if anim.name else "")


def hips_rooted(anim: Animation, role_mapping: dict | None = None) -> Animation:
    """The clip with the joints above its hips folded into them, so the hips will hang off the
    simulation bone directly (preprocess.fold_into_hips); unchanged when its roles are not all found.
    Roles no body has (a role map putting both feet on one joint, the hips on a toe) raise SkeletonError."""
    try:
        roles = find_roles(anim.skeleton.names, role_mapping)
    except SkeletonError:
        return anim
    check_role_joints(anim.skeleton.names, anim.skeleton.parents, roles)
    return fold_into_hips(anim, roles["hips"])


def _sample_rotations(files, settings: BuildSettings, skel: Skeleton, n: int = 8) -> list[np.ndarray]:
    """Global rotations (F, J, 4) of up to n clips spread over `files` that are on `skel`: the motion
    the mirror corrections take their free turns from (one clip, a dash say, averages poorly)."""
    out = []
    for i in np.unique(np.linspace(0, len(files) - 1, n).round().astype(int)):
        try:
            anim = hips_rooted(read_first_clip(files[i], unit=settings.unit), settings.role_mapping)
        except CLIP_ERRORS:
            continue
        if _same_skeleton(skel, anim.skeleton):
            out.append(anim.global_transforms()[1])
    return out


def _process_file(path: Path, ctx: dict):
    """Read one file and return its clips' arrays (each clip original, then mirrored), or an error string."""
    s: BuildSettings = ctx["settings"]
    try:
        clips = read_clips(path, unit=s.unit)
    except CLIP_ERRORS as e:
        return str(e)
    out = []
    for anim in clips:
        try:
            res = _preprocess_file(path, anim, ctx)
        except ValueError as e:  # readable but unusable (degenerate motion, a role that moves nowhere, ...)
            res = f"{path}: {e}"
        if not isinstance(res, list):     # an error: the file's other clips go with it
            return res if not anim.name or not isinstance(res, str) else f"{res} (animation {anim.name!r})"
        out += res
    return out


def _preprocess_file(path: Path, anim: Animation, ctx: dict):
    """One read clip preprocessed: its arrays (original, then mirrored), or an error."""
    s: BuildSettings = ctx["settings"]
    folded = hips_rooted(anim, s.role_mapping)
    # A clip to retarget goes in as read: retargeting works on world transforms anyway.
    if _same_skeleton(ctx["skeleton"], folded.skeleton):
        anim = folded
    elif ctx["target"] is None:
        return DatabaseError(
            f"{path}: its skeleton differs from {ctx['first']} (joints {anim.skeleton.names[:4]}... vs "
            f"{ctx['skeleton'].names[:4]}...): a database holds one skeleton; retarget every clip onto "
            f"one with --skeleton-from DATA (or --skeleton T.bvh), or build the sets separately")
    else:
        try:
            anim = retarget_onto(anim, ctx["target"], ctx["floor"], ctx["stance"])
        except RetargetError as e:
            return f"{path}: cannot retarget onto {s.skeleton}: {e}"
    anim.tags = file_tags(path, s)
    anim = resample(anim, s.fps)
    if anim.num_frames < 2:
        return f"{path}: fewer than 2 frames after resampling"
    roles = ctx["roles"]
    gpos, grot = anim.global_transforms()
    win = s.fps / 60.0
    sim_pos, sim_rot = simulation_bone(gpos, grot, roles, ctx["forward_axis"],
                                       int(round(31 * win)) | 1, int(round(61 * win)) | 1)
    out = [_clip_arrays(anim, sim_pos, sim_rot, ctx)]
    if s.mirror:
        m = mirror(anim, ctx["mirror_corrections"])
        mp, mr = mirror_simulation_bone(sim_pos, sim_rot)
        out.append(_clip_arrays(m, mp, mr, ctx))
    return out


def _process_chunk(args):
    paths, ctx = args
    return [(p, _process_file(p, ctx)) for p in paths]


def build_database(files: list[Path], settings: BuildSettings | None = None,
                   schema: FeatureSchema | None = None, progress: bool = True,
                   warn=None, workers: int | None = None, map_chunks=None) -> Database:
    """Read, preprocess and concatenate clips into a Database.

    A bad file is reported through `warn` (default: stderr) and skipped, unless settings.strict.
    All clips must share one skeleton (joint names and hierarchy); a second skeleton is an error unless
    settings.skeleton names a BVH whose skeleton every clip is retargeted onto (retarget.retarget_onto:
    rest pose, unit and a leading synthetic T-pose frame handled; then resampled like any clip).
    Large builds use a process per core; map_chunks(fn, chunks) (an ordered map such as the
    distributed engine's, `motionmatch build --workers K`) replaces that when given.
    """
    from concurrent.futures import ProcessPoolExecutor
    from tqdm import tqdm

    settings = settings or BuildSettings()
    schema = schema or default_schema()
    warn = warn or (lambda msg: tqdm.write(f"warning: {msg}", file=sys.stderr))
    t0 = time.perf_counter()
    sidecar = load_sidecar(settings.events) if settings.events else []   # bad annotations fail before the work
    windows = load_annotations(settings.annotations) if settings.annotations else []
    files = [Path(f) for f in files]
    if not files:
        raise DatabaseError("no BVH files to build from (check the data path and --include/--exclude)")
    tag_lists = [file_tags(p, settings) for p in files]
    if settings.style_tags is not None:   # before the work: the tags every file will give its clips
        check_style_tags(settings.style_tags, [t + ["mirrored"] * settings.mirror for t in tag_lists])
    schema = with_action_channels(schema, tag_lists)    # clips of a key-joint action: their request channel

    # The first readable file fixes the skeleton, its roles, the hips' forward axis and the mirror
    # corrections: properties of the skeleton, derived once.
    first = None
    skipped = []
    for path in files:
        try:
            first = hips_rooted(read_first_clip(path, unit=settings.unit), settings.role_mapping)
            break
        except CLIP_ERRORS as e:
            if settings.strict:
                raise
            warn(str(e))
            skipped.append(str(path))
    if first is None:
        raise DatabaseError("no file could be read: " + "; ".join(skipped[:5]))
    target = None
    if settings.skeleton:
        try:
            first = hips_rooted(read_first_clip(settings.skeleton, unit=settings.unit), settings.role_mapping)
        except CLIP_ERRORS as e:
            raise DatabaseError(f"skeleton file: {e}") from None
        try:
            target = bind_pose_of(first, find_roles(first.skeleton.names, settings.role_mapping))
        except (RetargetError, SkeletonError) as e:
            raise DatabaseError(f"{settings.skeleton}: cannot serve as the database skeleton: {e}") from None
    skel0 = first.skeleton
    roles0 = find_roles(skel0.names, settings.role_mapping)
    gp, gr = first.global_transforms()
    ctx = {
        "settings": settings, "schema": schema, "skeleton": skel0, "first": settings.skeleton or str(files[0]),
        # Retargeted clips rest their feet where the skeleton file's own captures do.
        "target": target, "floor": foot_floor(gp, roles0) if target is not None else None,
        # ... and move like its actor (feet, knees, arms).
        "stance": actor_stance(_actor_captures(files, settings, gp), roles0, first.fps) if target is not None else None,
        "roles": roles0, "roles_db": {k: v + 1 for k, v in roles0.items()},
        "forward_axis": hips_forward_axis(gp, gr, roles0),
        "mirror_corrections": mirror_corrections(skel0, mirror_pairs(skel0.names),
                                                 np.concatenate([gr] + _sample_rotations(files, settings, skel0))),
    }
    todo = [f for f in files if str(f) not in skipped]
    workers = workers or (min(2, os.cpu_count() or 1) if len(todo) >= 32 else 1)
    chunk = 16
    chunks = [(todo[i:i + chunk], ctx) for i in range(0, len(todo), chunk)]
    bar = tqdm(total=len(todo), desc="building", unit="clip", disable=not progress, file=sys.stderr)
    results = []

    def take(batch):
        for path, res in batch:
            bar.update(1)
            if isinstance(res, DatabaseError):
                raise res
            if isinstance(res, str):
                if settings.strict:
                    raise DatabaseError(res)
                warn(res)
                skipped.append(str(path))
                continue
            results.extend(res)

    if map_chunks is not None:
        for batch in map_chunks(_process_chunk, chunks):
            take(batch)
    elif workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as ex:
            for batch in ex.map(_process_chunk, chunks):
                take(batch)
    else:
        for c in chunks:
            take(_process_chunk(c))
    bar.close()
    if not results:
        raise DatabaseError("no clip could be read: " + "; ".join(skipped[:5]))

    lengths = np.array([len(r["positions"]) for r in results], dtype=np.int64)
    range_stops = np.cumsum(lengths)
    range_starts = range_stops - lengths
    skel_db = results[0]["skeleton"]
    roles_db = ctx["roles_db"]
    names = [r["name"] for r in results]
    tags = [r["tags"] for r in results]
    contacts = np.concatenate([r["contacts"] for r in results])
    toe_floor = float(np.median([r["toe_floor"] for r in results]))
    marks = [r.pop("events") for r in results]
    for m, start in zip(marks, range_starts):
        m.frames = m.frames + start
    events = merge_marks(*marks)
    if sidecar:
        events = merge_marks(events, sidecar_marks(sidecar, names, range_starts, range_stops, settings.fps))
    raw = np.concatenate([r.pop("features") for r in results])
    positions = np.concatenate([r.pop("positions") for r in results])
    rotations = np.concatenate([r.pop("rotations") for r in results])
    del results
    fwd_axis = ctx["forward_axis"]
    fill_time_to_event(raw, schema, events, range_starts, range_stops, settings.fps)
    fs = FeatureSet(schema, raw)
    meta = {
        "format_version": FORMAT_VERSION,
        "sources": [str(p) for p in files if str(p) not in skipped],
        "skipped": skipped,
        "settings": settings.to_dict(),
        "hips_forward_axis": fwd_axis.tolist(),
        # Where the toe joints sit when planted (metres above the floor; preprocess.planted_toe_height_m).
        "toe_floor_m": round(toe_floor, 4),
    }
    db = Database(skeleton=skel_db, roles=roles_db, fps=settings.fps, positions=positions,
                  rotations=rotations, contacts=contacts, range_starts=range_starts,
                  range_stops=range_stops, range_names=names, range_tags=tags, features=fs, meta=meta,
                  events=events, style_tags=settings.style_tags,
                  annotations=resolve(windows, names, range_starts, range_stops, settings.fps))
    source_posture(db)      # the main actor's posture figures, stored in meta with the database
    db.meta["build_seconds"] = round(time.perf_counter() - t0, 3)
    return db


def fill_time_to_event(raw: np.ndarray, schema: FeatureSchema, events: EventMarks, range_starts, range_stops,
                       fps: float) -> None:
    """Write the time_to_event columns of raw features (N, F) in place from the database's marks; a channel
    naming an event type without marks is a DatabaseError."""
    for c, sl in zip(schema.channels, schema.slices().values()):
        if c.kind != "time_to_event":
            continue
        frames = events.frames_of(c.event)
        if not len(frames):
            raise DatabaseError(f"feature channel {c.name!r}: no event marks of type {c.event!r} in the database "
                                f"(types: {', '.join(events.type_names) or 'none'}); add them with --events FILE")
        raw[:, sl] = time_to_event(frames, range_starts, range_stops, len(raw), fps, c.horizon)[:, None]


# ---------------------------------------------------------------------------------------------
# Saving and loading

def save_database(db: Database, path) -> int:
    """Write the database to one .npz file atomically; returns its size in bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    skel = db.skeleton
    header = {
        "format_version": FORMAT_VERSION,
        "fps": db.fps,
        "names": skel.names,
        "channels": [list(c) for c in skel.channels],
        "end_sites": {str(k): v.tolist() for k, v in skel.end_sites.items()},
        "roles": db.roles,
        "range_names": db.range_names,
        "range_tags": db.range_tags,
        "style_tags": db.style_tags,
        "schema": db.features.schema.to_dict(),
        "meta": db.meta,
        "events": db.events.to_dict(),
        "annotations": db.annotations.to_dict(),
    }
    with replacing(path) as f:
        np.savez(f, header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
                 parents=skel.parents, offsets=skel.offsets, positions=db.positions,
                 rotations=db.rotations, contacts=db.contacts, range_starts=db.range_starts,
                 range_stops=db.range_stops, features=db.features.raw,
                 feature_offset=db.features.offset, feature_dim_std=db.features.dim_std)
    size = path.stat().st_size
    db.meta["bytes"] = size
    return size


def load_database(path) -> Database:
    """Load a database written by save_database. Every member is checked (dtype, shape against the
    header, hierarchy, roles, clip ranges, fps, finite features) so that a damaged or crafted file is a
    DatabaseError naming the file and the member, never a crash in a compiled kernel."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such database (build one with `motionmatch build DATA -o {path}`)")
    try:
        z = map_npz(path)
        header = json.loads(bytes(z["header"]).decode())
    except NpzError as e:
        raise DatabaseError(str(e)) from None
    except Exception as e:  # a zip/npz that is not ours (RecursionError from deep JSON included)
        raise DatabaseError(f"{path}: not a motionmatch database ({type(e).__name__}: {e})"[:400]) from None
    if not isinstance(header, dict):
        raise DatabaseError(f"{path}: member 'header': expected a JSON object")
    ver = header.get("format_version")
    if type(ver) is not int or ver != FORMAT_VERSION:
        raise DatabaseError(f"{path}: database format version {ver!r}, this motionmatch reads version "
                            f"{FORMAT_VERSION}; rebuild it with `motionmatch build ... -o {path}`")
    return _checked_database(path, z, header)


def _checked_database(path: Path, z: dict, header: dict) -> Database:
    def fail(member, msg):
        raise DatabaseError(f"{path}: member {member!r}: {msg}; the file is damaged, rebuild it with "
                            f"`motionmatch build ... -o {path}`")

    def array(name, kinds, shape):
        """z[name] with a dtype kind in `kinds` ('f' float32/64, 'i' integer, 'b' bool) and the shape
        (None = any size on that axis)."""
        if name not in z:
            fail(name, "missing")
        a = z[name]
        ok_kind = {"f": a.dtype in (np.float32, np.float64), "i": a.dtype.kind in "iu",
                   "b": a.dtype == np.bool_}
        if not any(ok_kind[k] for k in kinds):
            fail(name, f"unexpected dtype {a.dtype}")
        if a.ndim != len(shape) or any(w is not None and w != n for w, n in zip(shape, a.shape)):
            want = "(" + ", ".join("*" if w is None else str(w) for w in shape) + ")"
            fail(name, f"shape {a.shape}, expected {want}")
        return a

    def header_list(key, item_ok, what):
        v = header.get(key)
        if not isinstance(v, list) or not all(item_ok(x) for x in v):
            fail(f"header.{key}", f"expected a list of {what}")
        return v

    fps = header.get("fps")
    if not isinstance(fps, numbers.Real) or isinstance(fps, bool) or not 0 < fps <= 1000:
        fail("header.fps", f"expected a frame rate in (0, 1000], got {fps!r}")
    names = header_list("names", lambda x: isinstance(x, str), "joint names")
    J = len(names)
    if J < 2:
        fail("header.names", "needs the simulation bone and at least one joint")
    parents = array("parents", "i", (J,))
    if parents[0] != -1 or (J > 1 and not ((parents[1:] >= 0) & (parents[1:] < np.arange(1, J))).all()):
        # Parents-first order (each parent index below its child's) rules out cycles and strays.
        fail("parents", "expected -1 for joint 0 and for each other joint a parent listed before it")
    parents = np.ascontiguousarray(parents, dtype=np.int64)
    offsets = array("offsets", "f", (J, 3))
    if not np.isfinite(offsets).all():
        fail("offsets", "non-finite values")
    positions = array("positions", "f", (None, J, 3))
    N = positions.shape[0]
    if N < 1:
        fail("positions", "no frames")
    rotations = array("rotations", "f", (N, J, 4))
    contacts = array("contacts", "b", (N, 2))
    range_starts = array("range_starts", "i", (None,))
    R = range_starts.shape[0]
    range_stops = array("range_stops", "i", (R,))
    if R < 1 or range_starts[0] != 0 or range_stops[-1] != N or (range_stops <= range_starts).any() \
            or (range_starts[1:] != range_stops[:-1]).any():
        fail("range_starts/range_stops", f"clip ranges must tile frames 0..{N} in order, each non-empty")
    range_names = header_list("range_names", lambda x: isinstance(x, str), "strings")
    range_tags = header_list("range_tags", lambda x: isinstance(x, list) and all(isinstance(t, str) for t in x),
                             "tag lists")
    if len(range_names) != R or len(range_tags) != R:
        fail("header.range_names/range_tags", f"expected {R} entries (one per clip range)")
    style_tags = header.get("style_tags")     # absent in files saved before style tags: the default
    if style_tags is not None and not (isinstance(style_tags, list) and all(isinstance(t, str) for t in style_tags)):
        fail("header.style_tags", "expected a list of tag names")
    roles = header.get("roles")
    if not isinstance(roles, dict) or not all(
            isinstance(k, str) and type(v) is int and 0 <= v < J for k, v in roles.items()):
        fail("header.roles", f"expected role -> joint index in [0, {J})")
    missing = [r for r in ("hips", "left_foot", "right_foot", "left_toe", "right_toe") if r not in roles]
    if missing:
        fail("header.roles", f"missing roles {missing}")
    channels = header.get("channels")
    if not isinstance(channels, list) or len(channels) not in (0, J) or not all(
            isinstance(c, list) and all(isinstance(x, str) for x in c) for c in channels):
        fail("header.channels", f"expected {J} lists of channel names")
    end_sites = header.get("end_sites")
    try:
        end_sites = {int(k): np.array(v, dtype=np.float64) for k, v in end_sites.items()}
        ok = all(0 <= k < J and v.shape == (3,) and np.isfinite(v).all() for k, v in end_sites.items())
    except (AttributeError, TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        fail("header.end_sites", "expected joint index -> three finite numbers")
    meta = header.get("meta")
    if not isinstance(meta, dict):
        fail("header.meta", "expected an object")
    try:
        schema = schema_from_dict(header.get("schema") if isinstance(header.get("schema"), dict) else {})
    except ValueError as e:
        fail("header.schema", str(e))
    for c in schema.channels:
        if c.joint is not None and c.joint not in roles and c.joint not in names:
            fail("header.schema", f"channel {c.name!r} names joint {c.joint!r}, which is neither a role nor a joint")
        if any(abs(o) > N for o in c.offsets):
            fail("header.schema", f"channel {c.name!r} has frame offsets beyond the database")
    F = schema.dims
    features = array("features", "f", (N, F))
    if features.dtype != np.float32 or not np.isfinite(features).all():
        fail("features", "expected finite float32 values")
    stats = {}
    for name in ("feature_offset", "feature_dim_std"):
        stats[name] = np.asarray(array(name, "f", (F,)), dtype=np.float64) if name in z else None
        if stats[name] is not None and not np.isfinite(stats[name]).all():
            fail(name, "non-finite values")
    skel = Skeleton(names=names, parents=parents, offsets=np.asarray(offsets, dtype=np.float64),
                    end_sites=end_sites, channels=[tuple(c) for c in channels])
    try:
        fs = FeatureSet(schema, np.asarray(features), offset=stats["feature_offset"],
                        dim_std=stats["feature_dim_std"])
    except ValueError as e:
        fail("features", str(e))
    try:
        # Files written before event marks existed hold none.
        events = EventMarks.from_dict(header["events"], N) if "events" in header else EventMarks()
    except EventError as e:
        fail("header.events", str(e))
    try:
        # Files written before annotations existed hold none.
        annotations = (Annotations.from_dict(header["annotations"], range_starts, range_stops)
                       if "annotations" in header else Annotations())
    except AnnotationError as e:
        fail("header.annotations", str(e))
    meta = dict(meta)
    meta["bytes"] = path.stat().st_size
    return Database(skeleton=skel, roles=roles, fps=float(fps), positions=positions,
                    rotations=rotations, contacts=contacts, range_starts=np.asarray(range_starts, dtype=np.int64),
                    range_stops=np.asarray(range_stops, dtype=np.int64), range_names=range_names,
                    range_tags=range_tags, features=fs, meta=meta, events=events, style_tags=style_tags,
                    annotations=annotations)


def default_database_path(mixed: bool = False, kind: str | None = None) -> Path:
    """Cache file of a default database: the jlpm22-only one, with `mixed` the mixed default, with
    kind="actions" the action database, with kind="bandai" the Bandai-Namco locomotion database."""
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "motionmatch"
    if kind == "actions":
        return base / "actions.npz"
    if kind == "bandai":
        return base / "bandai-locomotion.npz"
    return base / ("mixed-locomotion.npz" if mixed else "jlpm22-locomotion.npz")


def actions_schema(event_types) -> FeatureSchema:
    """The default schema plus one time_to_event channel (weight 10, horizon 1.5 s) per event type: the
    runtime weighs them only during requests (docs/ACTIONS.md)."""
    extra = tuple(Channel(f"time_to_{t}", "time_to_event", 10.0, event=t, horizon=DEFAULT_HORIZON_S)
                  for t in event_types)
    return FeatureSchema(default_schema().channels + extra)


def build_actions_database(files, file_tags: dict, skeleton: str, progress: bool = True,
                           events: str | None = None, **settings) -> Database:
    """A database of locomotion and actions (clips tagged `action:NAME`) retargeted onto `skeleton`, with
    time_to_event channels for every action present, `stop` and the foot plants; the locomotion tag filter `!action` is
    its default (meta "default_tag_filter"), so only requests play actions."""
    present = [a for a in ACTION_NAMES if any(f"action:{a}" in t for t in file_tags.values())]
    s = BuildSettings(skeleton=skeleton, file_tags=file_tags, events=events, **settings)
    db = build_database(files, s, actions_schema(present + ["stop", "foot_plant_left", "foot_plant_right"]),
                        progress=progress)
    db.meta["default_tag_filter"] = "!action"
    return db


def cached_definition(path) -> str | None:
    """The "definition" key of the database file at `path` (None when it has none). DatabaseError when
    the file does not load."""
    return load_database(path).meta.get("definition")


def refresh_default_weights(path, weights: dict) -> bool:
    """Give the cached default database at `path` the default channel `weights` (name -> weight) where
    its own differ (the defaults are tuned, docs/tuning.md; a cache built before a change kept the old
    ones), and save it; channels not in `weights` (an action database's time-to-event) are left alone.
    Raw features are stored, so this is a re-weighting, not a rebuild. A file without the main actor's
    posture figures (built before they were stored) gets them (posture.source_posture). True when it
    changed the file.
    DatabaseError when the file does not load."""
    db = load_database(path)
    have = {c.name: c.weight for c in db.features.schema.channels}
    stale = {n: w for n, w in weights.items() if n in have and have[n] != w}
    # A cache built before the main actor's posture was stored gets it too: measured once, not per run.
    stored = db.meta.get("posture_source")
    if not stale and source_posture(db) is stored:
        return False
    if stale:
        db.features.set_weights(stale)
    save_database(db, path)
    return True


def default_weights(kind: str | None = None) -> dict:
    """Channel weights the default database of `kind` is built with: "mixed", the weights tuned on it
    (features.TUNED_WEIGHTS); "bandai", the Bandai-Namco locomotion database's own
    (features.BANDAI_WEIGHTS); otherwise (None: the jlpm22-only database, "actions") the schema's."""
    tuned = {"mixed": TUNED_WEIGHTS, "bandai": BANDAI_WEIGHTS}.get(kind)
    return dict(tuned) if tuned else {c.name: c.weight for c in default_schema().channels}


def build_default_database(path=None, data=None, progress: bool = True, rebuild: bool = False,
                           mixed: bool = False, kind: str | None = None, events: str | None = None,
                           map_chunks=None) -> Path:
    """Build (once) a default database into the cache; returns its path. Default: the jlpm22 locomotion
    takes; `mixed`: the mixed default set (datapaths.MIXED_DEFAULT_SETS: jlpm22 takes, CMU side-steps,
    Bandai-Namco's normal backward walk and straight runs) retargeted onto the jlpm22 skeleton, clips tagged by source;
    kind="actions": the mixed set plus the Bandai-Namco dataset-1 actions (build_actions_database);
    kind="bandai": the Bandai-Namco walking and running clips on their own skeleton
    (datapaths.BANDAI_LOCOMOTION). map_chunks: as build_database's (the distributed engine's map)."""

    path = Path(path) if path else default_database_path(mixed, kind)
    definition = default_definition(mixed, kind)

    def current() -> bool:
        try:
            return cached_definition(path) == definition
        except DatabaseError:
            return False  # stale format: rebuild

    if kind == "actions":
        if path.exists() and not rebuild and not events and current():
            refresh_default_weights(path, default_weights())
            return path
        warn = lambda msg: print(f"warning: {msg}", file=sys.stderr)
        files, tags, skeleton = actions_default_files(data, warn=warn)
        print_licences(tags, file=sys.stderr)
        db = build_actions_database(files, tags, skeleton, progress=progress, events=events)
        db.meta["definition"] = definition
        save_database(db, path)
        return path
    # Each locomotion database has the weights tuned on it; the jlpm22-only one, without backward or
    # sideways data, keeps the schema's (docs/tuning.md).
    weights = default_weights("bandai" if kind == "bandai" else "mixed" if mixed else None)
    if path.exists() and not rebuild and current():
        refresh_default_weights(path, weights)
        return path
    if kind == "bandai":
        files, tags = bandai_locomotion_files(data)
        settings = BuildSettings(file_tags=tags, events=events)
    elif mixed:
        warn = lambda msg: print(f"warning: {msg}", file=sys.stderr)
        files, tags, skeleton = mixed_default_files(data, warn=warn)
        settings = BuildSettings(skeleton=skeleton, file_tags=tags)
    else:
        root = find_data("jlpm22-locomotion", data)
        files = list_bvh_files([root])
        settings = BuildSettings(file_tags=source_tags([root], files))
    db = build_database(files, settings, default_schema().with_weights(weights), progress=progress,
                        map_chunks=map_chunks)
    db.meta["definition"] = definition
    save_database(db, path)
    return path
