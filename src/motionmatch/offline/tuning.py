"""`motionmatch tune`: search the character's settings against the quality metrics (Optuna), trials
spread over the distributed engine (offline/cluster.py). See docs/tuning.md.

Five figures per trial, each a mean over the tuning scenarios (quality.scenario_metrics):
  responsiveness_s      seconds until the root follows an input change (scenarios with changes)
  trajectory_cm         mean root-to-simulation distance
  sliding_ratio         foot sliding / the source's foot sliding
  pops_ratio            joint acceleration p99 over transitions / the source's p99
  tracking_miss         1 - mean of the velocity and facing tracking fractions

The study minimizes responsiveness under constraints (Optuna's constrained TPE): trial 0 is the
starting settings (the runtime's defaults, or --settings) and runs first; every later trial must be
no worse than trial 0 on the mean trajectory, sliding, pops and tracking (GUARDED), and on no single
scenario worse than trial 0 by more than SCENARIO_TOLERANCE on trajectory, sliding or pops
(SCENARIO_GUARDED), nor facing the look for a shorter share of the held time by more than
SCENARIO_HELD: a mean can hide one gait getting much worse, which is how a pick that was no worse
on the tuning mean slid more on validation. Nor may it look worse than trial 0 on any scenario beyond a
small tolerance (SCENARIO_LOOK, SCENARIO_HELD): knees further from the main actor's angle, planted toes
further from the actor's height, more frames outside the actor's posture range, more style switches,
slower settling, a less alive or shorter-looping idle (look_summary). The pick: the most responsive trial that meets every
constraint, if it is more responsive than trial 0; otherwise trial 0. The five figures are kept with
each trial, so the Pareto front over them is still plotted.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..motion.idle import MAX_LOOP_S
from .quality import run_on_worker
from ..runtime.settings_schema import SETTINGS, setting
from ..runtime.settings_file import RuntimeSettings, settings_to_dict
from .cluster import worker_count

OBJECTIVES = ("responsiveness_s", "trajectory_cm", "sliding_ratio", "pops_ratio", "tracking_miss")
GUARDED = ("trajectory_cm", "sliding_ratio", "pops_ratio", "tracking_miss")
SLACK = 0.005       # "no worse" on a mean: the metrics are rounded to 3 decimals
# Per scenario: at most 15 % worse, plus an absolute allowance for near-zero baselines; pops up to
# the source's own p99 (ratio 1) always pass.
SCENARIO_GUARDED = {"trajectory_cm": 0.3, "sliding_cm_s": 0.3, "pops_ratio": 0.05}
SCENARIO_TOLERANCE = 0.15
SCENARIO_FLOOR = {"pops_ratio": 1.0}
# How the output looks (README "Metrics": posture, style, idle; scenario_summary), lower is better: on no
# scenario worse than the base by more than these absolute tolerances, so a trial cannot buy
# responsiveness with the elderly clips' bent knees, hovering feet or style flicker. The tolerances: the
# largest change of each figure under a settings change too small to see (halflife x1.05 on walk,
# strafe, walk_backward, idle, default database: knee 1.1 deg, toe 0.33 cm, outside 0.006, settle
# 0.03 s, alive 0.45 cm/s, loop 0.02 s), with a margin; one style switch more in a 10 s run is 6/min.
# knee_gap_deg and outside_gait compare with the actor at the output's gaits (posture_gait); outside_gait's
# tolerance is outside_source's.
SCENARIO_LOOK = {"knee_gap_deg": 1.5, "toe_gap_cm": 0.5, "outside_source": 0.02, "outside_gait": 0.02,
                 "style_switches_per_min": 6.0, "idle_settle_s": 0.1}
IDLE_ALIVE_DROP = 1.0     # cm/s
IDLE_LOOP_DROP = 0.2      # s; no loop counts as idle.MAX_LOOP_S
LOOK_KEYS = (*SCENARIO_LOOK, "idle_alive_cm_s", "idle_loop_s")
# Held-time fractions and idle figures, higher is better: on no scenario more than this below the base. Facing:
# trials that weigh the trajectory's position over its direction answered the stick sooner but faced
# away from the look on diagonal strafes (0.99 -> 0.84 of the held time).
SCENARIO_HELD = {"facing_ok": 0.03, "idle_alive_cm_s": IDLE_ALIVE_DROP, "idle_loop_s": IDLE_LOOP_DROP}
STUDY_NAME = "motionmatch-tune"


@dataclass(frozen=True)
class Param:
    """One searched setting: `table.key` of a settings file, a range and a log scale, or `choices`
    (categorical). Table "weights" is a feature channel weight group: the value goes to
    [character.weights] for each of `channels` (left and right of a pair move together)."""
    table: str
    key: str
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    choices: tuple = ()
    channels: tuple = ()

    @property
    def name(self) -> str:
        return f"{self.table}.{self.key}"


# Feature channel weights, searched per group (left and right together) where the database has the
# channels, in the range of the schema's weights row.
WEIGHT_GROUPS = {
    "foot_position": ("left_foot_position", "right_foot_position"),
    "foot_velocity": ("left_foot_velocity", "right_foot_velocity"),
    "hips_velocity": ("hips_velocity",),
    "trajectory_position": ("trajectory_position",),
    "trajectory_direction": ("trajectory_direction",),
}


def search_space(channels=()) -> list[Param]:
    """The searched settings: every row of the settings schema with a `tune` range (the settings that move
    responsiveness: how fast the simulation follows the stick, how soon and how readily the matcher leaves
    the playing clip, how hard the root is pulled to the simulation, and the foot lock, which pays for a
    quicker root in foot sliding), and a weight group for each of WEIGHT_GROUPS whose channels are all
    among `channels` (the database's)."""
    space = [Param(s.table, s.key, s.tune.low, s.tune.high, s.tune.log, s.tune.choices)
             for s in SETTINGS if s.tune is not None and s.table != "weights"]
    w = setting("weights", "*").tune
    return space + [Param("weights", g, w.low, w.high, w.log, channels=chs)
                    for g, chs in WEIGHT_GROUPS.items() if set(chs) <= set(channels)]


def restrict(space: list[Param], only) -> list[Param]:
    """The part of `space` that `only` names: tables ("weights", "character", "controller") or searched
    keys ("bias", "foot_position"); the rest stays at the starting settings. None or empty: all of it.
    ValueError listing the valid names when one is not searched here."""
    if not only:
        return list(space)
    valid = list(dict.fromkeys([p.table for p in space] + [p.key for p in space]))
    unknown = [n for n in only if n not in valid]
    if unknown:
        raise ValueError(f"--only: not searched here: {', '.join(unknown)}; valid names: {', '.join(valid)}")
    return [p for p in space if p.table in only or p.key in only]


def default_params(space: list[Param], defaults: RuntimeSettings, schema_weights: dict | None = None) -> dict:
    """The defaults as trial parameters (clipped into the searched ranges). A weight group's default
    is its first channel's weight in the settings, else in `schema_weights` (the database's)."""
    tables = settings_to_dict(*defaults)
    out = {}
    for p in space:
        if p.table == "weights":
            ch = p.channels[0]
            v = tables["character"]["weights"].get(ch, (schema_weights or {}).get(ch, 1.0))
        else:
            v = tables[p.table][p.key]
        out[p.name] = v if p.choices else float(min(max(v, p.low), p.high))
    return out


def suggest(trial, space: list[Param], base: dict) -> dict:
    """Settings-file tables for one trial: `base` (tables of the starting settings) with the trial's
    values."""
    tables = copy.deepcopy(base)
    for p in space:
        if p.choices:
            v = trial.suggest_categorical(p.name, list(p.choices))
        else:
            v = trial.suggest_float(p.name, p.low, p.high, log=p.log)
        if p.table == "weights":
            weights = tables.setdefault("character", {}).setdefault("weights", {})
            weights.update({ch: v for ch in p.channels})
        else:
            tables.setdefault(p.table, {})[p.key] = v
    return tables


def objectives(rows: dict) -> dict:
    """The five objectives from {scenario: metrics} (see the module docstring)."""
    def mean(xs):
        xs = [x for x in xs if x is not None]
        return float(np.mean(xs)) if xs else 0.0
    ms = list(rows.values())
    return {
        "responsiveness_s": mean([m["responsiveness_s"] for m in ms]),
        "trajectory_cm": mean([m["trajectory_error_cm"]["mean"] for m in ms]),
        "sliding_ratio": mean([m["foot_sliding_cm_s"] / max(m["foot_sliding_source_cm_s"], 1e-6) for m in ms]),
        "pops_ratio": mean([m["pops"]["ratio"] for m in ms]),
        "tracking_miss": mean([None if not m.get("tracking") else
                               1.0 - 0.5 * (m["tracking"]["velocity"]["mean"] + m["tracking"]["facing"]["mean"])
                               for m in ms]),
    }


def evaluate_trial(db_path: str, scenario_paths: list[str], tables: dict) -> dict:
    """A trial on an engine worker: {scenario: metrics} of every scenario under the settings.
    Non-finite output (NaN joints) is an error: such settings are recorded as a failed trial."""
    rows = {}
    for p in scenario_paths:
        m = run_on_worker(db_path, p, tables)
        if m["nan_frames"]:
            raise ValueError(f"{Path(p).name}: {m['nan_frames']} frames with non-finite joint positions")
        rows[Path(p).stem] = m
    return rows


def open_study(path, seed: int = 0):
    """The Optuna study kept in a journal file (created, or resumed when it exists): responsiveness
    minimized under constraints (constrained TPE; constant liar so parallel trials spread out)."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    storage = JournalStorage(JournalFileBackend(str(path)))
    sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True, n_startup_trials=16)
    return optuna.create_study(study_name=STUDY_NAME, storage=storage, sampler=sampler, load_if_exists=True,
                               direction="minimize")


def constraints(obj: dict, rows: dict, base_obj: dict, base_rows: dict) -> dict:
    """{name: relative excess} of a trial (objectives `obj`, per-scenario summaries `rows`) over the
    starting settings' (`base_obj`, `base_rows`); feasible when every value is <= 0. Means: no worse
    than the base (SLACK); scenarios: at most SCENARIO_TOLERANCE worse (plus SCENARIO_GUARDED), or
    up to SCENARIO_FLOOR, and held fractions at most SCENARIO_HELD below the base."""
    out = {}
    for k in GUARDED:
        limit = base_obj[k] + SLACK
        out[k] = (obj[k] - limit) / max(limit, 1e-6)
    for k, slack in SCENARIO_GUARDED.items():
        worst = -1.0
        for name, r in rows.items():
            b = base_rows.get(name, {}).get(k)
            if b is not None and r.get(k) is not None:
                limit = max(b * (1.0 + SCENARIO_TOLERANCE) + slack, SCENARIO_FLOOR.get(k, 0.0))
                worst = max(worst, (r[k] - limit) / limit)
        out[f"{k}_per_scenario"] = worst
    for k, tol in SCENARIO_LOOK.items():
        worst = -1.0
        for name, r in rows.items():
            b = base_rows.get(name, {}).get(k)
            if b is not None and r.get(k) is not None:
                limit = b + tol
                worst = max(worst, (r[k] - limit) / limit)
        out[f"{k}_per_scenario"] = worst
    for k, drop in SCENARIO_HELD.items():
        worst = -1.0
        for name, r in rows.items():
            b = base_rows.get(name, {}).get(k)
            if b is not None and r.get(k) is not None:
                limit = max(b - drop, 1e-6)
                worst = max(worst, (limit - r[k]) / limit)
        out[f"{k}_per_scenario"] = worst
    return out


def feasible(trial, defaults) -> bool:
    """Whether a completed trial meets every constraint against the defaults trial."""
    c = constraints(trial.user_attrs["objectives"], trial.user_attrs["scenarios"],
                    defaults.user_attrs["objectives"], defaults.user_attrs["scenarios"])
    return all(v <= 0.0 for v in c.values())


def run_study(study, space: list[Param], base: dict, db_path, scenario_paths: list[Path], trials: int, client,
              defaults_params: dict, log=print, evaluate=evaluate_trial) -> None:
    """Run trials until the study holds `trials` finished ones, as many at a time as the cluster
    has workers (trial 0, the starting settings, alone first: the others' constraints need it).
    A trial that raises or loses its worker is recorded as failed (its error in the user attribute
    `error`) and the study goes on. Trials left running by an interrupted run are marked failed. A lost
    defaults trial (its worker died, or the run was interrupted) is asked again: without it no trial
    could be picked, so a dead worker costs its trial, never the study."""
    from dask.distributed import as_completed
    from optuna.trial import TrialState


    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study.tell(t.number, state=TrialState.FAIL)
    if not study.trials:
        study.enqueue_trial(defaults_params, user_attrs={"defaults": True})
    done = sum(t.state.is_finished() for t in study.get_trials(deepcopy=False))
    if requeue_lost_defaults(study, defaults_params):
        trials = max(trials, done + 1)      # the lost one is not counted against the study
    first, asked = done, done
    slots = worker_count(client)
    scen = [str(p) for p in scenario_paths]
    running = {}
    pool = as_completed()
    started = time.perf_counter()

    def base_trial():
        """The defaults trial: None while it has still to finish (asked or queued), False if it failed."""
        ts = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("defaults")]
        done = next((t for t in ts if t.state == TrialState.COMPLETE), None)
        if done is not None:
            return done
        return None if not ts or any(not t.state.is_finished() for t in ts) else False

    def fill():
        nonlocal asked
        while asked < trials and len(running) < slots and (not running or base_trial() is not None):
            trial = study.ask()
            fut = client.submit(evaluate, str(db_path), scen, suggest(trial, space, base), pure=False)
            running[fut.key] = trial
            pool.add(fut)
            asked += 1

    fill()
    for fut in pool:
        trial = running.pop(fut.key)
        try:
            rows = fut.result()
            obj = objectives(rows)
            summaries = {k: scenario_summary(m) for k, m in rows.items()}
            trial.set_user_attr("scenarios", summaries)
            trial.set_user_attr("objectives", obj)
            bt = None if trial.user_attrs.get("defaults") else base_trial()
            cons = (constraints(obj, summaries, bt.user_attrs["objectives"], bt.user_attrs["scenarios"]) if bt
                    else {k: 0.0 for k in constraints(obj, summaries, obj, summaries)})
            for k, v in cons.items():      # feasible when <= 0
                trial.set_constraint(k, v)
            study.tell(trial, obj["responsiveness_s"])
            what = " ".join(f"{k}={v:.3g}" for k, v in obj.items())
            what += "" if all(v <= 0 for v in cons.values()) else "  (infeasible: " + ", ".join(
                k for k, v in cons.items() if v > 0) + ")"
        except Exception as e:  # noqa: BLE001 - any failure of a trial is recorded, the study goes on
            trial.set_user_attr("error", f"{type(e).__name__}: {e}"[:500])
            study.tell(trial, state=TrialState.FAIL)
            what = f"FAILED ({type(e).__name__}: {str(e)[:120]})"
            if trial.user_attrs.get("defaults") and requeue_lost_defaults(study, defaults_params):
                trials += 1                 # the lost one is not counted against the study
                what += "; the defaults trial is asked again"
        done += 1
        rate = (done - first) / max((time.perf_counter() - started) / 60.0, 1e-9)
        log(f"trial {trial.number}: {what}  [{done}/{trials}, {rate:.1f} trials/min]")
        fill()


def lost(trial) -> bool:
    """Whether a failed trial lost its run rather than failed on its settings: its worker died
    (KilledWorker) or the tune running it stopped (failed with no error recorded)."""
    from optuna.trial import TrialState
    error = trial.user_attrs.get("error")
    return trial.state == TrialState.FAIL and (error is None or error.startswith("KilledWorker"))


def requeue_lost_defaults(study, defaults_params: dict) -> bool:
    """Queue the defaults trial again when every one asked so far was lost (see lost); True if queued.
    One that failed on its settings is not asked again: it would fail again."""
    from optuna.trial import TrialState
    ts = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("defaults")]
    if not ts or any(t.state == TrialState.COMPLETE or not t.state.is_finished() for t in ts) or not lost(ts[-1]):
        return False
    study.enqueue_trial(defaults_params, user_attrs={"defaults": True})
    return True


def scenario_summary(m: dict) -> dict:
    """The per-scenario figures kept with a trial (for the constraints and the table)."""
    tr = m.get("tracking") or {}
    return {"responsiveness_s": m["responsiveness_s"], "trajectory_cm": m["trajectory_error_cm"]["mean"],
            "sliding_cm_s": m["foot_sliding_cm_s"], "source_sliding_cm_s": m["foot_sliding_source_cm_s"],
            "pops_ratio": m["pops"]["ratio"],
            "velocity_ok": tr.get("velocity", {}).get("mean"), "facing_ok": tr.get("facing", {}).get("mean"),
            **look_summary(m)}


def look_summary(m: dict) -> dict:
    """The appearance figures a trial keeps per scenario (None where a run has none): the posture's
    distance from the main actor's (`knee_gap_deg`: from the actor's at the same gaits, posture_gait;
    `toe_gap_cm`: absolute differences), `outside_source`, `outside_gait` (posture_gait's),
    `style_switches_per_min`, and over the idle stretches the slowest settle, the least alive stand and
    the shortest pose loop (`idle_loop_s`; a stretch without a loop counts as idle.MAX_LOOP_S)."""

    def gap(k):
        a, b = m["posture"][k], m["posture_source"][k]
        return None if a is None or b is None else round(abs(a - b), 3)

    idle = m["idle"]
    alive = [e["alive_cm_s"] for e in idle if e["alive_cm_s"] is not None]
    loops = [MAX_LOOP_S if e["shortest_loop_s"] is None else e["shortest_loop_s"]
             for e in idle if e["alive_cm_s"] is not None]
    gait = m.get("posture_gait") or {}
    knee_gap = gait.get("knee_gap_deg")
    return {"knee_gap_deg": gap("knee_deg") if "knee_gap_deg" not in gait else
            None if knee_gap is None else round(abs(knee_gap), 3),
            "toe_gap_cm": gap("planted_toe_cm"),
            "outside_source": m["posture"]["outside_source"], "outside_gait": gait.get("outside_source"),
            "style_switches_per_min": m["style"]["switches_per_min"],
            "idle_settle_s": max((e["settle_s"] for e in idle), default=None),
            "idle_alive_cm_s": min(alive, default=None), "idle_loop_s": min(loops, default=None)}


def pick(study):
    """(chosen trial, defaults trial): see the module docstring for the rule."""
    from optuna.trial import TrialState
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    defaults = next((t for t in complete if t.user_attrs.get("defaults")), None)
    if defaults is None:
        raise ValueError("the study has no completed defaults trial (trial 0); run more trials")
    best = min((t for t in complete if feasible(t, defaults)), key=lambda t: t.value, default=defaults)
    return (best if best.value < defaults.value else defaults), defaults


def pareto_front(values: np.ndarray) -> np.ndarray:
    """Bool (N,): the rows of `values` (N, K), all minimized, that no other row dominates."""
    v = np.asarray(values, dtype=np.float64)
    no_worse = (v[:, None, :] >= v[None, :, :]).all(axis=2)       # [i, j]: j no worse than i everywhere
    better = (v[:, None, :] > v[None, :, :]).any(axis=2)          # [i, j]: j better somewhere
    return ~(no_worse & better).any(axis=1)


def trial_tables(trial, space: list[Param], base: dict) -> dict:
    """Settings-file tables of a finished trial's parameters."""
    class _Fixed:
        def suggest_float(self, name, low, high, log=False):
            return trial.params[name]

        def suggest_categorical(self, name, choices):
            return trial.params[name]
    return suggest(_Fixed(), space, base)


def plot_pareto(path, study, chosen, defaults) -> None:
    """Responsiveness against each other figure: every trial, the Pareto front of the feasible trials
    (all five figures), defaults, chosen."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    vals = np.array([[t.user_attrs["objectives"][k] for k in OBJECTIVES] for t in trials])
    ok = np.array([feasible(t, defaults) for t in trials])
    on = np.zeros(len(trials), dtype=bool)
    on[np.flatnonzero(ok)] = pareto_front(vals[ok])
    d, c = ([t.user_attrs["objectives"][k] for k in OBJECTIVES] for t in (defaults, chosen))
    fig, axes = plt.subplots(2, 2, figsize=(10, 8), dpi=100)
    for ax, k in zip(axes.ravel(), OBJECTIVES[1:]):
        j = OBJECTIVES.index(k)
        ax.scatter(vals[~ok, 0], vals[~ok, j], s=8, color="0.8", label="infeasible trials")
        ax.scatter(vals[ok & ~on, 0], vals[ok & ~on, j], s=10, color="0.5", label="feasible trials")
        ax.scatter(vals[on, 0], vals[on, j], s=18, color="tab:blue", label="feasible Pareto front (5 figures)")
        ax.scatter([d[0]], [d[j]], s=120, marker="*", color="tab:red", label="defaults")
        ax.scatter([c[0]], [c[j]], s=120, marker="*", color="tab:green", label="chosen")
        ax.set_xlabel("responsiveness (s)")
        ax.set_ylabel(k)
        ax.grid(True, alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(f"{len(trials)} completed trials, {int(ok.sum())} feasible")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def compare_table(before: dict, after: dict, title: str) -> list[str]:
    """Markdown rows: per scenario, defaults -> chosen for each figure; then the means."""
    keys = ("responsiveness_s", "trajectory_cm", "sliding_cm_s", "pops_ratio", "velocity_ok", "facing_ok",
            *LOOK_KEYS)
    lines = [f"### {title}", "", "| scenario | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]

    def cell(a, b):
        return "-" if a is None or b is None else f"{a:.3g} -> {b:.3g}"
    for name in before:
        lines.append(f"| {name} | " + " | ".join(cell(before[name].get(k), after[name].get(k)) for k in keys) + " |")
    means = []
    for k in keys:
        pairs = [(before[n][k], after[n][k]) for n in before if before[n].get(k) is not None and after[n].get(k) is not None]
        means.append(cell(*np.mean(pairs, axis=0)) if pairs else "-")
    lines.append("| **mean** | " + " | ".join(means) + " |")
    return lines + [""]


def compare_runs(before: dict, after: dict, title: str) -> tuple[bool, list[str]]:
    """(verdict, markdown lines) of two {scenario: metrics} runs of the same scenarios: the table of
    compare_table and the verdict of better_on."""
    b, a = ({k: scenario_summary(m) for k, m in rows.items()} for rows in (before, after))
    verdict, why = better_on(b, a)
    return verdict, compare_table(b, a, title) + [f"Better: {'yes' if verdict else 'no'} ({why}).", ""]


def better_on(before: dict, after: dict) -> tuple[bool, str]:
    """Whether `after` beats `before` on a scenario set: lower mean responsiveness, no worse (within
    SLACK, the rounding) mean trajectory error, foot sliding and pops, and no worse appearance means
    (within the per-scenario tolerances SCENARIO_LOOK / SCENARIO_HELD). Returns (verdict, reason)."""
    def mean(rows, k):
        xs = [r[k] for r in rows.values() if r.get(k) is not None]
        return float(np.mean(xs)) if xs else 0.0
    msgs, ok = [], True
    for k in ("responsiveness_s", "trajectory_cm", "sliding_cm_s", "pops_ratio", *LOOK_KEYS):
        if not any(r.get(k) is not None for r in (*before.values(), *after.values())):
            continue
        a, b = mean(before, k), mean(after, k)
        if k == "responsiveness_s":
            worse = b >= a
        elif k in SCENARIO_HELD:
            worse = b < a - SCENARIO_HELD[k]
        else:
            worse = b > a + SCENARIO_LOOK.get(k, SLACK)
        ok &= not worse
        msgs.append(f"{k} {a:.3g} -> {b:.3g}{' (fails)' if worse else ''}")
    return ok, "; ".join(msgs)


# ---------------------------------------------------------------------------------------------
# command line
