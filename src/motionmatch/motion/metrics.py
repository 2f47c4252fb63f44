"""Quality metrics of synthesized motion (definitions in the README, section "Metrics").

All inputs in metres, seconds, radians; outputs in the units their keys name (cm, cm/s, degrees, us).
Contact for foot sliding is decided on the motion itself, the same way for output and source: a toe
within `CONTACT_HEIGHT` of the local floor (5th percentile of its height over a 2 s window, which
follows the vertical drift of some captures) and slower than `CONTACT_SPEED`. On terrain the floor is
the terrain's height plus the height at which the database's toe joints rest when planted
(`toe_floor_m`, measured on its clips): the toe joint sits inside the foot, ~0 cm up in jlpm22, 4-5 cm
in Bandai-Namco, so a fixed height above the terrain would see no contacts on some rigs.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.ndimage import percentile_filter

from .preprocess import planted_toe_height_m

CONTACT_HEIGHT = 0.03      # m
CONTACT_SPEED = 0.5        # m/s
RESPONSE_ANGLE_DEG = 15.0
RESPONSE_SPEED_FRACTION = 0.2
STOP_SPEED = 0.15          # m/s: "within 20 %" of a zero desired speed means below this


def toe_contacts(toe_pos: np.ndarray, fps: float, ground: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(contact (F-1,) bool, horizontal speed (F-1,) m/s) of one toe trajectory (F,3).

    ground: terrain height under the toe per frame (F,), or None for the local-floor estimate.
    """
    v = np.linalg.norm(np.diff(toe_pos[:, [0, 2]], axis=0), axis=1) * fps
    if ground is None:
        win = max(3, int(round(2.0 * fps)))
        floor = percentile_filter(toe_pos[:, 1], 5, size=min(win, len(toe_pos)), mode="nearest")
    else:
        floor = ground
    h = (toe_pos[:, 1] - floor)[1:]
    return (h < CONTACT_HEIGHT) & (v < CONTACT_SPEED), v


def toe_floor_m(db) -> float:
    """Height (m) above the terrain at which the database's toe joints rest when planted
    (preprocess.planted_toe_height_m), not below 0: on terrain the leg IK keeps toes out of the ground."""
    return max(0.0, planted_toe_height_m(db))


def foot_sliding_cm_s(toes: list[np.ndarray], fps: float, grounds=None) -> float:
    """Mean horizontal speed (cm/s) of the toes over the frames they are in contact, both feet."""
    speeds = []
    for i, t in enumerate(toes):
        c, v = toe_contacts(t, fps, None if grounds is None else grounds[i])
        speeds.append(v[c])
    s = np.concatenate(speeds) if speeds else np.zeros(0)
    return float(s.mean() * 100.0) if len(s) else 0.0


def source_foot_sliding_cm_s(db, max_clips: int = 60, allowed_ranges=None) -> float:
    """The same figure on the database's own motion (the baseline), over up to `max_clips` clips
    spread evenly over the database (restricted to `allowed_ranges` when given)."""
    ranges = np.arange(len(db.range_starts)) if allowed_ranges is None else np.asarray(allowed_ranges)
    if len(ranges) > max_clips:
        ranges = ranges[np.linspace(0, len(ranges) - 1, max_clips).round().astype(int)]
    toes = [db.roles["left_toe"], db.roles["right_toe"]]
    speeds = []
    for r in ranges:
        gp, _ = db.global_transforms(slice(int(db.range_starts[r]), int(db.range_stops[r])))
        for t in toes:
            c, v = toe_contacts(gp[:, t], db.fps)
            speeds.append(v[c])
    s = np.concatenate(speeds) if speeds else np.zeros(0)
    return float(s.mean() * 100.0) if len(s) else 0.0


def _stats(x: np.ndarray, keys=("mean", "p95", "max")) -> dict:
    x = np.asarray(x, dtype=np.float64)
    if len(x) == 0:
        return {k: 0.0 for k in keys}
    out = {}
    for k in keys:
        if k == "mean":
            out[k] = float(x.mean())
        elif k == "max":
            out[k] = float(x.max())
        elif k == "median":
            out[k] = float(np.median(x))
        else:
            out[k] = float(np.percentile(x, float(k[1:])))
    return {k: round(v, 3) for k, v in out.items()}


def responsiveness_s(change_frames: list[int], desired_vel: np.ndarray, root_vel: np.ndarray, fps: float):
    """Mean time (s) after each input change until the root velocity matches the new desired
    velocity: direction within 15 degrees and speed within 20 % (below STOP_SPEED for a stop).
    A change never matched before the next change (or the end) counts the whole interval.
    None when there is no change."""
    if not change_frames:
        return None
    times = []
    F = len(root_vel)
    bounds = list(change_frames) + [F]
    for k, f0 in enumerate(change_frames):
        f1 = min(bounds[k + 1], F)
        if f1 <= f0:
            continue
        want = desired_vel[min(f0 + 1, F - 1)]
        ws = float(np.linalg.norm(want[[0, 2]]))
        v = root_vel[f0:f1][:, [0, 2]]
        speed = np.linalg.norm(v, axis=1)
        if ws < 0.1:
            ok = speed < STOP_SPEED
        else:
            cosang = (v @ want[[0, 2]]) / np.maximum(speed * ws, 1e-9)
            ok = (cosang >= math.cos(math.radians(RESPONSE_ANGLE_DEG))) & \
                 (np.abs(speed - ws) <= RESPONSE_SPEED_FRACTION * ws)
        hit = np.flatnonzero(ok)
        times.append((hit[0] if len(hit) else f1 - f0) / fps)
    return round(float(np.mean(times)), 3) if times else None


def velocity_ok(desired_vel: np.ndarray, root_vel: np.ndarray) -> np.ndarray:
    """Per frame (T,) bool: the root velocity within 15 degrees and 20 % of the desired velocity (both
    (T, 3) m/s, ground plane x-z), or below STOP_SPEED where less than 0.1 m/s is desired."""
    want, v = desired_vel[:, [0, 2]], root_vel[:, [0, 2]]
    ws, speed = np.linalg.norm(want, axis=1), np.linalg.norm(v, axis=1)
    cosang = (v * want).sum(1) / np.maximum(speed * ws, 1e-9)
    moving = (cosang >= math.cos(math.radians(RESPONSE_ANGLE_DEG))) & \
             (np.abs(speed - ws) <= RESPONSE_SPEED_FRACTION * np.maximum(ws, 1e-9))
    return np.where(ws < 0.1, speed < STOP_SPEED, moving)


def _held_ranges(change_frames: list[int], F: int, fps: float, settle_s: float):
    """(a, b) frame ranges of the held inputs after their first settle_s seconds (10 frames or more)."""
    bounds = list(change_frames) + [F]
    for k, f0 in enumerate(change_frames):
        a, b = f0 + int(round(settle_s * fps)), min(bounds[k + 1], F)
        if b - a >= 10:
            yield a, b


def _mean_min(fr: list[float]) -> dict:
    return {"mean": round(float(np.mean(fr)), 3), "min": round(float(np.min(fr)), 3)}


def tracking(change_frames: list[int], desired_vel: np.ndarray, root_vel: np.ndarray, facing_err_deg: np.ndarray,
             fps: float, settle_s: float = 0.4) -> dict | None:
    """For each held input (from a change to the next), skipping its first `settle_s` seconds: the
    fraction of frames whose root velocity is within 15 degrees and 20 % of the desired velocity
    (`velocity`), and whose facing is within 20 degrees of the desired facing (`facing`).
    Mean and minimum over held inputs; None without changes."""
    if not change_frames:
        return None
    ok = velocity_ok(desired_vel, root_vel)
    held = list(_held_ranges(change_frames, len(root_vel), fps, settle_s))
    if not held:
        return None
    return {"velocity": _mean_min([ok[a:b].mean() for a, b in held]),
            "facing": _mean_min([(facing_err_deg[a:b] <= 20.0).mean() for a, b in held])}


def backward_tracking(change_frames: list[int], desired_vel: np.ndarray, root_vel: np.ndarray,
                      desired_yaw: np.ndarray, fps: float, settle_s: float = 0.4) -> dict | None:
    """Velocity tracking (as in `tracking`) of the held inputs asking to travel backward (the desired
    velocity more than 90 degrees from the desired facing yaw (T,) radians; starts from standing
    included): `travel`, and of the stops right after them: `stops`; each mean, min and `held_inputs`,
    or None when there is none. None when there is neither."""
    ok = velocity_ok(desired_vel, root_vel)
    along = desired_vel[:, 0] * np.sin(desired_yaw) + desired_vel[:, 2] * np.cos(desired_yaw)
    speed = np.linalg.norm(desired_vel[:, [0, 2]], axis=1)
    travel, stops, after_backward = [], [], False
    for a, b in _held_ranges(change_frames, len(root_vel), fps, settle_s):
        backward = bool(np.median(along[a:b]) < -0.1)
        if backward:
            travel.append(ok[a:b].mean())
        elif after_backward and np.median(speed[a:b]) < 0.1:
            stops.append(ok[a:b].mean())
        after_backward = backward
    if not travel and not stops:
        return None
    return {key: {**_mean_min(fr), "held_inputs": len(fr)} if fr else None
            for key, fr in (("travel", travel), ("stops", stops))}


SHOULDER_FACING_DEG = 25.0


def _line_yaw(gpos: np.ndarray, left: int, right: int) -> np.ndarray:
    """Yaw (radians) of the body facing across the line from joint `right` to joint `left` (a body
    facing +Z has its left side at +X; yaw 0 faces +Z)."""
    across = gpos[:, left] - gpos[:, right]
    # forward = across x up, on the ground: (-across_z, 0, across_x)
    return np.arctan2(-across[:, 2], across[:, 0])


def shoulder_facing_yaw(gpos: np.ndarray, shoulders: tuple[int, int]) -> np.ndarray:
    """The displayed facing measured on the upper body: yaw (radians, 0 faces +Z) of the shoulder line
    (left, right shoulder joints, e.g. skeleton.shoulder_joints) per frame of global positions (T, J, 3)."""
    return _line_yaw(gpos, *shoulders)


def twist_deg(gpos: np.ndarray, hips: tuple[int, int], shoulders: tuple[int, int]) -> np.ndarray:
    """Pelvis-to-shoulder twist per frame: absolute yaw (degrees, 0..180) between the hip line (left,
    right upper-leg joints) and the shoulder line (left, right shoulder joints), from global positions
    (T, J, 3). Self-contained so it can be fed a whole clip or a stream of frames."""
    d = _line_yaw(gpos, *shoulders) - _line_yaw(gpos, *hips)
    return np.degrees(np.abs(np.remainder(d + np.pi, 2 * np.pi) - np.pi))


def held_fraction(change_frames: list[int], ok: np.ndarray, fps: float, settle_s: float = 0.4) -> dict | None:
    """For each held input (from a change to the next, skipping its first `settle_s` seconds), the
    fraction of frames where `ok` (T,) bool holds; mean and min over held inputs; None without changes."""
    F = len(ok)
    bounds = list(change_frames) + [F]
    fr = []
    for k, f0 in enumerate(change_frames):
        a, b = f0 + int(round(settle_s * fps)), min(bounds[k + 1], F)
        if b - a >= 10:
            fr.append(float(ok[a:b].mean()))
    if not fr:
        return None
    return {"mean": round(float(np.mean(fr)), 3), "min": round(float(np.min(fr)), 3)}


def compute_metrics(rec: dict, fps: float, source_sliding: float, change_frames: list[int]) -> dict:
    """The metrics.json dictionary from a synthesis record (see synth.run_scenario: it needs only the
    light per-frame arrays, never the poses)."""
    F = len(rec["root_pos"])
    nan_frames = int(np.count_nonzero(rec["nan"]))
    diff = rec["root_pos"][:, [0, 2]] - rec["sim_pos"][:, [0, 2]]
    traj = np.linalg.norm(diff, axis=1) * 100.0
    heading = np.degrees(np.abs(np.remainder(rec["root_yaw"] - rec["sim_yaw"] + np.pi, 2 * np.pi) - np.pi))
    toes = [rec["toe_positions"][:, i] for i in range(2)]
    grounds = rec.get("toe_ground")
    if grounds is not None:     # where a planted toe joint sits over the terrain
        grounds = [g + rec.get("toe_floor_m", 0.0) for g in grounds]
    search = np.asarray(rec["search_us"]) if len(rec["search_us"]) else np.zeros(1)
    out = {
        "frames": int(F),
        "fps": float(fps),
        "nan_frames": nan_frames,
        "foot_sliding_cm_s": round(foot_sliding_cm_s(toes, fps, grounds), 3),
        "foot_sliding_source_cm_s": round(float(source_sliding), 3),
        "trajectory_error_cm": _stats(traj),
        "heading_error_deg": _stats(heading, ("mean", "p95")),
        "responsiveness_s": responsiveness_s(change_frames, rec["desired_vel"], rec["root_vel"], fps),
        "transitions_per_s": round(rec["transitions"] / max(F / fps, 1e-9), 3),
        "search_us": _stats(search, ("median", "p99")),
        "frame_us": _stats(rec["frame_us"], ("median", "p99")),
    }
    if "desired_yaw" in rec:
        face_err = np.degrees(np.abs(np.remainder(rec["root_yaw"] - rec["desired_yaw"] + np.pi, 2 * np.pi) - np.pi))
        out["tracking"] = tracking(change_frames, rec["desired_vel"], rec["root_vel"], face_err, fps)
        out["backward_tracking"] = backward_tracking(change_frames, rec["desired_vel"], rec["root_vel"],
                                                     rec["desired_yaw"], fps)
    if "body_positions" in rec:   # (F, 4, 3): left/right hip, left/right shoulder
        body = rec["body_positions"]
        out["twist_deg"] = _stats(twist_deg(body, (0, 1), (2, 3)), ("p95", "max"))
        if "desired_yaw" in rec and change_frames:
            err = shoulder_facing_yaw(body, (2, 3)) - rec["desired_yaw"]
            err = np.degrees(np.abs(np.remainder(err + np.pi, 2 * np.pi) - np.pi))
            out["shoulder_facing"] = held_fraction(change_frames, err <= SHOULDER_FACING_DEG, fps)
    if grounds is not None:
        out.update(terrain_metrics(toes, grounds, fps, rec.get("foot_ground")))
    out.update(request_metrics(rec.get("requests", ())))
    return out


def request_metrics(log) -> dict:
    """From a run's request log (runtime/requests.py): "event_timing_ms" {"mean", "max" (absolute error of
    delivered vs requested event time, ms), "count", "missed"} when actions were requested, and
    "stop_at_error_cm" {"mean", "max" (rest point vs asked point, cm), "count", "not_at_rest"} when stops were,
    "plant_at_error_cm" {"mean", "max" (planted foot vs asked point, cm), "count", "not_planted"} when foot plants
    were;
    a key is absent when no such request was made, and its mean/max are null when none was delivered."""
    out = {}
    actions = [r for r in log if r["kind"] == "action"]
    if actions:
        err = [abs(r["delivered_s"] - r["requested_s"]) * 1000.0 for r in actions if r["delivered_s"] is not None]
        out["event_timing_ms"] = {"mean": round(float(np.mean(err)), 3) if err else None,
                                  "max": round(float(np.max(err)), 3) if err else None,
                                  "count": len(actions), "missed": len(actions) - len(err)}
    stops = [r for r in log if r["kind"] == "stop_at"]
    if stops:
        err = [r["error_m"] * 100.0 for r in stops if r["error_m"] is not None]
        out["stop_at_error_cm"] = {"mean": round(float(np.mean(err)), 3) if err else None,
                                   "max": round(float(np.max(err)), 3) if err else None,
                                   "count": len(stops), "not_at_rest": len(stops) - len(err)}
    plants = [r for r in log if r["kind"] == "plant_at"]
    if plants:
        err = [r["error_m"] * 100.0 for r in plants if r["error_m"] is not None]
        out["plant_at_error_cm"] = {"mean": round(float(np.mean(err)), 3) if err else None,
                                    "max": round(float(np.max(err)), 3) if err else None,
                                    "count": len(plants), "not_planted": len(plants) - len(err)}
    return out


def terrain_metrics(toes, grounds, fps, foot_ground=None) -> dict:
    """foot_penetration_cm (mean and max depth of toes below the terrain, over frames where they are
    below) and foot_float_cm (mean height of the toes above the terrain while in contact)."""
    depth, floats = [], []
    for t, g in zip(toes, grounds):
        h = t[:, 1] - g
        depth.append(np.maximum(-h, 0.0))
        c, _ = toe_contacts(t, fps, g + 0.0)
        # Contact for floating: slow and within 5 cm (a floating foot is by definition above 3 cm).
        v = np.linalg.norm(np.diff(t[:, [0, 2]], axis=0), axis=1) * fps
        planted = (v < 0.2) & (h[1:] < 0.08)
        floats.append(np.maximum(h[1:][planted], 0.0))
    d = np.concatenate(depth) * 100.0
    fl = np.concatenate(floats) * 100.0
    return {"foot_penetration_cm": {"mean": round(float(d.mean()), 3), "max": round(float(d.max()), 3)},
            "foot_float_cm": {"mean": round(float(fl.mean()) if len(fl) else 0.0, 3),
                              "max": round(float(fl.max()) if len(fl) else 0.0, 3)}}



def joint_acceleration_p99(global_positions: np.ndarray, fps: float, frames=None) -> float:
    """99th percentile (m/s^2) of the joints' acceleration magnitudes, from second differences of
    global positions (F, J, 3) in metres, over the given frames (default: all frames with both
    neighbours; frames without them are left out)."""
    p = np.asarray(global_positions, dtype=np.float64)
    f = np.arange(1, len(p) - 1) if frames is None else np.unique(np.asarray(frames, dtype=np.int64))
    f = f[(f >= 1) & (f < len(p) - 1)]
    if not len(f):
        return 0.0
    acc = np.linalg.norm(p[f + 1] - 2.0 * p[f] + p[f - 1], axis=2) * fps * fps
    return float(np.percentile(acc, 99))
