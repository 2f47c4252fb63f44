"""Skeleton role detection: which joint is the hips, the left foot, ... in a given skeleton.

Recognizes three namings out of the box:
- Bandai-Namco: `joint_Root` > `Hips` > `Spine` > `Chest` > `Neck` > `Head`, `UpperLeg_L`, `LowerLeg_L`,
  `Foot_L`, `Toes_L`, `Hand_L` (and `_R`);
- Unity humanoid (jlpm22): `Hips`, `LeftUpperLeg`, `LeftLowerLeg`, `LeftFoot`, `LeftToes`, `Spine`,
  `Chest`, `UpperChest`, `Neck`, `Head`, `LeftHand` (chest role = `UpperChest` when present);
- LAFAN1 / Mixamo-like: `Hips`, `LeftUpLeg`, `LeftLeg`, `LeftFoot`, `LeftToe`, `Spine`, `Spine1`,
  `Spine2`, `Neck`, `Head`, `LeftHand` (chest role = `Spine2`).
Any other skeleton is handled with an explicit mapping (role -> joint name), e.g. from a TOML file
(`load_mapping`; `load_joint_mapping` reads retargeting's joint mapping files). Whichever way they are
found, roles must fit a body (`check_role_joints`): one joint each, every one below the one before it.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ..files.input_bounds import parse_toml, read_bounded

ROLES = ("hips", "spine", "chest", "head",
         "left_upper_leg", "left_lower_leg", "left_foot", "left_toe",
         "right_upper_leg", "right_lower_leg", "right_foot", "right_toe",
         "left_hand", "right_hand")


class SkeletonError(ValueError):
    """A skeleton whose roles cannot be resolved; the message names the missing roles and the joints."""


def _sided(left_names: list[str]) -> dict[str, list[str]]:
    """Left candidates -> {'left': [...], 'right': [...]} by swapping Left/Right and _L/_R."""
    right = [n.replace("Left", "Right").replace("_L", "_R") for n in left_names]
    return {"left": left_names, "right": right}


# Candidates in priority order; the first present wins. Order matters for chest: a Unity skeleton
# has both Chest and UpperChest (use the upper one), LAFAN1 has Spine1 and Spine2 (use Spine2).
_LIMBS = {
    "upper_leg": ["LeftUpperLeg", "UpperLeg_L", "LeftUpLeg", "LeftThigh", "Thigh_L"],
    "lower_leg": ["LeftLowerLeg", "LowerLeg_L", "LeftLeg", "LeftShin", "LeftCalf", "Shin_L", "Calf_L"],
    "foot": ["LeftFoot", "Foot_L", "LeftAnkle"],
    "toe": ["LeftToes", "Toes_L", "LeftToe", "LeftToeBase", "Toe_L", "LeftToe_End"],
    "hand": ["LeftHand", "Hand_L", "LeftWrist"],
}
_CANDIDATES: dict[str, list[str]] = {
    "hips": ["Hips", "Pelvis", "Hip"],
    "spine": ["Spine", "Spine0", "Spine_01", "spine_01"],
    "chest": ["UpperChest", "Spine2", "Chest", "Spine_03", "spine_03", "Spine1"],
    "head": ["Head"],
}
for _part, _cands in _LIMBS.items():
    for _side, _names in _sided(_cands).items():
        _CANDIDATES[f"{_side}_{_part}"] = _names
# VRoid's VRM node names (J_Bip_<C|L|R>_...) and Unreal's toe joint (ball_l), last: _sided's `_L` swap
# would turn J_Bip_L_LowerLeg into J_Bip_R_RowerLeg, so they are listed per side.
for _role, _bone in (("hips", "Hips"), ("spine", "Spine"), ("chest", "UpperChest"), ("chest", "Chest"),
                     ("head", "Head")):
    _CANDIDATES[_role].append(f"J_Bip_C_{_bone}")
for _side, _letter in (("left", "L"), ("right", "R")):
    for _part, _bone in (("upper_leg", "UpperLeg"), ("lower_leg", "LowerLeg"), ("foot", "Foot"), ("toe", "ToeBase"),
                         ("hand", "Hand")):
        _CANDIDATES[f"{_side}_{_part}"].append(f"J_Bip_{_letter}_{_bone}")
    _CANDIDATES[f"{_side}_toe"].append(f"ball_{_letter.lower()}")


def _bare(name: str) -> str:
    """Joint name without a namespace ('mixamorig:Hips' -> 'hips'), lower case, for loose matching."""
    return name.rsplit(":", 1)[-1].strip().lower()


def find_roles(names: list[str], mapping: dict[str, str] | None = None,
               required: tuple[str, ...] = ROLES) -> dict[str, int]:
    """Role -> joint index for a skeleton's joint names.

    Detection tries the known namings (exact name first, then case-insensitive without a 'ns:'
    prefix). `mapping` (role -> joint name) overrides detection and may add roles beyond ROLES.
    Raises SkeletonError naming the missing roles and the joints present.
    """
    names = list(names)
    exact = {n: i for i, n in enumerate(names)}
    loose: dict[str, int] = {}
    for i, n in enumerate(names):
        loose.setdefault(_bare(n), i)

    roles: dict[str, int] = {}
    for role, cands in _CANDIDATES.items():
        hit = next((exact[c] for c in cands if c in exact), None)
        if hit is None:
            hit = next((loose[c.lower()] for c in cands if c.lower() in loose), None)
        if hit is not None:
            roles[role] = hit

    bad_mapping = []
    for role, joint in (mapping or {}).items():
        if joint in exact:
            roles[role] = exact[joint]
        elif _bare(joint) in loose:
            roles[role] = loose[_bare(joint)]
        else:
            bad_mapping.append(f"{role} = {joint!r}")
    if bad_mapping:
        raise SkeletonError(f"role mapping names joints not in the skeleton: {', '.join(bad_mapping)}; "
                            f"joints present: {', '.join(names)}")

    missing = [r for r in required if r not in roles]
    if missing:
        raise SkeletonError(
            f"cannot find joints for roles {', '.join(missing)}; joints present: {', '.join(names)}. "
            f"Give a role mapping (TOML [roles] table, e.g. {missing[0]} = \"JointName\").")
    return {r: roles[r] for r in list(ROLES) + sorted(set(roles) - set(ROLES)) if r in roles}


# Each role below the one before it in the hierarchy (roles a skeleton lacks are skipped): the hips carry
# the spine and both legs, a leg runs upper leg, lower leg, foot, toe; the hands hang below the hips.
_ROLE_CHAINS = (("hips", "spine", "chest", "head"), ("hips", "left_hand"), ("hips", "right_hand")) + tuple(
    ("hips",) + tuple(f"{side}_{part}" for part in ("upper_leg", "lower_leg", "foot", "toe"))
    for side in ("left", "right"))


def _is_below(parents, joint: int, ancestor: int) -> bool:
    """Whether `ancestor` is a proper ancestor of `joint` (parents: -1 at a root)."""
    seen = 0
    while parents[joint] >= 0 and seen <= len(parents):      # a bound, in case parents hold a cycle
        joint, seen = int(parents[joint]), seen + 1
        if joint == ancestor:
            return True
    return False


def check_role_joints(names, parents, roles: dict[str, int]) -> None:
    """Refuse roles no body has: two roles on one joint (both feet on one joint), or a role not below the
    one before it in the hierarchy (hips on a toe, a foot above the head: see _ROLE_CHAINS). Raises
    SkeletonError naming the roles and their joints."""
    names, parents = list(names), np.asarray(parents)
    by_joint: dict[int, str] = {}
    for role in ROLES:
        if role in roles:
            other = by_joint.setdefault(roles[role], role)
            if other != role:
                raise SkeletonError(f"roles {other} and {role} are both joint {names[roles[role]][:60]!r}; each "
                                    f"role needs a joint of its own")
    for chain in _ROLE_CHAINS:
        present = [r for r in chain if r in roles]
        for upper, lower in zip(present, present[1:]):
            if not _is_below(parents, roles[lower], roles[upper]):
                raise SkeletonError(f"role {lower} (joint {names[roles[lower]][:60]!r}) is not below role {upper} "
                                    f"(joint {names[roles[upper]][:60]!r}) in the hierarchy; roles follow the "
                                    f"body: {' > '.join(chain)}")
    for side in ("left", "right"):       # a hand inside a leg is no hand
        hand = roles.get(f"{side}_hand")
        legs = [roles[f"{s}_upper_leg"] for s in ("left", "right") if f"{s}_upper_leg" in roles]
        if hand is not None and any(hand == j or _is_below(parents, hand, j) for j in legs):
            raise SkeletonError(f"role {side}_hand (joint {names[hand][:60]!r}) lies inside a leg")


def arm_chains(parents, roles: dict[str, int]) -> dict[str, list[int]]:
    """Per side ('left', 'right'), the arm's joints from the first one after the chains from the chest
    to the two hands part (the clavicle or shoulder) down to the hand; {} when the chest or a hand role
    is missing or the hands do not hang off the chest."""
    if not all(r in roles for r in ("chest", "left_hand", "right_hand")):
        return {}
    paths = {}
    for side in ("left", "right"):
        p = [roles[f"{side}_hand"]]
        while p[-1] != roles["chest"]:
            if parents[p[-1]] < 0:
                return {}
            p.append(int(parents[p[-1]]))
        paths[side] = p[::-1]
    k = 0
    while k < min(map(len, paths.values())) and paths["left"][k] == paths["right"][k]:
        k += 1
    if k >= len(paths["left"]) or k >= len(paths["right"]):
        return {}
    return {s: p[k:] for s, p in paths.items()}


def shoulder_joints(parents, roles: dict[str, int]) -> tuple[int, int] | None:
    """(left, right) shoulder joints (the upper arms: the joint after the clavicle, or the first arm
    joint when the arm has only two before the hand), whose line gives the upper body's facing; None
    without arms."""
    chains = arm_chains(parents, roles)
    if not chains:
        return None
    pick = [c[1] if len(c) > 2 else c[0] for c in (chains["left"], chains["right"])]
    return pick[0], pick[1]


_SWAP_WORD = {"left": "right", "right": "left"}


def _match_case(word: str, like: str) -> str:
    if like.isupper():
        return word.upper()
    if like[0].isupper():
        return word.capitalize()
    return word.lower()


def _mirror_candidates(name: str) -> list[str]:
    """Possible names of the other side's joint, most specific rule first."""
    out = []
    # 'Left'/'Right' anywhere, any case (LeftFoot, mixamorig:RightArm, left_foot, HAND_LEFT)
    swapped = re.sub(r"(?i)left|right", lambda m: _match_case(_SWAP_WORD[m.group().lower()], m.group()), name)
    if swapped != name:
        out.append(swapped)
    # suffix side letter: Foot_L, Foot.L, Foot-l, Foot L
    m = re.search(r"([_.\- ])([LlRr])$", name)
    if m:
        other = {"L": "R", "R": "L", "l": "r", "r": "l"}[m.group(2)]
        out.append(name[:m.start(2)] + other)
    # prefix side letter: L_Foot, r.foot
    m = re.match(r"^([LlRr])([_.\- ])", name)
    if m:
        other = {"L": "R", "R": "L", "l": "r", "r": "l"}[m.group(1)]
        out.append(other + name[1:])
    return out


def mirror_pairs(names: list[str]) -> np.ndarray:
    """For each joint, the index of its left/right counterpart (itself when it has none), int64 (J,)."""
    names = list(names)
    index = {n: i for i, n in enumerate(names)}
    index_lower: dict[str, int] = {}
    for i, n in enumerate(names):
        index_lower.setdefault(n.lower(), i)
    pairs = np.arange(len(names), dtype=np.int64)
    for i, n in enumerate(names):
        for cand in _mirror_candidates(n):
            j = index.get(cand, index_lower.get(cand.lower(), i))
            if j != i:
                pairs[i] = j
                break
    return pairs


MAX_MAPPING_BYTES = 1 << 20
MAX_MAPPING_ENTRIES = 4096


def load_mapping(path, require_table: bool = True, joint_names=None, parents=None) -> dict[str, str]:
    """Read a role mapping from a TOML file with a `[roles]` table (role = "joint name"); with
    require_table=False a file of bare role = "joint name" lines is taken too. Bounded like every input
    (input_bounds): at most 1 MB and 4096 entries; every key one of ROLES (a typo must not be ignored),
    every value a string, and with `joint_names` a joint of that skeleton; with its `parents` too, the
    roles it gives (over the detected ones) pass check_role_joints. Raises SkeletonError naming the file."""
    path = Path(path)
    doc = parse_toml(read_bounded(path, MAX_MAPPING_BYTES, SkeletonError, "role mapping"), SkeletonError, str(path))
    roles = doc.get("roles", None if require_table else doc)
    if not isinstance(roles, dict):
        raise SkeletonError(f"{path}: needs a [roles] table (e.g. hips = \"pelvis\")")
    if len(roles) > MAX_MAPPING_ENTRIES:
        raise SkeletonError(f"{path}: [roles] holds {len(roles):,} entries, beyond the bound of {MAX_MAPPING_ENTRIES}")
    unknown = [k for k in roles if k not in ROLES]
    if unknown:
        raise SkeletonError(f"{path}: [roles]: unknown role {unknown[0][:60]!r} (roles: {', '.join(ROLES)})")
    bad = [k for k, v in roles.items() if not isinstance(v, str)]
    if bad:
        raise SkeletonError(f"{path}: [roles] values must be joint names (strings): {', '.join(bad[:10])}")
    if joint_names is not None:
        try:
            found = find_roles(joint_names, roles, required=())
            if parents is not None:
                check_role_joints(joint_names, parents, found)
        except SkeletonError as e:
            raise SkeletonError(f"{path}: {e}") from None
    return dict(roles)


def load_joint_mapping(path) -> dict:
    """Read a retarget mapping TOML (`retarget --map`, motion/retarget.py): [joints] target_name =
    "source_name"; optional [source_roles] and [target_roles] tables (role = "joint name") for skeletons
    whose roles are not detected. Bounded like every input (files/input_bounds.py): a regular file of at
    most 1 MB, 4,096 entries a table, role keys known (a typo is not ignored). Raises SkeletonError naming
    the file and the table."""
    path = Path(path)
    doc = parse_toml(read_bounded(path, MAX_MAPPING_BYTES, SkeletonError, "joint mapping"), SkeletonError,
                     str(path))
    unknown = set(doc) - {"joints", "source_roles", "target_roles"}
    if unknown:
        raise SkeletonError(f"{path}: unknown table(s) {', '.join(sorted(map(str, unknown)))[:200]}; "
                            f"expected [joints], [source_roles], [target_roles]")
    out = {}
    for table in ("joints", "source_roles", "target_roles"):
        t = doc.get(table, {})
        if not isinstance(t, dict) or any(not isinstance(v, str) for v in t.values()):
            raise SkeletonError(f"{path}: [{table}] must map names to joint names (strings)")
        if len(t) > MAX_MAPPING_ENTRIES:
            raise SkeletonError(f"{path}: [{table}] holds {len(t):,} entries, beyond the bound of "
                                f"{MAX_MAPPING_ENTRIES:,}")
        bad = [k for k in t if k not in ROLES] if table != "joints" else []
        if bad:
            raise SkeletonError(f"{path}: [{table}]: unknown role {bad[0][:60]!r} (roles: {', '.join(ROLES)})")
        out[table] = dict(t)
    if not out["joints"]:
        raise SkeletonError(f"{path}: needs a [joints] table (target_name = \"source_name\")")
    return out
