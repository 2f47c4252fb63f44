"""Blender round trips, run by `make test-blender` (part of `make test`) with Blender's environment
installed (`make blender`; pytest -m blender): marked `blender` and deselected from a plain `pytest`,
never skipped: without the environment these tests fail with the install instructions.

Blender-made FBX files read back, and built into databases, within 1 mm of their BVH sources; our .glb
exports opened by Blender's own glTF importer, and our USD by its USD importer (the default body, the
two-mesh rig, a crowd with an armature per agent), within 1 mm of our joints."""
from __future__ import annotations

import numpy as np
import pytest

from motionmatch.cli import main
from motionmatch.posedb.database import load_database
from motionmatch.devtools.interop import ERROR_BOUND_MM, blender_reads_export, fbx_reads_back, make_fbx
from motionmatch.io.bvh import read_bvh

pytestmark = pytest.mark.blender



def test_a_blender_made_fbx_reads_back_within_a_millimetre(walk_bvh, tmp_path):
    row = fbx_reads_back(walk_bvh, tmp_path)
    # Measured 0.0046 mm (Blender stores the FBX in float32 centimetres).
    assert row["clips"] == 1 and row["frames"] == [120, 120] and row["error_mm"] < 0.05, row


def test_a_blender_made_fbx_builds_the_bvhs_database(walk_bvh, tmp_path):
    fbx = make_fbx(walk_bvh, tmp_path / "walk.fbx")
    dbs = []
    for src in (walk_bvh, fbx):
        out = tmp_path / f"{src.suffix[1:]}.npz"
        assert main(["build", str(src), "-o", str(out), "--quiet", "--no-mirror"]) == 0
        dbs.append(load_database(out))
    a, b = dbs
    assert b.range_names == ["walk.fbx:walk|walk|walk"] and a.num_frames == b.num_frames
    ga, _ = a.global_transforms()
    gb, _ = b.global_transforms()
    order = [b.skeleton.names.index(n) for n in a.skeleton.names]
    assert np.abs(ga - gb[:, order]).max() * 1000 < ERROR_BOUND_MM


@pytest.mark.parametrize("mesh", [None, "auto"])
def test_blender_opens_our_export_within_a_millimetre(walk_bvh, tmp_path, mesh):
    row = blender_reads_export(read_bvh(walk_bvh), tmp_path, mesh)
    # One armature, the body skinned to it when exported, the action 120 frames long like ours;
    # measured 0.0005 mm (skeleton) and 0.014 mm (with the body, whose bind pose Blender re-derives).
    assert row["armatures"] == 1 and row["skinned_meshes"] == (1 if mesh else 0), row
    assert row["frames"] == [120, 120] and row["error_mm"] < 0.1, row


def test_convert_turns_a_blender_made_fbx_into_bvh(walk_bvh, tmp_path):
    fbx = make_fbx(walk_bvh, tmp_path / "walk.fbx")
    assert main(["convert", str(fbx), str(tmp_path / "back.bvh")]) == 0
    src, back = read_bvh(walk_bvh), read_bvh(tmp_path / "back.bvh")
    order = [back.skeleton.names.index(n) for n in src.skeleton.names]
    assert np.abs(src.global_transforms()[0] - back.global_transforms()[0][:, order]).max() * 1000 < ERROR_BOUND_MM


def test_blender_opens_an_export_onto_a_two_mesh_character(walk_bvh, tmp_path):
    from motionmatch.devtools.interop import blender_reads_model_export
    from rig_fixtures import write_two_mesh_rig
    rig, _ = write_two_mesh_rig(tmp_path / "xbot.glb")
    row = blender_reads_model_export(read_bvh(walk_bvh), rig, tmp_path)
    # Both meshes (the joint balls and the textured body) bound to the one armature; measured 0.0004 mm.
    assert row["armatures"] == 1 and row["skinned_meshes"] == 2 and row["frames"] == [120, 120], row
    assert row["error_mm"] < ERROR_BOUND_MM, row


def test_damaged_fbx_files_are_clean_errors(walk_bvh, tmp_path):
    from motionmatch.devtools.fuzz_fbx import damaged_fbx, fuzz_fbx_clips
    fbx = make_fbx(walk_bvh, tmp_path / "walk.fbx")
    out = fuzz_fbx_clips(damaged_fbx(fbx.read_bytes(), tmp_path / "damaged", flips=2))
    assert out.findings == []
    assert out.clean_errors >= 8


def test_blender_opens_our_usd_of_the_default_body(walk_bvh, tmp_path):
    from motionmatch.body.export import usd_characters
    from motionmatch.devtools.interop import usd_round_trips
    rows = usd_round_trips(usd_characters([read_bvh(walk_bvh)], ["walk"], "auto"), tmp_path / "walk.usda", tmp_path,
                           "default body")
    checker, pxr_row, blender = rows
    assert checker["errors"] == 0 and pxr_row["ok"], rows
    # One armature with a 120-frame action, the body bound to it; measured 0.0043 mm (Blender keeps float32
    # bone matrices).
    assert blender["armatures"] == 1 and blender["skinned_meshes"] == [1] and blender["frames"] == [120, 120], blender
    assert blender["error_mm"] < 0.1, blender


def test_blender_opens_our_usd_of_the_two_mesh_rig(walk_bvh, tmp_path):
    from motionmatch.body.export import usd_characters
    from motionmatch.devtools.interop import usd_round_trips
    from rig_fixtures import write_two_mesh_rig
    rig, _ = write_two_mesh_rig(tmp_path / "xbot.glb")
    rows = usd_round_trips(usd_characters([read_bvh(walk_bvh)], ["xbot"], rig), tmp_path / "xbot.usdz", tmp_path,
                           "two-mesh rig")
    checker, pxr_row, blender = rows
    assert checker["errors"] == 0 and pxr_row["ok"], rows
    # Both meshes bound to the one armature; measured 0.0003 mm.
    assert blender["armatures"] == 1 and blender["skinned_meshes"] == [2] and blender["frames"] == [120, 120], blender
    assert blender["error_mm"] < ERROR_BOUND_MM, blender


def test_blender_opens_our_usd_crowd_with_an_armature_per_agent(walk_bvh, tmp_path):
    from motionmatch.body.export import usd_characters
    from motionmatch.devtools.interop import crowd_of, usd_round_trips
    agents = crowd_of(read_bvh(walk_bvh), 4)       # `bench interop` does 20 (docs/IMPORTING.md)
    rows = usd_round_trips(usd_characters(agents, [a.name for a in agents], "auto"), tmp_path / "crowd.usdc", tmp_path,
                           "crowd")
    checker, pxr_row, blender = rows
    assert checker["errors"] == 0 and pxr_row["ok"] and pxr_row["skeletons"] == 4, rows
    assert blender["armatures"] == 4 and blender["skinned_meshes"] == [1] * 4 and blender["frames"] == [120, 120], blender
    assert blender["error_mm"] < ERROR_BOUND_MM, blender      # measured 0.0052 mm
