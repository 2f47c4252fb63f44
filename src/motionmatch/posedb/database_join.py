"""Several database files as one runtime database (repeated `--db`): checks they can join, then joins them
in memory. The files stay as they are."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from .annotations import Annotations
from .database import Database, DatabaseError, load_database
from .events import EventMarks, merge_marks
from .features import Channel, FeatureSet

# Tag every clip of a joined file carries: `db:` and the file's stem (`locomotion.npz` -> `db:locomotion`),
# so a database set (runtime/database_sets.py) or a tag filter can name a file: `tags = "db:actions"`.
DB_TAG_PREFIX = "db:"
# Skeleton offsets (m) further apart than this are a different skeleton (the same actor's files agree to
# rounding; another actor's bones differ by centimetres).
SKELETON_TOLERANCE_M = 1e-3


def _join_mismatch(first: Path, other: Path, a: Database, b: Database) -> str | None:
    """What makes database b (file `other`) unfit to join database a (file `first`), or None."""
    sa, sb = a.skeleton, b.skeleton
    if list(sa.names) != list(sb.names):
        extra = [n for n in sb.names if n not in sa.names][:3]
        missing = [n for n in sa.names if n not in sb.names][:3]
        what = (f"joints {extra} not in {first.name}" if extra else f"no joints {missing}" if missing
                else "the same joints in another order")
        return f"skeleton differs from {first.name}'s: {len(sb.names)} joints against {len(sa.names)}, {what}"
    if not np.array_equal(sa.parents, sb.parents):
        j = int(np.flatnonzero(np.asarray(sa.parents) != np.asarray(sb.parents))[0])
        return f"skeleton differs from {first.name}'s: joint {sa.names[j]!r} has another parent"
    gap = np.linalg.norm(np.asarray(sa.offsets) - np.asarray(sb.offsets), axis=1)
    # The source root's offset (a child of the simulation bone) is where a capture starts, not a bone.
    gap[np.asarray(sa.parents) <= 0] = 0.0
    if gap.max() > SKELETON_TOLERANCE_M:
        j = int(gap.argmax())
        return (f"skeleton differs from {first.name}'s: joint {sa.names[j]!r} offset differs by "
                f"{gap[j] * 100:.1f} cm (another actor or scale; retarget with `motionmatch build --skeleton-from`)")
    if a.roles != b.roles:
        k = sorted(r for r in set(a.roles) | set(b.roles) if a.roles.get(r) != b.roles.get(r))[0]
        return f"joint roles differ from {first.name}'s: role {k!r}"
    if a.fps != b.fps:
        return f"frame rate {b.fps:g} fps, {first.name} has {a.fps:g}"

    def shape(c: Channel):
        return (c.name, c.kind, c.joint, tuple(c.offsets), c.event, c.horizon)
    ca, cb = [shape(c) for c in a.features.schema.channels], [shape(c) for c in b.features.schema.channels]
    if ca != cb:
        diff = [c[0] for c in cb if c not in ca] or [c[0] for c in ca if c not in cb]
        return f"feature schema differs from {first.name}'s: channel {diff[0]!r}"
    return None


def join_databases(paths, databases: list[Database]) -> Database:
    """One runtime database from several files' databases (same skeleton, roles, frame rate and feature
    channels, else a DatabaseError naming the file and what differs): clips in file order, each clip tagged
    `db:STEM` (DB_TAG_PREFIX and its file's stem; stems must differ), event marks and annotations moved to
    the joined frames. The features are normalized over the joined frames, as a build of all the clips would
    (channel weights: the first file's). Nothing is written: the files stay as they are."""
    paths = [Path(p) for p in paths]
    if len(paths) != len(databases) or not paths:
        raise ValueError("join_databases: one path per database, at least one")
    stems = [p.stem for p in paths]
    for p, s in zip(paths, stems):
        if not re.fullmatch(r"[A-Za-z0-9_.:\-]+", s):      # a tag (search/tags.py), so expressions can name it
            raise DatabaseError(f"{p}: the file name {s!r} cannot be a tag (db:{s}); rename the file to letters, "
                                f"digits, '_', '.', ':' and '-'")
    for k, s in enumerate(stems):
        if s in stems[:k]:
            raise DatabaseError(f"{paths[k]}: the file name {s!r} is already taken by {paths[stems.index(s)]}; "
                                f"each joined file's clips are tagged db:NAME by its name, so names must differ")
    first = databases[0]
    for p, d in zip(paths[1:], databases[1:]):
        why = _join_mismatch(paths[0], p, first, d)
        if why:
            raise DatabaseError(f"{p}: cannot join {paths[0].name}: {why}")
    base = np.cumsum([0] + [d.num_frames for d in databases])[:-1]
    clip_base = np.cumsum([0] + [len(d.range_starts) for d in databases])[:-1]
    marks = []
    for d, b in zip(databases, base):
        m = EventMarks(d.events.frames + b, list(d.events.types), [list(t) for t in d.events.tags],
                       list(d.events.origins))
        marks.append(m)
    ann = Annotations(kinds=[k for d in databases for k in d.annotations.kinds],
                      starts=np.concatenate([d.annotations.starts + b for d, b in zip(databases, base)]),
                      stops=np.concatenate([d.annotations.stops + b for d, b in zip(databases, base)]),
                      costs=np.concatenate([d.annotations.costs for d in databases]),
                      entries=np.concatenate([d.annotations.entries for d in databases]),
                      clips=np.concatenate([d.annotations.clips + c for d, c in zip(databases, clip_base)]))
    style = None if all(d.style_tags is None for d in databases) else sorted(
        {t for d in databases for t in (d.style_tags or [])})
    meta = dict(first.meta)
    meta["joined"] = [{"path": str(p), "tag": DB_TAG_PREFIX + s, "frames": int(d.num_frames),
                       "clips": len(d.range_starts)} for p, s, d in zip(paths, stems, databases)]
    meta["sources"] = [src for d in databases for src in d.meta.get("sources", [])]
    meta.pop("bytes", None)
    return Database(
        skeleton=first.skeleton, roles=dict(first.roles), fps=first.fps,
        positions=np.concatenate([d.positions for d in databases]),
        rotations=np.concatenate([d.rotations for d in databases]),
        contacts=np.concatenate([d.contacts for d in databases]),
        range_starts=np.concatenate([d.range_starts + b for d, b in zip(databases, base)]).astype(np.int64),
        range_stops=np.concatenate([d.range_stops + b for d, b in zip(databases, base)]).astype(np.int64),
        range_names=[n for d in databases for n in d.range_names],
        range_tags=[list(t) + [DB_TAG_PREFIX + s] for d, s in zip(databases, stems) for t in d.range_tags],
        features=FeatureSet(first.features.schema, np.concatenate([d.features.raw for d in databases])),
        meta=meta, events=merge_marks(*marks), annotations=ann, style_tags=style)


def load_databases(paths) -> Database:
    """The database of one file (load_database, unchanged), or several files joined (join_databases)."""
    paths = [Path(p) for p in paths]
    if len(paths) == 1:
        return load_database(paths[0])
    return join_databases(paths, [load_database(p) for p in paths])
