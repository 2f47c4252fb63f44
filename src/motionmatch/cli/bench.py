"""`motionmatch bench ...`: search, runtime, crowd, quality, fuzz and lmm benchmarks."""
from __future__ import annotations

import json
from pathlib import Path

import sys
from ..devtools.machine import machine_info
from .lmm import add_bench_lmm_args, run_bench_lmm
from .inputs import database_files, existing_file, existing_path
from .outputs import PLOT_SUFFIXES, output_suffix
from .options import add_character_options, add_engine_options, runtime_settings_from_args


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks (search, runtime, io)")
    bsub = p.add_subparsers(dest="bench", metavar="WHAT")
    ps = bsub.add_parser("search", help="search latency and throughput per back-end")
    add_bench_search_args(ps)
    ps.set_defaults(func=run_bench_search)
    pr = bsub.add_parser("runtime", help="one character's per-frame update time, split by stage")
    pr.add_argument("--db", required=True)
    pr.add_argument("--seconds", type=float, default=60.0, help="length of the random-input run")
    pr.add_argument("--seed", type=int, default=0)
    pr.add_argument("--json", action="store_true")
    add_character_options(pr)
    pr.set_defaults(func=run_bench_runtime)
    pc = bsub.add_parser("crowd", help="tick time of random-goal crowds of several sizes")
    pc.add_argument("--db", help="database file (.npz); required unless --from-json")
    pc.add_argument("--n", default="1,10,100,1000,5000", help="comma-separated crowd sizes")
    pc.add_argument("--seconds", type=float, default=3.0, help="timed seconds per size (after 1 s of warm-up)")
    pc.add_argument("--seed", type=int, default=0)
    pc.add_argument("--threads", default="auto",
                    help="'auto' (each tick on one thread or all, whichever measures faster; default) or a count")
    pc.add_argument("--contention", action="store_true",
                    help="with a process spinning on one core: one thread, all threads and 'auto', side by side")
    pc.add_argument("--json", action="store_true")
    pc.add_argument("--plot", metavar="PNG", help="also draw tick time against agents (docs/performance.md)")
    pc.add_argument("--from-json", nargs="+", metavar="JSON",
                    help="with --plot: draw these saved `bench crowd --json` results instead of running")
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
    add_engine_options(pq, "scenarios")
    add_character_options(pq)
    pq.set_defaults(func=run_bench_quality)
    pv = bsub.add_parser("sliders", help="quality figures along the responsiveness or quality slider "
                         "(docs/tuning.md)")
    add_bench_sliders_args(pv)
    pv.set_defaults(func=run_bench_sliders)
    pf = bsub.add_parser("fuzz", help="hostile-input campaigns: BVH mutants, damaged databases, bad scenarios")
    add_bench_fuzz_args(pf)
    pf.set_defaults(func=run_bench_fuzz)
    pl = bsub.add_parser("lmm", help="learned motion matching against classic: memory (quality: with the runtime)")
    add_bench_lmm_args(pl)
    pl.set_defaults(func=run_bench_lmm)
    pv = bsub.add_parser("serve", help="server soak: simulated pages come and go; memory over time, pages' fps")
    pv.add_argument("--db", default=None, help="database file (default: the cached default database)")
    pv.add_argument("--pages", type=int, default=20, help="simulated pages connected at once (default 20)")
    pv.add_argument("--minutes", type=float, default=None,
                    help="length of the soak after a warm-up round (default 5)")
    pv.add_argument("--visit", type=float, default=None,
                    help="seconds a page stays, 0.5-1.5x (default 20; 2 with --soak)")
    pv.add_argument("--soak", action="store_true",
                    help="count visits instead of minutes: --visits page visits (connect, drive, record, "
                         "download, leave), the server's memory against visits and its slope after a warm-up "
                         "tenth (kB a visit)")
    pv.add_argument("--visits", type=int, default=5000, help="with --soak: visits in all (default 5000)")
    pv.add_argument("--no-record", action="store_true", help="pages do not record (they do by default)")
    pv.add_argument("--max-sessions", type=int, default=None,
                    help="the server's cap (default: --pages, so no page is refused; with --soak twice that, so "
                         "a page arriving while the server closes the session of the one it replaces is served)")
    pv.add_argument("--crowd", type=int, default=None, metavar="N",
                    help="instead of the soak: `serve --crowd N` with one page and two crowd viewers for "
                         "--minutes (0.5 is enough); the crowd's tick, ticks a second, bytes a second, fps")
    pv.add_argument("--seed", type=int, default=0)
    pv.add_argument("--json", action="store_true")
    pv.set_defaults(func=run_bench_serve)
    pi = bsub.add_parser("interop", help="round trips: our .glb and USD exports opened by Blender, our USD checked "
                         "and read by Pixar's library, Blender-made FBX read back (needs the Blender environment "
                         "and the `usd` extra, docs/IMPORTING.md)")
    pi.add_argument("--bvh", default=None, help="motion to use (default: 2 s of the first jlpm22 take)")
    pi.add_argument("--model", default=None, metavar="MODEL.glb", help="also export onto this rigged character (USD)")
    pi.add_argument("--agents", type=int, default=20, help="agents of the USD crowd (default 20)")
    pi.add_argument("--data", default=None, help="data root (else $MOTIONMATCH_DATA, else ../shared/mocap)")
    pi.add_argument("--json", action="store_true")
    pi.set_defaults(func=run_bench_interop)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])


def add_bench_search_args(parser) -> None:
    src = parser.add_argument_group("data (one of --db, --synthetic, or --queries DIR holding features.f32)")
    src.add_argument("--db", help="database file (.npz)")
    src.add_argument("--synthetic", type=int, metavar="N", help="N frames of smooth random-walk 27-d features")
    src.add_argument("--queries", metavar="DIR", help="time exactly the queries of this export folder")
    parser.add_argument("--subset", type=int, metavar="N", help="only the first N frames of the database")
    parser.add_argument("--backends", default="all", help="comma-separated back-ends (default all)")
    parser.add_argument("-n", "--n-queries", type=int, default=2000, help="generated queries (default 2000)")
    parser.add_argument("--noise", type=float, default=0.5,
                        help="trajectory noise of generated queries, in column std (default 0.5)")
    parser.add_argument("--query-source", choices=("runtime", "perturbed"), default="runtime",
                        help="with --db: queries a character made while driven by random input (default), "
                             "or real frames with noisy trajectory columns")
    parser.add_argument("--end-exclude", type=int, default=20)
    parser.add_argument("--skip", type=int, default=0)
    parser.add_argument("--bias", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run_bench_search(args) -> int:
    """`motionmatch bench search`: the table (or JSON); exit status 1 when back-ends disagree."""
    from ..devtools.search_bench import bench_search, print_table
    database_files(args.db)
    machine = machine_info()
    if args.queries:
        existing_path(args.queries, "--queries", "export folder")
    results = bench_search(db=args.db, synthetic=args.synthetic, export=args.queries, subset=args.subset,
                           backends=args.backends, n_queries=args.n_queries, noise=args.noise,
                           query_source=args.query_source, end_exclude=args.end_exclude, skip=args.skip,
                           bias=args.bias, seed=args.seed)
    if args.json:
        print(json.dumps({**results, "machine": machine}, indent=1))
    else:
        print_table(results)
    bad = sum(r["no_current_disagreements"] + r["current_disagreements"] for r in results["backends"].values())
    if bad:
        print(f"ERROR: back-ends disagree on {bad} answers", file=sys.stderr)
        return 1
    return 0


def add_bench_sliders_args(p) -> None:
    p.add_argument("--db", required=True, help="database file (.npz)")
    p.add_argument("--scenarios", nargs="+", default=["scenarios/validation.list"],
                   help="scenario files, folders or .list files (default: scenarios/validation.list)")
    p.add_argument("--slider", default="responsiveness", help="responsiveness (default) or quality")
    p.add_argument("--steps", type=int, default=5, help="slider values from 0 to 1 (default 5: 0, 0.25, ... 1)")
    p.add_argument("--settings", default=None, help="settings file to start from (default: the runtime's)")
    p.add_argument("--workers", type=int, default=None, help="run the scenarios on a local cluster of N workers")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")


def run_bench_sliders(args) -> int:
    """`motionmatch bench sliders`: the sweep's table (or JSON)."""
    database_files(args.db)
    machine = machine_info()
    import numpy as np

    from ..devtools.sliders_bench import SLIDERS, falls_monotonically, slider_sweep
    from ..offline.quality import scenario_files
    from ..posedb.database import load_database
    from ..runtime.settings_file import load_settings, settings_from_dict
    if args.slider not in SLIDERS:
        raise ValueError(f"--slider: expected one of {', '.join(SLIDERS)}, got {args.slider!r}")
    if args.steps < 2:
        raise ValueError("--steps must be at least 2")
    paths = scenario_files(args.scenarios)
    channels = list(load_database(args.db).features.schema.names)
    base = load_settings(args.settings, channels) if args.settings else settings_from_dict({})
    values = np.linspace(0.0, 1.0, args.steps)
    rows = slider_sweep(args.db, paths, base, args.slider, values, args.workers,
                        log=lambda s: print(s, file=sys.stderr))
    result = {"slider": args.slider, "scenarios": [p.stem for p in paths], "rows": rows,
              "responsiveness_s_falls_monotonically": falls_monotonically(rows), "machine": machine}
    if args.json:
        print(json.dumps(result))
        return 0
    keys = [k for k in rows[0] if k not in (args.slider, "responsiveness_s_per_scenario")]
    print(f"| {args.slider} | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for r in rows:
        print(f"| {r[args.slider]:.2f} | " + " | ".join(f"{r[k]:.3f}" for k in keys) + " |")
    print(f"responsiveness_s falls monotonically: {'yes' if result['responsiveness_s_falls_monotonically'] else 'no'}")
    return 0


def run_bench_interop(args) -> int:
    """`motionmatch bench interop`: one row per round trip; exit status 1 when any is over 1 mm."""
    import tempfile

    from ..posedb.datapaths import find_data
    from ..devtools.interop import interop_report
    from ..io.bvh import read_bvh, write_bvh
    if args.agents < 1:
        raise ValueError(f"--agents: at least 1, got {args.agents}")
    if args.model is not None:
        existing_file(args.model, "--model", "rigged model (.glb)")
    machine = machine_info()
    with tempfile.TemporaryDirectory(prefix="motionmatch-interop-") as tmp:
        bvh = Path(args.bvh) if args.bvh else None
        if bvh is None:
            take = read_bvh(find_data("jlpm22-locomotion", args.data) / "locomotion_take1.bvh")
            take.positions, take.rotations = take.positions[600:720], take.rotations[600:720]
            bvh = Path(tmp) / "walk.bvh"
            write_bvh(bvh, take)
        rows = interop_report(bvh, tmp, model=args.model, agents=args.agents)
    if args.json:
        print(json.dumps({"checks": rows, "machine": machine}, indent=1))
    else:
        for r in rows:
            if "errors" in r:           # a checker's row
                print(f"{'ok  ' if r['ok'] else 'FAIL'} {r['check']:60s} {r['errors']} errors, {r['warnings']} warnings")
                for m in r["findings"]:
                    print(f"       {m}")
                continue
            err = "-" if r["error_mm"] is None else f"{r['error_mm']:.4f} mm"
            print(f"{'ok  ' if r['ok'] else 'FAIL'} {r['check']:60s} max joint error {err:>12s}  frames "
                  f"{r['frames'][0]}/{r['frames'][1]}")
    return 0 if all(r["ok"] for r in rows) else 1


def run_bench_serve(args) -> int:
    from ..devtools.soak import soak, soak_visits, table
    machine = machine_info()
    if args.crowd is not None:
        return _bench_serve_crowd(args, machine)
    if not 1 <= args.pages <= 1000:
        raise ValueError(f"--pages: expected 1..1000, got {args.pages}")
    visit = args.visit if args.visit is not None else 2.0 if args.soak else 20.0
    if not (0.5 if args.soak else 1.0) <= visit <= 3600:
        raise ValueError(f"--visit: expected {0.5 if args.soak else 1}..3600 seconds, got {visit}")
    progress = None if args.json else print
    if args.soak:
        if args.minutes is not None:
            raise ValueError("--minutes: a --soak is as long as its --visits")
        if not 2 * args.pages <= args.visits <= 10_000_000:
            raise ValueError(f"--visits: expected {2 * args.pages}..10000000 (at least two rounds of --pages), "
                             f"got {args.visits}")
        result = soak_visits(args.db, visits=args.visits, pages=args.pages, visit_s=visit,
                             record=not args.no_record, max_sessions=args.max_sessions, progress=progress,
                             seed=args.seed)
    else:
        minutes = 5.0 if args.minutes is None else args.minutes
        if not 0 < minutes <= 24 * 60:
            raise ValueError(f"--minutes: expected more than 0 and at most 1440, got {minutes}")
        result = soak(args.db, pages=args.pages, seconds=60.0 * minutes, visit_s=visit,
                      record=not args.no_record, max_sessions=args.max_sessions, progress=progress, seed=args.seed)
    print(json.dumps({**result.to_dict(), "machine": machine}) if args.json else table(result))
    return 0


def _bench_serve_crowd(args, machine: dict) -> int:
    from ..devtools.crowd_soak import crowd_soak, crowd_table
    from ..app.crowd.world import MAX_AGENTS
    if not 1 <= args.crowd <= MAX_AGENTS:
        raise ValueError(f"--crowd: expected 1..{MAX_AGENTS} agents, got {args.crowd}")
    minutes = 5.0 if args.minutes is None else args.minutes
    if not 0 < minutes <= 60:
        raise ValueError(f"--minutes: expected more than 0 and at most 60 with --crowd, got {minutes}")
    d = crowd_soak(args.db, args.crowd, seconds=60.0 * minutes, seed=args.seed)
    print(json.dumps({**d, "machine": machine}) if args.json else crowd_table(d))
    return 0


def _crowd_threads(value):
    if value == "auto":
        return value
    try:
        k = int(value)
    except ValueError:
        k = 0
    if k < 1:
        raise ValueError(f"--threads: expected 'auto' or a positive integer, got {value!r}")
    return k


def _crowd_table(rows) -> None:
    print(f"{'n':>6s} {'median ms':>10s} {'p99 ms':>10s} {'CPU ms':>8s} {'us/char':>9s} {'searches/tick':>14s} {'state B/char':>13s} "
          f"{'DB B/frame':>11s} {'parallel':>9s}  share of tick: search / playback / output / controller")
    for r in rows:
        sh = r["stage_share"]
        print(f"{r['n']:6d} {r['tick_ms']['median']:10.3f} {r['tick_ms']['p99']:10.3f} {r['tick_cpu_ms']['median']:8.3f} "
              f"{r['us_per_character']:9.2f} {r['searches_per_tick']:14.2f} {r['bytes_per_character']:13d} "
              f"{r['database_bytes_per_frame']:11.0f} "
              f"{r['parallel_tick_share']:9.2f}  {sh['search']:.2f} / {sh['playback']:.2f} / {sh['output']:.2f} / "
              f"{sh['controller']:.2f}")


def run_bench_crowd(args) -> int:
    if args.plot:
        output_suffix(args.plot, PLOT_SUFFIXES, "--plot", "bench crowd")
    if args.db:
        database_files(args.db)
    machine = machine_info()
    import numba
    from ..devtools.crowd_plot import plot_crowd_curves
    from ..posedb.database import load_database
    from ..devtools.crowd_bench import bench_contention, bench_crowd
    if args.from_json:
        if not args.plot:
            raise ValueError("--from-json needs --plot PNG")
        print(plot_crowd_curves([json.loads(Path(f).read_text()) for f in args.from_json], args.plot))
        return 0
    if not args.db:
        raise ValueError("--db: required (unless --from-json)")
    try:
        sizes = [int(v) for v in str(args.n).split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--n: expected comma-separated integers, got {args.n!r}") from None
    if not sizes or min(sizes) < 1:
        raise ValueError(f"--n: crowd sizes must be positive integers, got {args.n!r}")
    if not args.seconds > 0:
        raise ValueError(f"--seconds: must be positive, got {args.seconds}")
    threads = _crowd_threads(args.threads)
    db = load_database(args.db)
    keys = ("n", "tick_ms", "tick_cpu_ms", "us_per_character", "searches_per_tick", "stage_share", "parallel_tick_share",
            "bytes_per_character", "database_bytes_per_frame")
    contention = None
    if args.contention:
        contention = bench_contention(db, sizes, args.seconds, args.seed, progress=not args.json)
        rows = contention["by_threads"]["auto"]
    else:
        rows = bench_crowd(db, sizes, args.seconds, args.seed, progress=not args.json, threads=threads)
    out = {"database": str(args.db), "threads": int(numba.get_num_threads()), "frames": int(db.num_frames),
           "thread_choice": "auto" if args.contention else threads,
           "results": [{k: r[k] for k in keys} for r in rows], "machine": machine}
    if contention is not None:
        out["contention"] = {"busy_core": contention["busy_core"],
                             "by_threads": {t: [{k: r[k] for k in keys} for r in rs]
                                            for t, rs in contention["by_threads"].items()}}
    if args.plot:
        plot_crowd_curves([out], args.plot)
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{db.num_frames} database frames, up to {out['threads']} threads, random-goal crowds, "
          f"{args.seconds:g} s timed")
    if contention is None:
        print(f"threads: {threads}")
        _crowd_table(rows)
        return 0
    print(f"a process spins on core {contention['busy_core']} throughout")
    for t, rs in contention["by_threads"].items():
        print(f"threads: {t}")
        _crowd_table(rs)
    return 0


def run_bench_quality(args) -> int:
    database_files(args.db)
    machine = machine_info()
    from ..posedb.database import load_database
    from ..offline.quality import quality_runs, scenario_files

    paths = scenario_files(args.scenarios)
    if args.json and not args.compare and any(p.stem == "machine" for p in paths):
        raise ValueError("--scenarios: a scenario named 'machine' would take the JSON's \"machine\" key; rename it")
    db = load_database(args.db)
    rs = runtime_settings_from_args(args, db)
    rows = quality_runs(args.db, paths, rs, args.style, args.workers, args.address, args.out)
    if args.compare:
        from ..runtime.settings_file import load_settings
        from ..offline.tuning import compare_runs
        before = quality_runs(args.db, paths, load_settings(args.compare, list(db.features.schema.names)),
                              args.style, args.workers, args.address)
        better, lines = compare_runs(before, rows, f"{args.compare} -> {args.settings or 'defaults'}")
        print(json.dumps({"before": before, "after": rows, "better": better, "machine": machine}, indent=1)
              if args.json else "\n".join(lines))
        return 0
    if args.json:
        # Every other key is a scenario's name (a scenario named "machine" is refused above).
        print(json.dumps({**rows, "machine": machine}, indent=1))
        return 0
    head = ["scenario", "NaN", "slide", "src", "traj mean", "traj p95", "traj max", "head p95", "resp s",
            "trans/s", "vel ok", "face ok", "twist p95", "twist max", "shoulder ok", "pops", "knee/src",
            "knee/gait", "toe cm/src", "lean p95", "outside", "out gait", "styles/min", "idle settle", "idle alive",
            "idle loop", "search med", "frame med", "frame p99"]
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
    """The bench quality table's appearance cells (README "Metrics"): knee against the main actor's
    (pooled, and at the output's gaits: posture_gait), planted toe against the actor's, trunk lean p95,
    share outside the actor's range (pooled, at the gaits), style switches, and the worst idle stretch
    (slowest settle, least alive, shortest loop; "none" without a loop)."""
    from ..offline.tuning import look_summary

    def pair(k, fmt):
        a, b = m["posture"][k], m["posture_source"][k]
        return "-" if a is None else f"{a:{fmt}}/{b:{fmt}}"
    idle = look_summary(m)
    settled = [e for e in m["idle"] if e["alive_cm_s"] is not None]
    loops = [e["shortest_loop_s"] for e in settled if e["shortest_loop_s"] is not None]
    gait = m.get("posture_gait") or {}
    at_gait = "-" if gait.get("knee_actor_deg") is None else f"{gait['knee_deg']:.0f}/{gait['knee_actor_deg']:.0f}"
    return [pair("knee_deg", ".0f"), at_gait, pair("planted_toe_cm", ".1f"), f"{m['posture']['trunk_lean_deg']['p95']:.0f}",
            f"{m['posture']['outside_source']:.2f}",
            "-" if gait.get("outside_source") is None else f"{gait['outside_source']:.2f}",
            f"{m['style']['switches_per_min']:.0f}",
            "-" if idle["idle_settle_s"] is None else f"{idle['idle_settle_s']:.2f}",
            "-" if idle["idle_alive_cm_s"] is None else f"{idle['idle_alive_cm_s']:.1f}",
            "-" if not settled else f"{min(loops):.2f}" if loops else "none"]


def run_bench_runtime(args) -> int:
    database_files(args.db)
    machine = machine_info()
    import numpy as np
    from ..posedb.database import load_database
    from ..offline.scenario import random_scenario
    from ..offline.synth import run_scenario
    db = load_database(args.db)
    scen = random_scenario(args.seconds, seed=args.seed)
    rs = runtime_settings_from_args(args, db)
    run_scenario(db, random_scenario(2.0, seed=args.seed + 1), rs.character,
                 controller_settings=rs.controller)   # JIT warm-up, not timed
    rec = run_scenario(db, scen, rs.character, controller_settings=rs.controller)
    t = rec["timing"]
    out = {"machine": machine, "frames": len(t), "db_frames": db.num_frames, "searches": len(rec["search_us"]),
           "note": "JIT warm-up excluded (a 2 s run first); search_us counts only frames that searched"}
    for i, name in enumerate(("controller", "search", "inertialization", "pose_output")):
        col = t[:, i] if name != "search" else rec["search_us"]
        col = col if len(col) else np.zeros(1)
        out[f"{name}_us"] = {"median": round(float(np.median(col)), 2), "p99": round(float(np.percentile(col, 99)), 2),
                             "mean": round(float(np.mean(col)), 2)}
    # A searching frame's search stage split: the searcher's calls (the kernel, as `bench search` times it) and
    # the work around them (plan, prediction, query, normalization, bookkeeping, transition).
    calls = rec["search_calls_us"] if len(rec["search_us"]) else np.zeros(1)
    around = rec["search_us"] - rec["search_calls_us"] if len(rec["search_us"]) else np.zeros(1)
    for name, col in (("search_calls", calls), ("search_around", around), ("frame", rec["frame_us"])):
        out[f"{name}_us"] = {"median": round(float(np.median(col)), 2), "p99": round(float(np.percentile(col, 99)), 2),
                             "mean": round(float(np.mean(col)), 2)}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"one character, {out['frames']} frames of random input on {db.num_frames} database frames "
              f"({out['searches']} searches); JIT warm-up excluded")
        print(f"{'stage':18s} {'median us':>10s} {'p99 us':>10s} {'mean us':>10s}")
        for k in ("controller_us", "search_us", "search_calls_us", "search_around_us", "inertialization_us",
                  "pose_output_us", "frame_us"):
            v = out[k]
            print(f"{k[:-3]:18s} {v['median']:10.1f} {v['p99']:10.1f} {v['mean']:10.1f}")
    return 0


def add_bench_fuzz_args(parser) -> None:
    parser.add_argument("--data", help="folder of BVH files to mutate (default: a few files of the shared sets)")
    parser.add_argument("--files", type=int, default=5, help="BVH files to mutate (default 5)")
    parser.add_argument("--mutants", type=int, default=1200, help="mutants per BVH file (default 1200)")
    parser.add_argument("--db", help="database to damage (default: the cached default database)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")


def _fbx_campaign(bvh: Path, tmp: Path):
    """Damaged copies of a Blender-made FBX of `bvh` (devtools/fuzz_fbx.py), None without Blender's environment."""
    from ..devtools.fuzz_fbx import damaged_fbx, fuzz_fbx_clips
    from ..devtools.interop import make_fbx
    from ..io.fbx import blender_python
    py = blender_python()
    if py is None or not py.exists():
        return None
    tmp.mkdir(parents=True, exist_ok=True)
    return fuzz_fbx_clips(damaged_fbx(make_fbx(bvh, tmp / "base.fbx").read_bytes(), tmp / "damaged"))


def run_bench_fuzz(args) -> int:
    """`motionmatch bench fuzz`: all campaigns; exit status 1 when any finding (other exceptions or
    silent accepts) remains."""
    import tempfile

    from ..devtools.fuzz import damaged_databases, fuzz_bvh, fuzz_databases, fuzz_scenarios
    from ..devtools.fuzz_rigs import door_campaigns
    from ..posedb.database import build_default_database
    from ..posedb.datapaths import find_data, list_bvh_files

    if args.data:
        files = list_bvh_files([Path(args.data)])
    else:
        files = list_bvh_files([find_data("bandai-namco", None)])[::200]
    # Small files: a mutant of a 30 MB take costs seconds, and the reader's paths are the same.
    files = [f for f in files if f.stat().st_size < 2_000_000][:args.files]
    machine = machine_info()
    db_path = Path(args.db) if args.db else build_default_database(progress=not args.json)
    with tempfile.TemporaryDirectory() as tmp:
        report = {
            "bvh": fuzz_bvh(files, args.mutants, args.seed, tmp, progress=not args.json).as_dict(),
            "database": fuzz_databases(damaged_databases(db_path, tmp)).as_dict(),
            "scenario": fuzz_scenarios(tmp).as_dict(),
            **{k: v.as_dict() for k, v in door_campaigns(db_path, files[0], Path(tmp)).items()},
        }
        fbx = _fbx_campaign(files[0], Path(tmp) / "fbx")
        if fbx is not None:
            report["FBX clips (build)"] = fbx.as_dict()
        elif not args.json:
            print("FBX clips: not run (no Blender environment: `make blender`, docs/IMPORTING.md)")
    report["bvh"]["files"] = [f.name for f in files]
    if args.json:
        print(json.dumps({**report, "machine": machine}, indent=1))
    else:
        print(f"{'door':24s} {'inputs':>7s} {'clean':>7s} {'accepted':>8s} {'tracebacks':>10s} {'silent':>6s} "
              f"{'hangs':>5s} {'blow-ups':>8s}")
        for name, r in report.items():
            print(f"{name:24s} {r['inputs']:7d} {r['clean_errors']:7d} {r['accepted']:8d} {r['other_exceptions']:10d} "
                  f"{r['silent_accepts']:6d} {r['hangs']:5d} {r['memory_blowups']:8d}")
            for ex in r["examples"]:
                print(f"    {ex}")
    findings = sum(r["other_exceptions"] + r["silent_accepts"] + r["hangs"] + r["memory_blowups"]
                   for r in report.values())
    return 1 if findings else 0
