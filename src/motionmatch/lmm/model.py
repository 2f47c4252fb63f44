"""The learned motion matching model file: three small networks as plain arrays (Holden et al. 2020).

- decompressor: (x, z) -> pose vector y (layout below), x the normalized feature vector, z the latent;
- stepper: (x, z) -> (dx/dt, dz/dt), how both move on over time;
- projector: normalized query -> (x, z) of the nearest database frame.

The file is an uncompressed .npz of float32 arrays plus a JSON header with the format version, the
feature schema, the skeleton and a fingerprint of both, so a model is only ever used with a database
(and runtime) of the same skeleton and schema. Nothing here needs the training framework.

Pose vector layout (K = J - 1 joints below the simulation bone, all local to the parent, metres, seconds):
`positions (K*3) | rotations as two matrix columns (K*6) | velocities (K*3) | angular velocities (K*3) |
root velocity (3) | root angular velocity (3) | contacts (2)`. The root entries are the simulation bone's
motion in its own frame (what the runtime integrates); contacts are 0..1 (left, right).
"""
from __future__ import annotations

import hashlib
import json
import zipfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from ..files.input_bounds import check_npz, parse_json
from ..files.atomic_file import replacing
from ..posedb.features import FeatureError, schema_from_dict

FORMAT_VERSION = 1
NETWORKS = ("decompressor", "stepper", "projector")
ACTIVATIONS = ("relu", "elu")


MAX_PARAMETER = 1e6     # trained weights and statistics are far smaller; 1e38 is damage
MAX_LAYERS = 64
# A feature scale is a channel's spread over the database divided by its weight (at most 10): the jlpm22
# database's run from 0.19 (foot positions, m) to 1.46 (foot velocities, m/s), so 0.019 at the largest
# weight. Below this bound a query's normalized values reach thousands and the networks answer garbage.
MIN_FEATURE_SCALE = 1e-4
MAX_JOINT_NAME_CHARS = 256
MAX_JOINTS = 65536


class ModelError(ValueError):
    """A model file that cannot be read or does not fit the database; the message names the file."""


@dataclass
class Network:
    """A fully connected network: hidden layers with one activation, then a linear output layer.

    Inputs are standardized with (in_mean, in_std) and outputs de-standardized with (out_mean, out_std),
    so the weights only ever see unit-scale numbers."""

    weights: list[np.ndarray]     # (in, out) float32 per layer
    biases: list[np.ndarray]      # (out,) float32 per layer
    activation: str               # "relu" | "elu"
    in_mean: np.ndarray
    in_std: np.ndarray
    out_mean: np.ndarray
    out_std: np.ndarray

    @property
    def inputs(self) -> int:
        return self.weights[0].shape[0]

    @property
    def outputs(self) -> int:
        return self.weights[-1].shape[1]

    @property
    def nbytes(self) -> int:
        arrays = self.weights + self.biases + [self.in_mean, self.in_std, self.out_mean, self.out_std]
        return int(sum(a.nbytes for a in arrays))

    @cached_property
    def kernel_args(self) -> tuple:
        """The arrays as inference.forward takes them: (weights, biases, in_mean, in_std, out_mean,
        out_std, activation code 1 ReLU / 2 ELU), contiguous float32."""
        c = lambda a: np.ascontiguousarray(a, dtype=np.float32)
        return (tuple(c(w) for w in self.weights), tuple(c(b) for b in self.biases), c(self.in_mean),
                c(self.in_std), c(self.out_mean), c(self.out_std), ACTIVATIONS.index(self.activation) + 1)


@dataclass
class LearnedModel:
    """Everything a learned character needs instead of the pose database."""

    joint_names: list[str]
    parents: np.ndarray            # (J,) int64, joint 0 the simulation bone
    fps: float
    schema: dict                   # the database's feature schema (FeatureSchema.to_dict())
    fingerprint: str               # database_fingerprint() of the database it was trained on
    feature_offset: np.ndarray     # (F,) x = (raw - feature_offset) / feature_scale
    feature_scale: np.ndarray      # (F,)
    latent_size: int
    decompressor: Network
    stepper: Network
    projector: Network
    info: dict = field(default_factory=dict)   # training record: iterations, seconds, final losses, sizes

    @property
    def num_joints(self) -> int:
        return len(self.joint_names)

    @property
    def num_features(self) -> int:
        return len(self.feature_offset)

    @property
    def nbytes(self) -> int:
        """Bytes of all arrays a runtime holds for this model."""
        return sum(n.nbytes for n in (self.decompressor, self.stepper, self.projector)) + \
            self.feature_offset.nbytes + self.feature_scale.nbytes + self.parents.nbytes


def pose_layout(num_joints: int) -> dict[str, slice]:
    """Slices of the pose vector y (see the module docstring) for a skeleton of num_joints joints."""
    k = num_joints - 1
    sizes = (("positions", 3 * k), ("rotations", 6 * k), ("velocities", 3 * k), ("angular_velocities", 3 * k),
             ("root_velocity", 3), ("root_angular_velocity", 3), ("contacts", 2))
    out, i = {}, 0
    for name, n in sizes:
        out[name] = slice(i, i + n)
        i += n
    return out


def pose_size(num_joints: int) -> int:
    return pose_layout(num_joints)["contacts"].stop


def _schema_structure(schema: dict) -> list:
    # Weights are left out: they change the normalization the model stores, not what x means.
    return [{k: v for k, v in c.items() if k != "weight"} for c in schema["channel"]]


def fingerprint(joint_names, parents, schema: dict, fps: float) -> str:
    """A short hash of what a model must share with a database: joints, hierarchy, feature channels, rate."""
    doc = {"joints": list(joint_names), "parents": [int(p) for p in parents],
           "features": _schema_structure(schema), "fps": float(fps)}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def database_fingerprint(db) -> str:
    return fingerprint(db.skeleton.names, db.skeleton.parents, db.features.schema.to_dict(), db.fps)


def check_model_fits(model: LearnedModel, db, model_name: str = "model") -> None:
    """Raise ModelError when the model was trained for another skeleton, feature schema or frame rate."""
    if model.fingerprint == database_fingerprint(db):
        return
    why = []
    if list(model.joint_names) != list(db.skeleton.names) or \
            not np.array_equal(model.parents, np.asarray(db.skeleton.parents)):
        why.append(f"skeleton differs ({model.num_joints} joints {model.joint_names[:3]}... vs "
                   f"{db.num_joints} joints {db.skeleton.names[:3]}...)")
    if _schema_structure(model.schema) != _schema_structure(db.features.schema.to_dict()):
        why.append(f"feature schema differs (channels {[c['name'] for c in model.schema['channel']]} vs "
                   f"{db.features.schema.names})")
    if float(model.fps) != float(db.fps):
        why.append(f"frame rate differs ({model.fps:g} vs {db.fps:g} fps)")
    raise ModelError(f"{model_name} does not fit the database: {'; '.join(why) or 'fingerprint differs'}; "
                     f"train one for it with `motionmatch lmm train --db DB -o MODEL.npz`")


# ---------------------------------------------------------------------------------------------
# Saving and loading

def _network_arrays(name: str, net: Network) -> dict[str, np.ndarray]:
    out = {}
    for i, (w, b) in enumerate(zip(net.weights, net.biases)):
        out[f"{name}.w{i}"] = np.asarray(w, dtype=np.float32)
        out[f"{name}.b{i}"] = np.asarray(b, dtype=np.float32)
    for k in ("in_mean", "in_std", "out_mean", "out_std"):
        out[f"{name}.{k}"] = np.asarray(getattr(net, k), dtype=np.float32)
    return out


def save_model(model: LearnedModel, path) -> int:
    """Write the model atomically as .npz; returns its size in bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {
        "format_version": FORMAT_VERSION, "kind": "motionmatch-lmm", "joint_names": list(model.joint_names),
        "fps": float(model.fps), "schema": model.schema, "fingerprint": model.fingerprint,
        "latent_size": int(model.latent_size), "info": model.info,
        "layers": {n: len(getattr(model, n).weights) for n in NETWORKS},
        "activations": {n: getattr(model, n).activation for n in NETWORKS},
    }
    arrays = {"header": np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
              "parents": np.asarray(model.parents, dtype=np.int64),
              "feature_offset": np.asarray(model.feature_offset, dtype=np.float64),
              "feature_scale": np.asarray(model.feature_scale, dtype=np.float64)}
    for n in NETWORKS:
        arrays.update(_network_arrays(n, getattr(model, n)))
    with replacing(path) as f:
        np.savez(f, **arrays)
    return path.stat().st_size


def _read_network(z, name: str, layers: int, activation: str, where: str) -> Network:
    if activation not in ACTIVATIONS:
        raise ModelError(f"{where}: {name} activation {activation!r}, expected one of {ACTIVATIONS}")
    if not 1 <= layers <= MAX_LAYERS:
        raise ModelError(f"{where}: {name} has {layers} layers, expected 1 to {MAX_LAYERS}")
    keys = [f"{name}.w{i}" for i in range(layers)] + [f"{name}.b{i}" for i in range(layers)]
    keys += [f"{name}.{k}" for k in ("in_mean", "in_std", "out_mean", "out_std")]
    missing = [k for k in keys if k not in z]
    if missing:
        raise ModelError(f"{where}: missing array {missing[0]}")
    wrong = [k for k in keys if z[k].dtype.kind != "f"]
    if wrong:
        raise ModelError(f"{where}: array {wrong[0]} holds {z[wrong[0]].dtype}, not floats")
    ws = [np.asarray(z[f"{name}.w{i}"], dtype=np.float32) for i in range(layers)]
    bs = [np.asarray(z[f"{name}.b{i}"], dtype=np.float32) for i in range(layers)]
    stats = {k: np.asarray(z[f"{name}.{k}"], dtype=np.float32) for k in ("in_mean", "in_std", "out_mean", "out_std")}
    for i, (w, b) in enumerate(zip(ws, bs)):
        if w.ndim != 2 or b.shape != (w.shape[1],) or (i and w.shape[0] != ws[i - 1].shape[1]):
            raise ModelError(f"{where}: {name} layer {i} has inconsistent shapes {w.shape} / {b.shape}")
    net = Network(ws, bs, activation, **stats)
    if stats["in_mean"].shape != (net.inputs,) or stats["in_std"].shape != (net.inputs,) or \
            stats["out_mean"].shape != (net.outputs,) or stats["out_std"].shape != (net.outputs,):
        raise ModelError(f"{where}: {name} normalization arrays do not match its layer sizes")
    for a in ws + bs + list(stats.values()):
        if not np.all(np.isfinite(a)):
            raise ModelError(f"{where}: {name} holds NaN or infinite values (a diverged or damaged model)")
        if np.abs(a).max(initial=0) > MAX_PARAMETER:
            raise ModelError(f"{where}: {name} holds values beyond +-{MAX_PARAMETER:g} (a diverged or damaged model)")
    # Inputs are divided by their std; outputs only multiplied (0: a constant output, e.g. dead contacts).
    if np.any(stats["in_std"] <= 0):
        raise ModelError(f"{where}: {name} input normalization has a zero or negative standard deviation")
    if np.any(stats["out_std"] < 0):
        raise ModelError(f"{where}: {name} output normalization has a negative standard deviation")
    return net


def load_model(path) -> LearnedModel:
    """Load and validate a model written by save_model; errors name the file and what is wrong."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such model (train one with `motionmatch lmm train --db DB -o {path}`)")
    where = str(path)
    try:
        check_npz(path, ModelError)       # sizes from the zip directory first: no zip bomb is inflated
    except ModelError as e:
        raise ModelError(f"{where}: not a motionmatch learned model ({str(e).removeprefix(where + ': ')})") from None
    try:
        with np.load(path, allow_pickle=False) as npz:
            z = {k: npz[k] for k in npz.files}
        raw = z["header"]
        if raw.dtype != np.uint8 or raw.ndim != 1:
            raise ValueError("the header is not JSON bytes")
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, UnicodeDecodeError, EOFError) as e:
        raise ModelError(f"{where}: not a motionmatch learned model ({type(e).__name__}: {e})") from None
    header = parse_json(raw.tobytes(), ModelError, f"{where}: header")
    if not isinstance(header, dict) or header.get("kind") != "motionmatch-lmm":
        raise ModelError(f"{where}: not a motionmatch learned model (no lmm header)")
    ver = header.get("format_version")
    if type(ver) is not int or ver != FORMAT_VERSION:    # true == 1 in Python; a version is an integer
        raise ModelError(f"{where}: model format version {ver}, this motionmatch reads version {FORMAT_VERSION}; "
                         f"retrain it with `motionmatch lmm train`")
    for key, kind in (("latent_size", int), ("fps", (int, float)), ("layers", dict), ("activations", dict)):
        if isinstance(header.get(key), bool) or not isinstance(header.get(key), kind):
            raise ModelError(f"{where}: header field {key}: missing or of the wrong type")
    if any(type(header["layers"].get(n)) is not int for n in NETWORKS):
        raise ModelError(f"{where}: header field layers: expected an integer per network ({', '.join(NETWORKS)})")
    _check_header_fields(header, where)
    try:
        names, schema, latent = header["joint_names"], header["schema"], header["latent_size"]
        nets = {n: _read_network(z, n, header["layers"][n], header["activations"][n], where) for n in NETWORKS}
        model = LearnedModel(joint_names=names, parents=np.asarray(z["parents"], dtype=np.int64),
                             fps=float(header["fps"]), schema=schema, fingerprint=header["fingerprint"],
                             feature_offset=np.asarray(z["feature_offset"], dtype=np.float64),
                             feature_scale=np.asarray(z["feature_scale"], dtype=np.float64),
                             latent_size=latent, info=header.get("info", {}), **nets)
    except (KeyError, TypeError, ValueError, OverflowError, IndexError) as e:
        raise ModelError(f"{where}: header or arrays incomplete or of the wrong kind ({type(e).__name__}: {e})") from None
    for name in ("feature_offset", "feature_scale"):
        a = getattr(model, name)
        if not np.all(np.isfinite(a)) or np.abs(a).max(initial=0) > MAX_PARAMETER:
            raise ModelError(f"{where}: {name} holds NaN, infinite values or values beyond +-{MAX_PARAMETER:g}")
    if model.feature_scale.min(initial=MAX_PARAMETER) < MIN_FEATURE_SCALE:
        raise ModelError(f"{where}: feature_scale: {model.feature_scale.min():g} is outside [{MIN_FEATURE_SCALE:g}, "
                         f"{MAX_PARAMETER:g}] (a feature channel's spread over the database divided by its weight)")
    _check_shapes(model, where)
    return model


def _check_header_fields(header: dict, where: str) -> None:
    """joint_names, schema, fingerprint and info of the types the model needs (before anything reads them)."""
    names = header.get("joint_names")
    if not isinstance(names, list) or not 0 < len(names) <= MAX_JOINTS or not all(
            isinstance(n, str) and 0 < len(n) <= MAX_JOINT_NAME_CHARS for n in names):
        raise ModelError(f"{where}: header field joint_names: expected a list of 1 to {MAX_JOINTS} joint names, "
                         f"strings of 1 to {MAX_JOINT_NAME_CHARS} characters")
    try:
        schema_from_dict(header.get("schema"))
    except FeatureError as e:
        raise ModelError(f"{where}: header field schema: {str(e).removeprefix('schema: ')}") from None
    if not isinstance(header.get("fingerprint"), str):
        raise ModelError(f"{where}: header field fingerprint: expected a string")
    if not isinstance(header.get("info", {}), dict):
        raise ModelError(f"{where}: header field info: expected a table")


def _check_shapes(m: LearnedModel, where: str) -> None:
    f, zs, y = m.num_features, m.latent_size, pose_size(m.num_joints)
    expect = {"decompressor": (f + zs, y), "stepper": (f + zs, f + zs), "projector": (f, f + zs)}
    for n, (i, o) in expect.items():
        net = getattr(m, n)
        if (net.inputs, net.outputs) != (i, o):
            raise ModelError(f"{where}: {n} maps {net.inputs} -> {net.outputs} values, expected {i} -> {o} "
                             f"for {m.num_joints} joints, {f} features and a {zs}-d latent")
    if len(m.parents) != m.num_joints or m.feature_scale.shape != (f,) or np.any(m.feature_scale <= 0):
        raise ModelError(f"{where}: skeleton or feature normalization arrays are inconsistent")
    if m.fingerprint != fingerprint(m.joint_names, m.parents, m.schema, m.fps):
        raise ModelError(f"{where}: its fingerprint does not match its own skeleton and schema (damaged file)")
