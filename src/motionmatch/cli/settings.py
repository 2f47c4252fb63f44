"""`motionmatch settings`: the settings schema (runtime/settings_schema.py), every setting with its table,
key, type, unit, bounds, default and doc; `--json` prints it as the server's GET /api/settings/schema."""
from __future__ import annotations

import json

from ..runtime.settings_schema import database_weights, describe
from .inputs import database_file


def register(sub) -> None:
    p = sub.add_parser("settings", help="every setting: table, key, type, unit, bounds, default, doc")
    p.add_argument("--json", action="store_true",
                   help="print exactly one JSON object {table: {key: {type, min, max, default, unit, doc, ...}}}")
    p.add_argument("--db", default=None,
                   help="list this database's feature channels (and their weights as defaults) under "
                        "weights (default: one '*' row that bounds every channel)")
    p.set_defaults(func=run_settings)


def run_settings(args) -> int:
    weights = None
    if args.db:
        database_file(args.db)
        from ..posedb.database import load_database
        weights = database_weights(load_database(args.db))
    schema = describe(weights)
    if args.json:
        print(json.dumps(schema))
        return 0
    for table, rows in schema.items():
        print(f"[{table}]")
        for key, r in rows.items():
            bounds = (f"{r['min']:g} .. {r['max']:g}" if "min" in r else " | ".join(map(str, r.get("choices", ())))
                      or r["type"])
            print(f"  {key:30s} {bounds:34s} {r['unit']:6s} default {r['default']!r}: {r['doc']}")
    return 0
