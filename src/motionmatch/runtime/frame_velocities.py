"""Velocities of every database frame, as the runtime reads them (the database stores poses only).

Central differences inside each clip, one-sided at its ends (features.difference_frames), read half a
frame ahead of the frame: a tick shows frame f and then steps to f + 1, so the velocity that carries
the pose, the inertialization offsets and the root across that step is the one at f + 1/2.
"""
from __future__ import annotations

import numba
import numpy as np

from ..posedb.features import difference_frames
from ..maths.scalar_quat import qlog, qmul, qrot


@numba.njit(cache=True)
def _velocity_kernel(pos, rot, prev, nxt, fps, vel, ang, root_vel, root_ang):
    n, J = pos.shape[0], pos.shape[1]
    # Central differences at every frame (features.difference_frames) ...
    for f in range(n):
        a, b = prev[f], nxt[f]
        inv = fps / max(b - a, 1)
        for j in range(J):
            for k in range(3):
                vel[f, j, k] = (pos[b, j, k] - pos[a, j, k]) * inv
            w, x, y, z = qmul(rot[b, j, 0], rot[b, j, 1], rot[b, j, 2], rot[b, j, 3],
                              rot[a, j, 0], -rot[a, j, 1], -rot[a, j, 2], -rot[a, j, 3])
            rx, ry, rz = qlog(w, x, y, z)
            ang[f, j, 0], ang[f, j, 1], ang[f, j, 2] = rx * inv, ry * inv, rz * inv
    # ... read half a frame ahead: the mean of frames f and f + 1 (f alone at a clip's last frame).
    for f in range(n):
        if nxt[f] > f:
            for j in range(J):
                for k in range(3):
                    vel[f, j, k] = 0.5 * (vel[f, j, k] + vel[f + 1, j, k])
                    ang[f, j, k] = 0.5 * (ang[f, j, k] + ang[f + 1, j, k])
        # Root (simulation bone) motion in its own frame: what the character root integrates.
        qw, qx, qy, qz = rot[f, 0, 0], -rot[f, 0, 1], -rot[f, 0, 2], -rot[f, 0, 3]
        root_vel[f, 0], root_vel[f, 1], root_vel[f, 2] = qrot(qw, qx, qy, qz, vel[f, 0, 0], vel[f, 0, 1], vel[f, 0, 2])
        root_ang[f, 0], root_ang[f, 1], root_ang[f, 2] = qrot(qw, qx, qy, qz, ang[f, 0, 0], ang[f, 0, 1], ang[f, 0, 2])


def database_velocities(db):
    """Velocities of every database frame for the runtime, float32: local linear (N,J,3) m/s and
    angular (N,J,3) rad/s, and the simulation bone's velocity and angular velocity in its own frame
    (N,3). The one convention of the project, central differences inside each clip, one-sided at its
    ends (features.difference_frames), read half a frame ahead of the frame: a tick shows frame f and
    then steps to f + 1, so the velocity that carries the pose, the inertialization offsets and the
    root across that step is the one at f + 1/2 (the mean of frames f and f + 1; frame f alone at a
    clip's last frame). Read at f itself they measured +6 % foot sliding (docs/ARCHITECTURE.md)."""
    n, J = db.positions.shape[:2]
    prev, nxt = difference_frames(n, np.asarray(db.range_starts), np.asarray(db.range_stops))
    vel = np.empty((n, J, 3), dtype=np.float32)
    ang = np.empty((n, J, 3), dtype=np.float32)
    root_vel = np.empty((n, 3), dtype=np.float32)
    root_ang = np.empty((n, 3), dtype=np.float32)
    _velocity_kernel(np.asarray(db.positions), np.asarray(db.rotations), prev, nxt, float(db.fps), vel, ang,
                     root_vel, root_ang)
    return vel, ang, root_vel, root_ang
