"""Training and held-out data for the body-orientation network: which clips, and their tracker
inputs with the true body facing.

Held out from all training and model selection (issue 12): every Bandai-Namco clip of the dataset-1
style `sad` and of the dataset-2 style `youthful`, and the last 25 % of jlpm22 `locomotion_take2.bvh`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..posedb.datapaths import find_data, list_bvh_files
from ..io.bvh import read_bvh
from ..motion.preprocess import tags_from_filename
from ..maths.rotations import quat_from_scaled_angle_axis, quat_mul
from .trackers import (TrackerSettings, calibrate_file, device_features, mirror_trackers,
                       simulate_trackers, slice_stream)

HELD_OUT_STYLES = {"dataset-1": "sad", "dataset-2": "youthful"}
HELD_OUT_TAKE = "locomotion_take2.bvh"
HELD_OUT_TAIL = 0.25
DEFAULT_SETS = ("jlpm22-locomotion", "bandai-namco")


@dataclass
class ClipPart:
    """Frames [start, stop) of a clip as fractions of its length."""

    path: Path
    start: float = 0.0
    stop: float = 1.0


@dataclass
class Sequence:
    """One clip's network inputs (F, NUM_INPUTS) float32, HMD floor yaw (F,) and true body facing
    yaw (F,), radians, at 60 fps."""

    name: str
    features: np.ndarray
    hmd_yaw: np.ndarray
    body_yaw: np.ndarray


def default_files(data_root=None) -> list[Path]:
    """BVH files of both shared sets (jlpm22 locomotion and Bandai-Namco)."""
    return list_bvh_files([find_data(name, data_root) for name in DEFAULT_SETS])


def split_held_out(files) -> tuple[list[ClipPart], list[ClipPart]]:
    """(training parts, held-out parts) of the given files, by the issue's fixed rule."""
    train, held = [], []
    for f in map(Path, files):
        tags = tags_from_filename(f)
        if len(tags) >= 3 and HELD_OUT_STYLES.get(tags[0]) == tags[2]:
            held.append(ClipPart(f))
        elif f.name == HELD_OUT_TAKE:
            train.append(ClipPart(f, 0.0, 1.0 - HELD_OUT_TAIL))
            held.append(ClipPart(f, 1.0 - HELD_OUT_TAIL, 1.0))
        else:
            train.append(ClipPart(f))
    return train, held


def load_sequences(parts: list[ClipPart], settings: TrackerSettings | None = None, mirrored: bool = False,
                   seed: int = 0, progress: bool = True, min_frames: int = 2,
                   attachment_jitter_deg: float = 0.0) -> list[Sequence]:
    """Simulate the trackers on every part (and on its mirror image when `mirrored`, which doubles
    the data and balances left and right). The devices are calibrated once per folder
    (trackers.calibration_reference). attachment_jitter_deg: standard deviation (per axis) of a random
    rotation of each device's attachment per clip, as if every clip were a different person wearing
    and holding the devices a little differently (augmentation). Noise, dropouts and jitter use `seed`."""
    rng = np.random.default_rng(seed)
    calibrations: dict[tuple, np.ndarray] = {}
    out = []
    for part in tqdm(parts, desc="trackers", unit="clip", disable=not progress):
        anim = read_bvh(part.path)
        key = (part.path.parent, tuple(anim.skeleton.names))
        if key not in calibrations:
            calibrations[key] = calibrate_file(part.path, anim)
        calib = calibrations[key]
        if attachment_jitter_deg > 0:
            jitter = rng.normal(0.0, np.radians(attachment_jitter_deg), (3, 3))
            calib = quat_mul(calib, quat_from_scaled_angle_axis(jitter))
        stream, truth = simulate_trackers(anim, settings, rng, calib)
        for stream, truth, suffix in [(stream, truth, "")] + (
                [(*mirror_trackers(stream, truth), " (mirrored)")] if mirrored else []):
            F = stream.num_frames
            start, stop = int(round(part.start * F)), int(round(part.stop * F))
            stream, truth = slice_stream(stream, truth, start, stop)
            if stream.num_frames < min_frames:
                continue
            x, yaw = device_features(stream)
            out.append(Sequence(part.path.name + suffix, x, yaw, truth.facing_yaw))
    return out
