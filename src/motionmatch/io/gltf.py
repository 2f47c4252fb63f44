"""glTF 2.0 binary (.glb): export (skeleton, animation and an optional skinned mesh) and a checked reader.

glTF shares the library's frame: metres, Y up, right-handed, a model faces +Z. Only the quaternion
layout differs: glTF stores (x, y, z, w), the library (w, x, y, z); this module converts at the edge.

Layout of a written file: one node per joint (named like the joint, parent-first order, the skeleton's
offsets as rest translations and the bind pose's local rotations as rest rotations), one skin over all
joint nodes, a mesh node using that skin when a mesh is given, and one animation ("motion") sampled at
the animation's own frame times (60 fps for synthesized motion) with LINEAR interpolation: a rotation
channel per joint and a translation channel for each joint whose local position moves (the root).

Reading (read_glb, read_accessor) trusts nothing in the file: the container's lengths, every index, every
accessor's byte range inside its buffer view and every view inside the binary chunk are checked before a
byte is read; node trees must be trees; only the file's own binary chunk is read (a `uri` naming another
file is refused, so a model cannot make the reader open files the user did not name).
"""
from __future__ import annotations

import base64
import math
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..motion.animation import Animation, Skeleton
from ..files.input_bounds import parse_json, read_bounded
from ..maths.kinematics import forward_kinematics
from ..maths.rotations import quat_identity, quat_to_matrix, quat_unroll

FLOAT, UBYTE, USHORT, UINT = 5126, 5121, 5123, 5125
ARRAY_BUFFER, ELEMENT_ARRAY_BUFFER = 34962, 34963
MOVING_TRANSLATION_M = 1e-5     # a joint whose local position moves more than this gets a channel


class GLTFError(ValueError):
    """A glTF file that cannot be read or written as asked; the message names the file and the part."""


@dataclass
class SkinnedMesh:
    """A triangle mesh bound to a skeleton in its bind pose.

    positions, normals (V, 3) float32 in metres, in the bind pose's world frame; triangles (T, 3) uint32,
    counter-clockwise seen from outside; joints (V, 4) joint indices into the skeleton; weights (V, 4)
    float32 summing to 1 per vertex. bind_positions (J, 3) / bind_rotations (J, 4) are the local joint
    transforms of the bind pose. uvs (V, 2) float32 texture coordinates as glTF has them (origin top left,
    v down), or None.
    """

    positions: np.ndarray
    normals: np.ndarray
    triangles: np.ndarray
    joints: np.ndarray
    weights: np.ndarray
    bind_positions: np.ndarray
    bind_rotations: np.ndarray
    uvs: np.ndarray | None = None


@dataclass
class Material:
    """A surface in glTF's metallic-roughness terms, which USD's preview surface shares: base_color
    linear RGBA in [0, 1], metallic and roughness in [0, 1], emissive linear RGB; texture: the base
    colour image's bytes (PNG or JPEG, its kind in texture_type "png" | "jpg"), multiplied by base_color,
    or None."""

    name: str
    base_color: tuple = (1.0, 1.0, 1.0, 1.0)
    metallic: float = 1.0
    roughness: float = 1.0
    emissive: tuple = (0.0, 0.0, 0.0)
    double_sided: bool = False
    texture: bytes | None = None
    texture_type: str = "png"


@dataclass
class MeshPart:
    """One skinned mesh of a character with its material: name (its node's), mesh (SkinnedMesh)."""

    name: str
    mesh: SkinnedMesh
    material: Material


# The generated body's surface (body/mesh.py), in every format it is written to.
BODY_MATERIAL = Material(name="skin", base_color=(0.8, 0.76, 0.7, 1.0), metallic=0.0, roughness=0.6)


def to_xyzw(q: np.ndarray) -> np.ndarray:
    """(w, x, y, z) -> glTF's (x, y, z, w)."""
    return np.concatenate([q[..., 1:], q[..., :1]], axis=-1)


def to_wxyz(q: np.ndarray) -> np.ndarray:
    """glTF's (x, y, z, w) -> (w, x, y, z)."""
    return np.concatenate([q[..., 3:], q[..., :3]], axis=-1)


def inverse_bind_matrices(skeleton: Skeleton, bind_positions: np.ndarray, bind_rotations: np.ndarray) -> np.ndarray:
    """(J, 4, 4) inverses of the joints' world matrices in the bind pose (column vectors)."""
    gpos, grot = forward_kinematics(np.asarray(bind_positions, np.float64)[None],
                                    np.asarray(bind_rotations, np.float64)[None], skeleton.parents)
    m = np.zeros((skeleton.num_joints, 4, 4))
    m[:, :3, :3] = quat_to_matrix(grot[0])
    m[:, :3, 3] = gpos[0]
    m[:, 3, 3] = 1.0
    return np.linalg.inv(m)


class _Blob:
    """The GLB binary chunk: buffer views and accessors appended as arrays arrive."""

    def __init__(self, gltf):
        self.gltf, self.parts, self.size = gltf, [], 0

    def add(self, array: np.ndarray, component: int, kind: str, target: int | None = None,
            minmax: bool = False) -> int:
        import pygltflib as g
        data = np.ascontiguousarray(array).tobytes()
        pad = (-self.size) % 4
        self.parts.append(b"\0" * pad)
        self.size += pad
        self.gltf.bufferViews.append(g.BufferView(buffer=0, byteOffset=self.size, byteLength=len(data), target=target))
        self.parts.append(data)
        self.size += len(data)
        flat = np.asarray(array).reshape(len(array), -1)
        acc = g.Accessor(bufferView=len(self.gltf.bufferViews) - 1, componentType=component, count=len(array),
                         type=kind)
        if minmax:
            acc.min = [float(v) for v in flat.min(axis=0)]
            acc.max = [float(v) for v in flat.max(axis=0)]
        self.gltf.accessors.append(acc)
        return len(self.gltf.accessors) - 1

    def bytes(self) -> bytes:
        out = b"".join(self.parts)
        return out + b"\0" * ((-len(out)) % 4)


def write_gltf(path, anim: Animation | None = None, mesh: SkinnedMesh | None = None,
               skeleton: Skeleton | None = None) -> Path:
    """Write a .glb: the skeleton (anim's or `skeleton`), anim as animation "motion" when given, and
    `mesh` skinned to the skeleton when given. Returns the path."""
    import pygltflib as g

    skel = anim.skeleton if anim is not None else skeleton
    if skel is None:
        raise GLTFError(f"{path}: nothing to write (give an animation or a skeleton)")
    J = skel.num_joints
    if mesh is not None:
        rest_pos, rest_rot = np.asarray(mesh.bind_positions, np.float64), np.asarray(mesh.bind_rotations, np.float64)
    else:
        rest_pos, rest_rot = np.asarray(skel.offsets, np.float64), quat_identity((J,))
    gltf = g.GLTF2(asset=g.Asset(generator="motionmatch", version="2.0"), scene=0)
    blob = _Blob(gltf)
    children = [[] for _ in range(J)]
    for j, p in enumerate(skel.parents):
        if p >= 0:
            children[p].append(j)
    for j in range(J):
        gltf.nodes.append(g.Node(name=skel.names[j], children=children[j] or [],
                                 translation=[float(v) for v in rest_pos[j]],
                                 rotation=[float(v) for v in to_xyzw(rest_rot[j])]))
    roots = [j for j in range(J) if skel.parents[j] < 0]
    scene_nodes = list(roots)
    ibm = inverse_bind_matrices(skel, rest_pos, rest_rot)
    # glTF matrices are column-major: the transpose's rows are the columns.
    ibm_acc = blob.add(np.transpose(ibm, (0, 2, 1)).astype(np.float32), FLOAT, "MAT4")
    gltf.skins.append(g.Skin(name="skeleton", joints=list(range(J)), skeleton=roots[0],
                             inverseBindMatrices=ibm_acc))
    if mesh is not None:
        _add_mesh(gltf, blob, mesh, J)
        gltf.nodes.append(g.Node(name="body", mesh=0, skin=0))
        scene_nodes.append(len(gltf.nodes) - 1)
    if anim is not None:
        _add_animation(gltf, blob, anim, rest_pos)
    gltf.scenes.append(g.Scene(name="motionmatch", nodes=scene_nodes))
    data = blob.bytes()
    gltf.buffers.append(g.Buffer(byteLength=len(data)))
    gltf.set_binary_blob(data)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    gltf.save_binary(str(path))
    return path


def _add_mesh(gltf, blob: _Blob, mesh: SkinnedMesh, num_joints: int) -> None:
    import pygltflib as g
    V = len(mesh.positions)
    tri = np.asarray(mesh.triangles)
    if tri.size and (tri.min() < 0 or tri.max() >= V):
        raise GLTFError(f"mesh triangles index vertices outside 0..{V - 1}")
    if mesh.joints.size and mesh.joints.max() >= num_joints:
        raise GLTFError(f"mesh skin uses joint {int(mesh.joints.max())} of a {num_joints}-joint skeleton")
    idx_type, idx_dtype = (USHORT, np.uint16) if V < 65536 else (UINT, np.uint32)
    jt_type, jt_dtype = (UBYTE, np.uint8) if num_joints <= 256 else (USHORT, np.uint16)
    attrs = g.Attributes(
        POSITION=blob.add(np.asarray(mesh.positions, np.float32), FLOAT, "VEC3", ARRAY_BUFFER, minmax=True),
        NORMAL=blob.add(np.asarray(mesh.normals, np.float32), FLOAT, "VEC3", ARRAY_BUFFER),
        JOINTS_0=blob.add(np.asarray(mesh.joints, jt_dtype), jt_type, "VEC4", ARRAY_BUFFER),
        WEIGHTS_0=blob.add(np.asarray(mesh.weights, np.float32), FLOAT, "VEC4", ARRAY_BUFFER))
    indices = blob.add(tri.reshape(-1).astype(idx_dtype), idx_type, "SCALAR", ELEMENT_ARRAY_BUFFER)
    m = BODY_MATERIAL
    gltf.materials.append(g.Material(name=m.name, doubleSided=m.double_sided, pbrMetallicRoughness=g.PbrMetallicRoughness(
        baseColorFactor=list(m.base_color), metallicFactor=m.metallic, roughnessFactor=m.roughness)))
    gltf.meshes.append(g.Mesh(name="body", primitives=[g.Primitive(attributes=attrs, indices=indices, material=0)]))


def _add_animation(gltf, blob: _Blob, anim: Animation, rest_pos: np.ndarray) -> None:
    import pygltflib as g
    F = anim.num_frames
    if F < 1:
        raise GLTFError(f"{anim.source or 'animation'}: no frames to export")
    times = blob.add((np.arange(F) / anim.fps).astype(np.float32)[:, None], FLOAT, "SCALAR", minmax=True)
    rot = quat_unroll(np.asarray(anim.rotations, np.float64), axis=0)   # no long-way blends between keys
    pos = np.asarray(anim.positions, np.float64)
    samplers, channels = [], []
    for j in range(anim.skeleton.num_joints):
        out = blob.add(to_xyzw(rot[:, j]).astype(np.float32), FLOAT, "VEC4")
        samplers.append(g.AnimationSampler(input=times, output=out, interpolation="LINEAR"))
        channels.append(g.AnimationChannel(sampler=len(samplers) - 1,
                                           target=g.AnimationChannelTarget(node=j, path="rotation")))
        if np.abs(pos[:, j] - rest_pos[j]).max() > MOVING_TRANSLATION_M:
            out = blob.add(pos[:, j].astype(np.float32), FLOAT, "VEC3")
            samplers.append(g.AnimationSampler(input=times, output=out, interpolation="LINEAR"))
            channels.append(g.AnimationChannel(sampler=len(samplers) - 1,
                                               target=g.AnimationChannelTarget(node=j, path="translation")))
    gltf.animations.append(g.Animation(name="motion", samplers=samplers, channels=channels))


# ---------------------------------------------------------------------------------------------
# Reading

MAX_GLB_BYTES = 512 << 20          # a detailed character is tens of MB
MAX_GLTF_NODES = 65536
MAX_ACCESSOR_VALUES = 16_000_000    # count x components of one accessor (128 MB as float64)
MAX_NODE_VALUE = 1e6                # translations (m), scales and matrix entries
MAX_JSON_NESTING = 64               # extensions (VRM) nest deeper than plain glTF
# The JSON document: 65,536 nodes (MAX_GLTF_NODES) with names, rotations, translations and children
# take 9.9 MB of it.
MAX_JSON_CHUNK_BYTES = 16 << 20
MAX_NAME_CHARS = 256                # node (joint) names: the shared captures' longest has 15 characters
COMPONENT_TYPES = {5120: np.int8, 5121: np.uint8, 5122: np.int16, 5123: np.uint16, 5125: np.uint32, 5126: np.float32}
TYPE_WIDTHS = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4, "MAT2": 4, "MAT3": 9, "MAT4": 16}
_GLB_MAGIC, _JSON_CHUNK, _BIN_CHUNK = b"glTF", 0x4E4F534A, 0x004E4942


@dataclass
class GLB:
    """A checked .glb: doc, its JSON document (every index and byte range in it valid); blob, the binary
    chunk; data, the whole file's bytes; path."""

    doc: dict
    blob: bytes
    data: bytes
    path: Path


def read_glb(path) -> GLB:
    """Read and check a glTF binary (see the module docstring). Raises GLTFError naming the file and the
    part (e.g. `accessors[3]: 1000 rows of 12 bytes run past the end of bufferViews[2]`)."""
    path = Path(path)
    data = read_bounded(path, MAX_GLB_BYTES, GLTFError, "glTF binary")
    if len(data) < 20 or data[:4] != _GLB_MAGIC:
        raise GLTFError(f"{path}: not a glTF binary (.glb): no 'glTF' header")
    version, length = struct.unpack_from("<II", data, 4)
    if version != 2:
        raise GLTFError(f"{path}: glTF binary version {version}; this reader takes version 2")
    if length != len(data):
        raise GLTFError(f"{path}: the header says {length:,} bytes, the file holds {len(data):,} (truncated or padded)")
    chunks, at = [], 12
    while at < len(data):
        if at + 8 > len(data):
            raise GLTFError(f"{path}: chunk {len(chunks)} header runs past the end of the file")
        size, kind = struct.unpack_from("<II", data, at)
        if at + 8 + size > len(data):
            raise GLTFError(f"{path}: chunk {len(chunks)} ({size:,} bytes) runs past the end of the file")
        chunks.append((kind, data[at + 8:at + 8 + size]))
        at += 8 + size
    if not chunks or chunks[0][0] != _JSON_CHUNK:
        raise GLTFError(f"{path}: the first chunk is not the JSON document")
    blob = chunks[1][1] if len(chunks) > 1 and chunks[1][0] == _BIN_CHUNK else b""
    if len(chunks[0][1]) > MAX_JSON_CHUNK_BYTES:     # before parsing: 40 MB of small values went past 3 GB
        raise GLTFError(f"{path}: the JSON chunk holds {len(chunks[0][1]):,} bytes, beyond the bound of "
                        f"{MAX_JSON_CHUNK_BYTES:,}")
    doc = parse_json(chunks[0][1].rstrip(b" \0"), GLTFError, str(path), MAX_JSON_NESTING)
    if not isinstance(doc, dict):
        raise GLTFError(f"{path}: the JSON document is not an object")
    try:
        _check_document(doc, len(blob))
    except GLTFError as e:
        raise GLTFError(f"{path}: {e}") from None
    return GLB(doc=doc, blob=blob, data=data, path=path)


def _int(value, name: str, low: int = 0, high: float = math.inf) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise GLTFError(f"{name}: expected an integer in [{low}, {high:g}], got {str(value)[:40]}")
    return value


def _index(value, items: list, name: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < len(items):
        raise GLTFError(f"{name}: {str(value)[:40]} is not an index into {what} "
                        f"({f'0..{len(items) - 1}' if items else 'there are none'})")
    return value


def _numbers(value, n: int, name: str, bound: float = MAX_NODE_VALUE) -> list[float]:
    if (not isinstance(value, list) or len(value) != n
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
            or not all(abs(v) <= bound for v in value)):
        raise GLTFError(f"{name}: expected {n} finite numbers within +-{bound:g}")
    return [float(v) for v in value]


def _list(doc: dict, key: str) -> list:
    items = doc.get(key, [])
    if not isinstance(items, list) or not all(isinstance(v, dict) for v in items):
        raise GLTFError(f"{key}: expected a list of objects")
    return items


def _check_document(doc: dict, blob_size: int) -> None:
    """Every index in range, every byte range inside the binary chunk, node trees acyclic, numbers finite."""
    buffers, views, accessors = _list(doc, "buffers"), _list(doc, "bufferViews"), _list(doc, "accessors")
    nodes, skins, meshes = _list(doc, "nodes"), _list(doc, "skins"), _list(doc, "meshes")
    images, scenes, animations = _list(doc, "images"), _list(doc, "scenes"), _list(doc, "animations")
    materials, textures = _list(doc, "materials"), _list(doc, "textures")
    sizes = []
    for i, b in enumerate(buffers):
        if "uri" in b:
            raise GLTFError(f"buffers[{i}].uri: only the file's own binary chunk is read (no external files or "
                            f"data URIs)")
        if i > 0:
            raise GLTFError(f"buffers[{i}]: a .glb holds one binary chunk (buffers[0])")
        sizes.append(_int(b.get("byteLength"), f"buffers[{i}].byteLength", 0, blob_size))
    for i, im in enumerate(images):
        uri = im.get("uri")
        if uri is not None and not (isinstance(uri, str) and uri.startswith("data:")):
            raise GLTFError(f"images[{i}].uri: points outside the file (only embedded images are read)")
        if "bufferView" in im:
            _index(im["bufferView"], views, f"images[{i}].bufferView", "bufferViews")
    for i, v in enumerate(views):
        b = _index(v.get("buffer"), buffers, f"bufferViews[{i}].buffer", "buffers")
        off = _int(v.get("byteOffset", 0), f"bufferViews[{i}].byteOffset")
        n = _int(v.get("byteLength"), f"bufferViews[{i}].byteLength", 1)
        if off + n > sizes[b]:
            raise GLTFError(f"bufferViews[{i}]: bytes {off:,}..{off + n:,} run past the end of buffers[{b}] "
                            f"({sizes[b]:,} bytes)")
        if v.get("byteStride") is not None:
            _int(v["byteStride"], f"bufferViews[{i}].byteStride", 4, 252)
    for i, a in enumerate(accessors):
        _check_accessor(a, i, views)
    if len(nodes) > MAX_GLTF_NODES:
        raise GLTFError(f"nodes: {len(nodes):,} nodes, beyond the bound of {MAX_GLTF_NODES:,}")
    parent = {}
    for i, n in enumerate(nodes):
        children = n.get("children", [])
        if not isinstance(children, list):
            raise GLTFError(f"nodes[{i}].children: expected a list of node indices")
        for c in children:
            c = _index(c, nodes, f"nodes[{i}].children", "nodes")
            if c == i or c in parent:
                raise GLTFError(f"nodes[{i}].children: node {c} is {'its own child' if c == i else 'a child twice'} "
                                f"(a node tree may not have cycles or shared children)")
            parent[c] = i
        if "mesh" in n:
            _index(n["mesh"], meshes, f"nodes[{i}].mesh", "meshes")
        if "skin" in n:
            _index(n["skin"], skins, f"nodes[{i}].skin", "skins")
        if "name" in n and (not isinstance(n["name"], str) or len(n["name"]) > MAX_NAME_CHARS):
            raise GLTFError(f"nodes[{i}].name: expected a string of at most {MAX_NAME_CHARS} characters")
        if "matrix" in n:
            _numbers(n["matrix"], 16, f"nodes[{i}].matrix")
        if "translation" in n:
            _numbers(n["translation"], 3, f"nodes[{i}].translation")
        if "scale" in n:
            _numbers(n["scale"], 3, f"nodes[{i}].scale")
        if "rotation" in n and math.hypot(*_numbers(n["rotation"], 4, f"nodes[{i}].rotation", 2.0)) < 1e-6:
            raise GLTFError(f"nodes[{i}].rotation: a zero quaternion is no rotation")
    # Single parents and no self-children leave only closed loops: nodes no root reaches.
    reached, stack = set(), [i for i in range(len(nodes)) if i not in parent]
    while stack:
        i = stack.pop()
        reached.add(i)
        stack.extend(nodes[i].get("children", []))
    if len(reached) < len(nodes):
        loop = min(set(range(len(nodes))) - reached)
        raise GLTFError(f"nodes[{loop}]: part of a cycle of children (a node tree may not have cycles)")
    for i, s in enumerate(skins):
        joints = s.get("joints")
        if not isinstance(joints, list) or not joints:
            raise GLTFError(f"skins[{i}].joints: expected a non-empty list of node indices")
        for j in joints:
            _index(j, nodes, f"skins[{i}].joints", "nodes")
        if len(set(joints)) < len(joints):
            raise GLTFError(f"skins[{i}].joints: a node is listed twice")
        if "skeleton" in s:
            _index(s["skeleton"], nodes, f"skins[{i}].skeleton", "nodes")
        if "inverseBindMatrices" in s:
            a = accessors[_index(s["inverseBindMatrices"], accessors, f"skins[{i}].inverseBindMatrices", "accessors")]
            if a.get("type") != "MAT4" or a.get("componentType") != 5126 or a["count"] < len(joints):
                raise GLTFError(f"skins[{i}].inverseBindMatrices: expected {len(joints)} float MAT4 matrices")
    for i, m in enumerate(meshes):
        prims = m.get("primitives")
        if not isinstance(prims, list) or not prims or not all(isinstance(p, dict) for p in prims):
            raise GLTFError(f"meshes[{i}].primitives: expected a non-empty list of objects")
        for k, p in enumerate(prims):
            where = f"meshes[{i}].primitives[{k}]"
            attrs = p.get("attributes")
            targets = p.get("targets", [])
            if not isinstance(attrs, dict) or not isinstance(targets, list) or not all(isinstance(t, dict)
                                                                                     for t in targets):
                raise GLTFError(f"{where}.attributes: expected an object of accessor indices")
            for t, table in enumerate([attrs] + targets):
                for name, acc in table.items():
                    _index(acc, accessors, f"{where}.{'attributes' if t == 0 else f'targets[{t - 1}]'}.{name}",
                           "accessors")
            if "indices" in p:
                _index(p["indices"], accessors, f"{where}.indices", "accessors")
            if "material" in p:
                _index(p["material"], materials, f"{where}.material", "materials")
    for i, t in enumerate(textures):
        if "source" in t:
            _index(t["source"], images, f"textures[{i}].source", "images")
    for i, s in enumerate(scenes):
        for n in s.get("nodes", []) if isinstance(s.get("nodes", []), list) else [None]:
            _index(n, nodes, f"scenes[{i}].nodes", "nodes")
    if "scene" in doc:
        _index(doc["scene"], scenes, "scene", "scenes")
    for i, an in enumerate(animations):
        samplers, channels = an.get("samplers", []), an.get("channels", [])
        if not isinstance(samplers, list) or not isinstance(channels, list) \
                or not all(isinstance(v, dict) for v in samplers + channels):
            raise GLTFError(f"animations[{i}]: expected lists of samplers and channels")
        for k, sm in enumerate(samplers):
            _index(sm.get("input"), accessors, f"animations[{i}].samplers[{k}].input", "accessors")
            _index(sm.get("output"), accessors, f"animations[{i}].samplers[{k}].output", "accessors")
        for k, ch in enumerate(channels):
            _index(ch.get("sampler"), samplers, f"animations[{i}].channels[{k}].sampler", "samplers")
            target = ch.get("target")
            if not isinstance(target, dict):
                raise GLTFError(f"animations[{i}].channels[{k}].target: expected an object")
            if "node" in target:
                _index(target["node"], nodes, f"animations[{i}].channels[{k}].target.node", "nodes")


def _check_accessor(a: dict, i: int, views: list) -> None:
    where = f"accessors[{i}]"
    if a.get("componentType") not in COMPONENT_TYPES or a.get("type") not in TYPE_WIDTHS:
        raise GLTFError(f"{where}: unknown componentType {str(a.get('componentType'))[:20]} or type "
                        f"{str(a.get('type'))[:20]}")
    width = TYPE_WIDTHS[a["type"]]
    count = _int(a.get("count"), f"{where}.count", 1, MAX_ACCESSOR_VALUES // width)
    offset = _int(a.get("byteOffset", 0), f"{where}.byteOffset")
    if "sparse" in a:
        raise GLTFError(f"{where}.sparse: sparse accessors are not read")
    if "bufferView" not in a:
        return                       # all zeros (glTF's rule); read_accessor refuses to read one
    v = views[_index(a["bufferView"], views, f"{where}.bufferView", "bufferViews")]
    element = np.dtype(COMPONENT_TYPES[a["componentType"]]).itemsize * width
    stride = v.get("byteStride") or element
    if stride < element:
        raise GLTFError(f"{where}: stride {stride} is shorter than one {element}-byte element")
    end = offset + stride * (count - 1) + element
    if end > v["byteLength"]:
        raise GLTFError(f"{where}: {count:,} rows of {element} bytes (stride {stride}) from byte {offset:,} run past "
                        f"the end of bufferViews[{a['bufferView']}] ({v['byteLength']:,} bytes)")


def read_accessor(glb: GLB, i: int, name: str = "") -> np.ndarray:
    """Accessor i of a checked GLB as float64 (count, components), normalized integers scaled to [0, 1] /
    [-1, 1]; float accessors must hold finite values. name says what it is for in errors."""
    doc = glb.doc
    where = f"{glb.path}: accessors[{i}]{f' ({name})' if name else ''}"
    a = doc["accessors"][i]
    if "bufferView" not in a:
        raise GLTFError(f"{where}: no bufferView (nothing to read)")
    v = doc["bufferViews"][a["bufferView"]]
    dt = np.dtype(COMPONENT_TYPES[a["componentType"]])
    width = TYPE_WIDTHS[a["type"]]
    stride = v.get("byteStride") or dt.itemsize * width
    start = v.get("byteOffset", 0) + a.get("byteOffset", 0)
    # np.ndarray over a buffer checks the extent again (an error, never a read past the end).
    rows = np.ndarray((a["count"], dt.itemsize * width), np.uint8, glb.blob, start, (stride, 1))
    out = np.ascontiguousarray(rows).view(dt).reshape(a["count"], width).astype(np.float64)
    if a.get("normalized") and dt.kind in "ui":
        out /= np.iinfo(dt).max
    if not np.isfinite(out).all():
        raise GLTFError(f"{where}: holds NaN or infinite values")
    return out


_IMAGE_MAGIC = {b"\x89PNG\r\n\x1a\n": "png", b"\xff\xd8\xff": "jpg"}


def _factors(value, n: int, default, name: str) -> tuple:
    """n finite numbers, each clamped into glTF's [0, 1] (exporters round past its ends: 1.0000001)."""
    if value is None:
        return tuple(default)
    if (not isinstance(value, list) or len(value) != n or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)):
        raise GLTFError(f"{name}: expected {f'{n} numbers' if n > 1 else 'a number'} in [0, 1]")
    return tuple(min(max(float(v), 0.0), 1.0) for v in value)


def _image_bytes(glb: GLB, i: int) -> bytes:
    image = glb.doc["images"][i]
    if "bufferView" in image:
        v = glb.doc["bufferViews"][image["bufferView"]]
        start = v.get("byteOffset", 0)
        return bytes(glb.blob[start:start + v["byteLength"]])
    uri = image.get("uri")
    if isinstance(uri, str) and ";base64," in uri[:200]:
        try:
            return base64.b64decode(uri.split(";base64,", 1)[1], validate=True)
        except ValueError:
            raise GLTFError(f"{glb.path}: images[{i}].uri: not valid base64") from None
    return b""


def read_material(glb: GLB, i: int | None) -> Material:
    """Material i of a checked GLB (glTF's default material when i is None). Its base colour texture
    comes along when the image is PNG or JPEG (embedded); other kinds (WebP, KTX2 through extensions)
    leave texture None and keep the colour factor. Raises GLTFError naming the field of a malformed one."""
    if i is None:
        return Material(name="default")
    m = glb.doc["materials"][i]
    where = f"{glb.path}: materials[{i}]"
    if not isinstance(m, dict):
        raise GLTFError(f"{where}: expected an object")
    pbr = m.get("pbrMetallicRoughness", {})
    if not isinstance(pbr, dict):
        raise GLTFError(f"{where}.pbrMetallicRoughness: expected an object")
    name = m.get("name") if isinstance(m.get("name"), str) else f"material{i}"
    out = Material(name=name[:200],
                   base_color=_factors(pbr.get("baseColorFactor"), 4, (1.0, 1.0, 1.0, 1.0), f"{where}.baseColorFactor"),
                   metallic=_factors(None if "metallicFactor" not in pbr else [pbr["metallicFactor"]], 1, (1.0,),
                                     f"{where}.metallicFactor")[0],
                   roughness=_factors(None if "roughnessFactor" not in pbr else [pbr["roughnessFactor"]], 1, (1.0,),
                                      f"{where}.roughnessFactor")[0],
                   emissive=_factors(m.get("emissiveFactor"), 3, (0.0, 0.0, 0.0), f"{where}.emissiveFactor"),
                   double_sided=m.get("doubleSided") is True)
    info = pbr.get("baseColorTexture")
    if info is not None:
        textures = glb.doc.get("textures", [])
        t = _index(info.get("index") if isinstance(info, dict) else None, textures,
                   f"{where}.pbrMetallicRoughness.baseColorTexture.index", "textures")
        source = textures[t].get("source") if isinstance(textures[t], dict) else None
        if source is not None:
            data = _image_bytes(glb, source)
            kind = next((k for magic, k in _IMAGE_MAGIC.items() if data.startswith(magic)), None)
            if kind is not None:
                out.texture, out.texture_type = data, kind
    return out
