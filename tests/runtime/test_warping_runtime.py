"""Warping in the running character (issue 7) on the real default database: strafing and slow
walks from forward-only data; looser versions of the measured goals."""
import math

import numpy as np

from motionmatch.motion.metrics import compute_metrics
from motionmatch.runtime.character import CharacterSettings
from motionmatch.runtime.warping import WarpSettings
from motionmatch.offline.scenario import parse_scenario
from motionmatch.offline.synth import change_frames, run_scenario


def _inp(t, move, strafe=False):
    return {"t": t, "move": move, "run": False, "strafe": strafe, "look": None}


def _run(db, scen, warp: bool):
    settings = CharacterSettings()
    if not warp:
        settings.warp = WarpSettings(orientation=False, play_rate=False, stride=False, slope=False)
    rec = run_scenario(db, scen, settings)
    return rec, compute_metrics(rec, db.fps, 1.0, change_frames(scen, db.fps))


def test_strafe_moves_sideways_facing_forward(jlpm_db):
    scen = parse_scenario({"duration": 8.0, "inputs": [_inp(0.0, [0.0, 1.0]), _inp(2.0, [1.0, 0.0], strafe=True),
                                                       _inp(5.0, [-1.0, 0.0], strafe=True)]})
    rec_on, on = _run(jlpm_db, scen, True)
    rec_off, off = _run(jlpm_db, scen, False)
    assert on["nan_frames"] == 0
    # While strafing (after 0.6 s to respond), the root travels sideways...
    fps = jlpm_db.fps
    for a, b, sign in ((2.6, 5.0, 1.0), (5.6, 8.0, -1.0)):
        v = rec_on["root_vel"][int(a * fps):int(b * fps)]
        sideways = (np.sign(v[:, 0]) == sign) & (np.abs(v[:, 0]) > 0.4) & (np.abs(v[:, 0]) > 2 * np.abs(v[:, 2]))
        assert sideways.mean() > 0.5, sideways.mean()
        v_off = rec_off["root_vel"][int(a * fps):int(b * fps)]
        # ...which the plain matcher on this data does not (it turns away or stands).
        assert np.abs(v_off[:, 0]).mean() < np.abs(v[:, 0]).mean()
    # ...while the displayed facing stays on +z.
    strafe = slice(int(2.6 * fps), int(8.0 * fps))
    facing = np.degrees(np.abs(np.remainder(rec_on["root_yaw"][strafe] + np.pi, 2 * np.pi) - np.pi))
    assert (facing < 25.0).mean() > 0.8
    assert on["tracking"]["velocity"]["mean"] > off["tracking"]["velocity"]["mean"] + 0.15
    assert on["foot_sliding_cm_s"] < 10.0


def test_slow_walk_speed_follows_the_request(jlpm_db):
    # Stick 0.5 -> 1.3 * (0.5 - 0.2) / 0.8 = 0.49 m/s, slower than any walk in the data.
    scen = parse_scenario({"duration": 7.0, "inputs": [_inp(0.0, [0.0, 0.5])]})
    rec_on, on = _run(jlpm_db, scen, True)
    rec_off, off = _run(jlpm_db, scen, False)
    fps = jlpm_db.fps
    window = slice(int(1.5 * fps), int(7.0 * fps))
    speed_on = np.linalg.norm(rec_on["root_vel"][window][:, [0, 2]], axis=1)
    speed_off = np.linalg.norm(rec_off["root_vel"][window][:, [0, 2]], axis=1)
    want = 1.3 * 0.3 / 0.8
    assert abs(np.median(speed_on) - want) < 0.3 * want, np.median(speed_on)
    assert abs(np.median(speed_on) - want) <= abs(np.median(speed_off) - want) + 0.02
    assert on["nan_frames"] == 0 and on["foot_sliding_cm_s"] < 20.0


def test_warping_leaves_plain_walking_alone(jlpm_db):
    scen = parse_scenario({"duration": 5.0, "inputs": [_inp(0.0, [0.0, 1.0])]})
    rec_on, on = _run(jlpm_db, scen, True)
    rec_off, off = _run(jlpm_db, scen, False)
    # No strafing asked: no orientation warp, the facing follows the travel.
    assert np.allclose(rec_on["root_yaw"], rec_off["root_yaw"], atol=math.radians(5))
    assert on["foot_sliding_cm_s"] < 1.5 * off["foot_sliding_cm_s"] + 1.0
