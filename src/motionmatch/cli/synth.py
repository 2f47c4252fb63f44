"""`motionmatch synth`: a scenario, a crowd or a VR tracker stream run offline to BVH, metrics.json and a
top-view PNG."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..files.output_folder import staged_output
from .inputs import database_files, existing_file, existing_path, scenario_file
from .outputs import output_folder
from .options import (DB_HELP, add_character_options, add_crouch_args, add_engine_options, crouch_settings,
                      database_paths, load_cli_database, runtime_settings_from_args)


def register(sub) -> None:
    p = sub.add_parser("synth", help="run a scenario (or a crowd) offline: BVH, metrics.json, a top-view PNG")
    p.add_argument("--db", action="append", metavar="DB", help=DB_HELP)
    p.add_argument("--jlpm22-only", action="store_true",
                   help="without --db: the jlpm22-only default database instead of the mixed default")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--scenario", help="scenario JSON file")
    what.add_argument("--scenarios", nargs="+", metavar="DIR|FILE|LIST",
                      help="a batch: scenario folders (their *.json), files or .list files; one output folder "
                           "per scenario under --out, as --scenario writes it, and batch.json")
    what.add_argument("--crowd", nargs="+", metavar="FILE|DIR",
                      help="crowd JSON file: agent_000.bvh ... per agent, metrics.json, crowd.png; several files "
                           "(or a folder) are a batch: one output folder per crowd under --out, and batch.json")
    what.add_argument("--replay", help="input log recorded by the app's Record button or Character/Crowd "
                                       "start_input_log (docs/REPLAY.md): motion.bvh, poses.npz, replay.json")
    what.add_argument("--trackers", help="VR tracker file (JSON, CSV, or a BVH clip to simulate them from; "
                                         "docs/VR.md); needs --vr-model")
    p.add_argument("--vr-model", help="body-orientation model (.npz from `motionmatch vr train`)")
    p.add_argument("--alpha", type=_root_radius, default=0.3,
                   help="VR root clamp radius in metres (0.1 or 0.3; 0.01 to 2)")
    add_crouch_args(p)
    p.add_argument("-o", "--out", required=True,
                   help="output folder; a run writes into a hidden OUT/.partial-* staging folder (a batch: one "
                        "in each OUT/NAME) and moves the files in when all are written; the staging folders "
                        "of killed runs are removed by the next run into OUT (docs/ROBUSTNESS.md)")
    p.add_argument("--retarget-to", help="BVH of a target skeleton (first frame = bind pose)")
    p.add_argument("--map", dest="mapping", help="joint mapping TOML for retargeting")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--quiet", action="store_true", help="print nothing but errors")
    out.add_argument("--json", action="store_true",
                     help="print exactly one JSON object (the metrics) on stdout, nothing else")
    p.add_argument("--gltf", action="store_true", help="also write motion.glb (skeleton, animation, default body)")
    add_character_options(p)
    add_engine_options(p, "batch (--scenarios, several --crowd files)")
    p.set_defaults(func=run_synth)


def _root_radius(text: str) -> float:
    """--alpha: metres within vr.upper_body.ROOT_ALPHA_RANGE (argparse's usage error otherwise)."""
    from ..files.input_bounds import finite_number
    from ..vr.upper_body import ROOT_ALPHA_RANGE
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a radius in metres, got {text[:40]!r}") from None
    return finite_number(value, argparse.ArgumentTypeError, "radius", *ROOT_ALPHA_RANGE)


def run_synth(args) -> int:
    output_folder(args.out, "--out", "synth")
    _check_inputs(args)
    from ..offline.batch_synth import write_scenario
    if args.workers is not None and args.workers < 1:
        raise ValueError("--workers must be at least 1")
    if args.scenarios or (args.crowd and (len(args.crowd) > 1 or Path(args.crowd[0]).is_dir())):
        return run_synth_batch(args)
    if args.workers or args.address:
        raise ValueError(f"{'--workers' if args.workers else '--address'} spreads a batch over the engine "
                         f"(--scenarios DIR, or several --crowd files); one scenario or crowd runs here")
    if args.crowd:
        return run_synth_crowd(args)
    if args.replay:
        return run_synth_replay(args)
    if args.trackers:
        return run_synth_vr(args)
    if args.vr_model or args.crouch_tags:
        raise ValueError(f"{'--vr-model' if args.vr_model else '--crouch-tags'} works with --trackers only")
    scen = Path(args.scenario)
    if not scen.is_file():
        raise FileNotFoundError(f"--scenario {scen}: no such file; expected a scenario JSON file "
                                f"({{\"duration\": ..., \"inputs\": [...]}} or {{\"duration\": ..., \"path\": {{...}}}}, "
                                f"see README 'Scenario files')")
    db = load_cli_database(args.db, progress=not args.quiet, mixed=not args.jlpm22_only)
    rs = runtime_settings_from_args(args, db)
    metrics = write_scenario(db, scen, args.out, rs, progress=not (args.quiet or args.json),
                             retarget_to=args.retarget_to, retarget_map=args.mapping, gltf=args.gltf)
    glb = Path(args.out) / 'motion.glb'
    if args.json:
        print(json.dumps(metrics))
    elif not args.quiet:
        print(json.dumps(metrics, indent=1))
        print(f"wrote {Path(args.out) / 'motion.bvh'}, metrics.json, trajectory.png")
        if args.gltf:
            print(f"wrote {glb}")
    return 0


def _check_inputs(args) -> None:
    """The files synth reads, before it loads anything heavy (cli/inputs.py)."""
    if args.scenario:
        scenario_file(args.scenario)
    for path in args.scenarios or args.crowd or ():
        existing_path(path, "--scenarios" if args.scenarios else "--crowd", "file or folder")
    for flag, what in (("replay", "input log"), ("trackers", "tracker file"), ("vr_model", "VR model file"),
                       ("settings", "settings file"), ("lmm", "learned model file"),
                       ("retarget_to", "target skeleton file"), ("mapping", "joint mapping file")):
        if getattr(args, flag, None):
            existing_file(getattr(args, flag), f"--{flag.replace('_', '-')}", what)
    database_files(args.db)


def run_synth_vr(args) -> int:
    from ..vr.orientation import load_networks
    from ..vr.synth import synthesize_vr
    from ..vr.trackers import read_trackers
    if not args.vr_model:
        raise ValueError("--trackers needs --vr-model VR.npz (train one with `motionmatch vr train`)")
    if args.retarget_to:
        raise ValueError("--retarget-to works with --scenario only")
    load_networks(args.vr_model)        # a bad model or tracker file fails before the database loads
    trackers = read_trackers(args.trackers)
    db = load_cli_database(args.db, progress=not args.quiet, mixed=not args.jlpm22_only)
    character = runtime_settings_from_args(args, db).character
    if not args.settings:           # no settings file: the tracker-driven defaults (vr.driver)
        from ..vr.driver import VR_ADJUSTMENT_MAX_RATIO
        character.adjustment_max_ratio = VR_ADJUSTMENT_MAX_RATIO
    with staged_output(args.out) as stage:
        metrics = synthesize_vr(db, trackers, args.vr_model, stage, character, args.alpha,
                                progress=not (args.quiet or args.json), height_databases=crouch_settings(args))
    if args.json:
        print(json.dumps(metrics))
    elif not args.quiet:
        print(json.dumps(metrics, indent=1))
        print(f"wrote {Path(args.out) / 'motion.bvh'}, metrics.json, trajectory.png")
    return 0


def run_synth_crowd(args) -> int:
    from ..offline.batch_synth import write_crowd
    from ..offline.crowd_synth import check_agents, load_crowd
    if args.retarget_to:
        raise ValueError("--retarget-to works with --scenario only")
    crowd = args.crowd[0]
    spec = load_crowd(crowd)           # a bad file fails before the database loads
    db = load_cli_database(args.db, progress=not args.quiet, mixed=not args.jlpm22_only)
    check_agents(db, spec, crowd)
    metrics = write_crowd(db, spec, args.out, runtime_settings_from_args(args, db).character,
                          progress=not (args.quiet or args.json))
    if args.json:
        print(json.dumps(metrics))
    elif not args.quiet:
        print(json.dumps({k: v for k, v in metrics.items() if k != "agents"}, indent=1))
        print(f"wrote {len(spec.agents)} agent BVHs to {args.out}, metrics.json, crowd.png")
    return 0


def run_synth_batch(args) -> int:
    from ..offline.batch_synth import batch_items, run_batch
    from ..posedb.database_join import load_databases
    kind = "scenario" if args.scenarios else "crowd"
    for flag in ("vr_model", "crouch_tags"):
        if getattr(args, flag, None):
            raise ValueError(f"--{flag.replace('_', '-')} works with --trackers only")
    if kind == "crowd" and (args.retarget_to or args.gltf):
        raise ValueError(f"{'--retarget-to' if args.retarget_to else '--gltf'} works with --scenario(s) only")
    items = batch_items(kind, args.scenarios or args.crowd)     # bad paths fail before the database loads
    # Several files are joined on each worker as here (cluster.worker_database).
    db_paths = [p.resolve() for p in database_paths(args.db, progress=not args.quiet, mixed=not args.jlpm22_only)]
    rs = runtime_settings_from_args(args, load_databases(db_paths))
    # Absolute paths, these and the databases': the workers' folder may not be this one (a cluster joined by
    # --address).
    if rs.character.model:
        rs.character.model = str(Path(rs.character.model).resolve())
    options = ({"retarget_to": args.retarget_to and str(Path(args.retarget_to).resolve()),
                "retarget_map": args.mapping and str(Path(args.mapping).resolve()), "gltf": args.gltf}
               if kind == "scenario" else {})
    summary = run_batch(items, db_paths, args.out, rs, options, args.workers, args.address,
                        progress=not (args.quiet or args.json))
    if args.json:
        print(json.dumps(summary))
    elif not args.quiet:
        print(f"{summary['done']} of {len(items)} {kind}s written to {args.out} in {summary['seconds']:.1f} s on "
              f"{summary['workers']} worker(s) ({summary['items_per_minute']:.2f} per minute); batch.json")
    failed = [r for r in summary["items"] if r["status"] == "failed"]
    for r in failed:
        print(f"motionmatch: error: {kind} {r['name']} ({r['path']}): {r['error']}", file=sys.stderr)
    return 1 if failed else 0


def run_synth_replay(args) -> int:
    from ..offline.replay import synthesize_replay
    from ..runtime.input_log import load_log
    for flag in ("retarget_to", "vr_model", "settings", "crouch_tags", "gltf"):
        if getattr(args, flag, None):
            raise ValueError(f"--{flag.replace('_', '-')} does not work with --replay: the log holds the settings")
    load_log(args.replay)               # a bad file fails before the database loads
    db = load_cli_database(args.db, progress=not args.quiet, mixed=not args.jlpm22_only)
    with staged_output(args.out, stale=("agent_*.bvh", "motion.bvh")) as stage:
        summary = synthesize_replay(db, args.replay, stage, progress=not (args.quiet or args.json))
    if args.json:
        print(json.dumps(summary))
    elif not args.quiet:
        print(json.dumps(summary, indent=1))
        print(f"wrote {args.out}: {'motion.bvh' if summary['kind'] == 'character' else 'agent_*.bvh'}, poses.npz, "
              f"replay.json")
    return 0
