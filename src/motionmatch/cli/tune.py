"""`motionmatch tune`: search the character's settings against the quality metrics (Optuna, Dask;
offline/tuning.py does the work)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from .inputs import database_file
from .outputs import output_suffix



def register(sub) -> None:
    p = sub.add_parser("tune", help="search the character's settings against the quality metrics (Optuna, Dask)")
    add_tune_args(p)
    p.set_defaults(func=run_tune)


def add_tune_args(p) -> None:
    p.add_argument("--db", required=True, help="database file (.npz)")
    p.add_argument("--scenarios", nargs="+", required=True,
                   help="tuning scenarios: folders, .json files or .list files (see scenarios/tuning.list)")
    p.add_argument("--validation", nargs="+", default=None,
                   help="validation scenarios: the chosen settings vs the defaults there decide the verdict")
    p.add_argument("--trials", type=int, required=True, help="finished trials the study should hold (resumes)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--workers", type=int, default=2, help="local cluster workers on 127.0.0.1 (default 2)")
    g.add_argument("--address", default=None, help="join a running Dask scheduler, e.g. tcp://10.0.0.5:8786")
    p.add_argument("-o", "--out", required=True, help="settings file to write (TOML); also OUT.pareto.png, "
                   "OUT.table.md and the study OUT.study.jsonl")
    p.add_argument("--study", default=None, help="study journal file (default: next to --out)")
    p.add_argument("--settings", default=None, help="settings file to start from (default: the runtime's defaults)")
    p.add_argument("--seed", type=int, default=0, help="sampler seed")
    p.add_argument("--only", nargs="+", metavar="NAME", default=None,
                   help="search only these tables (weights, character, controller) or keys (e.g. bias, "
                        "foot_position); the rest stays at the starting settings")


def run_tune(args) -> int:
    output_suffix(args.out, (".toml",), "-o", "tune")
    database_file(args.db)
    from ..offline.cluster import open_client
    from ..offline.quality import scenario_files
    from ..offline.tuning import (better_on, compare_table, default_params, evaluate_trial, open_study, pick,
                                  plot_pareto, restrict, run_study, scenario_summary, search_space, trial_tables)
    from ..posedb.database import load_database
    from ..runtime.settings_file import load_settings, save_settings, settings_from_dict, settings_to_dict

    if args.trials < 1:
        raise ValueError("--trials must be at least 1")
    if args.workers is not None and args.workers < 1:
        raise ValueError("--workers must be at least 1")
    tuning = scenario_files(args.scenarios)
    validation = scenario_files(args.validation) if args.validation else []
    db = load_database(args.db)
    channels = list(db.features.schema.names)
    base = load_settings(args.settings, channels) if args.settings else settings_from_dict({})
    space = restrict(search_space(channels), args.only)
    base_tables = settings_to_dict(*base)
    out = Path(args.out)
    stem = out.with_suffix("")
    study_path = args.study or f"{stem}.study.jsonl"
    study = open_study(study_path, args.seed)
    # Trial 0 holds every searched parameter: a study resumed over another space could not pick.
    searched = {p.name for p in space}
    if study.trials and study.trials[0].params and set(study.trials[0].params) != searched:
        raise ValueError(f"{study_path}: the study searched {', '.join(sorted(study.trials[0].params))}; "
                         f"resume it with the same --only (this run: {', '.join(sorted(searched))})")
    print(f"searching {len(space)} setting(s): {' '.join(p.name for p in space)}", file=sys.stderr)
    print(f"tuning on {len(tuning)} scenario(s): {' '.join(p.stem for p in tuning)}", file=sys.stderr)
    with open_client(args.workers, args.address, allowed_failures=0) as client:
        t0 = time.perf_counter()
        schema_weights = {c.name: c.weight for c in db.features.schema.channels}
        run_study(study, space, base_tables, args.db, tuning, args.trials, client,
                  default_params(space, base, schema_weights), log=lambda s: print(s, file=sys.stderr))
        minutes = (time.perf_counter() - t0) / 60.0
        chosen, defaults = pick(study)
        chosen_tables = trial_tables(chosen, space, base_tables)
        report = [f"# motionmatch tune: {args.db}", "",
                  f"Trials: {len(study.trials)} in the study ({minutes:.1f} min this run). Chosen: trial "
                  f"{chosen.number}{' (the defaults)' if chosen is defaults else ''}; defaults: trial {defaults.number}.",
                  "", *compare_table(defaults.user_attrs["scenarios"], chosen.user_attrs["scenarios"],
                                     "Tuning scenarios: defaults -> chosen")]
        verdict = None
        if validation and chosen is defaults:
            verdict = False
            report += ["Better on validation: no (the pick is the defaults).", ""]
        elif validation:
            futs = [client.submit(evaluate_trial, str(args.db), [str(p) for p in validation], t, pure=False)
                    for t in (trial_tables(defaults, space, base_tables), chosen_tables)]
            before, after = ({k: scenario_summary(m) for k, m in f.result().items()} for f in futs)
            verdict, why = better_on(before, after)
            report += compare_table(before, after, "Validation scenarios: defaults -> chosen")
            report += [f"Better on validation: {'yes' if verdict else 'no'} ({why}).", ""]
    rs = settings_from_dict(chosen_tables, "chosen trial")
    note = (f"motionmatch tune: trial {chosen.number} of {len(study.trials)} on {args.db}"
            + ("" if verdict is None else f"; better than the defaults on validation: {'yes' if verdict else 'no'}"))
    save_settings(out, rs.character, rs.controller, comment=note)
    plot_pareto(f"{stem}.pareto.png", study, chosen, defaults)
    Path(f"{stem}.table.md").write_text("\n".join(report))
    print("\n".join(report))
    print(f"wrote {out}, {stem}.pareto.png, {stem}.table.md")
    return 0
