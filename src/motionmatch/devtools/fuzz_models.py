"""Hostile-input campaign for learned model files: damaged copies of a small random LMM model fitting the
database (`--lmm`) and of a small random VR orientation model (`--vr-model`): absurd or non-finite
weights and statistics, versions of the wrong type, pickled members, zip bombs, truncated files, .npy
headers declaring shapes of terabytes, networks of the wrong output width or depth, LMM headers whose
schema or joint names are of the wrong kind, feature scales of 1e-30. Every copy must be refused with an
error naming the file.
"""
from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
from ..lmm.model import LearnedModel, Network, database_fingerprint, pose_size
from ..lmm.model import save_model
from ..vr.orientation import NUM_NETWORK_INPUTS, OrientationNetwork, save_networks
from .fuzz import Outcome, classify
from ..lmm.model import ModelError
from ..runtime.learned import learned_model
from ..vr.orientation import load_networks

ZIP_BOMB_BYTES = 300 << 20      # beyond the 256 MB member bound, a few hundred kB compressed


def random_lmm(db, hidden: int = 16, latent: int = 8, seed: int = 0):
    """A LearnedModel of random small networks that fits db (its fingerprint, feature and pose sizes)."""
    rng = np.random.default_rng(seed)
    F, J = db.features.normalized.shape[1], db.num_joints

    def net(i, o):
        ws = [rng.normal(0, 0.1, (i, hidden)).astype(np.float32), rng.normal(0, 0.1, (hidden, o)).astype(np.float32)]
        return Network(ws, [np.zeros(hidden, np.float32), np.zeros(o, np.float32)], "relu", np.zeros(i, np.float32),
                       np.ones(i, np.float32), np.zeros(o, np.float32), np.ones(o, np.float32))
    return LearnedModel(joint_names=list(db.skeleton.names), parents=np.asarray(db.skeleton.parents, np.int64),
                        fps=float(db.fps), schema=db.features.schema.to_dict(), fingerprint=database_fingerprint(db),
                        feature_offset=np.zeros(F), feature_scale=np.ones(F), latent_size=latent,
                        decompressor=net(F + latent, pose_size(J)), stepper=net(F + latent, F + latent),
                        projector=net(F, F + latent))


def _members(path) -> dict:
    with np.load(path, allow_pickle=False) as z:
        return {k: np.array(z[k]) for k in z.files}


def _write(path, members: dict) -> None:
    with open(path, "wb") as fh:
        np.savez(fh, **members)


def _zip_bomb(path, members: dict, name: str) -> None:
    """The members plus one deflated member of zeros that inflates to ZIP_BOMB_BYTES."""
    _write(path, members)
    header = np.lib.format.header_data_from_array_1_0(np.zeros(1, np.uint8))
    header["shape"] = (ZIP_BOMB_BYTES,)
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED, compresslevel=1) as z, z.open(f"{name}.npy", "w", force_zip64=True) as f:
        f.write(buf.getvalue())
        chunk = bytes(16 << 20)
        for _ in range(ZIP_BOMB_BYTES // len(chunk)):
            f.write(chunk)


FORGED_SHAPE = (10 ** 7, 10 ** 7)     # 364 TiB of float32 from a header of a few dozen bytes


def _forged_header(path, members: dict, name: str, shape: tuple = FORGED_SHAPE) -> None:
    """The members, with member `name`'s .npy header declaring `shape` over its own few bytes of data."""
    _write(path, {k: v for k, v in members.items() if k != name})
    a = np.ascontiguousarray(members[name])
    header = np.lib.format.header_data_from_array_1_0(a)
    header["shape"] = shape
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    with zipfile.ZipFile(path, "a") as z:
        z.writestr(f"{name}.npy", buf.getvalue() + a.tobytes())


def damaged_models(db, out_dir, zip_bombs: bool = True) -> list[tuple[str, Path, str]]:
    """Write damaged copies of a random LMM model and a random VR model: [(damage, file, 'lmm' | 'vr')];
    zip_bombs=False leaves out the two zip bombs (seconds of deflating each)."""
    out_dir = Path(out_dir)
    save_model(random_lmm(db), out_dir / "lmm.npz")
    lmm = _members(out_dir / "lmm.npz")
    header = json.loads(bytes(lmm["header"]).decode())
    rng = np.random.default_rng(1)
    save_networks(out_dir / "vr.npz", {"network": OrientationNetwork(
        [rng.normal(0, 0.1, (NUM_NETWORK_INPUTS, 16)), rng.normal(0, 0.1, (16, 2))], [np.zeros(16), np.zeros(2)],
        np.zeros(NUM_NETWORK_INPUTS), np.ones(NUM_NETWORK_INPUTS), 4)})
    vr = _members(out_dir / "vr.npz")

    def h(**kw):
        return {**lmm, "header": np.frombuffer(json.dumps({**header, **kw}).encode(), np.uint8)}

    def m(members, **kw):
        return {**members, **kw}

    w0 = lmm["stepper.w0"]
    lmm_cases = [
        ("weights 1e38", m(lmm, **{"stepper.w0": np.full_like(w0, 1e38)})),
        ("weights NaN", m(lmm, **{"decompressor.w1": np.full_like(lmm["decompressor.w1"], np.nan)})),
        ("bias inf", m(lmm, **{"projector.b0": np.full_like(lmm["projector.b0"], np.inf)})),
        ("in_std zero", m(lmm, **{"stepper.in_std": np.zeros_like(lmm["stepper.in_std"])})),
        ("feature_offset NaN", m(lmm, feature_offset=np.full_like(lmm["feature_offset"], np.nan))),
        ("feature_scale inf", m(lmm, feature_scale=np.full_like(lmm["feature_scale"], np.inf))),
        ("feature_scale 1e300", m(lmm, feature_scale=np.full_like(lmm["feature_scale"], 1e300))),
        ("weights object", m(lmm, **{"stepper.w0": np.array([None, 1], dtype=object)})),
        ("weights strings", m(lmm, **{"stepper.w0": w0.astype("U8")})),
        ("version true", h(format_version=True)),
        ("version '1'", h(format_version="1")),
        ("version 1.0", h(format_version=1.0)),
        ("version 400 digits", {**lmm, "header": np.frombuffer(json.dumps(header).replace(
            '"format_version": 1', '"format_version": ' + "9" * 400).encode(), np.uint8)}),
        ("header deep", {**lmm, "header": np.frombuffer(b"[" * 5000 + b"]" * 5000, np.uint8)}),
        ("header not JSON", {**lmm, "header": np.frombuffer(b"\xff\xfe", np.uint8)}),
        ("header float array", {**lmm, "header": np.zeros(4)}),
        ("latent string", h(latent_size="8")),
        ("layers negative", h(layers={**header["layers"], "stepper": -1})),
        ("layers huge", h(layers={**header["layers"], "stepper": 10 ** 12})),
        ("activation bogus", h(activations={**header["activations"], "stepper": "gelu"})),
        ("fps NaN string", h(fps="nan")),
        ("member missing", {k: v for k, v in lmm.items() if k != "projector.w1"}),
        ("schema a list", h(schema=[1, 2])),
        ("schema a string", h(schema="walk")),
        ("schema channels not tables", h(schema={"channel": ["position", 3]})),
        ("schema offsets a number", h(schema={"channel": [{**header["schema"]["channel"][0], "offsets": 5}]})),
        ("joint names numbers", h(joint_names=list(range(len(header["joint_names"]))))),
        ("joint name 1 MB", h(joint_names=["x" * (1 << 20)] + header["joint_names"][1:])),
        ("fingerprint a number", h(fingerprint=5)),
        ("info a list", h(info=[1])),
        ("feature_scale 1e-30", m(lmm, feature_scale=np.full_like(lmm["feature_scale"], 1e-30))),
        ("feature_scale negative", m(lmm, feature_scale=-lmm["feature_scale"])),
    ]
    vr_cases = [
        ("version true", m(vr, version=np.array(True))),
        ("version '1'", m(vr, version=np.array("1"))),
        ("version 1.0", m(vr, version=np.array(1.0))),
        ("version 2", m(vr, version=np.array(2))),
        ("weights 1e38", m(vr, **{"network/w0": np.full_like(vr["network/w0"], 1e38)})),
        ("weights NaN", m(vr, **{"network/w1": np.full_like(vr["network/w1"], np.nan)})),
        ("input_std zero", m(vr, **{"network/input_std": np.zeros_like(vr["network/input_std"])})),
        ("input_mean inf", m(vr, **{"network/input_mean": np.full_like(vr["network/input_mean"], np.inf)})),
        ("rollout 0", m(vr, **{"network/rollout": np.array(0)})),
        ("w1 wrong shape", m(vr, **{"network/w1": np.zeros((7, 2))})),
        ("bias wrong shape", m(vr, **{"network/b0": np.zeros(3)})),
        ("weights object", m(vr, **{"network/w0": np.array([None], dtype=object)})),
        ("weights bool", m(vr, **{"network/w0": vr["network/w0"] > 0})),
        ("missing b1", {k: v for k, v in vr.items() if k != "network/b1"}),
        ("last layer 1 output", m(vr, **{"network/w1": vr["network/w1"][:, :1], "network/b1": vr["network/b1"][:1]})),
        ("last layer 3 outputs", m(vr, **{"network/w1": np.concatenate([vr["network/w1"]] * 2, 1)[:, :3],
                                         "network/b1": np.zeros(3, np.float32)})),
        ("100 layers", m(vr, **{f"network/w{k}": np.zeros((2, 2), np.float32) for k in range(2, 100)})),
    ]
    forged = [("lmm", lmm, "stepper.w0"), ("lmm", lmm, "feature_scale"), ("vr", vr, "network/w0"),
              ("vr", vr, "network/input_std")]
    files = []
    for kind, cases, members in (("lmm", lmm_cases, lmm), ("vr", vr_cases, vr)):
        for k, (name, ms) in enumerate(cases):
            f = out_dir / f"{kind}_{k:02d}.npz"
            _write(f, ms)
            files.append((name, f, kind))
        for k, (_, ms, name) in enumerate(x for x in forged if x[0] == kind):
            f = out_dir / f"{kind}_forged_{k}.npz"
            _forged_header(f, ms, name)
            files.append((f"{name} header declares {'x'.join(map(str, FORGED_SHAPE))}", f, kind))
        intact = (out_dir / f"{kind}.npz").read_bytes()
        (out_dir / f"{kind}_truncated.npz").write_bytes(intact[:len(intact) // 2])
        files.append(("truncated", out_dir / f"{kind}_truncated.npz", kind))
        (out_dir / f"{kind}_not_zip.npz").write_bytes(b"\x93NUMPY" + bytes(100))
        files.append(("not a zip", out_dir / f"{kind}_not_zip.npz", kind))
        if zip_bombs:
            _zip_bomb(out_dir / f"{kind}_bomb.npz", members, "bomb")
            files.append((f"zip bomb ({ZIP_BOMB_BYTES >> 20} MB member)", out_dir / f"{kind}_bomb.npz", kind))
    return files


def fuzz_models(db, damaged) -> dict:
    """Load each damaged model through its door: {"LMM models": Outcome, "VR models": Outcome}."""
    report = {"LMM models (--lmm)": Outcome(), "VR models (--vr-model)": Outcome()}
    for name, f, kind in damaged:
        if kind == "lmm":
            classify(report["LMM models (--lmm)"], name, f, True, (ModelError,), lambda: learned_model(db, f))
        else:
            classify(report["VR models (--vr-model)"], name, f, True, (ValueError,), lambda: load_networks(f))
    return report
