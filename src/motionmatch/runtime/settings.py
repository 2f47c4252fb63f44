"""Character settings, and their packed form: one float64 row per character that compiled kernels read.

Every per-character number a tick needs is a column of that row, so a crowd whose characters differ in
settings still runs each stage as one loop over characters. The fields, their defaults and bounds, and
the columns come from the settings schema (settings_schema.py): a column constant (SEARCH_INTERVAL,
W_LIMIT, ...) is the `column` of a character or warp row there, numbered in schema order.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .settings_schema import (INERTIALIZATION_METHODS, MODES, check_fields, defaults, packed_rows,  # noqa: F401
                              rows, setting)
from .warping import WarpSettings

_PACKED = packed_rows("character", "warp")
COLUMNS = len(_PACKED)
# The packed columns, written out so linters, IDEs and readers can resolve them; each is the index of its
# `column` in _PACKED (tests/runtime/test_settings_columns.py holds them to the schema).
SEARCH_INTERVAL = 0
BIAS = 1
COLLISION_WEIGHT = 2
LMM_BIAS = 3
LMM_PUSH = 4
LMM_DRIFT = 5
END_EXCLUDE = 6
NO_REWIND = 7
SHARP_SPEED = 8
SHARP_ANGLE_DEG = 9
INERTIALIZATION = 10
HALFLIFE = 11
BLEND_TIME = 12
ADJUSTMENT = 13
ADJ_POS_HALFLIFE = 14
ADJ_ROT_HALFLIFE = 15
ADJ_MAX_RATIO = 16
ADJ_BACKWARD_TURN_RATIO = 17
ADJ_BACKWARD_ROT_HALFLIFE = 18
CLAMPING = 19
CLAMP_RADIUS = 20
CLAMP_ANGLE = 21
FOOT_LOCKING = 22
UNLOCK_RADIUS = 23
LOCK_HALFLIFE = 24
LOCK_GLIDE_HALFLIFE = 25
IK = 26
W_ORIENTATION = 27
W_LIMIT = 28
W_HIP_LIMIT = 29
W_SPINE_LIMIT = 30
W_SIDE_ANGLE = 31
W_SIDE_BACKWARD = 32
W_BACKWARD_ANGLE = 33
W_ORIENT_HALFLIFE = 34
W_MIN_TRAVEL = 35
W_PLAY_RATE = 36
W_RATE_MIN = 37
W_RATE_MAX = 38
W_RATE_SHARE = 39
W_STRIDE = 40
W_STRIDE_MIN = 41
W_STRIDE_MAX = 42
W_SPEED_HALFLIFE = 43
W_STRIDE_UP_HALFLIFE = 44
W_TIMESCALE = 45
W_QUERY_FLOOR = 46
W_SLOPE = 47
W_SLOPE_MAX = 48
W_SPINE_PITCH = 49
W_SPINE_PITCH_MAX = 50
# Ponton's two sliders (seed 002, eq. 3.16) multiply the trajectory and the pose channels' weights.
RESPONSIVE_KINDS = ("trajectory_position", "trajectory_direction")
QUALITY_KINDS = ("position", "velocity")
# Columns the sliders scale, with the exponents of 2 per unit of (2 * responsiveness - 1) and of
# (2 * quality - 1): both at 0.5 leave every setting as it is (docs/tuning.md).
SLIDER_EXPONENTS = {"search_interval": (-1.0, 0.0), "sharp_change_speed": (-1.0, 0.0),
                    "sharp_change_angle_deg": (-1.0, 0.0), "bias": (-1.0, 1.0), "lmm_bias": (-1.0, 1.0)}
SLIDER_WEIGHT_EXPONENTS = {kind: (1.0, 0.0) for kind in RESPONSIVE_KINDS} | {kind: (0.0, 1.0)
                                                                           for kind in QUALITY_KINDS}
_D = defaults("character")


@dataclass
class CharacterSettings:
    """Live-tunable settings (settings_schema.py: bounds, units, docs). Times in seconds, distances in
    metres, angles in degrees."""

    weights: dict = field(default_factory=dict)     # channel name -> weight (missing: the database's)
    # "classic": poses from the database; "lmm": from the learned model file `model` (docs/LMM.md). One
    # crowd runs one mode and model.
    mode: str = _D["mode"]
    model: str | None = None
    responsiveness: float = _D["responsiveness"]
    quality: float = _D["quality"]
    search_interval: float = _D["search_interval"]
    bias: float = _D["bias"]
    collision_weight: float = _D["collision_weight"]
    lmm_bias: float = _D["lmm_bias"]
    lmm_push: float = _D["lmm_push"]
    lmm_drift: float = _D["lmm_drift"]
    inertialization: str = _D["inertialization"]
    halflife: float = _D["halflife"]
    blend_time: float = _D["blend_time"]
    adjustment: bool = _D["adjustment"]
    adjustment_position_halflife: float = _D["adjustment_position_halflife"]
    adjustment_rotation_halflife: float = _D["adjustment_rotation_halflife"]
    adjustment_max_ratio: float = _D["adjustment_max_ratio"]
    adjustment_backward_turn_ratio: float = _D["adjustment_backward_turn_ratio"]
    adjustment_backward_rotation_halflife: float = _D["adjustment_backward_rotation_halflife"]
    clamping: bool = _D["clamping"]
    clamp_radius: float = _D["clamp_radius"]
    clamp_angle_deg: float = _D["clamp_angle_deg"]
    foot_locking: bool = _D["foot_locking"]
    foot_unlock_radius: float = _D["foot_unlock_radius"]
    foot_lock_halflife: float = _D["foot_lock_halflife"]
    foot_lock_glide_halflife: float = _D["foot_lock_glide_halflife"]
    ik: bool = _D["ik"]
    tag_filter: str | None = _D["tag_filter"]
    end_exclude: int = _D["end_exclude"]
    search_backend: str = _D["search_backend"]
    no_rewind_frames: int = _D["no_rewind_frames"]
    sharp_change_speed: float = _D["sharp_change_speed"]
    sharp_change_angle_deg: float = _D["sharp_change_angle_deg"]
    warp: WarpSettings = field(default_factory=WarpSettings)

    def check(self) -> None:
        """SettingError (a ValueError) naming `table.key` and the bound for a field out of the schema."""
        check_fields(self, "character")
        check_fields(self.warp, "warp")
        for ch, w in self.weights.items():
            setting("weights", ch).check(w)

    def slider_scale(self, exponents: tuple[float, float]) -> float:
        """2 ** (a * (2 responsiveness - 1) + b * (2 quality - 1)) for exponents (a, b)."""
        a, b = exponents
        return 2.0 ** (a * (2.0 * self.responsiveness - 1.0) + b * (2.0 * self.quality - 1.0))

    def channel_weight(self, kind: str, weight: float) -> float:
        """A channel's weight (the setting, else the database's) times the sliders' factor for its kind."""
        e = SLIDER_WEIGHT_EXPONENTS.get(kind)
        return weight if e is None else weight * self.slider_scale(e)

    def packed(self) -> np.ndarray:
        """The numeric settings as one float64 row (checked against the schema; columns: the constants of
        this module), with the sliders applied (clipped to the schema's bounds)."""
        self.check()
        row = np.empty(COLUMNS)
        for i, s in enumerate(_PACKED):
            v = getattr(self.warp if s.table == "warp" else self, s.key)
            if s.key in SLIDER_EXPONENTS:
                v = min(max(v * self.slider_scale(SLIDER_EXPONENTS[s.key]), s.lo), s.hi)
            row[i] = s.choices.index(v) if s.choices else math.radians(v) if s.radians else v
        return row


def _warp_flag(name: str, doc: str):
    """A flat alias of a WarpSettings field, so UIs and command lines can set it like the others."""
    return property(lambda self: getattr(self.warp, name), lambda self, v: setattr(self.warp, name, v), doc=doc)


for _s in rows("warp"):
    if _s.app is not None:
        setattr(CharacterSettings, _s.app_field, _warp_flag(_s.key, _s.doc))
