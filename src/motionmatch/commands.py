"""Sub-commands of the `motionmatch` command line. Work lives in the stage modules; this file only
parses arguments and prints."""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path


def _human_bytes(n) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024


def print_summary(s: dict, file=None) -> None:
    file = file or sys.stdout
    print(f"clips:      {s['clips']} ({s['mirrored_clips']} mirrored)", file=file)
    print(f"frames:     {s['frames']} at {s['fps']:g} fps ({s['seconds']:.1f} s of motion)", file=file)
    print(f"joints:     {s['joints']}", file=file)
    print(f"features:   {s['features']} ({', '.join(s['feature_channels'])})", file=file)
    tags = s["tags"]
    print(f"tags:       {len(tags)}: {' '.join(tags[:30])}{' ...' if len(tags) > 30 else ''}", file=file)
    print(f"style tags: {len(s['style_tags'])}: {' '.join(s['style_tags']) or '(none)'}", file=file)
    ev = s.get("events") or {}
    print(f"events:     {sum(ev.values())}" + (": " + ", ".join(f"{k} {v}" for k, v in ev.items()) if ev else ""),
          file=file)
    print(f"size:       {_human_bytes(s['bytes'])}", file=file)
    if s.get("build_seconds") is not None:
        print(f"build time: {s['build_seconds']:.2f} s", file=file)


# ---------------------------------------------------------------------------------------------
# build / info

def _warn(msg: str) -> None:
    print(f"warning: {msg}", file=sys.stderr)


def _add_build(sub):
    p = sub.add_parser("build", help="build a pose database from BVH files or folders")
    p.add_argument("data", nargs="*", help="BVH files or folders (default: the jlpm22 locomotion set)")
    p.add_argument("-o", "--out", help="database file to write (.npz; required unless --default)")
    p.add_argument("--default", choices=("actions", "bandai"), default=None,
                   help="build (once) a default database into the cache: `actions` = the mixed default set plus "
                        "Bandai-Namco dataset-1 actions tagged action:NAME, with time-to-event channels "
                        "(docs/ACTIONS.md); `bandai` = every Bandai-Namco walk, turn, run and dash clip on its own "
                        "skeleton, bandai-locomotion.npz (docs/BANDAI.md) (both CC BY-NC 4.0: non-commercial)")
    p.add_argument("--events", metavar="FILE",
                   help="event annotation sidecar (TOML [[event]] or JSON: clip, time or frame, type, tags)")
    p.add_argument("--data", dest="data_root", help="data root (else $MOTIONMATCH_DATA, else ../shared/mocap)")
    p.add_argument("--include", action="append", default=None, help="glob on file names to keep (repeatable)")
    p.add_argument("--exclude", action="append", default=None, help="glob on file names to drop (repeatable)")
    p.add_argument("--no-mirror", action="store_true", help="do not add mirrored copies")
    p.add_argument("--fps", type=float, default=60.0, help="database frame rate (default 60)")
    p.add_argument("--unit", default="auto", help="BVH length unit: auto, m, cm (default auto)")
    p.add_argument("--schema", help="feature schema TOML (default: the 27-d locomotion set)")
    p.add_argument("--map", dest="mapping", help="role mapping TOML for an unknown skeleton")
    p.add_argument("--tag", action="append", default=[], metavar="TAG[=GLOB]",
                   help="add a user tag to clips whose file name matches GLOB (default all)")
    p.add_argument("--style-tags", default=None, metavar="TAG,...",
                   help="the tags that name a style (metrics.json `style`; default: every source:NAME tag and "
                        "the Bandai-Namco styles of the file names; '' for none)")
    p.add_argument("--strict", action="store_true", help="fail on the first bad file instead of skipping it")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    one = p.add_mutually_exclusive_group()
    one.add_argument("--skeleton-from", metavar="DATA",
                     help="retarget every clip onto the skeleton of DATA (a BVH file, or the first BVH in a folder), "
                          "so sets with different skeletons combine")
    one.add_argument("--skeleton", metavar="T.bvh", help="retarget every clip onto the skeleton of T.bvh")
    p.add_argument("--jlpm22-only", action="store_true",
                   help="without DATA: only the jlpm22 takes (default: the mixed default set: jlpm22 takes, CMU "
                        "side-steps, Bandai-Namco backward and slow walks, retargeted onto the jlpm22 skeleton)")
    _add_engine_options(p, "files")
    p.set_defaults(func=run_build)


@contextlib.contextmanager
def _build_map(args):
    """The map a build spreads its files with: over the distributed engine with --workers/--address
    (a local cluster started and stopped here, or a running one), else None (build_database's own)."""
    if not (args.workers or args.address):
        yield None
        return
    from .cluster import open_client, ordered_map
    with open_client(args.workers, args.address) as client:
        yield lambda fn, chunks: ordered_map(client, fn, chunks)


def run_build(args) -> int:
    from .database import BuildSettings, build_database, default_weights, save_database
    from .datapaths import find_data, list_bvh_files, mixed_default_files, print_licences, source_tags
    from .features import default_schema, load_schema
    from .skeleton import load_mapping
    from .styles import parse_style_tags

    t0 = time.perf_counter()
    if args.default and args.style_tags is not None:
        raise ValueError("--style-tags: not with --default (a default database takes the default style tags)")
    if args.default:
        from .database import build_default_database, load_database
        with _build_map(args) as map_chunks:
            path = build_default_database(args.out, data=args.data_root, progress=not args.quiet,
                                          kind=args.default, events=args.events, map_chunks=map_chunks)
        db = load_database(path)
        print(f"{args.default} database: {path}")
        print_summary(db.summary())
        print_licences(db.range_tags)
        return 0
    if not args.out:
        raise ValueError("build: give -o/--out FILE (or --default actions|bandai)")
    if args.jlpm22_only and args.data:
        raise ValueError("--jlpm22-only chooses the default data; give either DATA or --jlpm22-only")
    skeleton = args.skeleton
    if not args.data and not args.jlpm22_only:
        files, file_tags, default_skeleton = mixed_default_files(args.data_root, warn=_warn)
        files = list_bvh_files(files, include=args.include, exclude=args.exclude)
        skeleton = skeleton or default_skeleton
        print_licences(file_tags)
    else:
        roots = [Path(d) for d in args.data] if args.data else [find_data("jlpm22-locomotion", args.data_root)]
        for r in roots:
            if not r.exists():
                raise FileNotFoundError(f"{r}: no such file or folder")
        files = list_bvh_files(roots, include=args.include, exclude=args.exclude)
        file_tags = source_tags(roots, files)
    if args.skeleton_from:
        found = list_bvh_files([args.skeleton_from])
        if not found:
            raise FileNotFoundError(f"--skeleton-from {args.skeleton_from}: no BVH file there")
        skeleton = str(found[0])
    user_tags = []
    for t in args.tag:
        tag, _, pat = t.partition("=")
        user_tags.append((tag, pat or "*"))
    settings = BuildSettings(fps=args.fps, mirror=not args.no_mirror, unit=args.unit, strict=args.strict,
                             role_mapping=load_mapping(args.mapping) if args.mapping else None,
                             user_tags=user_tags, skeleton=skeleton, file_tags=file_tags, events=args.events,
                             style_tags=None if args.style_tags is None else parse_style_tags(args.style_tags))
    mixed = not args.data and not args.jlpm22_only    # the mixed default set: its tuned weights
    kind = "mixed" if mixed else None
    schema = load_schema(args.schema) if args.schema else default_schema().with_weights(default_weights(kind))
    with _build_map(args) as map_chunks:
        db = build_database(files, settings, schema, progress=not args.quiet, map_chunks=map_chunks)
    save_database(db, args.out)
    db.meta["build_seconds"] = round(time.perf_counter() - t0, 3)
    print(f"wrote {args.out}")
    print_summary(db.summary())
    if db.meta.get("skipped"):
        print(f"skipped:    {len(db.meta['skipped'])} bad file(s) (see warnings above)")
    return 0


def _add_info(sub):
    p = sub.add_parser("info", help="print a database's summary")
    p.add_argument("db")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_info)


def run_info(args) -> int:
    from .database import load_database
    t0 = time.perf_counter()
    db = load_database(args.db)
    s = db.summary()
    s["load_seconds"] = round(time.perf_counter() - t0, 3)
    if args.json:
        print(json.dumps(s, indent=1))
    else:
        print_summary(s)
        print(f"load time:  {s['load_seconds']:.3f} s")
    return 0


# ---------------------------------------------------------------------------------------------
# demo (the main job)

def _add_demo(sub):
    p = sub.add_parser("demo", help="the main job: build the default database and open the browser app")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--data", dest="data_root", help="data root (else $MOTIONMATCH_DATA, else ../shared/mocap)")
    p.add_argument("--no-serve", action="store_true", help="only build the database and print its summary")
    p.add_argument("--jlpm22-only", action="store_true",
                   help="the jlpm22-only database instead of the mixed default (jlpm22 + CMU + Bandai-Namco clips)")
    p.set_defaults(func=run_demo)


def run_demo(args) -> int:
    from .database import build_default_database, load_database
    from .datapaths import print_licences
    path = build_default_database(data=args.data_root, progress=True, mixed=not args.jlpm22_only)
    db = load_database(path)
    print(f"default database: {path}")
    print_licences(db.range_tags)
    print_summary(db.summary())
    if args.no_serve:
        return 0
    from .app.server import add_serve_args, run_serve
    # The serve command's own defaults, so every option it reads is present.
    serve = argparse.ArgumentParser()
    add_serve_args(serve)
    ns = serve.parse_args(["--db", str(path), "--host", args.host, "--port", str(args.port)])
    return run_serve(ns)


# ---------------------------------------------------------------------------------------------
# synth

def _add_character_options(p):
    p.add_argument("--inertialization", choices=("spring", "quintic", "off", "dead_blending"), default=None)
    p.add_argument("--halflife", type=float, default=None, help="spring inertialization halflife (s)")
    p.add_argument("--search-interval", type=float, default=None, help="seconds between searches")
    p.add_argument("--bias", type=float, default=None, help="continuing-pose bias (normalized cost)")
    p.add_argument("--no-adjustment", action="store_true")
    p.add_argument("--no-clamping", action="store_true")
    p.add_argument("--foot-locking", action=argparse.BooleanOptionalAction, default=None,
                   help="lock feet in contact with leg IK (default on)")
    p.add_argument("--backend", default=None, help="search back-end (aabb, brute, brute_numpy)")
    p.add_argument("--warping", action=argparse.BooleanOptionalAction, default=None,
                   help="orientation, play-rate, stride and slope warping (default on)")
    p.add_argument("--settings", default=None,
                   help="settings file (TOML, e.g. from `motionmatch tune`); the options above override it")
    p.add_argument("--lmm", metavar="MODEL.npz", default=None,
                   help="learned motion matching: poses from this model (`motionmatch lmm train`), not the database")


def runtime_settings_from_args(args, db):
    """--settings FILE (checked against the database's feature channels), then the options over it."""
    from .settings_file import load_settings, settings_from_dict
    rs = load_settings(args.settings, db.features.schema.names) if args.settings else settings_from_dict({})
    character_settings_from_args(args, rs.character)
    return rs


def character_settings_from_args(args, s=None):
    """CharacterSettings `s` (default: new defaults) with the character options that were given."""
    from .runtime.character import CharacterSettings
    s = s if s is not None else CharacterSettings()
    for name, attr in (("inertialization", "inertialization"), ("halflife", "halflife"),
                       ("search_interval", "search_interval"), ("bias", "bias"), ("backend", "search_backend")):
        v = getattr(args, name, None)
        if v is not None:
            setattr(s, attr, v)
    if getattr(args, "lmm", None):
        s.mode, s.model = "lmm", args.lmm
    if getattr(args, "no_adjustment", False):
        s.adjustment = False
    if getattr(args, "no_clamping", False):
        s.clamping = False
    if getattr(args, "foot_locking", None) is not None:
        s.foot_locking = bool(args.foot_locking)
    if getattr(args, "warping", None) is not None:
        for flag in ("orientation", "play_rate", "stride", "slope"):
            setattr(s.warp, flag, bool(args.warping))
    return s


def _add_synth(sub):
    p = sub.add_parser("synth", help="run a scenario (or a crowd) offline: BVH, metrics.json, a top-view PNG")
    p.add_argument("--db", help="database file (default: build or reuse the cached default database)")
    p.add_argument("--jlpm22-only", action="store_true",
                   help="without --db: the jlpm22-only default database instead of the mixed default")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--scenario", help="scenario JSON file")
    what.add_argument("--crowd", help="crowd JSON file: agent_000.bvh ... per agent, metrics.json, crowd.png")
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
    _add_character_options(p)
    p.set_defaults(func=run_synth)


def add_crouch_args(p) -> None:
    """--crouch-tags / --crouch-below: VR database switching by HMD height (synth --trackers, serve --vr-model)."""
    p.add_argument("--crouch-tags", default=None, metavar="EXPR",
                   help="VR: search only clips matching this tag expression while the HMD is low (docs/VR.md)")
    p.add_argument("--crouch-below", type=float, default=0.8, metavar="RATIO",
                   help="VR: 'low' is under this ratio of the standing HMD height, calibrated over the "
                        "first 2 s (default 0.8)")


def crouch_settings(args) -> tuple:
    """VRDriverSettings.height_databases from --crouch-tags / --crouch-below (empty without tags)."""
    from .vr.driver import crouch_databases
    return crouch_databases(args.crouch_tags, args.crouch_below) if args.crouch_tags else ()


def database_path(db: str | None, progress: bool = True, **default_options) -> Path:
    """The --db file, else the cached default database (built on first use with `default_options`), as
    `serve` and `synth` use."""
    from .database import build_default_database
    if db:
        if not Path(db).is_file():
            raise FileNotFoundError(f"--db {db}: no such database file (build one with `motionmatch build`, "
                                    f"or leave --db out to use the default database)")
        return Path(db)
    return build_default_database(progress=progress, **default_options)


def run_synth(args) -> int:
    from .database import load_database
    from .synth import synthesize
    if args.crowd:
        return run_synth_crowd(args)
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
    metrics = synthesize(db, scen, args.out, rs.character, progress=not (args.quiet or args.json),
                         retarget_to=args.retarget_to, retarget_map=args.mapping, controller_settings=rs.controller)
    if args.gltf:
        from .export import export_gltf
        from .io.bvh import read_bvh
        glb = export_gltf(read_bvh(Path(args.out) / 'motion.bvh'), Path(args.out) / 'motion.glb')
    if args.json:
        print(json.dumps(metrics))
    elif not args.quiet:
        print(json.dumps(metrics, indent=1))
        print(f"wrote {Path(args.out) / 'motion.bvh'}, metrics.json, trajectory.png")
        if args.gltf:
            print(f"wrote {glb}")
    return 0


def run_synth_vr(args) -> int:
    from .database import load_database
    from .vr.synth import synthesize_vr
    if not args.vr_model:
        raise ValueError("--trackers needs --vr-model VR.npz (train one with `motionmatch vr train`)")
    if args.retarget_to:
        raise ValueError("--retarget-to works with --scenario only")
    db = load_database(database_path(args.db, progress=not args.quiet, mixed=not args.jlpm22_only))
    character = runtime_settings_from_args(args, db).character
    if not args.settings:           # no settings file: the tracker-driven defaults (vr.driver)
        from .vr.driver import VR_ADJUSTMENT_MAX_RATIO
        character.adjustment_max_ratio = VR_ADJUSTMENT_MAX_RATIO
    metrics = synthesize_vr(db, args.trackers, args.vr_model, args.out, character, args.alpha, progress=not (args.quiet or args.json), height_databases=crouch_settings(args))
    if args.json:
        print(json.dumps(metrics))
    elif not args.quiet:
        print(json.dumps(metrics, indent=1))
        print(f"wrote {Path(args.out) / 'motion.bvh'}, metrics.json, trajectory.png")
    return 0


def run_synth_crowd(args) -> int:
    from .crowd import load_crowd, synthesize_crowd
    from .database import load_database
    if args.retarget_to:
        raise ValueError("--retarget-to works with --scenario only")
    spec = load_crowd(args.crowd)           # a bad file fails before the database loads
    db = load_database(database_path(args.db, progress=not args.quiet, mixed=not args.jlpm22_only))
    metrics = synthesize_crowd(db, spec, args.out, runtime_settings_from_args(args, db).character,
                               progress=not (args.quiet or args.json))
    if args.json:
        print(json.dumps(metrics))
    elif not args.quiet:
        print(json.dumps({k: v for k, v in metrics.items() if k != "agents"}, indent=1))
        print(f"wrote {len(spec.agents)} agent BVHs to {args.out}, metrics.json, crowd.png")
    return 0


# ---------------------------------------------------------------------------------------------
# bench

def _add_bench(sub):
    p = sub.add_parser("bench", help="benchmarks (search, runtime, io)")
    bsub = p.add_subparsers(dest="bench", metavar="WHAT")
    from .search_bench import add_bench_search_args, run_bench_search
    ps = bsub.add_parser("search", help="search latency and throughput per back-end")
    add_bench_search_args(ps)
    ps.set_defaults(func=run_bench_search)
    pr = bsub.add_parser("runtime", help="one character's per-frame update time, split by stage")
    pr.add_argument("--db", required=True)
    pr.add_argument("--seconds", type=float, default=60.0, help="length of the random-input run")
    pr.add_argument("--seed", type=int, default=0)
    pr.add_argument("--json", action="store_true")
    _add_character_options(pr)
    pr.set_defaults(func=run_bench_runtime)
    pc = bsub.add_parser("crowd", help="tick time of random-goal crowds of several sizes")
    pc.add_argument("--db", required=True)
    pc.add_argument("--n", default="1,10,100,1000,5000", help="comma-separated crowd sizes")
    pc.add_argument("--seconds", type=float, default=3.0, help="timed seconds per size (after 1 s of warm-up)")
    pc.add_argument("--seed", type=int, default=0)
    pc.add_argument("--json", action="store_true")
    pc.set_defaults(func=run_bench_crowd)
    pq = bsub.add_parser("quality", help="run scenarios and tabulate their metrics")
    pq.add_argument("--db", required=True)
    pq.add_argument("--scenarios", nargs="+", default=None,
                    help="scenario files or folders (default: the project's scenarios/ folder)")
    pq.add_argument("--out", default=None, help="also write each scenario's synth output under this folder")
    pq.add_argument("--style", default=None, help="tag expression applied to every scenario")
    pq.add_argument("--json", action="store_true")
    pq.add_argument("--compare", default=None, metavar="BEFORE.toml",
                    help="also run with this settings file and show it -> this run's settings per scenario, "
                         "the means and whether this run is better (docs/tuning.md)")
    _add_engine_options(pq, "scenarios")
    _add_character_options(pq)
    pq.set_defaults(func=run_bench_quality)
    from .fuzz import add_bench_fuzz_args, run_bench_fuzz
    pf = bsub.add_parser("fuzz", help="hostile-input campaigns: BVH mutants, damaged databases, bad scenarios")
    add_bench_fuzz_args(pf)
    pf.set_defaults(func=run_bench_fuzz)
    from .lmm.commands import add_bench_lmm_args, run_bench_lmm
    pl = bsub.add_parser("lmm", help="learned motion matching against classic: memory (quality: with the runtime)")
    add_bench_lmm_args(pl)
    pl.set_defaults(func=run_bench_lmm)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])


def _add_engine_options(p, what: str):
    g = p.add_mutually_exclusive_group()
    g.add_argument("--workers", type=int, default=None,
                   help=f"spread the {what} over a local cluster of K worker processes on 127.0.0.1")
    g.add_argument("--address", default=None, help="spread them over a running Dask cluster (tcp://HOST:PORT)")


def run_bench_crowd(args) -> int:
    import numba
    from .database import load_database
    from .runtime.crowd_bench import bench_crowd
    try:
        sizes = [int(v) for v in str(args.n).split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--n: expected comma-separated integers, got {args.n!r}") from None
    if not sizes or min(sizes) < 1:
        raise ValueError(f"--n: crowd sizes must be positive integers, got {args.n!r}")
    if not args.seconds > 0:
        raise ValueError(f"--seconds: must be positive, got {args.seconds}")
    db = load_database(args.db)
    rows = bench_crowd(db, sizes, args.seconds, args.seed, progress=not args.json)
    out = {"database": str(args.db), "threads": int(numba.get_num_threads()),
           "results": [{k: r[k] for k in ("n", "tick_ms", "us_per_character", "searches_per_tick")} for r in rows]}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{db.num_frames} database frames, {out['threads']} threads, random-goal crowds, {args.seconds:g} s timed")
    print(f"{'n':>6s} {'median ms':>10s} {'p99 ms':>10s} {'us/char':>9s} {'searches/tick':>14s} {'state B/char':>13s}")
    for r in rows:
        print(f"{r['n']:6d} {r['tick_ms']['median']:10.3f} {r['tick_ms']['p99']:10.3f} {r['us_per_character']:9.2f} "
              f"{r['searches_per_tick']:14.2f} {r['bytes_per_character']:13d}")
    return 0


def run_bench_quality(args) -> int:
    from .database import load_database
    from .quality import quality_runs, scenario_files

    paths = scenario_files(args.scenarios)
    db = load_database(args.db)
    rs = runtime_settings_from_args(args, db)
    rows = quality_runs(args.db, paths, rs, args.style, args.workers, args.address, args.out)
    if args.compare:
        from .settings_file import load_settings
        from .tuning import compare_runs
        before = quality_runs(args.db, paths, load_settings(args.compare, list(db.features.schema.names)),
                              args.style, args.workers, args.address)
        better, lines = compare_runs(before, rows, f"{args.compare} -> {args.settings or 'defaults'}")
        print(json.dumps({"before": before, "after": rows, "better": better}, indent=1) if args.json
              else "\n".join(lines))
        return 0
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    head = ["scenario", "NaN", "slide", "src", "traj mean", "traj p95", "traj max", "head p95", "resp s",
            "trans/s", "vel ok", "face ok", "twist p95", "twist max", "shoulder ok", "pops", "knee/src",
            "toe cm/src", "lean p95", "outside", "styles/min", "idle settle", "idle alive", "idle loop",
            "search med", "frame med", "frame p99"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name, m in rows.items():
        r = m["responsiveness_s"]
        vals = [name, m["nan_frames"], f"{m['foot_sliding_cm_s']:.1f}", f"{m['foot_sliding_source_cm_s']:.1f}",
                f"{m['trajectory_error_cm']['mean']:.1f}", f"{m['trajectory_error_cm']['p95']:.1f}",
                f"{m['trajectory_error_cm']['max']:.1f}", f"{m['heading_error_deg']['p95']:.1f}",
                "-" if r is None else f"{r:.2f}", f"{m['transitions_per_s']:.2f}",
                "-" if not m.get("tracking") else f"{m['tracking']['velocity']['mean']:.2f}",
                "-" if not m.get("tracking") else f"{m['tracking']['facing']['mean']:.2f}",
                "-" if "twist_deg" not in m else f"{m['twist_deg']['p95']:.0f}",
                "-" if "twist_deg" not in m else f"{m['twist_deg']['max']:.0f}",
                "-" if not m.get("shoulder_facing") else f"{m['shoulder_facing']['mean']:.2f}",
                "-" if "pops" not in m else f"{m['pops']['ratio']:.2f}",
                *_look_cells(m), f"{m['search_us']['median']:.0f}", f"{m['frame_us']['median']:.0f}", f"{m['frame_us']['p99']:.0f}"]
        print("| " + " | ".join(map(str, vals)) + " |")
    return 0


def _look_cells(m: dict) -> list[str]:
    """The bench quality table's appearance cells (README "Metrics"): knee and planted toe against the
    main actor's, trunk lean p95, share outside the actor's range, style switches, and the worst idle
    stretch (slowest settle, least alive, shortest loop; "none" without a loop)."""
    from .tuning import look_summary

    def pair(k, fmt):
        a, b = m["posture"][k], m["posture_source"][k]
        return "-" if a is None else f"{a:{fmt}}/{b:{fmt}}"
    idle = look_summary(m)
    settled = [e for e in m["idle"] if e["alive_cm_s"] is not None]
    loops = [e["shortest_loop_s"] for e in settled if e["shortest_loop_s"] is not None]
    return [pair("knee_deg", ".0f"), pair("planted_toe_cm", ".1f"), f"{m['posture']['trunk_lean_deg']['p95']:.0f}",
            f"{m['posture']['outside_source']:.2f}", f"{m['style']['switches_per_min']:.0f}",
            "-" if idle["idle_settle_s"] is None else f"{idle['idle_settle_s']:.2f}",
            "-" if idle["idle_alive_cm_s"] is None else f"{idle['idle_alive_cm_s']:.1f}",
            "-" if not settled else f"{min(loops):.2f}" if loops else "none"]


def run_bench_runtime(args) -> int:
    import numpy as np
    from .database import load_database
    from .scenario import random_scenario
    from .synth import run_scenario
    db = load_database(args.db)
    scen = random_scenario(args.seconds, seed=args.seed)
    rs = runtime_settings_from_args(args, db)
    run_scenario(db, random_scenario(2.0, seed=args.seed + 1), rs.character,
                 controller_settings=rs.controller)   # JIT warm-up, not timed
    rec = run_scenario(db, scen, rs.character, controller_settings=rs.controller)
    t = rec["timing"]
    out = {"frames": len(t), "db_frames": db.num_frames, "searches": len(rec["search_us"]),
           "note": "JIT warm-up excluded (a 2 s run first); search_us counts only frames that searched"}
    for i, name in enumerate(("controller", "search", "inertialization", "pose_output")):
        col = t[:, i] if name != "search" else rec["search_us"]
        col = col if len(col) else np.zeros(1)
        out[f"{name}_us"] = {"median": round(float(np.median(col)), 2), "p99": round(float(np.percentile(col, 99)), 2),
                             "mean": round(float(np.mean(col)), 2)}
    out["frame_us"] = {"median": round(float(np.median(rec["frame_us"])), 2),
                       "p99": round(float(np.percentile(rec["frame_us"], 99)), 2),
                       "mean": round(float(np.mean(rec["frame_us"])), 2)}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"one character, {out['frames']} frames of random input on {db.num_frames} database frames "
              f"({out['searches']} searches); JIT warm-up excluded")
        print(f"{'stage':18s} {'median us':>10s} {'p99 us':>10s} {'mean us':>10s}")
        for k in ("controller_us", "search_us", "inertialization_us", "pose_output_us", "frame_us"):
            v = out[k]
            print(f"{k[:-3]:18s} {v['median']:10.1f} {v['p99']:10.1f} {v['mean']:10.1f}")
    return 0


# ---------------------------------------------------------------------------------------------
# commands provided by stage modules

def _add_features(sub):
    from .search_bench import add_features_export_args, run_features_export
    p = sub.add_parser("features", help="feature matrix tools")
    fsub = p.add_subparsers(dest="features_cmd", metavar="WHAT")
    pe = fsub.add_parser("export", help="write features, ranges and realistic queries as raw files")
    add_features_export_args(pe)
    pe.set_defaults(func=run_features_export)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])


def _add_optional(sub, name, module, add, run, help_):
    import importlib
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return
    p = sub.add_parser(name, help=help_)
    getattr(mod, add)(p)
    p.set_defaults(func=getattr(mod, run))


def register_cli(sub) -> None:
    _add_build(sub)
    _add_info(sub)
    _add_synth(sub)
    _add_bench(sub)
    _add_features(sub)
    _add_optional(sub, "fetch-data", "motionmatch.fetch", "add_fetch_args", "run_fetch",
                  "download and unpack the public motion capture sets into a cache folder")
    _add_optional(sub, "retarget", "motionmatch.retarget", "add_retarget_args", "run_retarget",
                  "retarget a BVH to another skeleton")
    _add_optional(sub, "export", "motionmatch.export", "add_export_args", "run_export",
                  "write a motion as glTF binary (.glb), optionally with a skinned body")
    _add_optional(sub, "serve", "motionmatch.app.server", "add_serve_args", "run_serve",
                  "run the browser app")
    _add_demo(sub)
