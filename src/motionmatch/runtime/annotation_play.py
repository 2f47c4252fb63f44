"""The matcher's side of a database's annotations (posedb/annotations.py, docs/ANNOTATIONS.md): no search while the
playhead is inside a block_transitions range, a loop range's end continues at its start. The search's side
(costs, frames not to enter, excluded frames) is the searcher's FrameRules (runtime/search_sets.py).
"""
from __future__ import annotations

import numpy as np

from ..posedb.annotations import frame_rules, playhead_rules


class AnnotationRules:
    """A database's compiled annotations, shared by every character on it: `search` (FrameRules or None),
    `blocked` bool (N,) or None, `loop_to` int64 (N,) or None (annotations.playhead_rules)."""

    def __init__(self, db):
        ann = db.annotations
        self.search = frame_rules(ann, db.range_starts, db.range_stops, db.num_frames)
        self.blocked, self.loop_to = playhead_rules(ann, db.num_frames)


def hold_blocked(blocked: np.ndarray, frame: np.ndarray, stop_of: np.ndarray, searching: np.ndarray) -> None:
    """Characters whose playhead is inside a block_transitions range do not search this tick (searching
    (n,) int64, written in place), unless their clip is about to run out (nothing left to play)."""
    f = frame
    held = (searching != 0) & blocked[f] & (f + 1 < stop_of[f] - 1)
    searching[held] = 0


def loop_wraps(loop_to: np.ndarray, frame: np.ndarray, clip_hold: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(agents, their loop ranges' first frames): characters whose playhead reached the end of a loop range
    (and plays no held clip) and continue at its start."""
    dest = loop_to[frame]
    agents = np.flatnonzero((dest >= 0) & ~clip_hold)
    return agents, dest[agents]
