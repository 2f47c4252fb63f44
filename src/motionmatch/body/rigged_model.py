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

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..motion.animation import Animation, Skeleton
from ..io.gltf import (COMPONENT_TYPES, GLB, MAX_NODE_VALUE, GLTFError, MeshPart, SkinnedMesh, read_accessor, read_glb,
                       read_material, to_wxyz)
from ..maths.kinematics import forward_kinematics
from ..motion.retarget import auto_mapping, canonical_tpose, retarget_animation
from ..maths.rotations import quat_from_matrix, quat_identity, quat_inv, quat_mul, quat_rotate, quat_to_matrix
from ..motion.skeleton import SkeletonError, check_role_joints, find_roles, load_mapping

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
    joint; mesh: every mesh skinned to the skeleton, concatenated, in the bind pose's world frame (None
    for a model without one that could be read); glb: the file's bytes (what the app serves); parts: the
    same meshes one per skinned primitive (named after its node, with the primitive's number when a mesh
    has several), with their UVs and materials (what a USD export writes)."""

    skeleton: Skeleton
    bind_rotations: np.ndarray
    roles: dict
    node_of: list[int]
    mesh: SkinnedMesh | None
    glb: bytes
    name: str = ""
    parts: list[MeshPart] = field(default_factory=list)


MAX_SKIN_JOINTS = 1024
MAX_MESH_VERTICES = 1_000_000
MAX_POSITION_M = 1e5


def _node_matrix(node: dict) -> np.ndarray:
    if "matrix" in node:
        return np.array(node["matrix"], np.float64).reshape(4, 4).T    # column-major in the file
    m = np.eye(4)
    s = np.array(node.get("scale", [1, 1, 1]), np.float64)
    r = to_wxyz(np.array(node.get("rotation", [0, 0, 0, 1]), np.float64))
    m[:3, :3] = quat_to_matrix(r / np.linalg.norm(r)) * s[None, :]
    m[:3, 3] = node.get("translation", [0, 0, 0])
    return m


def _vrm_roles(glb: GLB, node_of: list[int]) -> dict[str, int]:
    """Role -> joint index from a VRM humanoid table (1.0 `VRMC_vrm` or 0.x `VRM`), empty without one."""
    ext = glb.doc.get("extensions") or {}
    if not isinstance(ext, dict):
        raise GLTFError(f"{glb.path}: extensions: expected a table of extensions")
    key = next((k for k in ("VRMC_vrm", "VRM") if k in ext), None)
    if key is None:
        return {}
    bad = GLTFError(f"{glb.path}: extensions.{key}.humanoid.humanBones: expected "
                    + ("a table of bone -> {\"node\": index}" if key == "VRMC_vrm" else
                       "a list of {\"bone\": name, \"node\": index}") + " (VRM's humanoid table)")
    if key == "VRMC_vrm":
        table = _table_at(ext, key, "humanoid", "humanBones", default={})
        if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
            raise bad
        bones = {k: v.get("node") for k, v in table.items()}
    else:
        table = _table_at(ext, key, "humanoid", "humanBones", default=[])
        if not isinstance(table, list) or not all(isinstance(b, dict) and isinstance(b.get("bone"), str)
                                                  for b in table):
            raise bad
        bones = {b["bone"]: b.get("node") for b in table}
    if any(isinstance(n, bool) or not isinstance(n, int) for n in bones.values()):
        raise bad
    if "upperChest" not in bones and "chest" in bones:   # the chest role is the highest spine joint
        bones["upperChest"] = bones["chest"]
    joint = {n: j for j, n in enumerate(node_of)}
    return {role: joint[bones[b]] for b, role in _VRM_ROLES.items() if bones.get(b) in joint}


def _table_at(doc: dict, *keys, default):
    """doc[k0][k1]...: `default` where the last key is missing, None where a step is not a table (a VRM 0
    `humanoid` that is a string)."""
    for k in keys[:-1]:
        doc = doc.get(k, {})
        if not isinstance(doc, dict):
            return None
    return doc.get(keys[-1], default)


def load_rigged_model(path, mapping=None) -> RiggedModel:
    """Read a rigged humanoid .glb. mapping: None, a dict role -> joint name, or a TOML file with a
    [roles] table. Raises GLTFError (not a readable skinned glTF, io.gltf.read_glb checks every index and
    byte range) or SkeletonError (not a humanoid), both naming the file."""
    path = Path(path)
    if path.suffix.lower() != ".glb":
        raise GLTFError(f"{path}: give a glTF binary (.glb)")
    glb = read_glb(path)
    nodes, skins = glb.doc.get("nodes", []), glb.doc.get("skins", [])
    if not skins:
        raise GLTFError(f"{path}: no skin: a character needs a mesh skinned to a skeleton")
    joints = list(skins[0]["joints"])
    if len(joints) > MAX_SKIN_JOINTS:
        raise GLTFError(f"{path}: skins[0] has {len(joints)} joints, beyond the bound of {MAX_SKIN_JOINTS}")
    parent_node = {c: i for i, n in enumerate(nodes) for c in n.get("children", [])}
    # Nodes parents first (read_glb proved the children form trees), world matrices down each tree.
    order = [i for i in range(len(nodes)) if i not in parent_node]
    for i in order:
        order.extend(nodes[i].get("children", []))
    depth, world = {}, {}
    for i in order:
        p = parent_node.get(i)
        depth[i] = 0 if p is None else depth[p] + 1
        world[i] = _node_matrix(nodes[i]) if p is None else world[p] @ _node_matrix(nodes[i])
    joints.sort(key=depth.__getitem__)
    index = {n: j for j, n in enumerate(joints)}
    parents = np.full(len(joints), -1)
    for j, n in enumerate(joints):
        p = parent_node.get(n)
        while p is not None and p not in index:
            p = parent_node.get(p)
        parents[j] = -1 if p is None else index[p]
    W = np.array([world[n] for n in joints])
    scale = np.linalg.norm(W[:, :3, :3], axis=1, keepdims=True)
    bad = ~(np.isfinite(W).all(axis=(1, 2)) & (scale > 1e-9).all(axis=(1, 2))
            & (np.abs(W[:, :3, 3]) <= MAX_POSITION_M).all(axis=1))
    if bad.any():
        raise GLTFError(f"{path}: nodes[{joints[int(np.argmax(bad))]}]: its world transform is degenerate (a zero "
                        f"scale) or beyond {MAX_POSITION_M:g} m")
    R = W[:, :3, :3] / scale
    grot = quat_from_matrix(R)
    gpos = W[:, :3, 3]
    lrot, lpos = grot.copy(), gpos.copy()
    for j, p in enumerate(parents):
        if p >= 0:
            lrot[j] = quat_mul(quat_inv(grot[p]), grot[j])
            lpos[j] = R[p].T @ (gpos[j] - gpos[p])
    names = [nodes[n].get("name") or f"node{n}" for n in joints]
    if len(set(names)) < len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise GLTFError(f"{path}: skins[0]: two joints are named {dup[:60]!r} (roles are found by name)")
    skel = Skeleton(names=names, parents=parents, offsets=lpos)
    roles = _roles(path, glb, skel, joints, mapping)
    model = RiggedModel(skeleton=skel, bind_rotations=lrot, roles=roles, node_of=joints, mesh=None, glb=glb.data,
                        name=path.name)
    model.parts = _read_parts(glb, joints, index, lpos, lrot, W)
    model.mesh = _joined(model.parts, lpos, lrot)
    return model


def _roles(path: Path, glb: GLB, skel: Skeleton, joints: list[int], mapping) -> dict:
    if isinstance(mapping, (str, Path)):
        mapping = load_mapping(mapping, require_table=False, joint_names=skel.names, parents=skel.parents)
    given = dict(mapping or {})
    lower = {n.rsplit(":", 1)[-1].lower(): n for n in skel.names}
    for role, cands in _EXTRA_ROLE_NAMES.items():
        hit = next((lower[c] for c in cands if c in lower), None)
        if hit and role not in given:
            given[role] = hit
    for role, j in _vrm_roles(glb, joints).items():
        given.setdefault(role, skel.names[j])
    try:
        roles = find_roles(skel.names, given or None, required=REQUIRED_ROLES)
        check_role_joints(skel.names, skel.parents, roles)
    except SkeletonError as e:
        raise SkeletonError(f"{path}: not a humanoid rig the app can drive: {e}") from None
    return roles


def _read_parts(glb: GLB, joints, index, lpos, lrot, W) -> list[MeshPart]:
    """Every mesh skinned to the skeleton (each primitive of each node whose skin's joints all belong
    to it: Xbot's body is its second mesh), vertices in the bind pose's world frame (metres), joint
    indices in skeleton order. Refuses (GLTFError) attributes of the wrong kind or length, joint slots
    outside the skin, weights that are negative or all zero, vertices beyond 1e5 m, triangles naming
    missing vertices, malformed materials and more than MAX_MESH_VERTICES in all."""
    doc = glb.doc
    parts, total = [], 0
    for n, node in enumerate(doc.get("nodes", [])):
        if "mesh" not in node or "skin" not in node:
            continue
        if not all(j in index for j in doc["skins"][node["skin"]]["joints"]):
            continue                         # skinned to another skeleton
        prims = doc["meshes"][node["mesh"]]["primitives"]
        for k in range(len(prims)):
            part = _read_primitive(glb, node, k, index, W)
            if part is None:
                continue
            total += len(part[0])
            if total > MAX_MESH_VERTICES:
                raise GLTFError(f"{glb.path}: the skinned meshes hold over {MAX_MESH_VERTICES:,} vertices")
            pos, nrm, tri, jt, w, uv = part
            name = node.get("name") or doc["meshes"][node["mesh"]].get("name") or f"node{n}"
            parts.append(MeshPart(name=f"{name}_{k}" if len(prims) > 1 else name,
                                  mesh=SkinnedMesh(positions=pos, normals=nrm, triangles=tri.astype(np.uint32), joints=jt,
                                                   weights=w, bind_positions=lpos, bind_rotations=lrot, uvs=uv),
                                  material=read_material(glb, prims[k].get("material"))))
    return parts


def _joined(parts: list[MeshPart], lpos, lrot) -> SkinnedMesh | None:
    """The parts as one mesh (the page's and the glTF export's body), None without any."""
    if not parts:
        return None
    meshes = [p.mesh for p in parts]
    offsets = np.cumsum([0] + [len(m.positions) for m in meshes[:-1]])
    return SkinnedMesh(positions=np.concatenate([m.positions for m in meshes]),
                       normals=np.concatenate([m.normals for m in meshes]),
                       triangles=np.concatenate([m.triangles.astype(np.int64) + o for m, o in zip(meshes, offsets)]).astype(np.uint32),
                       joints=np.concatenate([m.joints for m in meshes]), weights=np.concatenate([m.weights for m in meshes]),
                       bind_positions=lpos, bind_rotations=lrot)


def _read_primitive(glb: GLB, node: dict, k: int, index, W):
    """(positions, normals, triangles, joints, weights, uvs or None) of one skinned primitive, or None
    without the skinning attributes; see _read_parts."""
    doc, path = glb.doc, glb.path
    skin_i = node["skin"]
    skin = doc["skins"][skin_i]
    prim = doc["meshes"][node["mesh"]]["primitives"][k]
    a = prim["attributes"]
    if "POSITION" not in a or "JOINTS_0" not in a or "WEIGHTS_0" not in a:
        return None
    where = f"{path}: meshes[{node['mesh']}].primitives[{k}]"
    if prim.get("mode", 4) != 4:
        raise GLTFError(f"{where}.mode: {prim['mode']}; only triangles (4) are read")

    def attribute(name, width, kinds):
        acc = doc["accessors"][a[name]]
        if acc["type"] != f"VEC{width}" or np.dtype(COMPONENT_TYPES[acc["componentType"]]).kind not in kinds:
            what = {"f": "floats", "u": "integers", "fu": "floats or normalized integers"}[kinds]
            raise GLTFError(f"{where}.attributes.{name}: expected VEC{width} of {what}")
        if acc["count"] > MAX_MESH_VERTICES:
            raise GLTFError(f"{where}.attributes.{name}: {acc['count']:,} vertices, beyond the bound of "
                            f"{MAX_MESH_VERTICES:,}")
        return read_accessor(glb, a[name], name)

    pos = attribute("POSITION", 3, "f")
    jt = attribute("JOINTS_0", 4, "u").astype(np.int64)
    w = attribute("WEIGHTS_0", 4, "fu")
    nrm = attribute("NORMAL", 3, "f") if "NORMAL" in a else np.zeros_like(pos)
    uv = attribute("TEXCOORD_0", 2, "fu") if "TEXCOORD_0" in a else None
    V = len(pos)
    if not len(jt) == len(w) == len(nrm) == V or (uv is not None and len(uv) != V):
        raise GLTFError(f"{where}.attributes: POSITION, NORMAL, TEXCOORD_0, JOINTS_0 and WEIGHTS_0 differ in length")
    if np.abs(pos).max() > MAX_POSITION_M:
        raise GLTFError(f"{where}.attributes.POSITION: vertices beyond {MAX_POSITION_M:g} m")
    if jt.max() >= len(skin["joints"]):
        raise GLTFError(f"{where}.attributes.JOINTS_0: joint slot {int(jt.max())} of a {len(skin['joints'])}-joint skin")
    wsum = w.sum(1)
    if (w < 0).any() or not (wsum > 1e-6).all():
        raise GLTFError(f"{where}.attributes.WEIGHTS_0: negative weights or a vertex with none")
    if "indices" in prim:
        acc = doc["accessors"][prim["indices"]]
        if acc["type"] != "SCALAR" or np.dtype(COMPONENT_TYPES[acc["componentType"]]).kind != "u" \
                or acc["count"] % 3:
            raise GLTFError(f"{where}.indices: expected unsigned integers, three per triangle")
        tri = read_accessor(glb, prim["indices"], "indices").astype(np.int64).reshape(-1, 3)
        if tri.max() >= V:
            raise GLTFError(f"{where}.indices: vertex {int(tri.max())} of {V}")
    elif V % 3:
        raise GLTFError(f"{where}: {V} vertices without indices are not whole triangles")
    else:
        tri = np.arange(V).reshape(-1, 3)
    # Skin joint slot -> skeleton index (joints were sorted parents-first).
    slot = np.array([index[n] for n in skin["joints"]])
    if "inverseBindMatrices" in skin:
        ibm = read_accessor(glb, skin["inverseBindMatrices"], "inverseBindMatrices")[:len(slot)]
        ibm = ibm.reshape(-1, 4, 4).transpose(0, 2, 1)
        if np.abs(ibm).max() > MAX_NODE_VALUE or np.abs(ibm[:, 3] - [0, 0, 0, 1]).max() > 1e-3:
            raise GLTFError(f"{path}: skins[{skin_i}].inverseBindMatrices: entries beyond {MAX_NODE_VALUE:g} or not affine")
    else:
        ibm = np.linalg.inv(W[slot])
    # Bind-pose world position of each vertex: its joints' rest world matrices times their inverse bind
    # matrices, blended by the weights (the identity for a file whose rest pose is its bind pose).
    with np.errstate(all="ignore"):
        M = np.einsum("jab,jbc->jac", W[slot], ibm)     # world_bind(joint) @ IBM, per skin slot
        ph = np.c_[pos, np.ones(V)]
        world = np.zeros((V, 3))
        for c in range(4):
            world += w[:, c:c + 1] * np.einsum("vab,vb->va", M[jt[:, c]], ph)[:, :3]
        world /= wsum[:, None]
    if not (np.isfinite(world).all() and np.abs(world).max() <= MAX_POSITION_M):
        raise GLTFError(f"{path}: skins[{skin_i}].inverseBindMatrices: the bind pose puts vertices beyond "
                        f"{MAX_POSITION_M:g} m")
    n_world = np.zeros_like(nrm)
    for c in range(4):
        n_world += w[:, c:c + 1] * np.einsum("vab,vb->va", M[jt[:, c], :3, :3], nrm)
    n_world /= np.maximum(np.linalg.norm(n_world, axis=1, keepdims=True), 1e-12)
    return (world.astype(np.float32), n_world.astype(np.float32), tri.astype(np.int64),
            slot[jt].astype(np.uint16), (w / wsum[:, None]).astype(np.float32),
            None if uv is None else uv.astype(np.float32))


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


def page_pose(model: RiggedModel, table: dict, gpos: np.ndarray, grot: np.ndarray) -> Animation:
    """The model's pose as the page draws it (static/skinned.js pose()) from a live_retarget table and
    database world positions gpos (F, J, 3) / rotations grot (F, J, 4), joint 0 the simulation root:
    mapped bones take the source's world rotation times their offset, the others their table rotation,
    and the hips go to root + scale x (hips - root), raised by the table's ground."""
    skel = model.skeleton
    F, J = len(gpos), skel.num_joints
    world, local = np.zeros((F, J, 4)), np.zeros((F, J, 4))
    for j, name in enumerate(skel.names):             # parents first
        b, p = table["bones"][name], skel.parents[j]
        if "source" in b:
            world[:, j] = quat_mul(grot[:, b["source"]], np.array(b["offset"]))
        else:
            world[:, j] = quat_mul(world[:, p], np.array(b["local"])) if p >= 0 else np.array(b["local"])
        local[:, j] = world[:, j] if p < 0 else quat_mul(quat_inv(world[:, p]), world[:, j])
    pos = np.repeat(np.asarray(skel.offsets, np.float64)[None], F, 0)
    h, hips = table["hips_source"], model.roles["hips"]
    target = gpos[:, 0] + table["scale"] * (gpos[:, h] - gpos[:, 0])
    target[:, 1] += table.get("ground", 0.0)
    p = skel.parents[hips]
    if p < 0:
        pos[:, hips] = target
    else:                                  # the joints above the hips keep their offsets
        above_pos, above_rot = forward_kinematics(pos, local, skel.parents)
        pos[:, hips] = quat_rotate(quat_inv(above_rot[:, p]), target - above_pos[:, p])
    return Animation(skeleton=skel, positions=pos, rotations=local, fps=60.0)


def live_retarget(source: Skeleton, source_roles: dict, source_bind: tuple, model: RiggedModel,
                  source_floor: float = 0.0, source_motion: tuple | None = None) -> dict:
    """The page's per-bone table (JSON-ready): {"bones": {model joint name: {"source": database joint
    index, "offset": [w,x,y,z]} or {"local": [w,x,y,z]}}, "hips": model hips name, "hips_source": database
    hips index, "root_source": 0, "scale": leg-length ratio, "ground": metres the page adds to the hips'
    height}. source_floor: the height (m) of the source's lowest foot joint when planted
    (preprocess.planted_toe_height_m). ground puts the model's soles on the floor where the feet are
    planted: with source_motion (database world positions and rotations (F, J, ...), a sample of its
    frames), minus the SOLE_PERCENTILE-th percentile of the lowest skinned foot vertex of the page's pose
    (page_pose) over them; without, from the standing canonical T-poses and sole_floor."""
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

    def standing(gpos, roles):     # hips above the lowest foot joint, standing straight
        feet = [roles[r] for r in ("left_foot", "right_foot", "left_toe", "right_toe") if r in roles]
        return gpos[roles["hips"], 1] - gpos[feet, 1].min()
    scale = float(leg(t_gpos, model.roles) / leg(s_gpos, source_roles))
    sole = sole_floor(model)
    ground = 0.0 if sole is None else (sole + standing(t_gpos, model.roles)
                                       - scale * (standing(s_gpos, source_roles) + source_floor))
    table = {"bones": bones, "hips": model.skeleton.names[model.roles["hips"]],
             "hips_source": int(source_roles["hips"]), "scale": round(scale, 6), "ground": 0.0}
    soles = sole_heights(model, page_pose(model, table, *source_motion)) if source_motion and sole is not None else None
    table["ground"] = round(float(ground if soles is None else -np.percentile(soles, SOLE_PERCENTILE)), 6)
    return table


def identity_retarget(skeleton: Skeleton, roles: dict) -> dict:
    """The page's table for a body built on the database skeleton itself (mesh.body_mesh): every bone
    follows its own joint."""
    ident = [1.0, 0.0, 0.0, 0.0]
    return {"bones": {n: {"source": j, "offset": ident} for j, n in enumerate(skeleton.names)},
            "hips": skeleton.names[roles["hips"]], "hips_source": int(roles["hips"]), "scale": 1.0}


SOLE_PERCENTILE = 5        # of the per-frame lowest sole height: where a clip's feet are planted


def _foot_vertices(model: RiggedModel) -> np.ndarray:
    """Indices of the skinned vertices whose heaviest joint is a foot or toe joint (or a joint below one)."""
    if model.mesh is None:
        return np.zeros(0, np.int64)
    feet = [model.roles[r] for r in ("left_foot", "right_foot", "left_toe", "right_toe") if r in model.roles]
    below = set(feet)
    for j, p in enumerate(model.skeleton.parents):       # parents first: descendants follow their parents
        if p in below:
            below.add(j)
    m = model.mesh
    heaviest = m.joints[np.arange(len(m.weights)), np.argmax(m.weights, axis=1)]
    return np.flatnonzero(np.isin(heaviest, sorted(below)))


def _bind_world(model: RiggedModel):
    gpos, grot = forward_kinematics(np.asarray(model.skeleton.offsets, np.float64)[None],
                                    np.asarray(model.bind_rotations, np.float64)[None], model.skeleton.parents)
    return gpos[0], grot[0]


def sole_floor(model: RiggedModel) -> float | None:
    """Height (m) of the model's lowest foot or toe joint above its soles in the bind pose: the lowest
    skinned foot vertex (_foot_vertices). Where that joint stands when a foot is planted flat as in the
    bind pose; None without a skinned mesh or foot vertices."""
    feet = [model.roles[r] for r in ("left_foot", "right_foot", "left_toe", "right_toe") if r in model.roles]
    foot = _foot_vertices(model)
    if not len(foot):
        return None
    gpos, _ = _bind_world(model)
    return float(gpos[feet, 1].min() - model.mesh.positions[foot, 1].min())


def sole_heights(model: RiggedModel, anim: Animation) -> np.ndarray | None:
    """Per frame of `anim` (on the model's skeleton), the height (m) of the lowest skinned foot vertex,
    skinned linearly from the bind pose; None without foot vertices."""
    foot = _foot_vertices(model)
    if not len(foot):
        return None
    m = model.mesh
    bpos, brot = _bind_world(model)
    gpos, grot = anim.global_transforms()
    v = np.asarray(m.positions[foot], np.float64)
    out = np.zeros((anim.num_frames, len(foot)))
    for c in range(4):
        j, w = m.joints[foot, c].astype(np.int64), m.weights[foot, c].astype(np.float64)
        turn = quat_mul(grot[:, j], quat_inv(brot[j])[None])
        out += w[None] * (quat_rotate(turn, (v - bpos[j])[None]) + gpos[:, j])[..., 1]
    return out.min(axis=1)


def retarget_to_model(anim: Animation, model: RiggedModel) -> Animation:
    """`anim` on the model's skeleton (retarget.retarget_animation with the model's roles and bind pose),
    moved vertically so that its own soles touch the ground where the feet are planted: the
    SOLE_PERCENTILE-th percentile of the lowest skinned foot vertex's height (sole_heights) is 0."""
    src_roles = find_roles(anim.skeleton.names, required=())
    pairs = auto_mapping(anim.skeleton, src_roles, model.skeleton, model.roles)
    mapping = {"joints": {model.skeleton.names[t]: anim.skeleton.names[s] for t, s in pairs.items()},
               "target_roles": {r: model.skeleton.names[j] for r, j in model.roles.items()}}
    bind = Animation(skeleton=model.skeleton, positions=np.asarray(model.skeleton.offsets)[None],
                     rotations=np.asarray(model.bind_rotations)[None], fps=anim.fps)
    out = retarget_animation(anim, bind, mapping, floor=sole_floor(model),
                             source_bind_frame=source_bind_frame(anim.skeleton, src_roles, anim.positions))
    soles = sole_heights(model, out)
    if soles is not None:
        out.positions[:, 0, 1] -= np.percentile(soles, SOLE_PERCENTILE)
    return out
