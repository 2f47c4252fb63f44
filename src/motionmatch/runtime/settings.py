"""Character settings, and their packed form: one float64 row per character that compiled kernels read.

Every per-character number a tick needs is a column of that row (constants below), so a crowd whose
characters differ in settings still runs each stage as one loop over characters.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .warping import WarpSettings

# Packed as the index: "dead_blending" comes after "off" so existing rows keep their numbers.
INERTIALIZATION_METHODS = ("spring", "quintic", "off", "dead_blending")
MODES = ("classic", "lmm")

(SEARCH_INTERVAL, BIAS, INERTIALIZATION, HALFLIFE, BLEND_TIME, ADJUSTMENT, ADJ_POS_HALFLIFE, ADJ_ROT_HALFLIFE,
 ADJ_MAX_RATIO, CLAMPING, CLAMP_RADIUS, CLAMP_ANGLE, FOOT_LOCKING, UNLOCK_RADIUS, LOCK_HALFLIFE, IK, NO_REWIND,
 SHARP_SPEED, SHARP_ANGLE_DEG, W_ORIENTATION, W_LIMIT, W_BACKWARD_ANGLE, W_ORIENT_HALFLIFE, W_MIN_TRAVEL,
 W_PLAY_RATE, W_RATE_MIN, W_RATE_MAX, W_RATE_SHARE, W_STRIDE, W_STRIDE_MIN, W_STRIDE_MAX, W_SPEED_HALFLIFE,
 W_QUERY_FLOOR, W_SLOPE, W_SLOPE_MAX, END_EXCLUDE, W_HIP_LIMIT, W_SPINE_LIMIT, W_TIMESCALE, W_SPINE_PITCH,
 W_SPINE_PITCH_MAX, LOCK_GLIDE_HALFLIFE, LMM_BIAS, LMM_PUSH, LMM_DRIFT) = range(45)
COLUMNS = 45


@dataclass
class CharacterSettings:
    """Live-tunable settings. Times in seconds, distances in metres, angles in degrees."""

    weights: dict = field(default_factory=dict)     # channel name -> weight (missing: schema default)
    # "classic": poses from the database; "lmm": from the learned model file `model` (docs/LMM.md). One
    # crowd runs one mode and model.
    mode: str = "classic"
    model: str | None = None
    # The defaults of search_interval, bias, inertialization, halflife, adjustment_*, clamp_*,
    # foot_unlock_radius, foot_lock_halflife and sharp_change_* come from `motionmatch tune` on the mixed
    # database, together with its channel weights (features.TUNED_WEIGHTS; docs/tuning.md, 2026-11-23,
    # second study).
    search_interval: float = 0.089
    bias: float = 0.04                               # continuing-pose bias, in normalized cost units
    # Learned agents (mode "lmm") compare their projection with their stepped features, which already carry
    # the stepper's drift: the classic bias (then 0.08) kept them on it (jlpm22, 128-wide model: walk
    # responsiveness 0.72 s at 0.08 vs 0.53 at 0, classic 0.35; docs/LMM.md).
    lmm_bias: float = 0.0
    # The projector regresses to the data's mean (walk starts projected slow, stops creeping on): learned
    # agents project a second time with the query's trajectory pushed past the first projection by this
    # many times its shortfall (0: one projection; runtime/learned.py, docs/LMM.md).
    lmm_push: float = 2.0
    # A learned agent's stepped features drift away from the pose it shows: the cost of staying on them
    # adds this weight times the squared drift of their velocity columns (feet, hips) from that pose's,
    # so a state whose features no longer describe its motion is re-projected (runtime/learned.py;
    # default database, three models, 13 scenarios: trajectory error 0.835x -> 0.740x classic, docs/LMM.md).
    lmm_drift: float = 0.5
    inertialization: str = "spring"                  # "spring" | "quintic" | "off" | "dead_blending"
    halflife: float = 0.13                           # spring halflife; dead blending's velocity decay halflife
    blend_time: float = 0.3                          # quintic and dead blending blend time
    adjustment: bool = True
    adjustment_position_halflife: float = 0.087
    adjustment_rotation_halflife: float = 0.19
    adjustment_max_ratio: float = 0.42               # adjust at most this fraction of the root's own speed
    clamping: bool = True
    clamp_radius: float = 0.2
    clamp_angle_deg: float = 96.0
    foot_locking: bool = True
    foot_unlock_radius: float = 0.36                 # m; 0.2 let transitions unlock most Bandai steps
    foot_lock_halflife: float = 0.097
    # s: a locking foot keeps its velocity, decaying with this halflife, and rests where it stops
    foot_lock_glide_halflife: float = 0.01
    ik: bool = True                                  # leg IK when foot locking or terrain needs it
    tag_filter: str | None = None
    end_exclude: int = 20
    search_backend: str = "aabb"
    no_rewind_frames: int = 30                       # never jump 1..N frames away from the playing one
    sharp_change_speed: float = 0.9                  # m/s change of desired velocity forcing a search
    sharp_change_angle_deg: float = 11.0             # change of desired facing forcing a search
    # Orientation, stride and slope warping on; play-rate warping off by default: on the jlpm22 data it
    # raised foot sliding on runs (11 -> 16 cm/s) without better velocity tracking.
    warp: WarpSettings = field(default_factory=lambda: WarpSettings(play_rate=False))

    def packed(self) -> np.ndarray:
        """The numeric settings as one float64 row (columns: the constants of this module)."""
        if self.inertialization not in INERTIALIZATION_METHODS:
            raise ValueError(f"inertialization: expected one of {INERTIALIZATION_METHODS}, "
                             f"got {self.inertialization!r}")
        w = self.warp
        row = np.zeros(COLUMNS)
        row[SEARCH_INTERVAL], row[BIAS], row[LMM_BIAS] = self.search_interval, self.bias, self.lmm_bias
        row[LMM_PUSH], row[LMM_DRIFT] = self.lmm_push, self.lmm_drift
        row[INERTIALIZATION] = INERTIALIZATION_METHODS.index(self.inertialization)
        row[HALFLIFE], row[BLEND_TIME] = max(self.halflife, 1e-3), max(self.blend_time, 1e-3)
        row[ADJUSTMENT], row[ADJ_POS_HALFLIFE] = self.adjustment, self.adjustment_position_halflife
        row[ADJ_ROT_HALFLIFE], row[ADJ_MAX_RATIO] = self.adjustment_rotation_halflife, self.adjustment_max_ratio
        row[CLAMPING], row[CLAMP_RADIUS] = self.clamping, self.clamp_radius
        row[CLAMP_ANGLE] = math.radians(self.clamp_angle_deg)
        row[FOOT_LOCKING], row[UNLOCK_RADIUS], row[LOCK_HALFLIFE] = (self.foot_locking, self.foot_unlock_radius,
                                                                     self.foot_lock_halflife)
        row[IK], row[NO_REWIND] = self.ik, self.no_rewind_frames
        row[SHARP_SPEED], row[SHARP_ANGLE_DEG] = self.sharp_change_speed, self.sharp_change_angle_deg
        row[W_ORIENTATION], row[W_LIMIT] = w.orientation, math.radians(w.orientation_limit_deg)
        row[W_HIP_LIMIT] = math.radians(w.hip_twist_limit_deg)
        row[W_SPINE_LIMIT] = math.radians(w.spine_twist_limit_deg)
        row[W_BACKWARD_ANGLE], row[W_ORIENT_HALFLIFE] = math.radians(w.backward_angle_deg), w.orientation_halflife
        row[W_MIN_TRAVEL] = w.min_travel_speed
        row[W_PLAY_RATE], row[W_RATE_MIN], row[W_RATE_MAX], row[W_RATE_SHARE] = (w.play_rate, w.rate_min,
                                                                                 w.rate_max, w.rate_share)
        row[W_STRIDE], row[W_STRIDE_MIN], row[W_STRIDE_MAX] = w.stride, w.stride_min, w.stride_max
        row[W_SPEED_HALFLIFE], row[W_QUERY_FLOOR] = w.speed_halflife, w.query_speed_floor
        row[W_SLOPE], row[W_SLOPE_MAX] = w.slope, math.radians(w.slope_max_deg)
        row[END_EXCLUDE] = self.end_exclude
        row[W_TIMESCALE] = w.timescale
        row[W_SPINE_PITCH], row[W_SPINE_PITCH_MAX] = w.spine_pitch, math.radians(w.spine_pitch_max_deg)
        row[LOCK_GLIDE_HALFLIFE] = max(self.foot_lock_glide_halflife, 1e-3)
        return row


def _warp_flag(name: str, doc: str):
    """A flat alias of a WarpSettings field, so UIs and command lines can set it like the others."""
    return property(lambda self: getattr(self.warp, name), lambda self, v: setattr(self.warp, name, v), doc=doc)


CharacterSettings.warp_orientation = _warp_flag("orientation", "orientation warping (strafe, backward)")
CharacterSettings.warp_stride = _warp_flag("stride", "stride warping (speed between the data's speeds)")
CharacterSettings.warp_play_rate = _warp_flag("play_rate", "play-rate warping")
CharacterSettings.warp_slope = _warp_flag("slope", "feet tilted to the ground normal on terrain")
CharacterSettings.warp_limit_deg = _warp_flag("orientation_limit_deg", "largest warp between lower and upper body (degrees)")
CharacterSettings.warp_hip_twist_limit_deg = _warp_flag("hip_twist_limit_deg",
                                                        "share of the warp the hip joints take (degrees)")
CharacterSettings.warp_spine_twist_limit_deg = _warp_flag("spine_twist_limit_deg",
                                                          "largest pelvis-to-shoulder twist (degrees)")
