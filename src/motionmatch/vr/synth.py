"""VR synthesis (seed 002, chapter 4): a tracker stream drives a motion-matched character offline.

The body comes from motion matching steered by a VRDriver (the HMD's smoothed floor velocity, the
network's smoothed body facing); each output pose then gets the thesis's touch-ups: the root clamped
within alpha metres of the HMD's floor projection, the arms reaching the controllers (the chest
leaning when they are out of reach), the head turned to the HMD. Writes what `synth` writes
(motion.bvh, metrics.json, trajectory.png) with the VR errors added to metrics.json.
Metres, seconds, quaternions (w, x, y, z), Y up, yaw 0 faces +Z.
"""
from __future__ import annotations

import fnmatch
import json
from pathlib import Path

import numpy as np

from ..motion.animation import Animation
from ..maths.kinematics import forward_kinematics
from ..maths.rotations import quat_rotate
from ..offline.scenario import Scenario
from ..offline.synth import synthesize
from .driver import VRDriver, VRDriverSettings, facing_yaw, vr_character_settings
from .orientation import angle_error_deg, load_networks
from .trackers import REFERENCE_PATTERNS, TrackerSettings, device_calibration, read_trackers
from .upper_body import (ROOT_ALPHA_LOOSE, ROOT_ALPHA_RANGE, arm_chain, clamp_root, device_targets,
                         hmd_floor_target, lean_head, reach_arms, turn_head)
from ..search import TagExpressionError, frame_mask
from ..files.input_bounds import finite_number

# Arms within this fraction of their length count as reaching their controller (reach_arms' buffer).
REACH_BUFFER = 0.01


def database_calibration(db) -> np.ndarray:
    """device_calibration (3, 4) of the database's skeleton, measured on its first neutral walk clip
    (the name patterns of trackers.calibration_reference), else on its first clip."""
    names = [n.lower() for n in db.range_names]
    r = next((i for pat in REFERENCE_PATTERNS for i, n in enumerate(names) if fnmatch.fnmatch(n, pat)), 0)
    sl = slice(int(db.range_starts[r]), int(db.range_stops[r]))
    anim = Animation(db.skeleton, np.asarray(db.positions[sl], np.float64), np.asarray(db.rotations[sl], np.float64),
                     db.fps)
    return device_calibration(anim, db.roles)


def check_height_databases(db, settings: VRDriverSettings) -> None:
    """Refuse height databases whose tag filters are not valid expressions or match no clip of db."""
    for low, high, expr in settings.height_databases:
        if expr is None:
            continue
        try:
            mask = frame_mask(expr, db.range_tags, db.range_starts, db.range_stops, db.num_frames)
        except (TagExpressionError, ValueError) as exc:
            raise ValueError(f"height database {low:g}-{high:g} (tag filter {expr!r}): {exc}") from None
        if not mask.any():
            raise ValueError(f"height database {low:g}-{high:g}: no clip of the database matches the tag filter "
                             f"{expr!r} (tags here: {', '.join(sorted(db.known_tags))})")


class VRTouchUp:
    """The per-frame touch-up of run_scenario (root clamp, spine, arm IK, head) that also switches
    the character's tag filter to the driver's height database (VRDriver.tag_filter; the change forces
    a search, as the thesis does) and measures, per frame, the head and hand distances to the devices
    and, with ground truth, the root and facing errors."""

    def __init__(self, db, driver: VRDriver, calibration, truth=None, hmd_offset=TrackerSettings.hmd_offset):
        check_height_databases(db, driver.settings)
        self.db, self.driver, self.calibration, self.truth = db, driver, calibration, truth
        self.own_filter: str | None = None        # the character's tag filter before any switch
        self.switched = False
        self.parents = np.asarray(db.skeleton.parents)
        self.hmd_offset = np.asarray(hmd_offset, np.float64)
        self.arms = [arm_chain(self.parents, db.roles, side) for side in ("left", "right")]
        self.head_cm, self.hand_cm, self.reachable, self.root_cm, self.facing_deg = [], [], [], [], []

    def __call__(self, ch, k, local_pos, local_rot):
        d, roles = self.driver, self.db.roles
        if d.database is not None:
            if not self.switched:
                self.own_filter = ch.settings.tag_filter
            want = d.tag_filter(self.own_filter)
            if want != ch.settings.tag_filter:
                ch.set_tag_filter(want)
            self.switched = want != self.own_filter
        pos, rot = d.state.positions, d.state.rotations
        root = clamp_root(ch.root_pos, d.target(), d.settings.alpha)
        lp = np.array(local_pos, np.float64)
        lp[0, [0, 2]] += root[[0, 2]] - ch.root_pos[[0, 2]]
        ch.root_pos[:] = root            # the next frame continues from the clamped root
        hand_pos, hand_rot, head_rot = device_targets(pos, rot, self.calibration)
        head = pos[0] - quat_rotate(rot[0], self.hmd_offset)
        lr = lean_head(lp, np.asarray(local_rot, np.float64), self.parents, roles, head)
        lr = reach_arms(lp, lr, self.parents, roles, hand_pos, hand_rot, buffer=REACH_BUFFER)
        lr = turn_head(lp, lr, self.parents, roles, head_rot)
        gp = forward_kinematics(lp[None], lr[None], self.parents)[0][0]
        self.head_cm.append(100.0 * np.linalg.norm(gp[roles["head"]] - head))
        for i, (upper, lower, hand) in enumerate(self.arms):
            length = np.linalg.norm(gp[lower] - gp[upper]) + np.linalg.norm(gp[hand] - gp[lower])
            self.hand_cm.append(100.0 * np.linalg.norm(gp[hand] - hand_pos[i]))
            self.reachable.append(np.linalg.norm(hand_pos[i] - gp[upper]) <= length * (1 - REACH_BUFFER))
        if self.truth is not None:
            f = d.index
            self.root_cm.append(100.0 * np.linalg.norm(root[[0, 2]] - self.truth.root_position[f, [0, 2]]))
            self.facing_deg.append(float(angle_error_deg(ch.facing_yaw, self.truth.facing_yaw[f])))
        return lp, lr, gp

    def metrics(self) -> dict:
        """root_error_cm / orientation_error_deg (mean, p95; with ground truth), head_error_cm,
        hand_error_cm (mean, max over all hands) and hand_error_reachable_cm (hands whose controller
        was within the arm's reach after leaning) with reachable_fraction."""
        def stats(x, keys):
            x = np.asarray(x, np.float64)
            if not len(x):
                return None
            f = {"mean": np.mean, "max": np.max, "p95": lambda v: np.percentile(v, 95)}
            return {k: round(float(f[k](x)), 3) for k in keys}
        hand, ok = np.asarray(self.hand_cm), np.asarray(self.reachable, bool)
        out = {"head_error_cm": stats(self.head_cm, ("mean", "max")),
               "hand_error_cm": stats(hand, ("mean", "max")),
               "hand_error_reachable_cm": stats(hand[ok], ("mean", "max")),
               "reachable_fraction": round(float(ok.mean()), 4) if len(ok) else None}
        if self.driver.database is not None:
            out["database_switches"] = self.driver.switches
        if self.truth is not None:
            out["root_error_cm"] = stats(self.root_cm, ("mean", "p95"))
            out["orientation_error_deg"] = stats(self.facing_deg, ("mean", "p95"))
        return out


def synthesize_vr(db, trackers, model, out_dir, settings=None, alpha: float = ROOT_ALPHA_LOOSE,
                  progress: bool = True, controller_settings=None, height_databases: tuple = ()) -> dict:
    """Animate the database's character from a tracker file (trackers.read_trackers: JSON, CSV, or a
    BVH clip the devices are simulated from, with ground truth), or a (TrackerStream, BodyTruth or
    None) pair, and the body-orientation model file;
    write out_dir/motion.bvh, metrics.json, trajectory.png and return the metrics. alpha: root clamp
    radius in metres (the thesis's 0.1 or 0.3); height_databases: VRDriverSettings.height_databases."""
    finite_number(alpha, ValueError, "alpha (the root clamp radius, m)", *ROOT_ALPHA_RANGE)
    check_height_databases(db, VRDriverSettings(height_databases=height_databases))
    stream, truth = read_trackers(trackers) if isinstance(trackers, (str, Path)) else trackers
    if stream.num_frames < 2:
        raise ValueError(f"{stream.source or trackers}: expected at least two tracker frames")
    network = load_networks(model)["network"]
    driver = VRDriver(stream, network, VRDriverSettings(alpha=alpha, height_databases=height_databases))
    start = (hmd_floor_target(stream.positions[0, 0], stream.rotations[0, 0]), facing_yaw(driver.state.facing))
    touch_up = VRTouchUp(db, driver, database_calibration(db), truth)
    scenario = Scenario(duration=(stream.num_frames - 1) / stream.fps, description="VR trackers")
    settings = settings if settings is not None else vr_character_settings()
    metrics = synthesize(db, scenario, out_dir, settings, progress, controller_settings=controller_settings,
                         driver=driver, start=start, touch_up=touch_up)
    metrics.update(touch_up.metrics())
    (Path(out_dir) / "metrics.json").write_text(json.dumps(metrics, indent=1))
    return metrics
