"""The body-orientation network (seed 002, section 4.1) at run time, in numpy, and its evaluation.

A feed-forward network (two hidden layers of 32, ReLU) maps the three devices' inputs
(trackers.device_features, in the HMD floor frame) plus the previously predicted body facing to the
body's facing on the floor. Facings are 2-d unit vectors (x, z) = (sin a, cos a) of the angle a from
the HMD's floor forward to the body's forward (positive turns +Z toward +X), so world body yaw =
HMD yaw + a. The first frame of a stream starts from the HMD's forward (a = 0).

Model files (.npz): `version`, per network NAME (`network`, trained with rollouts, and `network_r1`,
the r = 1 baseline) `NAME/w0..w2`, `NAME/b0..b2`, `NAME/input_mean`, `NAME/input_std`, `NAME/rollout`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..files.atomic_file import replacing
from ..files.input_bounds import check_npz

from .trackers import NUM_INPUTS

MODEL_VERSION = 1
NUM_NETWORK_INPUTS = NUM_INPUTS + 2
NETWORK_NAMES = ("network", "network_r1")


@dataclass
class OrientationNetwork:
    """Weights (in, out) and biases of the layers, the input normalization (NUM_NETWORK_INPUTS,)
    and the rollout length r it was trained with."""

    weights: list[np.ndarray]
    biases: list[np.ndarray]
    input_mean: np.ndarray
    input_std: np.ndarray
    rollout: int


def network_step(net: OrientationNetwork, features: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """One prediction: features (B, NUM_INPUTS), previous facing (B, 2) in the current HMD floor frame
    -> facing (B, 2), a unit vector (x, z) in that frame."""
    h = (np.concatenate([features, previous], axis=-1) - net.input_mean) / net.input_std
    last = len(net.weights) - 1
    for i, (w, b) in enumerate(zip(net.weights, net.biases)):
        h = h @ w + b
        if i < last:
            h = np.maximum(h, 0.0)
    return h / np.maximum(np.linalg.norm(h, axis=-1, keepdims=True), 1e-6)


def rotate_facing(d: np.ndarray, angle) -> np.ndarray:
    """A facing (..., 2) as (x, z) = (sin a, cos a) turned to the angle a + angle (radians)."""
    c, s = np.cos(angle), np.sin(angle)
    return np.stack([d[..., 0] * c + d[..., 1] * s, d[..., 1] * c - d[..., 0] * s], axis=-1)


def predict_body_yaw(net: OrientationNetwork, features_list, hmd_yaw_list) -> list[np.ndarray]:
    """Run the network over whole streams (each fed its own previous outputs), several at once.

    features_list: arrays (F_i, NUM_INPUTS); hmd_yaw_list: (F_i,) radians. Returns the predicted world
    body yaw (F_i,) radians per stream.
    """
    n = len(features_list)
    lengths = np.array([len(y) for y in hmd_yaw_list])
    T = int(lengths.max()) if n else 0
    X = np.zeros((T, n, NUM_INPUTS), np.float32)
    H = np.zeros((T + 1, n))
    for i, (x, y) in enumerate(zip(features_list, hmd_yaw_list)):
        X[:len(y), i] = x
        H[:len(y), i] = y
        H[len(y):, i] = y[-1]
    rel = np.zeros((T, n))
    prev = np.tile([0.0, 1.0], (n, 1))
    for t in range(T):
        d = network_step(net, X[t], prev)
        rel[t] = np.arctan2(d[:, 0], d[:, 1])
        prev = rotate_facing(d, H[t] - H[t + 1])
    return [H[:L, i] + rel[:L, i] for i, L in enumerate(lengths)]


def angle_error_deg(a, b) -> np.ndarray:
    """Absolute difference of two yaws (radians), wrapped, in degrees."""
    return np.degrees(np.abs((np.asarray(a) - np.asarray(b) + np.pi) % (2 * np.pi) - np.pi))


def evaluate(networks: dict[str, OrientationNetwork], sequences) -> dict:
    """Mean and standard deviation of the facing error (degrees) over all frames of the sequences
    (dataset.Sequence) for the HMD's forward and each network: the `vr eval --json` document."""
    truth = np.concatenate([s.body_yaw for s in sequences])
    hmd = np.concatenate([s.hmd_yaw for s in sequences])
    out = {"hmd_forward": _stats(angle_error_deg(hmd, truth))}
    for name in ("network_r1", "network"):
        if name in networks:
            pred = predict_body_yaw(networks[name], [s.features for s in sequences],
                                    [s.hmd_yaw for s in sequences])
            out[name] = _stats(angle_error_deg(np.concatenate(pred), truth))
    out["frames"] = int(len(truth))
    return out


def _stats(err: np.ndarray) -> dict:
    return {"mean_deg": round(float(err.mean()), 3), "std_deg": round(float(err.std()), 3)}


def save_networks(path, networks: dict[str, OrientationNetwork], meta: dict | None = None) -> None:
    """Write networks (name -> OrientationNetwork) and string metadata to an .npz model file."""
    arrays = {"version": np.array(MODEL_VERSION)}
    for name, net in networks.items():
        for i, (w, b) in enumerate(zip(net.weights, net.biases)):
            arrays[f"{name}/w{i}"] = np.asarray(w, np.float32)
            arrays[f"{name}/b{i}"] = np.asarray(b, np.float32)
        arrays[f"{name}/input_mean"] = np.asarray(net.input_mean, np.float32)
        arrays[f"{name}/input_std"] = np.asarray(net.input_std, np.float32)
        arrays[f"{name}/rollout"] = np.array(net.rollout)
    for k, v in (meta or {}).items():
        arrays[f"meta/{k}"] = np.array(str(v))
    with replacing(path) as fh:
        np.savez(fh, **arrays)


MAX_PARAMETER = 1e6     # trained weights and statistics are far smaller; 1e38 is damage
MAX_LAYERS = 64         # the trained networks have 3
NUM_OUTPUTS = 2         # the facing (x, z)


def _check_network(p: Path, name: str, net: OrientationNetwork) -> None:
    """Layer shapes chain from NUM_NETWORK_INPUTS to NUM_OUTPUTS, statistics match the inputs, rollout is
    1..10000."""
    if net.weights[0].ndim != 2 or net.weights[0].shape[0] != NUM_NETWORK_INPUTS:
        raise ValueError(f"{p}: field {name}/w0: {net.weights[0].shape} weights, expected {NUM_NETWORK_INPUTS} "
                         f"inputs")
    for i, (w, b) in enumerate(zip(net.weights, net.biases)):
        if w.ndim != 2 or b.shape != (w.shape[1],) or (i and w.shape[0] != net.weights[i - 1].shape[1]):
            raise ValueError(f"{p}: field {name}/w{i}: shapes {w.shape} / {b.shape} do not chain")
    last = len(net.weights) - 1
    if net.weights[last].shape[1] != NUM_OUTPUTS:
        raise ValueError(f"{p}: field {name}/w{last}: the last layer has {net.weights[last].shape[1]} outputs, "
                         f"expected {NUM_OUTPUTS} (the body's facing x, z)")
    if net.input_mean.shape != (NUM_NETWORK_INPUTS,) or net.input_std.shape != (NUM_NETWORK_INPUTS,) \
            or np.any(net.input_std <= 0):
        raise ValueError(f"{p}: field {name}/input_std: expected {NUM_NETWORK_INPUTS} positive values "
                         f"(and as many means)")
    if not 1 <= net.rollout <= 10000:
        raise ValueError(f"{p}: field {name}/rollout: expected an integer in [1, 10000]")


def load_networks(path) -> dict[str, OrientationNetwork]:
    """Read a model file written by save_networks; errors name the file and the missing field."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such model file")
    check_npz(p)          # sizes from the zip directory first: no zip bomb is inflated
    try:
        z = np.load(p, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ValueError(f"{p}: not a model file ({e})") from None
    with z:
        if "version" not in z.files:
            raise ValueError(f"{p}: field version: missing (not a VR orientation model)")
        try:
            version = z["version"]
        except ValueError as e:
            raise ValueError(f"{p}: field version: {e}") from None
        # A version is an integer: `true` and "1" are refused by name, not read as 1.
        if version.ndim or version.dtype.kind not in "iu" or int(version) != MODEL_VERSION:
            raise ValueError(f"{p}: field version: {str(version.tolist())[:40]} ({version.dtype}), this motionmatch "
                             f"reads the integer {MODEL_VERSION}")
        out = {}
        for name in NETWORK_NAMES:
            if f"{name}/w0" not in z.files:
                continue
            layers = sum(1 for k in z.files if k.startswith(f"{name}/w"))
            if layers > MAX_LAYERS:
                raise ValueError(f"{p}: field {name}/w{MAX_LAYERS}: {layers} layers, expected 1 to {MAX_LAYERS}")
            try:
                arrays = {k: z[f"{name}/{k}"] for k in [f"w{i}" for i in range(layers)]
                          + [f"b{i}" for i in range(layers)] + ["input_mean", "input_std", "rollout"]}
            except KeyError as e:
                raise ValueError(f"{p}: field {e.args[0]}: missing") from None
            except ValueError as e:       # an object array (pickle) or a damaged member
                raise ValueError(f"{p}: network {name}: {e}") from None
            for k, a in arrays.items():
                if a.dtype.kind not in ("iu" if k == "rollout" else "fiu"):
                    raise ValueError(f"{p}: field {name}/{k}: {a.dtype} is not a number array")
                if not np.all(np.isfinite(a)) or np.abs(a).max(initial=0) > MAX_PARAMETER:
                    raise ValueError(f"{p}: field {name}/{k}: NaN, infinite values or values beyond "
                                     f"+-{MAX_PARAMETER:g} (a diverged or damaged model)")
            net = OrientationNetwork(
                weights=[arrays[f"w{i}"].astype(np.float64) for i in range(layers)],
                biases=[arrays[f"b{i}"].astype(np.float64) for i in range(layers)],
                input_mean=arrays["input_mean"].astype(np.float64), input_std=arrays["input_std"].astype(np.float64),
                rollout=int(arrays["rollout"]) if arrays["rollout"].ndim == 0 else -1)
            _check_network(p, name, net)
            out[name] = net
    if "network" not in out:
        raise ValueError(f"{p}: field network/w0: missing (no trained network)")
    return out
