"""Feature schema, raw feature computation and normalization (seeds 000 section 3.3, 002 3.1.2, 004).

A schema is a list of channels, each a few dimensions of the feature vector with one weight:
- `trajectory_position`: future (or past, negative offsets) ground positions of the simulation bone,
  (x, z) relative to the current simulation bone, at frame offsets;
- `trajectory_direction`: the simulation bone's facing (x, z) at those offsets, relative to it now;
- `position` / `velocity`: a role's or joint's position or velocity in character space (3-d);
- `time_to_event`: seconds to the next event mark of type `event` in the clip, clamped to `horizon`
  (1-d; posedb/events.py). The runtime weighs it only while a request with that event is active (docs/ACTIONS.md);
- `stance`: future stance matching (seed 003): which foot leads at each frame offset, as the signed
  distance (m) of the left foot ahead of the right one along the simulation bone's facing at that frame
  (positive: left foot in front). One dimension per offset; see stance_features;
- `trajectory_height`: the ground's height at each frame offset relative to the ground now (m), the
  ground being the lower toe's height averaged over 0.5 s (ground_heights); the runtime's query takes
  the terrain's heights along the desired trajectory. One dimension per offset.

Normalization (seed 004): offset = mean per dimension; one scale per channel = mean of its
per-dimension standard deviations divided by the channel weight. Changing weights only recomputes
scales; raw features stay.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, replace

import numpy as np

from ..maths.rotations import quat_inv, quat_rotate

KINDS = ("trajectory_position", "trajectory_direction", "position", "velocity", "stance", "trajectory_height",
         "time_to_event")
# A database of flat ground has heights spread by toe noise alone (~1 cm): this floor on the channel's
# scale keeps a slope's request (tens of cm) from outweighing every other channel.
HEIGHT_STD_FLOOR = 0.05


class FeatureError(ValueError):
    """A schema or normalization problem, naming the channel."""


@dataclass(frozen=True)
class Channel:
    name: str
    kind: str
    weight: float = 1.0
    joint: str | None = None                 # role name (e.g. "left_foot") or joint name
    offsets: tuple[int, ...] = ()            # frame offsets at the database rate, for trajectory kinds
    event: str | None = None                 # event type, for time_to_event
    horizon: float = 1.5                     # seconds, clamp of time_to_event

    @property
    def dims(self) -> int:
        if self.kind in ("trajectory_position", "trajectory_direction"):
            return 2 * len(self.offsets)
        if self.kind == "time_to_event":
            return 1
        if self.kind in ("stance", "trajectory_height"):
            return len(self.offsets)
        return 3


@dataclass(frozen=True)
class FeatureSchema:
    channels: tuple[Channel, ...]

    @property
    def dims(self) -> int:
        return sum(c.dims for c in self.channels)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.channels]

    def slices(self) -> dict[str, slice]:
        out, i = {}, 0
        for c in self.channels:
            out[c.name] = slice(i, i + c.dims)
            i += c.dims
        return out

    def with_weights(self, weights: dict[str, float]) -> "FeatureSchema":
        unknown = set(weights) - set(self.names)
        if unknown:
            raise FeatureError(f"unknown feature channel(s) {sorted(unknown)}; channels are {self.names}")
        return FeatureSchema(tuple(replace(c, weight=float(weights.get(c.name, c.weight))) for c in self.channels))

    def to_dict(self) -> dict:
        out = []
        for c in self.channels:
            d = {"name": c.name, "kind": c.kind, "weight": c.weight}
            if c.joint is not None:
                d["joint"] = c.joint
            if c.offsets:
                d["offsets"] = list(c.offsets)
            if c.kind == "time_to_event":
                d["event"], d["horizon"] = c.event, c.horizon
            out.append(d)
        return {"channel": out}

    def to_toml(self) -> str:
        lines = []
        for d in self.to_dict()["channel"]:
            lines.append("[[channel]]")
            for k, v in d.items():
                lines.append(f"{k} = {_toml_value(v)}")
            lines.append("")
        return "\n".join(lines)


def _toml_value(v) -> str:
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list):
        return "[" + ", ".join(str(x) for x in v) + "]"
    return repr(v)


def schema_from_dict(d: dict) -> FeatureSchema:
    """Build and validate a schema from a dict `{"channel": [{name, kind, weight, joint|offsets}, ...]}`."""
    if not isinstance(d, dict):
        raise FeatureError(f"schema: expected a table of [[channel]] entries, got {type(d).__name__}")
    chans = d.get("channel")
    if not isinstance(chans, list) or not chans:
        raise FeatureError("schema needs a non-empty [[channel]] list")
    out, seen = [], set()
    for i, c in enumerate(chans):
        where = f"channel[{i}]"
        if not isinstance(c, dict):
            raise FeatureError(f"{where}: expected a table")
        unknown = set(c) - {"name", "kind", "weight", "joint", "offsets", "event", "horizon"}
        if unknown:
            raise FeatureError(f"{where}: unknown field(s) {sorted(unknown)}")
        name = c.get("name")
        if not isinstance(name, str) or not name:
            raise FeatureError(f"{where}.name: expected a non-empty string")
        if name in seen:
            raise FeatureError(f"{where}.name: duplicate channel {name!r}")
        seen.add(name)
        kind = c.get("kind")
        if kind not in KINDS:
            raise FeatureError(f"{where}.kind ({name}): expected one of {KINDS}, got {kind!r}")
        w = c.get("weight", 1.0)
        if not isinstance(w, (int, float)) or isinstance(w, bool) or not np.isfinite(w) or w <= 0:
            raise FeatureError(f"{where}.weight ({name}): expected a positive number, got {w!r}")
        joint, offsets = c.get("joint"), c.get("offsets", ())
        if not isinstance(offsets, (list, tuple)):
            raise FeatureError(f"{where}.offsets ({name}): expected a list of non-zero frame offsets")
        offsets = tuple(offsets)
        event, horizon = c.get("event"), c.get("horizon", 1.5)
        if kind == "time_to_event":
            if not isinstance(event, str) or not event:
                raise FeatureError(f"{where}.event ({name}): a time_to_event channel needs an event type")
            if isinstance(horizon, bool) or not isinstance(horizon, (int, float)) or not 0 < horizon <= 60:
                raise FeatureError(f"{where}.horizon ({name}): expected seconds in (0, 60], got {horizon!r}")
            out.append(Channel(name=name, kind=kind, weight=float(w), event=event, horizon=float(horizon)))
            continue
        if kind in ("position", "velocity"):
            if not isinstance(joint, str):
                raise FeatureError(f"{where}.joint ({name}): a {kind} channel needs a role or joint name")
        else:
            if not offsets or not all(isinstance(o, int) and o != 0 for o in offsets):
                raise FeatureError(f"{where}.offsets ({name}): expected a list of non-zero frame offsets")
        out.append(Channel(name=name, kind=kind, weight=float(w), joint=joint, offsets=offsets))
    return FeatureSchema(tuple(out))


def load_schema(path) -> FeatureSchema:
    """Read a schema from a TOML file of [[channel]] tables."""
    with open(path, "rb") as f:
        try:
            d = tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise FeatureError(f"{path}: {e}") from None
    try:
        return schema_from_dict(d)
    except FeatureError as e:
        raise FeatureError(f"{path}: {e}") from None


# Channel weights tuned on the mixed default database (`motionmatch tune`, docs/tuning.md): the
# trajectory's future positions weigh most, the feet's positions least. The mixed default database is
# built with them (database.default_weights). They are the data's: on the jlpm22-only database, which
# has no backward or sideways clips, they chose forward clips warped sideways (strafe-box facing
# 0.80 -> 0.79, warped walking sliding 1.7x), so it keeps the reference weights.
TUNED_WEIGHTS = {"left_foot_position": 0.33, "right_foot_position": 0.33, "left_foot_velocity": 1.4,
                         "right_foot_velocity": 1.4, "hips_velocity": 0.71, "trajectory_position": 3.2,
                         "trajectory_direction": 1.2}
# The Bandai-Namco locomotion database's own weights: trial 78 of a weights-only study on it
# (`motionmatch tune --only weights`, runtime defaults fixed, 251 trials; docs/tuning.md, 2026-11-26),
# to three digits. With TUNED_WEIGHTS its straight walking slid twice as much (terrain_steps 3.4 ->
# 7.4 cm/s) and popped more (1.5 -> 2.5). Neither weight of the suspects alone undid it (the tuning set's
# walk: foot position 0.33 / 0.75 / 1.0 with trajectory position 3.2 slid 7.0 / 6.8 / 6.9 cm/s,
# trajectory position 2.0 with foot position 0.33 7.2); the two together did (0.75 and 2.0: 2.7).
BANDAI_WEIGHTS = {"left_foot_position": 0.947, "right_foot_position": 0.947, "left_foot_velocity": 1.81,
                  "right_foot_velocity": 1.81, "hips_velocity": 0.648, "trajectory_position": 2.46,
                  "trajectory_direction": 2.07}


def default_schema() -> FeatureSchema:
    """The standard 27-d locomotion schema with the reference implementation's weights (the mixed and
    Bandai-Namco default databases are built with TUNED_WEIGHTS and BANDAI_WEIGHTS instead)."""
    return FeatureSchema((
        Channel("left_foot_position", "position", 0.75, joint="left_foot"),
        Channel("right_foot_position", "position", 0.75, joint="right_foot"),
        Channel("left_foot_velocity", "velocity", 1.0, joint="left_foot"),
        Channel("right_foot_velocity", "velocity", 1.0, joint="right_foot"),
        Channel("hips_velocity", "velocity", 1.0, joint="hips"),
        Channel("trajectory_position", "trajectory_position", 1.0, offsets=(20, 40, 60)),
        Channel("trajectory_direction", "trajectory_direction", 1.5, offsets=(20, 40, 60)),
    ))


# ---------------------------------------------------------------------------------------------
# Raw features

def _clamped_index(n: int, starts: np.ndarray, stops: np.ndarray, offset: int) -> np.ndarray:
    """Frame index + offset clamped inside each frame's own clip range."""
    idx = np.arange(n)
    lo = np.repeat(starts, stops - starts)
    hi = np.repeat(stops, stops - starts) - 1
    return np.clip(idx + offset, lo, hi)


def difference_frames(n: int, starts: np.ndarray, stops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The frames every velocity of the project is differenced between: (prev (N,), next (N,)) int64,
    central inside a clip (f - 1, f + 1), one-sided at its first and last frame (a one-frame clip gives
    (f, f): velocity 0). Velocity of frame f = (x[next] - x[prev]) * fps / max(next - prev, 1)."""
    return _clamped_index(n, starts, stops, -1), _clamped_index(n, starts, stops, +1)


def compute_features(schema: FeatureSchema, gpos: np.ndarray, grot: np.ndarray, fps: float,
                     range_starts: np.ndarray, range_stops: np.ndarray, joint_index) -> np.ndarray:
    """Raw features (N, F) float32 for all frames at once.

    gpos/grot: world transforms (N, J, 3)/(N, J, 4) with joint 0 the simulation bone;
    joint_index: callable name -> joint index (roles resolve first).
    Velocities are central differences inside each clip (one-sided at its ends, difference_frames), in m/s.
    """
    n = gpos.shape[0]
    sim_pos = gpos[:, 0]
    sim_inv = quat_inv(grot[:, 0])
    prev, nxt = difference_frames(n, range_starts, range_stops)
    span = np.maximum(nxt - prev, 1)[:, None] / fps
    cols = []
    for c in schema.channels:
        if c.kind == "position":
            j = joint_index(c.joint)
            cols.append(quat_rotate(sim_inv, gpos[:, j] - sim_pos))
        elif c.kind == "velocity":
            j = joint_index(c.joint)
            vel = (gpos[nxt, j] - gpos[prev, j]) / span
            cols.append(quat_rotate(sim_inv, vel))
        elif c.kind == "trajectory_position":
            for o in c.offsets:
                k = _clamped_index(n, range_starts, range_stops, o)
                cols.append(quat_rotate(sim_inv, gpos[k, 0] - sim_pos)[:, [0, 2]])
        elif c.kind == "trajectory_direction":
            for o in c.offsets:
                k = _clamped_index(n, range_starts, range_stops, o)
                fwd = quat_rotate(grot[k, 0], np.array([0.0, 0.0, 1.0]))
                cols.append(quat_rotate(sim_inv, fwd)[:, [0, 2]])
        elif c.kind == "time_to_event":
            # Filled once the whole database's marks are known (events.time_to_event).
            cols.append(np.full((n, 1), c.horizon))
        elif c.kind == "stance":
            lead = stance_features(gpos, grot, joint_index("left_foot"), joint_index("right_foot"))
            for o in c.offsets:
                cols.append(lead[_clamped_index(n, range_starts, range_stops, o), None])
        elif c.kind == "trajectory_height":
            ground = ground_heights(gpos, joint_index("left_toe"), joint_index("right_toe"), range_starts,
                                    range_stops, fps)
            for o in c.offsets:
                cols.append((ground[_clamped_index(n, range_starts, range_stops, o)] - ground)[:, None])
    return np.concatenate(cols, axis=1).astype(np.float32)


def stance_features(gpos: np.ndarray, grot: np.ndarray, left: int, right: int) -> np.ndarray:
    """(N,) which foot leads at each frame: the left foot's distance (m) ahead of the right one along
    the simulation bone's facing (joint 0; positive: left foot in front). In walking it changes sign
    once a step, as the swinging foot passes the planted one, and a foot leads when it lands."""
    fwd = quat_rotate(grot[:, 0], np.array([0.0, 0.0, 1.0]))
    return np.einsum("nk,nk->n", gpos[:, left] - gpos[:, right], fwd)


def ground_heights(gpos: np.ndarray, left_toe: int, right_toe: int, range_starts: np.ndarray,
                   range_stops: np.ndarray, fps: float, window_s: float = 0.5) -> np.ndarray:
    """(N,) the ground under the character at each frame (m): the lower toe's height averaged over a
    centred window of window_s seconds inside the clip (a planted toe marks the ground; the average
    hides the swing)."""
    low = np.minimum(gpos[:, left_toe, 1], gpos[:, right_toe, 1]).astype(np.float64)
    out = np.empty(len(low))
    half = max(int(round(0.5 * window_s * fps)), 0)
    for a, b in zip(np.asarray(range_starts), np.asarray(range_stops)):
        a, b = int(a), int(b)
        c = np.concatenate([[0.0], np.cumsum(low[a:b])])
        i = np.arange(b - a)
        lo, hi = np.maximum(i - half, 0), np.minimum(i + half + 1, b - a)
        out[a:b] = (c[hi] - c[lo]) / (hi - lo)
    return out


# ---------------------------------------------------------------------------------------------
# Normalization

@dataclass
class FeatureSet:
    """Raw features plus their normalization. `normalized` is (raw - offset) / scale, float32."""

    schema: FeatureSchema
    raw: np.ndarray                       # (N, F) float32
    offset: np.ndarray = None             # mean per dimension (computed when not given)
    dim_std: np.ndarray = None            # std per dimension (computed when not given)
    std: np.ndarray = field(init=False)   # per channel (before weights), broadcast per dimension
    scale: np.ndarray = field(init=False)
    _normalized: np.ndarray | None = field(init=False, default=None, repr=False)

    def __post_init__(self):
        if self.offset is None or self.dim_std is None:
            raw64 = self.raw.astype(np.float64)
            self.offset = raw64.mean(0)
            self.dim_std = raw64.std(0)
        dim_std = self.dim_std
        std = np.empty(self.raw.shape[1])
        for c in self.schema.channels:
            s = self.schema.slices()[c.name]
            v = dim_std[s].mean()
            if c.kind == "trajectory_height":
                v = max(v, HEIGHT_STD_FLOOR)
            if not np.isfinite(v) or v < 1e-8:
                raise FeatureError(f"feature channel {c.name!r} has zero spread over the database; "
                                   f"remove it or give it a different joint/offsets")
            std[s] = v
        self.std = std
        self._renormalize()

    def _renormalize(self):
        w = np.empty(self.raw.shape[1])
        for c in self.schema.channels:
            w[self.schema.slices()[c.name]] = c.weight
        self.scale = self.std / w
        self._normalized = None

    @property
    def normalized(self) -> np.ndarray:
        """(N, F) float32, computed on first use: opening a database stays cheap (the runtime
        normalizes with each character's own weights)."""
        if self._normalized is None:
            self._normalized = ((self.raw - self.offset) / self.scale).astype(np.float32)
        return self._normalized

    @property
    def channel_slices(self) -> dict[str, slice]:
        return self.schema.slices()

    def set_weights(self, weights: dict[str, float]) -> None:
        """Change channel weights; raw features are kept, only the scales change."""
        self.schema = self.schema.with_weights(weights)
        self._renormalize()

    def normalize(self, raw_query: np.ndarray) -> np.ndarray:
        """Normalize raw query vectors (..., F) exactly as the database."""
        return ((np.asarray(raw_query, dtype=np.float64) - self.offset) / self.scale).astype(np.float32)

    def denormalize(self, q: np.ndarray) -> np.ndarray:
        return np.asarray(q, dtype=np.float64) * self.scale + self.offset
