"""`motionmatch generate`: a labelled motion dataset from a spec (offline/dataset.py, docs/datasets.md)."""
from __future__ import annotations

import json
from pathlib import Path

from .inputs import database_file, existing_file
from .options import add_engine_options, database_path


def register(sub) -> None:
    p = sub.add_parser("generate", help="a labelled motion dataset from a spec (TOML or JSON), on Dask")
    p.add_argument("spec", help="dataset spec: sequences, duration_s, seed, styles, drivers, layout "
                                "(docs/datasets.md)")
    p.add_argument("-o", "--out", required=True,
                   help="output folder; a folder holding a dataset of the same spec is resumed")
    p.add_argument("--db", help="database file (default: build or reuse the cached default database)")
    p.add_argument("--jlpm22-only", action="store_true",
                   help="without --db: the jlpm22-only default database instead of the mixed default")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--quiet", action="store_true", help="print nothing but errors")
    out.add_argument("--json", action="store_true", help="print exactly one JSON object (the run's summary)")
    add_engine_options(p, "sequences")
    p.set_defaults(func=run_generate)


def run_generate(args) -> int:
    from ..offline.dataset import generate, load_spec
    from ..posedb.database import load_database

    spec_path = existing_file(args.spec, "SPEC", "dataset spec file (.toml or .json)")
    load_spec(spec_path)                          # every field but the styles, before the database is made
    if args.db:
        database_file(args.db)
    db_path = database_path(args.db, progress=not (args.quiet or args.json), mixed=not args.jlpm22_only).resolve()
    spec = load_spec(spec_path, load_database(db_path).range_tags)
    summary = generate(spec, db_path, Path(args.out), args.workers, args.address,
                       progress=not (args.quiet or args.json))
    if args.json:
        print(json.dumps(summary))
    elif not args.quiet:
        print(f"{summary['sequences']} sequences in {args.out} ({summary['made']} made, {summary['kept']} kept from "
              f"an earlier run) in {summary['seconds']:.1f} s on {summary['workers']} worker(s); manifest.csv, "
              f"README.md")
    return 0
