"""Learned characters in the runtime: a tiny model trained here drives a character and `synth --lmm`."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from motionmatch.cli import main
from motionmatch.lmm import inference
from motionmatch.lmm.model import ModelError, load_model
from motionmatch.runtime.character import Character
from motionmatch.runtime.controller import GamepadInput
from motionmatch.runtime.crowd import Crowd
from motionmatch.runtime.settings import CharacterSettings

pytestmark = pytest.mark.slow         # trains a model (module fixture): `make test`, not `make check`

SHARED = Path(__file__).resolve().parents[3] / "shared"


@pytest.fixture(scope="module")
def tiny_model(jlpm_db, tmp_path_factory):
    """A 64-wide model of the default database's first 200 frames (the lmm tests' size: compiles are reused).
    Its projector answers queries far from those frames (a walk): trained with the default noise (0.5) it
    made walking poses whose joints jumped 0.7 m a frame, with 1.0 at most 0.13 (docs/LMM.md)."""
    from motionmatch.lmm.train import TrainSettings, train_model
    out = tmp_path_factory.mktemp("lmm_runtime") / "model.npz"
    train_model(jlpm_db, out, TrainSettings(iterations=300, hidden=64, max_frames=200, progress=False,
                                            projector_noise=1.0))
    return out


def test_learned_character_walks_a_scenario_without_nan(tiny_model, jlpm_db):
    # The lowest bias makes every search jump, so the transitions to projected poses run too.
    ch = Character(jlpm_db, CharacterSettings(mode="lmm", model=str(tiny_model), lmm_bias=-1000.0))
    model = load_model(tiny_model)
    # The start pose is the decompressed projection of the start frame's features, not the database's.
    x, z = inference.project(model, jlpm_db.features.raw[ch.frame])
    start = inference.decompress(model, x, z)
    np.testing.assert_allclose(ch.crowd.local.rot[0, 1:], start.rotations[1:], atol=1e-5)
    hips = []
    script = [GamepadInput(move=(0.0, 1.0))] * 90 + [GamepadInput(move=(1.0, 0.0))] * 60 + [GamepadInput()] * 30
    for inp in script:
        ch.step(inp)
        assert np.isfinite(ch.global_positions).all()
        hips.append(ch.global_positions[1, 1])
    moved = float(np.hypot(*ch.crowd.root_pos[0, [0, 2]]))
    assert ch.crowd.mode == "lmm"
    # Bounds from tests/spreads/lmm_runtime_seeds.py, 20 training seeds of tiny_model (min / median / max):
    # transitions 30 / 30 / 30, median hips height 0.957 / 0.978 / 0.988 m, moved 0.33 / 1.40 / 2.31 m.
    assert ch.transitions >= 10 and ch.crowd.last_best[0] == -1      # jumps to projected poses, no database frame
    assert np.isfinite(ch.last_cost)
    assert 0.4 < np.median(hips) < 1.4                                 # a standing body, metres
    assert moved > 0.1                                                 # the learned root motion moves it


def test_learned_character_is_driven(tiny_model, jlpm_db):
    from app_fixtures import protocol_mismatches
    from motionmatch.app.driven import DrivenCharacter
    ch = Character(jlpm_db, CharacterSettings(mode="lmm", model=str(tiny_model)))
    assert ch.crowd.mode == "lmm" and protocol_mismatches(ch, DrivenCharacter) == []


def test_learned_agents_jump_by_their_own_bias(tiny_model, jlpm_db):
    """`lmm_bias`, not the classic `bias`, decides a learned agent's jumps."""
    def transitions(**kw):
        ch = Character(jlpm_db, CharacterSettings(mode="lmm", model=str(tiny_model), **kw))
        for inp in [GamepadInput(move=(0.0, 1.0))] * 60 + [GamepadInput(move=(1.0, 0.0))] * 60:
            ch.step(inp)
        return ch.transitions
    kept, jumping = transitions(lmm_bias=1000.0, bias=0.0), transitions(lmm_bias=-1000.0, bias=10.0)
    # Kept: no jump but the one this tiny model's rollout forces by leaving the data (taken back whatever
    # the bias; the 128-wide jlpm22 model makes none over the same input).
    assert kept <= 1 and jumping >= 10


def test_synth_lmm_writes_metrics_and_mismatch_is_a_clear_error(tiny_model, jlpm_db_path, bandai_walk_db, tmp_path,
                                                                capsys):
    scen = SHARED / "scenarios" / "walk_turn_stop.json"
    out = tmp_path / "lmm"
    assert main(["synth", "--db", str(jlpm_db_path), "--scenario", str(scen), "--out", str(out), "--quiet",
                 "--lmm", str(tiny_model)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["frames"] == 720 and m["nan_frames"] == 0
    # A model of another skeleton: the crowd refuses it, naming the file; the command says so without a traceback.
    with pytest.raises(ModelError, match="does not fit the database"):
        Crowd(bandai_walk_db, 2, CharacterSettings(mode="lmm", model=str(tiny_model)))
    from motionmatch.posedb.database import save_database
    bandai = tmp_path / "bandai.npz"
    save_database(bandai_walk_db, bandai)
    capsys.readouterr()
    assert main(["synth", "--db", str(bandai), "--scenario", str(scen), "--out", str(tmp_path / "x"), "--quiet",
                 "--lmm", str(tiny_model)]) == 1
    err = capsys.readouterr().err
    assert str(tiny_model) in err and "does not fit" in err and "Traceback" not in err


def test_crowd_mode_contract(tiny_model, jlpm_db):
    with pytest.raises(ValueError, match="needs model=PATH"):
        Crowd(jlpm_db, 1, CharacterSettings(mode="lmm"))
    with pytest.raises(ValueError, match="mode: expected one of"):
        Crowd(jlpm_db, 1, CharacterSettings(mode="learned"))
    mixed = [CharacterSettings(), CharacterSettings(mode="lmm", model=str(tiny_model))]
    with pytest.raises(ValueError, match="share one mode"):
        Crowd(jlpm_db, 2, mixed)
    crowd = Crowd(jlpm_db, 3, CharacterSettings(mode="lmm", model=str(tiny_model)))
    with pytest.raises(ValueError, match="classic crowd"):
        crowd.play_clip(0, 0)
    for _ in range(30):
        crowd.step(np.array([[0.0, 1.0], [1.0, 0.0], [0.0, 0.0]]), False, False, np.full((3, 2), np.nan))
    assert np.isfinite(crowd.global_positions).all()


def test_bench_lmm_compares_classic_and_learned_per_scenario(tiny_model, jlpm_db_path, capsys):
    scen = SHARED / "scenarios" / "walk_turn_stop.json"
    assert main(["bench", "lmm", "--db", str(jlpm_db_path), "--model", str(tiny_model), "--scenarios", str(scen),
                 "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert set(res) == {"database_bytes", "model_bytes", "scenarios", "machine"}
    both = res["scenarios"]["walk_turn_stop"]
    assert set(both) == {"classic", "lmm"}
    for m in both.values():
        assert m["frames"] == 720 and m["nan_frames"] == 0 and "pops" in m
    # Two different characters ran: the learned one is not the database's playback.
    assert both["lmm"]["foot_sliding_cm_s"] != both["classic"]["foot_sliding_cm_s"]


def test_serve_lmm_refuses_a_model_that_does_not_fit_before_serving(tiny_model, bandai_walk_db, tmp_path, capsys):
    from motionmatch.posedb.database import save_database
    bandai = tmp_path / "bandai.npz"
    save_database(bandai_walk_db, bandai)
    assert main(["serve", "--db", str(bandai), "--port", "0", "--lmm", str(tiny_model)]) == 1
    err = capsys.readouterr().err
    assert str(tiny_model) in err and "does not fit" in err and "Traceback" not in err


def _switch_step(tiny_model, jlpm_db, inertialization):
    """Largest joint move (m) of the frame across a classic -> learned -> classic switch, and the 95th
    percentile of the frames around them, walking."""
    ch = Character(jlpm_db, CharacterSettings(inertialization=inertialization))
    walk = GamepadInput(move=(0.0, 1.0))
    steps, across = [], []

    def run(k, record):
        for _ in range(k):
            before = ch.global_positions.copy()
            ch.step(walk)
            assert np.isfinite(ch.global_positions).all()
            record.append(float(np.abs(ch.global_positions - before).max()))

    run(60, [])
    run(20, steps)
    t0 = ch.transitions
    ch.settings.mode, ch.settings.model = "lmm", str(tiny_model)
    ch.apply_settings()
    assert ch.crowd.mode == "lmm" and ch.crowd.learned is not None and ch.transitions == t0 + 1
    run(1, across)
    run(40, steps)
    ch.settings.mode = "classic"
    ch.apply_settings()
    assert ch.crowd.mode == "classic" and ch.crowd.learned is None and ch.crowd.last_best[0] >= -1
    run(1, across)
    run(20, steps)
    return max(across), float(np.percentile(steps, 95))


def test_live_switch_between_classic_and_learned_is_inertialized(tiny_model, jlpm_db):
    # Bounds from tests/spreads/lmm_runtime_seeds.py, 20 training seeds of tiny_model (min / median / max):
    # the inertialized switch's step over the walk's 95th percentile 0.31 / 0.59 / 1.92 (the old bound, 1.5,
    # failed one seed), without inertialization 4.5-7.6; the pop over the inertialized step 3.7 / 11.6 / 20.3.
    smooth, typical = _switch_step(tiny_model, jlpm_db, "spring")
    assert smooth < 3.0 * typical, (smooth, typical)
    # Without inertialization the same switch pops: the learned pose is not the database's.
    popped, _ = _switch_step(tiny_model, jlpm_db, "off")
    assert popped > 2.0 * smooth, (popped, smooth)


def test_app_switches_classic_and_learned_live(tiny_model, jlpm_db):
    import asyncio

    import aiohttp
    from app_fixtures import Client, ServerThread

    from motionmatch.app import backend as app_backend
    from motionmatch.app import server as srv
    from motionmatch.app import session as app_session
    from motionmatch.runtime.settings_file import settings_from_dict
    settings = settings_from_dict({})
    settings.character.mode, settings.character.model = "lmm", str(tiny_model)    # what `serve --lmm` does
    with_model = ServerThread(srv.make_app(app_backend.runtime_backend(jlpm_db, None, settings)))
    without = ServerThread(srv.make_app(app_backend.runtime_backend(jlpm_db)))
    J = jlpm_db.num_joints

    def positions(frame: bytes) -> np.ndarray:
        return np.frombuffer(frame, np.float32, 3 * J, app_session.FRAME_HEADER.size)

    async def go():
        async with aiohttp.ClientSession() as s:
            c = await Client.open(s, with_model.url)
            assert c.hello["lmm"] is True and c.hello["settings"]["mode"] == "lmm"
            await c.ws.send_str(json.dumps({"type": "input", "move": [0.0, 1.0]}))
            for mode in ("classic", "lmm", "classic"):
                await c.pump_frames(20)
                await c.ws.send_str(json.dumps({"type": "settings", "mode": mode}))
                assert (await c.next_text("settings"))["settings"]["mode"] == mode
                await c.pump_frames(20)
                assert all(np.isfinite(positions(f)).all() for f in c.frames[-20:])
            await c.ws.close()
            # A server without a model offers no switch and refuses one with a clear message.
            d = await Client.open(s, without.url)
            assert d.hello["lmm"] is False and d.hello["settings"]["mode"] == "classic"
            await d.ws.send_str(json.dumps({"type": "settings", "mode": "lmm"}))
            assert "model" in (await d.next_text("error"))["message"]
            await d.ws.close()
    try:
        asyncio.run(asyncio.wait_for(go(), 120))
    finally:
        with_model.stop()
        without.stop()


def test_learned_queries_take_pose_features_from_the_decompressed_pose(tiny_model, jlpm_db):
    from motionmatch.runtime import learned
    crowd = Crowd(jlpm_db, 1, CharacterSettings(mode="lmm", model=str(tiny_model)))
    src = crowd.learned
    vel, ang, root_vel, root_ang = crowd.velocities
    frames = np.arange(300, 9000, 700)
    got = np.zeros((len(frames), jlpm_db.features.raw.shape[1]))
    for k, f in enumerate(frames):
        # A database frame's pose in the learned layout: joint 0 at the origin, its own-frame root motion.
        for a, v in zip(src.pose[:4], (jlpm_db.positions[f], jlpm_db.rotations[f], vel[f], ang[f])):
            a[0] = v
        src.pose[0][0, 0], src.pose[1][0, 0] = 0.0, (1.0, 0.0, 0.0, 0.0)
        src.pose[2][0, 0], src.pose[3][0, 0] = root_vel[f], root_ang[f]
        learned.pose_features(np.array([0]), src.parents, src.pose_channels, *src.pose[:4], got[k:k + 1])
    want = np.asarray(jlpm_db.features.raw[frames], dtype=np.float64)
    sl = jlpm_db.features.channel_slices
    kinds = {c.name: c.kind for c in jlpm_db.features.schema.channels}
    pos = np.concatenate([np.arange(sl[n].start, sl[n].stop) for n, k in kinds.items() if k == "position"])
    velc = np.concatenate([np.arange(sl[n].start, sl[n].stop) for n, k in kinds.items() if k == "velocity"])
    np.testing.assert_allclose(got[:, pos], want[:, pos], atol=1e-4)
    # The database's velocities are central differences, the runtime's forward ones: close, not equal.
    assert np.median(np.abs(got[:, velc] - want[:, velc])) < 0.05
    traj = [c for c in range(want.shape[1]) if c not in set(pos) | set(velc)]
    assert np.all(got[:, traj] == 0.0)          # the trajectory columns are left alone


def test_learned_current_cost_is_the_trajectory_mismatch_only(tiny_model, jlpm_db):
    """The pose columns of a learned query come from the agent's own pose, so the stepped features' drift
    there must not count against staying (classic's current frame costs its trajectory mismatch only)."""
    from motionmatch.runtime import learned
    crowd = Crowd(jlpm_db, 1, CharacterSettings(mode="lmm", model=str(tiny_model)))
    src = crowd.learned
    kinds = {c.name: c.kind for c in jlpm_db.features.schema.channels}
    sl = jlpm_db.features.channel_slices
    pose_cols = np.concatenate([np.arange(sl[n].start, sl[n].stop) for n, k in kinds.items()
                                if k in ("position", "velocity")])
    assert sorted(np.flatnonzero(src.shown)) == sorted(pose_cols)
    raw = np.asarray(jlpm_db.features.raw[[4000]], dtype=np.float64)
    _, _, q = learned.search(src, np.array([0]), raw, np.array([1e6]))       # no jump: the query only
    traj = ~src.shown
    src.x[0, traj] = q[0, traj]                      # the current trajectory is the query's
    src.x[0, src.shown] += 50.0                      # and the stepped pose features drifted far
    jump, cost, _ = learned.search(src, np.array([0]), raw, np.array([0.0]))
    assert cost[0] > 0.0 and not jump[0]             # nothing is closer than a zero current cost
    src.x[0, traj] += 3.0                            # a trajectory that left the query: the projection wins
    jump, _, _ = learned.search(src, np.array([0]), raw, np.array([0.0]))
    assert jump[0]


def test_learned_drift_of_velocity_features_counts_against_staying(tiny_model, jlpm_db):
    """lmm_drift: the stepped features' velocity columns drifting from the shown pose's make staying cost
    drift times their squared difference; the position columns never count."""
    from motionmatch.runtime import learned
    crowd = Crowd(jlpm_db, 1, CharacterSettings(mode="lmm", model=str(tiny_model)))
    src = crowd.learned
    kinds = {c.name: c.kind for c in jlpm_db.features.schema.channels}
    sl = jlpm_db.features.channel_slices
    velc = np.concatenate([np.arange(sl[n].start, sl[n].stop) for n, k in kinds.items() if k == "velocity"])
    assert sorted(np.flatnonzero(src.moving)) == sorted(velc) and not (src.moving & ~src.shown).any()
    raw = np.asarray(jlpm_db.features.raw[[4000]], dtype=np.float64)
    one = np.array([0])
    _, _, q = learned.search(src, one, raw, np.array([1e6]))
    src.x[0] = q[0]                                  # staying costs nothing
    src.x[0, src.shown & ~src.moving] += 50.0        # position drift: never counted
    jump, _, _ = learned.search(src, one, raw, np.array([0.0]), drift=np.array([1.0]))
    assert not jump[0]
    src.x[0, src.moving] += 50.0                     # velocity drift
    jump, cost, _ = learned.search(src, one, raw, np.array([0.0]), drift=np.array([0.0]))
    assert not jump[0]                               # not counted without a drift weight
    stay = 50.0 ** 2 * src.moving.sum()
    assert cost[0] < 0.5 * stay
    jump, _, _ = learned.search(src, one, raw, np.array([0.0]), drift=np.array([0.5]))
    assert jump[0]                                   # 0.5 x the drift is dearer than the projection


def test_learned_projection_pays_the_drift_of_its_own_pose(tiny_model, jlpm_db):
    """lmm_drift is charged to a projection too, measured between its features and its decompressed pose:
    a projection whose pose moves otherwise than its features say is no better than a drifted state
    (charged to staying only, a learned walk jumped back to the same gliding projection at every search)."""
    from motionmatch.lmm.model import pose_layout
    from motionmatch.runtime import learned
    crowd = Crowd(jlpm_db, 1, CharacterSettings(mode="lmm", model=str(tiny_model)))
    src = crowd.learned
    raw = np.asarray(jlpm_db.features.raw[[4000]], dtype=np.float64)
    one = np.array([0])
    _, _, q = learned.search(src, one, raw, np.array([1e6]))
    traj = ~src.shown
    x0 = q[0].copy()
    x0[traj] += 3.0                                  # staying misses the trajectory: the projection wins
    src.x[0] = x0
    jump, cost, _ = learned.search(src, one, raw, np.array([0.0]), drift=np.array([0.5]))
    assert jump[0]
    honest = cost[0]
    # The same projection, decompressed with joint velocities 100 m/s off what its features say.
    src.x[0] = x0
    vel = pose_layout(jlpm_db.num_joints)["velocities"]
    src.model.decompressor.out_mean[vel] += 100.0
    jump, cost, _ = learned.search(src, one, raw, np.array([0.0]), drift=np.array([0.0]))
    assert jump[0]                                   # without a drift weight the pose is not asked
    src.x[0] = x0
    jump, cost, _ = learned.search(src, one, raw, np.array([0.0]), drift=np.array([0.5]))
    assert not jump[0] and cost[0] > 100.0 * honest
    assert np.array_equal(src.x[0], x0)              # it stays on its stepped state


def test_learned_contacts_follow_the_decompressed_toes(tiny_model, jlpm_db, tmp_path):
    """A foot is in contact when its decompressed toe is near its floor and slower than the learned
    speed limit, whatever the decompressor's contact outputs say (here forced to 0)."""
    from motionmatch.lmm.model import pose_layout, save_model
    from motionmatch.motion.preprocess import CONTACT_HEIGHT
    from motionmatch.runtime import learned
    model = load_model(tiny_model)
    contacts = pose_layout(jlpm_db.num_joints)["contacts"]
    model.decompressor.out_mean[contacts] = 0.0
    model.decompressor.out_std[contacts] = 0.0
    dead = tmp_path / "dead_contacts.npz"
    save_model(model, dead)
    ch = Character(jlpm_db, CharacterSettings(mode="lmm", model=str(dead)))
    src = ch.crowd.learned
    J = jlpm_db.num_joints
    gp, gv, gw, gr = np.zeros((J, 3)), np.zeros((J, 3)), np.zeros((J, 3)), np.zeros((J, 4))
    seen = 0
    for inp in [GamepadInput(move=(0.0, 1.0))] * 120 + [GamepadInput()] * 60:
        ch.step(inp)
        learned.character_space(0, src.parents, *src.pose[:4], gp, gv, gw, gr)
        low = gp[src.toes, 1] - src.toe_floor < CONTACT_HEIGHT
        slow = np.linalg.norm(gv[src.toes], axis=1) < learned.LEARNED_TOE_SPEED
        np.testing.assert_array_equal(src.contacts[0], low & slow)
        seen += int(src.contacts[0].sum())
    # The feet plant on their own (11-30 foot-frames with this tiny model, depending on its training run);
    # with the outputs alone there would be none.
    assert seen > 0
    assert np.all(np.abs(src.toe_floor) < 0.05)      # jlpm22's toes rest at the ground


def test_learned_search_pushes_the_trajectory_past_the_first_projection(tiny_model, jlpm_db, tmp_path):
    """lmm_push k: the projector answers a second query whose trajectory columns are moved past its first
    answer by k times the shortfall (pose columns unchanged); the cost is measured against the query."""
    from motionmatch.lmm.model import save_model
    from motionmatch.runtime import learned
    # 300 iterations on 200 frames teach the tiny projector little more than the mean (its ReLUs are off
    # for queries outside them): random layers answer every query differently, which this test needs.
    model = load_model(tiny_model)
    rng = np.random.default_rng(0)
    net = model.projector
    net.weights = [rng.normal(size=w.shape).astype(np.float32) * np.float32(np.sqrt(2.0 / w.shape[0]))
                   for w in net.weights]
    net.biases = [np.full(b.shape, 0.1, np.float32) for b in net.biases]
    tiny_model = tmp_path / "random_projector.npz"
    save_model(model, tiny_model)
    crowd = Crowd(jlpm_db, 2, CharacterSettings(mode="lmm", model=str(tiny_model)))
    src, model = crowd.learned, load_model(tiny_model)
    traj = ~src.shown
    raw = np.asarray(jlpm_db.features.raw[[4000, 9000]], dtype=np.float64)
    agents, never = np.array([0, 1]), np.array([-1e6, -1e6])          # both jump: their projections are kept
    jump, cost, q = learned.search(src, agents, raw, never, np.array([0.0, 2.0]))
    assert jump.all()
    first = inference.evaluate(model.projector, q)
    pushed = q.copy()
    pushed[1, traj] += 2.0 * (q[1, traj] - first[1, :model.num_features][traj])
    want = inference.evaluate(model.projector, pushed)
    F = model.num_features
    np.testing.assert_allclose(src.x[0], first[0, :F], atol=1e-5)        # push 0: the single projection
    np.testing.assert_allclose(src.x[1], want[1, :F], atol=1e-5)         # push 2: the pushed query's projection
    np.testing.assert_allclose(src.z[1], want[1, F:], atol=1e-5)
    assert not np.allclose(src.x[1], first[1, :F], atol=1e-3)
    np.testing.assert_allclose(cost, ((q - src.x[:2]) ** 2).sum(axis=1), rtol=1e-5)
    # The crowd passes each agent's setting: the same walk, jumping at every search, differs with and
    # without the push.
    def walk(push):
        ch = Character(jlpm_db, CharacterSettings(mode="lmm", model=str(tiny_model), lmm_push=push, lmm_bias=-1000.0))
        for inp in [GamepadInput(move=(0.0, 1.0))] * 40:
            ch.step(inp)
        return ch.crowd.learned.x[0].copy()
    assert not np.allclose(walk(0.0), walk(2.0))
