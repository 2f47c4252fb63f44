"""Shared fixtures: small real databases built once per test session from ../shared/mocap."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MOCAP = Path(os.environ.get("MOTIONMATCH_DATA", ROOT.parent / "shared" / "mocap"))
JLPM = MOCAP / "jlpm22-locomotion"
BANDAI = MOCAP / "bandai-namco"


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"test data missing: {path} (the tests need ../shared/mocap beside the project)")
    return path


@pytest.fixture(scope="session")
def jlpm_dir() -> Path:
    return _need(JLPM)


@pytest.fixture(scope="session")
def bandai_dir() -> Path:
    return _need(BANDAI)


@pytest.fixture(scope="session")
def jlpm_db(tmp_path_factory):
    """The full default database (both jlpm22 takes, mirrored): ~15k frames, about a second to build."""
    from motionmatch.posedb.database import build_database, load_database, save_database
    files = sorted(_need(JLPM).glob("*.bvh"))
    db = build_database(files, progress=False)
    path = tmp_path_factory.mktemp("db") / "jlpm22.npz"
    save_database(db, path)
    return load_database(path)


@pytest.fixture(scope="session")
def jlpm_db_path(jlpm_db, tmp_path_factory):
    from motionmatch.posedb.database import save_database
    path = tmp_path_factory.mktemp("dbp") / "jlpm22.npz"
    save_database(jlpm_db, path)
    return path


@pytest.fixture(scope="session")
def bandai_walk_db():
    """A few Bandai-Namco walk and run clips (30 fps, resampled to 60, mirrored)."""
    from motionmatch.posedb.database import build_database
    d2 = _need(BANDAI) / "dataset-2"
    files = sorted(d2.glob("dataset-2_walk_normal_*.bvh"))[:6] + sorted(d2.glob("dataset-2_run_normal_*.bvh"))[:4] \
        + sorted(d2.glob("dataset-2_walk_exhausted_*.bvh"))[:3]
    return build_database(files, progress=False)


@pytest.fixture(scope="session")
def walk_bvh(jlpm_dir, tmp_path_factory):
    """Two seconds (frames 600-720) of the first jlpm22 take as a BVH of its own."""
    from motionmatch.io.bvh import read_bvh, write_bvh
    anim = read_bvh(jlpm_dir / "locomotion_take1.bvh")
    anim.positions, anim.rotations = anim.positions[600:720], anim.rotations[600:720]
    path = tmp_path_factory.mktemp("bvh") / "walk.bvh"
    write_bvh(path, anim)
    return path
