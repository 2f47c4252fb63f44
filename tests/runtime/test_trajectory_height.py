"""3D trajectory matching: the trajectory_height channel on a synthesized slope clip, and the query's
heights taken from the terrain along the desired trajectory."""
import numpy as np
import pytest

from motionmatch.posedb.database import build_database
from motionmatch.posedb.features import FeatureSet, compute_features, schema_from_dict
from motionmatch.runtime.character import Character, CharacterSettings
from motionmatch.runtime.controller import GamepadInput
from motionmatch.world.terrain import Heightfield

HEIGHTS = {"name": "trajectory_height", "kind": "trajectory_height", "weight": 1.0, "offsets": [20, 40, 60]}
SCHEMA = schema_from_dict({"channel": [
    {"name": "hips_velocity", "kind": "velocity", "joint": "hips"},
    {"name": "trajectory_position", "kind": "trajectory_position", "offsets": [20, 40, 60]},
    HEIGHTS]})


@pytest.fixture(scope="module")
def walks(bandai_dir):
    files = sorted((bandai_dir / "dataset-2").glob("dataset-2_walk_normal_*.bvh"))[:2]
    return build_database(files, schema=SCHEMA, progress=False)


def test_heights_of_a_synthesized_slope_clip(walks):
    db = walks
    a, b = int(db.range_starts[0]), int(db.range_stops[0])
    gpos, grot = db.global_transforms(slice(a, b))
    flat = compute_features(SCHEMA, gpos, grot, db.fps, np.array([0]), np.array([b - a]), db.joint_index)
    # The same walk climbing a 10 % grade: every joint but the simulation bone (on the ground plane by
    # construction) rises with the distance walked.
    walked = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(gpos[:, 0], axis=0), axis=1))])
    climb = gpos.copy()
    climb[:, 1:, 1] += 0.1 * walked[:, None]
    raw = compute_features(SCHEMA, climb, grot, db.fps, np.array([0]), np.array([b - a]), db.joint_index)
    h = slice(2 * 3 + 3, 2 * 3 + 6)            # after hips velocity (3) and trajectory positions (6)
    inner = slice(30, b - a - 90)               # away from the clip's ends (window and offsets held there)
    for k, o in enumerate((20, 40, 60)):
        expected = 0.1 * (walked[np.arange(inner.start, inner.stop) + o] - walked[inner])
        np.testing.assert_allclose(raw[inner, h][:, k], expected, atol=0.02)
        assert np.abs(flat[inner, h][:, k]).max() < 0.03          # flat ground: toe noise only
    assert raw[inner, h][:, 2].mean() > 0.1                       # ~1.2 m walked in 1 s: 12 cm higher
    # Normalization keeps a floor on the scale: flat data does not make a small height count for much.
    fs = FeatureSet(SCHEMA, flat)
    assert fs.std[h][0] == pytest.approx(0.05)


def test_query_heights_follow_the_terrain_along_the_desired_trajectory(walks):
    db = walks
    ch = Character(db, CharacterSettings())
    slope = Heightfield.from_spec({"kind": "slope", "angle_deg": 10, "direction_deg": 0, "size": 40})
    ch.set_terrain(slope)
    crowd = ch.crowd
    checked = 0
    for k in range(120):
        ch.step(GamepadInput(move=(0.0, 1.0)))
        if crowd.searches_last_tick:
            q = db.features.denormalize(crowd.last_query[0])
            here = slope.height(crowd.root_pos[0, 0], crowd.root_pos[0, 2])
            ahead = [slope.height(p[0], p[2]) - here for p in crowd.traj_pos[0]]
            got = q[db.features.channel_slices["trajectory_height"]]
            np.testing.assert_allclose(got - got[0], np.subtract(ahead, ahead[0]), atol=1e-4)
            # Relative to the root at the query; it has moved on by a frame's playback since (~2 cm).
            assert abs(got[0] - ahead[0]) < 0.006
            checked += 1
    assert checked >= 10
    # Walking up a 10 degree slope at ~1.3 m/s, the point 1 s ahead is ~20 cm higher.
    assert 0.1 < ahead[-1] < 0.4
