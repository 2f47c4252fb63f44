"""Procedural warping of the matched animation: orientation, play rate and stride (seed 003,
"Procedural Touchups": rotation correction, timescale).

A database without strafing, backward walking or slow walks can still serve those requests if the
played animation is warped:

- Orientation warping. When the desired facing and the travel direction differ, the matcher is asked
  for motion *facing the travel direction* (`orientation_query_rotations`), so it finds forward
  walking that goes the right way. The character root then faces the travel direction; the pose warp
  (`warp_pose_orientation`) keeps the legs on it and gives the turn back first at the hip joints (the
  pelvis turns toward the desired facing against the legs), then along the spine chain, each within a
  human range (`twist_split`); what neither takes shows as the upper body lagging. Beyond a backward
  angle the query keeps a backward request (a backward clip is preferred when the data has one) and
  only the remainder is warped.
- Play rate and stride. When the clip's speed and the desired speed differ, the clip plays at a rate
  within bounds (`playback_rate`) and the rest of the ratio scales the stride (`stride_scale`; the
  touch-ups move the feet along the travel and the root's translation is scaled by the same factor so
  planted feet stay planted).

The per-character warp state is a row of a crowd's warp table (columns below). Conventions: metres,
seconds, radians; Y up; yaw 0 faces +Z, positive yaw turns +Z toward +X; quaternions (w, x, y, z).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numba
import numpy as np

from .settings_schema import defaults
from ..maths.springs import spring_exact

_TWO_PI = 2.0 * math.pi

_D = defaults("warp")


@dataclass
class WarpSettings:
    """Live-tunable warping settings (settings_schema.py: bounds, units, docs). Angles in degrees,
    speeds in m/s, times in seconds."""

    orientation: bool = _D["orientation"]
    orientation_limit_deg: float = _D["orientation_limit_deg"]
    hip_twist_limit_deg: float = _D["hip_twist_limit_deg"]
    spine_twist_limit_deg: float = _D["spine_twist_limit_deg"]
    side_step_angle_deg: float = _D["side_step_angle_deg"]
    side_step_backward_deg: float = _D["side_step_backward_deg"]
    backward_angle_deg: float = _D["backward_angle_deg"]
    orientation_halflife: float = _D["orientation_halflife"]
    min_travel_speed: float = _D["min_travel_speed"]
    play_rate: bool = _D["play_rate"]
    rate_min: float = _D["rate_min"]
    rate_max: float = _D["rate_max"]
    rate_share: float = _D["rate_share"]
    stride: bool = _D["stride"]
    stride_min: float = _D["stride_min"]
    stride_max: float = _D["stride_max"]
    speed_halflife: float = _D["speed_halflife"]
    stride_up_halflife: float = _D["stride_up_halflife"]
    timescale: bool = _D["timescale"]
    query_speed_floor: float = _D["query_speed_floor"]
    slope: bool = _D["slope"]
    slope_max_deg: float = _D["slope_max_deg"]
    spine_pitch: float = _D["spine_pitch"]
    spine_pitch_max_deg: float = _D["spine_pitch_max_deg"]
    hips_halflife: float = _D["hips_halflife"]


# ----------------------------------------------------------------------------------------------
# Orientation warping: the pose warp


def spine_chain(roles: dict, parents) -> np.ndarray:
    """Joint indices from the `spine` role up to the `chest` role (parent first): the joints that
    share the upper-body twist. Only the chest when there is no spine role (or it is not an ancestor)."""
    chest = roles["chest"]
    spine = roles.get("spine", chest)
    chain = [chest]
    j = chest
    while j != spine:
        j = int(parents[j])
        if j < 0:
            return np.array([chest], dtype=np.int64)
        chain.append(j)
    return np.array(chain[::-1], dtype=np.int64)


def _ancestors(j: int, parents) -> np.ndarray:
    out = []
    p = int(parents[j])
    while p >= 0:
        out.append(p)
        p = int(parents[p])
    return np.array(out[::-1], dtype=np.int64)


@numba.njit(cache=True, error_model="numpy", inline="always")
def _yaw_in_parent(gw, gx, gy, gz, theta, bw, bx, by, bz):
    """Local rotation b premultiplied by a turn of theta about the world vertical, expressed in the
    frame of a parent whose world rotation is g (conjugation): the joint's world rotation turns by theta."""
    # Vertical axis in the parent's frame: inverse(g) * (0, 1, 0).
    ax = 2.0 * (gx * gy + gw * gz)
    ay = 1.0 - 2.0 * (gx * gx + gz * gz)
    az = 2.0 * (gy * gz - gw * gx)
    c, s = math.cos(0.5 * theta), math.sin(0.5 * theta)
    qw, qx, qy, qz = c, s * ax, s * ay, s * az
    return (qw * bw - qx * bx - qy * by - qz * bz, qw * bx + qx * bw + qy * bz - qz * by,
            qw * by - qx * bz + qy * bw + qz * bx, qw * bz + qx * by - qy * bx + qz * bw)


@numba.njit(cache=True, error_model="numpy")
def twist_split(angle, hip_limit, spine_limit):
    """(hips, spine): how much of a lower-body turn `angle` (radians) the hip joints and the spine
    give back so the upper body keeps its facing. The hip joints take what they can (up to hip_limit,
    the legs' rotation against the pelvis), the spine the rest up to spine_limit (the
    pelvis-to-shoulder twist); whatever is left over is not given back: the upper body lags."""
    hips = clamp(angle, -hip_limit, hip_limit)
    return hips, clamp(angle - hips, -spine_limit, spine_limit)


@numba.njit(cache=True, error_model="numpy")
def twist_pose(lr, parents, pelvis, upper_legs, chain, angle, hips, spine, out, g):
    """The orientation warp on local rotations lr (J, 4) into out: joint 0 turns by `angle` about the
    world vertical (the legs with it); the pelvis turns back by `hips` while the upper legs turn
    forward by the same (so the legs stay on the travel); the spine chain turns back by `spine` in equal
    shares. With hips + spine == angle the chest keeps its world rotation. pelvis < 0: no hip share.
    g: (J, 4) scratch (the world rotations; the crowd's output stage reuses one per chunk of agents)."""
    J = lr.shape[0]
    for j in range(J):
        for k in range(4):
            out[j, k] = lr[j, k]
        # Original world rotations (parents before children).
        p = parents[j]
        bw, bx, by, bz = lr[j, 0], lr[j, 1], lr[j, 2], lr[j, 3]
        if p < 0:
            g[j, 0], g[j, 1], g[j, 2], g[j, 3] = bw, bx, by, bz
        else:
            aw, ax, ay, az = g[p, 0], g[p, 1], g[p, 2], g[p, 3]
            g[j, 0] = aw * bw - ax * bx - ay * by - az * bz
            g[j, 1] = aw * bx + ax * bw + ay * bz - az * by
            g[j, 2] = aw * by - ax * bz + ay * bw + az * bx
            g[j, 3] = aw * bz + ax * by - ay * bx + az * bw
    # World yaw turns commute, so each joint's turn is conjugated by its parent's original rotation.
    out[0, 0], out[0, 1], out[0, 2], out[0, 3] = _yaw_in_parent(1.0, 0.0, 0.0, 0.0, angle, lr[0, 0], lr[0, 1],
                                                                lr[0, 2], lr[0, 3])
    if pelvis >= 0 and hips != 0.0:
        p = parents[pelvis]
        out[pelvis, 0], out[pelvis, 1], out[pelvis, 2], out[pelvis, 3] = _yaw_in_parent(
            g[p, 0], g[p, 1], g[p, 2], g[p, 3], -hips, lr[pelvis, 0], lr[pelvis, 1], lr[pelvis, 2], lr[pelvis, 3])
        for j in upper_legs:
            p = parents[j]
            out[j, 0], out[j, 1], out[j, 2], out[j, 3] = _yaw_in_parent(
                g[p, 0], g[p, 1], g[p, 2], g[p, 3], hips, lr[j, 0], lr[j, 1], lr[j, 2], lr[j, 3])
    share = -spine / chain.shape[0]
    for j in chain:
        p = parents[j]
        out[j, 0], out[j, 1], out[j, 2], out[j, 3] = _yaw_in_parent(
            g[p, 0], g[p, 1], g[p, 2], g[p, 3], share, lr[j, 0], lr[j, 1], lr[j, 2], lr[j, 3])


class PoseWarpRig:
    """The joints the orientation warp touches, derived once from the skeleton: the spine chain, the
    pelvis (the `hips` role; -1 when it is not the common ancestor of the chain and both upper legs
    below joint 0, then the spine takes the whole warp) and the upper legs."""

    def __init__(self, roles: dict, parents):
        self.chain = spine_chain(roles, parents)
        self.parents = np.asarray(parents, dtype=np.int64)
        ancestors = _ancestors(int(self.chain[0]), parents)
        if len(ancestors) == 0 or ancestors[0] != 0:
            raise ValueError("the spine chain must hang below joint 0 (the simulation bone)")
        legs = [roles.get(f"{side}_upper_leg", -1) for side in ("left", "right")]
        self.upper_legs = np.array([j for j in legs if j >= 0], dtype=np.int64)
        pelvis = roles.get("hips", -1)
        ok = (pelvis > 0 and pelvis in ancestors and len(self.upper_legs) == 2 and pelvis not in self.chain
              and all(pelvis in _ancestors(int(j), parents) for j in self.upper_legs))
        self.pelvis = int(pelvis) if ok else -1


def warp_pose_orientation(local_rot, roles, parents, angle_rad: float, rig: PoseWarpRig | None = None,
                          out: np.ndarray | None = None, hip_limit_rad: float = 0.0,
                          spine_limit_rad: float = math.pi) -> np.ndarray:
    """Turn the lower body by `angle_rad` about the vertical through the root, keep the upper body.

    local_rot (J, 4): local rotations with joint 0 the (yaw-only) simulation bone in the world.
    Joint 0 is turned by angle_rad (so hips and legs turn with it; the feet keep their motion relative
    to the root). The hip joints give back up to hip_limit_rad (pelvis turned back, legs kept on the
    turn) and the spine chain (`spine_chain`: spine .. chest) the rest up to spine_limit_rad in equal
    shares (`twist_split`), so within the limits the chest, neck, head and arms keep their world
    rotations. Returns new local rotations (J, 4) float64 (into `out` when given). `rig` caches the
    joint lists (see PoseWarpRig).
    """
    if rig is None:
        rig = PoseWarpRig(roles, parents)
    lr = np.ascontiguousarray(local_rot, dtype=np.float64)
    if out is None:
        out = np.empty_like(lr)
    hips, spine = twist_split(float(angle_rad), float(hip_limit_rad), float(spine_limit_rad))
    twist_pose(lr, rig.parents, rig.pelvis, rig.upper_legs, rig.chain, float(angle_rad), hips, spine, out,
               np.empty_like(lr))
    return out


# ----------------------------------------------------------------------------------------------
# Play rate and stride


def clip_speeds(root_velocities, range_starts, range_stops, fps: float, window_s: float = 0.5) -> np.ndarray:
    """Per-frame ground speed (N,) m/s of the root averaged over a centred window of `window_s`
    seconds inside each clip: the clip's speed without the in-step wobble, for the ratios above.

    root_velocities (N, 3): the simulation bone's velocity (any frame: only its x-z norm is used).
    """
    v = np.asarray(root_velocities, dtype=np.float64)
    speed = np.hypot(v[:, 0], v[:, 2])
    out = np.empty(len(speed), dtype=np.float32)
    half = max(int(round(0.5 * window_s * fps)), 0)
    for a, b in zip(np.asarray(range_starts), np.asarray(range_stops)):
        a, b = int(a), int(b)
        c = np.concatenate([[0.0], np.cumsum(speed[a:b])])
        i = np.arange(b - a)
        lo = np.maximum(i - half, 0)
        hi = np.minimum(i + half + 1, b - a)
        out[a:b] = (c[hi] - c[lo]) / (hi - lo)
    return out


# ----------------------------------------------------------------------------------------------
# The per-character warp table

ANGLE, ANGLE_RATE, TARGET, WEIGHT, BACKWARD, ROOT_GOAL_YAW, RATE, RATE_VEL, SCALE, SCALE_VEL = range(10)
# FIXED_RATE: a play rate the matcher sets for this tick instead of the speed warp's (matching.plan_agent: 1
# for a held clip, a slowed rate for an idle hold); 0 leaves the rate to the warp.
FIXED_RATE = 10
# SIDE: side-step mode (orientation_plan), 1 while the stick asks to strafe near 90 degrees off the facing;
# SIDE_OK: 1 when the character's database has side-steps to play (has_side_steps), else the mode stays off.
SIDE, SIDE_OK = 11, 12
WARP_COLUMNS = 13


def new_warp_table(n: int, side_steps: bool = True) -> np.ndarray:
    """Warp state of n characters at rest (no twist, rate and stride 1); side_steps: whether their
    database has side-steps for side-step mode (has_side_steps)."""
    w = np.zeros((n, WARP_COLUMNS))
    w[:, RATE] = w[:, SCALE] = 1.0
    w[:, SIDE_OK] = 1.0 if side_steps else 0.0
    return w


# A side-step is a frame whose trajectory's last point lies SIDE_STEP_ANGLES degrees off the facing, at
# least SIDE_STEP_MIN_M away, the facing there within SIDE_STEP_TURN_DEG of the frame's (straight, not a
# turn). The jlpm22 takes have 4 such frames a side (the actor's side-steps curve: a search asking for
# them found standing frames cheaper and the character stood still), the CMU side-steps 385 a side.
SIDE_STEP_ANGLES = (70.0, 110.0)
SIDE_STEP_MIN_M = 0.5
SIDE_STEP_TURN_DEG = 20.0
SIDE_STEP_MIN_S = 1.0


def has_side_steps(raw_features, layout, fps: float) -> bool:
    """Whether a database has at least SIDE_STEP_MIN_S seconds of side-steps (above) to each side.
    raw_features (N, F): unnormalized features; layout (D, 3): matching.trajectory_layout's (column,
    point, component 0/1 position x/z, 2/3 facing x/z, in the frame's root frame, +Z forward)."""
    raw = np.asarray(raw_features, dtype=np.float64)
    cols: dict = {}
    for col, k, comp in np.asarray(layout).reshape(-1, 3):
        cols.setdefault(int(k), {})[int(comp)] = int(col)
    full = [k for k, c in cols.items() if len(c) == 4]
    if not full or len(raw) == 0:
        return False
    c = cols[max(full)]
    x, z, fx, fz = raw[:, c[0]], raw[:, c[1]], raw[:, c[2]], raw[:, c[3]]
    ang = np.degrees(np.arctan2(x, z))
    ok = (np.hypot(x, z) >= SIDE_STEP_MIN_M) & (np.degrees(np.abs(np.arctan2(fx, fz))) <= SIDE_STEP_TURN_DEG)
    lo, hi = SIDE_STEP_ANGLES
    need = SIDE_STEP_MIN_S * fps
    return bool((ok & (ang >= lo) & (ang <= hi)).sum() >= need and (ok & (ang <= -lo) & (ang >= -hi)).sum() >= need)


@numba.njit(cache=True, error_model="numpy", inline="always")
def wrap(a):
    return (a + math.pi) % _TWO_PI - math.pi


@numba.njit(cache=True, error_model="numpy", inline="always")
def clamp(x, lo, hi):
    return lo if x < lo else hi if x > hi else x


@numba.njit(cache=True, error_model="numpy")
def ramp(x, lo, hi):
    """0 below lo, 1 above hi, smoothstep between."""
    if x <= lo:
        return 0.0
    if x >= hi:
        return 1.0
    t = (x - lo) / (hi - lo)
    return t * t * (3.0 - 2.0 * t)


@numba.njit(cache=True, error_model="numpy")
def orientation_offsets(facing_yaw, travel_yaw, limit, backward, side=False):
    """(query yaw, warp) for one trajectory point (radians): the query asks for the facing turned toward
    the travel direction (or, in backward mode, toward its opposite; in side-step mode, toward the
    direction 90 degrees from it on the facing's side) by at most `limit`; warp = facing - query yaw is
    what the upper-body twist has to make up. Side-step mode asks for the data's own side-steps: a
    strafe straight to the side is not warped at all, the pelvis turns with the shoulders."""
    base = math.pi if backward else 0.0
    e = wrap(wrap(facing_yaw - travel_yaw) - base)
    if side and not backward:
        e -= math.copysign(0.5 * math.pi, e)
    w = clamp(e, -limit, limit)
    return wrap(facing_yaw - w), w


class OrientationLimits(NamedTuple):
    """A character's orientation-warp settings, as orientation_plan reads them."""

    limit: float                  # radians: the most the warp turns a facing
    backward_angle: float         # radians: facing-vs-travel angle beyond which backward mode starts
    min_travel: float             # m/s: the warp fades out below this speed
    side_angle: float             # radians: the same for side-step mode (pi: never)
    side_backward_angle: float    # radians: backward mode's angle while side-steps play (pi: never)


@numba.njit(cache=True, error_model="numpy")
def orientation_plan(wt, i, goal_yaw, goal_vx, goal_vz, sim_yaw, sim_vx, sim_vz, enabled, limits):
    """Decide for row i of the warp table, from the controller's goals (facing yaw, velocity) and state,
    the warp weight (only while the goal facing differs from the goal travel direction: strafing),
    backward mode and side-step mode (facing-vs-travel angle beyond limits.backward_angle, resp.
    side_angle; each with 5 degrees of hysteresis; side-step mode only with SIDE_OK, and then backward mode
    from side_backward_angle instead: a back diagonal plays a turned side-step) and the yaw the character
    root should turn to (ROOT_GOAL_YAW). limits: OrientationLimits."""
    limit, backward_angle, min_travel, side_angle, side_backward_angle = limits
    gspeed = math.hypot(goal_vx, goal_vz)
    if not enabled or gspeed < 1e-6:
        wt[i, WEIGHT] = 0.0
    else:
        delta = abs(wrap(goal_yaw - math.atan2(goal_vx, goal_vz)))
        hyst = math.radians(5.0)
        sides = wt[i, SIDE_OK] != 0.0 and side_angle < math.pi
        b = max(backward_angle, side_backward_angle) if sides else backward_angle
        if delta > b + hyst:
            wt[i, BACKWARD] = 1.0
        elif delta < b - hyst:
            wt[i, BACKWARD] = 0.0
        if delta > side_angle + hyst and sides:
            wt[i, SIDE] = 1.0
        elif delta < side_angle - hyst:
            wt[i, SIDE] = 0.0
        wt[i, WEIGHT] = ramp(delta, math.radians(5.0), math.radians(15.0))
    speed = math.hypot(sim_vx, sim_vz)
    k = wt[i, WEIGHT] * ramp(speed, 0.0, min_travel)
    if k > 0.0:
        _, w = orientation_offsets(sim_yaw, math.atan2(sim_vx, sim_vz), limit, wt[i, BACKWARD] != 0.0,
                                   wt[i, SIDE] != 0.0)
        wt[i, ROOT_GOAL_YAW] = wrap(sim_yaw - k * w)
    else:
        wt[i, ROOT_GOAL_YAW] = sim_yaw


@numba.njit(cache=True, error_model="numpy")
def orientation_query_rotations(wt, i, pos, rot, ox, oz, times, limit, min_travel):
    """Trajectory rotations (K, 4) for row i's query, rewritten in place: each point's facing turns
    toward the way the prediction pos (K, 3) goes since the previous point (from the simulation at
    ox, oz, times (K,) s ahead), fading out below min_travel m/s (row i's backward and side-step modes:
    orientation_plan)."""
    weight = wt[i, WEIGHT]
    if weight <= 0.0:
        return
    px, pz, t_prev = ox, oz, 0.0
    for k in range(pos.shape[0]):
        x, z, t = pos[k, 0], pos[k, 2], times[k]
        dx, dz = x - px, z - pz
        speed = math.hypot(dx, dz) / max(t - t_prev, 1e-6)
        px, pz, t_prev = x, z, t
        kk = weight * ramp(speed, 0.0, min_travel)
        if kk <= 0.0:
            continue
        facing = 2.0 * math.atan2(rot[k, 2], rot[k, 0])
        _, w = orientation_offsets(facing, math.atan2(dx, dz), limit, wt[i, BACKWARD] != 0.0, wt[i, SIDE] != 0.0)
        h = 0.5 * wrap(facing - kk * w)
        rot[k, 0], rot[k, 1], rot[k, 2], rot[k, 3] = math.cos(h), 0.0, math.sin(h), 0.0


@numba.njit(cache=True, error_model="numpy")
def orientation_update(wt, i, sim_yaw, root_yaw, speed, dt, limit, min_travel, halflife):
    """Advance row i's twist toward sim_yaw - root_yaw (limited, faded out below min_travel of the
    simulation's speed) over dt s; returns the angle (radians, positive turns the upper body from the
    root's facing toward +X)."""
    k = wt[i, WEIGHT] * ramp(speed, 0.0, min_travel)
    wt[i, TARGET] = k * clamp(wrap(sim_yaw - root_yaw), -limit, limit)
    wt[i, ANGLE], wt[i, ANGLE_RATE] = spring_exact(wt[i, ANGLE], wt[i, ANGLE_RATE], wt[i, TARGET], max(halflife, 1e-4), dt)
    return wt[i, ANGLE]


@numba.njit(cache=True, error_model="numpy")
def playback_rate(desired_speed, anim_speed, lo, hi, share):
    """Play rate (x real time) bringing the animation's speed toward the desired one, within [lo, hi].
    share (0..1): the part of the speed ratio, in log, the rate takes. 1 when either speed is below
    0.1 m/s: standing, turning on the spot and stopping clips play as captured."""
    if desired_speed < 0.1 or anim_speed < 0.1:
        return 1.0
    ratio = desired_speed / anim_speed
    return clamp(ratio ** share if share != 1.0 else ratio, lo, hi)


@numba.njit(cache=True, error_model="numpy")
def stride_scale(desired_speed, anim_speed, rate, lo, hi):
    """Stride scale for what the play rate leaves of the speed ratio, within [lo, hi]."""
    if desired_speed < 0.1 or anim_speed < 0.1:
        return 1.0
    return clamp(desired_speed / (anim_speed * rate), lo, hi)


@numba.njit(cache=True, error_model="numpy")
def speed_update(wt, i, desired_speed, rate_speed, anim_speed, dt, play_rate, rate_bounds, stride, stride_bounds,
                 halflife, lengthen_halflife=-1.0):
    """Row i's (rate, stride scale) after dt s, springing toward playback_rate of rate_speed and stride_scale
    of desired_speed (the simulation's speed), against the playing clip's (m/s). play_rate, stride: whether
    each warps; rate_bounds = (rate_min, rate_max, share), stride_bounds = (stride_min, stride_max)
    (WarpSettings); halflife: both springs', lengthen_halflife (> 0) the stride's while it lengthens."""
    rate_min, rate_max, share = rate_bounds
    stride_min, stride_max = stride_bounds
    r = playback_rate(rate_speed, anim_speed, rate_min, rate_max, share) if play_rate else 1.0
    k = stride_scale(desired_speed, anim_speed, r, stride_min, stride_max) if stride else 1.0
    if play_rate and share < 1.0:
        r = playback_rate(rate_speed, anim_speed * k, rate_min, rate_max, 1.0)
    wt[i, RATE], wt[i, RATE_VEL] = spring_exact(wt[i, RATE], wt[i, RATE_VEL], r, max(halflife, 1e-4), dt)
    hs = lengthen_halflife if lengthen_halflife > 0.0 and k > wt[i, SCALE] else halflife
    wt[i, SCALE], wt[i, SCALE_VEL] = spring_exact(wt[i, SCALE], wt[i, SCALE_VEL], k, max(hs, 1e-4), dt)
    return wt[i, RATE], wt[i, SCALE]


# Backward steps push the pelvis in pulses: within a step the root's speed swings by +-30 % in most
# Bandai-Namco walk-back clips (0.5 to 1.4 m/s around 0.9), against +-10 % in forward walks. While
# travelling backward the stride also evens out the step: it follows the frame's own root speed on a
# short halflife, by up to a factor BACKWARD_STEP_EVENING either way around the clip's stride.
BACKWARD_SPEED_HALFLIFE = 0.02
BACKWARD_STEP_EVENING = 1.5


@numba.njit(cache=True, error_model="numpy")
def stride_reference(wt, i, clip_speed, frame_vx, frame_vz, halflife, stride_min, stride_max):
    """(animation speed m/s, halflife s, stride bounds) that speed_update should use for row i: the
    clip's average speed and the settings, or while the orientation warp travels backward on a clip
    that walks backward (frame_vx, frame_vz: the frame's root velocity in the root's frame, +Z forward)
    the frame's own root speed with the bounds scaled by clip / frame speed (limited to
    BACKWARD_STEP_EVENING), so the clip's average stride keeps the settings' bounds and the step is
    evened out around it."""
    frame_speed = math.hypot(frame_vx, frame_vz)
    if wt[i, WEIGHT] > 0.0 and wt[i, BACKWARD] != 0.0 and frame_vz < -0.5 * frame_speed and frame_speed > 1e-3:
        e = clamp(clip_speed / frame_speed, 1.0 / BACKWARD_STEP_EVENING, BACKWARD_STEP_EVENING)
        return frame_speed, BACKWARD_SPEED_HALFLIFE, stride_min * e, stride_max * e
    return clip_speed, halflife, stride_min, stride_max


@numba.njit(cache=True, error_model="numpy")
def query_scale(desired_speed, floor, play_rate, rate_min, stride, stride_min):
    """Factor (>= 1) for the query's trajectory displacements: a request slower than `floor` asks the
    matcher for that speed (real walking, not shuffling) as far as rate and stride can slow it back."""
    if floor <= 0.0 or desired_speed < 0.1 or desired_speed >= floor:
        return 1.0
    slowest = (rate_min if play_rate else 1.0) * (stride_min if stride else 1.0)
    return max(1.0, min(floor / desired_speed, 1.0 / max(slowest, 1e-3)))
