"""Dead blending in the runtime: at every transition of a real walk/turn/stop run the shown local pose
continues in position and velocity (finite differences across the switch frame)."""
import numpy as np
import pytest

from motionmatch.runtime.character import Character, CharacterSettings
from motionmatch.runtime.controller import GamepadInput
from motionmatch.runtime.playback import shown_velocities

FPS = 60.0
STICK = [(0.0, 1.0)] * 120 + [(1.0, 0.0)] * 90 + [(0.0, -1.0)] * 90 + [(0.0, 0.0)] * 60 + [(-1.0, 0.3)] * 120


def switch_steps(db, method):
    """(velocity mismatch m/s, acceleration m/s^2) at each transition, over the non-root joints of the
    local pose the touch-ups receive. Mismatch: the finite-difference velocity from the last frame
    before the switch to the first after it, against the velocity shown before it; acceleration: the
    change of finite-difference velocity across the switch."""
    ch = Character(db, CharacterSettings(inertialization=method))
    pos, vel, switched = [], [], []
    for k, move in enumerate(STICK):
        ch.step(GamepadInput(move=move, run=k > 300))
        pos.append(ch.crowd.local.pos[0][1:].copy())
        vel.append(shown_velocities(*ch.crowd.pose_source(), ch.crowd.inert, ch.crowd.packed, 0)[0][1:])
        switched.append(ch.crowd.searches_last_tick > 0 and bool(ch.crowd.jumped[0]))
    pos, vel = np.array(pos), np.array(vel)
    k = np.flatnonzero(switched)
    k = k[k >= 2]
    across = (pos[k] - pos[k - 1]) * FPS
    before = (pos[k - 1] - pos[k - 2]) * FPS
    mismatch = np.linalg.norm(across - vel[k - 1], axis=2).max(axis=1)
    acc = np.linalg.norm(across - before, axis=2).max(axis=1) * FPS
    return mismatch, acc


def test_dead_blending_is_continuous_in_position_and_velocity(jlpm_db):
    mismatch, acc = switch_steps(jlpm_db, "dead_blending")
    assert len(acc) > 10
    # Position: the first frame after the switch is where the shown velocity leads (within 0.1 m/s,
    # i.e. under 2 mm in a frame); velocity: no step (the joints' own motion reaches ~100 m/s^2).
    assert mismatch.max() < 0.1, mismatch.max()
    assert acc.max() < 50.0, acc.max()
    off_mismatch, off_acc = switch_steps(jlpm_db, "off")
    assert off_mismatch.max() > 1.0 and np.median(off_acc) > 5 * np.median(acc)


def test_dead_blending_in_a_settings_file(tmp_path):
    from motionmatch.runtime import settings as S
    from motionmatch.runtime.settings_file import SettingsError, load_settings, save_settings, settings_from_dict
    rs = settings_from_dict({"character": {"inertialization": "dead_blending", "blend_time": 0.2}})
    save_settings(tmp_path / "s.toml", *rs)
    back = load_settings(tmp_path / "s.toml").character
    assert back.inertialization == "dead_blending" and back.blend_time == 0.2
    assert back.packed()[S.INERTIALIZATION] == 3   # after "off": packed rows of the others keep their numbers
    with pytest.raises(SettingsError, match="inertialization"):
        settings_from_dict({"character": {"inertialization": "dead_blend"}})
