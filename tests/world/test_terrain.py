"""Heightfield sampling, procedural terrains, loading/saving and scenario specs."""
import math

import numpy as np
import pytest

from motionmatch.world.terrain import Heightfield, TerrainError, height_at


def test_bilinear_is_exact_on_samples_and_between():
    rng = np.random.default_rng(0)
    h = rng.normal(size=(5, 7))
    hf = Heightfield(h, origin=(-1.0, 2.0), cell=0.5)
    # On every sample.
    zs, xs = np.meshgrid(2.0 + 0.5 * np.arange(5), -1.0 + 0.5 * np.arange(7), indexing="ij")
    assert np.allclose(hf.height(xs, zs), h, atol=1e-12)
    # Inside a cell: the bilinear formula by hand.
    x, z = -1.0 + 0.5 * 2.3, 2.0 + 0.5 * 1.6
    fu, fv = 0.3, 0.6
    want = (h[1, 2] * (1 - fu) * (1 - fv) + h[1, 3] * fu * (1 - fv) + h[2, 2] * (1 - fu) * fv + h[2, 3] * fu * fv)
    assert hf.height(x, z) == pytest.approx(want, abs=1e-12)
    assert isinstance(hf.height(x, z), float)
    # Vectorized over any shape; outside the grid the edge extends.
    assert hf.height(np.zeros((3, 4)), np.full((3, 4), 2.5)).shape == (3, 4)
    assert hf.height(-100.0, 2.0) == pytest.approx(h[0, 0])
    assert hf.height(100.0, 100.0) == pytest.approx(h[-1, -1])


def test_slope_height_and_normal_angle():
    hf = Heightfield.procedural("slope", angle_deg=10.0, direction_deg=90.0, size=10.0, cell=0.25)
    # Uphill towards +x.
    assert hf.height(2.0, 0.3) - hf.height(0.0, 0.3) == pytest.approx(2.0 * math.tan(math.radians(10)), abs=1e-9)
    assert hf.height(1.0, -3.0) == pytest.approx(hf.height(1.0, 3.0), abs=1e-9)
    n = hf.normal(np.array([0.3, -2.1]), np.array([1.7, 0.0]))
    assert n.shape == (2, 3)
    tilt = np.degrees(np.arccos(n[:, 1]))
    assert np.allclose(tilt, 10.0, atol=1e-6)
    assert np.all(n[:, 0] < 0) and np.allclose(n[:, 2], 0.0)      # normal leans downhill (-x)
    flat = Heightfield.procedural("flat", height=0.2, size=4.0)
    assert np.allclose(flat.normal(0.1, 0.2), [0.0, 1.0, 0.0])
    assert flat.height(0.3, -1.0) == pytest.approx(0.2)


def test_steps():
    hf = Heightfield.procedural("steps", step_height=0.2, step_length=0.5, start=1.0, size=8.0, cell=0.05)
    assert hf.height(0.0, 0.0) == pytest.approx(0.0)
    assert hf.height(0.0, 1.2) == pytest.approx(0.2)
    assert hf.height(0.5, 1.7) == pytest.approx(0.4)
    assert hf.height(0.0, 2.74) == pytest.approx(0.8)
    # Edges are at most one cell wide.
    assert hf.height(0.0, 0.94) == pytest.approx(0.0)


def test_noise_is_seeded_and_bounded():
    a = Heightfield.procedural("noise", amplitude=0.1, scale=2.0, seed=3, size=6.0)
    b = Heightfield.procedural("noise", amplitude=0.1, scale=2.0, seed=3, size=6.0)
    c = Heightfield.procedural("noise", amplitude=0.1, scale=2.0, seed=4, size=6.0)
    assert np.array_equal(a.heights, b.heights)
    assert not np.array_equal(a.heights, c.heights)
    assert np.abs(a.heights).max() <= 0.1 + 1e-12
    assert a.heights.std() > 0.01
    # Smooth: neighbouring samples 0.1 m apart differ by far less than the amplitude.
    assert np.abs(np.diff(a.heights, axis=0)).max() < 0.03


def test_save_and_load_npy_and_png(tmp_path):
    hf = Heightfield.procedural("slope", angle_deg=5, size=3.0, cell=0.5)
    hf.save(tmp_path / "ground.npy")
    back = Heightfield.from_npy(tmp_path / "ground.npy")
    assert np.allclose(back.heights, hf.heights) and back.cell == 0.5 and back.origin == hf.origin
    spec = Heightfield.from_spec({"file": "ground.npy", "scale": 2.0}, base_dir=tmp_path)
    assert np.allclose(spec.heights, 2.0 * hf.heights)

    from PIL import Image
    img = np.zeros((4, 6), dtype=np.uint8)
    img[2, 3] = 255
    Image.fromarray(img).save(tmp_path / "h.png")
    png = Heightfield.from_png(tmp_path / "h.png", scale=0.5, cell=1.0, origin=(0.0, 0.0))
    assert png.height(3.0, 2.0) == pytest.approx(0.5)
    assert png.height(3.5, 2.0) == pytest.approx(0.25)


def test_spec_and_errors(tmp_path):
    hf = Heightfield.from_spec({"kind": "slope", "angle_deg": 10, "direction_deg": 0, "size": 6})
    assert hf.height(0.0, 1.0) == pytest.approx(math.tan(math.radians(10)))
    assert np.allclose(Heightfield.from_spec(None).heights, 0.0)
    with pytest.raises(TerrainError, match="slope_deg"):
        Heightfield.from_spec({"kind": "slope", "slope_deg": 10})
    with pytest.raises(TerrainError, match="'angle_deg' must be a number"):
        Heightfield.from_spec({"kind": "slope", "angle_deg": "steep"})
    with pytest.raises(TerrainError, match="'kind'.*'hills'"):
        Heightfield.from_spec({"kind": "hills"})
    with pytest.raises(TerrainError, match="'file'.*missing.npy"):
        Heightfield.from_spec({"file": "missing.npy"}, base_dir=tmp_path)
    with pytest.raises(TerrainError, match="'origin'"):
        (tmp_path / "g.npy").write_bytes(b"")
        Heightfield.from_spec({"file": "g.npy", "origin": [1]}, base_dir=tmp_path)
    with pytest.raises(TerrainError, match="'seed' must be an integer"):
        Heightfield.from_spec({"kind": "noise", "seed": 1.5})
    with pytest.raises(TerrainError, match="either 'file' or 'kind'"):
        Heightfield.from_spec({"kind": "flat", "file": "x.npy"})
    with pytest.raises(TerrainError, match="2-D"):
        Heightfield(np.zeros(4))


def test_compiled_height_equals_heightfield():
    hf = Heightfield.procedural("noise", size=6.0, cell=0.25, amplitude=0.3, seed=4)
    rng = np.random.default_rng(0)
    for x, z in rng.uniform(-4.0, 4.0, (50, 2)):
        assert height_at(hf.heights, hf.origin[0], hf.origin[1], hf.cell, x, z) == pytest.approx(
            float(hf.height(np.array([x]), np.array([z]))[0]), abs=1e-12)
