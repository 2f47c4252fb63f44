"""BVH reader/writer: hand-checked kinematics on real clips, round trips, channel orders, bad input."""
from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from bvh_fixtures import LAFAN1_NAMES, lafan1_bvh_text, tiny_bvh_text, write_lafan1_bvh
from conftest import MOCAP
from motionmatch.io.bvh import BVHError, parse_bvh_text, read_bvh, write_bvh
from motionmatch.motion.skeleton import find_roles, mirror_pairs

TAKE1 = MOCAP / "jlpm22-locomotion" / "locomotion_take1.bvh"
BANDAI = [MOCAP / "bandai-namco" / "dataset-1" / "dataset-1_walk_normal_001.bvh",
          MOCAP / "bandai-namco" / "dataset-2" / "dataset-2_run_feminine_021.bvh"]
# The shared motion capture (conftest: $MOTIONMATCH_DATA, else ../shared/mocap); missing, the test fails.
needs_mocap = pytest.mark.usefixtures("jlpm_dir", "bandai_dir")


# ---------------------------------------------------------------- independent reference maths

def _rot(axis: str, deg: float) -> np.ndarray:
    a = np.radians(deg)
    c, s = np.cos(a), np.sin(a)
    if axis == "X":
        return np.array([[1, 0, 0], [0, c, -s], [0, s, c]])
    if axis == "Y":
        return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])


def _quat_matrix(q) -> np.ndarray:
    w, x, y, z = q
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


def _raw_bvh(path: Path):
    """Minimal independent reading: joints (name, parent, offset, channels) and frame 0's values."""
    toks = path.read_text().split("\n")
    joints, stack, frame0, i = [], [], None, 0
    in_end = False
    while i < len(toks):
        t = toks[i].split()
        i += 1
        if not t:
            continue
        if t[0] in ("ROOT", "JOINT"):
            joints.append([t[1], stack[-1] if stack else -1, None, []])
        elif t[0] == "End":
            in_end = True
        elif t[0] == "{":
            stack.append(-2 if in_end else len(joints) - 1)
        elif t[0] == "}":
            if stack.pop() == -2:
                in_end = False
        elif t[0] == "OFFSET" and not in_end:
            joints[-1][2] = np.array([float(v) for v in t[1:4]])
        elif t[0] == "CHANNELS":
            joints[-1][3] = t[2:]
        elif t[:2] == ["Frame", "Time:"]:
            frame0 = np.array([float(v) for v in toks[i].split()])
            break
    return joints, frame0


def _hand_fk(path: Path, target: str, scale: float) -> np.ndarray:
    """World position (metres) of `target` at frame 0 from explicit rotation matrices."""
    joints, vals = _raw_bvh(path)
    col, world = 0, []
    for name, parent, offset, chans in joints:
        t, R = offset.copy(), np.eye(3)
        for c in chans:
            if c.endswith("position"):
                t["XYZ".index(c[0])] = vals[col]
            else:
                R = R @ _rot(c[0], vals[col])  # first channel outermost
            col += 1
        if parent < 0:
            world.append((t * scale, R))
        else:
            pp, pR = world[parent]
            world.append((pp + pR @ (t * scale), pR @ R))
        if name == target:
            return world[-1][0]
    raise KeyError(target)


# ---------------------------------------------------------------- real clips

@needs_mocap
@pytest.mark.parametrize("target", ["LeftFoot", "Head", "RightHand"])
def test_jlpm22_fk_matches_hand_computation(target):
    anim = read_bvh(TAKE1)
    gpos, _ = anim.global_transforms()
    j = anim.skeleton.index(target)
    np.testing.assert_allclose(gpos[0, j], _hand_fk(TAKE1, target, 1.0), atol=1e-9)
    assert anim.fps == 60.0 and anim.num_frames == 1794 and anim.skeleton.num_joints == 22


@needs_mocap
@pytest.mark.parametrize("path", BANDAI, ids=lambda p: p.stem)
@pytest.mark.parametrize("target", ["Foot_L", "Hand_R", "Head"])
def test_bandai_fk_matches_hand_computation(path, target):
    anim = read_bvh(path)
    gpos, _ = anim.global_transforms()
    j = anim.skeleton.index(target)
    np.testing.assert_allclose(gpos[0, j], _hand_fk(path, target, 0.01), atol=1e-9)
    assert anim.fps == 30.0


@needs_mocap
def test_unit_detection():
    jl = read_bvh(TAKE1)
    hips_y = jl.global_transforms()[0][:, jl.skeleton.index("Hips"), 1]
    assert 0.8 < np.median(hips_y) < 1.05  # metres file, left as is

    bn = read_bvh(BANDAI[0])
    hips_y = bn.global_transforms()[0][:, bn.skeleton.index("Hips"), 1]
    assert 0.8 < np.median(hips_y) < 1.05  # centimetres converted
    assert 0.85 < bn.skeleton.offsets[bn.skeleton.index("Hips"), 1] < 1.0

    as_m = read_bvh(BANDAI[0], unit="m")
    np.testing.assert_allclose(as_m.positions, bn.positions * 100.0, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(read_bvh(BANDAI[0], unit=0.01).positions, bn.positions)
    with pytest.raises(ValueError, match="unknown unit"):
        read_bvh(BANDAI[0], unit="furlong")


def _assert_same_motion(a, b, pos_tol):
    assert a.skeleton.names == b.skeleton.names
    np.testing.assert_array_equal(a.skeleton.parents, b.skeleton.parents)
    np.testing.assert_allclose(a.skeleton.offsets, b.skeleton.offsets, atol=pos_tol)
    np.testing.assert_allclose(a.positions, b.positions, atol=pos_tol)
    dots = np.abs(np.sum(a.rotations * b.rotations, axis=-1))
    assert dots.min() > 1 - 1e-9  # same rotations up to sign; %.6f degrees ~ 1e-8 rad
    np.testing.assert_allclose(a.global_transforms()[0], b.global_transforms()[0], atol=pos_tol * 10)
    assert a.fps == pytest.approx(b.fps)


@needs_mocap
@pytest.mark.parametrize("suffix", [".bvh", ".bvh.gz"])
def test_round_trip_jlpm22(tmp_path, suffix):
    a = read_bvh(TAKE1)
    out = tmp_path / f"take1{suffix}"
    write_bvh(out, a)
    if suffix.endswith(".gz"):
        assert out.read_bytes()[:2] == b"\x1f\x8b"
    b = read_bvh(out)
    _assert_same_motion(a, b, 1e-6)
    assert b.skeleton.channels == a.skeleton.channels
    # write again: the text is stable after one round trip
    out2 = tmp_path / "again.bvh"
    write_bvh(out2, b)
    _assert_same_motion(b, read_bvh(out2), 1e-6)


@needs_mocap
def test_round_trip_bandai_cm(tmp_path):
    a = read_bvh(BANDAI[0])
    out = tmp_path / "bandai.bvh"
    write_bvh(out, a, unit="cm")
    assert "OFFSET 0.000000 93.924100 -3.000000" in out.read_text()
    _assert_same_motion(a, read_bvh(out), 1e-8)


@needs_mocap
def test_gz_input_equals_plain(tmp_path):
    gz = tmp_path / "clip.bvh.gz"
    gz.write_bytes(gzip.compress(BANDAI[1].read_bytes()))
    a, b = read_bvh(BANDAI[1]), read_bvh(gz)
    np.testing.assert_array_equal(a.positions, b.positions)
    np.testing.assert_array_equal(a.rotations, b.rotations)


# ---------------------------------------------------------------- channel orders, layout

@pytest.mark.parametrize("order", ["XYZ", "YXZ", "ZXY", "ZYX"])
def test_rotation_orders_against_hand_maths(order):
    root_ang, child_ang = (30.0, 45.0, 60.0), (10.0, -20.0, 35.0)
    row = (0.5, 1.0, -0.25) + root_ang + child_ang
    anim = parse_bvh_text(tiny_bvh_text(order, rows=(row,)))
    Rr = _rot(order[0], root_ang[0]) @ _rot(order[1], root_ang[1]) @ _rot(order[2], root_ang[2])
    Rc = _rot(order[0], child_ang[0]) @ _rot(order[1], child_ang[1]) @ _rot(order[2], child_ang[2])
    np.testing.assert_allclose(_quat_matrix(anim.rotations[0, 0]), Rr, atol=1e-12)
    np.testing.assert_allclose(_quat_matrix(anim.rotations[0, 1]), Rc, atol=1e-12)
    gpos, grot = anim.global_transforms()
    np.testing.assert_allclose(gpos[0, 0], [0.5, 1.0, -0.25])
    np.testing.assert_allclose(gpos[0, 1], np.array([0.5, 1.0, -0.25]) + Rr @ [0.0, 0.5, 0.0], atol=1e-12)
    # the End Site of Child (0, 0, 0.25) in world space
    end = gpos[0, 1] + _quat_matrix(grot[0, 1]) @ anim.skeleton.end_sites[1]
    np.testing.assert_allclose(end, gpos[0, 1] + Rr @ Rc @ [0.0, 0.0, 0.25], atol=1e-12)


def test_orders_differ_and_survive_write(tmp_path):
    row = (0.0, 0.0, 0.0, 30.0, 45.0, 60.0, 10.0, 20.0, 30.0)
    xyz = parse_bvh_text(tiny_bvh_text("XYZ", rows=(row,)))
    yxz = parse_bvh_text(tiny_bvh_text("YXZ", rows=(row,)))
    assert np.abs(xyz.rotations[0, 0] - yxz.rotations[0, 0]).max() > 0.05
    write_bvh(tmp_path / "yxz.bvh", yxz)
    text = (tmp_path / "yxz.bvh").read_text()
    assert "CHANNELS 3 Yrotation Xrotation Zrotation" in text
    again = read_bvh(tmp_path / "yxz.bvh")
    np.testing.assert_allclose(np.abs(np.sum(again.rotations * yxz.rotations, -1)), 1.0, atol=1e-10)


def test_three_and_six_channels_and_partial_rotation():
    # Root 6, Child 6 (position channels override the offset), Leaf with a single rotation channel.
    text = """HIERARCHY
ROOT Root
{
  OFFSET 0 0 0
  CHANNELS 6 Xposition Yposition Zposition Zrotation Xrotation Yrotation
  JOINT Child
  {
    OFFSET 0 1 0
    CHANNELS 6 Xposition Yposition Zposition Zrotation Xrotation Yrotation
    JOINT Leaf
    {
      OFFSET 0 1 0
      CHANNELS 1 Xrotation
      End Site
      {
        OFFSET 0 1 0
      }
    }
  }
}
MOTION
Frames: 2
Frame Time: 0.5
1 2 3 0 0 90 0.1 0.7 0.2 0 0 0 30
1 2 3 0 0 0 0.0 0.5 0.0 0 90 0 -30
"""
    anim = parse_bvh_text(text)
    assert anim.fps == 2.0
    np.testing.assert_allclose(anim.positions[:, 1], [[0.1, 0.7, 0.2], [0.0, 0.5, 0.0]])
    np.testing.assert_allclose(anim.positions[:, 2], [[0, 1, 0], [0, 1, 0]])
    np.testing.assert_allclose(_quat_matrix(anim.rotations[0, 2]), _rot("X", 30), atol=1e-12)
    np.testing.assert_allclose(_quat_matrix(anim.rotations[1, 1]), _rot("X", 90), atol=1e-12)
    gpos, _ = anim.global_transforms()
    # frame 0: root yaw 90 about Y moves the child's (0.1, 0.7, 0.2) to (0.2, 0.7, -0.1)
    np.testing.assert_allclose(gpos[0, 1], [1.2, 2.7, 2.9], atol=1e-12)
    # frame 1: child pitched 90 about X, so the leaf offset (0,1,0) points to +Z
    np.testing.assert_allclose(gpos[1, 2], [1.0, 2.5, 4.0], atol=1e-12)


def test_crlf_tabs_and_cr_only_equal_lf():
    lf = lafan1_bvh_text(frames=5)
    ref = parse_bvh_text(lf)
    for variant in (lf.replace("\n", "\r\n"), lf.replace("  ", "\t"), lf.replace("\n", "\r"),
                    lf.replace(" ", "\t").replace("\n", "\r\n")):
        other = parse_bvh_text(variant)
        assert other.skeleton.names == ref.skeleton.names
        np.testing.assert_array_equal(other.positions, ref.positions)
        np.testing.assert_array_equal(other.rotations, ref.rotations)


def test_lafan1_layout_fixture_roles_and_units(tmp_path):
    path = write_lafan1_bvh(tmp_path / "lafan_walk.bvh", frames=12, newline="\r\n")
    anim = read_bvh(path)
    assert anim.skeleton.names == LAFAN1_NAMES
    assert anim.skeleton.offsets[0, 1] == pytest.approx(0.95)  # cm detected
    assert anim.skeleton.channels[1] == ("Zrotation", "Yrotation", "Xrotation")
    roles = find_roles(anim.skeleton.names)
    names = anim.skeleton.names
    assert {r: names[j] for r, j in roles.items()} == {
        "hips": "Hips", "spine": "Spine", "chest": "Spine2", "head": "Head",
        "left_upper_leg": "LeftUpLeg", "left_lower_leg": "LeftLeg", "left_foot": "LeftFoot",
        "left_toe": "LeftToe", "right_upper_leg": "RightUpLeg", "right_lower_leg": "RightLeg",
        "right_foot": "RightFoot", "right_toe": "RightToe", "left_hand": "LeftHand",
        "right_hand": "RightHand"}
    pairs = mirror_pairs(names)
    assert names[pairs[names.index("LeftForeArm")]] == "RightForeArm"
    assert pairs[names.index("Spine1")] == names.index("Spine1")
    # the root moves 100 cm/s along +Z
    gpos, _ = anim.global_transforms()
    assert gpos[-1, 0, 2] - gpos[0, 0, 2] == pytest.approx(11 / 30, abs=1e-6)


# ---------------------------------------------------------------- bad input

def _line_of(text: str, needle: str, nth: int = 0) -> int:
    hits = [i for i, line in enumerate(text.split("\n"), start=1) if needle in line]
    return hits[nth]


def _expect_error(tmp_path, name, text, line, fragment):
    path = tmp_path / name
    path.write_text(text, newline="")
    with pytest.raises(BVHError) as err:
        read_bvh(path)
    msg = str(err.value)
    assert f"{path}:{line}:" in msg, msg
    assert fragment in msg, msg
    assert err.value.line == line and err.value.path == str(path)
    return msg


ROWS = ((0.0, 1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0),
        (0.1, 1.0, 0.0, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5),
        (0.2, 1.0, 0.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0))
GOOD = tiny_bvh_text("ZXY", rows=ROWS)


def test_good_tiny_file_reads(tmp_path):
    (tmp_path / "good.bvh").write_text(GOOD)
    anim = read_bvh(tmp_path / "good.bvh")
    assert anim.num_frames == 3 and anim.skeleton.names == ["Root", "Child"]


def test_truncated_motion_block(tmp_path):
    lines = GOOD.rstrip("\n").split("\n")
    # last frame missing entirely: error on the line after the last frame present
    text = "\n".join(lines[:-1]) + "\n"
    _expect_error(tmp_path, "short.bvh", text, len(lines), "truncated: 2 of 3 frames")
    # file cut in the middle of the last frame line
    text = "\n".join(lines[:-1] + [lines[-1][:12]])
    _expect_error(tmp_path, "cut.bvh", text, len(lines), "frame 2 has 2 values, expected 9")
    # cut right after MOTION
    text = GOOD[:GOOD.index("MOTION") + len("MOTION\n")]
    _expect_error(tmp_path, "nohead.bvh", text, _line_of(GOOD, "MOTION") + 1, "truncated before 'Frames:'")
    # cut inside the hierarchy
    text = GOOD[:GOOD.index("JOINT Child")]
    msg = _expect_error(tmp_path, "nomotion.bvh", text, _line_of(GOOD, "JOINT Child"), "no MOTION")
    assert "nomotion.bvh" in msg


def test_wrong_value_count_and_extra_frames(tmp_path):
    text = GOOD.replace("0.100000 1.000000 0.000000 ", "0.100000 1.000000 ")
    _expect_error(tmp_path, "count.bvh", text, _line_of(GOOD, "0.100000 1.000000"), "frame 1 has 8 values, expected 9")
    text = GOOD + " ".join(["1"] * 9) + "\n"
    _expect_error(tmp_path, "extra.bvh", text, GOOD.count("\n") + 1, "more frame lines than 'Frames: 3'")


@pytest.mark.parametrize("bad,fragment", [("abc", "non-numeric value 'abc'"), ("1,5", "non-numeric value '1,5'"),
                                          ("nan", "non-finite value 'nan'"), ("-inf", "non-finite value '-inf'"),
                                          ("1e999", "non-finite value '1e999'")])
def test_non_numeric_and_non_finite_values(tmp_path, bad, fragment):
    text = GOOD.replace("5.500000", bad)
    _expect_error(tmp_path, "values.bvh", text, _line_of(GOOD, "5.500000"), f"frame 1 has a {fragment}")
    # same in a CRLF file: line numbers still count lines
    _expect_error(tmp_path, "values_crlf.bvh", text.replace("\n", "\r\n"), _line_of(GOOD, "5.500000"), fragment)


def test_unknown_channel(tmp_path):
    text = GOOD.replace("CHANNELS 3 Zrotation", "CHANNELS 3 Wrotation")
    _expect_error(tmp_path, "chan.bvh", text, _line_of(GOOD, "CHANNELS 3"), "unknown channel name 'Wrotation'")


def test_zero_frames(tmp_path):
    text = GOOD.replace("Frames: 3", "Frames: 0")
    _expect_error(tmp_path, "zero.bvh", text, _line_of(GOOD, "Frames:"), "zero frames")
    text = GOOD.replace("Frames: 3", "Frames: three")
    _expect_error(tmp_path, "nframes.bvh", text, _line_of(GOOD, "Frames:"), "bad frame count")
    text = GOOD.replace("Frame Time: 0.03333333", "Frame Time: 0")
    _expect_error(tmp_path, "ftime.bvh", text, _line_of(GOOD, "Frame Time"), "frame time must be a positive")


def test_malformed_hierarchy(tmp_path):
    lines = GOOD.split("\n")
    child = _line_of(GOOD, "JOINT Child")
    # '{' missing after JOINT Child: the OFFSET line is where it was expected
    text = "\n".join(lines[:child] + lines[child + 1:])
    _expect_error(tmp_path, "brace.bvh", text, child + 1, "expected '{' after line")
    # one '}' too many right after the ROOT block closes
    root_close = len(lines) - lines[::-1].index("}")
    text = "\n".join(lines[:root_close] + ["}"] + lines[root_close:])
    _expect_error(tmp_path, "unbalanced.bvh", text, root_close + 1, "unbalanced '}'")
    # ROOT block never closed
    text = "\n".join(lines[:root_close - 1] + lines[root_close:])
    _expect_error(tmp_path, "unclosed.bvh", text, _line_of(text, "MOTION"), "unclosed")
    # CHANNELS count disagrees with the names listed
    text = GOOD.replace("CHANNELS 3 Zrotation", "CHANNELS 4 Zrotation")
    _expect_error(tmp_path, "nchan.bvh", text, _line_of(GOOD, "CHANNELS 3"), "CHANNELS says 4 but lists 3")
    # OFFSET with two numbers, and a non-numeric one
    text = GOOD.replace("OFFSET 0.0000 0.5000 0.0000", "OFFSET 0.0000 0.5000")
    _expect_error(tmp_path, "off2.bvh", text, _line_of(GOOD, "OFFSET 0.0000 0.5000"), "OFFSET needs three numbers")
    text = GOOD.replace("OFFSET 0.0000 0.5000 0.0000", "OFFSET 0.0000 x 0.0000")
    _expect_error(tmp_path, "offx.bvh", text, _line_of(GOOD, "OFFSET 0.0000 0.5000"), "non-numeric OFFSET")
    # joint without OFFSET: reported where its block closes
    off = _line_of(GOOD, "OFFSET 0.0000 0.5000")
    text = "\n".join(lines[:off - 1] + lines[off:])
    _expect_error(tmp_path, "nooff.bvh", text, _line_of(GOOD, "}", nth=1) - 1, "has no OFFSET")
    # unknown keyword and missing HIERARCHY
    text = GOOD.replace("JOINT Child", "BONE Child")
    _expect_error(tmp_path, "kw.bvh", text, child, "unexpected keyword 'BONE'")
    text = GOOD.replace("HIERARCHY\n", "")
    _expect_error(tmp_path, "nohier.bvh", text, 1, "before HIERARCHY")
    _expect_error(tmp_path, "empty.bvh", "", 1, "empty file")


def test_parse_text_error_names_given_path():
    with pytest.raises(BVHError, match=r"^clip\.bvh:\d+: .*unknown channel"):
        parse_bvh_text(GOOD.replace("Xposition", "Qposition"), path="clip.bvh")
