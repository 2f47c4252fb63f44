"""Database sets: named parts of a database a character searches, each with its own channel weights
(locomotion, actions, idles: a tag expression and weights over the character's own), switched by gameplay
with an interrupt mode (Crowd.use_set: search now, or at the next search). A set's normalized features and
searcher are the shared SearchSet of its weights (runtime/search_sets.py); its clips are a prepared tag mask.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

MAX_SETS = 64
MAX_NAME_CHARS = 64
MAX_WEIGHT = 1e4


@dataclass(frozen=True)
class SetSpec:
    """One database set: `name`, `tags` (a tag expression, None: every clip) and channel `weights`
    (channel name -> weight >= 0, over the character's own)."""

    name: str
    tags: str | None = None
    weights: dict = field(default_factory=dict)


def parse_sets(data, where: str = "sets", error=ValueError) -> dict[str, SetSpec]:
    """Sets from {"NAME": {"tags": "walk | run" | null, "weights": {"CHANNEL": w, ...}}, ...}; `error`
    (a ValueError subclass) names the field. Channel names are checked when a set is used."""
    if not isinstance(data, dict) or not data or len(data) > MAX_SETS:
        raise error(f"{where}: expected an object of 1 to {MAX_SETS} named sets")
    out = {}
    for name, d in data.items():
        w = f"{where}.{name}"
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_CHARS:
            raise error(f"{where}: set names are strings of 1 to {MAX_NAME_CHARS} characters")
        if not isinstance(d, dict) or set(d) - {"tags", "weights"}:
            raise error(f"{w}: expected an object with optional 'tags' and 'weights'")
        tags = d.get("tags")
        if tags is not None and (not isinstance(tags, str) or len(tags) > 1024):
            raise error(f"{w}.tags: expected a tag expression string (at most 1024 characters) or null")
        weights = d.get("weights", {})
        if not isinstance(weights, dict) or len(weights) > 256 or not all(
                isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
                and math.isfinite(v) and 0.0 <= v <= MAX_WEIGHT for k, v in weights.items()):
            raise error(f"{w}.weights: expected channel names with weights in [0, {MAX_WEIGHT:g}]")
        out[name] = SetSpec(name, tags or None, {k: float(v) for k, v in weights.items()})
    return out
