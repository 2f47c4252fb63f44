"""`motionmatch synth`: a scenario, a crowd or a VR tracker stream run offline to BVH, metrics.json and a
top-view PNG."""
from __future__ import annotations

import json
from pathlib import Path

from ..output_folder import staged_output
from .options import add_character_options, add_crouch_args, crouch_settings, database_path, runtime_settings_from_args


def register(sub) -> None:
    p = sub.add_parser("synth", help="run a scenario (or a crowd) offline: BVH, metrics.json, a top-view PNG")
    p.add_argument("--db", help="database file (default: build or reuse the cached default database)")
    p.add_argument("--jlpm22-only", action="store_true",
                   help="without --db: the jlpm22-only default database instead of the mixed default")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--scenario", help="scenario JSON file")
    what.add_argument("--crowd", help="crowd JSON file: agent_000.bvh ... per agent, metrics.json, crowd.png")
    what.add_argument("--replay", help="input log recorded by the app's Record button or Character/Crowd "
                                       "start_input_log (docs/REPLAY.md): motion.bvh, poses.npz, replay.json")
    what.add_argument("--trackers", help="VR tracker file (JSON, CSV, or a BVH clip to simulate them from; "
                                         "docs/VR.md); needs --vr-model")
    p.add_argument("--vr-model", help="body-orientation model (.npz from `motionmatch vr train`)")
    p.add_argument("--alpha", type=float, default=0.3, help="VR root clamp radius in metres (0.1 or 0.3)")
    add_crouch_args(p)
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--retarget-to", help="BVH of a target skeleton (first frame = bind pose)")
    p.add_argument("--map", dest="mapping", help="joint mapping TOML for retargeting")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--quiet", action="store_true", help="print nothing but errors")
    out.add_argument("--json", action="store_true",
                     help="print exactly one JSON object (the metrics) on stdout, nothing else")
    p.add_argument("--gltf", action="store_true", help="also write motion.glb (skeleton, animation, default body)")
    add_character_options(p)
    p.set_defaults(func=run_synth)


def run_synth(args) -> int:
    from ..database import load_database
    from ..synth import synthesize
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
    db = load_database(database_path(args.db, progress=not args.quiet, mixed=not args.jlpm22_only))
    rs = runtime_settings_from_args(args, db)
    with staged_output(args.out, stale=("motion.glb", "terrain.npy")) as stage:
        metrics = synthesize(db, scen, stage, rs.character, progress=not (args.quiet or args.json),
                             retarget_to=args.retarget_to, retarget_map=args.mapping, controller_settings=rs.controller)
        if args.gltf:
            from ..export import export_gltf
            from ..io.bvh import read_bvh
            export_gltf(read_bvh(stage / 'motion.bvh'), stage / 'motion.glb')
    glb = Path(args.out) / 'motion.glb'
    if args.json:
        print(json.dumps(metrics))
    elif not args.quiet:
        print(json.dumps(metrics, indent=1))
        print(f"wrote {Path(args.out) / 'motion.bvh'}, metrics.json, trajectory.png")
        if args.gltf:
            print(f"wrote {glb}")
    return 0


def run_synth_vr(args) -> int:
    from ..database import load_database
    from ..vr.synth import synthesize_vr
    if not args.vr_model:
        raise ValueError("--trackers needs --vr-model VR.npz (train one with `motionmatch vr train`)")
    if args.retarget_to:
        raise ValueError("--retarget-to works with --scenario only")
    db = load_database(database_path(args.db, progress=not args.quiet, mixed=not args.jlpm22_only))
    character = runtime_settings_from_args(args, db).character
    if not args.settings:           # no settings file: the tracker-driven defaults (vr.driver)
        from ..vr.driver import VR_ADJUSTMENT_MAX_RATIO
        character.adjustment_max_ratio = VR_ADJUSTMENT_MAX_RATIO
    with staged_output(args.out) as stage:
        metrics = synthesize_vr(db, args.trackers, args.vr_model, stage, character, args.alpha,
                                progress=not (args.quiet or args.json), height_databases=crouch_settings(args))
    if args.json:
        print(json.dumps(metrics))
    elif not args.quiet:
        print(json.dumps(metrics, indent=1))
        print(f"wrote {Path(args.out) / 'motion.bvh'}, metrics.json, trajectory.png")
    return 0


def run_synth_crowd(args) -> int:
    from ..crowd_synth import check_agent_tags, load_crowd, synthesize_crowd
    from ..database import load_database
    if args.retarget_to:
        raise ValueError("--retarget-to works with --scenario only")
    spec = load_crowd(args.crowd)           # a bad file fails before the database loads
    db = load_database(database_path(args.db, progress=not args.quiet, mixed=not args.jlpm22_only))
    check_agent_tags(db, spec, args.crowd)
    with staged_output(args.out, stale=("agent_*.bvh",)) as stage:
        metrics = synthesize_crowd(db, spec, stage, runtime_settings_from_args(args, db).character,
                                   progress=not (args.quiet or args.json))
    if args.json:
        print(json.dumps(metrics))
    elif not args.quiet:
        print(json.dumps({k: v for k, v in metrics.items() if k != "agents"}, indent=1))
        print(f"wrote {len(spec.agents)} agent BVHs to {args.out}, metrics.json, crowd.png")
    return 0


def run_synth_replay(args) -> int:
    from ..database import load_database
    from ..replay import synthesize_replay
    from ..runtime.input_log import load_log
    for flag in ("retarget_to", "vr_model", "settings", "crouch_tags", "gltf"):
        if getattr(args, flag, None):
            raise ValueError(f"--{flag.replace('_', '-')} does not work with --replay: the log holds the settings")
    load_log(args.replay)               # a bad file fails before the database loads
    db = load_database(database_path(args.db, progress=not args.quiet, mixed=not args.jlpm22_only))
    with staged_output(args.out, stale=("agent_*.bvh", "motion.bvh")) as stage:
        summary = synthesize_replay(db, args.replay, stage, progress=not (args.quiet or args.json))
    if args.json:
        print(json.dumps(summary))
    elif not args.quiet:
        print(json.dumps(summary, indent=1))
        print(f"wrote {args.out}: {'motion.bvh' if summary['kind'] == 'character' else 'agent_*.bvh'}, poses.npz, "
              f"replay.json")
    return 0
