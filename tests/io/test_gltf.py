"""glTF export: file structure checked with pygltflib against the source BVH, the default body's skin, the
CLI (export and synth --gltf), and the file loaded and played by three.js GLTFLoader in chromium."""
from __future__ import annotations

import numpy as np
import pygltflib
import pytest
from pygltflib.validator import validate

pytestmark = pytest.mark.filterwarnings("ignore:pygltf.utils.validator is a provisional")

from browser_pages import run_page
from motionmatch.cli import main
from motionmatch.io.bvh import read_bvh
from motionmatch.io.gltf import to_wxyz
from motionmatch.maths.kinematics import forward_kinematics

DTYPES = {5126: np.float32, 5121: np.uint8, 5123: np.uint16, 5125: np.uint32}
WIDTH = {"SCALAR": 1, "VEC3": 3, "VEC4": 4, "MAT4": 16}


def accessor(g: pygltflib.GLTF2, i: int) -> np.ndarray:
    a = g.accessors[i]
    v = g.bufferViews[a.bufferView]
    data = np.frombuffer(g.binary_blob(), DTYPES[a.componentType], a.count * WIDTH[a.type], v.byteOffset)
    return data.reshape(a.count, WIDTH[a.type])



@pytest.fixture(scope="module")
def walk_glb(walk_bvh, tmp_path_factory):
    out = tmp_path_factory.mktemp("glb") / "walk.glb"
    assert main(["export", str(walk_bvh), "-o", str(out), "--mesh", "auto"]) == 0
    return out


def test_export_matches_the_bvh(walk_bvh, walk_glb):
    anim = read_bvh(walk_bvh)
    g = pygltflib.GLTF2().load(str(walk_glb))
    validate(g)
    names = [n.name for n in g.nodes]
    assert names[:anim.skeleton.num_joints] == anim.skeleton.names and names[-1] == "body"
    (clip,) = g.animations
    times = accessor(g, clip.samplers[0].input)[:, 0]
    assert len(times) == anim.num_frames and np.allclose(np.diff(times), 1 / 60, atol=1e-6)
    rot_of = {c.target.node: accessor(g, clip.samplers[c.sampler].output) for c in clip.channels
              if c.target.path == "rotation"}
    moved = [c.target.node for c in clip.channels if c.target.path == "translation"]
    assert len(rot_of) == anim.skeleton.num_joints and moved == [0]   # only the hips translate
    # Rotations equal the BVH's up to sign, frame by frame; the root translation too.
    for j in (0, 2, 14):
        q = to_wxyz(rot_of[j].astype(np.float64))
        assert np.abs(np.abs(np.sum(q * anim.rotations[:, j], axis=-1)) - 1).max() < 1e-5
    tr = next(c for c in clip.channels if c.target.path == "translation")
    assert np.abs(accessor(g, clip.samplers[tr.sampler].output) - anim.positions[:, 0]).max() < 1e-5


def test_default_body_is_skinned_in_its_bind_pose(walk_glb):
    g = pygltflib.GLTF2().load(str(walk_glb))
    (skin,) = g.skins
    J = len(skin.joints)
    prim = g.meshes[0].primitives[0]
    pos = accessor(g, prim.attributes.POSITION)
    w = accessor(g, prim.attributes.WEIGHTS_0)
    jt = accessor(g, prim.attributes.JOINTS_0)
    assert len(pos) > 3000 and np.allclose(w.sum(1), 1, atol=1e-5) and jt.max() < J
    # A standing body: feet on the ground, about 1.5-2 m tall, arms out (wider than tall / 2).
    assert -0.02 < pos[:, 1].min() < 0.03 and 1.4 < pos[:, 1].max() < 2.1
    assert pos[:, 0].max() - pos[:, 0].min() > 1.2
    # Inverse bind matrices undo the nodes' rest transforms (bind pose).
    rest_t = np.array([n.translation for n in g.nodes[:J]])
    rest_r = to_wxyz(np.array([n.rotation for n in g.nodes[:J]]))
    parents = np.full(J, -1)
    for i, n in enumerate(g.nodes[:J]):
        for c in n.children:
            parents[c] = i
    gpos, _ = forward_kinematics(rest_t[None], rest_r[None], parents)
    ibm = accessor(g, skin.inverseBindMatrices).reshape(J, 4, 4).transpose(0, 2, 1)
    local = np.einsum("jab,jb->ja", ibm[:, :3, :3], gpos[0]) + ibm[:, :3, 3]
    assert np.abs(local).max() < 1e-5
    # Vertices of the left hand region follow the left arm's joints, of the feet the legs' joints.
    names = [g.nodes[i].name for i in skin.joints]
    hand = np.argmax(pos[:, 0])
    assert "Left" in names[jt[hand, np.argmax(w[hand])]]
    foot = np.argmin(pos[:, 1] + 0.01 * np.abs(pos[:, 2]))
    assert any(k in names[jt[foot, np.argmax(w[foot])]] for k in ("Foot", "Toe"))


def test_export_resamples_to_60_fps_and_refuses_bad_input(bandai_dir, tmp_path, capsys):
    src = sorted((bandai_dir / "dataset-2").glob("dataset-2_walk_normal_*.bvh"))[0]
    anim = read_bvh(src)
    assert main(["export", str(src), "-o", str(tmp_path / "b.glb")]) == 0
    g = pygltflib.GLTF2().load(str(tmp_path / "b.glb"))
    times = accessor(g, g.animations[0].samplers[0].input)[:, 0]
    assert abs(times[-1] - (anim.num_frames - 1) / anim.fps) < 0.02 and np.allclose(np.diff(times), 1 / 60, atol=1e-6)
    assert not g.meshes                      # no --mesh: skeleton and animation only
    (tmp_path / "x.txt").write_text("not motion")
    assert main(["export", str(tmp_path / "x.txt"), "-o", str(tmp_path / "x.glb")]) == 1
    assert main(["export", str(tmp_path / "missing.bvh"), "-o", str(tmp_path / "x.glb")]) == 1
    assert main(["export", str(src), "-o", str(tmp_path / "x.glb"), "--mesh", str(tmp_path / "nope.glb")]) == 1
    err = capsys.readouterr().err
    assert "x.txt" in err and "missing.bvh" in err and "nope.glb" in err and "Traceback" not in err


def test_synth_writes_gltf(jlpm_db_path, tmp_path):
    scen = tmp_path / "s.json"
    scen.write_text('{"duration": 1.5, "inputs": [{"t": 0.0, "move": [0.0, 1.0]}]}')
    assert main(["synth", "--db", str(jlpm_db_path), "--scenario", str(scen), "--out", str(tmp_path / "o"),
                 "--quiet", "--gltf"]) == 0
    g = pygltflib.GLTF2().load(str(tmp_path / "o" / "motion.glb"))
    validate(g)
    assert g.meshes and g.animations[0].channels
    assert abs(accessor(g, g.animations[0].samplers[0].input)[-1, 0] - 1.5) < 0.05


@pytest.mark.slow
def test_gltfloader_plays_the_animation(walk_glb, tmp_path):
    (tmp_path / "model.glb").write_bytes(walk_glb.read_bytes())
    r = run_page("/pages/gltf_page.html", {"/files/": tmp_path})
    assert r["skinnedMeshes"] == 1 and r["skinBones"] == r["bones"] == 22 and r["vertices"] > 3000
    (clip,) = r["clips"]
    assert abs(clip["duration"] - 119 / 60) < 1e-3 and clip["tracks"] == 23
    t0, t1 = r["t0"]["bones"], r["t1"]["bones"]
    # Half a clip later the hips walked forward and the feet moved relative to the hips.
    hips = np.subtract(t1["Hips"], t0["Hips"])
    assert np.hypot(hips[0], hips[2]) > 0.3
    rel = lambda t, j: np.subtract(t[j], t["Hips"])  # noqa: E731
    assert np.linalg.norm(rel(t1, "LeftFoot") - rel(t0, "LeftFoot")) > 0.05
    # The skinned vertices went with the skeleton.
    c = np.subtract(r["t1"]["skinnedCentre"], r["t0"]["skinnedCentre"])
    assert np.linalg.norm(c - hips) < 0.15
