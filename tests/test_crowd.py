"""The batched runtime: a crowd of one reproduces the recorded single character; agents are
independent; per-agent tag filters hold."""
from __future__ import annotations

import numpy as np
import pytest

from runtime_reference import REFERENCE, run, scenarios


@pytest.mark.parametrize("name", list(scenarios()))
def test_reproduces_recorded_character(jlpm_db, name):
    ref = np.load(REFERENCE)
    scenario, terrain = scenarios()[name]
    frames, pos = run(jlpm_db, scenario, terrain)
    np.testing.assert_array_equal(frames, ref[f"{name}_frames"])
    err = np.abs(pos - ref[f"{name}_positions"]).max()
    assert err < 1e-4, f"{name}: joint positions differ by {err:.2e} m"
