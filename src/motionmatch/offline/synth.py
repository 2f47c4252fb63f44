"""Offline synthesis: run a scenario through a character and write motion.bvh, metrics.json and
trajectory.png. Deterministic: the same database, scenario and settings give the same output."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from ..motion.animation import Animation
from ..io.bvh import BVHWriter, write_bvh
from ..motion.idle import idle_figures
from ..motion.metrics import compute_metrics, source_foot_sliding_cm_s, toe_floor_m
from ..motion.posture import gait_figures, planted_toe_heights_cm, posture_figures, posture_joints, source_posture
from ..motion.preprocess import remove_simulation_bone
from ..runtime.character import Character, CharacterSettings
from ..runtime.controller import GamepadInput
from ..runtime.requests import RequestError
from .scenario import Scenario, load_scenario, parse_scenario, random_scenario
from ..motion.skeleton import shoulder_joints
from ..motion.styles import clip_styles, style_figures
from ..world.terrain import Heightfield
from ..io.bvh import read_bvh
from ..motion.retarget import retarget_animation
from ..search import range_mask
from ..world.obstacles import penetration


POSE_CHUNK = 1024  # frames of poses buffered between hand-offs to a pose sink


def run_scenario(db, scenario: Scenario, settings: CharacterSettings | None = None, progress: bool = False,
                 terrain=None, pose_sink=None, controller_settings=None, driver=None, start=None,
                 touch_up=None) -> dict:
    """Simulate a scenario at the database rate; returns a record of per-frame arrays.

    The record always holds the light per-frame arrays the metrics need (root and simulation
    positions, yaws, velocities, timings, `toe_positions` (F, 2, 3) m, `posture_positions` (F, K, 3) m of
    posture.POSTURE_ROLES, `nan` (F,) bool). Poses: with
    pose_sink None the record also holds `global_positions`, `local_pos` and `local_rot` (F, J, ...);
    otherwise pose_sink(local_pos (n, J, 3), local_rot (n, J, 4)) receives them in order, in chunks of
    POSE_CHUNK frames, and they are not kept: memory stays flat in the run's length.
    controller_settings: the character's ControllerSettings (None: defaults). driver: drives the
    controller instead of the scenario's (Character.set_driver); start: (position (3,), yaw) to start
    from; touch_up(character, k, local_pos, local_rot) -> (local_pos, local_rot, global_positions):
    a last change of frame k's output pose (it may move the character's root), recorded in its place.
    """
    from tqdm import tqdm

    settings = settings or CharacterSettings()
    if scenario.style:
        settings.tag_filter = scenario.style
    ch = Character(db, settings, controller_settings)
    if terrain is not None:
        ch.set_terrain(terrain)
    if scenario.obstacles is not None:
        ch.set_obstacles(scenario.obstacles)
    if start is not None:
        ch.reset(position=start[0], yaw=start[1])
    ch.set_driver(driver if driver is not None else scenario.make_driver())
    fps = db.fps
    dt = 1.0 / fps
    F = int(round(scenario.duration * fps))
    J = db.num_joints
    toe_joints = [db.roles["left_toe"], db.roles["right_toe"]]
    # hips then shoulders: the twist and shoulder-facing metrics need only these four joints per frame
    body_joints = [db.roles["left_upper_leg"], db.roles["right_upper_leg"],
                   *shoulder_joints(db.skeleton.parents, db.roles)]
    posture = posture_joints(db.roles)
    rec = {k: np.zeros((F, 3)) for k in ("root_pos", "sim_pos", "desired_vel", "root_vel")}
    rec.update(root_yaw=np.zeros(F), sim_yaw=np.zeros(F), desired_yaw=np.zeros(F), frame_us=np.zeros(F),
               frames=np.zeros(F, dtype=np.int64), contacts=np.zeros((F, 2), dtype=bool),
               locked=np.zeros((F, 2), dtype=bool), timing=np.zeros((F, 4)),
               toe_positions=np.zeros((F, 2, 3)), body_positions=np.zeros((F, 4, 3)),
               posture_positions=np.zeros((F, len(posture), 3)),
               nan=np.zeros(F, dtype=bool))
    if pose_sink is None:
        rec.update(global_positions=np.zeros((F, J, 3)), local_pos=np.zeros((F, J, 3)),
                   local_rot=np.zeros((F, J, 4)))
        lp_out, lr_out, base = rec["local_pos"], rec["local_rot"], 0
    else:
        lp_out, lr_out = np.zeros((min(F, POSE_CHUNK), J, 3)), np.zeros((min(F, POSE_CHUNK), J, 4))
    searches, search_calls, transitions_at = [], [], []
    issue = request_player(ch, scenario)
    for k in tqdm(range(F), desc="synthesizing", unit="frame", disable=not progress, file=sys.stderr):
        issue(k * dt)
        before = ch.transitions
        ch.step(None, dt)
        lp, lr = ch.local_pose()
        gp = ch.global_positions
        if touch_up is not None:
            lp, lr, gp = touch_up(ch, k, lp, lr)
        if ch.t_search_us > 0:
            searches.append(ch.t_search_us)
            search_calls.append(ch.t_search_calls_us)
        if ch.transitions != before:
            transitions_at.append(k)
        rec["root_pos"][k] = ch.root_pos
        rec["sim_pos"][k] = ch.controller.position
        rec["root_yaw"][k] = ch.facing_yaw       # displayed facing: root yaw + orientation warp
        rec["sim_yaw"][k] = ch.controller.yaw
        rec["desired_yaw"][k] = ch.controller.desired_yaw
        rec["desired_vel"][k] = ch.controller.desired_velocity
        rec["root_vel"][k] = ch.root_velocity
        rec["frame_us"][k] = ch.last_frame_us
        rec["timing"][k] = (ch.t_controller_us, ch.t_search_us, ch.t_inertialize_us, ch.t_output_us)
        rec["toe_positions"][k] = gp[toe_joints]
        rec["body_positions"][k] = gp[body_joints]
        rec["posture_positions"][k] = gp[posture]
        rec["nan"][k] = not np.isfinite(gp).all()
        if pose_sink is None:
            rec["global_positions"][k] = gp
        else:
            base = k - k % POSE_CHUNK
        lp_out[k - base], lr_out[k - base] = lp, lr
        if pose_sink is not None and (k - base == len(lp_out) - 1 or k == F - 1):
            pose_sink(lp_out[:k - base + 1], lr_out[:k - base + 1])
        rec["frames"][k] = ch.frame
        rec["contacts"][k] = ch.contacts
        rec["locked"][k] = ch.locked
    rec["requests"] = list(ch.request_log)
    rec["search_us"] = np.array(searches)
    rec["search_calls_us"] = np.array(search_calls)     # of search_us: the searcher's calls (the kernel)
    rec["transitions"] = ch.transitions
    rec["transition_frames"] = np.array(transitions_at, dtype=np.int64)
    rec["toe_joints"] = toe_joints
    if terrain is not None:
        toes = rec["toe_positions"]
        rec["toe_ground"] = [terrain.height(toes[:, i, 0], toes[:, i, 2]) for i in range(2)]
        rec["toe_floor_m"] = toe_floor_m(db)
    rec["character"] = ch
    return rec


def appearance_metrics(db, rec: dict) -> dict:
    """"posture", "posture_source", "posture_gait", "style" and "idle" of metrics.json (README, section "Metrics") from a
    run record (run_scenario's light per-frame arrays) on database `db`."""
    toes = [rec["toe_positions"][:, i] for i in range(2)]
    root_speed = np.linalg.norm(rec["root_vel"][:, [0, 2]], axis=1)
    source = source_posture(db)
    return {"posture": posture_figures(rec["posture_positions"], root_speed,
                                       planted_toe_heights_cm(toes, db.fps, rec.get("toe_ground")), source["bounds"]),
            "posture_source": dict(source["figures"]),
            "posture_gait": gait_figures(rec["posture_positions"], rec["root_vel"], source["gaits"]),
            "style": style_figures(rec["frames"], db.range_stops, clip_styles(db.range_tags, db.style_tags), db.fps),
            "idle": idle_figures(rec["desired_vel"], rec["desired_yaw"], rec["root_vel"], rec["root_pos"],
                                 rec["posture_positions"], db.fps)}


def request_player(ch: Character, scenario: Scenario):
    """issue(t): hand the character the scenario's requests due by time t (s); a stop request ends at the next
    input change after it. Every request is checked against the database first (RequestError naming it)."""
    steps = list(scenario.requests)
    for n, (t, r) in enumerate(steps):
        try:
            if "action" in r:               # stops work on any database (requests.Requests.stop_at)
                ch.crowd.requests.event_column(r["action"])
        except RequestError as e:
            raise RequestError(f"requests[{n}] (t={t:g}): {e}") from None
    changes = [c for c in scenario.change_times if c > 0.0]
    state = {"next": 0, "stop_from": None}

    def issue(t: float) -> None:
        start = state["stop_from"]
        if start is not None and any(start < c <= t + 1e-9 for c in changes):
            ch.cancel_request()
            state["stop_from"] = None
        while state["next"] < len(steps) and steps[state["next"]][0] <= t + 1e-9:
            tr, r = steps[state["next"]]
            state["next"] += 1
            if "action" in r:
                ch.request_action(r["action"], r["event_in"] - (t - tr))
                state["stop_from"] = None
            elif "set" in r:
                ch.use_set(scenario.sets[r["set"]], r["interrupt"])
            elif "plant_at" in r:
                ch.request_plant_at(r["plant_at"], r["side"])
                state["stop_from"] = tr
            else:
                ch.request_stop_at(r["stop_at"])
                state["stop_from"] = tr
    return issue


def change_frames(scenario: Scenario, fps: float) -> list[int]:
    """Frames at which a scripted input changes (none for path scenarios)."""
    if scenario.is_path:
        return []
    # Starting from a standstill counts as a change when the first input asks to move.
    return [int(round(t * fps)) for t in scenario.change_times
            if t > 0 or scenario.input_at(0.0) != GamepadInput()]


def record_animation(db, rec: dict) -> Animation:
    """The synthesized motion as an Animation on the database's source skeleton."""
    skel, pos, rot = remove_simulation_bone(db.skeleton, rec["local_pos"], rec["local_rot"])
    return Animation(skeleton=skel, positions=pos, rotations=rot, fps=db.fps)


def draw_obstacles(ax, obstacles) -> None:
    """Obstacles (obstacles.Obstacles) as grey shapes on a top-view matplotlib axis (x right, z up)."""
    from matplotlib.patches import Circle, Rectangle
    for (x, z), r in zip(obstacles.centers, obstacles.radii):
        ax.add_patch(Circle((x, z), r, color="0.55", alpha=0.6, zorder=0.5))
    for a, b in zip(obstacles.box_min, obstacles.box_max):
        ax.add_patch(Rectangle((a[0], a[1]), b[0] - a[0], b[1] - a[1], color="0.55", alpha=0.6, zorder=0.5))


def plot_trajectory(path, rec: dict, scenario: Scenario, fps: float) -> None:
    """Top view: desired path, simulation and character root paths, transition markers."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 7), dpi=110)
    if scenario.is_path:
        pts = np.array(scenario.path.points, dtype=float)
        if scenario.path.loop:
            pts = np.vstack([pts, pts[:1]])
        ax.plot(pts[:, 0], pts[:, 1], "-", color="0.75", lw=6, label="desired path", zorder=1)
    else:
        ideal = np.cumsum(rec["desired_vel"], axis=0) / fps
        ax.plot(ideal[:, 0], ideal[:, 2], "-", color="0.75", lw=6, label="desired (integrated input)", zorder=1)
    if scenario.obstacles is not None:
        draw_obstacles(ax, scenario.obstacles)
    ax.plot(rec["sim_pos"][:, 0], rec["sim_pos"][:, 2], "-", color="tab:blue", lw=1.5, label="simulation", zorder=2)
    ax.plot(rec["root_pos"][:, 0], rec["root_pos"][:, 2], "-", color="tab:orange", lw=1.5, label="character root", zorder=3)
    tf = rec["transition_frames"]
    if len(tf):
        ax.scatter(rec["root_pos"][tf, 0], rec["root_pos"][tf, 2], s=12, color="tab:red", label="transitions", zorder=4)
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xlabel("x (m, right)")
    ax.set_ylabel("z (m, forward)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    ax.set_title(f"{len(rec['root_pos']) / fps:.1f} s, {rec['transitions']} transitions")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def synthesize(db, scenario, out_dir, settings: CharacterSettings | None = None, progress: bool = True,
               retarget_to=None, retarget_map=None, controller_settings=None, **drive) -> dict:
    """Run `scenario` (path, dict or Scenario) and write out_dir/motion.bvh, metrics.json and
    trajectory.png; returns the metrics. Frames go to the BVH as they are produced (except with
    retarget_to), so memory does not grow with the scenario's duration beyond a few small per-frame
    arrays the metrics need. drive: run_scenario's driver, start and touch_up (vr/synth.py)."""
    if isinstance(scenario, (str, Path)):
        scenario = load_scenario(scenario)
    elif isinstance(scenario, dict):
        scenario = parse_scenario(scenario)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    terrain = None
    if getattr(scenario, "terrain", None):
        terrain = Heightfield.from_spec(scenario.terrain)
    if retarget_to:
        # Retargeting fits the whole motion (bind frame, ground height): it needs all of it at once.
        rec = run_scenario(db, scenario, settings, progress, terrain, controller_settings=controller_settings,
                           **drive)
        anim = retarget_animation(record_animation(db, rec), read_bvh(retarget_to), mapping=retarget_map,
                                  source_bind_frame=0)
        write_bvh(out / "motion.bvh", anim)
    else:
        skel = remove_simulation_bone(db.skeleton, np.zeros((0, db.num_joints, 3)),
                                      np.zeros((0, db.num_joints, 4)))[0]
        with BVHWriter(out / "motion.bvh", skel, db.fps, int(round(scenario.duration * db.fps))) as bvh:
            def write_poses(lp, lr):
                bvh.write(*remove_simulation_bone(db.skeleton, lp, lr)[1:])
            rec = run_scenario(db, scenario, settings, progress, terrain, pose_sink=write_poses,
                               controller_settings=controller_settings, **drive)
    allowed = None
    if scenario.style:
        allowed = np.flatnonzero(range_mask(scenario.style, db.range_tags))
    src = source_foot_sliding_cm_s(db, allowed_ranges=allowed)
    metrics = compute_metrics(rec, db.fps, src, change_frames(scenario, db.fps))
    metrics.update(appearance_metrics(db, rec))
    if scenario.obstacles is not None:
        metrics["obstacle_penetration_cm"] = penetration(scenario.obstacles, rec["root_pos"][:, [0, 2]], db.fps)
    if terrain is not None:
        terrain.save(out / "terrain.npy")
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1))
    plot_trajectory(out / "trajectory.png", rec, scenario, db.fps)
    return metrics


def recorded_queries(db, n: int, seed: int = 0, settings: CharacterSettings | None = None):
    """Real queries: the normalized query vectors and current frames of a character driven by random
    input (walk, run, turns, stops) until `n` searches happened. Returns (queries (n,F) float32,
    current (n,) int32)."""
    ch = Character(db, settings or CharacterSettings(foot_locking=False))
    ch.set_driver(random_scenario(max(10.0, n * 0.12), seed=seed).make_driver())
    qs, cur = [], []
    dt = 1.0 / db.fps
    while len(qs) < n:
        frame = ch.frame            # the frame playing when this step searches
        ch.step(None, dt)
        if ch.t_search_us > 0:
            qs.append(ch.last_query.copy())
            cur.append(frame)
    return np.asarray(qs, dtype=np.float32), np.asarray(cur, dtype=np.int32)
