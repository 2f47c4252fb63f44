"""Motion clips from a glTF binary (.glb): every animation of the file is one clip on its skeleton.

The skeleton is the union of the file's skins' joints (or, in a file without a skin, the nodes its
animations move and the nodes below them), in depth-first order of the node tree's children, as a BVH
lists its joints (so a BVH and its glTF export share one skeleton in a database). Each animation is sampled at 60 fps (SAMPLE_FPS) from its first to its
last key time, with glTF's interpolation rules: STEP holds the previous key, LINEAR interpolates
(slerp, shortest way, for rotations), CUBICSPLINE evaluates the Hermite curve with the file's tangents
(rotations normalised afterwards). A channel that starts late holds its first key before it, one that
ends early its last key after it; a node without a channel keeps its rest transform.

Units: glTF is metres, Y up, facing +Z, the library's frame. Everything above the joints (an armature
node's rotation or 0.01 scale, as files converted from FBX carry) is folded in: the joints' world
transforms are computed through every ancestor node, their scales removed, and the local transforms
re-derived from those, so the clip's offsets are in metres whatever the file's node scales were.

Nothing outside the file is read (io.gltf.read_glb refuses external `uri`s); every count is bounded
before arrays are allocated (MAX_CLIP_SECONDS, MAX_CLIP_VALUES), every key time must be finite and
non-decreasing.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..motion.animation import Animation, Skeleton
from ..maths.rotations import quat_from_matrix, quat_inv, quat_mul, quat_normalize, quat_slerp, quat_to_matrix
from .bvh import POSITION_CHANNELS
from .gltf import COMPONENT_TYPES, GLB, MOVING_TRANSLATION_M, GLTFError, read_accessor, read_glb, to_wxyz

SAMPLE_FPS = 60.0
MAX_CLIP_SECONDS = 3600.0          # an hour of motion in one animation is a damaged file
MAX_CLIP_VALUES = 2_000_000        # frames x nodes of one animation (256 MB per array of 4x4 matrices)
MAX_JOINTS = 1024
_PATHS = {"translation": 3, "rotation": 4, "scale": 3}


def read_gltf_clips(path, fps: float = SAMPLE_FPS) -> list[Animation]:
    """The animations of a .glb as clips (list in file order), sampled at `fps`. Each clip's `name` is
    the animation's name (else `animation N`), its source the file. Raises GLTFError naming the file and
    the part for a file that is not a readable animated glTF."""
    path = Path(path)
    if path.suffix.lower() == ".gltf":
        raise GLTFError(f"{path}: a .gltf with separate buffer and image files is not read; give the binary "
                        f"form (.glb), e.g. re-export it from Blender as 'glTF Binary'")
    glb = read_glb(path)
    nodes = glb.doc.get("nodes", [])
    animations = glb.doc.get("animations", [])
    if not animations:
        raise GLTFError(f"{path}: no animation (a clip file needs at least one)")
    parent = {c: i for i, n in enumerate(nodes) for c in n.get("children", [])}
    joints = _skeleton_nodes(glb, parent, animations)
    # The nodes whose transforms make up the joints' world transforms: the joints and their ancestors.
    chain = set()
    for j in joints:
        n = j
        while n is not None and n not in chain:
            chain.add(n)
            n = parent.get(n)
    order = _parents_first(nodes, parent, chain)
    clips = []
    for a, anim in enumerate(animations):
        name = anim.get("name") if isinstance(anim.get("name"), str) and anim.get("name") else f"animation {a}"
        try:
            clips.append(_clip(glb, anim, a, joints, parent, order, fps))
        except GLTFError as e:
            raise GLTFError(f"{path}: animations[{a}] ({name[:60]!r}): {e}") from None
        clips[-1].name = name
    return clips


def _skeleton_nodes(glb: GLB, parent: dict, animations: list) -> list[int]:
    """Joint nodes, depth first (see the module docstring)."""
    nodes, skins = glb.doc.get("nodes", []), glb.doc.get("skins", [])
    joints: list[int] = []
    for s in skins:
        joints += [j for j in s["joints"] if j not in joints]
    if not joints:
        moved = {ch["target"]["node"] for an in animations for ch in an.get("channels", [])
                 if "node" in ch["target"] and ch["target"].get("path") in _PATHS}
        if not moved:
            raise GLTFError(f"{glb.path}: no skin and no animated node: nothing to read as a skeleton")
        # The moved nodes' tree from the topmost moved node down, skipping meshes and cameras.
        tops = set()
        for n in moved:
            top = n
            p = parent.get(n)
            while p is not None:
                if p in moved:
                    top = p
                p = parent.get(p)
            tops.add(top)
        stack = sorted(tops, reverse=True)
        while stack:
            n = stack.pop()
            if "mesh" in nodes[n] or "camera" in nodes[n]:
                continue
            joints.append(n)
            stack.extend(reversed(nodes[n].get("children", [])))
    if len(joints) > MAX_JOINTS:
        raise GLTFError(f"{glb.path}: {len(joints)} joints, beyond the bound of {MAX_JOINTS}")
    js = set(joints)
    roots = [j for j in joints if _joint_parent(j, parent, js) is None]
    if len(roots) > 1:
        names = ", ".join(repr(_name(nodes, r)) for r in roots[:4])
        raise GLTFError(f"{glb.path}: the skeleton has {len(roots)} root joints ({names}); a clip needs one "
                        f"(parent them under one joint in the authoring tool)")
    out, stack = [], [n for n in reversed(range(len(nodes))) if n not in parent]
    while stack:
        n = stack.pop()
        if n in js:
            out.append(n)
        stack.extend(reversed(nodes[n].get("children", [])))
    return out


def _joint_parent(n: int, parent: dict, joints: set) -> int | None:
    p = parent.get(n)
    while p is not None and p not in joints:
        p = parent.get(p)
    return p


def _name(nodes: list, n: int) -> str:
    name = nodes[n].get("name")
    return name if isinstance(name, str) and name else f"node{n}"


def _parents_first(nodes: list, parent: dict, keep: set) -> list[int]:
    order = [i for i in range(len(nodes)) if i not in parent]
    for i in order:
        order.extend(nodes[i].get("children", []))
    return [i for i in order if i in keep]


def _rest(node: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Rest translation (3,), rotation (w,x,y,z), scale (3,), or its matrix (4, 4) when given as one."""
    if "matrix" in node:
        return np.zeros(3), np.array([1.0, 0, 0, 0]), np.ones(3), np.array(node["matrix"], np.float64).reshape(4, 4).T
    r = to_wxyz(np.array(node.get("rotation", [0, 0, 0, 1]), np.float64))
    return (np.array(node.get("translation", [0, 0, 0]), np.float64), r / np.linalg.norm(r),
            np.array(node.get("scale", [1, 1, 1]), np.float64), None)


def _key_times(glb: GLB, i: int) -> np.ndarray:
    acc = glb.doc["accessors"][i]
    if acc["type"] != "SCALAR" or acc["componentType"] != 5126:
        raise GLTFError(f"accessors[{i}]: key times must be float scalars")
    t = read_accessor(glb, i, "key times")[:, 0]
    if (np.diff(t) < 0).any():
        raise GLTFError(f"accessors[{i}]: key times go backwards")
    if t[0] < -MAX_CLIP_SECONDS or t[-1] - t[0] > MAX_CLIP_SECONDS:
        raise GLTFError(f"accessors[{i}]: key times span {t[-1] - t[0]:g} s from {t[0]:g} s, beyond the bound "
                        f"of {MAX_CLIP_SECONDS:g} s")
    return t


def _channel_values(glb: GLB, sampler: dict, path: str, keys: int, interp: str) -> np.ndarray:
    i = sampler["output"]
    acc = glb.doc["accessors"][i]
    width = _PATHS[path]
    kind = np.dtype(COMPONENT_TYPES[acc["componentType"]]).kind
    if acc["type"] != f"VEC{width}" or (kind != "f" and not (path == "rotation" and acc.get("normalized"))):
        raise GLTFError(f"accessors[{i}]: {path} keys must be VEC{width} floats")
    per_key = 3 if interp == "CUBICSPLINE" else 1
    if acc["count"] != per_key * keys:
        raise GLTFError(f"accessors[{i}]: {acc['count']} {path} values for {keys} key times "
                        f"({interp} needs {per_key} per key)")
    v = read_accessor(glb, i, path)
    if path == "rotation":
        v = to_wxyz(v)
        if (np.linalg.norm(v[1::3] if per_key == 3 else v, axis=1) < 1e-6).any():
            raise GLTFError(f"accessors[{i}]: a zero quaternion is no rotation")
    elif np.abs(v).max() > 1e6:
        raise GLTFError(f"accessors[{i}]: {path} values beyond 1e6")
    return v


def sample_channel(times: np.ndarray, values: np.ndarray, interp: str, t: np.ndarray,
                   rotation: bool) -> np.ndarray:
    """A glTF sampler's value at times t (s): values (K, C) or, for CUBICSPLINE, (3K, C) as in-tangent,
    value, out-tangent per key; quaternions (w, x, y, z) come out unit length."""
    K = len(times)
    vals = values[1::3] if interp == "CUBICSPLINE" else values
    if K == 1:
        out = np.repeat(vals[:1], len(t), axis=0)
        return quat_normalize(out) if rotation else out
    k = np.clip(np.searchsorted(times, t, side="right") - 1, 0, K - 2)
    dt = times[k + 1] - times[k]
    with np.errstate(divide="ignore", invalid="ignore"):
        u = np.where(dt > 0, (t - times[k]) / np.where(dt > 0, dt, 1.0), 1.0)
    u = np.clip(u, 0.0, 1.0)[:, None]
    if interp == "STEP":
        out = np.where(u >= 1.0, vals[k + 1], vals[k])
    elif interp == "CUBICSPLINE":
        a_out, b_in = values[3 * k + 2], values[3 * (k + 1)]
        u2, u3, d = u * u, u * u * u, dt[:, None]
        out = ((2 * u3 - 3 * u2 + 1) * vals[k] + (u3 - 2 * u2 + u) * d * a_out
               + (-2 * u3 + 3 * u2) * vals[k + 1] + (u3 - u2) * d * b_in)
    elif rotation:
        a, b = quat_normalize(vals[k]), quat_normalize(vals[k + 1])
        b = np.where((a * b).sum(-1, keepdims=True) < 0, -b, b)      # the shortest way round
        out = quat_slerp(a, b, u)
    else:
        out = vals[k] * (1 - u) + vals[k + 1] * u
    return quat_normalize(out) if rotation else out


def _trs_matrices(t: np.ndarray, r: np.ndarray, s: np.ndarray) -> np.ndarray:
    m = np.zeros((max(len(t), len(r), len(s)), 4, 4))
    m[..., :3, :3] = quat_to_matrix(r) * s[..., None, :]
    m[..., :3, 3] = t
    m[..., 3, 3] = 1.0
    return m


def _clip(glb: GLB, anim: dict, a: int, joints: list[int], parent: dict, order: list[int], fps: float) -> Animation:
    doc = glb.doc
    nodes = doc["nodes"]
    samplers = anim.get("samplers", [])
    wanted = set(order)
    channels = []        # (node, path, key times, values, interpolation)
    for k, ch in enumerate(anim.get("channels", [])):
        node, path = ch["target"].get("node"), ch["target"].get("path")
        if node not in wanted or path not in _PATHS:
            continue     # morph weights, or a node that does not move a joint
        sm = samplers[ch["sampler"]]
        interp = sm.get("interpolation", "LINEAR")
        if interp not in ("LINEAR", "STEP", "CUBICSPLINE"):
            raise GLTFError(f"samplers[{ch['sampler']}].interpolation: {str(interp)[:20]!r} is not a glTF "
                            f"interpolation (LINEAR, STEP, CUBICSPLINE)")
        times = _key_times(glb, sm["input"])
        channels.append((node, path, times, _channel_values(glb, sm, path, len(times), interp), interp))
    if not channels:
        raise GLTFError("moves no joint of the skeleton")
    start = min(c[2][0] for c in channels)
    end = max(c[2][-1] for c in channels)
    F = int(np.floor((end - start) * fps + 1e-6)) + 1
    if F * len(order) > MAX_CLIP_VALUES:
        raise GLTFError(f"{F:,} frames of {len(order)} nodes, beyond the bound of {MAX_CLIP_VALUES:,} values")
    t = start + np.arange(F) / fps
    animated = {}
    for node, path, times, values, interp in channels:
        animated.setdefault(node, {})[path] = sample_channel(times, values, interp, t, path == "rotation")
    for n in animated:
        if "matrix" in nodes[n]:
            raise GLTFError(f"nodes[{n}]: animated, but its rest transform is a matrix (glTF forbids this)")
    rest = _world_matrices(nodes, order, parent, joints, {}, 1)
    motion = _world_matrices(nodes, order, parent, joints, animated, F)
    return _animation(glb, motion, rest, joints, parent, fps)


def _world_matrices(nodes: list, order: list[int], parent: dict, joints: list[int], animated: dict,
                    F: int) -> np.ndarray:
    """(F, J, 4, 4) world matrices of the joints: rest transforms, overridden by the sampled channels."""
    local, world = {}, {}
    for n in order:
        tr, rot, sc, mat = _rest(nodes[n])
        if mat is not None:
            local[n] = mat[None]
        else:
            ch = animated.get(n, {})
            local[n] = _trs_matrices(ch.get("translation", tr[None]), ch.get("rotation", rot[None]),
                                     ch.get("scale", sc[None]))
        p = parent.get(n)
        world[n] = local[n] if p is None else world[p] @ local[n]
    return np.stack([np.broadcast_to(world[j], (F, 4, 4)) for j in joints], axis=1)


def _animation(glb: GLB, W: np.ndarray, rest: np.ndarray, joints: list[int], parent: dict,
               fps: float) -> Animation:
    """World matrices (F, J, 4, 4) of the motion and (1, J, 4, 4) of the rest pose -> a clip whose
    local translations are metres and rotations scale-free; the rest pose gives the offsets."""
    nodes = glb.doc["nodes"]
    js = set(joints)
    index = {n: i for i, n in enumerate(joints)}
    parents = np.array([-1 if _joint_parent(n, parent, js) is None else index[_joint_parent(n, parent, js)]
                        for n in joints])
    names = [_name(nodes, n) for n in joints]
    if len(set(names)) < len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise GLTFError(f"two joints are named {dup[:60]!r} (roles are found by name)")
    lpos, lrot = local_transforms(W, parents)
    rest_pos, _ = local_transforms(rest, parents)
    # BVH-style channels, so the clip writes back as BVH as a BVH-read one does: positions where the
    # joint's local translation moves (and at the root), ZYX rotations everywhere.
    moves = np.abs(lpos - rest_pos).max(axis=0).max(axis=-1) > MOVING_TRANSLATION_M
    channels = [(POSITION_CHANNELS if p < 0 or moves[j] else ()) + ("Zrotation", "Yrotation", "Xrotation")
                for j, p in enumerate(parents)]
    skel = Skeleton(names=names, parents=parents, offsets=rest_pos[0], channels=channels)
    return Animation(skeleton=skel, positions=lpos, rotations=lrot, fps=fps, source=str(glb.path))


def local_transforms(W: np.ndarray, parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """World matrices (F, J, 4, 4) (any scale, no shear) -> local translations (F, J, 3) in world units
    and local rotations (F, J, 4) of the scale-free frames. Raises GLTFError for a degenerate matrix."""
    scale = np.linalg.norm(W[..., :3, :3], axis=-2)
    if not (np.isfinite(W).all() and (scale > 1e-9).all()):
        raise GLTFError("a joint's world transform is degenerate (a zero scale or non-finite)")
    R = W[..., :3, :3] / scale[..., None, :]
    gpos, grot = W[..., :3, 3], quat_from_matrix(R)
    lpos, lrot = gpos.copy(), grot.copy()
    for j, p in enumerate(parents):
        if p >= 0:
            lrot[:, j] = quat_mul(quat_inv(grot[:, p]), grot[:, j])
            lpos[:, j] = np.einsum("fba,fb->fa", R[:, p], gpos[:, j] - gpos[:, p])
    return lpos, quat_normalize(lrot)
