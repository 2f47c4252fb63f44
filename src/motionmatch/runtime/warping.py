"""Procedural warping of the matched animation: orientation, play rate and stride, slope.

A database without strafing, backward walking or slow walks can still serve those requests if the
played animation is warped (seed 003, "Procedural Touchups": rotation correction, timescale, slope
warping):

- Orientation warping. When the desired facing and the travel direction differ, the matcher is asked
  for motion *facing the travel direction* (`OrientationWarper.query_rotations`), so it finds forward
  walking that goes the right way. The character root then faces the travel direction; the pose warp
  (`warp_pose_orientation`) keeps the lower body (simulation bone, hips, legs) on it and twists the
  spine chain so the upper body faces the desired facing. The twist is limited; beyond a backward
  angle the query keeps a backward request (a backward clip is preferred when the data has one) and
  only the remainder is warped.
- Play rate and stride. When the clip's speed and the desired speed differ, the clip plays at a rate
  within bounds (`playback_rate`, fractional frames through `sample_pose`) and the rest of the ratio
  scales the stride (`stride_scale`, `stride_warp_targets` feeding the leg IK; the root's translation
  is scaled by the same factor so planted feet stay planted).
- Slope warping. Feet tilt to the ground normal (`slope_warp`, `terrain_normal`) and the hips come
  down smoothly when a foot's ground is lower than the root's (`hips_drop`, `HipsHeight`).

Conventions: metres, seconds, radians; Y up; yaw 0 faces +Z, positive yaw turns +Z toward +X;
quaternions (w, x, y, z). Everything runs once per character frame, so the per-frame functions are
scalar maths or small numba kernels (a few microseconds each).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

from ..kinematics import fk_pose_into

_TWO_PI = 2.0 * math.pi
_LN2 = math.log(2.0)


def _wrap(a: float) -> float:
    """Wrap radians to [-pi, pi)."""
    return (a + math.pi) % _TWO_PI - math.pi


def _clamp(x: float, lo: float, hi: float) -> float:
    return lo if x < lo else hi if x > hi else x


def _ramp(x: float, lo: float, hi: float) -> float:
    """0 below lo, 1 above hi, smoothstep between."""
    if x <= lo:
        return 0.0
    if x >= hi:
        return 1.0
    t = (x - lo) / (hi - lo)
    return t * t * (3.0 - 2.0 * t)


def _spring(x: float, v: float, goal: float, halflife: float, dt: float) -> tuple[float, float]:
    """Critically damped spring (halflife convention of springs.py), scalar and exact."""
    y = 2.0 * _LN2 / (max(halflife, 1e-4) + 1e-5)
    j0 = x - goal
    j1 = v + j0 * y
    e = math.exp(-y * dt)
    return e * (j0 + j1 * dt) + goal, e * (v - j1 * y * dt)


@dataclass
class WarpSettings:
    """Live-tunable warping settings. Angles in degrees, speeds in m/s, times in seconds."""

    orientation: bool = True
    orientation_limit_deg: float = 90.0     # largest upper-body twist
    backward_angle_deg: float = 120.0       # facing-vs-travel angle beyond which backward motion is asked
    orientation_halflife: float = 0.1       # smoothing of the twist
    min_travel_speed: float = 0.3           # below this there is no travel direction to warp to
    play_rate: bool = True
    rate_min: float = 0.8
    rate_max: float = 1.2
    rate_share: float = 1.0                 # share of the speed ratio (in log) given to the play rate first
    stride: bool = True
    stride_min: float = 0.5
    stride_max: float = 1.2
    speed_halflife: float = 0.1             # smoothing of play rate and stride scale (0.2 lagged turns)
    query_speed_floor: float = 0.8          # slower requests ask the matcher for this speed (0: off)
    slope: bool = True
    slope_max_deg: float = 30.0             # steepest tilt given to a foot
    hips_halflife: float = 0.1


# ----------------------------------------------------------------------------------------------
# Orientation warping


def orientation_offsets(facing_yaw: float, travel_yaw: float, limit: float, backward: bool) -> tuple[float, float]:
    """(query yaw, warp) for one trajectory point (radians).

    The query asks for the facing turned toward the travel direction (or, in backward mode, toward
    the opposite of it) by at most `limit`; warp = facing - query yaw is what the upper body twist
    has to make up.
    """
    base = math.pi if backward else 0.0
    e = _wrap(_wrap(facing_yaw - travel_yaw) - base)
    w = _clamp(e, -limit, limit)
    return _wrap(facing_yaw - w), w


class OrientationWarper:
    """Chooses the facing the matcher is asked for and the upper-body twist that makes up the rest.

    Per frame: `plan` (before a search, from the controller's goals and state), `query_rotations`
    (in the query), `root_goal_yaw` (for the character's yaw adjustment and clamping), `update`
    (after the root moved: the smoothed twist angle, radians, positive turns the upper body from the
    root's facing toward +X).

    Warping only acts while the goal facing differs from the goal travel direction (strafing): when
    the character is asked to face where it goes (normal locomotion, paths) nothing changes.
    """

    def __init__(self, settings: WarpSettings | None = None):
        self.settings = settings or WarpSettings()
        self.reset()

    def reset(self) -> None:
        self.angle = 0.0          # smoothed twist (radians)
        self.angle_rate = 0.0
        self.target = 0.0         # unsmoothed twist goal
        self.weight = 0.0         # 0 = no warping asked, 1 = full
        self.backward = False
        self.root_goal_yaw = 0.0

    def plan(self, goal_yaw: float, goal_vx: float, goal_vz: float,
             sim_yaw: float, sim_vx: float, sim_vz: float) -> None:
        """Decide from the controller's goals (facing yaw, velocity) whether to warp and whether to ask
        for backward motion, and the yaw the character root should turn to (`root_goal_yaw`)."""
        s = self.settings
        gspeed = math.hypot(goal_vx, goal_vz)
        if not s.orientation or gspeed < 1e-6:
            self.weight = 0.0
        else:
            delta = abs(_wrap(goal_yaw - math.atan2(goal_vx, goal_vz)))
            # Hysteresis so a request near the backward angle does not flicker between clips.
            b = math.radians(s.backward_angle_deg)
            if delta > b + math.radians(5.0):
                self.backward = True
            elif delta < b - math.radians(5.0):
                self.backward = False
            self.weight = _ramp(delta, math.radians(5.0), math.radians(15.0))
        speed = math.hypot(sim_vx, sim_vz)
        k = self.weight * _ramp(speed, 0.0, s.min_travel_speed)
        if k > 0.0:
            _, w = orientation_offsets(sim_yaw, math.atan2(sim_vx, sim_vz),
                                       math.radians(s.orientation_limit_deg), self.backward)
            self.root_goal_yaw = _wrap(sim_yaw - k * w)
        else:
            self.root_goal_yaw = sim_yaw

    def query_rotations(self, positions, rotations, origin, times) -> np.ndarray:
        """Trajectory rotations (K, 4) for the query.

        positions (K, 3) / rotations (K, 4): the predicted trajectory (world) at `times` (K,) seconds
        ahead of the simulation position `origin` (3,). Each point's travel direction is the way the
        prediction goes since the previous point; its facing turns toward it (see
        `orientation_offsets`), fading out below `min_travel_speed`.
        """
        rot = np.array(rotations, dtype=np.float64)
        if self.weight <= 0.0:
            return rot
        s = self.settings
        limit = math.radians(s.orientation_limit_deg)
        px, pz, t_prev = float(origin[0]), float(origin[2]), 0.0
        # Plain floats: numpy scalar indexing would cost more than the maths.
        pts = np.asarray(positions, dtype=np.float64).tolist()
        rows = rot.tolist()
        for i in range(len(rows)):
            x, z, t = pts[i][0], pts[i][2], float(times[i])
            dx, dz = x - px, z - pz
            speed = math.hypot(dx, dz) / max(t - t_prev, 1e-6)
            px, pz, t_prev = x, z, t
            k = self.weight * _ramp(speed, 0.0, s.min_travel_speed)
            if k <= 0.0:
                continue
            q = rows[i]
            facing = 2.0 * math.atan2(q[2], q[0])
            _, w = orientation_offsets(facing, math.atan2(dx, dz), limit, self.backward)
            h = 0.5 * _wrap(facing - k * w)
            rows[i] = [math.cos(h), 0.0, math.sin(h), 0.0]
        return np.array(rows, dtype=np.float64).reshape(rot.shape)

    def update(self, sim_yaw: float, root_yaw: float, speed: float, dt: float) -> float:
        """Advance the twist toward `sim_yaw - root_yaw` (limited, and faded out below
        `min_travel_speed` of the simulation's `speed`) over dt seconds; returns the angle (radians)."""
        s = self.settings
        limit = math.radians(s.orientation_limit_deg)
        k = self.weight * _ramp(speed, 0.0, s.min_travel_speed)
        self.target = k * _clamp(_wrap(sim_yaw - root_yaw), -limit, limit)
        self.angle, self.angle_rate = _spring(self.angle, self.angle_rate, self.target,
                                              s.orientation_halflife, dt)
        return self.angle


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


@numba.njit(cache=True)
def _warp_pose_kernel(lr, ancestors, chain, angle, out):
    for j in range(lr.shape[0]):
        for k in range(4):
            out[j, k] = lr[j, k]
    # World rotation of the chain's parent in the original pose.
    gw, gx, gy, gz = 1.0, 0.0, 0.0, 0.0
    for a in ancestors:
        bw, bx, by, bz = lr[a, 0], lr[a, 1], lr[a, 2], lr[a, 3]
        gw, gx, gy, gz = (gw * bw - gx * bx - gy * by - gz * bz, gw * bx + gx * bw + gy * bz - gz * by,
                          gw * by - gx * bz + gy * bw + gz * bx, gw * bz + gx * by - gy * bx + gz * bw)
    # Lower body: the whole pose turns about the vertical through the root.
    c, s = math.cos(0.5 * angle), math.sin(0.5 * angle)
    rw, rx, ry, rz = lr[0, 0], lr[0, 1], lr[0, 2], lr[0, 3]
    out[0, 0] = c * rw - s * ry
    out[0, 1] = c * rx + s * rz
    out[0, 2] = c * ry + s * rw
    out[0, 3] = c * rz - s * rx
    # Upper body: each chain joint turns back by its share about the world vertical, expressed in
    # its parent's original frame (conjugation), so the chest ends with its original world rotation.
    n = chain.shape[0]
    share = -angle / n
    ch, sh = math.cos(0.5 * share), math.sin(0.5 * share)
    for j in chain:
        # Vertical axis in the parent's frame: inverse(G) * (0, 1, 0).
        ax = 2.0 * (gx * gy + gw * gz)
        ay = 1.0 - 2.0 * (gx * gx + gz * gz)
        az = 2.0 * (gy * gz - gw * gx)
        qw, qx, qy, qz = ch, sh * ax, sh * ay, sh * az
        bw, bx, by, bz = lr[j, 0], lr[j, 1], lr[j, 2], lr[j, 3]
        out[j, 0] = qw * bw - qx * bx - qy * by - qz * bz
        out[j, 1] = qw * bx + qx * bw + qy * bz - qz * by
        out[j, 2] = qw * by - qx * bz + qy * bw + qz * bx
        out[j, 3] = qw * bz + qx * by - qy * bx + qz * bw
        gw, gx, gy, gz = (gw * bw - gx * bx - gy * by - gz * bz, gw * bx + gx * bw + gy * bz - gz * by,
                          gw * by - gx * bz + gy * bw + gz * bx, gw * bz + gx * by - gy * bx + gz * bw)


@numba.njit(cache=True)
def _output_pose_kernel(local_pos, local_rot, rx, ry, rz, qw, qy, warp, angle, ancestors, chain, parents,
                        lp, lr, gp, gr):
    """A character's displayed pose in one call: the root placed at (rx, ry, rz) with the yaw rotation
    (qw, 0, qy, 0), the orientation warp by `angle` when `warp` (as warp_pose_orientation), then
    forward kinematics into gp / gr."""
    for j in range(local_pos.shape[0]):
        for k in range(3):
            lp[j, k] = local_pos[j, k]
    lp[0, 0], lp[0, 1], lp[0, 2] = rx, ry, rz
    if warp:
        src = np.empty_like(lr)
        for j in range(local_rot.shape[0]):
            for k in range(4):
                src[j, k] = local_rot[j, k]
        src[0, 0], src[0, 1], src[0, 2], src[0, 3] = qw, 0.0, qy, 0.0
        _warp_pose_kernel(src, ancestors, chain, angle, lr)
    else:
        for j in range(local_rot.shape[0]):
            for k in range(4):
                lr[j, k] = local_rot[j, k]
        lr[0, 0], lr[0, 1], lr[0, 2], lr[0, 3] = qw, 0.0, qy, 0.0
    fk_pose_into(lp, lr, parents, gp, gr)


def output_pose(local_pos, local_rot, root_pos, root_half_yaw: float, warp_angle: float | None,
                rig: PoseWarpRig, parents):
    """Displayed pose of a character: returns (lp (J,3), lr (J,4), gp (J,3), gr (J,4)) float64.

    local_pos / local_rot: the animation pose (joint 0 is replaced); root_pos (3,) world metres;
    root_half_yaw: half the root's yaw (radians). warp_angle: None for no orientation warp, else the
    root is given the yaw 2 * root_half_yaw and the pose is warped by -warp_angle (warp_pose_orientation),
    so the lower body faces 2 * root_half_yaw - warp_angle. parents (J,) int64.
    """
    J = len(parents)
    lp, lr, gp, gr = np.empty((J, 3)), np.empty((J, 4)), np.empty((J, 3)), np.empty((J, 4))
    _output_pose_kernel(local_pos, local_rot, float(root_pos[0]), float(root_pos[1]), float(root_pos[2]),
                        math.cos(root_half_yaw), math.sin(root_half_yaw), warp_angle is not None,
                        0.0 if warp_angle is None else -float(warp_angle), rig.ancestors, rig.chain, parents,
                        lp, lr, gp, gr)
    return lp, lr, gp, gr


@numba.njit(cache=True)
def _frame_pose_kernel(positions, rotations, vel, angvel, root_vel, root_angvel, i, rate,
                       out_p, out_r, out_v, out_w):
    """One database frame as float64 with the root as its own-frame motion (position 0, identity
    rotation, root_vel / root_angvel velocities), velocities scaled by `rate` when it is not 1."""
    for j in range(positions.shape[1]):
        for k in range(3):
            out_p[j, k] = positions[i, j, k]
            out_v[j, k] = vel[i, j, k]
            out_w[j, k] = angvel[i, j, k]
        for k in range(4):
            out_r[j, k] = rotations[i, j, k]
    for k in range(3):
        out_v[0, k] = root_vel[i, k]
        out_w[0, k] = root_angvel[i, k]
        out_p[0, k] = 0.0
    out_r[0, 0], out_r[0, 1], out_r[0, 2], out_r[0, 3] = 1.0, 0.0, 0.0, 0.0
    if rate != 1.0:
        for j in range(out_v.shape[0]):
            for k in range(3):
                out_v[j, k] *= rate
                out_w[j, k] *= rate


class PoseWarpRig:
    """The joints the orientation warp touches, derived once from the skeleton."""

    def __init__(self, roles: dict, parents):
        self.chain = spine_chain(roles, parents)
        self.ancestors = _ancestors(int(self.chain[0]), parents)
        if len(self.ancestors) == 0 or self.ancestors[0] != 0:
            raise ValueError("the spine chain must hang below joint 0 (the simulation bone)")


def warp_pose_orientation(local_rot, roles, parents, angle_rad: float, rig: PoseWarpRig | None = None,
                          out: np.ndarray | None = None) -> np.ndarray:
    """Turn the lower body by `angle_rad` about the vertical through the root, keep the upper body.

    local_rot (J, 4): local rotations with joint 0 the (yaw-only) simulation bone in the world.
    Joint 0 is turned by angle_rad (so hips and legs turn with it; the feet keep their motion relative
    to the root), and the spine chain (`spine_chain`: spine .. chest) twists back by the same angle in
    equal shares, so the chest, neck, head and arms keep their world rotations. Returns new local
    rotations (J, 4) float64 (into `out` when given). `rig` caches the joint lists (see PoseWarpRig).
    """
    if rig is None:
        rig = PoseWarpRig(roles, parents)
    lr = np.ascontiguousarray(local_rot, dtype=np.float64)
    if out is None:
        out = np.empty_like(lr)
    _warp_pose_kernel(lr, rig.ancestors, rig.chain, float(angle_rad), out)
    return out


# ----------------------------------------------------------------------------------------------
# Play rate and stride


def playback_rate(desired_speed: float, anim_speed: float, bounds=(0.8, 1.2), min_speed: float = 0.1,
                  share: float = 1.0) -> float:
    """Play rate (x real time) bringing the animation's speed toward the desired one, within bounds.

    share (0..1): the part of the speed ratio, in log, the rate takes (1: all it can, the stride
    only takes what is left; 0.5: rate and stride split it). 1 when either speed is below
    `min_speed` (m/s): standing, turning on the spot and stopping clips play as captured.
    """
    if desired_speed < min_speed or anim_speed < min_speed:
        return 1.0
    ratio = desired_speed / anim_speed
    return _clamp(ratio ** share if share != 1.0 else ratio, float(bounds[0]), float(bounds[1]))


def stride_scale(desired_speed: float, anim_speed: float, rate: float = 1.0, bounds=(0.5, 1.2),
                 min_speed: float = 0.1) -> float:
    """Stride scale for what the play rate leaves of the speed ratio: desired / (anim * rate), within
    bounds; 1 when either speed is below `min_speed`."""
    if desired_speed < min_speed or anim_speed < min_speed:
        return 1.0
    return _clamp(desired_speed / (anim_speed * rate), float(bounds[0]), float(bounds[1]))


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


class SpeedWarper:
    """Smoothed play rate and stride scale (both 1 when disabled)."""

    def __init__(self, settings: WarpSettings | None = None):
        self.settings = settings or WarpSettings()
        self.reset()

    def reset(self) -> None:
        self.rate, self.rate_vel = 1.0, 0.0
        self.scale, self.scale_vel = 1.0, 0.0

    def query_scale(self, desired_speed: float) -> float:
        """Factor (>= 1) for the query's trajectory displacements: a request slower than
        `query_speed_floor` asks the matcher for that speed (real walking, not shuffling on the spot)
        as far as the rate and stride can slow it back down (see scale_trajectory)."""
        s = self.settings
        if s.query_speed_floor <= 0.0 or desired_speed < 0.1 or desired_speed >= s.query_speed_floor:
            return 1.0
        slowest = (s.rate_min if s.play_rate else 1.0) * (s.stride_min if s.stride else 1.0)
        return max(1.0, min(s.query_speed_floor / desired_speed, 1.0 / max(slowest, 1e-3)))

    def update(self, desired_speed: float, anim_speed: float, dt: float) -> tuple[float, float]:
        """(rate, scale) after dt seconds, springing toward playback_rate / stride_scale of the speeds
        (m/s): desired = the simulation's speed, anim = the playing clip's (e.g. from clip_speeds)."""
        s = self.settings
        rb, sb = (s.rate_min, s.rate_max), (s.stride_min, s.stride_max)
        r = playback_rate(desired_speed, anim_speed, rb, share=s.rate_share) if s.play_rate else 1.0
        k = stride_scale(desired_speed, anim_speed, r, sb) if s.stride else 1.0
        if s.play_rate and s.rate_share < 1.0:
            r = playback_rate(desired_speed, anim_speed * k, rb)   # the rate takes what the stride cannot
        self.rate, self.rate_vel = _spring(self.rate, self.rate_vel, r, s.speed_halflife, dt)
        self.scale, self.scale_vel = _spring(self.scale, self.scale_vel, k, s.speed_halflife, dt)
        return self.rate, self.scale


def scale_trajectory(positions, origin, factor: float) -> np.ndarray:
    """Trajectory positions (K, 3) with their displacement from `origin` (3,) scaled by factor (the
    query asks for a faster motion than the prediction; heights unchanged)."""
    p = np.array(positions, dtype=np.float64)
    if factor != 1.0:
        p[:, 0] = origin[0] + (p[:, 0] - origin[0]) * factor
        p[:, 2] = origin[2] + (p[:, 2] - origin[2]) * factor
    return p


def stride_warp_targets(foot_positions, center, travel_yaw: float, scale: float) -> np.ndarray:
    """Feet (2, 3) world positions with their horizontal displacement from `center` along the travel
    direction (yaw, radians) scaled by `scale`; across-travel and height unchanged.

    center: the point whose ground projection the stride scales about. The character root (the
    simulation bone) keeps a planted foot exactly still when the root's translation is scaled by the
    same factor; the hips' ground projection is the classic choice (a small slide from the hips'
    own sway remains). Returns the leg IK's ankle targets (2, 3).
    """
    tx, tz = math.sin(travel_yaw), math.cos(travel_yaw)
    cx, cz = float(center[0]), float(center[2])
    out = np.array(foot_positions, dtype=np.float64)
    k = scale - 1.0
    for i in range(out.shape[0]):
        along = (out[i, 0] - cx) * tx + (out[i, 2] - cz) * tz
        out[i, 0] += k * along * tx
        out[i, 2] += k * along * tz
    return out


@numba.njit(cache=True)
def _sample_kernel(positions, rotations, i, j, t, out_p, out_r):
    J = positions.shape[1]
    for a in range(J):
        for k in range(3):
            p0 = positions[i, a, k]
            out_p[a, k] = p0 + (positions[j, a, k] - p0) * t
        aw, ax, ay, az = rotations[i, a, 0], rotations[i, a, 1], rotations[i, a, 2], rotations[i, a, 3]
        bw, bx, by, bz = rotations[j, a, 0], rotations[j, a, 1], rotations[j, a, 2], rotations[j, a, 3]
        d = aw * bw + ax * bx + ay * by + az * bz
        if d < 0.0:
            bw, bx, by, bz, d = -bw, -bx, -by, -bz, -d
        if d > 0.9995:
            wa, wb = 1.0 - t, t
        else:
            th = math.acos(min(d, 1.0))
            st = math.sin(th)
            wa, wb = math.sin((1.0 - t) * th) / st, math.sin(t * th) / st
        qw, qx, qy, qz = wa * aw + wb * bw, wa * ax + wb * bx, wa * ay + wb * by, wa * az + wb * bz
        n = math.sqrt(qw * qw + qx * qx + qy * qy + qz * qz)
        out_r[a, 0], out_r[a, 1], out_r[a, 2], out_r[a, 3] = qw / n, qx / n, qy / n, qz / n


@numba.njit(cache=True)
def _lerp_kernel(values, i, j, t, out):
    v0 = values[i].ravel()
    v1 = values[j].ravel()
    o = out.ravel()
    for k in range(v0.shape[0]):
        o[k] = v0[k] + (v1[k] - v0[k]) * t


def _split(f: float, n: int, stop: int | None) -> tuple[int, int, float]:
    i = int(math.floor(f))
    t = f - i
    last = (n if stop is None else int(stop)) - 1
    if i >= last:
        return last, last, 0.0
    return i, i + 1, t


def sample_pose(positions, rotations, f: float, stop: int | None = None, out_pos=None, out_rot=None):
    """Pose at fractional frame f: positions lerped and rotations slerped between frames floor(f) and
    floor(f) + 1 (arrays (N, J, 3) / (N, J, 4), e.g. db.positions / db.rotations, float32 or 64).

    stop: the exclusive end of f's clip; at or past its last frame the last frame is returned, so
    two clips are never blended. Returns float64 (J, 3), (J, 4) (into out_pos / out_rot when given).
    """
    i, j, t = _split(f, len(positions), stop)
    J = positions.shape[1]
    out_pos = np.empty((J, 3)) if out_pos is None else out_pos
    out_rot = np.empty((J, 4)) if out_rot is None else out_rot
    _sample_kernel(positions, rotations, i, j, t, out_pos, out_rot)
    return out_pos, out_rot


def sample_values(values, f: float, stop: int | None = None, out=None) -> np.ndarray:
    """Per-frame values (N, ...) (velocities, angular velocities, root motion) lerped at fractional
    frame f, clip end `stop` as in sample_pose; float64."""
    i, j, t = _split(f, len(values), stop)
    out = np.empty(values.shape[1:]) if out is None else out
    _lerp_kernel(values, i, j, t, out)
    return out


def advance_frame(frame: int, frac: float, rate: float, stop: int) -> tuple[int, float]:
    """Play `rate` frames forward from frame + frac (0 <= frac < 1) without passing the clip's last
    frame (stop exclusive); returns the new (frame, frac)."""
    pos = frac + rate
    step = int(math.floor(pos))
    frame += step
    frac = pos - step
    if frame >= stop - 1:
        return stop - 1, 0.0
    return frame, frac


# ----------------------------------------------------------------------------------------------
# Slope warping


def terrain_normal(height, x: float, z: float, step: float = 0.1) -> tuple[float, float, float]:
    """Unit ground normal (pointing up) at x, z from central differences of `height(x, z)` (e.g.
    Heightfield.height on scalars) over +-step metres; cheaper than Heightfield.normal on one point
    and smoother over a foot's length."""
    gx = (height(x + step, z) - height(x - step, z)) / (2.0 * step)
    gz = (height(x, z + step) - height(x, z - step)) / (2.0 * step)
    n = math.sqrt(gx * gx + 1.0 + gz * gz)
    return -gx / n, 1.0 / n, -gz / n


def slope_warp(foot_rotation, normal, weight: float = 1.0, max_angle_rad: float = math.radians(30.0)) -> np.ndarray:
    """Foot world rotation (4,) tilted by the rotation taking +Y to the ground `normal` (3,), limited
    to max_angle_rad and scaled by weight (0..1, e.g. the contact blend), applied in the world (so the
    foot keeps its heading on the slope). Give the result to the leg IK as the foot's world rotation."""
    nx, ny, nz = float(normal[0]), float(normal[1]), float(normal[2])
    # Axis up x n = (nz, 0, -nx); angle acos(ny).
    s = math.hypot(nx, nz)
    q = np.asarray(foot_rotation, dtype=np.float64)
    if s < 1e-9 or weight <= 0.0:
        return q.copy()
    ang = min(math.atan2(s, ny), max_angle_rad) * min(weight, 1.0)
    h = 0.5 * ang
    c, sh = math.cos(h), math.sin(h) / s
    tw, tx, tz = c, sh * nz, -sh * nx
    w, x, y, z = float(q[0]), float(q[1]), float(q[2]), float(q[3])
    return np.array((tw * w - tx * x - tz * z,
                     tw * x + tx * w - tz * y,
                     tw * y + tz * x - tx * z,
                     tw * z + tx * y + tz * w))


def hips_drop(foot_grounds, root_ground: float, max_drop: float = 0.3) -> float:
    """How far (metres, >= 0) to lower the hips so the foot over the lowest ground can reach it: the
    depth of the lower foot's ground below the ground under the root, at most max_drop."""
    low = min(float(g) for g in foot_grounds)
    return _clamp(root_ground - low, 0.0, max_drop)


class HipsHeight:
    """Critically damped hips offset (metres): follows a drop goal smoothly (seed 003: smoothly pull
    the hips down; prefer smoothness over exact penetration prevention)."""

    def __init__(self, halflife: float = 0.1):
        self.halflife = float(halflife)
        self.reset()

    def reset(self) -> None:
        self.offset, self.velocity = 0.0, 0.0

    def update(self, drop: float, dt: float) -> float:
        """Hips offset (metres, <= 0 when dropping) after dt seconds toward -drop."""
        self.offset, self.velocity = _spring(self.offset, self.velocity, -float(drop), self.halflife, dt)
        return self.offset


# ----------------------------------------------------------------------------------------------
# Compiled per-character warping over a crowd's warp table: one row per character, columns below.
# The same rules as OrientationWarper / SpeedWarper; settings come from a packed settings row.

ANGLE, ANGLE_RATE, TARGET, WEIGHT, BACKWARD, ROOT_GOAL_YAW, RATE, RATE_VEL, SCALE, SCALE_VEL = range(10)
WARP_COLUMNS = 10


def new_warp_table(n: int) -> np.ndarray:
    """Warp state of n characters at rest (no twist, rate and stride 1)."""
    w = np.zeros((n, WARP_COLUMNS))
    w[:, RATE] = w[:, SCALE] = 1.0
    return w


@numba.njit(cache=True, inline="always")
def wrap_nb(a):
    return (a + math.pi) % _TWO_PI - math.pi


@numba.njit(cache=True, inline="always")
def clamp_nb(x, lo, hi):
    return lo if x < lo else hi if x > hi else x


@numba.njit(cache=True)
def ramp_nb(x, lo, hi):
    if x <= lo:
        return 0.0
    if x >= hi:
        return 1.0
    t = (x - lo) / (hi - lo)
    return t * t * (3.0 - 2.0 * t)


@numba.njit(cache=True)
def spring_nb(x, v, goal, halflife, dt):
    y = 2.0 * _LN2 / (max(halflife, 1e-4) + 1e-5)
    j0 = x - goal
    j1 = v + j0 * y
    e = math.exp(-y * dt)
    return e * (j0 + j1 * dt) + goal, e * (v - j1 * y * dt)


@numba.njit(cache=True)
def orientation_offsets_nb(facing_yaw, travel_yaw, limit, backward):
    base = math.pi if backward else 0.0
    e = wrap_nb(wrap_nb(facing_yaw - travel_yaw) - base)
    w = clamp_nb(e, -limit, limit)
    return wrap_nb(facing_yaw - w), w


@numba.njit(cache=True)
def orientation_plan(wt, i, goal_yaw, goal_vx, goal_vz, sim_yaw, sim_vx, sim_vz, enabled, limit, backward_angle,
                     min_travel):
    """OrientationWarper.plan for row i of the warp table."""
    gspeed = math.hypot(goal_vx, goal_vz)
    if not enabled or gspeed < 1e-6:
        wt[i, WEIGHT] = 0.0
    else:
        delta = abs(wrap_nb(goal_yaw - math.atan2(goal_vx, goal_vz)))
        b = backward_angle
        if delta > b + math.radians(5.0):
            wt[i, BACKWARD] = 1.0
        elif delta < b - math.radians(5.0):
            wt[i, BACKWARD] = 0.0
        wt[i, WEIGHT] = ramp_nb(delta, math.radians(5.0), math.radians(15.0))
    speed = math.hypot(sim_vx, sim_vz)
    k = wt[i, WEIGHT] * ramp_nb(speed, 0.0, min_travel)
    if k > 0.0:
        _, w = orientation_offsets_nb(sim_yaw, math.atan2(sim_vx, sim_vz), limit, wt[i, BACKWARD] != 0.0)
        wt[i, ROOT_GOAL_YAW] = wrap_nb(sim_yaw - k * w)
    else:
        wt[i, ROOT_GOAL_YAW] = sim_yaw


@numba.njit(cache=True)
def orientation_query_rotations(wt, i, pos, rot, ox, oz, times, limit, min_travel):
    """OrientationWarper.query_rotations for row i, rewriting rot (K, 4) in place."""
    weight = wt[i, WEIGHT]
    if weight <= 0.0:
        return
    px, pz, t_prev = ox, oz, 0.0
    for k in range(pos.shape[0]):
        x, z, t = pos[k, 0], pos[k, 2], times[k]
        dx, dz = x - px, z - pz
        speed = math.hypot(dx, dz) / max(t - t_prev, 1e-6)
        px, pz, t_prev = x, z, t
        kk = weight * ramp_nb(speed, 0.0, min_travel)
        if kk <= 0.0:
            continue
        facing = 2.0 * math.atan2(rot[k, 2], rot[k, 0])
        _, w = orientation_offsets_nb(facing, math.atan2(dx, dz), limit, wt[i, BACKWARD] != 0.0)
        h = 0.5 * wrap_nb(facing - kk * w)
        rot[k, 0], rot[k, 1], rot[k, 2], rot[k, 3] = math.cos(h), 0.0, math.sin(h), 0.0


@numba.njit(cache=True)
def orientation_update(wt, i, sim_yaw, root_yaw, speed, dt, limit, min_travel, halflife):
    """OrientationWarper.update for row i: the smoothed twist angle (radians)."""
    k = wt[i, WEIGHT] * ramp_nb(speed, 0.0, min_travel)
    wt[i, TARGET] = k * clamp_nb(wrap_nb(sim_yaw - root_yaw), -limit, limit)
    wt[i, ANGLE], wt[i, ANGLE_RATE] = spring_nb(wt[i, ANGLE], wt[i, ANGLE_RATE], wt[i, TARGET], halflife, dt)
    return wt[i, ANGLE]


@numba.njit(cache=True)
def playback_rate_nb(desired_speed, anim_speed, lo, hi, share):
    if desired_speed < 0.1 or anim_speed < 0.1:
        return 1.0
    ratio = desired_speed / anim_speed
    return clamp_nb(ratio ** share if share != 1.0 else ratio, lo, hi)


@numba.njit(cache=True)
def stride_scale_nb(desired_speed, anim_speed, rate, lo, hi):
    if desired_speed < 0.1 or anim_speed < 0.1:
        return 1.0
    return clamp_nb(desired_speed / (anim_speed * rate), lo, hi)


@numba.njit(cache=True)
def speed_update(wt, i, desired_speed, anim_speed, dt, play_rate, rate_min, rate_max, share, stride, stride_min,
                 stride_max, halflife):
    """SpeedWarper.update for row i: (rate, scale)."""
    r = playback_rate_nb(desired_speed, anim_speed, rate_min, rate_max, share) if play_rate else 1.0
    k = stride_scale_nb(desired_speed, anim_speed, r, stride_min, stride_max) if stride else 1.0
    if play_rate and share < 1.0:
        r = playback_rate_nb(desired_speed, anim_speed * k, rate_min, rate_max, 1.0)
    wt[i, RATE], wt[i, RATE_VEL] = spring_nb(wt[i, RATE], wt[i, RATE_VEL], r, halflife, dt)
    wt[i, SCALE], wt[i, SCALE_VEL] = spring_nb(wt[i, SCALE], wt[i, SCALE_VEL], k, halflife, dt)
    return wt[i, RATE], wt[i, SCALE]


@numba.njit(cache=True)
def query_scale_nb(desired_speed, floor, play_rate, rate_min, stride, stride_min):
    if floor <= 0.0 or desired_speed < 0.1 or desired_speed >= floor:
        return 1.0
    slowest = (rate_min if play_rate else 1.0) * (stride_min if stride else 1.0)
    return max(1.0, min(floor / desired_speed, 1.0 / max(slowest, 1e-3)))
