"""Hostile-input campaigns for the small user files: crowd files (`synth --crowd`), event sidecars
(`build --events`, JSON and TOML), annotation sidecars (`build --annotations`), tracker files (`synth
--trackers`, JSON and CSV), role maps (`--map`, `--character-map`; with roles no body has too), retarget
maps (`retarget --map`), settings files (`--settings`), tag
expressions (crowd agents' `tags`, scenario styles) and obstacle lists (crowd and scenario files'
`obstacles`). Every case must give the door's own error class naming the file (tag expressions: a
TagExpressionError); none may be accepted.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from ..offline.crowd_synth import CrowdError, check_agents, load_crowd
from ..posedb.events import EventError, load_sidecar, sidecar_marks
from .fuzz import Outcome, classify
from ..search import TagExpressionError, range_mask
from ..runtime.settings_file import SettingsError, load_settings
from ..motion.skeleton import ROLES, SkeletonError, load_mapping
from ..motion.animation import Animation
from ..motion.retarget import RetargetError, retarget_animation
from ..offline.scenario import ScenarioError, load_scenario
from ..vr.trackers import TrackerFileError, read_trackers
from ..posedb.annotations import AnnotationError, load_annotations, resolve

BIG = "9" * 400
DEEP_JSON = "[" * 5000 + "]" * 5000


def _crowd(**kw) -> bytes:
    d = {"duration": 2.0, "agents": [{"start": [0, 0], "goal": [3, 0]}]}
    d.update(kw)
    return json.dumps(d).encode()


def _agent(**kw) -> bytes:
    a = {"start": [0, 0], "goal": [3, 0]}
    a.update(kw)
    return json.dumps({"duration": 2.0, "agents": [a]}).encode()


def bad_crowds() -> list[tuple[str, bytes]]:
    """(name, file bytes) of crowd files that must be refused."""
    return [
        ("duration 0.001", _crowd(duration=0.001)),
        ("duration 400 digits", b'{"duration": ' + BIG.encode() + b', "agents": [{"start": [0, 0], "goal": [3, 0]}]}'),
        ("duration NaN", b'{"duration": NaN, "agents": [{"start": [0, 0], "goal": [3, 0]}]}'),
        ("duration 1e999", b'{"duration": 1e999, "agents": [{"start": [0, 0], "goal": [3, 0]}]}'),
        ("yaw 400 digits", b'{"duration": 2, "agents": [{"start": [0, 0], "goal": [3, 0], "yaw": ' + BIG.encode() + b'}]}'),
        ("start 400 digits", b'{"duration": 2, "agents": [{"start": [' + BIG.encode() + b', 0], "goal": [3, 0]}]}'),
        ("goal 5000 digits", b'{"duration": 2, "agents": [{"start": [0, 0], "goal": [' + b"9" * 5000 + b', 0]}]}'),
        ("goal 1e300", _agent(goal=[1e300, 0])),
        ("path 1.7e308", _agent(goal=None, path={"points": [[0, 0], [1.7e308, 0]], "speed": 1})),
        ("deep nesting", b'{"duration": 2, "agents": ' + DEEP_JSON.encode() + b"}"),
        ("deep objects", b'{"duration": 2, "x": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5001),
        ("agents 1001", _crowd(agents=[{"start": [0, 0], "goal": [3, 0]}] * 1001)),
        ("agents x duration", _crowd(duration=600, agents=[{"start": [0, 0], "goal": [3, 0]}] * 10)),
        ("tags not not x5000", _agent(tags="! " * 5000 + "walk")),
        ("tags 3000 parentheses", _agent(tags="(" * 3000 + "walk" + ")" * 3000)),
        ("tags exclude every clip", _agent(tags="mirrored & !mirrored")),
        ("tags unknown", _agent(tags="no-such-tag")),
        ("tags 100k chars", _agent(tags=" | ".join(["mirrored"] * 12000))),
        ("run string", _agent(run="yes")),
        ("not UTF-8", b'{"duration": 2, "description": "\xff\xfe", "agents": [{"start": [0, 0], "goal": [3, 0]}]}'),
        ("empty", b""),
        ("list", b"[1, 2]"),
        ("agents empty", _crowd(agents=[])),
        ("inputs unknown action", _agent(goal=None, inputs=[{"t": 0.0, "move": [0, 1]},
                                                            {"t": 0.5, "action": "no-such-action", "event_in": 0.8}])),
        ("inputs action event_in 1e308", _agent(goal=None, inputs=[{"t": 0.5, "action": "bow", "event_in": 1e308}])),
        ("inputs set without sets", _agent(goal=None, inputs=[{"t": 0.5, "set": "crouch", "interrupt": True}])),
    ]


def bad_obstacles() -> list[tuple[str, bytes]]:
    """(name, JSON bytes of an `obstacles` value) that crowd and scenario files must refuse ("start
    inside": crowd files only, whose agents may not start inside a shape)."""
    js = lambda *o: json.dumps(list(o)).encode()
    return [
        ("not a list", b'{"center": [0, 0], "radius": 1}'),
        ("radius 400 digits", b'[{"center": [0, 5], "radius": ' + BIG.encode() + b"}]"),
        ("radius NaN", b'[{"center": [0, 5], "radius": NaN}]'),
        ("radius 0", js({"center": [0, 5], "radius": 0})),
        ("radius negative", js({"center": [0, 5], "radius": -1})),
        ("radius 1e300", js({"center": [0, 5], "radius": 1e300})),
        ("radius string", js({"center": [0, 5], "radius": "1"})),
        ("center 1e300", js({"center": [1e300, 5], "radius": 1})),
        ("center three numbers", js({"center": [0, 5, 1], "radius": 1})),
        ("center 400 digits", b'[{"center": [' + BIG.encode() + b', 5], "radius": 1}]'),
        ("box inverted", js({"min": [2, 2], "max": [1, 3]})),
        ("box flat", js({"min": [2, 2], "max": [3, 2]})),
        ("box 1e6 wide", js({"min": [-5e5, 2], "max": [5e5, 3]})),
        ("box and circle", js({"min": [2, 2], "max": [3, 3], "radius": 1})),
        ("missing radius", js({"center": [0, 5]})),
        ("unknown field", js({"center": [0, 5], "radius": 1, "height": 2})),
        ("empty object", js({})),
        ("a number", js(5)),
        ("10001 obstacles", js(*[{"center": [0, 50], "radius": 0.1}] * 10001)),
        ("deep nesting", DEEP_JSON.encode()),
        ("start inside", js({"center": [0, 0], "radius": 1})),
    ]


def _event(**kw) -> dict:
    e = {"clip": "*", "time": 0.5, "type": "step"}
    e.update(kw)
    return e


def bad_event_files() -> list[tuple[str, bytes, str]]:
    """(name, file bytes, suffix) of event sidecars that must be refused."""
    js = lambda *events: json.dumps({"event": list(events)}).encode()
    return [
        ("time 400 digits json", b'{"event": [{"clip": "*", "type": "step", "time": ' + BIG.encode() + b"}]}", ".json"),
        ("time 400 digits toml", b'[[event]]\nclip = "*"\ntype = "step"\ntime = ' + BIG.encode() + b"\n", ".toml"),
        ("frame 400 digits toml", b'[[event]]\nclip = "*"\ntype = "step"\nframe = ' + BIG.encode() + b"\n", ".toml"),
        ("time 1e308", js(_event(time=1e308)), ".json"),
        ("time inf toml", b'[[event]]\nclip = "*"\ntype = "step"\ntime = inf\n', ".toml"),
        ("time nan toml", b'[[event]]\nclip = "*"\ntype = "step"\ntime = nan\n', ".toml"),
        ("frame 2^40", js(_event(time=None) | {"frame": 2 ** 40}), ".json"),
        ("deep JSON", b'{"event": ' + DEEP_JSON.encode() + b"}", ".json"),
        ("deep TOML arrays", b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n", ".toml"),
        ("deep TOML tables", b"x = " + b"{a = " * 3000 + b"1" + b"}" * 3000 + b"\n", ".toml"),
        ("time beyond clip", js(_event(time=1e5)), ".json"),
        ("clip missing", js(_event(clip="no-such-clip.bvh")), ".json"),
        ("clip 100k chars", js(_event(clip="*" * 100_000)), ".json"),
        ("type with spaces", js(_event(type="a b")), ".json"),
        ("not UTF-8", b'[[event]]\nclip = "\xff"\n', ".toml"),
        ("empty", b"", ".json"),
    ]


def bad_annotation_files() -> list[tuple[str, bytes, str]]:
    """(name, file bytes, suffix) of annotation sidecars (`build --annotations`) that must be refused."""
    js = lambda **kw: json.dumps({"annotation": [{"clip": "*", "kind": "exclude", **kw}]}).encode()
    toml = lambda body: b'[[annotation]]\nclip = "*"\nkind = "cost_bias"\n' + body + b"\n"
    return [
        ("cost 400 digits toml", toml(b"cost = " + BIG.encode()), ".toml"),
        ("cost inf toml", toml(b"cost = inf"), ".toml"),
        ("cost nan toml", toml(b"cost = nan"), ".toml"),
        ("cost 1e308", js(kind="cost_bias", cost=1e308), ".json"),
        ("cost on exclude", js(cost=1.0), ".json"),
        ("time 1e308", js(time=[0.0, 1e308]), ".json"),
        ("time beyond clip", js(time=[0.0, 1e5]), ".json"),
        ("time reversed", js(time=[2.0, 1.0]), ".json"),
        ("time three numbers", js(time=[0.0, 1.0, 2.0]), ".json"),
        ("frame 2^40", js(frame=2 ** 40), ".json"),
        ("frame and time", js(frame=1, time=1.0), ".json"),
        ("kind unknown", js(kind="teleport"), ".json"),
        ("clip missing", js(clip="no-such-clip.bvh"), ".json"),
        ("clip 100k chars", js(clip="*" * 100_000), ".json"),
        ("deep JSON", b'{"annotation": ' + DEEP_JSON.encode() + b"}", ".json"),
        ("deep TOML arrays", b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n", ".toml"),
        ("200k entries", json.dumps([{"clip": "*", "kind": "loop"}] * 200_000).encode(), ".json"),
        ("not UTF-8", b'[[annotation]]\nclip = "\xff"\n', ".toml"),
        ("empty", b"", ".json"),
    ]


def bad_tracker_files() -> list[tuple[str, bytes, str]]:
    """(name, file bytes, suffix) of tracker files that must be refused."""
    pose = {"position": [0, 1.6, 0], "rotation": [1, 0, 0, 0]}
    fr = lambda t=None, **kw: {**({"t": t} if t is not None else {}), "hmd": pose, "left": pose, "right": pose, **kw}
    js = lambda frames, **kw: json.dumps({**kw, "frames": frames}).encode()
    header = "t," + ",".join(f"{d}_{c}" for d in ("hmd", "left", "right") for c in ("px", "py", "pz", "qw", "qx", "qy", "qz"))
    row = lambda t: f"{t}," + ",".join(["0,1.6,0,1,0,0,0"] * 3)
    return [
        ("two frames an hour apart", js([fr(0.0), fr(3600.0)]), ".json"),
        ("csv an hour apart", f"{header}\n{row(0)}\n{row(3600)}\n".encode(), ".csv"),
        ("tiny frame times", js([fr(k * 1e-9) for k in range(50)]), ".json"),
        ("fps 1e-300", js([fr(), fr()], fps=1e-300), ".json"),
        ("fps 1e300", js([fr(), fr()], fps=1e300), ".json"),
        ("fps 400 digits", b'{"fps": ' + BIG.encode() + b', "frames": [' + json.dumps(fr()).encode() + b"]}", ".json"),
        ("t 400 digits", b'{"frames": [{"t": ' + BIG.encode() + b', "hmd": null, "left": null, "right": null}]}', ".json"),
        ("position 400 digits", js([fr(0.0), fr(0.1)]).replace(b"1.6", BIG.encode(), 1), ".json"),
        ("position 1e300", js([fr(0.0), fr(0.1, hmd={"position": [1e300, 0, 0], "rotation": [1, 0, 0, 0]})]), ".json"),
        ("csv position 1e300", f"{header}\n{row(0)}\n{row(0.1).replace('1.6', '1e300', 1)}\n".encode(), ".csv"),
        ("rotation 1e300", js([fr(0.0), fr(0.1, left={"position": [0, 1, 0], "rotation": [1e300, 0, 0, 0]})]), ".json"),
        ("rotation zero", js([fr(0.0), fr(0.1, left={"position": [0, 1, 0], "rotation": [0, 0, 0, 0]})]), ".json"),
        ("deep nesting", b'{"frames": ' + DEEP_JSON.encode() + b"}", ".json"),
        ("csv field 1 MB", f"{header}\n{row(0)}\n".encode() + b'"' + b"x" * (1 << 20) + b'"\n', ".csv"),
        ("csv 2 million rows", f"{header}\n".encode() + b"\n" * 2_000_001, ".csv"),
        ("csv not UTF-8", f"{header}\n".encode() + b"\xff\xfe\n", ".csv"),
        ("times decrease", js([fr(1.0), fr(0.5)]), ".json"),
        ("settings alpha 1e308", js([fr(0.0), fr(0.1)], settings={"alpha": 1e308}), ".json"),
        ("unknown top-level field", js([fr(0.0), fr(0.1)], alpha=0.3), ".json"),
        ("unknown frame field", js([fr(0.0), fr(0.1, alpha=1e308)]), ".json"),
        ("unknown device field", js([fr(0.0), fr(0.1, hmd={**pose, "velocity": [0, 0, 0]})]), ".json"),
        ("csv unknown column", f"{header},alpha\n{row(0)},1e308\n{row(0.1)},1e308\n".encode(), ".csv"),
        ("empty", b"", ".json"),
    ]


def bad_role_maps() -> list[tuple[str, bytes]]:
    """(name, TOML bytes) of role maps that must be refused (both --map and --character-map)."""
    return [
        ("value number", b'[roles]\nhips = 5\n'),
        ("value 400 digits", b"[roles]\nhips = " + BIG.encode() + b"\n"),
        ("value inf", b"[roles]\nhips = inf\n"),
        ("value table", b'[roles]\nhips = {a = "b"}\n'),
        ("deep arrays", b"[roles]\nhips = " + b"[" * 5000 + b"]" * 5000 + b"\n"),
        ("deep inline tables", b"[roles]\nhips = " + b"{a = " * 3000 + b"1" + b"}" * 3000 + b"\n"),
        ("roles a string", b'roles = "hips"\n'),
        ("roles a number", b"roles = 5\n"),
        ("unknown joint", b'[roles]\nhips = "NoSuchJoint"\n'),
        ("unknown role", b'[roles]\ntail = "Hips"\n'),
        ("not TOML", b"[roles\nhips = \n"),
        ("not UTF-8", b'[roles]\nhips = "\xff"\n'),
        ("10k entries", b"[roles]\n" + b"".join(b'r%d = "Hips"\n' % k for k in range(10_000))),
    ]


def bad_role_structures(skeleton, roles: dict) -> list[tuple[str, bytes]]:
    """(name, TOML bytes) of role maps naming joints of `skeleton` (roles: its detected roles) that no body
    has: two roles on one joint, a role above the one it hangs from."""
    names = skeleton.names
    n = lambda role: names[roles[role]]
    height = np.zeros(len(names))          # rest pose heights (parents come first)
    for j, p in enumerate(skeleton.parents):
        height[j] = skeleton.offsets[j][1] + (height[p] if p >= 0 else 0.0)
    top = int(np.argmax(height))
    table = lambda **kw: ("[roles]\n" + "".join(f'{k} = "{v}"\n' for k, v in kw.items())).encode()
    return [
        ("both feet on one joint", table(left_foot=n("left_foot"), right_foot=n("left_foot"))),
        ("hips on a toe", table(hips=n("left_toe"))),
        ("hips on a toe, toe moved", table(hips=n("left_toe"), left_toe=n("left_foot"),
                                           left_foot=n("left_lower_leg"))),
        ("a foot on the highest joint", table(left_foot=names[top])),
        ("a foot on the head", table(left_foot=n("head"))),
        ("head in a leg", table(head=n("left_foot"), left_foot=n("left_toe"), left_toe=names[top])),
        ("every role on the hips", table(**{r: n("hips") for r in ROLES})),
        ("hand in a leg", table(left_hand=n("right_toe"))),
    ]


def bad_joint_mappings(names, roles: dict) -> list[tuple[str, bytes]]:
    """(name, TOML bytes) of retarget mappings (`retarget --map`) for a skeleton retargeted onto itself that
    must be refused."""
    joints = "[joints]\n" + "".join(f'"{v}" = "{v}"\n' for v in names) + "\n"
    every = "".join(f'{r} = "{names[roles["hips"]]}"\n' for r in ROLES)
    return [
        ("every target role on the hips", (joints + "[target_roles]\n" + every).encode()),
        ("every source role on the hips", (joints + "[source_roles]\n" + every).encode()),
        ("feet on one joint", (joints + f'[source_roles]\nright_foot = "{names[roles["left_foot"]]}"\n').encode()),
        ("unknown role", (joints + '[target_roles]\ntail = "Hips"\n').encode()),
        ("unknown table", (joints + "[settings]\nalpha = 1e308\n").encode()),
        ("no joints", b'[source_roles]\nhips = "Hips"\n'),
        ("joint unknown", b'[joints]\nNoSuchJoint = "Hips"\n'),
        ("value a number", (joints + "[target_roles]\nhips = 5\n").encode()),
        ("deep arrays", b"[joints]\nHips = " + b"[" * 5000 + b"]" * 5000 + b"\n"),
        ("value 400 digits", b"[joints]\nHips = " + BIG.encode() + b"\n"),
        ("2 MB", b"# " + b"x" * (2 << 20) + b"\n"),
        ("not UTF-8", b'[joints]\nHips = "\xff"\n'),
    ]


def bad_settings_files() -> list[tuple[str, bytes]]:
    """(name, TOML bytes) of settings files (`--settings`, `tune` outputs) that must be refused."""
    return [
        ("bias 400 digits", b"[character]\nbias = " + BIG.encode() + b"\n"),
        ("bias inf", b"[character]\nbias = inf\n"),
        ("bias nan", b"[character]\nbias = nan\n"),
        ("bias beyond max", b"[character]\nbias = 1e9\n"),
        ("bias a string", b'[character]\nbias = "0.1"\n'),
        ("bias a boolean", b"[character]\nbias = true\n"),
        ("character a number", b"character = 5\n"),
        ("character a boolean", b"character = true\n"),
        ("unknown table", b"[nonsense]\nx = 1\n"),
        ("unknown key", b"[character]\nno_such_key = 1\n"),
        ("weights unknown channel", b"[character.weights]\nno_such_channel = 1.0\n"),
        ("weight negative", b"[character.weights]\ntrajectory_position = -1.0\n"),
        ("[weights] unknown channel", b"[weights]\nno_such_channel = 1.0\n"),
        ("[weights] weight beyond max", b"[weights]\ntrajectory_position = 11.0\n"),
        ("[weights] a number", b"weights = 1.0\n"),
        ("deep arrays", b"[character]\nbias = " + b"[" * 5000 + b"]" * 5000 + b"\n"),
        ("deep inline tables", b"[character]\nbias = " + b"{a = " * 3000 + b"1" + b"}" * 3000 + b"\n"),
        ("not TOML", b"[character\nbias = \n"),
        ("not UTF-8", b'[character]\ncomment = "\xff"\n'),
        ("2 MB", b"# " + b"x" * (2 << 20) + b"\n"),
        ("10k keys", b"[character]\n" + b"".join(b"k%d = 1\n" % k for k in range(10_000))),
    ]


def bad_tag_expressions() -> list[tuple[str, str]]:
    return [
        ("not x5000", "! " * 5000 + "mirrored"),
        ("3000 parentheses", "(" * 3000 + "mirrored" + ")" * 3000),
        ("excludes every clip", "mirrored & !mirrored"),
        ("unknown tag", "no-such-tag"),
        ("100k characters", " | ".join(["mirrored"] * 12000)),
        ("unbalanced", "(mirrored"),
        ("empty operator", "mirrored &"),
    ]


def fuzz_files(db, out_dir) -> dict:
    """Run every campaign of this module against db (its clips, tags and skeleton): {door: Outcome}."""
    out_dir = Path(out_dir)
    report = {k: Outcome() for k in ("crowd files", "event sidecars", "annotation sidecars", "tracker files",
                                     "role maps", "retarget maps", "tag expressions", "settings files",
                                     "obstacles")}

    def write(k, raw, suffix):
        f = out_dir / f"bad_{k:03d}{suffix}"
        f.write_bytes(raw)
        return f

    for k, (name, raw) in enumerate(bad_crowds()):
        f = write(k, raw, ".json")
        classify(report["crowd files"], name, f, True, (CrowdError,), lambda: check_agents(db, load_crowd(f), f))

    def events(f):
        sidecar_marks(load_sidecar(f), db.range_names, db.range_starts, db.range_stops, db.fps)
    for k, (name, raw, suffix) in enumerate(bad_event_files()):
        f = write(100 + k, raw, suffix)
        classify(report["event sidecars"], name, f, True, (EventError,), lambda: events(f))
    for path in ("/dev/zero", str(out_dir)):
        classify(report["event sidecars"], path, path, True, (EventError,), lambda: events(path))
    def windows(f):
        resolve(load_annotations(f), db.range_names, db.range_starts, db.range_stops, db.fps)
    for k, (name, raw, suffix) in enumerate(bad_annotation_files()):
        f = write(500 + k, raw, suffix)
        classify(report["annotation sidecars"], name, f, True, (AnnotationError,), lambda: windows(f))
    for path in ("/dev/zero", str(out_dir)):
        classify(report["annotation sidecars"], path, path, True, (AnnotationError,), lambda: windows(path))
    for k, (name, raw, suffix) in enumerate(bad_tracker_files()):
        f = write(200 + k, raw, suffix)
        classify(report["tracker files"], name, f, True, (TrackerFileError,), lambda: read_trackers(f))

    skel = db.skeleton
    for k, (name, raw) in enumerate(bad_role_maps() + bad_role_structures(skel, db.roles)):
        f = write(300 + k, raw, ".toml")
        for table in (True, False):
            classify(report["role maps"], f"{name} ({'--map' if table else '--character-map'})", f, True,
                     (SkeletonError,), lambda: load_mapping(f, table, skel.names, skel.parents))
    clip = Animation(skel, db.positions[:20], db.rotations[:20], db.fps)
    for k, (name, raw) in enumerate(bad_joint_mappings(skel.names, db.roles)):
        f = write(700 + k, raw, ".toml")
        classify(report["retarget maps"], name, f, True, (RetargetError,),
                 lambda: retarget_animation(clip, clip, mapping=f))
    for k, (name, raw) in enumerate(bad_settings_files()):
        f = write(400 + k, raw, ".toml")
        classify(report["settings files"], name, f, True, (SettingsError,), lambda: load_settings(f, db.features.schema.names))
    for path in ("/dev/zero", str(out_dir)):
        classify(report["settings files"], path, path, True, (SettingsError,), lambda: load_settings(path, db.features.schema.names))
    for k, (name, value) in enumerate(bad_obstacles()):
        # The same list in a crowd file (an agent at the origin) and in a scenario file.
        f = write(500 + k, b'{"duration": 2, "agents": [{"start": [0, 0], "goal": [3, 0]}], "obstacles": ' + value
                  + b"}", ".json")
        classify(report["obstacles"], f"{name} (crowd)", f, True, (CrowdError,), lambda: load_crowd(f))
        g = write(550 + k, b'{"duration": 2, "inputs": [{"t": 0, "move": [0, 1]}], "obstacles": ' + value + b"}",
                  ".json")
        if name != "start inside":          # a scenario's character may start anywhere
            classify(report["obstacles"], f"{name} (scenario)", g, True, (ScenarioError,), lambda: load_scenario(g))
    for name, expr in bad_tag_expressions():
        classify(report["tag expressions"], name, "tag expression", True, (TagExpressionError,),
                 lambda: range_mask(expr, db.range_tags))
    return report
