"""Rigged glTF models the tests generate: a small Mixamo-named humanoid in an A-pose whose joints' local
Y axes point along the bones (as Mixamo exports do), and a non-humanoid tail."""
from __future__ import annotations

import struct

import numpy as np

from motionmatch.motion.animation import Skeleton
from motionmatch.io.gltf import SkinnedMesh, write_gltf
from motionmatch.maths.rotations import quat_between, quat_from_angle_axis, quat_inv, quat_mul, quat_rotate

A45 = np.sqrt(0.5)
# name, parent, world position in the bind pose (metres; facing +Z, the character's left towards +X), 1.3 m tall
_HUMANOID = [
    ("Hips", None, (0, 0.70, 0)), ("Spine", "Hips", (0, 0.78, 0)), ("Spine1", "Spine", (0, 0.88, 0)),
    ("Spine2", "Spine1", (0, 0.98, 0)), ("Neck", "Spine2", (0, 1.10, 0)), ("Head", "Neck", (0, 1.17, 0)),
    ("HeadTop_End", "Head", (0, 1.30, 0)),
]
for _s, _x in (("Left", 1.0), ("Right", -1.0)):
    _HUMANOID += [
        (f"{_s}Shoulder", "Spine2", (0.04 * _x, 1.06, 0)), (f"{_s}Arm", f"{_s}Shoulder", (0.14 * _x, 1.06, 0)),
        (f"{_s}ForeArm", f"{_s}Arm", ((0.14 + 0.2 * A45) * _x, 1.06 - 0.2 * A45, 0)),
        (f"{_s}Hand", f"{_s}ForeArm", ((0.14 + 0.38 * A45) * _x, 1.06 - 0.38 * A45, 0)),
        (f"{_s}UpLeg", "Hips", (0.08 * _x, 0.66, 0)), (f"{_s}Leg", f"{_s}UpLeg", (0.08 * _x, 0.36, 0.01)),
        (f"{_s}Foot", f"{_s}Leg", (0.08 * _x, 0.07, 0)), (f"{_s}ToeBase", f"{_s}Foot", (0.08 * _x, 0.01, 0.1)),
    ]


def _rig(joints, prefix: str):
    names = [prefix + n for n, _, _ in joints]
    index = {n: i for i, (n, _, _) in enumerate(joints)}
    parents = np.array([-1 if p is None else index[p] for _, p, _ in joints])
    gpos = np.array([w for _, _, w in joints], np.float64)
    J = len(joints)
    # Each joint's Y axis along its first child's bone (leaves: along their own bone), twisted a little.
    grot = np.zeros((J, 4))
    for j in range(J):
        kids = [c for c in range(J) if parents[c] == j]
        d = gpos[kids[0]] - gpos[j] if kids else gpos[j] - gpos[parents[j]]
        twist = quat_from_angle_axis(np.array(0.3 * j), np.array([0.0, 1.0, 0.0]))
        grot[j] = quat_mul(quat_between(np.array([0.0, 1.0, 0.0]), d / np.linalg.norm(d)), twist)
    lrot, lpos = grot.copy(), gpos.copy()
    for j in range(J):
        p = parents[j]
        if p >= 0:
            lrot[j] = quat_mul(quat_inv(grot[p]), grot[j])
            lpos[j] = quat_rotate(quat_inv(grot[p]), gpos[j] - gpos[p])
    return Skeleton(names=names, parents=parents, offsets=lpos), lpos, lrot, gpos


def _tubes(gpos, parents, lpos, lrot, radius=0.04, sides=6) -> SkinnedMesh:
    """A hexagonal tube around every bone, skinned rigidly to the bone's parent joint."""
    verts, tris, joints = [], [], []
    ang = np.linspace(0, 2 * np.pi, sides, endpoint=False)
    for j, p in enumerate(parents):
        if p < 0:
            continue
        a, b = gpos[p], gpos[j]
        d = (b - a) / np.linalg.norm(b - a)
        u = np.cross(d, [0.0, 0.0, 1.0] if abs(d[2]) < 0.9 else [1.0, 0.0, 0.0])
        u /= np.linalg.norm(u)
        v = np.cross(d, u)
        base = len(verts)
        for end in (a, b):
            for t in ang:
                verts.append(end + radius * (np.cos(t) * u + np.sin(t) * v))
                joints.append(p)
        for k in range(sides):
            k2 = (k + 1) % sides
            tris += [(base + k, base + k2, base + sides + k), (base + k2, base + sides + k2, base + sides + k)]
    verts = np.array(verts)
    n = len(verts)
    jt = np.zeros((n, 4), np.uint16)
    jt[:, 0] = joints
    w = np.zeros((n, 4), np.float32)
    w[:, 0] = 1.0
    normals = np.zeros_like(verts)
    normals[:, 1] = 1.0
    return SkinnedMesh(positions=verts.astype(np.float32), normals=normals.astype(np.float32),
                       triangles=np.array(tris, np.uint32), joints=jt, weights=w, bind_positions=lpos, bind_rotations=lrot)


def write_mixamo_rig(path):
    """A 1.3 m Mixamo-named (`mixamorig:`) humanoid in an A-pose with a tube mesh; returns (path, bind world
    positions by short name)."""
    skel, lpos, lrot, gpos = _rig(_HUMANOID, "mixamorig:")
    write_gltf(path, skeleton=skel, mesh=_tubes(gpos, skel.parents, lpos, lrot))
    return path, {n: gpos[i] for i, (n, _, _) in enumerate(_HUMANOID)}


UNREAL = {"Hips": "pelvis", "Spine": "spine_01", "Spine1": "spine_02", "Spine2": "spine_03", "Neck": "neck_01",
          "Head": "head", "HeadTop_End": "head_end", **{f"{s}{a}": f"{b}_{s[0].lower()}" for s in ("Left", "Right")
          for a, b in (("Shoulder", "clavicle"), ("Arm", "upperarm"), ("ForeArm", "lowerarm"), ("Hand", "hand"),
                       ("UpLeg", "thigh"), ("Leg", "calf"), ("Foot", "foot"), ("ToeBase", "ball"))}}
# VRM humanoid bone names of the same joints (VRM 1.0); the node names are a VRoid-like J_Bip_* scheme.
VRM_BONES = {"Hips": "hips", "Spine": "spine", "Spine1": "chest", "Spine2": "upperChest", "Neck": "neck",
             "Head": "head", **{f"{s}{a}": f"{s.lower()}{b}" for s in ("Left", "Right") for a, b in (
                 ("Shoulder", "Shoulder"), ("Arm", "UpperArm"), ("ForeArm", "LowerArm"), ("Hand", "Hand"),
                 ("UpLeg", "UpperLeg"), ("Leg", "LowerLeg"), ("Foot", "Foot"), ("ToeBase", "Toes"))}}


def write_renamed_rig(path, rename: dict, vrm: bool = False):
    """The same humanoid with its joints renamed (short name -> new name; others keep 'X_<short>'); with
    vrm=True the file carries a VRMC_vrm humanoid table naming the joints by VRM bone."""
    import pygltflib
    joints = [(rename.get(n, f"X_{n}"), rename.get(p, f"X_{p}") if p else None, w) for n, p, w in _HUMANOID]
    skel, lpos, lrot, gpos = _rig(joints, "")
    write_gltf(path, skeleton=skel, mesh=_tubes(gpos, skel.parents, lpos, lrot))
    if vrm:
        g = pygltflib.GLTF2().load(str(path))
        node = {n.name: i for i, n in enumerate(g.nodes)}
        g.extensionsUsed = ["VRMC_vrm"]
        g.extensions = {"VRMC_vrm": {"specVersion": "1.0", "humanoid": {"humanBones": {
            bone: {"node": node[rename.get(short, f"X_{short}")]} for short, bone in VRM_BONES.items()}}}}
        g.save_binary(str(path))
    return path


def write_tail_rig(path):
    """A skinned chain of four bones (not a humanoid)."""
    joints = [("bone0", None, (0, 0, 0))] + [(f"bone{i}", f"bone{i - 1}", (0, 0.2 * i, 0)) for i in range(1, 4)]
    skel, lpos, lrot, gpos = _rig(joints, "")
    write_gltf(path, skeleton=skel, mesh=_tubes(gpos, skel.parents, lpos, lrot))
    return path


def write_animated_mixamo_rig(path, keys: int = 31, fps: float = 30.0):
    """The Mixamo-named humanoid as a converted FBX often comes: joints in centimetres, Z up, under an
    `Armature` node that scales them by 0.01 and turns them Y up, with a `Walk` animation keyed at `fps`
    (the limbs swinging, the hips moving forward). Returns (path, names, world joint positions (keys, J, 3)
    in metres at the key times)."""
    import pygltflib
    from motionmatch.motion.animation import Animation
    from motionmatch.maths.kinematics import forward_kinematics
    turn = quat_from_angle_axis(np.array(-np.pi / 2), np.array([1.0, 0.0, 0.0]))     # inner Z up -> Y up
    inner = [(n, p, tuple(100.0 * quat_rotate(quat_inv(turn), np.array(w, np.float64)))) for n, p, w in _HUMANOID]
    skel, lpos, lrot, gpos = _rig(inner, "mixamorig:")
    J = skel.num_joints
    t = np.arange(keys) / fps
    swing = 0.5 * np.sin(2 * np.pi * t)[:, None] * np.linspace(0.3, 1.0, J)[None]
    rot = quat_mul(np.repeat(lrot[None], keys, 0), quat_from_angle_axis(swing, np.array([1.0, 0.0, 0.0])))
    # The hips turn left at 0.6 rad/s while walking forward at 0.8 m/s on a curve (a straight walk has no
    # spread in its trajectory directions, which a database refuses).
    up, ahead, left = (quat_rotate(quat_inv(turn), np.array(v)) for v in ([0.0, 1, 0], [0.0, 0, 1], [1.0, 0, 0]))
    rot[:, 0] = quat_mul(quat_from_angle_axis(0.6 * t, up), rot[:, 0])
    pos = np.repeat(lpos[None], keys, 0)
    pos[:, 0] += 80.0 * t[:, None] * ahead + 30.0 * (t * t)[:, None] * left
    anim = Animation(skeleton=skel, positions=pos, rotations=rot, fps=fps)
    write_gltf(path, anim, _tubes(gpos, skel.parents, lpos, lrot, radius=4.0))
    g = pygltflib.GLTF2().load(str(path))
    g.nodes.append(pygltflib.Node(name="Armature", children=[0], scale=[0.01] * 3,
                                  rotation=[float(v) for v in np.r_[turn[1:], turn[:1]]]))
    g.scenes[0].nodes = [len(g.nodes) - 1] + [n for n in g.scenes[0].nodes if n != 0]
    g.animations[0].name = "Walk"
    g.save_binary(str(path))
    world, _ = forward_kinematics(pos, rot, skel.parents)
    return path, skel.names, 0.01 * quat_rotate(turn, world)


def _png(rgb) -> bytes:
    """A 2x2 PNG of one colour (a texture the tests can find again byte for byte)."""
    import zlib
    raw = b"".join(b"\0" + bytes(rgb) * 2 for _ in range(2))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def write_two_mesh_rig(path):
    """The Mixamo-named humanoid as Xbot comes: a first skinned mesh of joint balls (`Beta_Joints`, a plain
    red material) and the body a second one (`Beta_Surface`, textured: UVs and an embedded PNG). Returns
    (path, the PNG's bytes)."""
    import pygltflib as g
    skel, lpos, lrot, gpos = _rig(_HUMANOID, "mixamorig:")
    body = _tubes(gpos, skel.parents, lpos, lrot)
    write_gltf(path, skeleton=skel, mesh=body)
    gl = g.GLTF2().load(str(path))
    blob = bytearray(gl.binary_blob())

    def add(array, component, kind, target=None):
        blob.extend(b"\0" * (-len(blob) % 4))
        data = np.ascontiguousarray(array).tobytes()
        gl.bufferViews.append(g.BufferView(buffer=0, byteOffset=len(blob), byteLength=len(data), target=target))
        blob.extend(data)
        acc = g.Accessor(bufferView=len(gl.bufferViews) - 1, componentType=component, count=len(array), type=kind)
        if kind == "VEC3" and component == 5126:
            acc.min, acc.max = [float(v) for v in array.min(0)], [float(v) for v in array.max(0)]
        gl.accessors.append(acc)
        return len(gl.accessors) - 1
    # The body: UVs, a texture, its own material.
    uv = np.stack([np.linspace(0, 1, len(body.positions)), np.linspace(1, 0, len(body.positions))], 1).astype(np.float32)
    gl.meshes[0].name = "Beta_Surface"
    gl.meshes[0].primitives[0].attributes.TEXCOORD_0 = add(uv, 5126, "VEC2", 34962)
    png = _png((40, 120, 200))
    blob.extend(b"\0" * (-len(blob) % 4))
    gl.bufferViews.append(g.BufferView(buffer=0, byteOffset=len(blob), byteLength=len(png)))
    blob.extend(png)
    gl.images.append(g.Image(bufferView=len(gl.bufferViews) - 1, mimeType="image/png", name="Beta_Surface_color"))
    gl.samplers.append(g.Sampler())
    gl.textures.append(g.Texture(source=0, sampler=0))
    gl.materials[0] = g.Material(name="Beta_Surface_MAT", pbrMetallicRoughness=g.PbrMetallicRoughness(
        baseColorTexture=g.TextureInfo(index=0), metallicFactor=0.1, roughnessFactor=0.5))
    # The joint balls: an octahedron at every joint, rigid to it, red.
    verts, tris, jts = [], [], []
    for j, c in enumerate(gpos):
        base = len(verts)
        for d in np.vstack([np.eye(3), -np.eye(3)]) * 0.02:
            verts.append(c + d)
            jts.append(j)
        for a, b, e in ((0, 1, 2), (1, 3, 2), (3, 4, 2), (4, 0, 2), (1, 0, 5), (3, 1, 5), (4, 3, 5), (0, 4, 5)):
            tris.append((base + a, base + b, base + e))
    verts = np.array(verts, np.float32)
    joints = np.zeros((len(verts), 4), np.uint8)
    joints[:, 0] = jts
    weights = np.zeros((len(verts), 4), np.float32)
    weights[:, 0] = 1
    attrs = g.Attributes(POSITION=add(verts, 5126, "VEC3", 34962), JOINTS_0=add(joints, 5121, "VEC4", 34962),
                         WEIGHTS_0=add(weights, 5126, "VEC4", 34962))
    gl.materials.append(g.Material(name="Beta_Joints_MAT", pbrMetallicRoughness=g.PbrMetallicRoughness(
        baseColorFactor=[0.9, 0.1, 0.1, 1.0])))
    gl.meshes.append(g.Mesh(name="Beta_Joints", primitives=[g.Primitive(
        attributes=attrs, indices=add(np.array(tris, np.uint16).reshape(-1), 5123, "SCALAR", 34963), material=1)]))
    # Xbot lists the joint balls first: the first skinned mesh node is not the body.
    balls = next(i for i, n in enumerate(gl.nodes) if n.mesh == 0)
    gl.nodes[balls].name, gl.nodes[balls].mesh = "Beta_Joints", 1
    gl.nodes.append(g.Node(name="Beta_Surface", mesh=0, skin=0))
    gl.scenes[0].nodes.append(len(gl.nodes) - 1)
    blob.extend(b"\0" * (-len(blob) % 4))
    gl.buffers[0].byteLength = len(blob)
    gl.set_binary_blob(bytes(blob))
    gl.save_binary(str(path))
    return path, png


def write_soled_rig(path, depth: float):
    """The Mixamo-named humanoid with thin (5 mm) tubes and a flat sole plate under each foot, `depth` metres
    below the toe joints (its lowest foot joints), skinned to the foot joint. Returns (path, the plates'
    vertices (8, 3) in the bind pose, the name of each vertex's foot joint (8,))."""
    skel, lpos, lrot, gpos = _rig(_HUMANOID, "mixamorig:")
    body = _tubes(gpos, skel.parents, lpos, lrot, radius=0.005)    # thin: the plates are the soles
    names = [n for n, _, _ in _HUMANOID]
    plates, owners = [], []
    for side in ("Left", "Right"):
        foot, toe = names.index(f"{side}Foot"), names.index(f"{side}ToeBase")
        x, y = gpos[foot, 0], gpos[toe, 1] - depth
        plates += [(x - 0.05, y, -0.05), (x + 0.05, y, -0.05), (x + 0.05, y, 0.15), (x - 0.05, y, 0.15)]
        owners += [foot] * 4
    plates = np.array(plates, np.float32)
    V = len(body.positions)
    tris = [(V + b, V + b + 2, V + b + 1) for b in (0, 4)] + [(V + b, V + b + 3, V + b + 2) for b in (0, 4)]
    jt = np.zeros((8, 4), np.uint16)
    jt[:, 0] = owners
    w = np.zeros((8, 4), np.float32)
    w[:, 0] = 1.0
    mesh = SkinnedMesh(positions=np.vstack([body.positions, plates]),
                       normals=np.vstack([body.normals, np.tile([0.0, -1.0, 0.0], (8, 1))]).astype(np.float32),
                       triangles=np.vstack([body.triangles, np.array(tris, np.uint32)]),
                       joints=np.vstack([body.joints, jt]), weights=np.vstack([body.weights, w]),
                       bind_positions=lpos, bind_rotations=lrot)
    write_gltf(path, skeleton=skel, mesh=mesh)
    return path, plates.astype(np.float64), [skel.names[j] for j in owners]
