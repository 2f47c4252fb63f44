"""`export --mesh MODEL.glb` writes the character whole: every skinned mesh (Xbot's body is its second
mesh), their materials, UVs and textures byte for byte, an `Armature` node's scale and turn; only the
animations are replaced, and the joints follow the retargeted motion within 1 mm."""
from __future__ import annotations

import numpy as np
import pygltflib
import pytest
from pygltflib.validator import validate

from motionmatch.cli import main
from motionmatch.io.bvh import read_bvh
from motionmatch.io.gltf import read_accessor, read_glb
from motionmatch.io.gltf_clips import read_gltf_clips
from motionmatch.body.rigged_model import load_rigged_model, retarget_to_model
from rig_fixtures import write_animated_mixamo_rig, write_two_mesh_rig

pytestmark = pytest.mark.filterwarnings("ignore:pygltf.utils.validator is a provisional")



def _joints_follow_the_retarget(walk_bvh, model_path, out):
    model = load_rigged_model(model_path)
    want, _ = retarget_to_model(read_bvh(walk_bvh), model).global_transforms()
    clip = read_gltf_clips(out)[0]
    got, _ = clip.global_transforms()
    got = got[:, [clip.skeleton.index(n) for n in model.skeleton.names]]
    assert clip.num_frames == len(want)
    return np.abs(got - want).max()


def test_every_mesh_material_uv_and_texture_is_kept(walk_bvh, tmp_path):
    rig, png = write_two_mesh_rig(tmp_path / "xbot.glb")
    out = tmp_path / "xbot_walk.glb"
    assert main(["export", str(walk_bvh), "-o", str(out), "--mesh", str(rig)]) == 0
    g = pygltflib.GLTF2().load(str(out))
    validate(g)
    src, dst = read_glb(rig), read_glb(out)
    # Both skinned meshes, on their nodes, with their own materials; the body's UVs and texture intact.
    assert [m.name for m in g.meshes] == ["Beta_Surface", "Beta_Joints"]
    assert sorted(n.name for n in g.nodes if n.mesh is not None and n.skin == 0) == ["Beta_Joints", "Beta_Surface"]
    assert [m.name for m in g.materials] == ["Beta_Surface_MAT", "Beta_Joints_MAT"]
    for mesh in range(2):
        for name, acc in src.doc["meshes"][mesh]["primitives"][0]["attributes"].items():
            assert np.array_equal(read_accessor(src, acc), read_accessor(dst, acc)), name
    view = dst.doc["bufferViews"][dst.doc["images"][0]["bufferView"]]
    start = view.get("byteOffset", 0)
    assert dst.blob[start:start + view["byteLength"]] == png
    assert [a["name"] for a in dst.doc["animations"]] == ["motion"]
    # Measured 0.0004 mm.
    assert _joints_follow_the_retarget(walk_bvh, rig, out) < 0.01e-3


def test_a_scaled_and_turned_armature_stays_around_the_joints(walk_bvh, tmp_path):
    rig, _, _ = write_animated_mixamo_rig(tmp_path / "mixamo.glb")
    out = tmp_path / "mixamo_walk.glb"
    assert main(["export", str(walk_bvh), "-o", str(out), "--mesh", str(rig)]) == 0
    doc = read_glb(out).doc
    armature = next(n for n in doc["nodes"] if n.get("name") == "Armature")
    assert armature["scale"] == [0.01] * 3
    # The Walk animation of the model is replaced by the motion; joints within 1 mm of the retarget.
    assert [a["name"] for a in doc["animations"]] == ["motion"]
    assert _joints_follow_the_retarget(walk_bvh, rig, out) < 0.01e-3     # measured 0.0004 mm


def _lowest_sole(moved, model, plates, owners):
    """Per frame, the lowest sole-plate vertex (m): the plates follow their foot joints rigidly."""
    from motionmatch.maths.kinematics import forward_kinematics
    from motionmatch.maths.rotations import quat_inv, quat_mul, quat_rotate
    owners = [model.skeleton.index(n) for n in owners]
    gpos, grot = moved.global_transforms()
    bpos, brot = forward_kinematics(np.asarray(model.skeleton.offsets)[None], np.asarray(model.bind_rotations)[None],
                                    model.skeleton.parents)
    turn = quat_mul(grot[:, owners], quat_inv(brot[0, owners])[None])
    world = quat_rotate(turn, (plates - bpos[0, owners])[None]) + gpos[:, owners]
    return world[..., 1].min(axis=1)


@pytest.mark.parametrize("depth", [0.04, 0.09])
def test_soles_rest_on_the_floor_in_exports_and_in_the_page(walk_bvh, tmp_path, depth, jlpm_db):
    from motionmatch.motion.preprocess import planted_toe_height_m
    from motionmatch.body.rigged_model import live_retarget, page_pose, sole_floor, sole_heights, source_bind_pose
    from rig_fixtures import write_soled_rig
    rig, plates, owners = write_soled_rig(tmp_path / "soled.glb", depth)
    model = load_rigged_model(rig)
    assert sole_floor(model) == pytest.approx(depth, abs=1e-6)
    # Export: the planted soles (5th percentile of the lowest sole vertex) on the floor; before the fit
    # they sank 2 cm with either sole (the planted foot is flatter than the bind pose's).
    moved = retarget_to_model(read_bvh(walk_bvh), model)
    assert abs(np.percentile(_lowest_sole(moved, model, plates, owners), 5)) < 1e-3
    # The page (rigged_model.page_pose, the Python twin of skinned.js pose()): the table's ground,
    # fitted on the database's frames, puts the planted soles on the floor; with ground 0 they sank
    # 3.7-10 cm on these rigs.
    db = jlpm_db
    bind = source_bind_pose(db.skeleton, db.roles, db.positions, db.rotations)
    sample = db.global_transforms(np.arange(0, db.num_frames, 10))
    table = live_retarget(db.skeleton, db.roles, bind, model, source_floor=planted_toe_height_m(db),
                          source_motion=sample)
    assert abs(np.percentile(sole_heights(model, page_pose(model, table, *sample)), 5)) < 1e-3
    assert np.percentile(sole_heights(model, page_pose(model, dict(table, ground=0.0), *sample)), 5) < -0.03
    # Without a sample of the motion, the standing T-poses give a ground within 2 cm.
    rough = live_retarget(db.skeleton, db.roles, bind, model, source_floor=planted_toe_height_m(db))
    assert abs(np.percentile(sole_heights(model, page_pose(model, rough, *sample)), 5)) < 0.02
