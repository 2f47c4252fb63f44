"""`build --map` and `retarget --map` given roles no body has (both feet on one joint, every role on the
hips): one line naming the map file, exit 1, nothing written."""
from __future__ import annotations

import pytest

from bvh_fixtures import LAFAN1_NAMES, write_lafan1_bvh
from motionmatch.cli import main


@pytest.mark.parametrize("roles, message", [
    ('left_foot = "LeftFoot"\nright_foot = "LeftFoot"\n', "roles left_foot and right_foot are both joint 'LeftFoot'"),
    ('hips = "LeftToe"\n', "roles hips and left_toe are both joint 'LeftToe'"),
    ('left_foot = "Head"\n', "roles head and left_foot are both joint 'Head'"),
])
def test_build_with_roles_no_body_has_is_refused(tmp_path, capsys, roles, message):
    clip = write_lafan1_bvh(tmp_path / "walk.bvh", frames=40)
    (tmp_path / "map.toml").write_text("[roles]\n" + roles)
    code = main(["build", str(clip), "-o", str(tmp_path / "db.npz"), "--map", str(tmp_path / "map.toml"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err, err
    assert f"--map {tmp_path / 'map.toml'}: {message}" in err
    assert not (tmp_path / "db.npz").exists()


def test_retarget_map_sending_every_role_to_the_hips_is_refused(tmp_path, capsys):
    src = write_lafan1_bvh(tmp_path / "src.bvh")
    joints = "[joints]\n" + "".join(f'{n} = "{n}"\n' for n in LAFAN1_NAMES)
    every = "".join(f'{r} = "Hips"\n' for r in ("hips", "spine", "chest", "head", "left_foot", "right_foot"))
    out = tmp_path / "out.bvh"
    (tmp_path / "ok.toml").write_text(joints)
    assert main(["retarget", str(src), "--to", str(src), "--map", str(tmp_path / "ok.toml"), "-o", str(out)]) == 0
    out.unlink()
    for table in ("target_roles", "source_roles"):
        (tmp_path / "map.toml").write_text(joints + f"[{table}]\n" + every)
        code = main(["retarget", str(src), "--to", str(src), "--map", str(tmp_path / "map.toml"), "-o", str(out)])
        err = capsys.readouterr().err
        assert code == 1 and "Traceback" not in err, err
        assert f"{tmp_path / 'map.toml'}: " in err and "roles hips and spine are both joint 'Hips'" in err
        assert not out.exists()
    (tmp_path / "map.toml").write_text(joints + "[target_roles]\ntail = \"Hips\"\n")
    assert main(["retarget", str(src), "--to", str(src), "--map", str(tmp_path / "map.toml"), "-o", str(out)]) == 1
    assert "[target_roles]: unknown role 'tail'" in capsys.readouterr().err
