"""Playback of the matched animation for every character: play-rate advance through a clip, the pose
at a (fractional) database frame, inertialization of transitions, and the character root integrating
the animation's root motion with synchronization to the simulation (adjustment and clamping).

The per-character functions take the crowd's state arrays and a character index, so the crowd's
stage loops (`playback_stage`, `transition_stage`) and a single character run the same code.
Conventions: metres, seconds, radians; Y up; yaw 0 faces +Z; quaternions (w, x, y, z). The root
(joint 0, the simulation bone) is given as motion in its own frame: position 0, identity rotation,
velocity and angular velocity local to it (so clips far apart in the world blend).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np

from . import inertialization
from .borrow import borrow
from . import settings as S
from .controller import GOAL_VX, GOAL_VZ, PX, PZ, VX, VZ, YAW
from ..maths.springs import damper_factor
from .warping import BACKWARD, FIXED_RATE, ROOT_GOAL_YAW, WEIGHT, orientation_update, speed_update, stride_reference

_TWO_PI = 2.0 * math.pi


class Frames(NamedTuple):
    """Poses to play, one row per frame: a database's (database_velocities) or learned agents' rows."""

    positions: np.ndarray      # (N, J, 3) local joint positions, m
    rotations: np.ndarray      # (N, J, 4) local joint rotations
    vel: np.ndarray            # (N, J, 3) local velocities, m/s
    angvel: np.ndarray         # (N, J, 3) local angular velocities, rad/s
    root_vel: np.ndarray       # (N, 3) the root's velocity in its own frame, m/s
    root_angvel: np.ndarray    # (N, 3) its angular velocity in its own frame, rad/s


def read_only_view(a: np.ndarray) -> np.ndarray:
    """A read-only view of `a` (the same memory; its owner can still write it)."""
    v = a.view()
    v.flags.writeable = False
    return v


def read_only(record):
    """`record` (a named tuple of arrays and scalars) with every array a read-only view.

    numba types a read-only array apart from a writable one and compiles a stage once per type: a
    database loaded from a file is read-only, one built in memory is writable, learned agents' rows are
    written by their own kernels. The stages only read these records, so they always get read-only views
    and each stage compiles once whatever the records' source."""
    return type(record)(*(read_only_view(a) if isinstance(a, np.ndarray) else a for a in record))


class Clips(NamedTuple):
    """What playback reads per frame besides its pose (rows as in Frames). Stages running in parallel
    take flat records only (numba's parallel loops cannot take a record inside a record)."""

    speed: np.ndarray          # (N,) the clip's root speed around each frame, m/s (stride warping)
    stop: np.ndarray           # (N,) int64 the end (exclusive) of each frame's clip
    contacts: np.ndarray       # (N, 2) bool left, right foot contact


class Pose(NamedTuple):
    """Local poses of n characters, float64 (joint 0 the root: own-frame motion, or placed)."""

    pos: np.ndarray            # (n, J, 3)
    rot: np.ndarray            # (n, J, 4)
    vel: np.ndarray            # (n, J, 3), or (n, 1, 3): the root's alone (a shown pose, new_shown_pose)
    angvel: np.ndarray         # the same


def new_pose(n: int, num_joints: int) -> Pose:
    J = num_joints
    return Pose(np.zeros((n, J, 3)), np.zeros((n, J, 4)), np.zeros((n, J, 3)), np.zeros((n, J, 3)))


def new_shown_pose(n: int, num_joints: int) -> Pose:
    """The shown pose of n characters: every joint's position and rotation, the root's velocities only.
    Nothing reads the other joints' shown velocities every tick (a transition samples its own), and
    computing them was 7 % of a 10,000-agent tick; `shown_velocities` gives them on demand."""
    J = num_joints
    return Pose(np.zeros((n, J, 3)), np.zeros((n, J, 4)), np.zeros((n, 1, 3)), np.zeros((n, 1, 3)))


class Playhead(NamedTuple):
    """Where each of n characters plays and how fast."""

    frame: np.ndarray          # (n,) int64 the frame playing
    frac: np.ndarray           # (n,) fraction (0..1) of the way to the next frame
    rate: np.ndarray           # (n,) play rate (1: the data's speed)
    stride: np.ndarray         # (n,) stride warping scale (1: none)
    warp_angle: np.ndarray     # (n,) orientation warp between lower and upper body, radians
    contacts: np.ndarray       # (n, 2) bool left, right foot contact of the frame playing


class Root(NamedTuple):
    """The character roots of n characters in the world."""

    pos: np.ndarray            # (n, 3) m (y: the ground height under it)
    yaw: np.ndarray            # (n,) radians, 0 faces +Z
    vel: np.ndarray            # (n, 3) m/s


@numba.njit(cache=True, error_model="numpy", inline="always")
def remainder_2pi(x):
    """math.remainder(x, 2 pi): x wrapped to [-pi, pi] (exact for |x| < 3 pi, all the runtime needs)."""
    n = math.floor(x / _TWO_PI + 0.5)
    return x - n * _TWO_PI


@numba.njit(cache=True, error_model="numpy")
def advance_frame(frame, frac, rate, stop):
    """Play `rate` frames forward from frame + frac without passing the clip's last frame (stop
    exclusive); returns (frame, frac)."""
    pos = frac + rate
    step = int(math.floor(pos))
    frame += step
    frac = pos - step
    if frame >= stop - 1:
        return stop - 1, 0.0
    return frame, frac


@numba.njit(cache=True, error_model="numpy")
def frame_pose(frames, i, rate, out_p, out_r, out_v, out_w, joints_vel):
    """Frame i (of Frames) as float64 with the root as its own-frame motion (position 0, identity
    rotation, root_vel / root_angvel velocities), velocities scaled by `rate` when it is not 1; the
    velocities of joints 1 .. joints_vel - 1 only (1: the root's alone)."""
    positions, rotations, vel, angvel, root_vel, root_angvel = frames
    for j in range(positions.shape[1]):
        for k in range(3):
            out_p[j, k] = positions[i, j, k]
        for k in range(4):
            out_r[j, k] = rotations[i, j, k]
    for j in range(1, joints_vel):
        for k in range(3):
            out_v[j, k] = vel[i, j, k]
            out_w[j, k] = angvel[i, j, k]
    for k in range(3):
        out_v[0, k] = root_vel[i, k]
        out_w[0, k] = root_angvel[i, k]
    own_frame_root(out_p, out_r, out_v, out_w, rate, joints_vel)


@numba.njit(cache=True, error_model="numpy")
def own_frame_root(out_p, out_r, out_v, out_w, rate, joints_vel):
    """The root as motion in its own frame (position 0, identity rotation; its velocities already set)
    and the velocities of the first joints_vel joints scaled by the play rate."""
    for k in range(3):
        out_p[0, k] = 0.0
    out_r[0, 0], out_r[0, 1], out_r[0, 2], out_r[0, 3] = 1.0, 0.0, 0.0, 0.0
    if rate != 1.0:
        for j in range(joints_vel):
            for k in range(3):
                out_v[j, k] *= rate
                out_w[j, k] *= rate


@numba.njit(cache=True, error_model="numpy")
def slerp_frames(positions, rotations, i, j, t, out_p, out_r):
    """Pose between frames i and j at t (0..1): positions lerped, rotations slerped, into out_p / out_r."""
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


@numba.njit(cache=True, error_model="numpy")
def lerp_frames(values, i, j, t, out, first=0):
    """Per-frame values (N, J, 3) lerped between frames i and j at t into out (J, 3), joints from `first` on."""
    # Indexed, not raveled: a ravel is a reshape call and a view per array, per agent and tick.
    for a in range(first, values.shape[1]):
        for k in range(values.shape[2]):
            v0 = values[i, a, k]
            out[a, k] = v0 + (values[j, a, k] - v0) * t


@numba.njit(cache=True, error_model="numpy")
def anim_pose(frames, f, rate, stop, out_p, out_r, out_v, out_w, joint_vel=True):
    """Local pose at (fractional) frame f (of Frames) of a clip ending at `stop` (exclusive), root as
    own-frame motion, velocities scaled by the play rate; into out_* (float64). joint_vel False: the
    root's velocities alone (out_v, out_w keep the other joints' rows as they were)."""
    positions, rotations, vel, angvel, root_vel, root_angvel = frames
    joints_vel = positions.shape[1] if joint_vel else 1
    i = int(f)
    if f == i:
        frame_pose(frames, i, rate, out_p, out_r, out_v, out_w, joints_vel)
        return
    i = int(math.floor(f))
    t = f - i
    last = stop - 1
    if i >= last:
        i, j, t = last, last, 0.0
    else:
        j = i + 1
    slerp_frames(positions, rotations, i, j, t, out_p, out_r)
    if joint_vel:
        lerp_frames(vel, i, j, t, out_v, 1)
        lerp_frames(angvel, i, j, t, out_w, 1)
    for k in range(3):
        out_v[0, k] = root_vel[i, k] + (root_vel[j, k] - root_vel[i, k]) * t
        out_w[0, k] = root_angvel[i, k] + (root_angvel[j, k] - root_angvel[i, k]) * t
    own_frame_root(out_p, out_r, out_v, out_w, rate, joints_vel)


def animation_pose(frames: Frames, clips: Clips, play: Playhead, i: int) -> Pose:
    """Character i's animation pose this tick, before inertialization (as playback sampled it): a Pose
    of one row, every joint's velocities included, root as own-frame motion."""
    out = new_pose(1, frames.positions.shape[1])
    f = int(play.frame[i])
    anim_pose(frames, f + float(play.frac[i]), float(play.rate[i]), int(clips.stop[f]), out.pos[0], out.rot[0],
              out.vel[0], out.angvel[0])
    return out


def shown_velocities(frames: Frames, clips: Clips, play: Playhead, inert, settings: np.ndarray,
                     i: int) -> tuple[np.ndarray, np.ndarray]:
    """Character i's shown local velocities and angular velocities this tick, (J, 3) each, m/s and rad/s
    (the shown pose keeps the root's alone): computed on demand from its animation pose and its running
    offsets (inert: inertialization.Offsets) as the tick applied them; settings: the packed rows."""
    a = animation_pose(frames, clips, play, i)
    if int(settings[i, S.INERTIALIZATION]) == inertialization.OFF:
        return a.vel[0], a.angvel[0]      # step shows the animation as it is
    p, r, v, w = np.empty_like(a.pos[0]), np.empty_like(a.rot[0]), np.empty_like(a.vel[0]), np.empty_like(a.vel[0])
    inertialization.apply_offsets(inert.pos[i], inert.vel[i], inert.rot[i], inert.angvel[i], a.pos[0], a.vel[0],
                                  a.rot[0], a.angvel[0], p, v, r, w)
    return v, w


@numba.njit(cache=True, error_model="numpy")
def transition_agent(i, to, frames, stop_of, inert, play, s, scratch):
    """Jump character i to frame `to` of `frames`: the offsets (inertialization.Offsets) take over the
    difference between the pose it was playing and the new one (both as they would play now, into
    the two Pose records of `scratch`), frame and fraction move to `to`. s: its settings row."""
    src, dst = scratch
    f = play.frame[i]
    rate = play.rate[i]
    anim_pose(frames, f + play.frac[i], rate, stop_of[f], src.pos[i], src.rot[i], src.vel[i], src.angvel[i])
    anim_pose(frames, float(to), rate, stop_of[to], dst.pos[i], dst.rot[i], dst.vel[i], dst.angvel[i])
    inertialization.start(inert, i, int(s[S.INERTIALIZATION]), s[S.HALFLIFE], s[S.BLEND_TIME], src, dst)
    play.frame[i] = to
    play.frac[i] = 0.0


@numba.njit(cache=True, error_model="numpy")
def transition_stage(agents, targets, frames, stop_of, inert, play, settings, scratch):
    """transition_agent for each agents[k] -> targets[k] (a few per tick: on the calling thread)."""
    frames, stop_of, inert, play, settings, scratch = borrow((frames, stop_of, inert, play, settings, scratch))
    for k in range(agents.shape[0]):
        i = agents[k]
        transition_agent(i, targets[k], frames, stop_of, inert, play, settings[i], scratch)


@numba.njit(cache=True, error_model="numpy", parallel=True)
def _transition_parallel(agents, targets, frames, stop_of, inert, play, settings, src, dst):
    for k in numba.prange(agents.shape[0]):
        i = agents[k]
        transition_agent(i, targets[k], frames, stop_of, inert, play, settings[i], (src, dst))


@numba.njit(cache=True, error_model="numpy")
def transition_parallel(agents, targets, frames, stop_of, inert, play, settings, scratch):
    """transition_stage in parallel, for the many transitions of a large crowd's tick (agents distinct:
    each writes its own rows only)."""
    frames, stop_of, inert, play, settings, (src, dst) = borrow((frames, stop_of, inert, play, settings, scratch))
    # The two scratch poses go separately: numba's parallel loops cannot take a record inside a record.
    _transition_parallel(agents, targets, frames, stop_of, inert, play, settings, src, dst)


@numba.njit(cache=True, error_model="numpy")
def _synchronize(i, ctrl, root_pos, root_yaw, wt, s, speed, yaw_rate, dt, rx, rz):
    """Adjustment of the character toward the simulation (limited by the root's own speed, so a
    standing character is never dragged) and clamping of the simulation to a radius around it.
    Returns the adjusted root ground position; root_yaw[i] and the controller row are updated."""
    goal = wt[i, ROOT_GOAL_YAW] if s[S.W_ORIENTATION] != 0.0 else ctrl[i, YAW]
    if s[S.ADJUSTMENT] != 0.0:
        dx, dz = ctrl[i, PX] - rx, ctrl[i, PZ] - rz
        k = damper_factor(max(s[S.ADJ_POS_HALFLIFE], 1e-4), dt)
        sx, sz = dx * k, dz * k
        n = math.hypot(sx, sz)
        limit = s[S.ADJ_MAX_RATIO] * speed * dt
        if n > limit:
            sx, sz = sx * limit / n, sz * limit / n
        rx += sx
        rz += sz
        dyaw = remainder_2pi(goal - root_yaw[i])
        # Walking backward the data has no turning clip (one straight walk-back): between backward diagonals
        # the root's facing turns only here, so it may turn faster than the position is pulled.
        backward = s[S.W_ORIENTATION] != 0.0 and wt[i, BACKWARD] != 0.0 and wt[i, WEIGHT] > 0.0
        kr = damper_factor(max(s[S.ADJ_BACKWARD_ROT_HALFLIFE] if backward else s[S.ADJ_ROT_HALFLIFE], 1e-4), dt)
        ratio = s[S.ADJ_BACKWARD_TURN_RATIO] if backward else s[S.ADJ_MAX_RATIO]
        ylimit = ratio * (abs(yaw_rate) + speed) * dt
        root_yaw[i] = remainder_2pi(root_yaw[i] + max(-ylimit, min(ylimit, dyaw * kr)))
    if s[S.CLAMPING] != 0.0:
        dx, dz = ctrl[i, PX] - rx, ctrl[i, PZ] - rz
        dist = math.hypot(dx, dz)
        r = s[S.CLAMP_RADIUS]
        if dist > r:
            ctrl[i, PX] = rx + dx * r / dist
            ctrl[i, PZ] = rz + dz * r / dist
        dyaw = remainder_2pi(goal - root_yaw[i])
        lim = s[S.CLAMP_ANGLE]
        if abs(dyaw) > lim:
            ctrl[i, YAW] = remainder_2pi(ctrl[i, YAW] - (dyaw - math.copysign(lim, dyaw)))
    return rx, rz


# m/s: the stick asks for more speed than the simulation has by more than this (stride_up_halflife).
SPEEDING_UP = 0.05


# Inlined into _playback_range: a call passes each array of its records by value (some 40 here), which cost
# more than a tenth of the agent's playback.
@numba.njit(cache=True, error_model="numpy", inline="always")
def playback_agent(i, dt, frames, clips, ctrl, wt, settings, play, inert, local, root, anim):
    """One tick of playback for character i: play rate and stride, advance, sample, inertialize,
    integrate the root and synchronize it with the simulation, orientation twist. frames: Frames and
    clips: Clips of the pose source; play: Playhead; inert: inertialization.Offsets; local: Pose, the
    shown one (new_shown_pose); root: Root; anim: scratch for the animation's pose (positions,
    rotations, velocities, angular velocities) (J, 3 or 4)."""
    s = settings[i]
    frame, frac, rate, stride = play.frame, play.frac, play.rate, play.stride
    root_v = frames.root_vel
    sim_speed = math.hypot(ctrl[i, VX], ctrl[i, VZ])
    fixed = wt[i, FIXED_RATE]
    # A rate fixed by the matcher (a held clip, an idle hold) leaves the speed warp to the stride alone.
    play_rate, strides = s[S.W_PLAY_RATE] != 0.0 and fixed <= 0.0, s[S.W_STRIDE] != 0.0
    if s[S.W_TIMESCALE] != 0.0:
        pass                     # rate and stride already set by timescale.timescale_stage
    elif play_rate or strides:
        anim_speed, halflife = float(clips.speed[frame[i]]), s[S.W_SPEED_HALFLIFE]
        stride_min, stride_max = s[S.W_STRIDE_MIN], s[S.W_STRIDE_MAX]
        if s[S.W_ORIENTATION] != 0.0:
            anim_speed, halflife, stride_min, stride_max = stride_reference(
                wt, i, anim_speed, root_v[frame[i], 0], root_v[frame[i], 2], halflife, stride_min, stride_max)
        # The rate slows a clip for a slow request, not for the simulation's dip through a turn (a 180
        # degree turn goes through standing): it follows the faster of the simulation and its goal.
        goal_speed = math.hypot(ctrl[i, GOAL_VX], ctrl[i, GOAL_VZ])
        rate_speed = max(sim_speed, goal_speed)
        # While the stick asks for more speed than the simulation has (a start, speeding up), a lengthening stride
        # catches up sooner: a walk start plays a captured start, slower than the simulation.
        lengthen = min(halflife, s[S.W_STRIDE_UP_HALFLIFE]) if goal_speed > sim_speed + SPEEDING_UP else halflife
        r, k = speed_update(wt, i, sim_speed, rate_speed, anim_speed, dt, play_rate,
                            (s[S.W_RATE_MIN], s[S.W_RATE_MAX], s[S.W_RATE_SHARE]), strides, (stride_min, stride_max),
                            halflife, lengthen)
        rate[i] = r if play_rate else 1.0
        stride[i] = k if strides else 1.0
    else:
        rate[i] = 1.0
        stride[i] = 1.0
    if fixed > 0.0:
        rate[i] = fixed
    stop = clips.stop[frame[i]]
    frame[i], frac[i] = advance_frame(frame[i], frac[i], rate[i], stop)
    method = int(s[S.INERTIALIZATION])
    anim_pose(frames, frame[i] + frac[i], rate[i], stop, anim[0], anim[1], anim[2], anim[3],
              inertialization.needs_joint_velocities(method))
    inertialization.step(inert, i, method, s[S.HALFLIFE], s[S.BLEND_TIME], dt, anim, local)
    lv, lw = local.vel, local.angvel
    root_pos, root_yaw, root_vel = root

    # Root: integrate the animation's own root motion from the character's current transform.
    c, sn = math.cos(root_yaw[i]), math.sin(root_yaw[i])
    lvx, lvz = lv[i, 0, 0] * stride[i], lv[i, 0, 2] * stride[i]
    vx, vz = lvx * c + lvz * sn, -lvx * sn + lvz * c
    yaw_rate = lw[i, 0, 1]
    rx = root_pos[i, 0] + vx * dt
    rz = root_pos[i, 2] + vz * dt
    root_yaw[i] = remainder_2pi(root_yaw[i] + yaw_rate * dt)
    root_vel[i, 0], root_vel[i, 1], root_vel[i, 2] = vx, 0.0, vz
    rx, rz = _synchronize(i, ctrl, root_pos, root_yaw, wt, s, math.hypot(vx, vz), yaw_rate, dt, rx, rz)
    root_pos[i, 0], root_pos[i, 2] = rx, rz
    if s[S.W_ORIENTATION] != 0.0:
        play.warp_angle[i] = orientation_update(wt, i, ctrl[i, YAW], root_yaw[i], sim_speed, dt, s[S.W_LIMIT],
                                                s[S.W_MIN_TRAVEL], s[S.W_ORIENT_HALFLIFE])
    else:
        play.warp_angle[i] = 0.0
    play.contacts[i, 0], play.contacts[i, 1] = clips.contacts[frame[i], 0], clips.contacts[frame[i], 1]


# The parallel stage's agents go to _playback_range in this many equal chunks (numba shares them out equally
# among the threads; a compiled constant, so the stage stays cacheable).
CHUNKS = 64


@numba.njit(cache=True, error_model="numpy")
def _playback_range(lo, hi, dt, frames, clips, ctrl, wt, settings, play, inert, local, root):
    """playback_agent for characters lo .. hi - 1. Both stages run their agents through this one compiled
    loop, so a pose does not depend on the thread count (playback_agent inlined into a parallel loop
    body compiled differently: joints 5e-6 m apart after 150 ticks)."""
    # The animation's pose is used within the agent's tick only: one scratch pose, warm in the cache, not a row
    # per agent (a 10,000-agent crowd's rows were 24 MB written and read back every tick).
    J = local.pos.shape[1]
    anim = (np.empty((J, 3)), np.empty((J, 4)), np.empty((J, 3)), np.empty((J, 3)))
    for i in range(lo, hi):
        playback_agent(i, dt, frames, clips, ctrl, wt, settings, play, inert, local, root, anim)


@numba.njit(cache=True, error_model="numpy", parallel=True)
def _playback_parallel(dt, frames, clips, ctrl, wt, settings, play, inert, local, root):
    n = play.frame.shape[0]
    chunks = max(min(n, CHUNKS), 1)
    for c in numba.prange(chunks):
        _playback_range(c * n // chunks, (c + 1) * n // chunks, dt, frames, clips, ctrl, wt, settings, play, inert,
                        local, root)


@numba.njit(cache=True, error_model="numpy")
def playback_stage(dt, frames, clips, ctrl, wt, settings, play, inert, local, root):
    """playback_agent for every character, in parallel. The records are borrowed (runtime/borrow.py) by
    this caller of the parallel loop: numba's parallel loops cannot borrow records themselves."""
    frames, clips, ctrl, wt, settings, play, inert, local, root = borrow(
        (frames, clips, ctrl, wt, settings, play, inert, local, root))
    _playback_parallel(dt, frames, clips, ctrl, wt, settings, play, inert, local, root)


@numba.njit(cache=True, error_model="numpy")
def playback_serial(dt, frames, clips, ctrl, wt, settings, play, inert, local, root):
    """playback_agent for every character on the calling thread (small crowds: no thread hand-off)."""
    frames, clips, ctrl, wt, settings, play, inert, local, root = borrow(
        (frames, clips, ctrl, wt, settings, play, inert, local, root))
    _playback_range(0, play.frame.shape[0], dt, frames, clips, ctrl, wt, settings, play, inert, local, root)
