"""A locking foot keeps its velocity into the lock and glides to rest (issue 10), on real data."""
import numpy as np

from motionmatch.runtime.character import Character, CharacterSettings
from motionmatch.runtime.controller import GamepadInput


def _toe_velocities_at_locks(db, glide_halflife):
    """(velocity into each lock frame (m/s), out of it, frames until the toe rests) over a walk with
    turns and a stop, for both toes."""
    ch = Character(db, CharacterSettings(foot_lock_glide_halflife=glide_halflife))
    toes = [db.roles["left_toe"], db.roles["right_toe"]]
    inputs = [(0.0, GamepadInput(move=(0.0, 1.0))), (2.0, GamepadInput(move=(1.0, 0.0))),
              (3.5, GamepadInput(move=(0.0, 0.6))), (5.0, GamepadInput())]
    pos, locked = [], []
    for k in range(int(6.0 * db.fps)):
        t = k / db.fps
        ch.step([inp for t0, inp in inputs if t0 <= t][-1], 1.0 / db.fps)
        pos.append(np.array(ch.global_positions[toes], dtype=np.float64))
        locked.append(ch.locked)
    pos, locked = np.array(pos), np.array(locked)
    into, out, rest = [], [], []
    for leg in range(2):
        v = np.linalg.norm(np.diff(pos[:, leg, [0, 2]], axis=0), axis=1) * db.fps   # v[k]: frame k -> k + 1
        for k in np.flatnonzero(locked[1:, leg] & ~locked[:-1, leg]) + 1:
            if 2 <= k < len(v) - 10 and locked[k:k + 10, leg].all():
                into.append(v[k - 1])
                out.append(v[k])
                rest.append(np.flatnonzero(v[k:] < 0.02)[0])
    return np.array(into), np.array(out), np.array(rest)


def test_a_locking_foot_keeps_its_velocity_and_rests_within_a_few_frames(jlpm_db):
    into, out, rest = _toe_velocities_at_locks(jlpm_db, CharacterSettings().foot_lock_glide_halflife)
    assert len(into) >= 8
    moving = into > 0.1
    assert moving.sum() >= 4
    # The foot leaves the lock frame at a good part of the speed it came in with (the old lock: ~0),
    # and rests (< 2 cm/s) within 3 frames.
    assert np.median(out[moving] / into[moving]) > 0.3, (into, out)
    assert np.median(rest) <= 3 and np.percentile(rest, 75) <= 4, rest
    # Stopping dead (the shortest glide) keeps none of it.
    into0, out0, _ = _toe_velocities_at_locks(jlpm_db, 0.001)
    moving0 = into0 > 0.1
    assert np.median(out0[moving0] / into0[moving0]) < 0.15, (into0, out0)
