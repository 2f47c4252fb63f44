"""Tuned defaults reach the default databases: a cached default database built with other channel
weights is re-weighted to its default weights when it is opened through build_default_database (the
mixed default's are tuned on it, features.TUNED_WEIGHTS; the jlpm22-only one keeps the
schema's)."""
from __future__ import annotations

import numpy as np
import pytest

from motionmatch.database import build_default_database, default_weights, load_database, save_database
from motionmatch.features import TUNED_WEIGHTS, FeatureSet, default_schema


@pytest.mark.parametrize("mixed", [False, True])
def test_cached_default_database_with_stale_weights_gets_its_default_weights(jlpm_db, tmp_path, mixed):
    schema = default_schema()
    old = {c.name: c.weight * 2.0 for c in schema.channels[:3]}
    stale = FeatureSet(schema.with_weights(old), jlpm_db.features.raw, jlpm_db.features.offset,
                       jlpm_db.features.dim_std)
    jlpm_db.features, kept = stale, jlpm_db.features
    try:
        path = tmp_path / "default.npz"
        save_database(jlpm_db, path)
    finally:
        jlpm_db.features = kept
    assert load_database(path).features.schema.channels[0].weight == schema.channels[0].weight * 2.0
    # Found in the cache: no rebuild (there is no mocap at `data`), only the weights change.
    assert build_default_database(path, data=tmp_path / "no-mocap-here", progress=False, mixed=mixed) == path
    db = load_database(path)
    want = TUNED_WEIGHTS if mixed else {c.name: c.weight for c in schema.channels}
    assert {c.name: c.weight for c in db.features.schema.channels} == want == default_weights(mixed)
    expected = FeatureSet(schema.with_weights(want), kept.raw, kept.offset, kept.dim_std)
    np.testing.assert_allclose(db.features.normalized, expected.normalized, rtol=1e-6, atol=1e-6)
    stamp = path.stat().st_mtime_ns
    build_default_database(path, data=tmp_path / "no-mocap-here", progress=False, mixed=mixed)
    assert path.stat().st_mtime_ns == stamp          # up to date: not written again
