"""A rigged .glb a careless or hostile user gives `export --mesh` (and `serve --character`): a VRM humanoid
table of the wrong kind, a megabyte-long joint name, a JSON chunk of 40 MB, roles no body has. Each is one
error naming the file and the part, before anything is written."""
from __future__ import annotations

import json
import tracemalloc

import pytest

from motionmatch.body.rigged_model import load_rigged_model
from motionmatch.cli import main
from motionmatch.devtools.fuzz_rigs import EXTRAS_BYTES, glb_bytes, split_glb
from motionmatch.io.gltf import MAX_JSON_CHUNK_BYTES, GLTFError
from motionmatch.motion.skeleton import SkeletonError
from rig_fixtures import write_mixamo_rig


@pytest.fixture
def rig(tmp_path):
    doc, blob = split_glb(write_mixamo_rig(tmp_path / "base.glb")[0].read_bytes())
    return doc, blob


def _write(tmp_path, name, doc, blob):
    (tmp_path / name).write_bytes(glb_bytes(doc, blob))
    return tmp_path / name


def _node(doc, name):
    return next(i for i, n in enumerate(doc["nodes"]) if n.get("name") == name)


@pytest.mark.parametrize("key, table", [("VRM", "hips"), ("VRMC_vrm", "hips"), ("VRM", {"humanBones": "hips"}),
                                        ("VRMC_vrm", {"humanBones": [1]})])
def test_a_vrm_humanoid_of_the_wrong_kind_names_the_table(rig, tmp_path, key, table):
    doc, blob = rig
    doc["extensions"] = {key: {"humanoid": table}}
    f = _write(tmp_path, "vrm.glb", doc, blob)
    with pytest.raises(GLTFError, match=rf"vrm.glb: extensions.{key}.humanoid.humanBones: expected"):
        load_rigged_model(f)


def test_joint_names_are_bounded(rig, tmp_path):
    doc, blob = rig
    k = _node(doc, "mixamorig:LeftFoot")
    doc["nodes"][k]["name"] = "LeftFoot" + "x" * (1 << 20)
    with pytest.raises(GLTFError, match=rf"name.glb: nodes\[{k}\].name: expected a string of at most 256 characters"):
        load_rigged_model(_write(tmp_path, "name.glb", doc, blob))


def test_a_json_chunk_beyond_its_bound_is_refused_before_parsing(rig, tmp_path):
    doc, blob = rig
    head, tail = json.dumps({**doc, "extras": "@@"}).encode().split(b'"@@"')
    f = tmp_path / "extras.glb"
    f.write_bytes(glb_bytes(head + b"[" + b"0," * (EXTRAS_BYTES // 2) + b"0]" + tail, blob))
    tracemalloc.start()
    with pytest.raises(GLTFError, match=rf"extras.glb: the JSON chunk holds [\d,]+ bytes, beyond the bound of "
                                        rf"{MAX_JSON_CHUNK_BYTES:,}"):
        load_rigged_model(f)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # The file's bytes and the chunk's (80 MB measured); parsed, it went past 3 GB (issue 43).
    assert peak < 3 * EXTRAS_BYTES, peak


@pytest.mark.parametrize("bones, message", [
    ({"leftFoot": "mixamorig:LeftFoot", "rightFoot": "mixamorig:LeftFoot"},
     "roles left_foot and right_foot are both joint 'mixamorig:LeftFoot'"),
    ({"hips": "mixamorig:LeftToeBase"}, "roles hips and left_toe are both joint 'mixamorig:LeftToeBase'"),
    ({"leftFoot": "mixamorig:HeadTop_End"}, "role left_foot \\(joint 'mixamorig:HeadTop_End'\\) is not below role "
                                            "left_lower_leg"),
])
def test_vrm_roles_no_body_has_are_refused(rig, tmp_path, bones, message):
    doc, blob = rig
    doc["extensions"] = {"VRM": {"humanoid": {"humanBones": [{"bone": b, "node": _node(doc, n)}
                                                             for b, n in bones.items()]}}}
    with pytest.raises(SkeletonError, match=rf"vrm.glb: not a humanoid rig the app can drive: {message}"):
        load_rigged_model(_write(tmp_path, "vrm.glb", doc, blob))


def test_export_with_a_bad_model_is_one_line_and_writes_nothing(rig, walk_bvh, tmp_path, capsys):
    doc, blob = rig
    doc["extensions"] = {"VRM": {"humanoid": "hips"}}
    f = _write(tmp_path, "vrm.glb", doc, blob)
    code = main(["export", str(walk_bvh), "-o", str(tmp_path / "out.glb"), "--mesh", str(f)])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "vrm.glb: extensions.VRM.humanoid.humanBones" in err
    assert not (tmp_path / "out.glb").exists()
