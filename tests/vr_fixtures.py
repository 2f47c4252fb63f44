"""Tracker-driven test helpers shared by the VR tests."""
from __future__ import annotations

import numpy as np

from motionmatch.vr.orientation import NUM_NETWORK_INPUTS, OrientationNetwork


def hmd_forward_network() -> OrientationNetwork:
    """An untrained network that always answers the HMD's forward (zero weights, output bias (0, 1)):
    the body facing is then the HMD's, a poor but valid driver."""
    sizes = [NUM_NETWORK_INPUTS, 32, 32, 2]
    weights = [np.zeros((a, b)) for a, b in zip(sizes[:-1], sizes[1:])]
    biases = [np.zeros(b) for b in sizes[1:]]
    biases[-1][:] = (0.0, 1.0)
    return OrientationNetwork(weights, biases, np.zeros(NUM_NETWORK_INPUTS), np.ones(NUM_NETWORK_INPUTS), 1)
