"""Database build, save/load, errors and the build command on real data."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from motionmatch.cli import main
from motionmatch.posedb.database import (FORMAT_VERSION, BuildSettings, DatabaseError, build_database,
                                         load_database, save_database)
from motionmatch.motion.skeleton import mirror_pairs


def test_default_database_contents(jlpm_db):
    db = jlpm_db
    s = db.summary()
    assert s["clips"] == 4 and s["mirrored_clips"] == 2
    # 1,794 + 5,877 frames at 60 fps, each twice.
    assert s["frames"] == 2 * (1794 + 5877) and s["fps"] == 60.0
    assert db.skeleton.names[0] == "Simulation" and db.skeleton.names[1] == "Hips"
    assert db.features.raw.shape == (db.num_frames, 27)
    assert np.isfinite(db.features.raw).all()
    assert db.contacts.shape == (db.num_frames, 2) and 0.1 < db.contacts.mean() < 0.9
    assert list(db.range_stops[:-1]) == list(db.range_starts[1:])
    assert "mirrored" in db.range_tags[1] and "mirrored" not in db.range_tags[0]


def test_mirrored_clip_is_the_reflection(jlpm_db):
    db = jlpm_db
    a = slice(int(db.range_starts[0]), int(db.range_stops[0]))
    b = slice(int(db.range_starts[1]), int(db.range_stops[1]))
    ga, _ = db.global_transforms(a)
    gb, _ = db.global_transforms(b)
    pairs = mirror_pairs(db.skeleton.names)
    assert np.abs(gb[:, pairs] * np.array([-1, 1, 1]) - ga).max() < 1e-4   # float32 storage


def test_save_load_round_trip(jlpm_db, tmp_path):
    p = tmp_path / "db.npz"
    size = save_database(jlpm_db, p)
    assert size == p.stat().st_size > 1_000_000
    db = load_database(p)
    for name in ("positions", "rotations", "contacts", "range_starts", "range_stops"):
        assert np.array_equal(getattr(db, name), getattr(jlpm_db, name))
    assert np.array_equal(db.features.raw, jlpm_db.features.raw)
    assert np.allclose(db.features.normalized, jlpm_db.features.normalized)
    assert db.range_tags == jlpm_db.range_tags and db.roles == jlpm_db.roles


def test_version_mismatch_says_what_to_do(jlpm_db, tmp_path):
    p = tmp_path / "db.npz"
    save_database(jlpm_db, p)
    z = dict(np.load(p))
    header = json.loads(bytes(z["header"]).decode())
    header["format_version"] = FORMAT_VERSION + 99
    z["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    np.savez(p, **z)
    with pytest.raises(DatabaseError, match="rebuild"):
        load_database(p)
    with pytest.raises(FileNotFoundError, match="motionmatch build"):
        load_database(tmp_path / "missing.npz")


def test_bad_file_is_reported_and_skipped_strict_fails(bandai_dir, tmp_path):
    d = tmp_path / "clips"
    d.mkdir()
    good = sorted((bandai_dir / "dataset-1").glob("dataset-1_walk_normal_*.bvh"))[:2]
    for f in good:
        shutil.copy(f, d / f.name)
    text = good[0].read_text().splitlines()
    (d / "dataset-1_walk_broken_001.bvh").write_text("\n".join(text[:-5] + ["1 2 3"]) + "\n")
    warnings = []
    db = build_database(sorted(d.glob("*.bvh")), BuildSettings(mirror=False), progress=False, warn=warnings.append)
    assert len(db.range_starts) == 2
    assert any("dataset-1_walk_broken_001.bvh" in w for w in warnings)
    assert db.meta["skipped"] and "broken" in db.meta["skipped"][0]
    with pytest.raises(Exception, match="broken_001.bvh:\\d+"):
        build_database(sorted(d.glob("*.bvh")), BuildSettings(mirror=False, strict=True), progress=False)


def test_failed_build_keeps_existing_database(bandai_dir, jlpm_dir, tmp_path, capsys):
    out = tmp_path / "db.npz"
    assert main(["build", str(jlpm_dir), "-o", str(out), "--quiet", "--no-mirror"]) == 0
    before = out.read_bytes()
    # Two skeletons in one build is a clear error, and the old database stays.
    walk = sorted((bandai_dir / "dataset-1").glob("dataset-1_walk_normal_*.bvh"))[0]
    rc = main(["build", str(jlpm_dir / "locomotion_take1.bvh"), str(walk), "-o", str(out), "--quiet"])
    assert rc == 1
    assert "one skeleton" in capsys.readouterr().err
    assert out.read_bytes() == before
    assert not list(tmp_path.glob("*.tmp*"))


def test_build_command_include_exclude_and_info(bandai_dir, tmp_path, capsys):
    out = tmp_path / "walks.npz"
    rc = main(["build", str(bandai_dir / "dataset-1"), "-o", str(out), "--include", "*_walk_*",
               "--exclude", "*_happy_*", "--quiet", "--tag", "slowish=*_walk_old*"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "clips:" in text and "frames:" in text and "build time" in text
    db = load_database(out)
    names = db.range_names
    assert names and all("_walk_" in n and "_happy_" not in n for n in names)
    assert len(names) % 2 == 0 and sum("(mirrored)" in n for n in names) == len(names) // 2
    assert db.fps == 60.0
    assert "slowish" in db.known_tags
    assert main(["info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["clips"] == len(names) and info["load_seconds"] >= 0


def test_missing_data_gives_a_clear_message(tmp_path, capsys):
    rc = main(["build", str(tmp_path / "nowhere"), "-o", str(tmp_path / "x.npz")])
    assert rc == 1
    assert "nowhere" in capsys.readouterr().err


def test_demo_builds_the_default_database_and_serves_it(jlpm_dir, tmp_path, monkeypatch, capsys):
    """`make demo` runs `motionmatch demo`: build (cached) then serve with every serve option set."""
    import motionmatch.cli.serve as server
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("MOTIONMATCH_DATA", str(jlpm_dir.parent))
    seen = {}
    monkeypatch.setattr(server, "run_serve", lambda ns: seen.setdefault("ns", ns) and 0)
    assert main(["demo", "--port", "8123"]) == 0
    ns = seen["ns"]
    assert len(ns.db) == 1 and Path(ns.db[0]).exists() and ns.port == 8123 and ns.host == "127.0.0.1"
    assert hasattr(ns, "node_modules")
    assert "frames:" in capsys.readouterr().out
    assert main(["demo", "--no-serve"]) == 0       # cached: no rebuild, summary printed
