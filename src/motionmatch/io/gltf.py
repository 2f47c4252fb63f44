"""glTF 2.0 binary (.glb) export: skeleton, animation and an optional skinned mesh.

glTF shares the library's frame: metres, Y up, right-handed, a model faces +Z. Only the quaternion
layout differs: glTF stores (x, y, z, w), the library (w, x, y, z); this module converts at the edge.

Layout of a written file: one node per joint (named like the joint, parent-first order, the skeleton's
offsets as rest translations and the bind pose's local rotations as rest rotations), one skin over all
joint nodes, a mesh node using that skin when a mesh is given, and one animation ("motion") sampled at
the animation's own frame times (60 fps for synthesized motion) with LINEAR interpolation: a rotation
channel per joint and a translation channel for each joint whose local position moves (the root).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..animation import Animation, Skeleton
from ..kinematics import forward_kinematics
from ..rotations import quat_identity, quat_to_matrix, quat_unroll

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
    transforms of the bind pose.
    """

    positions: np.ndarray
    normals: np.ndarray
    triangles: np.ndarray
    joints: np.ndarray
    weights: np.ndarray
    bind_positions: np.ndarray
    bind_rotations: np.ndarray


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
    gltf.materials.append(g.Material(name="skin", doubleSided=False, pbrMetallicRoughness=g.PbrMetallicRoughness(
        baseColorFactor=[0.8, 0.76, 0.7, 1.0], metallicFactor=0.0, roughnessFactor=0.6)))
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
