"""Hostile-input campaigns for glTF binaries (.glb): damaged copies of a valid rigged GLB, fed through
both doors a user has (`export --mesh`: load, retarget a clip, write; `serve --character`: load and
build the page's retarget table), and damaged copies of an animated GLB fed to the clip reader
(`build clips/*.glb`: io.gltf_clips). Every damage must give a GLTFError or SkeletonError naming the
file; a damage that is a valid file (a deep node chain, a skeleton without a skin) may also be accepted.
"""
from __future__ import annotations

import copy
import json
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np
from .fuzz import Outcome, classify
from ..io.gltf import GLTFError
from ..io.gltf_clips import read_gltf_clips
from ..app.backend import character_for
from ..body.export import export_gltf
from ..motion.skeleton import SkeletonError, find_roles
from ..posedb.database import load_database
from ..io.bvh import read_bvh
from ..body.mesh import ensure_body_glb
from ..io.gltf import write_gltf
from . import fuzz_files
from . import fuzz_logs
from . import fuzz_models


EXTRAS_BYTES = 40 << 20      # the `extras` blob of the campaign's largest JSON chunk


def glb_bytes(doc: dict | bytes, blob: bytes) -> bytes:
    """A .glb container around a JSON document (or its text) and a binary chunk (both padded to 4 bytes)."""
    js = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    js += b" " * (-len(js) % 4)
    blob = blob + b"\0" * (-len(blob) % 4)
    chunks = struct.pack("<II", len(js), 0x4E4F534A) + js
    if blob:
        chunks += struct.pack("<II", len(blob), 0x004E4942) + blob
    return b"glTF" + struct.pack("<II", 2, 12 + len(chunks)) + chunks


def split_glb(data: bytes) -> tuple[dict, bytes]:
    """(JSON document, binary chunk) of a well-formed .glb."""
    n = struct.unpack_from("<I", data, 12)[0]
    doc = json.loads(data[20:20 + n])
    m = struct.unpack_from("<I", data, 20 + n)[0]
    return doc, data[28 + n:28 + n + m]


def _damages(doc: dict, blob: bytes) -> list[tuple[str, object, bool]]:
    """(name, doc changer or raw bytes, must be refused). A changer gets (doc, blob as bytearray) copies
    and edits them in place."""
    skin = doc["skins"][0]
    mesh_node = next(i for i, n in enumerate(doc["nodes"]) if "mesh" in n)
    prim = doc["meshes"][0]["primitives"][0]
    POS, JNT, WGT = (prim["attributes"][k] for k in ("POSITION", "JOINTS_0", "WEIGHTS_0"))
    IBM, IDX = skin["inverseBindMatrices"], prim["indices"]
    root = skin["joints"][0]
    child = doc["nodes"][root]["children"][0]
    J = len(doc["nodes"])

    def acc(i, **kw):
        return lambda d, b: d["accessors"][i].update(kw)

    def view_of(i, **kw):
        return lambda d, b: d["bufferViews"][d["accessors"][i]["bufferView"]].update(kw)

    def node(i, **kw):
        return lambda d, b: d["nodes"][i].update(kw)

    def blob_value(i, value, row=0, col=0, dtype=np.float32):
        def f(d, b):
            a = d["accessors"][i]
            v = d["bufferViews"][a["bufferView"]]
            at = v.get("byteOffset", 0) + a.get("byteOffset", 0)
            width = {"SCALAR": 1, "VEC3": 3, "VEC4": 4, "MAT4": 16}[a["type"]]
            size = np.dtype(dtype).itemsize
            k = at + (row * width + col) * size
            b[k:k + size] = np.array([value], dtype).tobytes()
        return f

    def set_key(path, value):
        def f(d, b):
            *head, last = path
            for k in head:
                d = d[k]
            d[last] = value
        return f

    def delete(*path):
        def f(d, b):
            *head, last = path
            for k in head:
                d = d[k]
            del d[last]
        return f

    def chain(d, b):                      # 3000 nodes deep under the mesh node: valid, no recursion allowed
        n0 = len(d["nodes"])
        d["nodes"] += [{"name": f"c{k}", "children": [n0 + k + 1]} for k in range(2999)] + [{"name": "c2999"}]
        d["nodes"][mesh_node].setdefault("children", []).append(n0)

    def every_weight(value):
        def f(d, b):
            a = d["accessors"][WGT]
            v = d["bufferViews"][a["bufferView"]]
            at = v.get("byteOffset", 0) + a.get("byteOffset", 0)
            b[at:at + 16 * a["count"]] = np.full(4 * a["count"], value, np.float32).tobytes()
        return f

    names = [doc["nodes"][n].get("name", "") for n in skin["joints"]]
    role_node = {r: skin["joints"][j] for r, j in find_roles(names, required=()).items()}

    def vrm0(**bones):          # a VRM 0.x humanoid table: bone -> node
        return set_key(["extensions"], {"VRM": {"humanoid": {"humanBones": [{"bone": b, "node": n}
                                                                          for b, n in bones.items()]}}})

    big = 10 ** 400
    data = glb_bytes(doc, blob)
    return [
        ("pos_count_huge_1e9", acc(POS, count=10 ** 9), True),
        ("pos_count_plus_1", lambda d, b: d["accessors"][POS].update(count=d["accessors"][POS]["count"] + 1), True),
        ("pos_count_zero", acc(POS, count=0), True),
        ("pos_count_negative", acc(POS, count=-5), True),
        ("pos_count_string", acc(POS, count="10"), True),
        ("pos_count_float", acc(POS, count=10.5), True),
        ("pos_byte_offset_huge", acc(POS, byteOffset=1 << 40), True),
        ("pos_byte_offset_negative", acc(POS, byteOffset=-4096), True),
        ("ibm_count_huge", acc(IBM, count=1 << 31), True),
        ("indices_count_huge", acc(IDX, count=1 << 33), True),
        ("view_stride_4000", view_of(POS, byteStride=4000), True),
        ("view_stride_252", view_of(POS, byteStride=252), True),
        ("view_stride_2", view_of(POS, byteStride=2), True),
        ("view_length_huge", view_of(POS, byteLength=1 << 40), True),
        ("view_offset_huge", view_of(POS, byteOffset=(1 << 31) - 1), True),
        ("view_offset_negative", view_of(POS, byteOffset=-100), True),
        ("view_wrong_buffer", view_of(POS, buffer=1), True),
        ("view_buffer_negative", view_of(POS, buffer=-1), True),
        ("view_index_out_of_range", acc(POS, bufferView=10 ** 6), True),
        ("view_index_negative", acc(POS, bufferView=-1), True),
        ("buffer_length_huge", set_key(["buffers", 0, "byteLength"], 1 << 40), True),
        ("buffer_uri_passwd", set_key(["buffers", 0, "uri"], "/etc/passwd"), True),
        ("buffer_uri_relative", set_key(["buffers", 0, "uri"], "../../secret.bin"), True),
        ("buffer_uri_data", set_key(["buffers", 0, "uri"], "data:application/octet-stream;base64,AAAA"), True),
        ("second_buffer_file", lambda d, b: d["buffers"].append({"uri": "/etc/hosts", "byteLength": 10}), True),
        ("image_uri_file", set_key(["images"], [{"uri": "/etc/passwd"}]), True),
        ("component_type_bogus", acc(POS, componentType=9999), True),
        ("type_bogus", acc(POS, type="VEC7"), True),
        ("position_as_ints", acc(POS, componentType=5125), True),
        ("sparse_accessor", acc(POS, sparse={"count": 10 ** 9, "indices": {}, "values": {}}), True),
        ("cycle_self_child", node(root, children=[root] + doc["nodes"][root]["children"]), True),
        ("cycle_two_nodes", lambda d, b: d["nodes"][child].setdefault("children", []).append(root), True),
        ("child_out_of_range", node(root, children=[J + 1000]), True),
        ("child_negative", node(root, children=[-1]), True),
        ("child_shared", lambda d, b: d["nodes"][mesh_node].setdefault("children", []).append(child), True),
        ("children_not_list", node(root, children=5), True),
        ("skin_joint_negative", lambda d, b: d["skins"][0]["joints"].__setitem__(1, -1), True),
        ("skin_joint_out_of_range", lambda d, b: d["skins"][0]["joints"].__setitem__(1, 10 ** 6), True),
        ("skin_joint_twice", lambda d, b: d["skins"][0]["joints"].__setitem__(1, root), True),
        ("skin_joints_empty", set_key(["skins", 0, "joints"], []), True),
        ("skin_ibm_out_of_range", set_key(["skins", 0, "inverseBindMatrices"], 10 ** 6), True),
        ("node_skin_out_of_range", node(mesh_node, skin=99), True),
        ("node_mesh_out_of_range", node(mesh_node, mesh=99), True),
        ("rotation_zero", node(child, rotation=[0, 0, 0, 0]), True),
        ("rotation_short", node(child, rotation=[0, 0, 1]), True),
        ("rotation_inf", node(child, rotation=[0, 0, 0, 1e400]), True),
        ("translation_1e300", node(child, translation=[1e300, 0, 0]), True),
        ("translation_string", node(child, translation=["0", 0, 0]), True),
        ("scale_zero", node(root, scale=[0, 0, 0]), True),
        ("scale_huge_chain", lambda d, b: [d["nodes"][k].update(scale=[1e6] * 3) for k in skin["joints"]], True),
        ("matrix_short", node(child, matrix=[1, 0, 0]), True),
        ("name_number", node(child, name=12), True),
        ("names_duplicate", node(child, name=doc["nodes"][root].get("name", "x")), True),
        ("no_nodes", delete("nodes"), True),
        ("nodes_not_list", set_key(["nodes"], {"a": 1}), True),
        ("nodes_of_numbers", set_key(["nodes"], [1, 2, 3]), True),
        ("no_skins", delete("skins"), True),
        ("nodes_100k", lambda d, b: d["nodes"].extend({} for _ in range(100_000)), True),
        ("huge_integer", set_key(["extras"], big), True),
        ("deep_extras", lambda d, b: None, True),      # replaced below by raw bytes
        ("vrm_garbage", set_key(["extensions"], {"VRM": {"humanoid": {"humanBones": [{"bone": "hips", "node": [1]}]}}}), True),
        ("vrm_node_string", set_key(["extensions"], {"VRMC_vrm": {"humanoid": {"humanBones": {"hips": {"node": "0"}}}}}), True),
        ("vrm0_humanoid_string", set_key(["extensions"], {"VRM": {"humanoid": "hips"}}), True),
        ("vrm1_humanoid_string", set_key(["extensions"], {"VRMC_vrm": {"humanoid": "hips"}}), True),
        ("vrm0_not_a_table", set_key(["extensions"], {"VRM": [1, 2]}), True),
        ("vrm_feet_on_one_node", vrm0(leftFoot=role_node["left_foot"], rightFoot=role_node["left_foot"]), True),
        ("vrm_hips_on_a_toe", vrm0(hips=role_node["left_toe"]), True),
        ("vrm_foot_on_the_head", vrm0(leftFoot=role_node["head"]), True),
        ("joint_name_1MB", node(child, name="x" * (1 << 20)), True),
        ("extras_40MB", lambda d, b: None, True),      # replaced below by raw bytes
        ("position_nan", blob_value(POS, np.nan, row=3), True),
        ("position_1e38", blob_value(POS, 1e38, row=3), True),
        ("normal_inf", blob_value(prim["attributes"]["NORMAL"], np.inf, row=1), True),
        ("weight_nan", blob_value(WGT, np.nan, row=2), True),
        ("weights_negative", every_weight(-0.25), True),
        ("weights_zero", every_weight(0.0), True),
        ("ibm_nan", blob_value(IBM, np.nan, row=1, col=5), True),
        ("ibm_1e38", blob_value(IBM, 1e38, row=0, col=12), True),
        ("joint_slot_beyond_skin", blob_value(JNT, 250, row=0, dtype=np.uint8 if doc["accessors"][JNT]["componentType"] == 5121 else np.uint16), True),
        ("index_beyond_vertices", blob_value(IDX, 65000, row=0, dtype=np.uint16 if doc["accessors"][IDX]["componentType"] == 5123 else np.uint32), True),
        ("indices_not_triangles", lambda d, b: d["accessors"][IDX].update(count=d["accessors"][IDX]["count"] - 1), True),
        ("mode_lines", lambda d, b: d["meshes"][0]["primitives"][0].update(mode=1), True),
        ("deep_chain_3000", chain, False),
        ("truncated_half", data[:len(data) // 2], True),
        ("truncated_last_byte", data[:-1], True),
        ("header_length_huge", data[:8] + struct.pack("<I", 1 << 31) + data[12:], True),
        ("chunk_length_huge", data[:12] + struct.pack("<I", 1 << 31) + data[16:], True),
        ("json_chunk_garbage", data[:20] + b"\xff" * 16 + data[36:], True),
        ("deep_nesting_json", None, True),
        ("not_glb", b"PK\x03\x04" + bytes(100), True),
        ("empty", b"", True),
        ("version_1", data[:4] + struct.pack("<I", 1) + data[8:], True),
    ]


def damaged_glbs(base: bytes, out_dir) -> list[tuple[str, Path, bool]]:
    """Write damaged copies of the valid .glb `base` into out_dir: [(damage, file, must be refused)]."""
    out_dir = Path(out_dir)
    doc, blob = split_glb(base)
    files = []
    for k, (name, change, refuse) in enumerate(_damages(doc, blob)):
        if name == "deep_extras":
            d = copy.deepcopy(doc)
            d["extras"] = "@@"
            raw = glb_bytes(json.dumps(d).replace('"@@"', "[" * 5000 + "]" * 5000).encode(), blob)
        elif name == "extras_40MB":        # 20 million small values (issue 43: killed at 3.1 GB)
            d = copy.deepcopy(doc)
            d["extras"] = "@@"
            head, tail = json.dumps(d).encode().split(b'"@@"')
            raw = glb_bytes(head + b"[" + b"0," * (EXTRAS_BYTES // 2) + b"0]" + tail, blob)
        elif name == "deep_nesting_json":
            raw = glb_bytes(b'{"asset": {"version": "2.0"}, "x": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5001, b"")
        elif isinstance(change, bytes):
            raw = change
        else:
            d, b = copy.deepcopy(doc), bytearray(blob)
            change(d, b)
            raw = glb_bytes(d, bytes(b))
        f = out_dir / f"damaged_{k:03d}.glb"
        f.write_bytes(raw)
        files.append((name, f, refuse))
    return files


def _clip_damages(doc: dict) -> list[tuple[str, object, bool]]:
    """(name, changer (doc, blob) -> None, must be refused) of an animated GLB's animations."""
    an = doc["animations"][0]
    ch0 = an["channels"][0]
    times, rot_out = an["samplers"][ch0["sampler"]]["input"], an["samplers"][ch0["sampler"]]["output"]
    trans = next(c for c in an["channels"] if c["target"]["path"] == "translation")
    trans_out = an["samplers"][trans["sampler"]]["output"]

    def at(acc):     # byte offset of an accessor's first value in the blob
        a = doc["accessors"][acc]
        return doc["bufferViews"][a["bufferView"]].get("byteOffset", 0) + a.get("byteOffset", 0)

    def put(acc, k, fmt, *v):
        return lambda d, b: struct.pack_into(fmt, b, at(acc) + k * struct.calcsize(fmt), *v)

    def edit(fn):
        return lambda d, b: fn(d["animations"][0], d)
    n = doc["accessors"][times]["count"]
    return [
        ("clip_no_animations", lambda d, b: d.pop("animations"), True),
        ("clip_times_backwards", put(times, 1, "<f", -1.0), True),
        ("clip_time_nan", put(times, 2, "<f", float("nan")), True),
        ("clip_time_1e9_s", put(times, n - 1, "<f", 1e9), True),
        ("clip_long_but_bounded", put(times, n - 1, "<f", 3000.0), True),     # 180k frames x nodes
        ("clip_zero_quaternion", put(rot_out, 0, "<4f", 0.0, 0.0, 0.0, 0.0), True),
        ("clip_translation_1e30", put(trans_out, 0, "<3f", 1e30, 0.0, 0.0), True),
        ("clip_interpolation_bezier", edit(lambda a, d: a["samplers"][0].update(interpolation="BEZIER")), True),
        ("clip_cubic_without_tangents", edit(lambda a, d: a["samplers"][0].update(interpolation="CUBICSPLINE")),
         True),
        ("clip_step", edit(lambda a, d: [s.update(interpolation="STEP") for s in a["samplers"]]), False),
        ("clip_output_count", lambda d, b: d["accessors"][rot_out].update(count=n - 1), True),
        ("clip_times_vec3", lambda d, b: d["accessors"][times].update(type="VEC3", count=n // 3), True),
        ("clip_target_node_99999", edit(lambda a, d: a["channels"][0]["target"].update(node=99999)), True),
        ("clip_sampler_99999", edit(lambda a, d: a["channels"][0].update(sampler=99999)), True),
        ("clip_only_weights", edit(lambda a, d: [c["target"].update(path="weights") for c in a["channels"]]), True),
        ("clip_no_skin", lambda d, b: (d.pop("skins"), [n_.pop("skin", None) for n_ in d["nodes"]]), False),
        ("clip_matrix_on_animated_node", lambda d, b: d["nodes"][0].update(matrix=[1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0,
                                                                                    0, 0, 0, 1]), True),
        ("clip_zero_scale_root", lambda d, b: d["nodes"][0].update(scale=[0, 0, 0]), True),
        ("clip_two_roots", lambda d, b: d["nodes"][0].update(children=d["nodes"][0]["children"][1:]), True),
        ("clip_duplicate_names", lambda d, b: d["nodes"][1].update(name=d["nodes"][2].get("name")), True),
        ("clip_external_buffer", lambda d, b: d["buffers"][0].update(uri="../../etc/passwd"), True),
    ]


def damaged_clip_glbs(base: bytes, out_dir) -> list[tuple[str, Path, bool]]:
    """Damaged copies of the animated .glb `base` (our export of a clip) in out_dir: [(damage, file,
    must be refused)]."""
    out_dir = Path(out_dir)
    doc, blob = split_glb(base)
    files = []
    for k, (name, change, refuse) in enumerate(_clip_damages(doc)):
        d, b = copy.deepcopy(doc), bytearray(blob)
        change(d, b)
        f = out_dir / f"damaged_clip_{k:03d}.glb"
        f.write_bytes(glb_bytes(d, bytes(b)))
        files.append((name, f, refuse))
    return files


def fuzz_clip_glbs(damaged):
    """The clip reader (what `build` runs on a .glb) for each damaged file: an Outcome."""
    out = Outcome()
    for name, f, refuse in damaged:
        classify(out, name, f, refuse, (GLTFError,), lambda: read_gltf_clips(f))
    return out


def fuzz_rigs(damaged, anim, db, db_path):
    """Both doors for each damaged model: (export Outcome, serve Outcome). anim: a short clip to retarget
    (export --mesh); db/db_path: the database the page's table is built for (serve --character)."""
    import tempfile

    export, serve = Outcome(), Outcome()
    with tempfile.TemporaryDirectory() as tmp:
        for name, f, refuse in damaged:
            classify(export, name, f, refuse, (GLTFError, SkeletonError),
                     lambda: export_gltf(anim, Path(tmp) / "out.glb", f))
            classify(serve, name, f, refuse, (GLTFError, SkeletonError),
                     lambda: character_for(db, db_path, f, None))
    return export, serve


def door_campaigns(db_path: Path, bvh: Path, tmp: Path) -> dict:
    """The campaigns of the doors added after BVH, databases and scenarios, keyed like the report."""
    db = load_database(db_path)
    anim = read_bvh(bvh)
    anim = replace(anim, positions=anim.positions[:30], rotations=anim.rotations[:30])
    (tmp / "glb").mkdir()
    damaged = damaged_glbs(ensure_body_glb(db_path, db.skeleton, db.roles).read_bytes(), tmp / "glb")
    export, serve = fuzz_rigs(damaged, anim, db, db_path)
    (tmp / "clips").mkdir()
    clip_glb = write_gltf(tmp / "clips" / "clip.glb", anim)
    clips = fuzz_clip_glbs(damaged_clip_glbs(clip_glb.read_bytes(), tmp / "clips"))
    (tmp / "files").mkdir()
    (tmp / "models").mkdir()
    return {**fuzz_files.fuzz_files(db, tmp / "files"),
            **fuzz_models.fuzz_models(db, fuzz_models.damaged_models(db, tmp / "models")),
            **fuzz_logs.fuzz_input_logs(db, tmp / "logs"),
            "rigged GLB (export)": export, "rigged GLB (serve)": serve, "glTF clips (build)": clips}
