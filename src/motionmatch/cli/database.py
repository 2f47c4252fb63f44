"""`motionmatch build` (a pose database from motion files or folders) and `motionmatch info` (its summary)."""
from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path

from .inputs import database_file, existing_path
from .outputs import output_suffix
from .options import add_engine_options


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
    an = s.get("annotations") or {}
    if an:
        print(f"annotations: {sum(an.values())}: " + ", ".join(f"{k} {v}" for k, v in an.items()), file=file)
    print(f"size:       {_human_bytes(s['bytes'])}", file=file)
    if s.get("build_seconds") is not None:
        print(f"build time: {s['build_seconds']:.2f} s", file=file)


def _warn(msg: str) -> None:
    print(f"warning: {msg}", file=sys.stderr)


def _add_build(sub) -> None:
    p = sub.add_parser("build", help="build a pose database from motion files (BVH, glTF, FBX) or folders")
    p.add_argument("data", nargs="*", help="motion files (.bvh, .glb: every animation a clip; .fbx with Blender, "
                                           "docs/IMPORTING.md) or folders of them (default: the jlpm22 locomotion set)")
    p.add_argument("-o", "--out", help="database file to write (.npz; required unless --default)")
    p.add_argument("--default", choices=("actions", "bandai"), default=None,
                   help="build (once) a default database into the cache: `actions` = the mixed default set plus "
                        "Bandai-Namco dataset-1 actions tagged action:NAME, with time-to-event channels "
                        "(docs/ACTIONS.md); `bandai` = every Bandai-Namco walk, turn, run and dash clip on its own "
                        "skeleton, bandai-locomotion.npz (docs/BANDAI.md) (both CC BY-NC 4.0: non-commercial)")
    p.add_argument("--events", metavar="FILE",
                   help="event annotation sidecar (TOML [[event]] or JSON: clip, time or frame, type, tags)")
    p.add_argument("--annotations", metavar="FILE",
                   help="annotation windows sidecar (TOML [[annotation]] or JSON: clip, kind block_transitions | "
                        "exclude | cost_bias | branch_in | loop, time or frame range, cost; docs/ANNOTATIONS.md)")
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
                        "side-steps, Bandai-Namco's normal backward walk, retargeted onto the jlpm22 skeleton)")
    add_engine_options(p, "files")
    p.set_defaults(func=run_build)


@contextlib.contextmanager
def _build_map(args):
    """The map a build spreads its files with: over the distributed engine with --workers/--address
    (a local cluster started and stopped here, or a running one), else None (build_database's own)."""
    if not (args.workers or args.address):
        yield None
        return
    from ..offline.cluster import open_client, ordered_map
    with open_client(args.workers, args.address) as client:
        yield lambda fn, chunks: ordered_map(client, fn, chunks)


def run_build(args) -> int:
    if args.out:
        output_suffix(args.out, (".npz",), "-o", "build")
    for root in args.data or ():
        existing_path(root, "", "file or folder")
    from ..posedb.database import BuildSettings, build_database, default_weights, save_database
    from ..posedb.datapaths import find_data, list_bvh_files, mixed_default_files, print_licences, source_tags
    from ..posedb.features import default_schema, load_schema
    from ..motion.skeleton import SkeletonError, load_mapping
    from ..motion.styles import parse_style_tags

    t0 = time.perf_counter()
    if args.default and args.style_tags is not None:
        raise ValueError("--style-tags: not with --default (a default database takes the default style tags)")
    if args.default and args.annotations:
        raise ValueError("--annotations: not with --default (build the files with -o FILE to annotate them)")
    if args.default:
        from ..posedb.database import build_default_database, load_database
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
                             annotations=args.annotations,
                             style_tags=None if args.style_tags is None else parse_style_tags(args.style_tags))
    mixed = not args.data and not args.jlpm22_only    # the mixed default set: its tuned weights
    kind = "mixed" if mixed else None
    schema = load_schema(args.schema) if args.schema else default_schema().with_weights(default_weights(kind))
    with _build_map(args) as map_chunks:
        try:
            db = build_database(files, settings, schema, progress=not args.quiet, map_chunks=map_chunks)
        except SkeletonError as e:      # roles no body has: the map gave them
            raise SkeletonError(f"--map {args.mapping}: {e}" if args.mapping else str(e)) from None
    save_database(db, args.out)
    db.meta["build_seconds"] = round(time.perf_counter() - t0, 3)
    print(f"wrote {args.out}")
    print_summary(db.summary())
    if db.meta.get("skipped"):
        print(f"skipped:    {len(db.meta['skipped'])} bad file(s) (see warnings above)")
    return 0


def _add_info(sub) -> None:
    p = sub.add_parser("info", help="print a database's summary")
    p.add_argument("db")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_info)


def run_info(args) -> int:
    database_file(args.db, "")
    from ..posedb.database import load_database
    t0 = time.perf_counter()
    db = load_database(args.db)
    s = db.summary()
    s["load_seconds"] = round(time.perf_counter() - t0, 3)
    if args.json:
        print(json.dumps(s, indent=1))
    else:
        print_summary(s)
        print_annotations(db)
        print(f"load time:  {s['load_seconds']:.3f} s")
    return 0


def print_annotations(db, limit: int = 40, file=None) -> None:
    """One line per annotated range (the first `limit`): kind, clip, seconds from the clip's start, cost."""
    a = db.annotations
    for i in range(min(len(a), limit)):
        r = int(a.clips[i])
        t0, t1 = (int(x) - int(db.range_starts[r]) for x in (a.starts[i], a.stops[i]))
        cost = f" cost {a.costs[i]:+g}" if a.kinds[i] == "cost_bias" else ""
        print(f"  {a.kinds[i]:<17} {db.range_names[r]}  {t0 / db.fps:.2f}-{t1 / db.fps:.2f} s "
              f"(frames {t0}-{t1 - 1}){cost}  [annotation {int(a.entries[i])}]", file=file or sys.stdout)
    if len(a) > limit:
        print(f"  ... {len(a) - limit} more (motionmatch info --json)", file=file or sys.stdout)


def register(sub) -> None:
    _add_build(sub)
    _add_info(sub)
