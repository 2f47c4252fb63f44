"""VR orientation model files (`serve --vr-model`, `synth --trackers --vr-model`): what a careless or hostile
file gets is one error naming the file, the field and the accepted range."""
from __future__ import annotations

import numpy as np
import pytest

from motionmatch.vr.orientation import NUM_NETWORK_INPUTS, OrientationNetwork, load_networks, save_networks


def _save(path, outputs=2, hidden=8):
    rng = np.random.default_rng(3)
    net = OrientationNetwork([rng.normal(0, 0.1, (NUM_NETWORK_INPUTS, hidden)), rng.normal(0, 0.1, (hidden, outputs))],
                             [np.zeros(hidden), np.zeros(outputs)], np.zeros(NUM_NETWORK_INPUTS),
                             np.ones(NUM_NETWORK_INPUTS), 4)
    save_networks(path, {"network": net})
    return path


def test_the_last_layer_must_give_the_two_facing_values(tmp_path):
    assert load_networks(_save(tmp_path / "ok.npz"))["network"].weights[-1].shape == (8, 2)
    for outputs in (1, 3):
        f = _save(tmp_path / f"out{outputs}.npz", outputs)
        with pytest.raises(ValueError, match=rf"out{outputs}.npz: field network/w1: the last layer has {outputs} "
                                             r"outputs, expected 2 \(the body's facing x, z\)"):
            load_networks(f)


def test_a_forged_weight_header_is_refused_by_name(tmp_path):
    from motionmatch.devtools.fuzz_models import _forged_header
    f = _save(tmp_path / "vr.npz")
    with np.load(f) as z:
        members = {k: np.array(z[k]) for k in z.files}
    _forged_header(tmp_path / "forged.npz", members, "network/w0")
    with pytest.raises(ValueError, match=r"forged.npz: member 'network/w0.npy': its header declares a "
                                         r"10000000x10000000 float32 array of 400,000,000,000,000 bytes"):
        load_networks(tmp_path / "forged.npz")
