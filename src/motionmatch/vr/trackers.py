"""VR tracker streams: a head-mounted display (HMD) and two hand controllers, simulated from motion
capture or read from a file, and the network inputs derived from them (seed 002, section 4.1.1).

A stream holds world poses of the three devices in the order DEVICES at a fixed rate. Device frames:
+Z is the device's forward, +Y its up (an HMD at rest looks along +Z). Units metres and seconds,
quaternions (w, x, y, z), Y up, yaw 0 faces +Z.

Network inputs are expressed in the HMD floor frame: the HMD's forward projected on the floor, world
up and their cross product. Positions are not inputs (body size must not matter): per device the
velocity (3), angular velocity (3, rotation vector per second) and rotation (6: the first two columns
of its matrix, continuous for learning).
"""
from __future__ import annotations

import csv
import fnmatch
import io
import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..motion.animation import Animation
from ..files.input_bounds import finite_number, parse_json, read_bounded
from ..motion.preprocess import hips_forward_axis, resample, simulation_bone
from ..maths.rotations import (quat_abs, quat_from_scaled_angle_axis, quat_from_yaw, quat_inv,
                               quat_mul, quat_mul_inv, quat_normalize, quat_rotate, quat_slerp,
                               quat_to_matrix, quat_to_scaled_angle_axis, quat_unroll, yaw_of_direction)
from ..motion.skeleton import find_roles
from ..io.bvh import read_bvh

MAX_TRACKER_FILE_BYTES = 128 << 20      # an hour at 90 Hz is about 80 MB of CSV
MAX_TRACKER_ROWS = 1_000_000
MAX_TRACKER_SECONDS = 3 * 3600.0        # as a scenario
MAX_SAMPLE_GAP_S = 1.0                  # longer gaps are no stream to resample (a pause, a merged file)
MIN_SAMPLE_GAP_S = 1e-4                 # 10 kHz: no tracker samples faster
MAX_TRACKER_POSITION_M = 1e4
MAX_QUATERNION_COMPONENT = 1e3
DEVICES = ("hmd", "left", "right")
FEATURES_PER_DEVICE = 12
NUM_INPUTS = FEATURES_PER_DEVICE * len(DEVICES)
STREAM_FPS = 60.0
_UP = np.array([0.0, 1.0, 0.0])


class TrackerFileError(ValueError):
    """A tracker file that cannot be used; the message names the file and the field or line."""


@dataclass
class TrackerStream:
    """Device poses over time. positions (F, 3, 3) world metres, rotations (F, 3, 4) world, in the
    order DEVICES; valid (F, 3) False where a device had dropped out (its pose is held); fps."""

    positions: np.ndarray
    rotations: np.ndarray
    valid: np.ndarray
    fps: float
    source: str = ""

    @property
    def num_frames(self) -> int:
        return self.positions.shape[0]


@dataclass
class BodyTruth:
    """Ground truth of a stream simulated from mocap: root_position (F, 3) on the floor and
    facing_yaw (F,) radians of the simulation bone; head, left_hand, right_hand (F, 3) joint positions."""

    root_position: np.ndarray
    facing_yaw: np.ndarray
    head: np.ndarray
    left_hand: np.ndarray
    right_hand: np.ndarray


@dataclass
class TrackerSettings:
    """Device placement and simulated tracking faults.

    hmd_offset: HMD position in the device frame relative to the head joint (m; eyes are above and
    in front of a BVH head joint); hand_offset: controller position relative to the wrist (m);
    position_noise (m) and rotation_noise_deg: Gaussian standard deviations per frame;
    dropout_rate: dropouts per device per second, each freezing the device for dropout_seconds.
    """

    hmd_offset: tuple[float, float, float] = (0.0, 0.10, 0.10)
    hand_offset: tuple[float, float, float] = (0.0, 0.0, 0.0)
    position_noise: float = 0.0
    rotation_noise_deg: float = 0.0
    dropout_rate: float = 0.0
    dropout_seconds: float = 0.25


# ---------------------------------------------------------------------------------------------
# Simulation from motion capture

def device_calibration(anim: Animation, roles: dict[str, int]) -> np.ndarray:
    """Fixed rotations (3, 4) from the head and wrist joint frames to the device frames, measured on
    a reference clip: on average over its frames the devices point where the body faces (the
    right-to-left hip vector crossed with up) with +Y up.

    Rest poses cannot serve (Bandai-Namco's lays every bone along its local X), so calibrate once per
    skeleton on a neutral clip (calibration_reference) and pass the result to simulate_trackers for
    every clip of that skeleton: per-clip offsets would leak each clip's average body facing into the
    controller rotations, and a styled clip (a sad walk looks down) would tilt every device.
    """
    gpos, grot = anim.global_transforms()
    across = gpos[:, roles["left_upper_leg"]] - gpos[:, roles["right_upper_leg"]]
    body = quat_from_yaw(yaw_of_direction(np.cross(across, _UP)))
    joints = [roles["head"], roles["left_hand"], roles["right_hand"]]
    rel = quat_mul(quat_inv(grot[:, joints]), body[:, None])
    rel = np.where((rel * rel[:1]).sum(-1, keepdims=True) < 0, -rel, rel)
    return quat_abs(quat_normalize(rel.mean(0)))


REFERENCE_PATTERNS = ("*walk_normal*", "*locomotion*", "*walk*")


def calibration_reference(path) -> Path:
    """The clip a BVH file's devices are calibrated on: the first (sorted) neutral walk in its folder
    (names matching *walk_normal*, else *locomotion*, else *walk*), else the file itself."""
    path = Path(path)
    names = sorted(f for f in path.parent.iterdir() if f.name.lower().endswith((".bvh", ".bvh.gz")))
    for pattern in REFERENCE_PATTERNS:
        hit = next((f for f in names if fnmatch.fnmatch(f.name, pattern)), None)
        if hit is not None:
            return hit
    return path


def calibrate_file(path, anim: Animation, unit: str = "auto") -> np.ndarray:
    """device_calibration for the clip `anim` read from `path`, measured on calibration_reference(path)
    when that clip has the same skeleton, else on anim."""
    ref_path = calibration_reference(path)
    ref = anim if ref_path == Path(path) else read_bvh(ref_path, unit=unit)
    if ref.skeleton.names != anim.skeleton.names:
        ref = anim
    return device_calibration(ref, find_roles(ref.skeleton.names))


def body_truth(anim: Animation, roles: dict[str, int]) -> BodyTruth:
    """The simulation bone (the body's floor position and facing, as motion/preprocess.py builds it) and
    the joints the devices sit on, for a clip at any rate."""
    gpos, grot = anim.global_transforms()
    axis = hips_forward_axis(gpos, grot, roles)
    scale = anim.fps / 60.0
    sim_pos, sim_rot = simulation_bone(gpos, grot, roles, axis, int(round(31 * scale)) | 1,
                                       int(round(61 * scale)) | 1)
    yaw = yaw_of_direction(quat_rotate(sim_rot, np.array([0.0, 0.0, 1.0])))
    return BodyTruth(sim_pos, yaw, gpos[:, roles["head"]], gpos[:, roles["left_hand"]],
                     gpos[:, roles["right_hand"]])


def simulate_trackers(anim: Animation, settings: TrackerSettings | None = None, rng=None,
                      calibration: np.ndarray | None = None) -> tuple[TrackerStream, BodyTruth]:
    """Simulate the three devices on a clip (resampled to 60 fps first) and return them with the
    ground truth. calibration: device_calibration of the skeleton (default: measured on this clip);
    rng: numpy Generator or seed for noise and dropouts (only used when enabled)."""
    settings = settings or TrackerSettings()
    anim = resample(anim, STREAM_FPS)
    roles = find_roles(anim.skeleton.names)
    calib = device_calibration(anim, roles) if calibration is None else calibration
    gpos, grot = anim.global_transforms()
    joints = [roles["head"], roles["left_hand"], roles["right_hand"]]
    rot = quat_abs(quat_mul(grot[:, joints], calib[None]))
    offsets = np.array([settings.hmd_offset, settings.hand_offset, settings.hand_offset], dtype=np.float64)
    pos = gpos[:, joints] + quat_rotate(rot, offsets[None])
    F = pos.shape[0]
    valid = np.ones((F, 3), dtype=bool)
    if settings.position_noise > 0 or settings.rotation_noise_deg > 0 or settings.dropout_rate > 0:
        rng = np.random.default_rng(rng)
        pos = pos + rng.normal(0.0, settings.position_noise, pos.shape)
        noise = rng.normal(0.0, np.radians(settings.rotation_noise_deg), (F, 3, 3))
        rot = quat_normalize(quat_mul(quat_from_scaled_angle_axis(noise), rot))
        valid = _dropouts(F, settings.dropout_rate, settings.dropout_seconds, rng)
        pos, rot = _hold_invalid(pos, rot, valid)
    stream = TrackerStream(pos, rot, valid, STREAM_FPS, source=anim.source)
    return stream, body_truth(anim, roles)


def mirror_trackers(stream: TrackerStream, truth: BodyTruth | None = None):
    """The stream (and truth) of the mirror-image motion across the YZ plane: x negated, left and right
    swapped; a reflected rotation M R M (M = diag(-1, 1, 1)) is (w, x, -y, -z) and keeps +Z forward."""
    swap = [0, 2, 1]
    refl = np.array([-1.0, 1.0, 1.0])
    st = replace(stream, positions=stream.positions[:, swap] * refl,
                 rotations=stream.rotations[:, swap] * np.array([1.0, 1.0, -1.0, -1.0]),
                 valid=stream.valid[:, swap])
    if truth is None:
        return st, None
    return st, BodyTruth(truth.root_position * refl, -truth.facing_yaw, truth.head * refl,
                         truth.right_hand * refl, truth.left_hand * refl)


def _dropouts(frames: int, rate: float, seconds: float, rng) -> np.ndarray:
    valid = np.ones((frames, 3), dtype=bool)
    if rate <= 0:
        return valid
    length = max(1, int(round(seconds * STREAM_FPS)))
    starts = rng.random((frames, 3)) < rate / STREAM_FPS
    for f, d in zip(*np.nonzero(starts)):
        valid[f:f + length, d] = False
    return valid


def _hold_invalid(pos, rot, valid):
    """A lost device reports its last tracked pose, as VR runtimes do (before its first tracked
    frame, that frame's pose)."""
    F = pos.shape[0]
    idx = np.maximum.accumulate(np.where(valid, np.arange(F)[:, None], -1), axis=0)
    idx = np.where(idx < 0, np.argmax(valid, axis=0)[None], idx)
    d = np.arange(valid.shape[1])[None]
    return pos[idx, d], rot[idx, d]


# ---------------------------------------------------------------------------------------------
# Network inputs

def hmd_yaw(stream: TrackerStream) -> np.ndarray:
    """Yaw (F,) radians of the HMD's forward projected on the floor (the usual, naive body facing)."""
    return yaw_of_direction(quat_rotate(stream.rotations[:, 0], np.array([0.0, 0.0, 1.0])))


def device_velocities(stream: TrackerStream) -> tuple[np.ndarray, np.ndarray]:
    """World velocities (F, 3, 3) m/s and angular velocities (F, 3, 3) rad/s by backward differences
    (only the past is known at run time); frame 0 repeats frame 1."""
    F = stream.num_frames
    vel = np.zeros_like(stream.positions)
    ang = np.zeros_like(stream.positions)
    if F > 1:
        vel[1:] = np.diff(stream.positions, axis=0) * stream.fps
        ang[1:] = quat_to_scaled_angle_axis(quat_mul_inv(stream.rotations[1:], stream.rotations[:-1])) * stream.fps
        vel[0], ang[0] = vel[1], ang[1]
    return vel, ang


def device_features(stream: TrackerStream) -> tuple[np.ndarray, np.ndarray]:
    """Network inputs (F, NUM_INPUTS) in the HMD floor frame, and that frame's yaw (F,) radians.

    Per device (in DEVICES order): velocity (3), angular velocity (3), rotation as the first two
    matrix columns (6).
    """
    yaw = hmd_yaw(stream)
    vel, ang = device_velocities(stream)
    return features_from(stream.rotations, vel, ang, yaw), yaw


def features_from(rotations, velocities, angular_velocities, yaw) -> np.ndarray:
    """device_features from world rotations (..., 3, 4), velocities and angular velocities (..., 3, 3)
    and the HMD floor yaw (...,): also usable one frame at a time at run time."""
    inv = quat_from_yaw(-np.asarray(yaw))[..., None, :]
    v = quat_rotate(inv, velocities)
    w = quat_rotate(inv, angular_velocities)
    m = quat_to_matrix(quat_mul(inv, rotations))
    r6 = np.concatenate([m[..., :, 0], m[..., :, 1]], axis=-1)
    per_device = np.concatenate([v, w, r6], axis=-1)
    return per_device.reshape(per_device.shape[:-2] + (NUM_INPUTS,)).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# Files

def read_trackers(path, unit: str = "auto") -> tuple[TrackerStream, BodyTruth | None]:
    """A tracker stream from a file, resampled to 60 fps, with the ground truth when simulated.

    - `.bvh` / `.bvh.gz`: a motion capture clip to simulate the devices from (default settings);
    - `.json`: {"fps": 72} or per-frame "t" (s), and "frames": [{"hmd": {"position": [x, y, z],
      "rotation": [w, x, y, z]}, "left": {...}, "right": {...}}, ...]; a device given as null has
      dropped out and holds its last pose;
    - `.csv`: a header `t` (s) then `{device}_{px,py,pz,qw,qx,qy,qz}` for the three devices; an empty
      device marks a dropout.
    Raises TrackerFileError naming the file and the field or line. Files are bounded (a regular file of at
    most 128 MB, 1,000,000 frames, 3 hours; samples 0.1 ms to 1 s apart; positions within 1e4 m) before
    anything is resampled.
    """
    p = Path(path)
    name = p.name.lower()
    if name.endswith(".bvh") or name.endswith(".bvh.gz"):
        anim = read_bvh(p, unit=unit)
        return simulate_trackers(anim, calibration=calibrate_file(p, anim, unit))
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such tracker file")
    if not (name.endswith(".json") or name.endswith(".csv")):
        raise TrackerFileError(f"{p}: unknown tracker file type (expected .json, .csv or .bvh)")
    raw = read_bounded(p, MAX_TRACKER_FILE_BYTES, TrackerFileError, "tracker file")
    t, pos, rot, valid = _parse_json(p, raw) if name.endswith(".json") else _parse_csv(p, raw)
    return resample_stream(t, pos, rot, valid, source=str(p)), None


def _fill_dropouts(p, pos, rot, valid):
    for d in range(3):
        if not valid[:, d].any():
            raise TrackerFileError(f"{p}: device {DEVICES[d]!r} has no tracked frame")
    return _hold_invalid(pos, rot, valid)


def device_pose(dev, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Position (3,) and rotation (4,) of one device given as {"position": [x, y, z], "rotation":
    [w, x, y, z]} (a tracker file's frame entry or a live tracker message); raises TrackerFileError
    naming the field, `where` being the device's own name (e.g. `frames[12].left`)."""
    if not isinstance(dev, dict):
        raise TrackerFileError(f"{where}: expected an object with position and rotation")
    out = []
    for key, n in (("position", 3), ("rotation", 4)):
        if key not in dev:
            raise TrackerFileError(f"{where}.{key}: missing")
        v = dev[key]
        if not isinstance(v, list) or len(v) != n or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            raise TrackerFileError(f"{where}.{key}: expected {n} numbers, got {json.dumps(v)[:60]}")
        bound = MAX_TRACKER_POSITION_M if key == "position" else MAX_QUATERNION_COMPONENT
        # Compared before converting: an integer too large for a float must not raise OverflowError.
        if not all(-bound <= x <= bound for x in v):
            raise TrackerFileError(f"{where}.{key}: expected finite numbers within +-{bound:g}")
        out.append(np.array(v, dtype=np.float64))
    if np.linalg.norm(out[1]) < 1e-6:
        raise TrackerFileError(f"{where}.rotation: zero quaternion")
    return out[0], out[1]


def _device_pose(p, where: str, dev: dict):
    try:
        _known_keys(dev, ("position", "rotation"), where)
        return device_pose(dev, where)
    except TrackerFileError as exc:
        raise TrackerFileError(f"{p}: {exc}") from None


def _known_keys(d, known: tuple, where: str) -> None:
    """A field the format does not have is refused, not ignored (`"settings": {"alpha": 1e308}` set nothing)."""
    extra = [k for k in d if k not in known] if isinstance(d, dict) else []
    if extra:
        raise TrackerFileError(f"{where}{'.' if where else ''}{str(extra[0])[:60]}: unknown field (known: "
                               f"{', '.join(known)})")


def _parse_json(p: Path, raw: bytes):
    doc = parse_json(raw, TrackerFileError, str(p))
    if not isinstance(doc, dict) or not isinstance(doc.get("frames"), list) or not doc["frames"]:
        raise TrackerFileError(f"{p}: frames: expected a non-empty list of device poses")
    try:
        _known_keys(doc, ("fps", "frames"), "")
    except TrackerFileError as e:
        raise TrackerFileError(f"{p}: {e}") from None
    frames = doc["frames"]
    F = len(frames)
    if F > MAX_TRACKER_ROWS:
        raise TrackerFileError(f"{p}: frames: {F:,} frames, beyond the bound of {MAX_TRACKER_ROWS:,}")
    fps = doc.get("fps")
    if fps is not None:
        fps = finite_number(fps, TrackerFileError, f"{p}: fps", 1.0 / MAX_SAMPLE_GAP_S, 1.0 / MIN_SAMPLE_GAP_S)
    t = np.empty(F)
    pos = np.zeros((F, 3, 3))
    rot = np.zeros((F, 3, 4))
    rot[..., 0] = 1.0
    valid = np.zeros((F, 3), dtype=bool)
    for i, fr in enumerate(frames):
        if not isinstance(fr, dict):
            raise TrackerFileError(f"{p}: frames[{i}]: expected an object")
        try:
            _known_keys(fr, ("t",) + DEVICES, f"frames[{i}]")
        except TrackerFileError as e:
            raise TrackerFileError(f"{p}: {e}") from None
        if fps is None:
            if not isinstance(fr.get("t"), (int, float)):
                raise TrackerFileError(f"{p}: frames[{i}].t: missing time (give \"t\" per frame or a top-level \"fps\")")
            t[i] = finite_number(fr["t"], TrackerFileError, f"{p}: frames[{i}].t", -MAX_TRACKER_SECONDS, MAX_TRACKER_SECONDS)
        else:
            t[i] = i / fps
        for d, name in enumerate(DEVICES):
            if name not in fr:
                raise TrackerFileError(f"{p}: frames[{i}].{name}: missing (use null for a dropout)")
            if fr[name] is None:
                continue
            pos[i, d], rot[i, d] = _device_pose(p, f"frames[{i}].{name}", fr[name])
            valid[i, d] = True
    _check_times(p, t, "frames[{}].t")
    pos, rot = _fill_dropouts(p, pos, rot, valid)
    return t, pos, rot, valid


_CSV_FIELDS = [f"{d}_{c}" for d in DEVICES for c in ("px", "py", "pz", "qw", "qx", "qy", "qz")]


def _parse_csv(p: Path, raw: bytes):
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TrackerFileError(f"{p}: not UTF-8 text (byte {e.start})") from None
    if text.count("\n") > MAX_TRACKER_ROWS + 1:
        raise TrackerFileError(f"{p}: more than {MAX_TRACKER_ROWS:,} rows")
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as e:
        raise TrackerFileError(f"{p}: not CSV: {e}") from None
    if not rows:
        raise TrackerFileError(f"{p}: line 1: empty file (expected a header)")
    header = [h.strip() for h in rows[0]]
    missing = [f for f in ["t"] + _CSV_FIELDS if f not in header]
    if missing:
        raise TrackerFileError(f"{p}: line 1: header lacks {', '.join(missing)}")
    extra = [h for h in header if h not in _CSV_FIELDS and h != "t"]
    if extra:
        raise TrackerFileError(f"{p}: line 1: unknown column {extra[0][:60]!r} (a tracker file holds t and "
                               f"{{hmd,left,right}}_{{px,py,pz,qw,qx,qy,qz}})")
    cols = [header.index(f) for f in ["t"] + _CSV_FIELDS]
    body = [(n, r) for n, r in enumerate(rows[1:], start=2) if any(c.strip() for c in r)]
    if not body:
        raise TrackerFileError(f"{p}: no data rows after the header")
    F = len(body)
    t = np.empty(F)
    pos = np.zeros((F, 3, 3))
    rot = np.zeros((F, 3, 4))
    rot[..., 0] = 1.0
    valid = np.zeros((F, 3), dtype=bool)
    for i, (line, row) in enumerate(body):
        if len(row) < len(header):
            raise TrackerFileError(f"{p}: line {line}: {len(row)} fields, the header has {len(header)}")
        vals = [row[c].strip() for c in cols]
        try:
            t[i] = float(vals[0])
        except ValueError:
            raise TrackerFileError(f"{p}: line {line}: field t: not a number: {vals[0]!r}") from None
        for d, name in enumerate(DEVICES):
            chunk = vals[1 + 7 * d: 8 + 7 * d]
            if all(v == "" for v in chunk):
                continue
            try:
                x = np.array([float(v) for v in chunk])
            except ValueError:
                bad = next(f for f, v in zip(_CSV_FIELDS[7 * d: 7 * d + 7], chunk) if not _is_float(v))
                raise TrackerFileError(f"{p}: line {line}: field {bad}: not a number") from None
            pos[i, d], rot[i, d] = _device_pose(p, f"line {line}: {name}", {"position": x[:3].tolist(),
                                                                            "rotation": x[3:].tolist()})
            valid[i, d] = True
    _check_times(p, t, None, lines=[n for n, _ in body])
    pos, rot = _fill_dropouts(p, pos, rot, valid)
    return t, pos, rot, valid


def _is_float(v: str) -> bool:
    try:
        float(v)
        return True
    except ValueError:
        return False


def _check_times(p, t, field_fmt, lines=None):
    """Times finite, increasing by MIN_SAMPLE_GAP_S to MAX_SAMPLE_GAP_S, spanning at most
    MAX_TRACKER_SECONDS: bounds that hold before resampling allocates a frame per 1/60 s."""
    if not np.all(np.isfinite(t)):
        raise TrackerFileError(f"{p}: time is not finite")
    gaps = np.diff(t)
    bad = np.nonzero((gaps < MIN_SAMPLE_GAP_S) | (gaps > MAX_SAMPLE_GAP_S))[0]
    if len(bad):
        i = int(bad[0]) + 1
        where = field_fmt.format(i) if field_fmt else f"line {lines[i]}: field t"
        raise TrackerFileError(f"{p}: {where}: times must increase by {MIN_SAMPLE_GAP_S:g} to {MAX_SAMPLE_GAP_S:g} s "
                               f"per sample ({t[i - 1]:g} then {t[i]:g})")
    if t[-1] - t[0] > MAX_TRACKER_SECONDS:
        raise TrackerFileError(f"{p}: the stream spans {t[-1] - t[0]:g} s, beyond the bound of {MAX_TRACKER_SECONDS:g} s")


def resample_stream(t, positions, rotations, valid, fps: float = STREAM_FPS, source: str = "") -> TrackerStream:
    """A stream sampled at times t (F,) seconds (any, increasing) resampled to `fps`: linear
    positions, slerp rotations; a new frame is valid when the samples it is interpolated from are."""
    rotations = quat_unroll(quat_normalize(np.asarray(rotations, np.float64)), axis=0)
    t = np.asarray(t, np.float64) - t[0]
    n = int(np.floor(t[-1] * fps + 1e-6)) + 1
    tn = np.arange(n) / fps
    i0 = np.clip(np.searchsorted(t, tn, side="right") - 1, 0, max(len(t) - 2, 0))
    i1 = np.minimum(i0 + 1, len(t) - 1)
    span = np.where(i1 > i0, t[i1] - t[i0], 1.0)
    a = np.clip((tn - t[i0]) / span, 0.0, 1.0)
    pos = positions[i0] + (positions[i1] - positions[i0]) * a[:, None, None]
    rot = quat_slerp(rotations[i0], rotations[i1], a[:, None, None])
    ok = np.where((a < 1e-6)[:, None], valid[i0], np.where((a > 1 - 1e-6)[:, None], valid[i1], valid[i0] & valid[i1]))
    return TrackerStream(pos, quat_abs(rot), ok, fps, source=source)


def write_trackers_json(path, stream: TrackerStream) -> None:
    """Write a stream in the JSON tracker format (read back by read_trackers)."""
    frames = []
    for f in range(stream.num_frames):
        fr = {}
        for d, name in enumerate(DEVICES):
            fr[name] = ({"position": [round(float(x), 6) for x in stream.positions[f, d]],
                         "rotation": [round(float(x), 7) for x in stream.rotations[f, d]]}
                        if stream.valid[f, d] else None)
        frames.append(fr)
    Path(path).write_text(json.dumps({"fps": stream.fps, "frames": frames}))


def slice_stream(stream: TrackerStream, truth: BodyTruth | None, start: int, stop: int):
    """Frames [start, stop) of a stream and its ground truth."""
    s = slice(start, stop)
    st = replace(stream, positions=stream.positions[s], rotations=stream.rotations[s], valid=stream.valid[s])
    if truth is None:
        return st, None
    return st, BodyTruth(*(getattr(truth, k)[s] for k in ("root_position", "facing_yaw", "head", "left_hand",
                                                           "right_hand")))
