"""Tuned defaults reach the default databases: a cached default database built with other channel
weights is re-weighted to the default schema's when it is opened through build_default_database."""
from __future__ import annotations

import numpy as np

from motionmatch.database import build_default_database, load_database, save_database
from motionmatch.features import FeatureSet, default_schema


def test_cached_default_database_with_stale_weights_gets_the_default_schema_weights(jlpm_db, tmp_path):
    schema = default_schema()
    old = {c.name: c.weight * 2.0 for c in schema.channels[:3]}
    stale = FeatureSet(schema.with_weights(old), jlpm_db.features.raw, jlpm_db.features.offset,
                       jlpm_db.features.dim_std)
    jlpm_db.features, kept = stale, jlpm_db.features
    try:
        path = tmp_path / "jlpm22-locomotion.npz"
        save_database(jlpm_db, path)
    finally:
        jlpm_db.features = kept
    assert load_database(path).features.schema.channels[0].weight == schema.channels[0].weight * 2.0
    # Found in the cache: no rebuild (data=None would fail to find mocap), only the weights change.
    assert build_default_database(path, data=tmp_path / "no-mocap-here", progress=False) == path
    db = load_database(path)
    assert [(c.name, c.weight) for c in db.features.schema.channels] == [(c.name, c.weight) for c in schema.channels]
    np.testing.assert_array_equal(db.features.normalized, kept.normalized)
    stamp = path.stat().st_mtime_ns
    build_default_database(path, data=tmp_path / "no-mocap-here", progress=False)
    assert path.stat().st_mtime_ns == stamp          # up to date: not written again
