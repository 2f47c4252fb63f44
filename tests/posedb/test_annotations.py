"""Annotation windows (issue 29, docs/ANNOTATIONS.md) on a small Bandai-Namco dataset-1 database (two walks,
a run, a side-step and a bow, mirrored): each kind changes what the search and the matcher do."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from conftest import BANDAI, _need

from motionmatch.posedb.annotations import AnnotationError, load_annotations, resolve
from motionmatch.cli import main
from motionmatch.posedb.database import BuildSettings, build_database, load_database, save_database
from motionmatch.runtime.character import Character
from motionmatch.runtime.controller import GamepadInput

D1 = BANDAI / "dataset-1"
NAMES = ("walk_active_001", "walk_active_002", "run_active_001", "walk-left_active_001", "bow_active_001")


def _files():
    return [_need(D1) / f"dataset-1_{n}.bvh" for n in NAMES]


@pytest.fixture(scope="module")
def db():
    return build_database(_files(), BuildSettings(), progress=False)


def annotated(db, tmp_path, entries):
    """The database with the sidecar `entries` (JSON list) resolved on it (a fresh runtime cache)."""
    path = tmp_path / "ann.json"
    path.write_text(json.dumps({"annotation": entries}))
    ann = resolve(load_annotations(path), db.range_names, db.range_starts, db.range_stops, db.fps)
    return dataclasses.replace(db, annotations=ann)


def clip(db, name):
    r = db.range_names.index(f"dataset-1_{name}.bvh")
    return int(db.range_starts[r]), int(db.range_stops[r])


def drive(db, seconds=12.0, seed=0):
    """A character under a stick that changes direction and speed every second; returns per tick the
    search (playing frame before it, best frame) and the frame shown."""
    rng = np.random.default_rng(seed)
    ch = Character(db)
    searches, shown = [], []
    move = (0.0, 1.0)
    for t in range(int(seconds * 60)):
        if t % 60 == 0:
            a = rng.uniform(-np.pi, np.pi)
            move = (float(np.sin(a)) * rng.uniform(0.3, 1.0), float(np.cos(a)) * rng.uniform(0.3, 1.0))
        ch.step(GamepadInput(move=move, run=bool(t // 180 % 2)))
        cr = ch.crowd
        if cr.searched[0]:
            searches.append((int(cr.last_current[0]), int(cr.last_best[0])))
        shown.append(ch.frame)
    return searches, np.array(shown)


def test_excluded_frames_are_never_chosen(db, tmp_path):
    plain, _ = drive(db)
    ranges = [db.range_of(best) for _, best in plain if best >= 0]
    r = max(set(ranges), key=ranges.count)             # the clip the search picks most often
    name = db.range_names[r].replace(" (mirrored)", "")
    a, b = int(db.range_starts[r]), int(db.range_stops[r])
    ex = annotated(db, tmp_path, [{"clip": name, "kind": "exclude", "time": [0.0, (b - a - 1) / db.fps]}])
    searches, _ = drive(ex)
    excluded = np.zeros(db.num_frames, bool)
    for s, e in zip(ex.annotations.starts, ex.annotations.stops):
        excluded[s:e] = True
    assert excluded[a:b].all() and excluded.sum() == 2 * (b - a)       # the mirrored copy follows
    assert len(searches) > 50 and not any(excluded[best] for _, best in searches if best >= 0)


def test_a_blocked_range_is_never_left_nor_entered(db, tmp_path):
    ent = [{"clip": "dataset-1_walk_active_*.bvh", "kind": "block_transitions", "time": [1.0, 3.0]},
           {"clip": "dataset-1_run_active_001.bvh", "kind": "block_transitions", "frame": [20, 100]}]
    bl = annotated(db, tmp_path, ent)
    blocked = np.zeros(db.num_frames, bool)
    for k, s, e in zip(bl.annotations.kinds, bl.annotations.starts, bl.annotations.stops):
        blocked[s:e] = True
    assert len(bl.annotations) == 6                      # two walks and a run, each with its mirrored copy
    searches, shown = drive(bl, seconds=20.0)
    assert len(searches) > 100
    assert not any(blocked[best] and best != cur for cur, best in searches)    # never entered by a search
    # Started at the start of a blocked stretch: the playhead goes through it without a jump (steps of
    # playback only), whatever the stick asks, and no search runs while it is inside.
    a, _ = clip(db, "walk_active_001")
    ch = Character(bl)
    ch.crowd.reset_agent(0, start_frame=a + 60)
    shown, searched_inside = [], 0
    for _ in range(240):
        before = ch.frame
        ch.step(GamepadInput(move=(1.0, -0.5)))
        searched_inside += bool(ch.crowd.searched[0]) and blocked[before]
        shown.append(ch.frame)
    shown = np.array([a + 60] + shown)
    assert blocked[shown].sum() > 90
    steps = np.diff(shown)[blocked[shown[:-1]]]
    assert ((steps >= 0) & (steps <= 3)).all() and searched_inside == 0


def test_a_cost_bias_changes_the_pick(db, tmp_path):
    """Over a character's own queries a cost on the clip of each pick moves the pick off it, one below 0
    draws picks to its clip; a character driven with a strong bias avoids or prefers the clip."""
    from motionmatch.runtime.search_sets import search_set
    ch = Character(db)
    queries = []
    for t in range(600):
        ch.step(GamepadInput(move=(0.0, 1.0) if t < 300 else (0.7, -0.7)))
        if ch.crowd.searched[0]:
            queries.append((ch.crowd.last_query[0].copy(), int(ch.crowd.last_current[0])))
    plain = search_set(db, ch.settings)
    a, b = clip(db, "walk_active_002")
    name = "dataset-1_walk_active_002.bvh"
    avoid = search_set(annotated(db, tmp_path, [{"clip": name, "kind": "cost_bias", "cost": 50.0}]), ch.settings)
    prefer = search_set(annotated(db, tmp_path, [{"clip": name, "kind": "cost_bias", "cost": -50.0}]), ch.settings)
    picks = np.array([[s.searcher.search(q, -1)[0] for s in (plain, avoid, prefer)] for q, _ in queries])
    inside = (picks >= a) & (picks < b)
    assert inside[:, 1].sum() < inside[:, 0].sum() < inside[:, 2].sum()
    _, shown = drive(db)
    base = ((shown >= a) & (shown < b)).mean()
    _, shown = drive(annotated(db, tmp_path, [{"clip": name, "kind": "cost_bias", "cost": 1000.0}]))
    avoided = ((shown >= a) & (shown < b)).mean()
    _, shown = drive(annotated(db, tmp_path, [{"clip": name, "kind": "cost_bias", "cost": -1000.0}]))
    preferred = ((shown >= a) & (shown < b)).mean()
    assert avoided < base < preferred, (avoided, base, preferred)


def test_a_branch_in_clip_is_entered_only_at_its_marks(db, tmp_path):
    plain, _ = drive(db, seconds=20.0)
    ranges = [db.range_of(best) for _, best in plain if best >= 0]
    r = max(set(ranges), key=ranges.count)             # the clip the search picks most often
    name = db.range_names[r]
    a, b = int(db.range_starts[r]), int(db.range_stops[r])
    marks = [(a + k, a + k + 10) for k in range(0, b - a - 10, 40)]           # 10 frames in every 40
    br = annotated(db, tmp_path, [{"clip": name, "kind": "branch_in", "frame": [s - a, e - a - 1]} for s, e in marks])
    at_mark = lambda f: any(s <= f < e for s, e in marks)
    jumps = lambda searches: [best for cur, best in searches if a <= best < b and best != cur]
    assert not all(at_mark(f) for f in jumps(plain))                       # entered anywhere without marks
    searches, shown = drive(br, seconds=20.0)
    entered = jumps(searches)      # from another clip, or a jump inside it (the continuing frame is no entry)
    assert len(entered) >= 2 and all(at_mark(f) for f in entered), entered


def test_a_loop_clip_plays_in_a_loop(db, tmp_path):
    """An idle stretch that loops and is not left (loop + block_transitions over it): the playhead wraps from
    its end to its start, an inertialized jump, and stays inside whatever the stick asks."""
    a, b = clip(db, "bow_active_001")
    name = "dataset-1_bow_active_001.bvh"
    lp = annotated(db, tmp_path, [{"clip": name, "kind": "loop", "time": [1.0, 2.5]},
                                  {"clip": name, "kind": "block_transitions", "time": [1.0, 2.5]}])
    s, e = a + 60, a + 151
    ch = Character(lp)
    ch.crowd.reset_agent(0, start_frame=s + 5)
    shown = []
    for t in range(300):
        ch.step(GamepadInput(move=(0.0, 1.0) if t > 150 else (0.0, 0.0)))
        shown.append(ch.frame)
    shown = np.array(shown)
    assert ((shown >= s) & (shown < e)).all()
    wraps = (shown[:-1] >= e - 3) & (shown[1:] < s + 3)
    assert wraps.sum() >= 2 and ch.crowd.transitions[0] == wraps.sum()
    # without the loop the stretch's end is left by playback, then the clip's end by a search
    ch = Character(annotated(db, tmp_path, [{"clip": name, "kind": "block_transitions", "time": [1.0, 2.5]}]))
    ch.crowd.reset_agent(0, start_frame=s + 5)
    for _ in range(100):
        ch.step(GamepadInput())
    assert not s <= ch.frame < e


def test_cli_build_info_storage_and_old_files(tmp_path, capsys):
    side = tmp_path / "ann.toml"
    side.write_text('[[annotation]]\nclip = "dataset-1_bow_*"\nkind = "exclude"\ntime = [0.0, 0.5]\n\n'
                    '[[annotation]]\nclip = "dataset-1_walk_active_001.bvh"\nkind = "cost_bias"\ncost = -0.5\n\n'
                    '[[annotation]]\nclip = "dataset-1_walk_active_001.bvh"\nkind = "branch_in"\nframe = 30\n\n'
                    '[[annotation]]\nclip = "dataset-1_bow_active_001.bvh"\nkind = "loop"\ntime = [1.0, 2.0]\n\n'
                    '[[annotation]]\nclip = "dataset-1_run_*"\nkind = "block_transitions"\nframe = [10, 40]\n')
    out = tmp_path / "db.npz"
    assert main(["build", *map(str, _files()[::2]), "--annotations", str(side), "-o", str(out), "--quiet"]) == 0
    assert "annotations: 10: block_transitions 2, exclude 2, cost_bias 2, branch_in 2, loop 2" in capsys.readouterr().out
    db = load_database(out)
    a = db.annotations
    r = db.range_names.index("dataset-1_walk_active_001.bvh")
    assert {"kind": "branch_in", "start": int(db.range_starts[r]) + 30, "stop": int(db.range_starts[r]) + 31,
            "cost": 0.0} in a.of_clip(r)
    assert main(["info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "loop" in text and "dataset-1_bow_active_001.bvh (mirrored)  1.00-2.02 s" in text
    assert "cost -0.5" in text
    # A file written before annotations existed (no header entry) loads with none.
    z = dict(np.load(out))
    header = json.loads(bytes(z["header"]).decode())
    del header["annotations"]
    z["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    old = tmp_path / "old.npz"
    with open(old, "wb") as f:
        np.savez(f, **z)
    assert len(load_database(old).annotations) == 0
    save_database(load_database(old), tmp_path / "again.npz")
    assert len(load_database(tmp_path / "again.npz").annotations) == 0


@pytest.mark.parametrize("entry, field", [
    ({"clip": "x.bvh", "kind": "skip"}, "annotation[0].kind"),
    ({"clip": "x.bvh", "kind": "cost_bias"}, "annotation[0].cost"),
    ({"clip": "x.bvh", "kind": "exclude", "cost": 1.0}, "annotation[0].cost"),
    ({"clip": "x.bvh", "kind": "cost_bias", "cost": 1e9}, "annotation[0].cost"),
    ({"clip": "x.bvh", "kind": "exclude", "time": [2.0, 1.0]}, "annotation[0].time"),
    ({"clip": "x.bvh", "kind": "exclude", "frame": 1.5}, "annotation[0].frame"),
    ({"clip": "x.bvh", "kind": "exclude", "frame": 1, "time": 1}, "annotation[0].time"),
    ({"clip": "x.bvh", "kind": "exclude", "colour": 1}, "annotation[0].colour"),
    ({"kind": "exclude"}, "annotation[0].clip"),
])
def test_bad_entries_name_the_entry_and_field(tmp_path, entry, field):
    path = tmp_path / "a.json"
    path.write_text(json.dumps([{"clip": "y.bvh", "kind": "loop"}, entry][1:]))
    with pytest.raises(AnnotationError, match=field.replace("[", r"\[").replace("]", r"\]")):
        load_annotations(path)


def test_entries_beyond_the_database_name_the_entry(db, tmp_path):
    with pytest.raises(AnnotationError, match=r"annotation\[1\]\.clip: no clip named 'nothing\*'"):
        annotated(db, tmp_path, [{"clip": "dataset-1_run*", "kind": "exclude"}, {"clip": "nothing*", "kind": "exclude"}])
    with pytest.raises(AnnotationError, match=r"annotation\[0\]\.time: beyond the end of clip"):
        annotated(db, tmp_path, [{"clip": "dataset-1_run_active_001.bvh", "kind": "exclude", "time": [1.0, 90.0]}])
