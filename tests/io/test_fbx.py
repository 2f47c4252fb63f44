"""FBX without Blender's environment: a clear error naming what to install, from the reader and from
`motionmatch build`; files that are no binary FBX are refused before Blender is asked."""
from __future__ import annotations

import pytest

from motionmatch.cli import main
from motionmatch.io.clips import read_clips
from motionmatch.io.fbx import FBXError


def test_fbx_without_blender_names_the_environment_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MOTIONMATCH_BLENDER_PYTHON", str(tmp_path / "no-blender" / "python"))
    fbx = tmp_path / "take.fbx"
    fbx.write_bytes(b"Kaydara FBX Binary  \x00\x1a\x00" + bytes(64))
    with pytest.raises(FBXError, match=r"take\.fbx: FBX files are read by Blender's Python module.*make blender"):
        read_clips(fbx)
    assert main(["build", str(fbx), "-o", str(tmp_path / "db.npz"), "--quiet", "--strict"]) == 1
    assert "pip install bpy==5.0.1" in capsys.readouterr().err


def test_an_ascii_or_foreign_file_named_fbx_is_refused(tmp_path):
    text = tmp_path / "text.fbx"
    text.write_text("; FBX 7.4.0 project file\n")
    with pytest.raises(FBXError, match=r"text\.fbx: not a binary FBX"):
        read_clips(text)
    with pytest.raises(FBXError, match=r"missing\.fbx: cannot read"):
        read_clips(tmp_path / "missing.fbx")
