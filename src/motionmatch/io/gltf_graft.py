"""A motion written into a user's own rigged model: the model's .glb copied whole (every mesh and skin,
materials, UVs, textures, extensions) with its animations replaced by one animation ("motion") that
drives its joint nodes.

The motion comes as the joints' world positions (metres) and rotations per frame, in the model's world
frame (what rigged_model.retarget_to_model gives). Each joint keeps the world scale of its rest pose (a
Mixamo rig under a 0.01-scaled armature stays in centimetres inside it), so the file's inverse bind
matrices stay valid; every node that is not a joint keeps its rest transform. A joint's channel values
are its world matrix expressed in its parent node's animated world frame.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from ..maths.rotations import quat_from_matrix, quat_to_matrix, quat_unroll
from .gltf import GLB, GLTFError, to_wxyz, to_xyzw

FLOAT, SCALAR_TIMES = 5126, "SCALAR"


def _rest_local(node: dict) -> np.ndarray:
    if "matrix" in node:
        return np.array(node["matrix"], np.float64).reshape(4, 4).T
    m = np.eye(4)
    r = to_wxyz(np.array(node.get("rotation", [0, 0, 0, 1]), np.float64))
    m[:3, :3] = quat_to_matrix(r / np.linalg.norm(r)) * np.array(node.get("scale", [1, 1, 1]), np.float64)[None]
    m[:3, 3] = node.get("translation", [0, 0, 0])
    return m


def graft_motion(glb: GLB, joint_nodes: list[int], gpos: np.ndarray, grot: np.ndarray, fps: float, out) -> Path:
    """Write glb (a checked model) to `out` with one animation moving node joint_nodes[j] to world
    position gpos[:, j] (F, J, 3, metres) and rotation grot[:, j] (F, J, 4) at `fps`. Returns the path."""
    doc = json.loads(json.dumps(glb.doc))           # a deep copy
    nodes = doc["nodes"]
    if any("matrix" in nodes[n] for n in joint_nodes):
        raise GLTFError(f"{glb.path}: a joint's rest transform is a matrix, which glTF does not let animations "
                        f"drive; re-export the model with translation/rotation/scale")
    F = len(gpos)
    parent = {c: i for i, n in enumerate(nodes) for c in n.get("children", [])}
    order = [i for i in range(len(nodes)) if i not in parent]
    for i in order:
        order.extend(nodes[i].get("children", []))
    rest_world = {}
    for n in order:
        rest_world[n] = _rest_local(nodes[n]) if n not in parent else rest_world[parent[n]] @ _rest_local(nodes[n])
    joint_of = {n: j for j, n in enumerate(joint_nodes)}
    world, local = {}, {}
    for n in order:
        p = parent.get(n)
        pw = np.broadcast_to(np.eye(4), (F, 4, 4)) if p is None else world[p]
        if n in joint_of:
            j = joint_of[n]
            scale = np.linalg.norm(rest_world[n][:3, :3], axis=0)
            m = np.zeros((F, 4, 4))
            m[:, :3, :3] = quat_to_matrix(grot[:, j]) * scale[None, None, :]
            m[:, :3, 3] = gpos[:, j]
            m[:, 3, 3] = 1.0
            world[n] = m
            local[n] = np.linalg.inv(pw) @ m
        else:
            world[n] = pw @ _rest_local(nodes[n])
    blob = bytearray(glb.blob)
    views, accessors = doc.setdefault("bufferViews", []), doc.setdefault("accessors", [])

    def add(array: np.ndarray, kind: str, minmax: bool = False) -> int:
        data = np.ascontiguousarray(array, np.float32)
        blob.extend(b"\0" * (-len(blob) % 4))
        views.append({"buffer": 0, "byteOffset": len(blob), "byteLength": data.nbytes})
        blob.extend(data.tobytes())
        acc = {"bufferView": len(views) - 1, "componentType": FLOAT, "count": len(data), "type": kind}
        if minmax:
            acc["min"], acc["max"] = [float(data.min())], [float(data.max())]
        accessors.append(acc)
        return len(accessors) - 1
    times = add((np.arange(F) / fps)[:, None], SCALAR_TIMES, minmax=True)
    samplers, channels = [], []
    for n in joint_nodes:
        L = local[n]
        s = np.linalg.norm(L[:, :3, :3], axis=1)
        q = quat_unroll(quat_from_matrix(L[:, :3, :3] / s[:, None, :]), axis=0)
        for path, values, kind in (("rotation", to_xyzw(q), "VEC4"), ("translation", L[:, :3, 3], "VEC3")):
            samplers.append({"input": times, "output": add(values, kind), "interpolation": "LINEAR"})
            channels.append({"sampler": len(samplers) - 1, "target": {"node": n, "path": path}})
    doc["animations"] = [{"name": "motion", "samplers": samplers, "channels": channels}]
    blob.extend(b"\0" * (-len(blob) % 4))
    if not doc.get("buffers"):
        doc["buffers"] = [{}]
    doc["buffers"][0]["byteLength"] = len(blob)
    doc.setdefault("asset", {"version": "2.0"})
    js = json.dumps(doc, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 4)
    body = struct.pack("<II", len(js), 0x4E4F534A) + js + struct.pack("<II", len(blob), 0x004E4942) + bytes(blob)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(b"glTF" + struct.pack("<II", 2, 12 + len(body)) + body)
    return out
