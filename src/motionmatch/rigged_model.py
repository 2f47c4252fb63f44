"""A user's rigged humanoid (.glb) as a character: its skeleton, bind pose and mesh, and how the database's
motion drives it (offline with retarget.retarget_animation, live in the page with per-bone offsets).

Joint roles come from the names (Unity/jlpm22, Mixamo `mixamorig:`, Unreal `pelvis`/`thigh_l`/`ball_l`,
Bandai-Namco, LAFAN1; see skeleton.find_roles), from the model's VRM humanoid table (VRM 0.x `VRM` or
1.0 `VRMC_vrm` extension), or from a mapping TOML (`[roles]`: role = "joint name"). The bind pose is the
nodes' rest transforms in world space (scales removed; metres as glTF prescribes).

Live retargeting (the app): with q0 the world rotations of both bind poses normalised to the canonical
T-pose (retarget.canonical_tpose), a model bone mapped to database joint s gets the world rotation
q_s q0_s^-1 q0_t every frame; an unmapped bone keeps its canonical local rotation; the hips follow the
database hips about the simulation bone, scaled by the leg-length ratio. The page does these products;
`live_retarget` computes the per-bone table once.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .animation import Animation, Skeleton
from .io.gltf import GLTFError, SkinnedMesh, to_wxyz
from .retarget import auto_mapping, canonical_tpose, retarget_animation
from .rotations import quat_from_matrix, quat_identity, quat_inv, quat_mul, quat_to_matrix
from .skeleton import SkeletonError, find_roles

# VRM humanoid bone -> role.
_VRM_ROLES = {"hips": "hips", "spine": "spine", "upperChest": "chest", "head": "head",
              **{f"{s}{part}": f"{s}_{role}" for s in ("left", "right")
                 for part, role in (("UpperLeg", "upper_leg"), ("LowerLeg", "lower_leg"), ("Foot", "foot"),
                                    ("Toes", "toe"), ("Hand", "hand"))}}
# Names skeleton.find_roles does not know (Unreal's toe joint).
_EXTRA_ROLE_NAMES = {"left_toe": ("ball_l",), "right_toe": ("ball_r",)}
REQUIRED_ROLES = ("hips", "head", "left_upper_leg", "left_lower_leg", "left_foot", "right_upper_leg",
                  "right_lower_leg", "right_foot")


@dataclass
class RiggedModel:
    """A skinned humanoid. skeleton: the skin's joints (parents first), offsets = bind local translations
    (metres); bind_rotations (J, 4) local; roles: role -> joint index; node_of (J,) the glTF node of each
    joint; mesh: the first skinned mesh in the bind pose's world frame (None for a model without one
    that could be read); glb: the file's bytes (what the app serves)."""

    skeleton: Skeleton
    bind_rotations: np.ndarray
    roles: dict
    node_of: list[int]
    mesh: SkinnedMesh | None
    glb: bytes
    name: str = ""


def _node_matrix(node) -> np.ndarray:
    if node.matrix:
        return np.array(node.matrix, np.float64).reshape(4, 4).T    # column-major in the file
    m = np.eye(4)
    s = np.array(node.scale if node.scale else [1, 1, 1], np.float64)
    r = to_wxyz(np.array(node.rotation if node.rotation else [0, 0, 0, 1], np.float64))
    m[:3, :3] = quat_to_matrix(r) * s[None, :]
    m[:3, 3] = node.translation if node.translation else [0, 0, 0]
    return m


def _accessor(g, i: int) -> np.ndarray:
    dtypes = {5126: np.float32, 5121: np.uint8, 5123: np.uint16, 5125: np.uint32, 5120: np.int8, 5122: np.int16}
    width = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4, "MAT4": 16}
    a = g.accessors[i]
    v = g.bufferViews[a.bufferView]
    dt = np.dtype(dtypes[a.componentType])
    n = width[a.type]
    stride = v.byteStride or dt.itemsize * n
    raw = np.frombuffer(g.binary_blob(), np.uint8, v.byteLength, v.byteOffset + (a.byteOffset or 0))
    rows = np.lib.stride_tricks.as_strided(raw, (a.count, dt.itemsize * n), (stride, 1))
    out = np.ascontiguousarray(rows).view(dt).reshape(a.count, n).astype(np.float64)
    if a.normalized and dt.kind in "ui":
        out /= np.iinfo(dt).max
    return out


def _vrm_roles(g, node_of: list[int]) -> dict[str, int]:
    """Role -> joint index from a VRM humanoid table (1.0 `VRMC_vrm` or 0.x `VRM`), empty without one."""
    ext = g.extensions or {}
    if "VRMC_vrm" in ext:
        bones = {k: v.get("node") for k, v in ext["VRMC_vrm"].get("humanoid", {}).get("humanBones", {}).items()}
    elif "VRM" in ext:
        bones = {b.get("bone"): b.get("node") for b in ext["VRM"].get("humanoid", {}).get("humanBones", [])}
    else:
        return {}
    if "upperChest" not in bones and "chest" in bones:   # the chest role is the highest spine joint
        bones["upperChest"] = bones["chest"]
    joint = {n: j for j, n in enumerate(node_of)}
    return {role: joint[bones[b]] for b, role in _VRM_ROLES.items() if bones.get(b) in joint}


def load_rigged_model(path, mapping=None) -> RiggedModel:
    """Read a rigged humanoid .glb. mapping: None, a dict role -> joint name, or a TOML file with a
    [roles] table. Raises GLTFError (not a readable skinned glTF) or SkeletonError (not a humanoid),
    both naming the file."""
    import pygltflib
    path = Path(path)
    try:
        data = path.read_bytes()
        g = pygltflib.GLTF2.load_from_bytes(data) if path.suffix.lower() == ".glb" else None
    except OSError as e:
        raise GLTFError(f"{path}: cannot read: {e}") from None
    except Exception as e:   # pygltflib raises assorted errors on garbage
        raise GLTFError(f"{path}: not a glTF binary (.glb): {e}") from None
    if g is None:
        raise GLTFError(f"{path}: give a glTF binary (.glb)")
    if not g.skins:
        raise GLTFError(f"{path}: no skin: a character needs a mesh skinned to a skeleton")
    skin = g.skins[0]
    joints = list(skin.joints)
    parent_node = {}
    for i, n in enumerate(g.nodes):
        for c in n.children or []:
            parent_node[c] = i
    world = {}

    def world_of(i):
        if i not in world:
            m = _node_matrix(g.nodes[i])
            world[i] = m if i not in parent_node else world_of(parent_node[i]) @ m
        return world[i]

    # Parents first; a joint's parent is its nearest ancestor among the joints.
    def depth(i):
        return 0 if i not in parent_node else 1 + depth(parent_node[i])
    joints.sort(key=depth)
    index = {n: j for j, n in enumerate(joints)}
    parents = np.full(len(joints), -1)
    for j, n in enumerate(joints):
        p = parent_node.get(n)
        while p is not None and p not in index:
            p = parent_node.get(p)
        parents[j] = -1 if p is None else index[p]
    W = np.array([world_of(n) for n in joints])
    R = W[:, :3, :3] / np.linalg.norm(W[:, :3, :3], axis=1, keepdims=True)
    grot = quat_from_matrix(R)
    gpos = W[:, :3, 3]
    lrot, lpos = grot.copy(), gpos.copy()
    for j, p in enumerate(parents):
        if p >= 0:
            lrot[j] = quat_mul(quat_inv(grot[p]), grot[j])
            lpos[j] = R[p].T @ (gpos[j] - gpos[p])
    names = [g.nodes[n].name or f"node{n}" for n in joints]
    skel = Skeleton(names=names, parents=parents, offsets=lpos)
    roles = _roles(path, g, skel, joints, mapping)
    model = RiggedModel(skeleton=skel, bind_rotations=lrot, roles=roles, node_of=joints, mesh=None, glb=data,
                        name=path.name)
    model.mesh = _read_mesh(g, skin, joints, index, lpos, lrot, W)
    return model


def _roles(path: Path, g, skel: Skeleton, joints: list[int], mapping) -> dict:
    if isinstance(mapping, (str, Path)):
        try:
            with open(mapping, "rb") as f:
                doc = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise SkeletonError(f"{mapping}: cannot read the role mapping: {e}") from None
        mapping = doc.get("roles", doc)
    given = dict(mapping or {})
    lower = {n.rsplit(":", 1)[-1].lower(): n for n in skel.names}
    for role, cands in _EXTRA_ROLE_NAMES.items():
        hit = next((lower[c] for c in cands if c in lower), None)
        if hit and role not in given:
            given[role] = hit
    for role, j in _vrm_roles(g, joints).items():
        given.setdefault(role, skel.names[j])
    try:
        return find_roles(skel.names, given or None, required=REQUIRED_ROLES)
    except SkeletonError as e:
        raise SkeletonError(f"{path}: not a humanoid rig the app can drive: {e}") from None


def _read_mesh(g, skin, joints, index, lpos, lrot, W) -> SkinnedMesh | None:
    """The first mesh that uses the skin, with its vertices in the bind pose's world frame (metres) and
    its joint indices in skeleton order; None when there is none."""
    node = next((n for n in g.nodes if n.skin == 0 and n.mesh is not None), None)
    if node is None:
        return None
    prim = g.meshes[node.mesh].primitives[0]
    a = prim.attributes
    if a.POSITION is None or a.JOINTS_0 is None or a.WEIGHTS_0 is None:
        return None
    pos = _accessor(g, a.POSITION)
    jt = _accessor(g, a.JOINTS_0).astype(np.int64)
    w = _accessor(g, a.WEIGHTS_0)
    nrm = _accessor(g, a.NORMAL) if a.NORMAL is not None else np.zeros_like(pos)
    tri = (_accessor(g, prim.indices).astype(np.int64).reshape(-1, 3) if prim.indices is not None
           else np.arange(len(pos)).reshape(-1, 3))
    # Skin joint slot -> skeleton index (joints were sorted parents-first).
    slot = np.array([index[n] for n in skin.joints])
    ibm = (_accessor(g, skin.inverseBindMatrices).reshape(-1, 4, 4).transpose(0, 2, 1)
           if skin.inverseBindMatrices is not None else np.linalg.inv(W[slot]))
    # Bind-pose world position of each vertex: its joints' rest world matrices times their inverse bind
    # matrices, blended by the weights (the identity for a file whose rest pose is its bind pose).
    M = np.einsum("jab,jbc->jac", W[slot], ibm)     # world_bind(joint) @ IBM, per skin slot
    ph = np.c_[pos, np.ones(len(pos))]
    world = np.zeros((len(pos), 3))
    for k in range(4):
        world += w[:, k:k + 1] * np.einsum("vab,vb->va", M[jt[:, k]], ph)[:, :3]
    n_world = np.zeros_like(nrm)
    for k in range(4):
        n_world += w[:, k:k + 1] * np.einsum("vab,vb->va", M[jt[:, k], :3, :3], nrm)
    n_world /= np.maximum(np.linalg.norm(n_world, axis=1, keepdims=True), 1e-12)
    return SkinnedMesh(positions=world.astype(np.float32), normals=n_world.astype(np.float32),
                       triangles=tri.astype(np.uint32), joints=slot[jt].astype(np.uint16),
                       weights=(w / np.maximum(w.sum(1, keepdims=True), 1e-12)).astype(np.float32),
                       bind_positions=lpos, bind_rotations=lrot)


REST_TPOSE_DEG = 25.0     # a rest pose whose bones are all this close to the canonical T-pose is one


def source_bind_frame(skeleton: Skeleton, roles: dict, positions: np.ndarray) -> int | None:
    """The source's bind pose for retargeting onto a model: None (its rest pose) when that is a T-pose
    within REST_TPOSE_DEG, else frame 0. The live table and the offline export use the same choice."""
    lpos = np.array(skeleton.offsets, np.float64)
    lpos[0] = positions[0, 0]
    _, _, _, swing = canonical_tpose(skeleton, roles, lpos, quat_identity((skeleton.num_joints,)))
    return None if swing <= REST_TPOSE_DEG else 0


def source_bind_pose(skeleton: Skeleton, roles: dict, positions: np.ndarray, rotations: np.ndarray):
    """Local (J, 3), (J, 4) bind pose of a source whose motion is positions/rotations (F, J, ...):
    its rest pose or frame 0, as source_bind_frame chooses."""
    frame = source_bind_frame(skeleton, roles, positions)
    if frame is None:
        lpos = np.array(skeleton.offsets, np.float64)
        lpos[0] = positions[0, 0]
        return lpos, quat_identity((skeleton.num_joints,))
    return np.asarray(positions[frame], np.float64), np.asarray(rotations[frame], np.float64)


def live_retarget(source: Skeleton, source_roles: dict, source_bind: tuple, model: RiggedModel) -> dict:
    """The page's per-bone table (JSON-ready): {"bones": {model joint name: {"source": database joint
    index, "offset": [w,x,y,z]} or {"local": [w,x,y,z]}}, "hips": model hips name, "hips_source": database
    hips index, "root_source": 0, "scale": leg-length ratio}."""
    mapping = auto_mapping(source, source_roles, model.skeleton, model.roles)
    _, s_gpos, s_grot, _ = canonical_tpose(source, source_roles, *source_bind)
    t_lrot, t_gpos, t_grot, _ = canonical_tpose(model.skeleton, model.roles, model.skeleton.offsets,
                                                model.bind_rotations)
    bones = {}
    for t, name in enumerate(model.skeleton.names):
        if t in mapping:
            off = quat_mul(quat_inv(s_grot[mapping[t]]), t_grot[t])
            bones[name] = {"source": int(mapping[t]), "offset": [round(float(v), 6) for v in off]}
        else:
            bones[name] = {"local": [round(float(v), 6) for v in t_lrot[t]]}

    def leg(gpos, roles):
        return gpos[roles["hips"], 1] - 0.5 * (gpos[roles["left_foot"], 1] + gpos[roles["right_foot"], 1])
    return {"bones": bones, "hips": model.skeleton.names[model.roles["hips"]], "hips_source": int(source_roles["hips"]),
            "scale": round(float(leg(t_gpos, model.roles) / leg(s_gpos, source_roles)), 6)}


def identity_retarget(skeleton: Skeleton, roles: dict) -> dict:
    """The page's table for a body built on the database skeleton itself (mesh.body_mesh): every bone
    follows its own joint."""
    ident = [1.0, 0.0, 0.0, 0.0]
    return {"bones": {n: {"source": j, "offset": ident} for j, n in enumerate(skeleton.names)},
            "hips": skeleton.names[roles["hips"]], "hips_source": int(roles["hips"]), "scale": 1.0}


def retarget_to_model(anim: Animation, model: RiggedModel) -> Animation:
    """`anim` on the model's skeleton (retarget.retarget_animation with the model's roles and bind pose)."""
    src_roles = find_roles(anim.skeleton.names, required=())
    pairs = auto_mapping(anim.skeleton, src_roles, model.skeleton, model.roles)
    mapping = {"joints": {model.skeleton.names[t]: anim.skeleton.names[s] for t, s in pairs.items()},
               "target_roles": {r: model.skeleton.names[j] for r, j in model.roles.items()}}
    bind = Animation(skeleton=model.skeleton, positions=np.asarray(model.skeleton.offsets)[None],
                     rotations=np.asarray(model.bind_rotations)[None], fps=anim.fps)
    return retarget_animation(anim, bind, mapping,
                              source_bind_frame=source_bind_frame(anim.skeleton, src_roles, anim.positions))
