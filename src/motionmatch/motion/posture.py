"""Posture of a motion: knee angle, trunk lean, hand spread and planted toe height, of a synthesized run
and of the clips of the database's main actor (the person the output should look like).

Definitions (README, section "Metrics"): the knee angle is the angle at the knee joint between the thigh
(knee to upper-leg joint) and the shin (knee to foot joint), 180 degrees = straight; the trunk lean is the
angle between world up and the line from the hips joint to the head joint (0 = upright, any direction);
the hand spread is the distance between the two hand joints along the body's left-right axis (the
horizontal direction of the line between the upper-leg joints), in cm; a planted toe's height is the toe
joint's height above the floor (the terrain under it on terrain) on the frames it moves slower than the
foot-sliding metric's contact speed (0.5 m/s horizontally).

The actor's figures pool every gait of its clips, and a gait changes the posture: the jlpm22 actor's median
knee is 150 degrees walking forward at 0.5-1 m/s, 121 running at 3-4 m/s and 161 side-stepping at 0.5-1 m/s.
`gait_figures` compares the output with the actor at the same gaits instead (metrics.json `posture_gait`):
each frame falls in a gait bin (standing, or a root speed band times the travel direction against the
body's facing: forward, sideways, backward), and the actor's knee angles and 1st-99th percentile ranges
are taken per bin and weighed by the output's frames in each bin.

Inputs are the positions of POSTURE_ROLES per frame (F, K, 3), metres, Y up.
"""
from __future__ import annotations

import math

import numpy as np

from .metrics import CONTACT_SPEED

# Joints a run records for the posture and idle figures (synth.run_scenario), in this order.
POSTURE_ROLES = ("hips", "head", "left_upper_leg", "left_lower_leg", "left_foot", "right_upper_leg",
                 "right_lower_leg", "right_foot", "left_hand", "right_hand")
_HIPS, _HEAD, _LUL, _LLL, _LF, _RUL, _RLL, _RF, _LH, _RH = range(len(POSTURE_ROLES))
MOVING_SPEED = 0.5            # m/s: the knee figure counts frames whose root is faster
OUTSIDE_PERCENTILES = (1.0, 99.0)
SOURCE_MAX_CLIPS = 60
# Bumped when a definition above changes: a database's stored source figures are then recomputed.
SOURCE_VERSION = 2
POSTURE_KEYS = ("knee_deg", "planted_toe_cm", "trunk_lean_deg", "outside_source")
# Gait bins (gait_bins): bin 0 is standing (root slower than MOVING_SPEED); the moving bins are a root speed
# band (edges in m/s, the last band open) times a travel direction against the body's facing (cosine above
# GAIT_FORWARD_COS: forward, below its negative: backward, else sideways).
GAIT_SPEEDS = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0)
GAIT_DIRECTIONS = ("forward", "side", "backward")
GAIT_FORWARD_COS = 0.7
GAIT_BINS = 1 + len(GAIT_SPEEDS) * len(GAIT_DIRECTIONS)
# A bin with fewer of the actor's frames than this borrows the nearest speed band of the same direction
# (the jlpm22 actor walks backward at most ~1.5 m/s: 66 frames at 1-1.5 m/s, 32 above), else the band's
# pooled directions: a 1st-99th percentile of fewer frames is their extremes.
GAIT_MIN_FRAMES = 100
GAIT_QUANTILES = np.linspace(0.0, 100.0, 21)
GAIT_KEYS = ("knee_deg", "knee_actor_deg", "knee_gap_deg", "outside_source")


def posture_joints(roles: dict[str, int]) -> list[int]:
    """Joint indices of POSTURE_ROLES in a database with these roles."""
    return [roles[r] for r in POSTURE_ROLES]


def _angle_deg(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    c = (u * v).sum(-1) / np.maximum(np.linalg.norm(u, axis=-1) * np.linalg.norm(v, axis=-1), 1e-12)
    return np.degrees(np.arccos(np.clip(c, -1.0, 1.0)))


def knee_angles_deg(p: np.ndarray) -> np.ndarray:
    """(F, 2) left and right knee angles (degrees, 180 = straight leg) from posture positions (F, K, 3)."""
    return np.stack([_angle_deg(p[:, hip] - p[:, knee], p[:, foot] - p[:, knee])
                     for hip, knee, foot in ((_LUL, _LLL, _LF), (_RUL, _RLL, _RF))], axis=1)


def trunk_lean_deg(p: np.ndarray) -> np.ndarray:
    """(F,) angle (degrees) between world up and the hips-to-head line; 0 = upright."""
    return _angle_deg(p[:, _HEAD] - p[:, _HIPS], np.array([0.0, 1.0, 0.0]))


def hand_spread_cm(p: np.ndarray) -> np.ndarray:
    """(F,) distance (cm) between the hands along the body's left-right axis (the horizontal direction
    from the right to the left upper-leg joint); negative when the hands cross."""
    across = (p[:, _LUL] - p[:, _RUL]) * np.array([1.0, 0.0, 1.0])
    across /= np.maximum(np.linalg.norm(across, axis=1, keepdims=True), 1e-12)
    return ((p[:, _LH] - p[:, _RH]) * across).sum(1) * 100.0


def planted_toe_heights_cm(toes: list[np.ndarray], fps: float, floors=None) -> np.ndarray:
    """Heights (cm) of the toes (each (F, 3)) above the floor over the frames they are planted: slower
    than metrics.CONTACT_SPEED horizontally (foot sliding's contact speed; its height test, against a floor
    estimated from the motion, would hide a hovering foot). floors: per toe the floor height (F,) under
    it (the terrain), None for y = 0."""
    out = []
    for i, t in enumerate(toes):
        planted = np.linalg.norm(np.diff(t[:, [0, 2]], axis=0), axis=1) * fps < CONTACT_SPEED
        floor = 0.0 if floors is None else np.asarray(floors[i])[1:][planted]
        out.append((t[1:, 1][planted] - floor) * 100.0)
    return np.concatenate(out) if out else np.zeros(0)


def _median(x) -> float | None:
    return round(float(np.median(x)), 3) if len(x) else None


def posture_figures(p: np.ndarray, root_speed: np.ndarray, toe_heights_cm: np.ndarray, bounds: dict) -> dict:
    """The `posture` dictionary of metrics.json: p (F, K, 3) posture positions, root_speed (F,) m/s
    horizontal, toe_heights_cm from planted_toe_heights_cm, bounds the source's
    {"trunk_lean_deg": (lo, hi), "hand_spread_cm": (lo, hi)} (source_posture). A figure with no frame to
    take it from (no moving frame, no contact) is None."""
    knees = knee_angles_deg(p)[np.asarray(root_speed) > MOVING_SPEED]
    lean = trunk_lean_deg(p)
    spread = hand_spread_cm(p)
    lo, hi = bounds["trunk_lean_deg"]
    slo, shi = bounds["hand_spread_cm"]
    outside = (lean < lo) | (lean > hi) | (spread < slo) | (spread > shi)
    return {"knee_deg": _median(knees.ravel()),
            "planted_toe_cm": _median(toe_heights_cm),
            "trunk_lean_deg": {"median": _median(lean), "p95": round(float(np.percentile(lean, 95)), 3)},
            "outside_source": round(float(outside.mean()), 4) if len(outside) else None}


def gait_bins(p: np.ndarray, root_vel: np.ndarray) -> np.ndarray:
    """(F,) gait bin of each frame (GAIT_BINS: 0 standing, else 1 + speed band * 3 + direction) from
    posture positions (F, K, 3) and the root's velocity (F, 3) m/s; the facing is the horizontal normal
    of the line between the upper-leg joints."""
    v = np.asarray(root_vel, dtype=np.float64)[:, [0, 2]]
    speed = np.linalg.norm(v, axis=1)
    left = (p[:, _LUL] - p[:, _RUL])[:, [0, 2]]
    forward = np.stack([-left[:, 1], left[:, 0]], axis=1)      # left x up, on the ground plane (x, z)
    cos = (v * forward).sum(1) / np.maximum(speed * np.linalg.norm(forward, axis=1), 1e-12)
    direction = np.where(cos > GAIT_FORWARD_COS, 0, np.where(cos < -GAIT_FORWARD_COS, 2, 1))
    band = np.searchsorted(GAIT_SPEEDS, speed, side="right") - 1
    return np.where(speed > MOVING_SPEED, 1 + np.maximum(band, 0) * len(GAIT_DIRECTIONS) + direction, 0)


def travel_velocity(hips: np.ndarray, fps: float) -> np.ndarray:
    """(F, 3) velocity of the hips positions (F, 3) averaged over 0.5 s (their units per second): the
    travel without the hips' sway within a step, for gait_bins (which reads it in m/s): a clip has no
    simulation bone yet when it is retargeted."""
    v = np.diff(hips, axis=0, prepend=hips[:1]) * fps
    n = max(int(round(0.5 * fps)) | 1, 1)
    kernel = np.ones(n) / n
    pad = np.pad(v, ((n // 2, n // 2), (0, 0)), mode="edge")
    return np.stack([np.convolve(pad[:, i], kernel, mode="valid") for i in range(3)], axis=1)


def gait_stand_in(bins: np.ndarray, b: int) -> np.ndarray:
    """Bool (F,): the frames (of gait bins `bins` (F,)) that stand for gait bin b: its own, else, when it
    has fewer than GAIT_MIN_FRAMES, the nearest speed band's of the same direction, else the band's pooled
    directions, else every moving frame (every frame when there is none)."""
    counts = np.bincount(bins, minlength=GAIT_BINS)
    nd = len(GAIT_DIRECTIONS)
    m = bins == b
    if b != 0 and counts[b] < GAIT_MIN_FRAMES:
        band, d = divmod(b - 1, nd)
        near = [o for o in sorted(range(len(GAIT_SPEEDS)), key=lambda o: (abs(o - band), o))
                if counts[1 + o * nd + d] >= GAIT_MIN_FRAMES]
        pooled = (bins >= 1 + band * nd) & (bins < 1 + (band + 1) * nd)
        m = bins == 1 + near[0] * nd + d if near else pooled if pooled.sum() >= GAIT_MIN_FRAMES else bins > 0
    return m if m.any() else np.ones(len(bins), bool)     # a clip set that never stands or never moves


def gait_source(p: np.ndarray, bins: np.ndarray) -> list[dict]:
    """Per gait bin the actor's knee angle quantiles (GAIT_QUANTILES, both legs, moving bins only) and
    1st-99th percentile ranges of trunk lean and hand spread, from the bin's frames or its stand-in's
    (GAIT_MIN_FRAMES); `frames`: the frames of the bin itself."""
    knees, lean, spread = knee_angles_deg(p), trunk_lean_deg(p), hand_spread_cm(p)
    counts = np.bincount(bins, minlength=GAIT_BINS)
    out = []
    for b in range(GAIT_BINS):
        m = gait_stand_in(bins, b)
        out.append({"frames": int(counts[b]),
                    "knee_deg": [round(float(x), 2) for x in np.percentile(knees[m].ravel(), GAIT_QUANTILES)],
                    "trunk_lean_deg": [float(x) for x in np.percentile(lean[m], OUTSIDE_PERCENTILES)],
                    "hand_spread_cm": [float(x) for x in np.percentile(spread[m], OUTSIDE_PERCENTILES)]})
    return out


def gait_figures(p: np.ndarray, root_vel: np.ndarray, gaits: list[dict]) -> dict:
    """The `posture_gait` dictionary of metrics.json: the output's moving knee angle (`knee_deg`, as
    posture's), the main actor's at the same gaits (`knee_actor_deg`: the median of the actor's knee
    angles per gait bin, weighed by the output's moving frames in each bin), their difference
    (`knee_gap_deg`, output minus actor) and `outside_source`, the share of frames whose trunk lean or
    hand spread lies outside the actor's 1st-99th percentile at the frame's gait. p (F, K, 3),
    root_vel (F, 3) m/s, gaits the source's per-bin entries (source_posture()["gaits"])."""
    bins = gait_bins(p, root_vel)
    knees = knee_angles_deg(p)[bins > 0].ravel()
    counts = np.bincount(bins, minlength=GAIT_BINS)
    actor = None
    if counts[1:].sum():
        values = np.concatenate([gaits[b]["knee_deg"] for b in range(1, GAIT_BINS)])
        weights = np.repeat(counts[1:] / len(GAIT_QUANTILES), len(GAIT_QUANTILES))
        order = np.argsort(values)
        cum = np.cumsum(weights[order])
        actor = round(float(values[order][np.searchsorted(cum, 0.5 * cum[-1])]), 3)
    lean, spread = trunk_lean_deg(p), hand_spread_cm(p)
    bound = lambda k, i: np.array([g[k][i] for g in gaits])[bins]
    outside = ((lean < bound("trunk_lean_deg", 0)) | (lean > bound("trunk_lean_deg", 1))
               | (spread < bound("hand_spread_cm", 0)) | (spread > bound("hand_spread_cm", 1)))
    knee = _median(knees)
    return {"knee_deg": knee, "knee_actor_deg": actor,
            "knee_gap_deg": None if knee is None or actor is None else round(knee - actor, 3),
            "outside_source": round(float(outside.mean()), 4) if len(outside) else None}


def main_actor_ranges(db) -> np.ndarray:
    """Clip ranges of the database's main actor: the clips sharing the `source:` tag of the clip built
    from the skeleton file (the mixed default database: the jlpm22 takes), else, with several sources,
    of the source with the most frames; every clip when the database has one source or none."""
    sources = [next((t for t in tags if t.startswith("source:")), None) for tags in db.range_tags]
    names = set(sources) - {None}
    if len(names) <= 1:
        return np.arange(len(db.range_starts))
    skeleton = (db.meta.get("settings") or {}).get("skeleton")
    main = None
    if skeleton:
        stem = skeleton.replace("\\", "/").rsplit("/", 1)[-1]
        main = next((s for n, s in zip(db.range_names, sources) if n == stem), None)
    if main is None:
        lengths = db.range_stops - db.range_starts
        main = max(sorted(names), key=lambda s: sum(int(n) for n, t in zip(lengths, sources) if t == s))
    return np.flatnonzero([s == main for s in sources])


def _measure_source(db) -> dict:
    ranges = main_actor_ranges(db)
    if len(ranges) > SOURCE_MAX_CLIPS:
        ranges = ranges[np.linspace(0, len(ranges) - 1, SOURCE_MAX_CLIPS).round().astype(int)]
    joints = posture_joints(db.roles)
    toes = [db.roles["left_toe"], db.roles["right_toe"]]
    ps, vels, heights = [], [], []
    for r in ranges:
        gp, _ = db.global_transforms(slice(int(db.range_starts[r]), int(db.range_stops[r])))
        ps.append(gp[:, joints])
        v = np.diff(gp[:, 0], axis=0) * db.fps
        vels.append(np.r_[v[:1], v])
        heights.append(planted_toe_heights_cm([gp[:, t] for t in toes], db.fps))
    p, vel = np.concatenate(ps), np.concatenate(vels)
    lean, spread = trunk_lean_deg(p), hand_spread_cm(p)
    bounds = {"trunk_lean_deg": [float(x) for x in np.percentile(lean, OUTSIDE_PERCENTILES)],
              "hand_spread_cm": [float(x) for x in np.percentile(spread, OUTSIDE_PERCENTILES)]}
    clips = sorted({t for r in ranges for t in db.range_tags[r] if t.startswith("source:")})
    return {"version": SOURCE_VERSION, "clips": clips or ["all"], "bounds": bounds,
            "figures": posture_figures(p, np.linalg.norm(vel[:, [0, 2]], axis=1), np.concatenate(heights), bounds),
            "gaits": gait_source(p, gait_bins(p, vel))}


def source_posture(db) -> dict:
    """{"figures": the main actor's `posture_source` dictionary, "bounds": its 1st-99th percentile ranges
    of trunk lean and hand spread, "gaits": the same per gait bin (gait_figures), "clips": the source
    tags measured}. Stored at build (meta
    "posture_source"); measured here, on up to 60 of the main actor's clips, for a database built before
    that or before the definitions last changed (and kept in db.meta)."""
    if not _well_formed(db.meta.get("posture_source")):
        db.meta["posture_source"] = _measure_source(db)
    return db.meta["posture_source"]


def _well_formed(got) -> bool:
    """A stored entry of this version whose bounds are two finite numbers each (a file's meta is not
    trusted: anything else is measured again)."""
    try:
        return got["version"] == SOURCE_VERSION and set(got["figures"]) == set(POSTURE_KEYS) and all(
            len(got["bounds"][k]) == 2 and np.isfinite(np.asarray(got["bounds"][k], dtype=float)).all()
            for k in ("trunk_lean_deg", "hand_spread_cm")) and len(got["gaits"]) == GAIT_BINS and all(
            np.isfinite(np.asarray(g[k], dtype=float)).all() and len(g[k]) == n
            for g in got["gaits"] for k, n in (("knee_deg", len(GAIT_QUANTILES)), ("trunk_lean_deg", 2),
                                               ("hand_spread_cm", 2)))
    except (KeyError, TypeError, ValueError):
        return False


def frame_posture(db, gp: np.ndarray) -> dict:
    """One output frame's posture for the app's graphs (JSON-ready): `knee_deg`, the mean of both knee
    angles (as knee_angles_deg), and `knee_source_deg`, the main actor's moving median (source_posture);
    gp (J, 3) global joint positions of a character on `db`. Plain floats: the app calls it every frame."""
    r = db.roles
    legs = np.asarray(gp)[[r["left_upper_leg"], r["left_lower_leg"], r["left_foot"],
                           r["right_upper_leg"], r["right_lower_leg"], r["right_foot"]]].tolist()
    total = 0.0
    for hip, knee, foot in (legs[:3], legs[3:]):
        u = [a - b for a, b in zip(hip, knee)]
        v = [a - b for a, b in zip(foot, knee)]
        c = sum(a * b for a, b in zip(u, v)) / max(math.hypot(*u) * math.hypot(*v), 1e-12)
        total += math.degrees(math.acos(min(max(c, -1.0), 1.0)))
    return {"knee_deg": round(total / 2.0, 2), "knee_source_deg": source_posture(db)["figures"]["knee_deg"]}
