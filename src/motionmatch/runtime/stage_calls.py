"""Calls into the compiled stages without numba typing their arguments on every call.

numba's dispatcher types every argument of every call to find the compiled overload. A named tuple
(a runtime record: playback.Frames, touchups.Feet, ...) is typed from a fingerprint of its class
name, field names and fields, slower than a plain tuple (numba 0.68): a one-character tick passes
some twenty records and was 1.7x slower than with plain tuples. A crowd builds its records once and
only writes the arrays inside them, so `StageCalls` remembers, per stage, the entry point of the
overload compiled for the arguments it was given (the function numba's dispatcher itself calls) and
calls it directly when the very same objects come back; other arguments are typed by their kind
(records by identity, arrays by dtype, dimensions and layout, scalars by type), and only new kinds
go through numba's typing (and compilation if need be).
"""
from __future__ import annotations

import numpy as np

# Argument sets remembered before all are forgotten (a crowd passes the same few every tick; a new
# array of agents per search adds one).
REMEMBERED = 64
_VOID = np.dtype([("x", np.float64)]).num


def _kind(a):
    """What numba's type of argument `a` depends on: a record (any object but an array or a scalar)
    by its identity, since a crowd's records never change; an array by dtype, dimensions, layout,
    writeability and alignment; a scalar by its type."""
    t = type(a)
    if t is np.ndarray:
        f, d = a.flags, a.dtype
        # dtype objects hash slowly: their number identifies them, structured ones aside.
        return d.num if d.num != _VOID else d, a.ndim, f.c_contiguous, f.f_contiguous, f.writeable, f.aligned
    if t is float or t is int or t is bool or issubclass(t, np.generic):
        return t
    return id(a)


class StageCalls:
    """Per owner (a Crowd): `calls(stage, *args)` is `stage(*args)` for a numba-compiled stage, typing
    each kind of arguments once (module docstring)."""

    def __init__(self):
        # Both hold the arguments they saw, so the ids in their keys stay those objects' ids.
        self.typed = {}     # (stage, argument kinds) -> (entry point, arguments)
        self.seen = {}      # (stage, argument ids) -> (entry point, arguments)

    def __call__(self, stage, *args):
        hit = self.seen.get((stage, *map(id, args)))
        if hit is None:
            hit = self._resolve(stage, args)
        return hit[0](*args)

    def _resolve(self, stage, args):
        kinds = (stage, *map(_kind, args))
        typed = self.typed.get(kinds)
        if typed is None:
            if len(self.typed) >= REMEMBERED:
                self.typed.clear()
            typed = self.typed[kinds] = (stage.compile(tuple(map(stage.typeof_pyval, args))), args)
        if len(self.seen) >= REMEMBERED:
            self.seen.clear()
        hit = self.seen[(stage, *map(id, args))] = (typed[0], args)
        return hit
