"""`motionmatch features export`: the feature matrix, ranges and realistic queries as raw files."""
from __future__ import annotations

from ..devtools.search_bench import add_features_export_args, run_features_export


def register(sub) -> None:
    p = sub.add_parser("features", help="feature matrix tools")
    fsub = p.add_subparsers(dest="features_cmd", metavar="WHAT")
    pe = fsub.add_parser("export", help="write features, ranges and realistic queries as raw files")
    add_features_export_args(pe)
    pe.set_defaults(func=run_features_export)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])
