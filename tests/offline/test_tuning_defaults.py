"""Tuned defaults reach the default databases: a cached default database built with other channel
weights is re-weighted to its default weights when it is opened through build_default_database (the
mixed default's are tuned on it, features.TUNED_WEIGHTS, the Bandai-Namco locomotion database's on
it, features.BANDAI_WEIGHTS; the jlpm22-only one keeps the schema's)."""
from __future__ import annotations

import numpy as np
import pytest

from motionmatch.posedb.database import build_default_database, default_weights, load_database, save_database
from motionmatch.posedb.datapaths import DataNotFoundError, default_definition
from motionmatch.posedb.features import BANDAI_WEIGHTS, TUNED_WEIGHTS, FeatureSet, default_schema


@pytest.mark.parametrize("mixed, kind", [(False, None), (True, None), (False, "bandai")])
def test_cached_default_database_with_stale_weights_gets_its_default_weights(jlpm_db, tmp_path, mixed, kind):
    schema = default_schema()
    old = {c.name: c.weight * 2.0 for c in schema.channels[:3]}
    stale = FeatureSet(schema.with_weights(old), jlpm_db.features.raw, jlpm_db.features.offset,
                       jlpm_db.features.dim_std)
    jlpm_db.features, kept = stale, jlpm_db.features
    meta = dict(jlpm_db.meta)
    # A cache of the current definition (the mixed one is keyed by its sets and build revision).
    jlpm_db.meta["definition"] = default_definition(mixed, kind)
    try:
        path = tmp_path / "default.npz"
        save_database(jlpm_db, path)
    finally:
        jlpm_db.features, jlpm_db.meta = kept, meta
    assert load_database(path).features.schema.channels[0].weight == schema.channels[0].weight * 2.0
    # Found in the cache: no rebuild (there is no mocap at `data`), only the weights change.
    assert build_default_database(path, data=tmp_path / "no-mocap-here", progress=False, mixed=mixed,
                                  kind=kind) == path
    db = load_database(path)
    want = BANDAI_WEIGHTS if kind else TUNED_WEIGHTS if mixed else {c.name: c.weight for c in schema.channels}
    assert {c.name: c.weight for c in db.features.schema.channels} == want
    assert want == default_weights(kind or ("mixed" if mixed else None))
    expected = FeatureSet(schema.with_weights(want), kept.raw, kept.offset, kept.dim_std)
    np.testing.assert_allclose(db.features.normalized, expected.normalized, rtol=1e-6, atol=1e-6)
    stamp = path.stat().st_mtime_ns
    build_default_database(path, data=tmp_path / "no-mocap-here", progress=False, mixed=mixed, kind=kind)
    assert path.stat().st_mtime_ns == stamp          # up to date: not written again


def test_each_locomotion_database_has_its_own_tuned_weights():
    # The mixed default keeps the weights tuned on it; the Bandai-Namco database's differ (its own study).
    assert default_weights("mixed") == TUNED_WEIGHTS and TUNED_WEIGHTS["trajectory_position"] == 3.2
    assert default_weights("bandai") == BANDAI_WEIGHTS != TUNED_WEIGHTS
    assert set(BANDAI_WEIGHTS) == set(TUNED_WEIGHTS) <= set(default_schema().names)
    assert default_weights() == default_weights("actions") == {c.name: c.weight for c in default_schema().channels}


@pytest.mark.parametrize("key", [None, "0123456789ab"])
def test_cached_mixed_database_of_another_definition_is_rebuilt(jlpm_db, tmp_path, key):
    """A mixed default cache built before its definition (sets, globs, build revision) changed is not
    reused: build_default_database builds again (here it looks for the mocap and finds none)."""
    meta = dict(jlpm_db.meta)
    if key is None:
        jlpm_db.meta.pop("definition", None)
    else:
        jlpm_db.meta["definition"] = key
    try:
        path = tmp_path / "mixed.npz"
        save_database(jlpm_db, path)
    finally:
        jlpm_db.meta = meta
    assert default_definition(True) not in (None, key)
    with pytest.raises(DataNotFoundError):
        build_default_database(path, data=tmp_path / "no-mocap-here", progress=False, mixed=True)
