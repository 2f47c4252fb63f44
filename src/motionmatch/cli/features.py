"""`motionmatch features export`: the feature matrix, ranges and realistic queries as raw files
(offline/features_export.py)."""
from __future__ import annotations

from .inputs import database_file


def add_features_export_args(parser) -> None:
    parser.add_argument("db", help="database file (.npz)")
    parser.add_argument("--out", required=True, help="folder to write")
    parser.add_argument("--queries", type=int, default=2000, help="number of queries (default 2000)")
    parser.add_argument("--noise", type=float, default=0.5,
                        help="trajectory noise in column standard deviations (default 0.5)")
    parser.add_argument("--end-exclude", type=int, default=20, help="frames at clip ends never sampled")
    parser.add_argument("--subset", type=int, metavar="N", help="only the first N frames")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-current", action="store_true", help="write -1 as every query's current frame")
    parser.add_argument("--query-source", choices=("runtime", "perturbed"), default="runtime",
                        help="runtime: queries a character made while driven by random input (default); "
                             "perturbed: real frames with noisy trajectory columns")


def run_features_export(args) -> int:
    """`motionmatch features export`: write the folder, print what it holds."""
    database_file(args.db, "")
    from ..offline.features_export import export_features
    meta = export_features(args.db, args.out, n_queries=args.queries, query_source=args.query_source,
                           noise=args.noise, end_exclude=args.end_exclude, subset=args.subset, seed=args.seed,
                           no_current=args.no_current)
    print(f"wrote {args.out}: {meta['N']} frames x {meta['F']} features, {meta['R']} ranges, "
          f"{meta['Q']} queries")
    return 0


def register(sub) -> None:
    p = sub.add_parser("features", help="feature matrix tools")
    fsub = p.add_subparsers(dest="features_cmd", metavar="WHAT")
    pe = fsub.add_parser("export", help="write features, ranges and realistic queries as raw files")
    add_features_export_args(pe)
    pe.set_defaults(func=run_features_export)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])
