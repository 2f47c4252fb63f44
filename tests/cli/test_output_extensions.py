"""Outputs say what they are (issue 43): a command that writes a file whose format the name's extension
chooses writes that format or refuses the name, with one message naming the extension and the accepted
ones, exit code 2, before it reads any input (the inputs here do not exist: a check that read them first
would answer "no such file" with code 1) and with nothing written."""
from __future__ import annotations

import numpy as np
import pytest

from motionmatch.cli import main
from motionmatch.io.bvh import read_bvh

# (arguments with OUT where the refused name goes, the refused name, the accepted extensions named)
REFUSED = [
    (["export", "IN/walk.bvh", "-o", "OUT"], "walk.txt", (".bvh", ".glb", ".usda", ".usdc", ".usdz")),
    (["export", "IN/walk.bvh", "-o", "OUT"], "walk", (".bvh", ".glb", ".usdz")),
    (["export", "IN/walk.bvh", "-o", "OUT", "--mesh", "auto"], "walk.gltf", (".glb", ".usda")),
    (["convert", "IN/walk.fbx", "OUT"], "walk.usda", (".bvh", ".glb")),
    (["retarget", "IN/walk.bvh", "--to", "IN/t.bvh", "-o", "OUT"], "walk.glb", (".bvh",)),
    (["build", "IN", "-o", "OUT"], "walk.db", (".npz",)),
    (["lmm", "train", "--db", "IN/db.npz", "-o", "OUT"], "model.pt", (".npz",)),
    (["vr", "train", "IN", "-o", "OUT"], "vr.pkl", (".npz",)),
    (["vr", "train", "IN", "-o", "vr.npz", "--plot", "OUT"], "loss.gif", (".png", ".svg", ".pdf")),
    (["tune", "--db", "IN/db.npz", "--scenarios", "IN", "--trials", "1", "-o", "OUT"], "tuned.json", (".toml",)),
    (["bench", "crowd", "--db", "IN/db.npz", "--plot", "OUT"], "crowd.jpg", (".png", ".svg", ".pdf")),
]


@pytest.mark.parametrize("args, name, accepted", REFUSED, ids=[f"{a[0]}-{n}" for a, n, _ in REFUSED])
def test_an_unknown_extension_is_refused_before_any_input_is_read(args, name, accepted, tmp_path, capsys,
                                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = [a.replace("IN", str(tmp_path / "missing")) if a != "OUT" else str(tmp_path / "out" / name) for a in args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    got = name.rsplit(".", 1)[1] if "." in name else None
    assert err.count("\n") == 1 and "Traceback" not in err and name in err, err
    assert (f".{got} is none of them" if got else "no extension is none of them") in err, err
    assert all(a in err for a in accepted), err
    assert list(tmp_path.iterdir()) == []                   # nothing written, not even the folder


def test_export_writes_the_format_its_extension_names(walk_bvh, tmp_path):
    assert main(["export", str(walk_bvh), "-o", str(tmp_path / "copy.bvh")]) == 0
    src, copy = read_bvh(walk_bvh), read_bvh(tmp_path / "copy.bvh")
    assert copy.fps == src.fps and copy.num_frames == src.num_frames
    assert np.abs(copy.global_transforms()[0] - src.global_transforms()[0]).max() < 1e-5
    assert main(["export", str(walk_bvh), "-o", str(tmp_path / "walk.GLB")]) == 0
    assert (tmp_path / "walk.GLB").read_bytes()[:4] == b"glTF"
    assert main(["export", str(walk_bvh), "-o", str(tmp_path / "walk.usda")]) == 0
    assert (tmp_path / "walk.usda").read_text().startswith("#usda 1.0")
    assert main(["export", str(walk_bvh), "-o", str(tmp_path / "walk.usdc")]) == 0
    assert (tmp_path / "walk.usdc").read_bytes()[:8] == b"PXR-USDC"


def test_export_usage_errors_name_what_does_not_fit(walk_bvh, tmp_path, capsys):
    assert main(["export", str(walk_bvh), "-o", str(tmp_path / "walk.bvh"), "--mesh", "auto"]) == 2
    assert "a BVH holds no mesh" in capsys.readouterr().err
    assert main(["export", str(walk_bvh), str(walk_bvh), "-o", str(tmp_path / "two.glb")]) == 2
    assert "2 motions make one USD stage" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["walk.usda", "walk.glb", "walk.BVH"])
def test_synth_refuses_an_output_folder_named_like_a_motion_file(name, tmp_path, capsys):
    out = tmp_path / name
    assert main(["synth", "--scenario", str(tmp_path / "missing.json"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out {out}: synth writes a folder" in err and "motionmatch export" in err, err
    assert list(tmp_path.iterdir()) == []
