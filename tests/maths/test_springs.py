import math

import numpy as np
import pytest

from motionmatch.maths.rotations import quat_angle, quat_from_angle_axis, quat_mul_inv, quat_normalize, quat_to_scaled_angle_axis
from motionmatch.maths.springs import (
                                       HALF_DECAY_YT, LN2, character_spring, damper_factor, decay_exact, half_damping, halflife_to_damping,
                                       simple_spring_damper_exact, simple_spring_damper_exact_quat, spring_exact,
                                       )


def integrate(x, v, goal, halflife, T, n=20000):
    """Semi-implicit Euler on x'' = -d (x' ) - (d/2)^2 (x - goal), d = damping: fine steps."""
    d = halflife_to_damping(halflife)
    k = (d / 2) ** 2
    h = T / n
    for _ in range(n):
        v = v + h * (-d * v - k * (x - goal))
        x = x + h * v
    return x, v


def test_halflife_damping():
    for h in (0.05, 0.27, 1.3):
        assert half_damping(h) == halflife_to_damping(h) * 0.5
    assert halflife_to_damping(1.0) == pytest.approx(4 * LN2, rel=1e-4)


def test_simple_spring_matches_numerical_integration():
    x, v = simple_spring_damper_exact(2.0, -1.5, 0.5, 0.3, 0.7)
    xn, vn = integrate(2.0, -1.5, 0.5, 0.3, 0.7)
    assert x == pytest.approx(xn, abs=2e-4)
    assert v == pytest.approx(vn, abs=2e-3)


def test_spring_is_timestep_independent_and_vectorized():
    x = np.array([1.0, -2.0, 0.3]); v = np.array([0.5, 0.0, -3.0]); g = np.array([0.0, 1.0, 2.0])
    x1, v1 = simple_spring_damper_exact(x, v, g, 0.2, 0.5)
    xs, vs = x, v
    for _ in range(30):
        xs, vs = simple_spring_damper_exact(xs, vs, g, 0.2, 0.5 / 30)
    np.testing.assert_allclose(xs, x1, atol=1e-12)
    np.testing.assert_allclose(vs, v1, atol=1e-12)


def test_halflife_meaning():
    h = 0.4
    # Released from rest, the offset is (1 + 2 ln2) / 4 of the start after one halflife ...
    x, _ = decay_exact(1.0, 0.0, half_damping(h), h)
    assert x == pytest.approx((1 + 2 * LN2) / 4, rel=1e-4)
    # ... and exactly half when y t = HALF_DECAY_YT, y = 2 ln2 / halflife.
    t_half = HALF_DECAY_YT / (0.5 * halflife_to_damping(h))
    x, _ = decay_exact(1.0, 0.0, half_damping(h), t_half)
    assert x == pytest.approx(0.5, abs=1e-9)
    assert (1 + HALF_DECAY_YT) * math.exp(-HALF_DECAY_YT) == pytest.approx(0.5, abs=1e-12)
    # The exponential damper halves exactly every halflife.
    assert damper_factor(h, h) == pytest.approx(0.5, rel=1e-12)
    assert damper_factor(h, 3 * h) == pytest.approx(1 - 0.5 ** 3, rel=1e-12)
    # Decay reaches (numerically) zero and never crosses it from rest.
    ts = np.linspace(0, 5 * h, 200)
    xs = np.array([decay_exact(1.0, 0.0, half_damping(h), t)[0] for t in ts])
    assert np.all(xs > 0) and np.all(np.diff(xs) < 0) and xs[-1] < 0.01


def test_character_spring_matches_integration():
    x, v, a, g = np.array([0.0, 0.0]), np.array([1.0, 0.0]), np.array([0.0, 2.0]), np.array([-1.0, 3.0])
    h, T = 0.27, 0.9
    n = 20000
    dt = T / n
    d = halflife_to_damping(h)
    xn, vn, an = x.copy(), v.copy(), a.copy()
    for _ in range(n):  # v'' = -d v' - (d/2)^2 (v - g), x' = v
        an = an + dt * (-d * an - (d / 2) ** 2 * (vn - g))
        vn = vn + dt * an
        xn = xn + dt * vn
    x1, v1, a1 = np.array([character_spring(*c, h, T) for c in zip(x, v, a, g)]).T
    np.testing.assert_allclose(x1, xn, atol=1e-3)
    np.testing.assert_allclose(v1, vn, atol=1e-3)
    np.testing.assert_allclose(a1, an, atol=2e-2)
    # Timestep independent: 30 short steps land where one long one does.
    xs, vs, as_ = 0.0, 1.0, 2.0
    for _ in range(30):
        xs, vs, as_ = character_spring(xs, vs, as_, 3.0, h, T / 30)
    np.testing.assert_allclose((xs, vs, as_), character_spring(0.0, 1.0, 2.0, 3.0, h, T), atol=1e-12)
    # Long run: velocity reaches the goal, acceleration dies out.
    _, v_inf, a_inf = character_spring(0.0, 1.0, 2.0, 3.0, h, 20 * h)
    assert v_inf == pytest.approx(3.0, abs=1e-6) and a_inf == pytest.approx(0.0, abs=1e-5)


def test_quat_spring_matches_scalar_spring_about_fixed_axis():
    axis = np.array([0.0, 0.6, 0.8])
    q = quat_from_angle_axis(0.9, axis); w = axis * -0.4
    g = quat_from_angle_axis(-0.3, axis)
    q1, w1 = simple_spring_damper_exact_quat(q, w, g, 0.2, 0.15)
    a1, s1 = simple_spring_damper_exact(0.9, -0.4, -0.3, 0.2, 0.15)
    np.testing.assert_allclose(quat_to_scaled_angle_axis(q1), axis * a1, atol=1e-9)
    np.testing.assert_allclose(w1, axis * s1, atol=1e-9)


def test_quat_spring_batched_converges_short_way():
    rng = np.random.default_rng(1)
    q = quat_normalize(rng.normal(size=(5, 4)))
    g = quat_normalize(rng.normal(size=(5, 4)))
    w = rng.normal(size=(5, 3))
    qs, ws = q, w
    for _ in range(120):
        qs, ws = simple_spring_damper_exact_quat(qs, ws, g, 0.1, 1 / 60)
    assert np.all(quat_angle(quat_mul_inv(qs, g)) < 1e-4)
    # Several future times at once: one rotation per time.
    qt, wt = simple_spring_damper_exact_quat(q[0], w[0], g[0], 0.1, np.array([0.1, 0.2, 5.0]))
    assert qt.shape == (3, 4) and wt.shape == (3, 3)
    assert quat_angle(quat_mul_inv(qt[2], g[0])) < 1e-6


def test_compiled_spring_is_the_array_closed_form():
    """spring_exact (every runtime stage) and simple_spring_damper_exact (the VR driver's vectors) agree."""
    rng = np.random.default_rng(4)
    for row in rng.uniform(-2.0, 2.0, (200, 5)).tolist():
        x, v, g, hl, dt = row
        hl, dt = abs(hl) + 0.01, abs(dt) * 0.1
        assert spring_exact(x, v, g, hl, dt) == simple_spring_damper_exact(x, v, g, hl, dt)
        # An offset decaying to zero is the spring with goal 0.
        np.testing.assert_allclose(decay_exact(x, v, half_damping(hl), dt), spring_exact(x, v, 0.0, hl, dt),
                                   rtol=1e-12, atol=1e-12)
