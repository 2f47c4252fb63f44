"""The settings schema: every setting a character, its warping and its controller have, in one table.

One row per setting: table, key, type, unit, bounds, default, doc, the range `motionmatch tune` searches
(`tune`), the app's control (`app`) and, for the numbers compiled kernels read, the packed column
(`column`). Everything that handles settings comes from here: the runtime dataclasses' defaults and
validation (settings.py, warping.py, controller.py), the packed columns, settings files
(runtime/settings_file.py), the app's settings messages and tuning panel, the command line's setting flags,
`motionmatch settings --json` and `tune`'s search space (offline/tuning.py). So a value accepted anywhere is
accepted everywhere, and an error names `table.key` and the bound.

Tables: "character" (CharacterSettings), "warp" (WarpSettings, CharacterSettings.warp), "controller"
(ControllerSettings) and "weights" (feature channel weights; one row "*" bounds every channel).
A settings file holds every table, each row but those with stored=False (set at run time).
Units: s, m, m/s, deg (radians only where the unit says so), frames; "" for ratios and flags.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

TYPES = ("float", "int", "bool", "choice", "text")
# Packed as the index: "dead_blending" comes after "off" so existing rows keep their numbers.
INERTIALIZATION_METHODS = ("spring", "quintic", "off", "dead_blending")
MODES = ("classic", "lmm")
SEARCH_BACKENDS = ("brute_numpy", "brute", "aabb")
# Largest magnitude of a JSON or TOML integer taken as a number (a 400-digit one is refused, not rounded).
MAX_ABS_NUMBER = 1e300


class SettingError(ValueError):
    """A setting value that is not accepted; the message names `table.key` and the bound."""


@dataclass(frozen=True)
class Tune:
    """What `motionmatch tune` searches for a setting: a range (log scale or not) or `choices`."""
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    choices: tuple = ()


@dataclass(frozen=True)
class Control:
    """The app's control for a setting: the settings message field `field` (default: the key), a
    `kind` ("range", "select", "checkbox", "text"), the panel `section`, a `label` and a slider `step`."""
    section: str
    label: str
    kind: str = "range"
    step: float = 0.0
    field: str = ""


@dataclass(frozen=True)
class Setting:
    """One setting (see the module docstring). `lo`/`hi` bound numbers (inclusive); `choices` the
    values of a "choice"; `optional`: None is a value too (text, or a float whose None means
    "same as another setting"); `stored`: written to and read from settings files; `column`: the name
    of its packed column constant; `radians`: packed in radians (the setting is in degrees)."""
    table: str
    key: str
    type: str
    default: object
    doc: str
    unit: str = ""
    lo: float | None = None
    hi: float | None = None
    choices: tuple = ()
    optional: bool = False
    stored: bool = True
    tune: Tune | None = None
    app: Control | None = None
    column: str = ""
    radians: bool = False

    @property
    def name(self) -> str:
        return f"{self.table}.{self.key}"

    @property
    def app_field(self) -> str:
        return (self.app.field or self.key) if self.app else ""

    def check(self, value):
        """The value converted to this setting's type, or a SettingError naming `table.key` and the bound."""
        name = self.name
        if value is None and self.optional:
            return None
        if self.type == "choice":
            if isinstance(value, bool) or value not in self.choices:
                raise SettingError(f"{name} = {value!r}: expected one of {', '.join(map(str, self.choices))}")
            return value
        if self.type == "bool":
            if not isinstance(value, bool):
                raise SettingError(f"{name} = {value!r}: expected true or false")
            return value
        if self.type == "text":
            if not isinstance(value, str):
                raise SettingError(f"{name} = {value!r}: expected a string")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SettingError(f"{name} = {_short(value)}: expected a number")
        if self.type == "int" and not isinstance(value, int):
            raise SettingError(f"{name} = {value!r}: expected an integer")
        if abs(value) > MAX_ABS_NUMBER if isinstance(value, int) else not math.isfinite(value):
            raise SettingError(f"{name} = {_short(value)}: expected a finite number in [{self.lo:g}, {self.hi:g}]")
        if not self.lo <= value <= self.hi:
            bound = f"below the minimum {self.lo:g}" if value < self.lo else f"above the maximum {self.hi:g}"
            raise SettingError(f"{name} = {value!r} is out of range [{self.lo:g}, {self.hi:g}] ({bound})")
        return int(value) if self.type == "int" else float(value)

    def describe(self) -> dict:
        """The row as JSON (`motionmatch settings --json`, GET /api/settings/schema)."""
        out = {"type": self.type}
        if self.lo is not None:
            out["min"], out["max"] = self.lo, self.hi
        if self.choices:
            out["choices"] = list(self.choices)
        out.update({"default": self.default, "unit": self.unit, "doc": self.doc})
        if self.optional:
            out["optional"] = True
        if not self.stored:
            out["stored"] = False
        if self.tune is not None:
            t = self.tune
            out["tune"] = {"choices": list(t.choices)} if t.choices else {"min": t.low, "max": t.high, "log": t.log}
        if self.app is not None:
            a = self.app
            out["app"] = {"field": self.app_field, "kind": a.kind, "section": a.section, "label": a.label}
            if a.step:
                out["app"]["step"] = a.step
        return out


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:20] + "..." + f" ({len(text)} characters)"


def _f(table, key, default, lo, hi, unit, doc, **kw) -> Setting:
    return Setting(table, key, "float", default, doc, unit, float(lo), float(hi), **kw)


def _i(table, key, default, lo, hi, unit, doc, **kw) -> Setting:
    return Setting(table, key, "int", default, doc, unit, lo, hi, **kw)


def _b(table, key, default, doc, **kw) -> Setting:
    return Setting(table, key, "bool", default, doc, **kw)


C, W, K = "character", "warp", "controller"
_SEARCH, _BLEND, _WARP, _FEEL = "Search", "Blending and touch-ups", "Warping", "Feel"

# The defaults of search_interval, bias, inertialization, halflife, adjustment_*, clamp_*, foot_unlock_radius,
# foot_lock_halflife, sharp_change_* and the controller's halflives come from `motionmatch tune` on the
# mixed database, together with its channel weights (features.TUNED_WEIGHTS; docs/tuning.md, 2026-11-23,
# second study). `tune` searches the Tune ranges, around those defaults; warping limits stay at their
# defaults: they barely move responsiveness and were what made foot sliding worse in the wide search.
SETTINGS: tuple[Setting, ...] = (
    # -- character: the two sliders (Ponton 2022, eq. 3.16), relative to the settings below (docs/tuning.md)
    _f(C, "responsiveness", 0.5, 0, 1, "",
       "0..1, 0.5 leaves the settings as they are; higher weighs the trajectory more, searches more often "
       "and sticks less to the playing clip (docs/tuning.md)",
       app=Control(_FEEL, "responsiveness", step=0.05)),
    _f(C, "quality", 0.5, 0, 1, "",
       "0..1, 0.5 leaves the settings as they are; higher weighs the pose more and sticks more to the playing "
       "clip (docs/tuning.md)",
       app=Control(_FEEL, "quality", step=0.05)),
    # -- character: search
    Setting(C, "mode", "choice", "classic", "classic: poses from the database; lmm: from the learned model "
            "(serve --lmm; one crowd runs one mode and model, docs/LMM.md)", choices=MODES, stored=False,
            app=Control(_SEARCH, "motion matching", "select")),
    _f(C, "search_interval", 0.089, 0.01, 2.0, "s", "seconds between searches",
       tune=Tune(0.04, 0.2, log=True), app=Control(_SEARCH, "interval", step=0.01), column="SEARCH_INTERVAL"),
    _f(C, "bias", 0.04, 0, 10, "", "continuing-pose bias, in normalized cost units",
       tune=Tune(0.0, 0.3), app=Control(_SEARCH, "current-frame bias", step=0.01), column="BIAS"),
    # The collision term (runtime/collision_term.py): only with obstacles set, or in a crowd file whose agents
    # avoid each other. 5: on corridor50 and hall32 (both databases) the goals reached stay as at 0 and the
    # time roots spend within 0.45 m of a shape and close pairs drop; 2 cost jlpm22's corridor 16 goals
    # (docs/OBSTACLES.md, "The collision term").
    _f(C, "collision_weight", 5.0, 0, 100, "1/m",
       "collision term in the search (obstacles, avoiding crowds): normalized cost per metre a candidate's "
       "future trajectory comes inside 0.5 m of an obstacle or 0.6 m of another agent's predicted root "
       "(0: off; docs/OBSTACLES.md)",
       column="COLLISION_WEIGHT"),
    # Learned agents compare their projection with their stepped features, which already carry the
    # stepper's drift: the classic bias (then 0.08) kept them on it (jlpm22, 128-wide model: walk
    # responsiveness 0.72 s at 0.08 vs 0.53 at 0, classic 0.35; docs/LMM.md).
    # Negative values are a testing tool: a learned agent's cost of staying carries its drift, tens of units.
    _f(C, "lmm_bias", 0.0, -1000, 1000, "", "continuing-state bias of learned agents (mode lmm); -1000: they "
       "leave their state at every search", column="LMM_BIAS"),
    # The projector regresses to the data's mean (walk starts projected slow, stops creeping on).
    _f(C, "lmm_push", 2.0, 0, 10, "",
       "learned agents project a second time with the query's trajectory pushed past the first projection "
       "by this many times its shortfall (0: one projection; runtime/learned.py, docs/LMM.md)", column="LMM_PUSH"),
    # Default database, three models, 13 scenarios: trajectory error 0.835x -> 0.740x classic (docs/LMM.md).
    _f(C, "lmm_drift", 0.5, 0, 10, "",
       "learned agents: weight of the squared drift of the stepped features' velocity columns from the "
       "shown pose in the cost of staying (runtime/learned.py)", column="LMM_DRIFT"),
    Setting(C, "tag_filter", "text", None, "tag expression the search is restricted to (None: the database's "
            "default filter)", optional=True, app=Control(_SEARCH, "tag filter", "text")),
    _i(C, "end_exclude", 20, 0, 600, "frames", "frames at the end of each clip the search never lands on",
       column="END_EXCLUDE"),
    Setting(C, "search_backend", "choice", "aabb", "search back-end", choices=SEARCH_BACKENDS),
    _i(C, "no_rewind_frames", 30, 0, 600, "frames", "never jump 1..N frames away from the playing one",
       column="NO_REWIND"),
    _f(C, "sharp_change_speed", 0.9, 0, 20, "m/s", "change of desired velocity forcing a search",
       tune=Tune(0.2, 1.0), column="SHARP_SPEED"),
    _f(C, "sharp_change_angle_deg", 11.0, 0, 360, "deg", "change of desired facing forcing a search",
       tune=Tune(10.0, 60.0), column="SHARP_ANGLE_DEG"),
    # -- character: blending and touch-ups
    # Dead blending pops less but slides more (docs/TRANSITIONS.md).
    Setting(C, "inertialization", "choice", "spring", "how a transition hides the jump",
            choices=INERTIALIZATION_METHODS, tune=Tune(choices=("spring", "dead_blending")),
            app=Control(_BLEND, "inertialization", "select"), column="INERTIALIZATION"),
    _f(C, "halflife", 0.13, 0.005, 2.0, "s", "spring inertialization halflife; dead blending's velocity decay "
       "halflife", tune=Tune(0.05, 0.2, log=True), app=Control(_BLEND, "halflife", step=0.005), column="HALFLIFE"),
    _f(C, "blend_time", 0.3, 0.01, 2.0, "s", "quintic and dead blending blend time", column="BLEND_TIME"),
    _b(C, "adjustment", True, "pull the root toward the simulation",
       app=Control(_BLEND, "adjustment", "checkbox"), column="ADJUSTMENT"),
    _f(C, "adjustment_position_halflife", 0.087, 0.005, 5.0, "s", "halflife of the root's position adjustment",
       tune=Tune(0.05, 0.3, log=True), column="ADJ_POS_HALFLIFE"),
    # After a reversal the clip's own turn leaves a few degrees that held the root velocity outside the
    # 15-degree test for ~0.2 s.
    _f(C, "adjustment_rotation_halflife", 0.19, 0.005, 5.0, "s", "halflife of the root's yaw adjustment",
       tune=Tune(0.05, 0.4, log=True), column="ADJ_ROT_HALFLIFE"),
    _f(C, "adjustment_max_ratio", 0.42, 0, 5, "", "adjust at most this fraction of the root's own speed",
       tune=Tune(0.2, 1.0), column="ADJ_MAX_RATIO"),
    # No clip in the data turns while walking backward: between backward diagonals the root faced the old
    # travel for ~1.1 s turning at adjustment_max_ratio (docs/look.md, "Why walk_backward answers late").
    _f(C, "adjustment_backward_turn_ratio", 6.0, 0, 10, "", "walking backward (the orientation warp's backward "
       "mode), turn the root's yaw toward the simulation's by at most this many radians per radian turned plus "
       "metre travelled by the root's own motion (adjustment_max_ratio otherwise)", column="ADJ_BACKWARD_TURN_RATIO"),
    # Between backward diagonals the root turns some 100 degrees through the adjustment alone: at 0.19 s that took
    # 0.4-0.8 s after the stick (docs/look.md, "Responsiveness 0.25").
    _f(C, "adjustment_backward_rotation_halflife", 0.1, 0.005, 5.0, "s", "walking backward (the orientation "
       "warp's backward mode), halflife of the root's yaw adjustment (adjustment_rotation_halflife otherwise)",
       column="ADJ_BACKWARD_ROT_HALFLIFE"),
    _b(C, "clamping", True, "keep the root within clamp_radius / clamp_angle_deg of the simulation",
       tune=Tune(choices=(True, False)), app=Control(_BLEND, "clamping", "checkbox"), column="CLAMPING"),
    _f(C, "clamp_radius", 0.2, 0, 5, "m", "largest root-to-simulation distance",
       tune=Tune(0.05, 0.4, log=True), column="CLAMP_RADIUS"),
    _f(C, "clamp_angle_deg", 96.0, 0, 180, "deg", "largest root-to-simulation yaw",
       tune=Tune(30.0, 120.0), column="CLAMP_ANGLE", radians=True),
    _b(C, "foot_locking", True, "lock feet in contact (with leg IK)",
       app=Control(_BLEND, "foot locking", "checkbox"), column="FOOT_LOCKING"),
    # 0.2 let transitions unlock most Bandai steps.
    _f(C, "foot_unlock_radius", 0.36, 0, 2, "m", "a locked foot further than this from its lock unlocks",
       tune=Tune(0.2, 0.6), column="UNLOCK_RADIUS"),
    _f(C, "foot_lock_halflife", 0.097, 0.005, 2.0, "s", "halflife of the blend out of a lock",
       tune=Tune(0.05, 0.2, log=True), column="LOCK_HALFLIFE"),
    _f(C, "foot_lock_glide_halflife", 0.01, 0.001, 1.0, "s", "a locking foot keeps its velocity, decaying "
       "with this halflife, and rests where it stops", column="LOCK_GLIDE_HALFLIFE"),
    _b(C, "ik", True, "leg IK when foot locking or terrain needs it", column="IK"),
    # -- warp (CharacterSettings.warp).
    _b(W, "orientation", True, "orientation warping (strafe, backward)",
       app=Control(_WARP, "orientation", "checkbox", field="warp_orientation"), column="W_ORIENTATION"),
    _f(W, "orientation_limit_deg", 90.0, 0, 180, "deg", "largest warp between lower and upper body",
       app=Control(_WARP, "warp limit", step=5.0, field="warp_limit_deg"), column="W_LIMIT", radians=True),
    _f(W, "hip_twist_limit_deg", 50.0, 0, 90, "deg", "share of the warp the hip joints take (legs vs pelvis)",
       app=Control(_WARP, "hip twist", step=5.0, field="warp_hip_twist_limit_deg"), column="W_HIP_LIMIT",
       radians=True),
    # The animation's own twist (turning steps) comes on top: 35 keeps the total's p95 under 50 on strafes
    # (docs/mixed_sources.md).
    _f(W, "spine_twist_limit_deg", 35.0, 0, 180, "deg", "largest pelvis-to-shoulder twist the warp adds; the "
       "rest lags", app=Control(_WARP, "spine twist", step=5.0, field="warp_spine_twist_limit_deg"),
       column="W_SPINE_LIMIT", radians=True),
    _f(W, "side_step_angle_deg", 60.0, 0, 180, "deg", "facing-vs-travel angle beyond which the data's own "
       "side-steps are asked (only the rest is warped); 180: never", column="W_SIDE_ANGLE", radians=True),
    # 140 (90 + the hip twist limit: a back diagonal up to it plays a side-step turned within the hips' share)
    # answers faster but the side-steps' knees bend under the foot locks: not the default (docs/look.md,
    # "Strafes play the side-steps"); 120 = backward_angle_deg's default, no change.
    _f(W, "side_step_backward_deg", 120.0, 90, 180, "deg", "with side-steps in the database: the backward "
       "angle (backward_angle_deg without them)", column="W_SIDE_BACKWARD", radians=True),
    _f(W, "backward_angle_deg", 120.0, 90, 180, "deg", "facing-vs-travel angle beyond which backward motion is "
       "asked", column="W_BACKWARD_ANGLE", radians=True),
    _f(W, "orientation_halflife", 0.1, 0.005, 2.0, "s", "smoothing of the twist", column="W_ORIENT_HALFLIFE"),
    _f(W, "min_travel_speed", 0.3, 0, 5, "m/s", "below this there is no travel direction to warp to",
       column="W_MIN_TRAVEL"),
    # Play rate slows the clip only (docs/look.md): a 1.3 m/s walk otherwise plays a faster walk with its
    # stride shortened, the knees of a faster gait; speeding clips up (rate_max 1.2) made runs slide more
    # than the source.
    _b(W, "play_rate", True, "play-rate warping",
       app=Control(_WARP, "play rate", "checkbox", field="warp_play_rate"), column="W_PLAY_RATE"),
    _f(W, "rate_min", 0.6, 0.1, 1.0, "", "slowest play rate", column="W_RATE_MIN"),
    _f(W, "rate_max", 1.0, 1.0, 5.0, "", "fastest play rate", column="W_RATE_MAX"),
    _f(W, "rate_share", 1.0, 0, 1, "", "share of the speed ratio (in log) given to the play rate first",
       column="W_RATE_SHARE"),
    _b(W, "stride", True, "stride warping (speed between the data's speeds)",
       app=Control(_WARP, "stride", "checkbox", field="warp_stride"), column="W_STRIDE"),
    _f(W, "stride_min", 0.5, 0.1, 1.0, "", "shortest stride scale", column="W_STRIDE_MIN"),
    # 1.6: a start from standing plays a captured walk start, which reaches a walk in ~0.5 s where the simulation
    # takes 0.18 s; at 1.2 the root met the walk 0.33 s after the stick (docs/look.md, responsiveness).
    _f(W, "stride_max", 1.6, 1.0, 3.0, "", "longest stride scale", column="W_STRIDE_MAX"),
    # 0.2 lagged turns.
    _f(W, "speed_halflife", 0.1, 0.005, 2.0, "s", "smoothing of play rate and stride scale",
       column="W_SPEED_HALFLIFE"),
    # A start from standing plays a captured walk start slower than the simulation: the stride lengthening at
    # speed_halflife met the stick 0.05 s after the simulation (docs/look.md, "Responsiveness 0.25").
    _f(W, "stride_up_halflife", 0.08, 0.005, 2.0, "s", "smoothing of a lengthening stride scale while the stick asks "
       "for more speed than the simulation has (speed_halflife otherwise)", column="W_STRIDE_UP_HALFLIFE"),
    _b(W, "timescale", False, "rate and stride from the predicted error ratio (runtime/timescale.py)",
       column="W_TIMESCALE"),
    _f(W, "query_speed_floor", 0.8, 0, 5, "m/s", "slower requests ask the matcher for this speed (0: off)",
       column="W_QUERY_FLOOR"),
    _b(W, "slope", True, "feet tilted to the ground normal on terrain",
       app=Control(_WARP, "slope", "checkbox", field="warp_slope"), column="W_SLOPE"),
    _f(W, "slope_max_deg", 30.0, 0, 80, "deg", "steepest tilt given to a foot", column="W_SLOPE_MAX",
       radians=True),
    _f(W, "spine_pitch", 0.0, 0, 2, "", "share of the ground's slope the spine leans with (runtime/spine.py)",
       column="W_SPINE_PITCH"),
    _f(W, "spine_pitch_max_deg", 10.0, 0, 45, "deg", "largest lean", column="W_SPINE_PITCH_MAX", radians=True),
    _f(W, "hips_halflife", 0.1, 0.005, 2.0, "s", "not read by the runtime (kept so saved settings files load)"),
    # -- controller (ControllerSettings; packed by controller.py in this order)
    _f(K, "dead_zone", 0.2, 0, 0.95, "", "radial stick dead zone, rescaled so the response starts at 0",
       column="C_DEAD_ZONE"),
    _f(K, "response_exponent", 1.0, 0.1, 5.0, "",
       "speed fraction = ((|stick| - dead_zone) / (1 - dead_zone)) ** exponent", column="C_RESPONSE_EXPONENT"),
    _f(K, "look_dead_zone", 0.2, 0, 0.95, "", "dead zone of the look stick", column="C_LOOK_DEAD_ZONE"),
    _f(K, "walk_forward_speed", 1.3, 0, 20, "m/s", "walking speed forward", column="C_WALK_FORWARD"),
    _f(K, "walk_side_speed", 1.1, 0, 20, "m/s", "walking speed sideways", column="C_WALK_SIDE"),
    _f(K, "walk_backward_speed", 0.9, 0, 20, "m/s", "walking speed backward", column="C_WALK_BACKWARD"),
    _f(K, "run_forward_speed", 3.2, 0, 20, "m/s", "running speed forward", column="C_RUN_FORWARD"),
    _f(K, "run_side_speed", 2.4, 0, 20, "m/s", "running speed sideways", column="C_RUN_SIDE"),
    _f(K, "run_backward_speed", 2.0, 0, 20, "m/s", "running speed backward", column="C_RUN_BACKWARD"),
    _f(K, "velocity_halflife", 0.09, 0.005, 5.0, "s", "halflife of the simulation's velocity spring",
       tune=Tune(0.05, 0.2, log=True), column="C_VELOCITY_HALFLIFE"),
    _f(K, "stop_halflife", 0.1, 0.005, 5.0, "s", "velocity halflife while the stick is released (quick stop); "
       "None: velocity_halflife", optional=True, tune=Tune(0.05, 0.2, log=True), column="C_STOP_HALFLIFE"),
    _f(K, "rotation_halflife", 0.28, 0.005, 5.0, "s", "halflife of the simulation's facing spring",
       tune=Tune(0.08, 0.3, log=True), column="C_ROTATION_HALFLIFE"),
    _f(K, "gait_halflife", 0.1, 0.005, 5.0, "s", "halflife of the walk/run blend", column="C_GAIT_HALFLIFE"),
    # A view direction set by the app or the VR driver, never stored.
    _f(K, "camera_yaw", 0.0, -2 * math.pi, 2 * math.pi, "rad", "yaw of the camera the stick is read in "
       "(0 looks along +Z)", stored=False, column="C_CAMERA_YAW"),
    # -- weights: every feature channel of the database (time_to_event channels weigh during requests only)
    # Searched per group (left and right together, tuning.WEIGHT_GROUPS): what the search asks the next clip
    # to agree on (the trajectory to come vs the pose now).
    _f("weights", "*", 1.0, 0, 10, "", "a feature channel's weight in the search cost (default: the database's)",
       tune=Tune(0.25, 4.0, log=True)),
)

TABLES = ("character", "warp", "controller", "weights")
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


def setting(table: str, key: str) -> Setting:
    """The row of `table.key` (a channel of the weights table: the "*" row under the channel's name).
    KeyError when there is none."""
    if table == "weights":
        return replace(BY_NAME["weights.*"], key=str(key))
    return BY_NAME[f"{table}.{key}"]


def rows(table: str) -> tuple[Setting, ...]:
    """The rows of one table, in schema order."""
    return tuple(s for s in SETTINGS if s.table == table)


def defaults(table: str) -> dict:
    """{key: default} of a table (the runtime dataclasses take their defaults from here)."""
    return {s.key: s.default for s in rows(table)}


def packed_rows(*tables: str) -> tuple[Setting, ...]:
    """The rows with a packed column, of the given tables in that order (their index in the packed row)."""
    return tuple(s for t in tables for s in rows(t) if s.column)


def check_fields(obj, table: str) -> None:
    """SettingError for the first field of the dataclass `obj` (a table's settings) out of the schema."""
    for s in rows(table):
        s.check(getattr(obj, s.key))


def app_fields() -> dict[str, Setting]:
    """{settings message field: row} of the settings the app's panel controls."""
    return {s.app_field: s for s in SETTINGS if s.app is not None}


def database_weights(db) -> dict:
    """{feature channel: weight} of a database: the defaults of the weights table for it."""
    return {c.name: float(c.weight) for c in db.features.schema.channels}


def describe(weights: dict | None = None) -> dict:
    """The schema as one JSON object {table: {key: row}} (`motionmatch settings --json`,
    GET /api/settings/schema). weights: {channel: default weight} listed under "weights" (None: the
    "*" row alone)."""
    out = {t: {s.key: s.describe() for s in rows(t) if s.key != "*"} for t in TABLES}
    star = BY_NAME["weights.*"].describe()
    out["weights"] = ({ch: {**star, "default": float(w)} for ch, w in weights.items()} if weights is not None
                      else {"*": star})
    return out
