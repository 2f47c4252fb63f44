"""Style tags: the tags of a database that name a way of moving (a Bandai-Namco style such as `elderly`
or `chimpira`; `source:NAME`, the capture set and so its actor), and the styles a run plays.

A database stores its style tags (`motionmatch build --style-tags`); one built without them, or saved
before they existed, gets default_style_tags. A clip's styles are the style tags it carries.
"""
from __future__ import annotations

import numpy as np

from .preprocess import bandai_style

MIRRORED_SUFFIX = " (mirrored)"     # posedb/database.py names a mirrored clip after its file plus this
NO_STYLE = "none"                   # the `seconds` key of clips that carry no style tag


class StyleError(ValueError):
    """Style tags that do not fit a database; the message names the tag and the tags there are."""


def default_style_tags(range_names: list[str], range_tags: list[list[str]]) -> list[str]:
    """Every `source:NAME` tag and the style of every Bandai-Namco clip (parsed from its file name) that
    the clips carry, sorted."""
    out = set()
    for name, tags in zip(range_names, range_tags):
        out.update(t for t in tags if t.startswith("source:"))
        style = bandai_style(name.removesuffix(MIRRORED_SUFFIX))
        if style is not None and style in tags:
            out.add(style)
    return sorted(out)


def parse_style_tags(text: str) -> list[str]:
    """Style tags from `--style-tags TAG,...` (comma-separated, duplicates dropped; empty: none)."""
    return list(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))


def check_style_tags(style_tags: list[str], range_tags: list[list[str]]) -> None:
    """StyleError naming the first style tag no clip carries (BuildSettings.style_tags, --style-tags)."""
    known = sorted({t for ts in range_tags for t in ts})
    for t in style_tags:
        if t not in known:
            raise StyleError(f"style tag {t!r} (--style-tags) is no clip's tag; the clips carry: {', '.join(known)}")


def clip_styles(range_tags: list[list[str]], style_tags: list[str]) -> list[tuple[str, ...]]:
    """Per clip range, the style tags it carries (sorted)."""
    styles = set(style_tags)
    return [tuple(sorted(styles.intersection(tags))) for tags in range_tags]


def style_figures(frames: np.ndarray, range_stops: np.ndarray, styles: list[tuple[str, ...]], fps: float) -> dict:
    """The `style` dictionary of metrics.json from the database frame playing at each output frame (F,):
    "switches_per_min", changes of the playing clip's style tags per minute of output, and "seconds",
    {style tag: seconds played by clips carrying it} (a clip counts toward each of its tags; clips with
    none under "none")."""
    clips = np.searchsorted(range_stops, np.asarray(frames), side="right")
    ids = {s: i for i, s in enumerate(dict.fromkeys(styles))}
    per_clip = np.array([ids[s] for s in styles], dtype=np.int64)
    played = per_clip[clips]
    switches = int(np.count_nonzero(played[1:] != played[:-1]))
    seconds: dict[str, float] = {}
    for s, i in ids.items():
        n = int(np.count_nonzero(played == i))
        for tag in s or (NO_STYLE,):
            if n:
                seconds[tag] = seconds.get(tag, 0.0) + n / fps
    minutes = len(played) / fps / 60.0
    return {"switches_per_min": round(switches / minutes, 3) if minutes > 0 else 0.0,
            "seconds": {k: round(v, 3) for k, v in sorted(seconds.items())}}
