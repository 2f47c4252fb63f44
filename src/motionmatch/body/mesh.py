"""A default humanoid body for any skeleton: implicit surface around the bones, marching cubes, skin weights.

The body is built in the skeleton's canonical T-pose (retarget.canonical_tpose: facing +Z, arms out
sideways), where limbs are apart and a blend of shapes cannot glue an arm to the torso:

1. each bone (parent joint -> child joint, or joint -> End Site) is a tapered capsule whose radii come
   from the bone's kind (thigh, forearm, ...), scaled by the skeleton's height; the skull is an ellipsoid;
   the thighs start a little outward of the hip joints and a crosswise capsule under them rounds the crotch;
2. the signed distances of all shapes are merged with a smooth minimum (radius BLEND_M, HIP_BLEND_M where
   the thighs and the crotch meet the pelvis) into one field
   sampled on a voxel grid (default 1.5 cm), and marching cubes (scikit-image) extracts its zero surface;
3. every vertex gets up to four joints weighted by a heat-like falloff of its distance to each joint's
   shapes (the surface distance beyond the nearest shape, e-folding over FALLOFF_M): a vertex deep in
   one limb follows that bone, one near a joint blends the two bones meeting there.

Units: metres. The result is a `io.gltf.SkinnedMesh` whose bind pose is the T-pose with the feet on
the ground (y = 0 under the lowest foot shape).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ..motion.animation import Skeleton
from ..io.gltf import SkinnedMesh, write_gltf
from ..maths.kinematics import forward_kinematics
from ..maths.rotations import quat_identity, quat_rotate
from ..motion.skeleton import find_roles
from ..motion.retarget import canonical_tpose

VOXEL_M = 0.015
BLEND_M = 0.03                  # smooth-minimum radius where shapes meet
CROTCH_DROP_M, CROTCH_R_M = 0.03, 0.05   # the crotch capsule below the hip joints (see body_shapes)
THIGH_SPLAY_M = 0.02            # the thighs' top ends this far outward of the hip joints
HIP_BLEND_M = 0.06              # the wider smooth minimum of the thighs and the crotch with the pelvis
FALLOFF_M = 0.025               # skin weight e-folding distance
REFERENCE_HEIGHT_M = 1.7        # the radii below are for a body this tall
NOT_BODY = re.compile(r"(?i)^(simulation|(joint_)?root|reference)$")

# (pattern on the bone's parent joint name, radius at the parent, radius at the child) in metres; first match.
_RADII = [
    (r"hips|pelvis", 0.10, 0.09),
    (r"upperchest|spine2|chest", 0.11, 0.085),
    (r"spine", 0.10, 0.105),
    (r"neck", 0.045, 0.045),
    (r"head", 0.0, 0.0),                     # the skull ellipsoid instead
    (r"shoulder|clavicle|collar", 0.055, 0.05),
    (r"forearm|lowerarm|elbow", 0.038, 0.03),
    (r"upperarm|arm", 0.047, 0.039),
    (r"hand|wrist", 0.032, 0.022),
    (r"finger|thumb|index|middle|ring|pinky", 0.011, 0.009),
    (r"upperleg|upleg|thigh", 0.085, 0.05),
    (r"lowerleg|leg|shin|calf|knee", 0.05, 0.04),
    (r"foot|ankle", 0.043, 0.035),
    (r"toe", 0.033, 0.022),
]


def _radii(name: str) -> tuple[float, float]:
    n = name.lower()
    for pattern, a, b in _RADII:
        if re.search(pattern, n):
            return a, b
    return 0.03, 0.03


def tpose_bind(skeleton: Skeleton, roles: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Local positions (J, 3) and rotations (J, 4) of the skeleton's canonical T-pose, feet on y = 0,
    hips above the origin."""
    roles = roles if roles is not None else find_roles(skeleton.names)
    lpos = np.array(skeleton.offsets, np.float64)
    lrot, gpos, _, _ = canonical_tpose(skeleton, roles, lpos, quat_identity((skeleton.num_joints,)))
    hips = roles["hips"]
    feet = [roles[r] for r in ("left_foot", "right_foot", "left_toe", "right_toe") if r in roles]
    # Move the whole skeleton (its root's translation is in the world): hips above the origin, the ankle
    # joints about a foot radius above the ground.
    lpos[0] -= [gpos[hips, 0], gpos[feet, 1].min() - 0.043 * _scale(gpos, roles), gpos[hips, 2]]
    return lpos, lrot


def _scale(gpos: np.ndarray, roles: dict) -> float:
    height = gpos[roles["head"], 1] - min(gpos[roles["left_foot"], 1], gpos[roles["right_foot"], 1])
    # Head joint to ankle is about 0.84 of the standing height.
    return float(np.clip(height / 0.84 / REFERENCE_HEIGHT_M, 0.3, 3.0))


def body_shapes(skeleton: Skeleton, gpos: np.ndarray, grot: np.ndarray, roles: dict):
    """The body's shapes in the bind pose: capsules (a (S,3), b (S,3), ra (S,), rb (S,), owner joint (S,),
    blend radius (S,)) and the skull ellipsoid (centre (3,), radii (3,), owner joint)."""
    s = _scale(gpos, roles)
    body = [not NOT_BODY.match(n) for n in skeleton.names]
    a, b, ra, rb, owner, blend = [], [], [], [], [], []
    thighs = (roles["left_upper_leg"], roles["right_upper_leg"])
    for j, p in enumerate(skeleton.parents):
        if p < 0 or not body[p] or not body[j]:
            continue
        r0, r1 = _radii(skeleton.names[p])
        if r0 <= 0 or np.linalg.norm(gpos[j] - gpos[p]) < 1e-4:
            continue
        top = gpos[p]
        if p in thighs:
            # The thigh's top end sits outward of the hip joint, as a real thigh's mass does: the
            # legs part below the pelvis with room for a rounded crotch.
            out = gpos[p] - gpos[roles["hips"]]
            out[1] = 0.0
            top = top + THIGH_SPLAY_M * s * out / max(np.linalg.norm(out), 1e-9)
        a.append(top), b.append(gpos[j]), ra.append(r0 * s), rb.append(r1 * s), owner.append(p)
        blend.append(HIP_BLEND_M * s if p in thighs else BLEND_M)
    for j, end in skeleton.end_sites.items():
        r0, r1 = _radii(skeleton.names[j])
        if r0 <= 0 or not body[j]:
            continue
        a.append(gpos[j]), b.append(gpos[j] + quat_rotate(grot[j], np.asarray(end, np.float64)))
        ra.append(r0 * s), rb.append(r1 * s), owner.append(j), blend.append(BLEND_M)
    # The crotch: the thighs' capsules leave a slit between them that ends in a sharp, dark notch under
    # the pelvis. A crosswise capsule below the hip joints, blended wide, fills the top of the slit with
    # a rounded arch; it belongs to the hips, so the thighs swing away from it.
    left, right = gpos[roles["left_upper_leg"]], gpos[roles["right_upper_leg"]]
    drop = np.array([0.0, CROTCH_DROP_M * s, 0.0])
    a.append(left - drop), b.append(right - drop), ra.append(CROTCH_R_M * s), rb.append(CROTCH_R_M * s)
    owner.append(roles["hips"]), blend.append(HIP_BLEND_M * s)
    head = roles["head"]
    skull = (gpos[head] + np.array([0.0, 0.075, 0.015]) * s, np.array([0.085, 0.11, 0.1]) * s, head)
    return (np.array(a), np.array(b), np.array(ra), np.array(rb), np.array(owner), np.array(blend)), skull


def _capsule_distance(p: np.ndarray, a, b, ra, rb) -> np.ndarray:
    """Signed distance (approximate for ra != rb) from points (N, 3) to one tapered capsule."""
    ab = b - a
    t = np.clip((p - a) @ ab / max(float(ab @ ab), 1e-12), 0.0, 1.0)
    return np.linalg.norm(p - (a + t[:, None] * ab), axis=1) - (ra + (rb - ra) * t)


def _ellipsoid_distance(p: np.ndarray, centre, radii) -> np.ndarray:
    """Approximate signed distance to an axis-aligned ellipsoid (exact on the axes)."""
    q = (p - centre) / radii
    k = np.linalg.norm(q, axis=1)
    return (k - 1.0) * np.min(radii)


def _smooth_min(d1: np.ndarray, d2: np.ndarray, k: float) -> np.ndarray:
    h = np.maximum(k - np.abs(d1 - d2), 0.0) / k
    return np.minimum(d1, d2) - h * h * k * 0.25


def body_mesh(skeleton: Skeleton, roles: dict | None = None, voxel: float = VOXEL_M) -> SkinnedMesh:
    """A skinned humanoid mesh for `skeleton` (roles from skeleton.find_roles unless given); see the
    module docstring. Raises SkeletonError for a skeleton without the humanoid roles."""
    from skimage.measure import marching_cubes

    roles = roles if roles is not None else find_roles(skeleton.names)
    lpos, lrot = tpose_bind(skeleton, roles)
    gpos, grot = forward_kinematics(lpos[None], lrot[None], skeleton.parents)
    gpos, grot = gpos[0], grot[0]
    (a, b, ra, rb, owner, blend), (sc, sr, sj) = body_shapes(skeleton, gpos, grot, roles)
    margin = max(ra.max(), rb.max(), sr.max()) + 2 * voxel
    lo = np.minimum(np.minimum(a, b).min(0), sc - sr) - margin
    hi = np.maximum(np.maximum(a, b).max(0), sc + sr) + margin
    axes = [np.arange(lo[i], hi[i] + voxel, voxel) for i in range(3)]
    field = _ellipsoid_distance(np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3), sc, sr)
    field = field.reshape(tuple(len(x) for x in axes))
    # A shape changes the field's sign only where it is closer than 1.25 blend radii: evaluate it in its
    # bounding box grown by that much (an order of magnitude fewer points than the whole grid).
    for i in range(len(a)):
        r = max(ra[i], rb[i]) + 1.25 * blend[i] + voxel
        i0 = np.maximum(((np.minimum(a[i], b[i]) - r - lo) / voxel).astype(int), 0)
        i1 = ((np.maximum(a[i], b[i]) + r - lo) / voxel).astype(int) + 1
        box = tuple(slice(i0[k], i1[k]) for k in range(3))
        pts = np.stack(np.meshgrid(*(axes[k][box[k]] for k in range(3)), indexing="ij"), axis=-1)
        d = _capsule_distance(pts.reshape(-1, 3), a[i], b[i], ra[i], rb[i]).reshape(pts.shape[:3])
        field[box] = _smooth_min(field[box], d, blend[i])
    # Positive inside, so the normals (pointing down the field) face outwards.
    verts, faces, normals, _ = marching_cubes(-field, level=0.0, spacing=(voxel,) * 3)
    verts = verts + lo
    faces = faces.astype(np.uint32)
    v0, v1, v2 = (verts[faces[:, i]] for i in range(3))
    if np.einsum("ij,ij->i", v0, np.cross(v1 - v0, v2 - v0)).sum() < 0:   # signed volume: make triangles CCW
        faces = faces[:, ::-1].copy()
    joints, weights = skin_weights(verts, skeleton.num_joints, (a, b, ra, rb, owner), (sc, sr, sj))
    return SkinnedMesh(positions=verts.astype(np.float32), normals=normals.astype(np.float32), triangles=faces,
                       joints=joints, weights=weights, bind_positions=lpos, bind_rotations=lrot)


def skin_weights(verts: np.ndarray, num_joints: int, capsules, skull, falloff: float = FALLOFF_M):
    """Up to four joints per vertex: weight exp(-(d_j - d_min) / falloff), d_j the vertex's signed
    distance to joint j's nearest shape. Returns joints (V, 4) uint16 and weights (V, 4) float32."""
    a, b, ra, rb, owner = capsules
    d = np.full((len(verts), num_joints), np.inf)
    for i in range(len(a)):
        d[:, owner[i]] = np.minimum(d[:, owner[i]], _capsule_distance(verts, a[i], b[i], ra[i], rb[i]))
    d[:, skull[2]] = np.minimum(d[:, skull[2]], _ellipsoid_distance(verts, skull[0], skull[1]))
    d -= d.min(axis=1, keepdims=True)
    k = min(4, num_joints)
    top = np.argsort(d, axis=1)[:, :k]
    w = np.exp(-np.take_along_axis(d, top, axis=1) / falloff)
    w /= w.sum(axis=1, keepdims=True)
    joints = np.zeros((len(verts), 4), np.uint16)
    weights = np.zeros((len(verts), 4), np.float32)
    joints[:, :k], weights[:, :k] = top, w
    return joints, weights


def body_glb_path(db_path, voxel: float = VOXEL_M) -> Path:
    """Where the default body of a database is cached: beside it, `<name>.body.glb` (another voxel
    size: `<name>.body-<mm>mm.glb`)."""
    p = Path(db_path)
    return p.with_name(p.stem + (".body.glb" if voxel == VOXEL_M else f".body-{round(voxel * 1000)}mm.glb"))


def ensure_body_glb(db_path, skeleton: Skeleton, roles: dict | None = None, voxel: float = VOXEL_M) -> Path:
    """The database's default body as a GLB (skeleton + skinned mesh, marching cubes at `voxel` metres),
    built once and cached beside the database; rebuilt when the database file or this generator is newer."""
    out = body_glb_path(db_path, voxel)
    if out.exists() and out.stat().st_mtime >= max(Path(db_path).stat().st_mtime, Path(__file__).stat().st_mtime):
        return out
    tmp = out.with_name(out.name + f".{np.random.randint(1 << 30)}.tmp")
    write_gltf(tmp, skeleton=skeleton, mesh=body_mesh(skeleton, roles, voxel))
    tmp.replace(out)   # atomic: other processes sharing the cache never read half a file
    return out
