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

import numba

from . import settings as S
from .controller import PX, PZ, VX, VZ, YAW
from .dead_blending import dead_blend_offsets, dead_blend_setup
from .inertialization import apply_offsets, quintic_eval, quintic_setup, spring_decay, transition_offsets
from .springs import damper_factor, half_damping
from .warping import ROOT_GOAL_YAW, orientation_update, speed_update, stride_reference

_TWO_PI = 2.0 * math.pi


@numba.njit(cache=True, inline="always")
def remainder_2pi(x):
    """math.remainder(x, 2 pi): x wrapped to [-pi, pi] (exact for |x| < 3 pi, all the runtime needs)."""
    n = math.floor(x / _TWO_PI + 0.5)
    return x - n * _TWO_PI


@numba.njit(cache=True)
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


@numba.njit(cache=True)
def frame_pose(positions, rotations, vel, angvel, root_vel, root_angvel, i, rate,
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
    own_frame_root(out_p, out_r, out_v, out_w, rate)


@numba.njit(cache=True)
def own_frame_root(out_p, out_r, out_v, out_w, rate):
    """The root as motion in its own frame (position 0, identity rotation; its velocities already set)
    and every velocity scaled by the play rate."""
    for k in range(3):
        out_p[0, k] = 0.0
    out_r[0, 0], out_r[0, 1], out_r[0, 2], out_r[0, 3] = 1.0, 0.0, 0.0, 0.0
    if rate != 1.0:
        for j in range(out_v.shape[0]):
            for k in range(3):
                out_v[j, k] *= rate
                out_w[j, k] *= rate


@numba.njit(cache=True)
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


@numba.njit(cache=True)
def lerp_frames(values, i, j, t, out):
    """Per-frame values (N, ...) lerped between frames i and j at t into out."""
    v0 = values[i].ravel()
    v1 = values[j].ravel()
    o = out.ravel()
    for k in range(v0.shape[0]):
        o[k] = v0[k] + (v1[k] - v0[k]) * t


@numba.njit(cache=True)
def anim_pose(positions, rotations, vel, angvel, root_vel, root_angvel, f, rate, stop, out_p, out_r, out_v, out_w):
    """Local pose at (fractional) database frame f of a clip ending at `stop` (exclusive), root as
    own-frame motion, velocities scaled by the play rate; into out_* (float64)."""
    i = int(f)
    if f == i:
        frame_pose(positions, rotations, vel, angvel, root_vel, root_angvel, i, rate,
                           out_p, out_r, out_v, out_w)
        return
    i = int(math.floor(f))
    t = f - i
    last = stop - 1
    if i >= last:
        i, j, t = last, last, 0.0
    else:
        j = i + 1
    slerp_frames(positions, rotations, i, j, t, out_p, out_r)
    lerp_frames(vel, i, j, t, out_v)
    lerp_frames(angvel, i, j, t, out_w)
    for k in range(3):
        out_v[0, k] = root_vel[i, k] + (root_vel[j, k] - root_vel[i, k]) * t
        out_w[0, k] = root_angvel[i, k] + (root_angvel[j, k] - root_angvel[i, k]) * t
    own_frame_root(out_p, out_r, out_v, out_w, rate)


@numba.njit(cache=True)
def transition_agent(i, to, db, inert, frame, frame_frac, rate, method, halflife, blend_time, stop_of, scratch):
    """Jump character i to database frame `to`: the offsets take over the difference between the pose
    it was playing and the new one (both as they would play now), frame and fraction move to `to`.
    method: the index in settings.INERTIALIZATION_METHODS."""
    positions, rotations, vel, angvel, root_vel, root_angvel = db
    off_p, off_v, off_r, off_w, pos_params, rot_params, inert_time = inert
    sp, sr, sv, sw, dp, dr, dv, dw = scratch
    f = frame[i]
    anim_pose(positions, rotations, vel, angvel, root_vel, root_angvel, f + frame_frac[i], rate[i], stop_of[f],
              sp[i], sr[i], sv[i], sw[i])
    anim_pose(positions, rotations, vel, angvel, root_vel, root_angvel, float(to), rate[i], stop_of[to],
              dp[i], dr[i], dv[i], dw[i])
    if method == 2:
        off_p[i] = 0.0
        off_v[i] = 0.0
        off_r[i] = 0.0
        off_w[i] = 0.0
        pos_params[i] = 0.0
        rot_params[i] = 0.0
    elif method == 3:
        # The pose on screen (source + running offsets), in place of the source pose.
        apply_offsets(off_p[i], off_v[i], off_r[i], off_w[i], sp[i], sv[i], sr[i], sw[i], sp[i], sv[i], sr[i], sw[i])
        dead_blend_setup(sp[i], sv[i], sr[i], sw[i], pos_params[i], rot_params[i])
        dead_blend_offsets(pos_params[i], rot_params[i], 0.0, halflife, blend_time, dp[i], dv[i], dr[i], dw[i],
                           off_p[i], off_v[i], off_r[i], off_w[i])
    else:
        transition_offsets(off_p[i], off_v[i], off_r[i], off_w[i], sp[i], sv[i], sr[i], sw[i],
                           dp[i], dv[i], dr[i], dw[i])
        if method == 1:
            quintic_setup(off_p[i], off_v[i], blend_time, pos_params[i])
            quintic_setup(off_r[i], off_w[i], blend_time, rot_params[i])
            quintic_eval(pos_params[i], 0.0, off_p[i], off_v[i])
            quintic_eval(rot_params[i], 0.0, off_r[i], off_w[i])
    inert_time[i] = 0.0
    frame[i] = to
    frame_frac[i] = 0.0


@numba.njit(cache=True)
def transition_stage(agents, targets, db, inert, frame, frame_frac, rate, settings, stop_of, scratch):
    """transition_agent for each agents[k] -> targets[k] (a few per tick: on the calling thread)."""
    for k in range(agents.shape[0]):
        i = agents[k]
        transition_agent(i, targets[k], db, inert, frame, frame_frac, rate, int(settings[i, S.INERTIALIZATION]),
                         settings[i, S.HALFLIFE], settings[i, S.BLEND_TIME], stop_of, scratch)


@numba.njit(cache=True)
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
        kr = damper_factor(max(s[S.ADJ_ROT_HALFLIFE], 1e-4), dt)
        ylimit = s[S.ADJ_MAX_RATIO] * (abs(yaw_rate) + speed) * dt
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


@numba.njit(cache=True)
def playback_agent(i, dt, db, clip_speed, stop_of, contacts_db, ctrl, wt, settings, frame, frame_frac, rate,
                   stride, warp_angle, inert, local, root_pos, root_yaw, root_vel, contacts, anim):
    """One tick of playback for character i: play rate and stride, advance, sample, inertialize,
    integrate the root and synchronize it with the simulation, orientation twist."""
    s = settings[i]
    positions, rotations, vel, angvel, root_v, root_w = db
    off_p, off_v, off_r, off_w, pos_params, rot_params, inert_time = inert
    lp, lr, lv, lw = local
    ap, ar, av, aw = anim
    sim_speed = math.hypot(ctrl[i, VX], ctrl[i, VZ])
    play_rate, strides = s[S.W_PLAY_RATE] != 0.0, s[S.W_STRIDE] != 0.0
    if s[S.W_TIMESCALE] != 0.0:
        pass                     # rate and stride already set by timescale.timescale_stage
    elif play_rate or strides:
        anim_speed, halflife = float(clip_speed[frame[i]]), s[S.W_SPEED_HALFLIFE]
        stride_min, stride_max = s[S.W_STRIDE_MIN], s[S.W_STRIDE_MAX]
        if s[S.W_ORIENTATION] != 0.0:
            anim_speed, halflife, stride_min, stride_max = stride_reference(
                wt, i, anim_speed, root_v[frame[i], 0], root_v[frame[i], 2], halflife, stride_min, stride_max)
        r, k = speed_update(wt, i, sim_speed, anim_speed, dt, play_rate, s[S.W_RATE_MIN], s[S.W_RATE_MAX],
                            s[S.W_RATE_SHARE], strides, stride_min, stride_max, halflife)
        rate[i] = r if play_rate else 1.0
        stride[i] = k if strides else 1.0
    else:
        rate[i] = 1.0
        stride[i] = 1.0
    stop = stop_of[frame[i]]
    frame[i], frame_frac[i] = advance_frame(frame[i], frame_frac[i], rate[i], stop)
    anim_pose(positions, rotations, vel, angvel, root_v, root_w, frame[i] + frame_frac[i], rate[i], stop,
              ap[i], ar[i], av[i], aw[i])
    method = int(s[S.INERTIALIZATION])
    if method == 2:
        lp[i] = ap[i]
        lv[i] = av[i]
        lr[i] = ar[i]
        lw[i] = aw[i]
    elif method == 0:
        y = half_damping(s[S.HALFLIFE])
        spring_decay(off_p[i], off_v[i], y, dt)
        spring_decay(off_r[i], off_w[i], y, dt)
        apply_offsets(off_p[i], off_v[i], off_r[i], off_w[i], ap[i], av[i], ar[i], aw[i], lp[i], lv[i], lr[i], lw[i])
    elif method == 3:
        inert_time[i] += dt
        dead_blend_offsets(pos_params[i], rot_params[i], inert_time[i], s[S.HALFLIFE], s[S.BLEND_TIME], ap[i], av[i],
                           ar[i], aw[i], off_p[i], off_v[i], off_r[i], off_w[i])
        apply_offsets(off_p[i], off_v[i], off_r[i], off_w[i], ap[i], av[i], ar[i], aw[i], lp[i], lv[i], lr[i], lw[i])
    else:
        inert_time[i] += dt
        quintic_eval(pos_params[i], inert_time[i], off_p[i], off_v[i])
        quintic_eval(rot_params[i], inert_time[i], off_r[i], off_w[i])
        apply_offsets(off_p[i], off_v[i], off_r[i], off_w[i], ap[i], av[i], ar[i], aw[i], lp[i], lv[i], lr[i], lw[i])

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
        warp_angle[i] = orientation_update(wt, i, ctrl[i, YAW], root_yaw[i], sim_speed, dt, s[S.W_LIMIT],
                                           s[S.W_MIN_TRAVEL], s[S.W_ORIENT_HALFLIFE])
    else:
        warp_angle[i] = 0.0
    contacts[i, 0], contacts[i, 1] = contacts_db[frame[i], 0], contacts_db[frame[i], 1]


@numba.njit(cache=True, parallel=True)
def playback_stage(dt, db, clip_speed, stop_of, contacts_db, ctrl, wt, settings, frame, frame_frac, rate, stride,
                   warp_angle, inert, local, root_pos, root_yaw, root_vel, contacts, anim):
    """playback_agent for every character."""
    for i in numba.prange(frame.shape[0]):
        playback_agent(i, dt, db, clip_speed, stop_of, contacts_db, ctrl, wt, settings, frame, frame_frac, rate,
                       stride, warp_angle, inert, local, root_pos, root_yaw, root_vel, contacts, anim)


@numba.njit(cache=True)
def playback_serial(dt, db, clip_speed, stop_of, contacts_db, ctrl, wt, settings, frame, frame_frac, rate, stride,
                    warp_angle, inert, local, root_pos, root_yaw, root_vel, contacts, anim):
    """playback_agent for every character on the calling thread (small crowds: no thread hand-off)."""
    for i in range(frame.shape[0]):
        playback_agent(i, dt, db, clip_speed, stop_of, contacts_db, ctrl, wt, settings, frame, frame_frac, rate,
                       stride, warp_angle, inert, local, root_pos, root_yaw, root_vel, contacts, anim)
