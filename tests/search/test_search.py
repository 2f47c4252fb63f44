import json
import os
from pathlib import Path

import numpy as np
import pytest

from motionmatch.search import BACKENDS, Searcher, frame_mask
from motionmatch.cli import main
from motionmatch.devtools.search_bench import synthetic_features
from motionmatch.offline.features_export import make_queries, read_export, trajectory_columns, write_export

FAST = [b for b in BACKENDS if b != "brute_numpy"]


# ---------------------------------------------------------------------------------------------
# data

def adversarial(seed=0, n=1500, f=9):
    """Coarse values (many exact ties), duplicate rows and blocks, a constant column, gaps between
    ranges, ranges shorter than end_exclude, an empty range, ranges given out of order."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-2, 3, size=(n, f)).astype(np.float32) * 0.5
    x[:, 3] = 0.25  # constant column
    x[100:140] = x[600:640]  # duplicate block
    x[rng.integers(0, n, 200)] = x[rng.integers(0, n, 200)]  # duplicate rows
    x[700:800] = x[700]  # a frozen stretch: one row repeated
    x[900:1000] += rng.normal(size=(100, f)).astype(np.float32) * 1e-3  # near ties
    ranges = [(0, 300), (300, 310), (310, 315), (320, 700), (700, 705), (705, 1100), (1100, 1100),
              (1150, 1490)]
    rng.shuffle(ranges)
    starts = np.array([r[0] for r in ranges])
    stops = np.array([r[1] for r in ranges])
    return x, starts, stops


def adversarial_queries(x, rng, count):
    n, f = x.shape
    rows = x[rng.integers(0, n, count)]
    kinds = rng.integers(0, 4, count)
    q = rows.copy()
    q[kinds == 1] += rng.normal(size=(int((kinds == 1).sum()), f)).astype(np.float32) * 0.3
    q[kinds == 2] = rng.integers(-2, 3, size=(int((kinds == 2).sum()), f)).astype(np.float32) * 0.5
    q[kinds == 3] = rng.normal(size=(int((kinds == 3).sum()), f)).astype(np.float32) * 3
    return q


def all_searchers(x, starts, stops, end_exclude=20):
    return {b: Searcher(x, starts, stops, backend=b, end_exclude=end_exclude) for b in BACKENDS}


def assert_all_agree(searchers, queries, currents, skip, bias, mask=None):
    ref = searchers["brute_numpy"]
    for q, c in zip(queries, currents):
        expected = ref.search(q, int(c), skip, bias, mask=mask)
        for b in FAST:
            got = searchers[b].search(q, int(c), skip, bias, mask=mask)
            assert got == expected, (b, int(c), skip, bias, got, expected)
    for b in FAST:
        frames, costs = searchers[b].search_batch(queries, currents, skip, bias, mask=mask)
        single = [ref.search(q, int(c), skip, bias, mask=mask) for q, c in zip(queries, currents)]
        np.testing.assert_array_equal(frames, [s[0] for s in single])
        np.testing.assert_array_equal(costs, [s[1] for s in single])


# ---------------------------------------------------------------------------------------------
# agreement of all back-ends

@pytest.mark.parametrize("skip, bias", [(0, 0.0), (0, 0.3), (3, 0.0), (2, -0.25), (0, np.inf), (1, -np.inf)])
def test_backends_agree_on_adversarial_data(skip, bias):
    x, starts, stops = adversarial()
    s = all_searchers(x, starts, stops)
    rng = np.random.default_rng(1)
    q = adversarial_queries(x, rng, 60)
    cur = rng.integers(-1, len(x), len(q))
    cur[::4] = -1
    cur[1::7] = 295  # end-excluded current frame
    cur[2::9] = 1120  # between ranges
    assert_all_agree(s, q, cur, skip, bias)


@pytest.mark.parametrize("kind", ["random", "sparse", "clips", "nothing"])
def test_backends_agree_with_masks(kind):
    x, starts, stops = adversarial(seed=2)
    s = all_searchers(x, starts, stops, end_exclude=7)
    rng = np.random.default_rng(3)
    mask = {"random": rng.random(len(x)) < 0.5, "sparse": rng.random(len(x)) < 0.03,
            "clips": (np.arange(len(x)) // 200) % 2 == 0, "nothing": np.zeros(len(x), bool)}[kind]
    q = adversarial_queries(x, rng, 40)
    cur = rng.integers(-1, len(x), len(q))
    for sr in s.values():
        sr.set_mask(mask)
    assert_all_agree(s, q, cur, 1, 0.1)
    for sr in s.values():
        sr.set_mask(None)
    assert_all_agree(s, q, cur, 0, 0.0, mask=mask)  # per-call mask, same answers
    if kind == "nothing":
        assert s["aabb"].search(q[0], mask=mask) == (-1, float("inf"))


def test_backends_agree_on_smooth_random_walks():
    x, starts, stops = synthetic_features(12000, seed=4)
    s = all_searchers(x, starts, stops)
    q, cur = make_queries(x, starts, stops, np.arange(15, 27), 60, noise=0.7, seed=5)
    assert_all_agree(s, q, cur, 0, 0.0)
    assert_all_agree(s, q, np.full(len(q), -1), 0, 0.0)
    assert_all_agree(s, q, cur, 5, 0.5)
    x2 = x.copy()
    x2[:, 7] = 0.0  # a constant column
    s2 = all_searchers(x2, starts, stops)
    assert_all_agree(s2, q[:20], cur[:20], 0, 0.0)


def test_backends_agree_on_27d_ties():
    # every frame duplicated: each query has at least two equal best candidates
    x, starts, stops = synthetic_features(3000, seed=6)
    x = np.repeat(x[::2], 2, axis=0)
    s = all_searchers(x, starts, stops)
    rng = np.random.default_rng(7)
    idx = rng.integers(0, len(x), 40)
    q = x[idx]
    assert_all_agree(s, q, np.full(len(q), -1), 0, 0.0)
    for b in BACKENDS:
        f, c = s[b].search(x[1001])  # rows 1000 and 1001 are equal: the lower frame wins
        assert (f, c) == (1000, 0.0)


def test_cost_is_the_float32_squared_distance():
    x, starts, stops = synthetic_features(2000, seed=8)
    q = x[321] + np.float32(0.05)
    for b in BACKENDS:
        f, c = Searcher(x, starts, stops, backend=b).search(q)
        d = (x[f] - q).astype(np.float32)
        expected = np.float32(0)
        for v in d:
            expected = np.float32(expected + v * v)
        assert c == float(expected)
        sr = Searcher(x, starts, stops, backend=b)
        exact = ((x[sr.searchable].astype(np.float64) - q) ** 2).sum(1).min()
        assert abs(c - exact) <= 1e-5 * exact  # the true minimum, up to float32 rounding


# ---------------------------------------------------------------------------------------------
# semantics, checked by hand on tiny data

def line(n=60):
    """Frame i has feature (i,): distances are easy to reason about."""
    return np.arange(n, dtype=np.float32)[:, None]


@pytest.mark.parametrize("backend", BACKENDS)
def test_end_exclusion(backend):
    x = line()
    s = Searcher(x, [0, 30], [30, 60], backend=backend, end_exclude=5)
    assert s.search(np.array([27.0]))[0] == 24  # 25..29 have no future
    assert s.search(np.array([29.0]))[0] == 30
    assert s.search(np.array([100.0]))[0] == 54
    assert not s.searchable[25:30].any() and s.searchable[:25].all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_short_ranges_and_frames_outside_ranges(backend):
    x = line()
    s = Searcher(x, [0, 10, 40], [5, 30, 45], backend=backend, end_exclude=6)
    # range [0, 5) is shorter than end_exclude; [40, 45) too; frames 30..39 lie in no range
    assert s.search(np.array([2.0])) == (10, 64.0)
    assert s.search(np.array([38.0])) == (23, 225.0)
    empty = Searcher(x, [0], [5], backend=backend, end_exclude=6)
    assert empty.search(np.array([1.0])) == (-1, float("inf"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_bias_keeps_the_current_frame(backend):
    x = line()
    s = Searcher(x, [0], [60], backend=backend, end_exclude=5)
    q = np.array([10.0], dtype=np.float32)
    assert s.search(q, current=12, bias=0.0) == (10, 0.0)
    assert s.search(q, current=12, bias=3.9) == (10, 0.0)
    assert s.search(q, current=12, bias=4.0) == (12, 4.0)  # cost(current) <= best + bias: current wins
    assert s.search(q, current=11, bias=0.0) == (10, 0.0)
    # equal costs: the current frame wins at bias 0 (continuing is preferred)
    q2 = np.array([10.5], dtype=np.float32)
    assert s.search(q2, current=11) == (11, 0.25)
    assert s.search(q2) == (10, 0.25)  # without a current frame: the lower frame
    # an end-excluded current frame does not count, whatever the bias
    assert s.search(np.array([57.0]), current=57, bias=100.0) == (54, 9.0)
    # a negative bias: the current frame must beat the others by more than -bias
    assert s.search(q, current=10, bias=-0.5) == (10, 0.0)  # 0 <= 1 - 0.5
    assert s.search(q, current=10, bias=-1.5) == (9, 1.0)  # 9 and 11 tie: the lower frame


@pytest.mark.parametrize("backend", BACKENDS)
def test_skip_excludes_neighbours_of_current(backend):
    x = line()
    s = Searcher(x, [0], [60], backend=backend, end_exclude=5)
    q = np.array([20.0], dtype=np.float32)
    never = -np.inf  # bias -inf: the current frame never wins, so we see the best other frame
    assert s.search(q, current=40, skip=0) == (20, 0.0)
    assert s.search(q, current=20, skip=0, bias=never) == (19, 1.0)  # only current itself excluded
    assert s.search(q, current=20, skip=3, bias=never) == (16, 16.0)  # 17..23 excluded
    assert s.search(q, current=20, skip=3) == (20, 0.0)  # the current frame itself still counts
    assert s.search(q, current=22, skip=3, bias=never) == (18, 4.0)  # 19..25 excluded
    assert s.search(q, current=22, skip=3) == (22, 4.0)  # ties with 18: the current frame wins
    assert s.search(q, current=2, skip=30, bias=never) == (33, 169.0)  # window clipped at frame 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_mask(backend):
    x = line()
    s = Searcher(x, [0], [60], backend=backend, end_exclude=5)
    mask = np.zeros(60, bool)
    mask[[3, 40, 41]] = True
    s.set_mask(mask)
    assert s.search(np.array([20.0])) == (3, 289.0)
    assert s.search(np.array([20.0]), current=10, bias=1000.0) == (3, 289.0)  # masked current never counts
    assert s.search(np.array([20.0]), current=41, bias=200.0) == (41, 441.0)  # allowed current counts
    s.set_mask(None)
    assert s.search(np.array([20.0])) == (20, 0.0)


def test_mask_structures_are_cached_by_content():
    x, starts, stops = synthetic_features(3000, seed=9)
    s = Searcher(x, starts, stops)
    mask = np.arange(len(x)) % 3 != 0
    s.set_mask(mask)
    first = s._index
    s.set_mask(None)
    s.set_mask(mask.copy())
    assert s._index is first


# ---------------------------------------------------------------------------------------------
# errors

def test_errors():
    x = line()
    with pytest.raises(ValueError, match="unknown search backend"):
        Searcher(x, [0], [60], backend="faiss")
    with pytest.raises(ValueError, match="overlap"):
        Searcher(x, [0, 10], [20, 30])
    with pytest.raises(ValueError):
        Searcher(x, [0], [61])
    x_bad = x.copy()
    x_bad[3, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        Searcher(x_bad, [0], [60])
    for b in BACKENDS:
        s = Searcher(x, [0], [60], backend=b)
        with pytest.raises(ValueError, match="shape"):
            s.search(np.zeros(2))
        with pytest.raises(ValueError, match="non-finite"):
            s.search(np.array([np.nan]))
        with pytest.raises(ValueError, match="current"):
            s.search(np.zeros(1), current=60)
        with pytest.raises(ValueError):
            s.search(np.zeros(1), skip=-1)
        with pytest.raises(ValueError, match="mask"):
            s.set_mask(np.ones(5, bool))
        with pytest.raises(ValueError, match="non-finite"):
            s.search_batch(np.array([[np.inf]]))


# ---------------------------------------------------------------------------------------------
# real data: the default database built from ../shared/mocap (conftest fixture)

def real_queries(db, rng, count):
    """Queries a search meets and worse: recorded-like (a frame with its trajectory perturbed), far from
    the data (5 standard deviations of noise on every column), near ties (a frame plus 1e-6 noise, so
    its neighbours' costs are almost equal) and exact frames (cost 0). Current frames: random, -1, or
    the source frame."""
    x = db.features.normalized
    starts, stops = db.range_starts, db.range_stops
    n, f = x.shape
    q, cur = make_queries(x, starts, stops, trajectory_columns(db.features.channel_slices), count, noise=0.5,
                          seed=int(rng.integers(1 << 30)))
    q = q.copy()
    kind = np.arange(count) % 4
    src = rng.integers(0, n, count)
    q[kind == 1] = rng.normal(size=(int((kind == 1).sum()), f)).astype(np.float32) * 5
    q[kind == 2] = x[src[kind == 2]] + rng.normal(size=(int((kind == 2).sum()), f)).astype(np.float32) * 1e-6
    q[kind == 3] = x[src[kind == 3]]
    cur = np.where(kind >= 2, src, cur).astype(np.int64)
    cur[::5] = -1
    cur[1::7] = rng.integers(0, n, len(cur[1::7]))
    return q, cur


@pytest.mark.parametrize("name", ["jlpm", "bandai"])
def test_backends_agree_on_real_databases(name, jlpm_db, bandai_walk_db):
    """Every back-end and mode on real features: current frame or none, skip, bias of both signs and
    infinite, end_exclude 0 / 20 / 45, a tag filter and a random mask (set and per call)."""
    db = {"jlpm": jlpm_db, "bandai": bandai_walk_db}[name]
    x = db.features.normalized
    starts, stops = db.range_starts, db.range_stops
    rng = np.random.default_rng(11)
    q, cur = real_queries(db, rng, 48)
    for end_exclude in (20, 0, 45):
        s = all_searchers(x, starts, stops, end_exclude=end_exclude)
        assert_all_agree(s, q, cur, 0, 0.0)
        assert_all_agree(s, q, np.full(len(q), -1), 0, 0.0)
        if end_exclude == 20:
            for skip, bias in ((2, 0.2), (10, -0.3), (0, np.inf), (1, -np.inf)):
                assert_all_agree(s, q, cur, skip, bias)
    mirrored = frame_mask("mirrored", db.range_tags, starts, stops, len(x))
    assert 0 < mirrored.sum() < len(x)
    for mask in (mirrored, ~mirrored, rng.random(len(x)) < 0.3):
        assert_all_agree(s, q, cur, 3, 0.1, mask=mask)
        for sr in s.values():
            sr.set_mask(mask)
        assert_all_agree(s, q[:16], cur[:16], 0, 0.0)
        for sr in s.values():
            sr.set_mask(None)


def test_tree_answers_equal_brute_force_on_many_real_queries(bandai_walk_db):
    """The tree against the numba brute force on 600 queries of every kind (the numpy reference is too
    slow for this many)."""
    db = bandai_walk_db
    x = db.features.normalized
    s = {b: Searcher(x, db.range_starts, db.range_stops, backend=b) for b in ("brute", "aabb")}
    q, cur = real_queries(db, np.random.default_rng(12), 600)
    for current in (cur, np.full(len(q), -1)):
        ref = s["brute"].search_batch(q, current)
        got = s["aabb"].search_batch(q, current)
        np.testing.assert_array_equal(got[0], ref[0])
        np.testing.assert_array_equal(got[1], ref[1])
        single = [s["aabb"].search(qq, int(c)) for qq, c in zip(q, current)]
        assert single == list(zip(ref[0].tolist(), ref[1].tolist()))


# ---------------------------------------------------------------------------------------------
# export and bench

def test_export_round_trip(tmp_path):
    x, starts, stops = synthetic_features(1000, seed=10)
    q, cur = make_queries(x, starts, stops, np.arange(15, 27), 16)
    meta = write_export(tmp_path, x, starts, stops, q, cur)
    assert meta["N"] == 1000 and meta["F"] == 27 and meta["Q"] == 16
    assert (tmp_path / "features.f32").stat().st_size == 1000 * 27 * 4
    back = read_export(tmp_path)
    np.testing.assert_array_equal(back["features"], x)
    np.testing.assert_array_equal(back["queries"], q)
    np.testing.assert_array_equal(back["queries_cur"], cur)
    np.testing.assert_array_equal(back["range_starts"], starts)
    np.testing.assert_array_equal(back["range_stops"], stops)


def test_make_queries_perturbs_only_trajectory_columns():
    x, starts, stops = synthetic_features(2000, seed=11)
    q, cur = make_queries(x, starts, stops, np.arange(15, 27), 50, noise=0.5)
    np.testing.assert_array_equal(q[:, :15], x[cur, :15])
    assert np.all(np.abs(q[:, 15:] - x[cur, 15:]).max(axis=1) > 0)


def test_bench_runs_on_an_export(tmp_path, capsys):
    x, starts, stops = synthetic_features(3000, seed=12)
    q, cur = make_queries(x, starts, stops, np.arange(15, 27), 20)
    write_export(tmp_path, x, starts, stops, q, cur)
    assert main(["bench", "search", "--queries", str(tmp_path), "--json"]) == 0
    out = capsys.readouterr().out
    assert '"aabb"' in out and '"current_median_us"' in out and '"disagreements"' not in out


def test_features_export_with_runtime_queries_and_bench(jlpm_db_path, tmp_path, capsys):
    from motionmatch.posedb.database import load_database
    out = tmp_path / "exp"
    assert main(["features", "export", str(jlpm_db_path), "--out", str(out), "--queries", "60"]) == 0
    db = load_database(jlpm_db_path)
    n, f = db.features.normalized.shape
    feats = np.fromfile(out / "features.f32", dtype="<f4").reshape(n, f)
    assert np.array_equal(feats, db.features.normalized)
    ranges = np.fromfile(out / "ranges.i32", dtype="<i4").reshape(-1, 2)
    assert np.array_equal(ranges[:, 0], db.range_starts) and np.array_equal(ranges[:, 1], db.range_stops)
    q = np.fromfile(out / "queries.f32", dtype="<f4").reshape(-1, f)
    cur = np.fromfile(out / "queries_cur.i32", dtype="<i4")
    assert q.shape == (60, f) and cur.shape == (60,)
    assert ((cur >= 0) & (cur < n)).all()          # a running character always has a current frame
    # Pose columns of a runtime query are the current frame's own features.
    assert np.allclose(q[:, :15], feats[cur, :15], atol=1e-4)
    capsys.readouterr()
    assert main(["bench", "search", "--queries", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert set(res["backends"]) == {"brute_numpy", "brute", "aabb"}


def test_prepared_mask_equals_plain_mask():
    x, starts, stops = synthetic_features(3000, seed=5)
    s = Searcher(x, starts, stops)
    rng = np.random.default_rng(2)
    mask = rng.random(len(x)) < 0.4
    handle = s.prepare(mask)
    for q in x[rng.integers(0, len(x), 30)] + rng.normal(0, 0.3, (30, x.shape[1])).astype(np.float32):
        assert s.search(q, mask=handle) == s.search(q, mask=mask)
        f, _ = s.search(q, mask=handle)
        assert mask[f]


def test_read_only_queries_and_masks_search_as_writable_ones():
    """AabbIndex.search calls the compiled overload it found for a kind of array directly: a read-only
    query or mask (another numba type) must find its own, not be read through the writable one's."""
    x, starts, stops = synthetic_features(3000, seed=7)
    s = Searcher(x, starts, stops, backend="aabb")
    rng = np.random.default_rng(3)
    mask = rng.random(len(x)) < 0.5
    frozen = mask.copy()
    frozen.setflags(write=False)
    queries = x[rng.integers(0, len(x), 20)] + rng.normal(0, 0.3, (20, x.shape[1])).astype(np.float32)
    for q in queries:
        ro = q.copy()
        ro.setflags(write=False)
        plain = s.search(q, current=5, skip=3, bias=0.1)
        assert s.search(ro, current=5, skip=3, bias=0.1) == plain
        assert s.search(q, current=np.int64(5), skip=np.int32(3), bias=np.float64(0.1)) == plain
        assert s.search(ro, mask=frozen) == s.search(q, mask=mask)
    brute = Searcher(x, starts, stops, backend="brute")
    assert [s.search(q, mask=frozen) for q in queries] == [brute.search(q, mask=mask) for q in queries]


def test_search_batch_accepts_a_prepared_mask():
    x, starts, stops = synthetic_features(3000, seed=6)
    s = Searcher(x, starts, stops)
    rng = np.random.default_rng(3)
    mask = rng.random(len(x)) < 0.3
    qs = x[rng.integers(0, len(x), 40)] + rng.normal(0, 0.3, (40, x.shape[1])).astype(np.float32)
    cur = rng.integers(0, len(x), 40)
    f1, c1 = s.search_batch(qs, cur, bias=0.1, mask=s.prepare(mask))
    f2, c2 = s.search_batch(qs, cur, bias=0.1, mask=mask)
    assert np.array_equal(f1, f2) and np.array_equal(c1, c2)
    assert mask[f1[f1 != cur]].all()


# ---------------------------------------------------------------------------------------------
# annotation rules (FrameRules): per-frame costs, frames not to enter, frames excluded

@pytest.mark.parametrize("scale", [0.25, 40.0])
def test_backends_agree_under_frame_rules(scale):
    """Coarse per-frame costs (ties), some far below 0 (the tree's bounds must still hold), frames the
    search may not enter and excluded frames: every back-end gives brute force's answer, with masks too."""
    from motionmatch.search import FrameRules
    x, starts, stops = adversarial(seed=3)
    rng = np.random.default_rng(4)
    n = len(x)
    cost = (rng.integers(-2, 3, n) * scale * 0.5).astype(np.float32)
    cost[rng.random(n) < 0.6] = 0.0
    enter = rng.random(n) > 0.3
    enter[400:500] = False
    allowed = rng.random(n) > 0.1
    allowed[450] = True
    mask = rng.random(n) > 0.2
    rng_q = np.random.default_rng(5)
    q = adversarial_queries(x, rng_q, 50)
    cur = rng_q.integers(-1, n, len(q))
    cur[::5] = 450                     # playing a frame the search may not enter: it may continue
    for rules in (FrameRules(cost=cost), FrameRules(enter=enter, allowed=allowed),
                  FrameRules(cost, enter, allowed)):
        s = {b: Searcher(x, starts, stops, backend=b, rules=rules) for b in BACKENDS}
        for skip, bias in ((0, 0.0), (3, 0.3), (2, -0.25)):
            assert_all_agree(s, q, cur, skip, bias)
            assert_all_agree(s, q, cur, skip, bias, mask=mask)
        frames, _ = s["aabb"].search_batch(q, cur, 3, 0.0)
        if rules.enter is not None:
            entered = frames[(frames >= 0) & (frames != cur)]
            assert enter[entered].all() and allowed[frames[frames >= 0]].all()
            kept, _ = s["aabb"].search_batch(q, cur, 3, np.inf)
            assert (kept[cur == 450] == 450).all()      # a frame not to enter may still continue


def test_a_frame_cost_changes_the_pick():
    from motionmatch.search import FrameRules
    x, starts, stops = adversarial(seed=6)
    q = x[150].copy()
    plain = Searcher(x, starts, stops).search(q)
    cost = np.zeros(len(x), np.float32)
    cost[plain[0]] = 5.0
    moved = Searcher(x, starts, stops, rules=FrameRules(cost=cost)).search(q)
    assert moved[0] != plain[0] and moved[1] >= plain[1]
    cost[:] = 0.0
    cost[1200] = -100.0                # a strong preference wins over a better pose
    assert Searcher(x, starts, stops, rules=FrameRules(cost=cost)).search(q)[0] == 1200


# ---------------------------------------------------------------------------------------------
# the aabb tree's structure (search/aabb.py: sampled k-d cells, then exact median splits in each)

def tree_of(x, starts, stops, end_exclude=0, mask=None):
    s = Searcher(x, starts, stops, backend="aabb", end_exclude=end_exclude)
    if mask is not None:
        s.set_mask(mask)
    others, first, count, node_lo, node_hi, node_kids, node_count = s.index_arrays[:1] + s.index_arrays[4:]
    return s, others, first, count, node_lo, node_hi, node_kids, node_count


@pytest.mark.parametrize("kind", ["smooth", "frozen", "constant", "sparse"])
def test_tree_holds_every_leaf_once_and_its_boxes_bound_their_frames(kind):
    """Smooth walks (8 cells), frames nearly all one row (the cells' sampled medians tie: empty cells,
    a cell of one leaf, one of 756), all one row (a single non-empty cell) and a mask leaving scattered
    frames (leaves of one frame): each leaf sits in exactly one slot, every slot's box holds every frame
    below it, missing children are empty boxes, a child's id is above its parent's, and answers equal
    brute force."""
    x, starts, stops = synthetic_features(12000, seed=13)
    mask = None
    if kind == "frozen":
        x[np.random.default_rng(14).random(len(x)) < 0.9] = x[5]
    elif kind == "constant":
        x[:] = x[5]
    elif kind == "sparse":
        mask = np.zeros(len(x), dtype=bool)
        mask[np.random.default_rng(15).choice(len(x), 3000, replace=False)] = True
    s, others, first, count, lo, hi, kids, n_kids = tree_of(x, starts, stops, mask=mask)
    assert len(first) > 256  # more than one cell
    seen = np.zeros(len(first), dtype=int)

    def frames_below(nd, k):
        c = kids[nd, k]
        if c < 0:
            seen[-c - 1] += 1
            return np.arange(first[-c - 1], first[-c - 1] + count[-c - 1])
        assert c > nd
        return np.concatenate([frames_below(c, i) for i in range(n_kids[c])])

    for k in range(n_kids[0]):
        frames = frames_below(0, k)
        assert (x[frames] >= lo[0, :, k]).all() and (x[frames] <= hi[0, :, k]).all()
    for nd in range(1, len(n_kids)):
        for k in range(n_kids[nd]):
            rows = x[frames_below(nd, k)]
            assert (rows >= lo[nd, :, k]).all() and (rows <= hi[nd, :, k]).all()
        assert (lo[nd, :, n_kids[nd]:] == np.inf).all() and (hi[nd, :, n_kids[nd]:] == -np.inf).all()
    # each leaf reached once from the root (the loop above walks every node's subtree again)
    seen[:] = 0
    for k in range(n_kids[0]):
        frames_below(0, k)
    assert (seen == 1).all()
    assert np.array_equal(np.sort(np.concatenate([np.arange(f, f + c) for f, c in zip(first, count)])),
                          np.flatnonzero(others))
    brute = Searcher(x, starts, stops, backend="brute", end_exclude=0)
    rng = np.random.default_rng(16)
    q = x[rng.integers(0, len(x), 40)] + rng.normal(size=(40, x.shape[1])).astype(np.float32) * 0.2
    cur = rng.integers(-1, len(x), 40)
    np.testing.assert_array_equal(s.search_batch(q, cur, 3, 0.0)[0], brute.search_batch(q, cur, 3, 0.0, mask=mask)[0])
