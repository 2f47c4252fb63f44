"""StageCalls: the compiled stage's own result, and arguments of another kind typed again (never handed to
the entry point compiled for the first kind)."""
from typing import NamedTuple

import numba
import numpy as np

from motionmatch.runtime.stage_calls import StageCalls


class Pair(NamedTuple):
    a: np.ndarray
    b: np.ndarray


@numba.njit
def _weighted(p, k, out):
    for i in range(out.shape[0]):
        out[i] = p.a[i] * k + p.b[i]
    return out.shape[0]


def test_stage_calls_match_the_dispatcher_and_retype_new_kinds():
    calls = StageCalls()
    p = Pair(np.arange(4.0), np.ones(4))
    out, ref = np.zeros(4), np.zeros(4)
    assert calls(_weighted, p, 2.0, out) == _weighted(p, 2.0, ref) == 4
    np.testing.assert_array_equal(out, ref)
    assert calls(_weighted, p, 3.0, out) == 4          # a new float object: same kind, no new typing
    np.testing.assert_array_equal(out, [1.0, 4.0, 7.0, 10.0])
    assert len(calls.typed) == 1
    # Another record of int arrays, a float32 output: typed and compiled for them, not read as float64.
    q = Pair(np.arange(3), np.full(3, 5))
    out32 = np.zeros(3, np.float32)
    assert calls(_weighted, q, 2, out32) == 3
    np.testing.assert_array_equal(out32, [5.0, 7.0, 9.0])
    assert len(calls.typed) == 2 and len(_weighted.signatures) == 2
    # A strided view is not C-contiguous: typed again (layout 'A').
    wide = np.zeros(8)
    calls(_weighted, p, 1.0, wide[::2])
    np.testing.assert_array_equal(wide[::2], [1.0, 2.0, 3.0, 4.0])
    assert wide[1::2].sum() == 0.0 and len(calls.typed) == 3
