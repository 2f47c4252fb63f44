"""Role detection and mirror pairs on the three known namings and on custom mappings."""
from __future__ import annotations

import numpy as np
import pytest

from bvh_fixtures import LAFAN1_NAMES
from conftest import MOCAP
from motionmatch.motion.skeleton import ROLES, SkeletonError, check_role_joints, find_roles, load_mapping, mirror_pairs

UNITY = ("Hips LeftUpperLeg LeftLowerLeg LeftFoot LeftToes RightUpperLeg RightLowerLeg RightFoot RightToes "
         "Spine Chest UpperChest LeftShoulder LeftUpperArm LeftLowerArm LeftHand Neck Head RightShoulder "
         "RightUpperArm RightLowerArm RightHand").split()
BANDAI = ("joint_Root Hips Spine Chest Neck Head Shoulder_L UpperArm_L LowerArm_L Hand_L Shoulder_R UpperArm_R "
          "LowerArm_R Hand_R UpperLeg_L LowerLeg_L Foot_L Toes_L UpperLeg_R LowerLeg_R Foot_R Toes_R").split()
TAKE1 = MOCAP / "jlpm22-locomotion" / "locomotion_take1.bvh"


def _named(names, roles):
    return {r: names[j] for r, j in roles.items()}


def test_unity_humanoid_uses_upper_chest():
    r = _named(UNITY, find_roles(UNITY))
    assert list(r) == list(ROLES)
    assert r["chest"] == "UpperChest" and r["left_toe"] == "LeftToes" and r["right_lower_leg"] == "RightLowerLeg"
    no_upper = [n for n in UNITY if n != "UpperChest"]
    assert _named(no_upper, find_roles(no_upper))["chest"] == "Chest"


def test_bandai_namco():
    r = _named(BANDAI, find_roles(BANDAI))
    assert r["hips"] == "Hips"  # not joint_Root
    assert r["chest"] == "Chest" and r["left_upper_leg"] == "UpperLeg_L" and r["right_toe"] == "Toes_R"
    assert r["left_hand"] == "Hand_L" and r["right_hand"] == "Hand_R"


def test_lafan1():
    r = _named(LAFAN1_NAMES, find_roles(LAFAN1_NAMES))
    assert r["chest"] == "Spine2" and r["left_lower_leg"] == "LeftLeg" and r["right_toe"] == "RightToe"


@pytest.mark.usefixtures("jlpm_dir")     # fails loudly when the data is missing
def test_real_jlpm22_header():
    from motionmatch.io.bvh import read_bvh
    names = read_bvh(TAKE1).skeleton.names
    r = _named(names, find_roles(names))
    assert r["chest"] == "UpperChest" and r["left_foot"] == "LeftFoot"


def test_namespaced_and_case_insensitive():
    names = ["mixamorig:" + n for n in LAFAN1_NAMES]
    r = _named(names, find_roles(names))
    assert r["hips"] == "mixamorig:Hips" and r["chest"] == "mixamorig:Spine2"
    lower = [n.lower() for n in UNITY]
    assert _named(lower, find_roles(lower))["left_toe"] == "lefttoes"


def test_mapping_overrides_and_extends():
    # Unreal names (ball_l, Unreal's toe, is found too) with toes named like no known skeleton.
    names = ["pelvis", "thigh_l", "calf_l", "foot_l", "digits_l", "thigh_r", "calf_r", "foot_r", "digits_r",
             "spine_01", "spine_03", "head", "hand_l", "hand_r", "clavicle_l"]
    with pytest.raises(SkeletonError) as err:
        find_roles(names)
    msg = str(err.value)
    assert "left_toe, right_toe;" in msg and "digits_l" in msg  # missing roles and joints present
    assert "hips" not in msg.split(";")[0] and "upper_leg" not in msg  # pelvis, thigh_l recognized
    mapping = {"left_toe": "digits_l", "right_toe": "digits_r", "left_shoulder": "clavicle_l", "head": "head",
               "left_lower_leg": "calf_l"}
    r = _named(names, find_roles(names, mapping))
    assert r["left_upper_leg"] == "thigh_l" and r["hips"] == "pelvis" and r["chest"] == "spine_03"
    assert r["left_shoulder"] == "clavicle_l"  # roles beyond ROLES are kept
    # override of a detected role
    assert _named(UNITY, find_roles(UNITY, {"chest": "Chest"}))["chest"] == "Chest"
    with pytest.raises(SkeletonError, match="Pelvis"):
        find_roles(UNITY, {"hips": "Pelvis"})


def test_unreal_and_vroid_names():
    unreal = ["pelvis", "spine_01", "spine_03", "head"] + [f"{b}_{s}" for s in "lr"
                                                           for b in ("thigh", "calf", "foot", "ball", "hand")]
    assert _named(unreal, find_roles(unreal))["right_toe"] == "ball_r"
    vroid = ["J_Bip_C_Hips", "J_Bip_C_Spine", "J_Bip_C_Chest", "J_Bip_C_UpperChest", "J_Bip_C_Head"] + [
        f"J_Bip_{s}_{b}" for s in "LR" for b in ("UpperLeg", "LowerLeg", "Foot", "ToeBase", "Hand")]
    r = _named(vroid, find_roles(vroid))
    assert r["chest"] == "J_Bip_C_UpperChest" and r["right_lower_leg"] == "J_Bip_R_LowerLeg"


def test_required_subset():
    names = ["Hips", "LeftFoot", "RightFoot"]
    r = find_roles(names, required=("hips", "left_foot", "right_foot"))
    assert r == {"hips": 0, "left_foot": 1, "right_foot": 2}


def test_mirror_pairs_all_namings():
    for names in (UNITY, BANDAI, LAFAN1_NAMES):
        pairs = mirror_pairs(names)
        assert pairs.dtype == np.int64 and len(pairs) == len(names)
        np.testing.assert_array_equal(pairs[pairs], np.arange(len(names)))  # an involution
        for i, n in enumerate(names):
            other = names[pairs[i]]
            if "Left" in n or n.endswith("_L"):
                assert other == n.replace("Left", "Right").replace("_L", "_R")
            elif "Right" not in n and not n.endswith("_R"):
                assert pairs[i] == i
    odd = ["root", "left_arm", "RIGHT_ARM", "L_hand", "R_hand", "foot.l", "foot.r", "l", "Center"]
    p = mirror_pairs(odd)
    assert [odd[i] for i in p] == ["root", "RIGHT_ARM", "left_arm", "R_hand", "L_hand", "foot.r", "foot.l", "l",
                                   "Center"]


def test_load_mapping(tmp_path):
    f = tmp_path / "roles.toml"
    f.write_text('[roles]\nhips = "pelvis"\nleft_foot = "foot_l"\n')
    assert load_mapping(f) == {"hips": "pelvis", "left_foot": "foot_l"}
    f.write_text('[roles]\nhips = 3\n')
    with pytest.raises(SkeletonError, match="hips"):
        load_mapping(f)
    f.write_text('hips = "pelvis"\n')
    with pytest.raises(SkeletonError, match=r"\[roles\]"):
        load_mapping(f)
    f.write_text('[roles\n')
    with pytest.raises(SkeletonError, match="TOML"):
        load_mapping(f)


# UNITY's joints with their parents (and a toe end joint that has no role), for the body checks.
_UNITY_PARENTS = {"Hips": None, "LeftUpperLeg": "Hips", "LeftLowerLeg": "LeftUpperLeg", "LeftFoot": "LeftLowerLeg",
                  "LeftToes": "LeftFoot", "LeftToes_End": "LeftToes", "RightUpperLeg": "Hips",
                  "RightLowerLeg": "RightUpperLeg", "RightFoot": "RightLowerLeg", "RightToes": "RightFoot",
                  "Spine": "Hips", "Chest": "Spine", "UpperChest": "Chest", "LeftShoulder": "UpperChest",
                  "LeftUpperArm": "LeftShoulder", "LeftLowerArm": "LeftUpperArm", "LeftHand": "LeftLowerArm",
                  "Neck": "UpperChest", "Head": "Neck", "RightShoulder": "UpperChest",
                  "RightUpperArm": "RightShoulder", "RightLowerArm": "RightUpperArm", "RightHand": "RightLowerArm"}
_NAMES = list(_UNITY_PARENTS)
_PARENTS = np.array([-1 if p is None else _NAMES.index(p) for p in _UNITY_PARENTS.values()])


@pytest.mark.parametrize("mapping, message", [
    ({"left_foot": "LeftFoot", "right_foot": "LeftFoot"}, "roles left_foot and right_foot are both joint 'LeftFoot'"),
    ({"hips": "LeftToes"}, "roles hips and left_toe are both joint 'LeftToes'"),
    ({"hips": "LeftToes", "left_toe": "LeftToes_End"}, "role spine \\(joint 'Spine'\\) is not below role hips "
                                                       "\\(joint 'LeftToes'\\)"),
    ({"left_foot": "Neck"}, "role left_foot \\(joint 'Neck'\\) is not below role left_lower_leg"),
    ({"head": "LeftToes_End"}, "role head \\(joint 'LeftToes_End'\\) is not below role chest"),
    ({"left_hand": "LeftToes_End"}, "role left_hand \\(joint 'LeftToes_End'\\) lies inside a leg"),
    ({r: "Hips" for r in ROLES}, "roles hips and spine are both joint 'Hips'"),
])
def test_roles_no_body_has_are_refused(mapping, message):
    check_role_joints(_NAMES, _PARENTS, find_roles(_NAMES))        # as detected: a body
    with pytest.raises(SkeletonError, match=f"^{message}"):
        check_role_joints(_NAMES, _PARENTS, find_roles(_NAMES, mapping))


def test_role_map_file_with_roles_no_body_has_names_the_file(tmp_path):
    f = tmp_path / "feet.toml"
    f.write_text('[roles]\nleft_foot = "LeftFoot"\nright_foot = "LeftFoot"\n')
    assert load_mapping(f, joint_names=_NAMES) == {"left_foot": "LeftFoot", "right_foot": "LeftFoot"}
    with pytest.raises(SkeletonError, match=r"feet.toml: roles left_foot and right_foot are both joint"):
        load_mapping(f, joint_names=_NAMES, parents=_PARENTS)


def test_real_skeletons_pass_the_body_checks():
    from motionmatch.io.bvh import read_bvh
    for path in (TAKE1, MOCAP / "cmu-locomotion" / "143_40.bvh",
                 sorted((MOCAP / "bandai-namco" / "dataset-1").glob("*.bvh"))[0]):
        skel = read_bvh(path).skeleton
        check_role_joints(skel.names, skel.parents, find_roles(skel.names))
