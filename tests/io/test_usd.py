"""USD out (`motionmatch export ... -o OUT.usda|.usdc|.usdz`), checked by Pixar's own library: its checker
(the validators usd-core 26.11's `usdchecker` runs) finds no error, and UsdSkel's own joint world
transforms agree with ours within 1 mm at 10 frames. Cases: the default body on a 30 fps Bandai-Namco
clip (the frame rate kept), the two-mesh Mixamo-style rig (every mesh, material, UV and texture), a crowd
folder as `synth --crowd` writes it (one skeleton per agent; a real 20-agent crowd in a slow test); the
missing extra is one clear error, a malformed material in a model is named.
Blender's importer reads the same files in tests/io/test_blender.py."""
from __future__ import annotations

import json
import math
import sys
import zipfile

import numpy as np
import pytest

from motionmatch.body.export import usd_characters
from motionmatch.body.rigged_model import load_rigged_model, retarget_to_model
from motionmatch.cli import main
from motionmatch.devtools.interop import (ERROR_BOUND_MM, crowd_of, pxr_joint_positions, pxr_reads_usd,
                                          usd_checker_findings)
from motionmatch.io.bvh import read_bvh, write_bvh
from motionmatch.io.usd import joint_paths, prim_name
from rig_fixtures import write_two_mesh_rig

try:
    from pxr import Usd, UsdGeom, UsdShade, UsdSkel
except ImportError:
    pytest.fail("Pixar's library is missing: `make install` installs the `usd` extra (pip install -e '.[usd]')",
                pytrace=False)


@pytest.fixture(scope="module")
def bandai_clip(bandai_dir, tmp_path_factory):
    """Two seconds (60 frames at the file's 30 fps) of a Bandai-Namco walk."""
    anim = read_bvh(bandai_dir / "dataset-1" / "dataset-1_walk_normal_001.bvh")
    anim.positions, anim.rotations = anim.positions[:60], anim.rotations[:60]
    path = tmp_path_factory.mktemp("bandai") / "walk30.bvh"
    write_bvh(path, anim)
    return path


def _errors(path) -> list[str]:
    return [m for kind, m in usd_checker_findings(path) if kind == "error"]


def test_default_body_at_the_motions_frame_rate(bandai_clip, tmp_path, capsys):
    out = tmp_path / "walk.usda"
    assert main(["export", str(bandai_clip), "-o", str(out), "--mesh", "auto"]) == 0
    assert "30 fps" in capsys.readouterr().out
    assert _errors(out) == []
    stage = Usd.Stage.Open(str(out))
    assert UsdGeom.GetStageMetersPerUnit(stage) == 1.0 and UsdGeom.GetStageUpAxis(stage) == "Y"
    assert stage.GetTimeCodesPerSecond() == 30.0 and stage.GetFramesPerSecond() == 30.0
    assert (stage.GetStartTimeCode(), stage.GetEndTimeCode()) == (0.0, 59.0)
    anim = read_bvh(bandai_clip)
    # One SkelRoot: its skeleton (the BVH's joints, names kept), the motion, the body bound and skinned.
    root = stage.GetPrimAtPath("/World/walk30")
    assert root.IsA(UsdSkel.Root)
    skel = UsdSkel.Skeleton(stage.GetPrimAtPath("/World/walk30/Skeleton"))
    assert list(skel.GetJointNamesAttr().Get()) == anim.skeleton.names
    assert list(skel.GetJointsAttr().Get()) == joint_paths(anim.skeleton.names, anim.skeleton.parents)
    body = stage.GetPrimAtPath("/World/walk30/Body")
    binding = UsdSkel.BindingAPI(body)
    assert binding.GetSkeletonRel().GetTargets() == [skel.GetPath()]
    assert binding.GetJointIndicesPrimvar().GetElementSize() == 4
    material, _ = UsdShade.MaterialBindingAPI(body).ComputeBoundMaterial()
    assert material.GetPath() == "/World/Looks/skin"
    row = pxr_reads_usd(out, usd_characters([anim], ["walk30"], None), "default body")
    # Measured 0.0001 mm (float32 translations and rotations in the file).
    assert row["ok"] and row["frames"] == [60, 60] and row["error_mm"] < 0.01, row


def test_the_two_mesh_rig_with_its_materials_and_texture(walk_bvh, tmp_path):
    rig, png = write_two_mesh_rig(tmp_path / "xbot.glb")
    out = tmp_path / "xbot_walk.usdz"
    assert main(["export", str(walk_bvh), "-o", str(out), "--mesh", str(rig)]) == 0
    # The package rules of usdchecker --arkit included (alignment, no compression, only usd and images).
    assert _errors(out) == []
    with zipfile.ZipFile(out) as z:
        names = z.namelist()
        texture = [n for n in names if n.endswith(".png")]
        assert names[0].endswith(".usdc") and len(texture) == 1 and z.read(texture[0]) == png
    stage = Usd.Stage.Open(str(out))
    meshes = {p.GetName(): p for p in stage.Traverse() if p.IsA(UsdGeom.Mesh)}
    assert sorted(meshes) == ["Beta_Joints", "Beta_Surface"]
    model = load_rigged_model(rig)
    looks = {n: UsdShade.MaterialBindingAPI(p).ComputeBoundMaterial()[0].GetPath().name for n, p in meshes.items()}
    assert looks == {"Beta_Joints": "Beta_Joints_MAT", "Beta_Surface": "Beta_Surface_MAT"}
    # The body's UVs with v flipped (USD's origin is bottom left), its vertices in the bind pose.
    surface = next(p for p in model.parts if p.name == "Beta_Surface")
    st = np.array(UsdGeom.PrimvarsAPI(meshes["Beta_Surface"]).GetPrimvar("st").Get())
    assert np.allclose(st[:, 0], surface.mesh.uvs[:, 0]) and np.allclose(st[:, 1], 1 - surface.mesh.uvs[:, 1])
    assert np.allclose(np.array(UsdGeom.Mesh(meshes["Beta_Surface"]).GetPointsAttr().Get()), surface.mesh.positions)
    red = UsdShade.Material(stage.GetPrimAtPath("/World/Looks/Beta_Joints_MAT"))
    shader = red.ComputeSurfaceSource()[0]
    assert np.allclose(shader.GetInput("diffuseColor").Get(), (0.9, 0.1, 0.1))
    skel = UsdSkel.Skeleton(next(p for p in stage.Traverse() if p.IsA(UsdSkel.Skeleton)))
    assert list(skel.GetJointNamesAttr().Get()) == model.skeleton.names        # `mixamorig:Hips` kept as a name
    assert list(skel.GetJointsAttr().Get())[0] == "mixamorig_Hips"            # and made a valid path
    chars = usd_characters([read_bvh(walk_bvh)], ["walk"], rig)     # named after the motion file, as export does
    row = pxr_reads_usd(out, chars, "rig")
    want, _ = retarget_to_model(read_bvh(walk_bvh), model).global_transforms()
    assert np.abs(chars[0].anim.global_transforms()[0] - want).max() == 0.0
    assert row["ok"] and row["error_mm"] < 0.01, row          # measured 0.0001 mm
    # As .usda the texture is a file beside it, which the stage names relative to itself.
    text = tmp_path / "xbot_walk.usda"
    assert main(["export", str(walk_bvh), "-o", str(text), "--mesh", str(rig)]) == 0
    assert _errors(text) == [] and (tmp_path / "xbot_walk_textures" / "Beta_Surface_MAT.png").read_bytes() == png
    assert "@./xbot_walk_textures/Beta_Surface_MAT.png@" in text.read_text()


def test_a_crowd_folder_is_one_stage_with_a_skeleton_per_agent(walk_bvh, tmp_path):
    crowd = tmp_path / "crowd"                     # as `synth --crowd` writes it: agent_000.bvh ...
    crowd.mkdir()
    agents = crowd_of(read_bvh(walk_bvh), 3)
    for a in agents:
        write_bvh(crowd / f"{a.name}.bvh", a)
    (crowd / "metrics.json").write_text("{}")
    out = tmp_path / "crowd.usdc"
    assert main(["export", str(crowd), "-o", str(out), "--mesh", "auto"]) == 0
    assert _errors(out) == []
    theirs = pxr_joint_positions(out)
    assert sorted(theirs) == ["agent_000", "agent_001", "agent_002"]
    read = [read_bvh(crowd / f"{a.name}.bvh") for a in agents]
    row = pxr_reads_usd(out, usd_characters(read, [a.name for a in agents], None), "crowd")
    assert row["ok"] and row["skeletons"] == 3 and row["error_mm"] < ERROR_BOUND_MM, row
    # The agents stand where their BVHs put them: 1.5 m apart.
    hips = [theirs[a.name][1][0, 0] for a in agents]
    assert abs(np.linalg.norm(hips[1] - hips[0]) - 1.5) < 0.2
    # One body and one material shared by the agents: the others reference agent_000's mesh, each bound to
    # its own skeleton.
    stage = Usd.Stage.Open(str(out))
    assert [p.GetPath().pathString for p in stage.GetPrimAtPath("/World/Looks").GetChildren()] == ["/World/Looks/skin"]
    bodies = [stage.GetPrimAtPath(f"/World/{a.name}/Body") for a in agents]
    assert all(np.array_equal(UsdGeom.Mesh(b).GetPointsAttr().Get(), UsdGeom.Mesh(bodies[0]).GetPointsAttr().Get())
               for b in bodies)
    assert [UsdSkel.BindingAPI(b).GetSkeletonRel().GetTargets()[0].pathString for b in bodies] == \
        [f"/World/{a.name}/Skeleton" for a in agents]
    assert [len(b.GetPrimStack()) for b in bodies] == [1, 2, 2]        # agent_001, 002: their own spec + the reference


def test_names_become_valid_prims():
    assert prim_name("mixamorig:Hips") == "mixamorig_Hips" and prim_name("3d-root") == "_3d_root"
    assert joint_paths(["a", "b:c", "b c"], np.array([-1, 0, 0])) == ["a", "a/b_c", "a/b_c_1"]


def test_without_the_extra_one_error_names_it_and_nothing_is_written(walk_bvh, tmp_path, capsys, monkeypatch):
    for name in ("pxr", "pxr.Usd", "pxr.UsdSkel"):
        monkeypatch.setitem(sys.modules, name, None)        # as if usd-core were not installed
    out = tmp_path / "out" / "walk.usda"
    assert main(["export", str(walk_bvh), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "pip install motionmatch[usd]" in err and str(out) in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_the_checker_finds_what_it_should(tmp_path):
    # The "no error" assertions above can fail: a stage without metadata and a skinned mesh outside a
    # SkelRoot gets four errors from the same validators.
    bad = Usd.Stage.CreateNew(str(tmp_path / "bad.usda"))
    UsdSkel.BindingAPI.Apply(UsdGeom.Mesh.Define(bad, "/M").GetPrim()).CreateSkeletonRel().SetTargets(["/S"])
    bad.GetRootLayer().Save()
    errors = " ".join(_errors(tmp_path / "bad.usda"))
    for name in ("MissingMetersPerUnitMetadata", "MissingUpAxisMetadata", "MissingDefaultPrim",
                 "InvalidSkelBindingAPIApply"):
        assert name in errors, errors


@pytest.mark.slow
def test_a_twenty_agent_crowd_synth_is_one_stage(jlpm_db_path, tmp_path):
    # A real `synth --crowd`: 20 agents on a 4 m circle crossing to the opposite point, 2 s.
    agents = [{"start": [4 * math.cos(a), 4 * math.sin(a)], "goal": [-4 * math.cos(a), -4 * math.sin(a)]}
              for a in np.linspace(0, 2 * math.pi, 20, endpoint=False)]
    spec = tmp_path / "circle.json"
    spec.write_text(json.dumps({"duration": 2.0, "avoidance": True, "agents": agents}))
    folder = tmp_path / "circle"
    assert main(["synth", "--db", str(jlpm_db_path), "--crowd", str(spec), "--out", str(folder), "--quiet"]) == 0
    out = tmp_path / "circle.usdc"
    assert main(["export", str(folder), "-o", str(out), "--mesh", "auto"]) == 0
    assert _errors(out) == []
    files = sorted(folder.glob("agent_*.bvh"))
    chars = usd_characters([read_bvh(f) for f in files], [f.stem for f in files], None)
    row = pxr_reads_usd(out, chars, "20-agent crowd")
    assert row["ok"] and row["skeletons"] == 20 and row["frames"] == [120, 120], row
    stage = Usd.Stage.Open(str(out))
    assert sum(p.IsA(UsdGeom.Mesh) for p in stage.Traverse()) == 20


def test_a_malformed_material_is_named(tmp_path):
    import pygltflib
    from motionmatch.io.gltf import GLTFError
    rig, _ = write_two_mesh_rig(tmp_path / "xbot.glb")
    g = pygltflib.GLTF2().load(str(rig))
    g.materials[1].pbrMetallicRoughness.baseColorFactor = [0.9, 0.1, "red", 1.0]
    g.save_binary(str(tmp_path / "bad.glb"))
    with pytest.raises(GLTFError, match=r"bad.glb: materials\[1\].baseColorFactor: expected 4 numbers in \[0, 1\]"):
        load_rigged_model(tmp_path / "bad.glb")
    g.materials[1].pbrMetallicRoughness.baseColorFactor = [1.0000001, 0.1, 0.1, 1.0]     # rounded past 1: kept
    g.save_binary(str(tmp_path / "near.glb"))
    assert next(p for p in load_rigged_model(tmp_path / "near.glb").parts
                if p.name == "Beta_Joints").material.base_color == (1.0, 0.1, 0.1, 1.0)


def test_a_synth_folder_exports_its_motion(walk_bvh, tmp_path, capsys):
    folder = tmp_path / "walk_turn"               # as `synth --scenario` writes it
    folder.mkdir()
    (folder / "motion.bvh").write_bytes(walk_bvh.read_bytes())
    (folder / "metrics.json").write_text("{}")
    out = tmp_path / "walk_turn.usda"
    assert main(["export", str(folder), "-o", str(out)]) == 0
    assert sorted(pxr_joint_positions(out)) == ["walk_turn"]          # named after the folder
    (tmp_path / "empty").mkdir()
    assert main(["export", str(tmp_path / "empty"), "-o", str(tmp_path / "x.usda")]) == 1
    assert "without motion.bvh or agent_*.bvh" in capsys.readouterr().err and not (tmp_path / "x.usda").exists()
