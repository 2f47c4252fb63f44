"""Learned model files (`--lmm`) a careless or hostile user hands over: a schema of the wrong kind, feature
scales that make garbage queries, forged array headers. Each is one ModelError naming the file and the
field; the model file of a small random network (devtools/fuzz_models.random_lmm) is the undamaged base."""
from __future__ import annotations

import json

import numpy as np
import pytest

from motionmatch.devtools.fuzz_models import _forged_header, random_lmm
from motionmatch.lmm.model import MIN_FEATURE_SCALE, ModelError, load_model, save_model


@pytest.fixture(scope="module")
def members(jlpm_db, tmp_path_factory):
    path = tmp_path_factory.mktemp("lmm") / "lmm.npz"
    save_model(random_lmm(jlpm_db), path)
    load_model(path)
    with np.load(path) as z:
        return {k: np.array(z[k]) for k in z.files}


def _with_header(members, tmp_path, **kw):
    header = json.loads(bytes(members["header"]).decode())
    header.update(kw)
    path = tmp_path / "m.npz"
    with open(path, "wb") as fh:
        np.savez(fh, **{**members, "header": np.frombuffer(json.dumps(header).encode(), np.uint8)})
    return path


@pytest.mark.parametrize("schema, field", [
    ([1, 2], "schema: expected a table of \\[\\[channel\\]\\] entries, got list"),
    ("walk", "schema: expected a table of \\[\\[channel\\]\\] entries, got str"),
    ({"channel": ["position", 3]}, r"schema: channel\[0\]: expected a table"),
    ({"channel": [{"name": "x", "kind": "trajectory_position", "offsets": 5}]}, r"schema: channel\[0\].offsets \(x\)"),
])
def test_schema_of_the_wrong_kind_names_the_field(members, tmp_path, schema, field):
    with pytest.raises(ModelError, match=rf"m.npz: header field {field}"):
        load_model(_with_header(members, tmp_path, schema=schema))


def test_joint_names_fingerprint_and_info_of_the_wrong_kind(members, tmp_path):
    header = json.loads(bytes(members["header"]).decode())
    long_name = ["x" * 300] + header["joint_names"][1:]
    for kw, field in (({"joint_names": [1, 2]}, "joint_names"), ({"joint_names": long_name}, "joint_names"),
                      ({"fingerprint": 5}, "fingerprint"), ({"info": [1]}, "info")):
        with pytest.raises(ModelError, match=rf"m.npz: header field {field}: expected"):
            load_model(_with_header(members, tmp_path, **kw))


def test_feature_scales_too_small_for_a_query_are_refused(jlpm_db, members, tmp_path):
    # The database's own scales, which a trained model copies, are far inside the bound, even at the
    # largest weight (10).
    assert jlpm_db.features.scale.min() / 10 > 100 * MIN_FEATURE_SCALE
    for value in (1e-30, 1e-5):
        path = tmp_path / "s.npz"
        with open(path, "wb") as fh:
            np.savez(fh, **{**members, "feature_scale": np.full_like(members["feature_scale"], value)})
        with pytest.raises(ModelError, match=rf"s.npz: feature_scale: {value:g} is outside \[0.0001, 1e\+06\]"):
            load_model(path)


def test_a_forged_array_header_is_refused_before_numpy_allocates(members, tmp_path):
    _forged_header(tmp_path / "f.npz", members, "decompressor.w0")
    with pytest.raises(ModelError, match=r"f.npz: not a motionmatch learned model \(member 'decompressor.w0.npy': "
                                         r"its header declares a 10000000x10000000 float32 array"):
        load_model(tmp_path / "f.npz")


def test_synth_with_a_bad_model_is_one_line_and_writes_nothing(members, jlpm_db_path, tmp_path, capsys):
    from motionmatch.cli import main
    (tmp_path / "s.json").write_text(json.dumps({"duration": 1.0, "inputs": [{"t": 0.0, "move": [0, 1]}]}))
    _forged_header(tmp_path / "f.npz", members, "stepper.w0")
    code = main(["synth", "--db", str(jlpm_db_path), "--scenario", str(tmp_path / "s.json"), "--lmm",
                 str(tmp_path / "f.npz"), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "f.npz: not a motionmatch learned model (member 'stepper.w0.npy'" in err
    assert not (tmp_path / "out").exists()
