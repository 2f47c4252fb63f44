"""The character's body: a user's rigged humanoid (a Mixamo-named A-pose rig the tests generate) read,
retargeted offline (export --mesh) and live (the page's per-bone table), bad models refused; the app
serving the body, streaming local rotations and drawing the SkinnedMesh in chromium."""
from __future__ import annotations

import asyncio
import json

import aiohttp
import numpy as np
import pygltflib
import pytest

from browser_pages import probe, serving
from motionmatch.app import backend as app_backend
from motionmatch.app import server as srv
from motionmatch.app import session as app_session
from motionmatch.cli import main
from motionmatch.io.bvh import read_bvh
from motionmatch.io.gltf import GLTFError
from motionmatch.maths.kinematics import forward_kinematics
from motionmatch.body.rigged_model import live_retarget, load_rigged_model, retarget_to_model, source_bind_pose
from motionmatch.maths.rotations import quat_mul, quat_rotate
from motionmatch.motion.skeleton import SkeletonError, find_roles
from rig_fixtures import UNREAL, write_mixamo_rig, write_renamed_rig, write_tail_rig

pytestmark = pytest.mark.filterwarnings("ignore:pygltflib does not support version")


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    return write_mixamo_rig(tmp_path_factory.mktemp("rig") / "kid.glb")


@pytest.fixture(scope="module")
def walk(jlpm_dir):
    anim = read_bvh(jlpm_dir / "locomotion_take1.bvh")
    anim.positions, anim.rotations = anim.positions[840:960], anim.rotations[840:960]   # two seconds of walking
    return anim


def test_rig_is_read_with_roles_bind_pose_and_mesh(rig):
    path, bind_world = rig
    m = load_rigged_model(path)
    assert m.skeleton.names[0] == "mixamorig:Hips" and m.skeleton.names[m.roles["left_toe"]] == "mixamorig:LeftToeBase"
    gpos, _ = forward_kinematics(m.skeleton.offsets[None], m.bind_rotations[None], m.skeleton.parents)
    want = np.array([bind_world[n.split(":")[1]] for n in m.skeleton.names])
    assert np.abs(gpos[0] - want).max() < 1e-6
    # Tube vertices come back in the bind pose's world frame, skinned to the bone they surround.
    knee, hip = bind_world["LeftLeg"], bind_world["LeftUpLeg"]
    thigh = m.mesh.joints[:, 0] == m.skeleton.names.index("mixamorig:LeftUpLeg")
    mid = m.mesh.positions[thigh].mean(0)
    assert np.linalg.norm(mid - (knee + hip) / 2) < 0.01


def test_unreal_vrm_and_mapped_rigs_get_their_roles(tmp_path):
    unreal = load_rigged_model(write_renamed_rig(tmp_path / "ue.glb", UNREAL))
    assert {r: unreal.skeleton.names[j] for r, j in unreal.roles.items() if r in ("hips", "left_toe", "chest")} == \
        {"hips": "pelvis", "left_toe": "ball_l", "chest": "spine_03"}
    # VRM: node names say nothing; the humanoid table does.
    vrm = load_rigged_model(write_renamed_rig(tmp_path / "vrm.glb", {}, vrm=True))
    assert vrm.skeleton.names[vrm.roles["left_foot"]] == "X_LeftFoot" and vrm.skeleton.names[vrm.roles["chest"]] == "X_Spine2"
    # Any names with a [roles] mapping file; without it the error says what to map.
    odd = write_renamed_rig(tmp_path / "odd.glb", {})
    with pytest.raises(SkeletonError, match="odd.glb: not a humanoid.*X_Hips"):
        load_rigged_model(odd)
    roles = {r: f"X_{n}" for r, n in (("hips", "Hips"), ("head", "Head"), ("spine", "Spine"), ("chest", "Spine2"))}
    roles.update({f"{s.lower()}_{r}": f"X_{s}{n}" for s in ("Left", "Right") for r, n in (
        ("upper_leg", "UpLeg"), ("lower_leg", "Leg"), ("foot", "Foot"), ("toe", "ToeBase"), ("hand", "Hand"))})
    (tmp_path / "roles.toml").write_text("[roles]\n" + "".join(f'{r} = "{n}"\n' for r, n in roles.items()))
    mapped = load_rigged_model(odd, tmp_path / "roles.toml")
    assert mapped.skeleton.names[mapped.roles["right_lower_leg"]] == "X_RightLeg"


def test_export_onto_the_rig_and_live_table_agree(rig, walk, tmp_path):
    path, _ = rig
    m = load_rigged_model(path)
    out = retarget_to_model(walk, m)
    t_gpos, t_grot = out.global_transforms()
    roles = m.roles
    # The small character walks too, its feet near the ground.
    hips = t_gpos[:, roles["hips"]]
    assert np.linalg.norm(hips[-1] - hips[0]) > 0.5
    feet = t_gpos[:, [roles["left_foot"], roles["right_foot"]], 1]
    assert 0.0 < np.percentile(feet, 5) < 0.2 and hips[:, 1].mean() < 0.8
    # The page's table reproduces the offline world rotations of every mapped bone, every frame.
    src_roles = find_roles(walk.skeleton.names)
    table = live_retarget(walk.skeleton, src_roles, source_bind_pose(walk.skeleton, src_roles, walk.positions,
                                                                       walk.rotations), m)
    _, s_grot = walk.global_transforms()
    mapped = [(m.skeleton.names.index(n), b) for n, b in table["bones"].items() if "source" in b]
    assert len(mapped) >= 14
    for t, b in mapped:
        live = quat_mul(s_grot[:, b["source"]], np.array(b["offset"]))
        assert np.abs(np.abs(np.sum(live * t_grot[:, t], -1)) - 1).max() < 1e-4, m.skeleton.names[t]
    assert 0.6 < table["scale"] < 0.95     # a shorter character
    # The CLI writes the rig's own file (its nodes as they were) with the retargeted motion.
    assert main(["export", str(_walk_bvh(walk, tmp_path)), "-o", str(tmp_path / "kid_walk.glb"), "--mesh", str(path)]) == 0
    g = pygltflib.GLTF2().load(str(tmp_path / "kid_walk.glb"))
    assert [n.name for n in g.nodes] == [n.name for n in pygltflib.GLTF2().load(str(path)).nodes]
    assert g.meshes and [a.name for a in g.animations] == ["motion"]


def _walk_bvh(walk, tmp_path):
    from motionmatch.io.bvh import write_bvh
    write_bvh(tmp_path / "walk.bvh", walk)
    return tmp_path / "walk.bvh"


def test_bad_models_get_clear_errors(tmp_path, jlpm_db_path, capsys):
    tail = write_tail_rig(tmp_path / "tail.glb")
    with pytest.raises(SkeletonError, match="tail.glb: not a humanoid"):
        load_rigged_model(tail)
    (tmp_path / "junk.glb").write_bytes(b"glTF not really")
    with pytest.raises(GLTFError, match="junk.glb"):
        load_rigged_model(tmp_path / "junk.glb")
    bare = pygltflib.GLTF2(scene=0, scenes=[pygltflib.Scene(nodes=[0])], nodes=[pygltflib.Node(name="Hips")])
    bare.save_binary(str(tmp_path / "bare.glb"))
    with pytest.raises(GLTFError, match="bare.glb: no skin"):
        load_rigged_model(tmp_path / "bare.glb")
    # The serve command says so and stops, without a traceback.
    assert main(["serve", "--db", str(jlpm_db_path), "--port", "0", "--character", str(tail)]) == 1
    assert main(["serve", "--db", str(jlpm_db_path), "--port", "0", "--character", str(tmp_path / "none.glb")]) == 1
    err = capsys.readouterr().err
    assert "tail.glb: not a humanoid" in err and "none.glb" in err and "Traceback" not in err


def _app(db_path, model=None):
    from motionmatch.posedb.database import load_database
    db = load_database(db_path)
    return srv.make_app(app_backend.runtime_backend(db, app_backend.character_for(db, db_path, model))), db


def test_server_streams_local_rotations_and_serves_the_body(jlpm_db_path):
    app, db = _app(jlpm_db_path)

    async def go(url):
        async with aiohttp.ClientSession() as s:
            async with s.get(url + "/api/character.glb") as r:
                assert r.status == 200 and r.headers["Content-Type"] == "model/gltf-binary"
                glb = await r.read()
            ws = await s.ws_connect(url.replace("http", "ws") + "/ws")
            hello = json.loads((await ws.receive()).data)
            await ws.send_str(json.dumps({"type": "input", "move": [0.0, 1.0]}))
            frames = []
            while len(frames) < 40:
                msg = await ws.receive()
                if msg.type == aiohttp.WSMsgType.BINARY:
                    frames.append(msg.data)
            await ws.close()
            return glb, hello, frames

    with serving(app) as url:
        glb, hello, frames = asyncio.run(asyncio.wait_for(go(url), 60))
    g = pygltflib.GLTF2.load_from_bytes(glb)
    assert [n.name for n in g.nodes[:db.num_joints]] == db.skeleton.names and g.meshes[0].primitives[0].attributes.JOINTS_0 is not None
    ch = hello["character"]
    assert ch["url"] == "/api/character.glb" and ch["bones"]["Hips"]["source"] == db.skeleton.names.index("Hips")
    J = len(hello["names"])
    for data in frames[-5:]:
        _, _, n = app_session.FRAME_HEADER.unpack_from(data)
        start = app_session.FRAME_HEADER.size
        pos = np.frombuffer(data, "<f4", 3 * J, start).reshape(J, 3)
        rot = np.frombuffer(data, "<f4", 4 * J, start + 12 * J + n).reshape(J, 4).astype(np.float64)
        assert len(data) == start + 12 * J + n + 16 * J
        assert np.allclose(np.linalg.norm(rot, axis=1), 1, atol=1e-4)
        # World rotations composed from the local ones turn each leg bone's rest offset onto the streamed positions.
        grot = rot.copy()
        for j in range(1, J):
            grot[j] = quat_mul(grot[db.skeleton.parents[j]], rot[j])
        for name in ("LeftLowerLeg", "RightFoot", "LeftHand"):
            j = db.skeleton.names.index(name)
            p = db.skeleton.parents[j]
            assert np.linalg.norm(quat_rotate(grot[p], db.skeleton.offsets[j]) - (pos[j] - pos[p])) < 2e-3, name


@pytest.mark.slow
@pytest.mark.parametrize("model", [None, "rig"])
def test_page_draws_the_skinned_body(jlpm_db_path, rig, tmp_path, model):
    app, _ = _app(jlpm_db_path, rig[0] if model else None)
    with serving(app) as url:
        report = probe({"url": url + "/?quality=low", "hold": {"key": "KeyW", "ms": 1500}, "result":
                        "JSON.parse(JSON.stringify(window.motionmatch.body))",
                        "waitFor": "window.motionmatch && window.motionmatch.body.loaded && window.motionmatch.body.poses > 20",
                        "screenshot": str(tmp_path / "body.png")})
    before, after = report["before"], report["result"]
    assert after["loaded"] and not after["error"] and after["bones"] >= 22
    assert after["name"] == ("kid.glb" if model else "default body")
    assert after["poses"] > before["poses"] + 30
    # Holding W walked the body's hips forward (+Z) by a plausible distance.
    dz = after["hips"][2] - before["hips"][2]
    assert 0.5 < dz < 6.0, (before["hips"], after["hips"])
    # The small rig's hips are lower than the database character's.
    assert (after["hips"][1] < 0.8) if model else (0.8 < after["hips"][1] < 1.2), after["hips"]
    assert (tmp_path / "body.png").stat().st_size > 10_000


def test_default_body_is_cached_beside_the_database(jlpm_db, tmp_path):
    import os
    from motionmatch.posedb.database import save_database
    from motionmatch.body.mesh import ensure_body_glb
    db_path = tmp_path / "db.npz"
    save_database(jlpm_db, db_path)
    glb = ensure_body_glb(db_path, jlpm_db.skeleton, jlpm_db.roles)
    assert glb == tmp_path / "db.body.glb"
    os.utime(glb, (1e9, 1e9 + 1))                     # older than the database: rebuilt
    ensure_body_glb(db_path, jlpm_db.skeleton, jlpm_db.roles)
    built = glb.stat().st_mtime
    assert built > 1e9 + 1
    assert ensure_body_glb(db_path, jlpm_db.skeleton, jlpm_db.roles).stat().st_mtime == built   # reused
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []


def _crossings(verts, tris, axis, at):
    """Where the line along `axis` (0: x, 1: y) through the point `at` (the other two coordinates, in
    axis order) crosses the mesh: the sorted coordinates along the axis."""
    other = [k for k in range(3) if k != axis]
    p = verts[tris]                                        # (T, 3 corners, 3)
    q = p[:, :, other] - np.asarray(at)                    # the triangles seen along the line
    e1, e2 = q[:, 1] - q[:, 0], q[:, 2] - q[:, 0]
    det = e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]
    ok = np.abs(det) > 1e-15
    u = (-q[ok, 0, 0] * e2[ok, 1] + q[ok, 0, 1] * e2[ok, 0]) / det[ok]
    v = (-e1[ok, 0] * q[ok, 0, 1] + e1[ok, 1] * q[ok, 0, 0]) / det[ok]
    inside = (u >= 0) & (v >= 0) & (u + v <= 1)
    c = p[ok][inside][:, :, axis]
    return np.sort(c[:, 0] + u[inside] * (c[:, 1] - c[:, 0]) + v[inside] * (c[:, 2] - c[:, 0]))


def test_default_body_has_a_rounded_crotch(jlpm_db):
    """The crotch is an arch the light gets into, not a pinched slit: below it the thighs part by a few
    centimetres at once, and the surface around it bends without sharp normal flips."""
    from motionmatch.body.mesh import body_mesh, tpose_bind
    sk, roles = jlpm_db.skeleton, jlpm_db.roles
    m = body_mesh(sk, roles)
    v, tris, n = m.positions.astype(np.float64), m.triangles.astype(np.int64), m.normals.astype(np.float64)
    lpos, lrot = tpose_bind(sk, roles)
    gpos, _ = forward_kinematics(lpos[None], lrot[None], sk.parents)
    hip_l, hip_r = gpos[0, roles["left_upper_leg"]], gpos[0, roles["right_upper_leg"]]
    mid = (hip_l + hip_r) / 2
    # The crotch: the lowest surface point on the vertical line between the hip joints, 5-14 cm below them
    # (a person's crotch is about 0.47 and the hip joints 0.52 of the standing height).
    up = _crossings(v, tris, 1, (mid[0], mid[2]))
    crotch = up[(up > gpos[0, roles["left_lower_leg"], 1]) & (up < mid[1])].min()
    assert 0.05 < mid[1] - crotch < 0.14, (mid[1], crotch)
    # 3 cm below it the thighs stand at least 4.5 cm apart (the pinched body: a 3 cm slit up to its tip).
    across = _crossings(v, tris, 0, (crotch - 0.03, mid[2]))
    gap = across[across > mid[0]].min() - across[across < mid[0]].max()
    assert gap > 0.045, gap
    # Around the crotch, neighbouring vertex normals differ by less than 50 degrees (pinched: 72).
    near = np.linalg.norm(v - [mid[0], crotch, mid[2]], axis=1) < 0.12
    edges = np.concatenate([tris[:, [0, 1]], tris[:, [1, 2]], tris[:, [2, 0]]])
    edges = edges[near[edges[:, 0]] & near[edges[:, 1]]]
    assert len(edges) > 500
    cos = np.einsum("ij,ij->i", n[edges[:, 0]], n[edges[:, 1]])
    assert np.degrees(np.arccos(cos.min())) < 50
