import math

import numpy as np
import pytest

from motionmatch.maths.rotations import quat_from_yaw, yaw_of_direction
from motionmatch.runtime.controller import (
                                            Controller, ControllerSettings, GamepadInput, PathFollower, desired_goals, stick_response,
                                            )

DT = 1 / 60


def run(c, inp, seconds):
    for _ in range(int(round(seconds / DT))):
        c.update(inp, DT)


def test_stick_response_dead_zone_and_curve():
    assert stick_response(0.1, 0.1, 0.2) == 0.0
    assert stick_response(0.0, 1.0, 0.2) == pytest.approx(1.0)
    assert stick_response(0.0, 0.6, 0.2) == pytest.approx(0.5)
    assert stick_response(0.0, 0.6, 0.2, 2.0) == pytest.approx(0.25)


def test_forward_reaches_walk_speed_along_z_within_a_second():
    c = Controller()
    s = c.settings
    run(c, GamepadInput(move=(0.0, 1.0)), 1.0)
    v = c.velocity
    assert v[2] == pytest.approx(s.walk_forward_speed, rel=0.05)
    assert abs(v[0]) < 1e-9 and c.position[2] > 0.5 and abs(c.position[0]) < 1e-9
    assert abs(c.yaw) < 1e-9
    np.testing.assert_allclose(c.rotation, quat_from_yaw(0.0), atol=1e-12)
    run(c, GamepadInput(move=(0.0, 1.0), run=True), 1.5)
    assert c.velocity[2] == pytest.approx(s.run_forward_speed, rel=0.03)
    assert c.gait > 0.99


def test_turning_faces_move_direction():
    c = Controller()
    run(c, GamepadInput(move=(0.0, 1.0)), 1.0)
    run(c, GamepadInput(move=(1.0, 0.0)), 2.0)
    assert c.yaw == pytest.approx(math.pi / 2, abs=1e-3)     # +Z turned toward +X
    v = c.velocity
    assert v[0] == pytest.approx(c.settings.walk_forward_speed, rel=0.01) and abs(v[2]) < 0.02
    # Turning round the back goes the short way and settles facing -Z.
    run(c, GamepadInput(move=(0.0, -1.0)), 2.0)
    assert abs(abs(c.yaw) - math.pi) < 1e-3


def test_release_stops_and_holds_facing():
    c = Controller()
    run(c, GamepadInput(move=(-0.7, 0.7)), 2.5)
    yaw = c.yaw
    run(c, GamepadInput(), 1.5)
    assert np.linalg.norm(c.velocity) < 0.01
    assert c.yaw == pytest.approx(yaw, abs=1e-3) and yaw == pytest.approx(-math.pi / 4, abs=1e-3)


def test_strafe_keeps_facing_and_uses_side_speed():
    c = Controller()
    run(c, GamepadInput(move=(0.0, 1.0)), 1.0)
    run(c, GamepadInput(move=(1.0, 0.0), strafe=True), 2.0)
    assert abs(c.yaw) < 1e-6
    assert c.velocity[0] == pytest.approx(c.settings.walk_side_speed, rel=0.01)
    run(c, GamepadInput(move=(0.0, -1.0), strafe=True), 2.0)
    assert abs(c.yaw) < 1e-6
    assert c.velocity[2] == pytest.approx(-c.settings.walk_backward_speed, rel=0.01)
    # The look stick sets the facing while strafing; the move stick is then relative to the world.
    run(c, GamepadInput(move=(0.0, 1.0), strafe=True, look=(1.0, 0.0)), 2.0)
    assert c.yaw == pytest.approx(math.pi / 2, abs=1e-3)
    assert c.velocity[2] == pytest.approx(c.settings.walk_side_speed, rel=0.01)


def test_camera_yaw_rotates_stick():
    s = ControllerSettings(camera_yaw=math.pi / 2)
    vx, vz, yaw, moving = desired_goals(GamepadInput(move=(0.0, 1.0)), 0.0, s)
    assert moving and vx == pytest.approx(s.walk_forward_speed) and abs(vz) < 1e-12
    assert yaw == pytest.approx(math.pi / 2)


@pytest.mark.parametrize("inp", [GamepadInput(move=(0.6, 0.8)), GamepadInput(move=(0.0, -1.0), run=True),
                                 GamepadInput(move=(-1.0, 0.0), strafe=True, look=(0.0, -1.0)), GamepadInput()])
def test_predict_matches_stepping(inp):
    c = Controller()
    run(c, GamepadInput(move=(1.0, 0.0)), 0.8)   # moving and turning: non-trivial state
    run(c, inp, 2 * DT)                           # goals of inp in place
    pos, rot, vel = c.predict((20, 40, 60), 60, with_velocities=True)
    assert pos.shape == (3, 3) and rot.shape == (3, 4)
    got_p, got_r = [], []
    for i in range(1, 61):
        c.update(inp, DT)
        if i % 20 == 0:
            got_p.append(c.position)
            got_r.append(c.rotation)
            assert np.allclose(c.velocity, vel[i // 20 - 1], atol=1e-9)
    np.testing.assert_allclose(pos, got_p, atol=1e-9)
    np.testing.assert_allclose(np.abs((rot * np.array(got_r)).sum(-1)), 1.0, atol=1e-9)


def test_path_follower_completes_square():
    pts = [[0, 0], [3, 0], [3, 3], [0, 3], [0, 0.5]]
    pf = PathFollower(pts, speed=1.2, loop=False)
    c = Controller()
    track = []
    for i in range(int(20 / DT)):
        pf.step(c, i * DT, DT)
        track.append(c.position[[0, 2]])
        if pf.done and np.linalg.norm(c.velocity) < 0.02:
            break
    track = np.array(track)
    assert pf.done
    assert np.linalg.norm(track[-1] - [0, 0.5]) < 0.2
    # Every corner was visited closely, and the character never strayed far from the path.
    for corner in pts[1:4]:
        assert np.min(np.linalg.norm(track - corner, axis=1)) < 0.45
    assert np.all(track[:, 0] > -0.4) and np.all(track[:, 0] < 3.4)
    assert np.all(track[:, 1] > -0.4) and np.all(track[:, 1] < 3.4)
    # Walking speed along straight parts.
    speeds = np.linalg.norm(np.diff(track, axis=0), axis=1) / DT
    assert np.percentile(speeds, 75) == pytest.approx(1.2, rel=0.1)


def test_path_follower_loops_and_predicts_along_path():
    pf = PathFollower([[0, 0], [3, 0], [3, 3], [0, 3]], speed=1.2, loop=True)
    c = Controller()
    for i in range(int(12 / DT)):
        pf.step(c, i * DT, DT)
    assert pf.progress > 0.8 * 12 * 1.2 and not pf.done
    # The prediction stays near the path (it turns at corners rather than running straight).
    pos, rot = pf.predict(c)
    assert pos.shape == (3, 3) and rot.shape == (3, 4)
    for p in pos:
        x, z = p[0], p[2]
        d = min(abs(z), abs(x - 3), abs(z - 3), abs(x))
        assert d < 0.5


def test_stick_longer_than_one_counts_as_full_deflection():
    from motionmatch.runtime.controller import desired_goals
    s = ControllerSettings()
    square = desired_goals(GamepadInput(move=(1.0, 1.0)), 0.0, s)
    unit = desired_goals(GamepadInput(move=(math.sqrt(0.5), math.sqrt(0.5))), 0.0, s)
    assert square == pytest.approx(unit)
    assert math.hypot(square[0], square[1]) == pytest.approx(s.walk_forward_speed)
