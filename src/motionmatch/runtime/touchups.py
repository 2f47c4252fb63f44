"""The displayed pose of every character: root placement, orientation warp and forward kinematics,
then the touch-ups: ground following on terrain, stride warping, foot locking, hips height, slope
warping and leg IK (seeds 001, 003). One compiled function per character (`output_agent`), run over
the crowd by `output_stage`.

Conventions: metres, seconds, radians; Y up; yaw 0 faces +Z; quaternions (w, x, y, z).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np

from ..maths.kinematics import fk_pose_into
from ..maths.scalar_quat import qrot
from . import settings as S
from .borrow import borrow
from ..maths.ik import legs_pose
from .spine import bend_spine, facing_slope, smoothed_lean
from ..maths.springs import damper_factor, decay_exact, half_damping, spring_exact, spring_moving_goal_exact
from ..world.terrain import height_at, normal_at
from .warping import twist_pose, twist_split


# One foot's lock (foot_lock_update), a record per leg: locks (n, 2) of this dtype.
FOOT_LOCK = np.dtype([
    ("locked", np.bool_),         # held at `point`
    ("blocked", np.bool_),        # unlocked by drifting: stays free until its contact ends (or it relocks)
    ("point", np.float64, 3),     # the lock point, world m
    ("offset", np.float64, 3),    # offset of the shown toe from its reference (lock point or animated toe), m
    ("offset_vel", np.float64, 3),  # its velocity, m/s
    ("prev", np.float64, 3),      # the animated toe last tick, world m
    ("has_prev", np.bool_),       # prev is set
])
# Smoothed heights: ground under the root, hips drop (negative: lift), stance blends (contact, smoothed: the
# slope warp and the hips height read them), spine lean; (n, columns).
GROUND, GROUND_VEL, HAS_GROUND, DROP, DROP_VEL, SLOPE_L, SLOPE_R, LEAN, LEAN_VEL = range(9)
HEIGHT_COLUMNS = 9
# s: the hips' height spring. At 0.08 s the hips still came down for the stretched trailing leg while the next
# stance leg took the weight, bending it 5-8 degrees more than played (strafe_right; 0.04: knee gap on
# strafe_box -6.2, walk_backward -6.2; 0.025: -6.0, -6.0; the hips' vertical acceleration p99 13.5 -> 18.4 m/s^2
# on strafe_box, lower on walk_backward, terrain_steps and run).
HIPS_HALFLIFE = 0.025
# The hips height keeps the played legs' extension (leg_lift), weighed by stance: a swinging leg counts this
# much of a planted one (it bends to clear the ground whatever the hips do).
LIFT_SWING_WEIGHT = 0.2
MAX_LIFT = 0.15          # m: the hips move at most this far up or down to keep the legs' extension
# m: the hips come down at most this far below that for a target out of reach (a lock drifted from a straight
# stance leg, a lower step): further, the foot stops short of its target instead. Unbounded, the backward
# walks' straight stance legs pulled the hips 3-4 cm down and bent the other knee 10-15 degrees more.
MAX_DROP = 0.01
# m: a foot lock further out of reach than that gives way like a drifted one (held, the toe hung up to 8 cm
# above the floor once standing); nearer, the foot stops short of it (a release on any shortfall doubled the
# backward walks' sliding).
LOCK_HANG = 0.02
# m: a swinging toe kept at its played length comes down no nearer the ground than this (or its played height,
# if lower): toward the floor it read as a slow sliding contact (run: sliding 12.7 -> 26.2 cm/s at the floor).
SWING_CLEARANCE = 0.06
# The leg IK's reach, short of straight by this share of the leg's length (legs_pose; a leg played straighter
# keeps its own extension). At 1 % every knee straighter than 164 degrees was bent to 164 where the actor
# side-steps at 158-161 and walks backward at 163 (the median: half of those frames are straighter).
LEG_BUFFER = 0.004
# m: on terrain a swinging foot rides the hips' ground (the smoothed ground under the root) instead of the step
# under it, its toe no nearer the ground under it than its played height or this. Lifted onto the step under
# it, the foot over the next step came up the whole 8 cm while the hips follow a ramp (knee 10-25 degrees more
# bent than played), and the foot leaving a lower step stayed down there (the leg straight, the toe dragged).
TERRAIN_CLEARANCE = 0.015
# m: on terrain a toe played this low (above the animation's ground) counts as planted for the hips' height
# (fully at LOW_TOE_LO, not at all from LOW_TOE_HI): the database's contacts cover about a quarter of the stance
# frames, and a foot standing on a step without one did not lift the hips.
LOW_TOE_LO = 0.03
LOW_TOE_HI = 0.06
RISE_REACH = 0.5         # m either side of the root: the ground's mean slope under a step


class Rig(NamedTuple):
    """The joints the output stage works on (one skeleton for the crowd)."""

    parents: np.ndarray        # (J,) int64
    pelvis: int                # the pelvis joint (orientation warp)
    upper_legs: np.ndarray     # (2,) int64 left, right hip joints (fewer: the spine takes the whole warp)
    chain: np.ndarray          # (K,) int64 spine joints, pelvis up
    legs: np.ndarray           # (2, 4) int64 upper leg, lower leg, foot, toe of the left and right legs
    reach: np.ndarray          # (2,) m: the longest hip-to-ankle distance IK may ask of each leg (the IK's own
    #                            limit, 1 % short of straight: lifted hips never ask the legs for more)


class Terrain(NamedTuple):
    """The ground under every agent (a Heightfield's grid, or flat)."""

    has: bool                  # False: flat ground at y = 0 (heights unused)
    heights: np.ndarray        # (H, W) m
    origin_x: float            # world x of column 0, m
    origin_z: float            # world z of row 0, m
    cell: float                # grid spacing, m
    halflife: float            # smoothing of the root's height (and the spine's lean), s


class Feet(NamedTuple):
    """Touch-up state of n characters."""

    heights: np.ndarray        # (n, HEIGHT_COLUMNS) smoothed ground, hips drop, slope blends, lean
    locks: np.ndarray          # (n, 2) FOOT_LOCK
    locked: np.ndarray         # (n, 2) bool: left, right foot locked this tick


class Display(NamedTuple):
    """The displayed poses of n characters."""

    local_pos: np.ndarray      # (n, J, 3) joint 0 the root placed in the world, float64
    local_rot: np.ndarray      # (n, J, 4)
    pos: np.ndarray            # (n, J, 3) world joint positions, float64
    rot: np.ndarray            # (n, J, 4) world joint rotations
    positions: np.ndarray      # (n, J, 3) float32 copy of pos (the crowd's output)
    rotations: np.ndarray      # (n, J, 4) float32 copy of rot
# s: a foot's slope warp blends in and out with its contact (an exponential damper).
SLOPE_BLEND_HALFLIFE = 0.05


@numba.njit(cache=True, error_model="numpy")
def place_pose(i, local, root_pos, half_yaw, angle, hips, spine, rig, out, scratch):
    """Character i's displayed pose in one call (into Display `out`, float64): its local pose (Pose)
    with the root placed at root_pos[i] with the yaw rotation (cos half_yaw, 0, sin half_yaw, 0), the
    orientation warp by `angle` split into (hips, spine) when it is not 0 (as warp_pose_orientation),
    then forward kinematics. scratch: (2, J, 4) for the warp's input rotations and its world rotations."""
    local_pos, local_rot = local.pos[i], local.rot[i]
    lp, lr, gp, gr = out.local_pos[i], out.local_rot[i], out.pos[i], out.rot[i]
    qw, qy = math.cos(half_yaw), math.sin(half_yaw)
    for j in range(local_pos.shape[0]):
        for k in range(3):
            lp[j, k] = local_pos[j, k]
    lp[0, 0], lp[0, 1], lp[0, 2] = root_pos[i, 0], root_pos[i, 1], root_pos[i, 2]
    if angle != 0.0:
        src = scratch[0]
        for j in range(local_rot.shape[0]):
            for k in range(4):
                src[j, k] = local_rot[j, k]
        src[0, 0], src[0, 1], src[0, 2], src[0, 3] = qw, 0.0, qy, 0.0
        twist_pose(src, rig.parents, rig.pelvis, rig.upper_legs, rig.chain, angle, hips, spine, lr, scratch[1])
    else:
        for j in range(local_rot.shape[0]):
            for k in range(4):
                lr[j, k] = local_rot[j, k]
        lr[0, 0], lr[0, 1], lr[0, 2], lr[0, 3] = qw, 0.0, qy, 0.0
    fk_pose_into(lp, lr, rig.parents, gp, gr)


@numba.njit(cache=True, error_model="numpy")
def ground_rise(heights, ox, oz, cell, x, z, vx, vz):
    """Rate (m/s) at which the ground under (x, z) rises for a root moving at (vx, vz) m/s: the speed
    times the mean slope along the travel over RISE_REACH either side."""
    speed = math.hypot(vx, vz)
    if speed < 1e-6:
        return 0.0
    ux, uz = RISE_REACH * vx / speed, RISE_REACH * vz / speed
    up = height_at(heights, ox, oz, cell, x + ux, z + uz)
    down = height_at(heights, ox, oz, cell, x - ux, z - uz)
    return speed * (up - down) / (2.0 * RISE_REACH)


@numba.njit(cache=True, error_model="numpy")
def leg_lift(hx, hy, hz, ax, ay, az, tx, ty, tz):
    """Height (m, up positive) the hip at (hx, hy, hz) moves for the leg to keep its hip-to-ankle length
    (to the animated ankle at (ax, ay, az)) with the ankle at the target (tx, ty, tz): 0 on an untouched
    target, up for a shortened stride or a higher step, down for a lower one."""
    if ay >= hy:
        return 0.0              # a leg raised to the hip or above (a kick, a fall): nothing to keep
    length2 = (ax - hx) ** 2 + (ay - hy) ** 2 + (az - hz) ** 2
    horiz2 = (tx - hx) ** 2 + (tz - hz) ** 2
    return ty + math.sqrt(max(length2 - horiz2, 0.0)) - hy


@numba.njit(cache=True, error_model="numpy")
def beyond_reach(x, y, z, reach):
    """True when an ankle target at (x, y, z) m from the hip is out of a leg's reach (m) by more than LOCK_HANG
    with the hips MAX_DROP lower."""
    horiz = x * x + z * z
    return horiz >= reach * reach or -y - math.sqrt(reach * reach - horiz) > MAX_DROP + LOCK_HANG


@numba.njit(cache=True, error_model="numpy")
def keep_swing_length(hx, hy, hz, tx, ty, tz, length, floor):
    """Ankle target height (m) for a foot that is not planted: ty, or lower, down to `floor`, so the ankle is
    at least `length` (the played hip-to-ankle distance) from the hip at (hx, hy, hz). The hips come down for
    the planted legs (and the terrain raises a foot) while the swinging leg's pose stays the played one: held
    at its world target, that leg crouched (the side-steps' knees 6 degrees more bent than played)."""
    horiz2 = (tx - hx) ** 2 + (tz - hz) ** 2
    if horiz2 >= length * length or (tx - hx) ** 2 + (ty - hy) ** 2 + (tz - hz) ** 2 >= length * length:
        return ty
    return min(ty, max(hy - math.sqrt(length * length - horiz2), floor))


@numba.njit(cache=True, error_model="numpy")
def swing_give(hx, hy, hz, tx, tz, length, floor):
    """How far (m, >= 0) the hip at (hx, hy, hz) can come down with the swinging leg still reaching `length` (its
    played hip-to-ankle distance) from an ankle target at (tx, tz) no lower than `floor` (keep_swing_length)."""
    horiz2 = (tx - hx) ** 2 + (tz - hz) ** 2
    return max(hy - floor - math.sqrt(max(length * length - horiz2, 0.0)), 0.0)


@numba.njit(cache=True, error_model="numpy")
def slope_warp_into(q, nx, ny, nz, weight, max_angle):
    """Tilt the foot world rotation q (4,) in place toward the ground normal (see warping.slope_warp)."""
    s = math.hypot(nx, nz)
    if s < 1e-9 or weight <= 0.0:
        return
    ang = min(math.atan2(s, ny), max_angle) * min(weight, 1.0)
    h = 0.5 * ang
    c, sh = math.cos(h), math.sin(h) / s
    tw, tx, tz = c, sh * nz, -sh * nx
    w, x, y, z = q[0], q[1], q[2], q[3]
    q[0] = tw * w - tx * x - tz * z
    q[1] = tw * x + tx * w - tz * y
    q[2] = tw * y + tz * x - tx * z
    q[3] = tw * z + tx * y + tz * w


@numba.njit(cache=True, error_model="numpy")
def foot_lock_update(fl, contact, ax, ay, az, dt, unlock_radius, halflife, glide_halflife, relock_speed=0.0):
    """One foot's lock (fl: its FOOT_LOCK record): the target (x, y, z) for the animated toe at
    (ax, ay, az). On contact the foot locks: the displayed foot keeps the velocity it arrives with,
    which decays exponentially (the rate of a `glide_halflife` spring), and it comes to rest at the
    lock point, where that decay stops it (no overshoot, no coming back). It unlocks when the contact
    ends or the animated foot drifts beyond unlock_radius; every switch becomes an offset decayed by a
    spring (`halflife`), so position and velocity stay continuous. A foot unlocked by drifting stays
    free until its contact ends, or, with relock_speed > 0 (m/s), until the animated toe moves slower
    than that on the ground plane: contacts held through a whole step (a learned model's) lock again."""
    if not fl.has_prev or dt <= 0.0:
        vx = vy = vz = 0.0
    else:
        vx, vy, vz = (ax - fl.prev[0]) / dt, (ay - fl.prev[1]) / dt, (az - fl.prev[2]) / dt
    fl.prev[0], fl.prev[1], fl.prev[2], fl.has_prev = ax, ay, az, True
    if not contact or (relock_speed > 0.0 and vx * vx + vz * vz < relock_speed * relock_speed):
        fl.blocked = False
    glide = half_damping(glide_halflife)
    just_locked = False
    if fl.locked:
        dx, dy, dz = ax - fl.point[0], ay - fl.point[1], az - fl.point[2]
        drift = math.sqrt(dx * dx + dy * dy + dz * dz)
        if not contact or drift > unlock_radius:
            # Reference jumps from the lock point to the animated foot, velocity from 0 to v.
            fl.locked = False
            fl.blocked = contact
            fl.offset[0] += fl.point[0] - ax
            fl.offset[1] += fl.point[1] - ay
            fl.offset[2] += fl.point[2] - az
            fl.offset_vel[0] -= vx
            fl.offset_vel[1] -= vy
            fl.offset_vel[2] -= vz
    elif contact and not fl.blocked:
        # The displayed foot (animated + offset) moves at w. Offset -w / y with velocity w decays
        # as w e^(-y t): the foot glides w / y further along the ground and rests there, the lock
        # point. Vertically it locks at its height (offset 0, velocity w_y: a dip of |w_y| / (e y)).
        wx, wy, wz = vx + fl.offset_vel[0], vy + fl.offset_vel[1], vz + fl.offset_vel[2]
        fl.locked = True
        fl.point[0] = ax + fl.offset[0] + wx / glide
        fl.point[1] = ay + fl.offset[1]
        fl.point[2] = az + fl.offset[2] + wz / glide
        fl.offset[0], fl.offset[1], fl.offset[2] = -wx / glide, 0.0, -wz / glide
        fl.offset_vel[0], fl.offset_vel[1], fl.offset_vel[2] = wx, wy, wz
        just_locked = True      # shown where it is this frame: the glide starts from here
    if dt > 0.0 and not just_locked:
        y = glide if fl.locked else half_damping(halflife)
        for k in range(3):
            fl.offset[k], fl.offset_vel[k] = decay_exact(fl.offset[k], fl.offset_vel[k], y, dt)
    if fl.locked:
        return fl.point[0] + fl.offset[0], fl.point[1] + fl.offset[1], fl.point[2] + fl.offset[2]
    return ax + fl.offset[0], ay + fl.offset[1], az + fl.offset[2]


@numba.njit(cache=True, error_model="numpy", inline="always")   # into _output_range: a call passes every array of its records
def output_agent(i, dt, local, root, play, settings, rig, terrain, feet, out, relock_speed, scratch):
    """The displayed pose of character i into Display `out` (local and world, float64) from its shown
    local pose (playback.Pose `local`), Root and Playhead (stride, warp angle, contacts); feet: Feet
    (touch-up state); relock_speed: foot_lock_update's (0 for database contacts); scratch: _output_range's
    arrays, reused from agent to agent (an allocation per agent cost a malloc and a reference count each).
    Records are flat (numba's parallel loops cannot take a record inside a record)."""
    root_pos, root_yaw, root_vel = root
    stride, contacts = play.stride, play.contacts
    heights_state, locks, locked = feet
    lp, lr, gp, gr = out.local_pos[i], out.local_rot[i], out.pos[i], out.rot[i]
    parents, chain, legs, reach = rig.parents, rig.chain, rig.legs, rig.reach
    has_terrain, heights, ox, oz, cell, ground_halflife = terrain
    s = settings[i]
    hs = heights_state[i]
    if has_terrain:
        # The root (and so the whole body) rides on the smoothed ground height under it.
        g = height_at(heights, ox, oz, cell, root_pos[i, 0], root_pos[i, 2])
        if hs[HAS_GROUND] == 0.0:
            hs[GROUND], hs[HAS_GROUND] = g, 1.0
        else:
            # The smoothed height follows the ground's rise along the travel (the mean slope over a step
            # either side, so stairs count as a ramp): on a fixed goal the hips trailed 5 cm below the
            # ground walking uphill and every leg bent to reach it.
            hs[GROUND], hs[GROUND_VEL] = spring_moving_goal_exact(
                hs[GROUND], hs[GROUND_VEL], g, ground_rise(heights, ox, oz, cell, root_pos[i, 0], root_pos[i, 2],
                                                           root_vel[i, 0], root_vel[i, 2]), ground_halflife, dt)
        root_pos[i, 1] = hs[GROUND]
    angle = play.warp_angle[i]
    yaw = root_yaw[i]
    # Orientation warp: the lower body turns to the displayed facing + travel offset; the hip joints
    # and then the spine give it back within human ranges so the upper body keeps the desired facing
    # (what they cannot give back shows as the facing lagging toward the travel).
    half = 0.5 * (yaw + angle) if angle != 0.0 else 0.5 * yaw
    hips, spine = twist_split(-angle, s[S.W_HIP_LIMIT], s[S.W_SPINE_LIMIT])
    rot_scratch, targets, per_leg = scratch
    place_pose(i, local, root_pos, half, -angle, hips, spine, rig, out, rot_scratch)
    if has_terrain and s[S.W_SPINE_PITCH] != 0.0:
        # Spine pitch bending: the upper body leans with the ground's slope, smoothed like the root's height.
        lim = s[S.W_SPINE_PITCH_MAX]
        target = max(-lim, min(lim, s[S.W_SPINE_PITCH] * facing_slope(heights, ox, oz, cell, root_pos[i, 0],
                                                                          root_pos[i, 2], yaw)))
        lean = smoothed_lean(hs[LEAN:LEAN + 2], target, ground_halflife, dt)
        bend_spine(lr, gr, parents, chain, yaw, lean)
        fk_pose_into(lp, lr, parents, gp, gr)
    locked[i, 0] = locked[i, 1] = False
    locking = s[S.FOOT_LOCKING] != 0.0
    striding = abs(stride[i] - 1.0) > 1e-3
    if not (s[S.IK] != 0.0 and (locking or has_terrain or striding)):
        return
    base = lp[0, 1]              # the root's height: the animation's ground level now
    # Stride warping: feet displacement along the travel scaled about the root.
    vx, vz = root_vel[i, 0], root_vel[i, 2]
    shift = striding and math.hypot(vx, vz) > 0.05
    ty_, tz_ = 0.0, 0.0
    k = stride[i] - 1.0
    if shift:
        tyaw = math.atan2(vx, vz)
        ty_, tz_ = math.sin(tyaw), math.cos(tyaw)
    cx, cz = root_pos[i, 0], root_pos[i, 2]
    grounds = per_leg[0]
    grounds[0] = grounds[1] = 0.0
    lengths = per_leg[1]        # the played hip-to-ankle distances
    reaches = per_leg[2]        # the longest hip-to-ankle distances the IK gives each leg
    floors = per_leg[3]         # the lowest ankle target that keeps the played toe above the ground
    kk = damper_factor(SLOPE_BLEND_HALFLIFE, dt) if dt > 0 else 1.0
    lift = weight = 0.0
    for leg in range(2):
        hs[SLOPE_L + leg] += ((1.0 if contacts[i, leg] else 0.0) - hs[SLOPE_L + leg]) * kk
    for leg in range(2):
        up, ft, toe = legs[leg, 0], legs[leg, 2], legs[leg, 3]
        ax, ay, az = gp[toe, 0], gp[toe, 1], gp[toe, 2]
        tx, ty, tz = ax, ay, az
        sx = sz = 0.0
        lengths[leg] = math.sqrt((gp[ft, 0] - gp[up, 0]) ** 2 + (gp[ft, 1] - gp[up, 1]) ** 2
                                 + (gp[ft, 2] - gp[up, 2]) ** 2)
        # A leg played straighter than the IK's buffer may stay that straight (legs_pose's keep).
        reaches[leg] = max(reach[leg], lengths[leg])
        if shift:
            fx, fz = gp[ft, 0], gp[ft, 2]
            along = (fx - cx) * ty_ + (fz - cz) * tz_
            sx, sz = (fx + k * along * ty_) - fx, (fz + k * along * tz_) - fz
            tx, tz = tx + sx, tz + sz
        if has_terrain:
            # Animated heights are relative to flat ground at the root's height; move each foot
            # onto the terrain under it instead.
            g_toe = height_at(heights, ox, oz, cell, tx, tz)
            grounds[leg] = g_toe
            # A planted foot stands on the ground under it; a swinging one (blended by the smoothed contact)
            # rides the hips' ground, its toe at least its played height or TERRAIN_CLEARANCE above the step.
            ty = max(ty + hs[SLOPE_L + leg] * (g_toe - base), g_toe + min(max(ay - base, 0.0), TERRAIN_CLEARANCE))
        # Never below the ground: a transition's decaying offsets lowered planted toes up to 2 cm (runs).
        ty = max(ty, grounds[leg] if has_terrain else base)
        if locking:
            fl = locks[i, leg]
            radius = s[S.UNLOCK_RADIUS]
            if fl.locked and beyond_reach(fl.point[0] + fl.offset[0] - ax + gp[ft, 0] - gp[up, 0],
                                          ty - ay + gp[ft, 1] - gp[up, 1],
                                          fl.point[2] + fl.offset[2] - az + gp[ft, 2] - gp[up, 2], reaches[leg]):
                radius = 0.0    # a lock the leg cannot reach gives way like a drifted one (the foot would hang)
            lx, ly, lz = foot_lock_update(fl, contacts[i, leg], tx, ty, tz, dt, radius,
                                          s[S.LOCK_HALFLIFE], s[S.LOCK_GLIDE_HALFLIFE], relock_speed)
            locked[i, leg] = locks[i, leg].locked
            # The lock holds the foot on the ground plane only; its height follows the animated toe (on the
            # ground). Held at the height it landed at, a lock kept a stale height through transitions and a
            # standing still stretch (1.7 cm below the played toe on strafe_right): the hips came down for it and
            # the other knee bent, and planted toes sat 0.6-1.0 cm low on the strafes and backward walks.
            dx, dy, dz = lx - ax, ty - ay, lz - az
        else:
            dx, dy, dz = sx, ty - ay, sz
        targets[leg, 0], targets[leg, 1], targets[leg, 2] = gp[ft, 0] + dx, gp[ft, 1] + dy, gp[ft, 2] + dz
        floors[leg] = ((grounds[leg] if has_terrain else base) + max(gp[ft, 1] - ay, 0.0)
                       + min(max(ay - base, 0.0), SWING_CLEARANCE))
        # How far the hips would move for this leg to keep the played hip-to-ankle length on its target (the
        # stride warp, the terrain and the lock move it).
        st = hs[SLOPE_L + leg]
        if has_terrain:
            st = max(st, min(max((LOW_TOE_HI - (ay - base)) / (LOW_TOE_HI - LOW_TOE_LO), 0.0), 1.0))
        w = LIFT_SWING_WEIGHT + (1.0 - LIFT_SWING_WEIGHT) * st
        lift += w * leg_lift(gp[up, 0], gp[up, 1], gp[up, 2], gp[ft, 0], gp[ft, 1], gp[ft, 2],
                             targets[leg, 0], targets[leg, 1], targets[leg, 2])
        weight += w
    # The hips ride with the planted legs (their played extension on a shortened stride or a higher step: a
    # fixed height bent the knees 10-20 degrees there), then come down, at most MAX_DROP, for a target out of
    # reach (never hyper-extend a knee).
    lift = max(-MAX_LIFT, min(MAX_LIFT, lift / weight))
    need = -MAX_LIFT        # the least drop that keeps every target within reach
    for leg in range(2):
        up = legs[leg, 0]
        r = reaches[leg]
        hx, hy, hz = targets[leg, 0] - gp[up, 0], targets[leg, 1] - gp[up, 1], targets[leg, 2] - gp[up, 2]
        horiz = hx * hx + hz * hz
        if horiz < r * r:
            need = max(need, -hy - math.sqrt(r * r - horiz))
    goal = max(-lift, min(need, MAX_DROP))
    if goal > 0.0:
        # The hips come down no further than a swinging leg can follow at its played length (swing_give): below
        # that its toe reaches its floor and the knee bends. A side-step's stance leg stretched by the stride warp
        # pulled the hips 2 cm down and bent the other leg, straight before it lands, 10-14 degrees; the stance
        # foot now stops short of its target instead (a lock further gives way: beyond_reach).
        for leg in range(2):
            if not (contacts[i, leg] or locked[i, leg]):
                up = legs[leg, 0]
                goal = min(goal, swing_give(gp[up, 0], gp[up, 1], gp[up, 2], targets[leg, 0], targets[leg, 2],
                                            lengths[leg], min(floors[leg], targets[leg, 1])))
    if dt > 0:
        hs[DROP], hs[DROP_VEL] = spring_exact(hs[DROP], hs[DROP_VEL], goal, HIPS_HALFLIFE, dt)
    # Lifted hips never stay above what the legs reach (the feet would hang above their targets).
    drop = max(hs[DROP], min(need, 0.0))
    drop = drop if abs(drop) > 1e-5 else 0.0
    if has_terrain and s[S.W_SLOPE] != 0.0:
        if drop:
            lp[0, 1] -= drop
            fk_pose_into(lp, lr, parents, gp, gr)
            drop = 0.0
        # Slope warping: planted feet tilt to the ground normal (blended in and out with contact).
        for leg in range(2):
            ft, toe = legs[leg, 2], legs[leg, 3]
            nx, ny, nz = normal_at(heights, ox, oz, cell, targets[leg, 0], targets[leg, 2])
            slope_warp_into(gr[ft], nx, ny, nz, hs[SLOPE_L + leg], s[S.W_SLOPE_MAX])
            # Keep the toe where it was aimed (locked or on the ground): the tilt pivots about it.
            rx, ry, rz = qrot(gr[ft, 0], gr[ft, 1], gr[ft, 2], gr[ft, 3], lp[toe, 0], lp[toe, 1], lp[toe, 2])
            targets[leg, 0] = (targets[leg, 0] + (gp[toe, 0] - gp[ft, 0])) - rx
            targets[leg, 1] = (targets[leg, 1] + (gp[toe, 1] - gp[ft, 1])) - ry
            targets[leg, 2] = (targets[leg, 2] + (gp[toe, 2] - gp[ft, 2])) - rz
            # The IK's toe-above-ground fix reads the toe from gp: the tilted foot's (the untilted one lies
            # below the ground uphill, and the fix tilted the foot further: planted toes 0.3 cm higher on
            # a 12 degree slope, 4.0 against 3.7 cm).
            gp[toe, 0], gp[toe, 1], gp[toe, 2] = gp[ft, 0] + rx, gp[ft, 1] + ry, gp[ft, 2] + rz
    for leg in range(2):
        planted = contacts[i, leg] or locked[i, leg]
        if not planted:
            up = legs[leg, 0]
            targets[leg, 1] = keep_swing_length(gp[up, 0], gp[up, 1] - drop, gp[up, 2], targets[leg, 0],
                                                targets[leg, 1], targets[leg, 2], lengths[leg], floors[leg])
    legs_pose(lp, lr, gp, gr, parents, legs, targets, 3 if has_terrain else 0, grounds, drop, LEG_BUFFER, True)


# The parallel stage's agents go to _output_range in this many equal chunks (numba shares them out equally among
# the threads; a compiled constant, so the stage stays cacheable).
CHUNKS = 64


@numba.njit(cache=True, error_model="numpy")
def _output_range(agents, dt, local, root, play, settings, rig, terrain, feet, out, relock_speed):
    """_output_and_copy for each of `agents` (a slice of a stage's). Both stages run their agents through this
    one compiled loop, so a pose does not depend on the thread count (output_agent inlined into a parallel
    loop body compiled differently)."""
    scratch = (np.empty((2, out.local_rot.shape[1], 4)), np.empty((2, 3)), np.empty((4, 2)))
    for a in range(agents.shape[0]):
        _output_and_copy(agents[a], dt, local, root, play, settings, rig, terrain, feet, out, relock_speed, scratch)


@numba.njit(cache=True, error_model="numpy", parallel=True)
def _output_parallel(agents, dt, local, root, play, settings, rig, terrain, feet, out, relock_speed):
    n = agents.shape[0]
    chunks = max(min(n, CHUNKS), 1)
    for c in numba.prange(chunks):
        _output_range(agents[c * n // chunks:(c + 1) * n // chunks], dt, local, root, play, settings, rig, terrain,
                      feet, out, relock_speed)


@numba.njit(cache=True, error_model="numpy")
def output_stage(agents, dt, local, root, play, settings, rig, terrain, feet, out, relock_speed):
    """output_agent for each of `agents` in parallel; world joint positions / rotations also into the
    float32 outputs (out.positions, out.rotations). Records borrowed (runtime/borrow.py) by this caller
    of the parallel loop: numba's parallel loops cannot borrow records themselves."""
    agents, local, root, play, settings, rig, terrain, feet, out = borrow(
        (agents, local, root, play, settings, rig, terrain, feet, out))
    _output_parallel(agents, dt, local, root, play, settings, rig, terrain, feet, out, relock_speed)


@numba.njit(cache=True, error_model="numpy")
def output_serial(agents, dt, local, root, play, settings, rig, terrain, feet, out, relock_speed):
    """output_stage on the calling thread (small crowds: no thread hand-off)."""
    agents, local, root, play, settings, rig, terrain, feet, out = borrow(
        (agents, local, root, play, settings, rig, terrain, feet, out))
    # A slice, as the parallel stage passes: the same argument types, the same compiled loop.
    _output_range(agents[0:agents.shape[0]], dt, local, root, play, settings, rig, terrain, feet, out, relock_speed)


# Inlined into _output_range, as output_agent: a call passes every array of its records by value.
@numba.njit(cache=True, error_model="numpy", inline="always")
def _output_and_copy(i, dt, local, root, play, settings, rig, terrain, feet, out, relock_speed, scratch):
    output_agent(i, dt, local, root, play, settings, rig, terrain, feet, out, relock_speed, scratch)
    gp, gr = out.pos[i], out.rot[i]
    out_positions, out_rotations = out.positions, out.rotations
    for j in range(gp.shape[0]):
        for k in range(3):
            out_positions[i, j, k] = gp[j, k]
        for k in range(4):
            out_rotations[i, j, k] = gr[j, k]
