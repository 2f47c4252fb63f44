"""Future stance matching: the `stance` feature channel (which foot leads, some frames ahead)."""
import numpy as np
import pytest

from motionmatch.posedb.database import build_database
from motionmatch.posedb.features import FeatureError, schema_from_dict, stance_features

STANCE = {"name": "stance", "kind": "stance", "weight": 0.5, "offsets": [12]}


@pytest.fixture(scope="module")
def walks(bandai_dir):
    """Two straight Bandai-Namco walks (and their mirrors)."""
    files = sorted((bandai_dir / "dataset-2").glob("dataset-2_walk_normal_*.bvh"))[:2]
    schema = schema_from_dict({"channel": [{"name": "hips_velocity", "kind": "velocity", "joint": "hips"}, STANCE]})
    return build_database(files, schema=schema, progress=False)


def test_stance_alternates_with_the_steps_and_the_landing_foot_leads(walks):
    db = walks
    for r in range(len(db.range_starts)):
        a, b = int(db.range_starts[r]), int(db.range_stops[r])
        gpos, grot = db.global_transforms(slice(a, b))
        lead = stance_features(gpos, grot, db.roles["left_foot"], db.roles["right_foot"])
        contacts = db.contacts[a:b]
        onsets = 0
        for side, sign in ((0, 1.0), (1, -1.0)):
            on = np.flatnonzero(~contacts[:-1, side] & contacts[1:, side]) + 1
            assert len(on) >= 5, db.range_names[r]
            # When a foot lands it is the front one, by about a step length.
            assert np.all(sign * lead[on] > 0.3), (db.range_names[r], side, lead[on])
            onsets += len(on)
        # One change of lead per step: as many sign changes as foot landings (give or take the ends).
        changes = np.count_nonzero(np.sign(lead[1:]) != np.sign(lead[:-1]))
        assert abs(changes - onsets) <= 2, (changes, onsets)


def test_stance_channel_looks_ahead_inside_each_clip(walks):
    db = walks
    raw = db.features.raw[:, db.features.channel_slices["stance"]][:, 0]
    for r in range(len(db.range_starts)):
        a, b = int(db.range_starts[r]), int(db.range_stops[r])
        gpos, grot = db.global_transforms(slice(a, b))
        lead = stance_features(gpos, grot, db.roles["left_foot"], db.roles["right_foot"])
        ahead = lead[np.minimum(np.arange(b - a) + 12, b - a - 1)]    # 0.2 s ahead, held at the clip end
        np.testing.assert_allclose(raw[a:b], ahead, atol=1e-4)
    # A mirrored clip leads with the other foot.
    np.testing.assert_allclose(raw[db.range_starts[1]:db.range_stops[1]], -raw[db.range_starts[0]:db.range_stops[0]],
                               atol=1e-3)


def test_stance_channel_needs_offsets():
    with pytest.raises(FeatureError, match="offsets"):
        schema_from_dict({"channel": [{"name": "stance", "kind": "stance"}]})
