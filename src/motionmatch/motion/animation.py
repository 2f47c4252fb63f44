"""Skeleton and animation containers: the data every stage passes along.

Units: metres and seconds. Quaternions (w, x, y, z). Y up.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..maths.kinematics import forward_kinematics


@dataclass
class Skeleton:
    """Joint hierarchy. Joints are ordered parents-first (index 0 is the root)."""

    names: list[str]
    parents: np.ndarray            # (J,) int, -1 for the root
    offsets: np.ndarray            # (J, 3) rest translation from the parent, metres
    end_sites: dict[int, np.ndarray] = field(default_factory=dict)  # joint -> End Site offset, metres
    channels: list[tuple[str, ...]] = field(default_factory=list)   # BVH channel names per joint

    @property
    def num_joints(self) -> int:
        return len(self.names)

    def index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(f"joint {name!r} not in skeleton ({', '.join(self.names)})") from None

    def children(self, j: int) -> list[int]:
        return [i for i, p in enumerate(self.parents) if p == j]


@dataclass
class Animation:
    """Local joint transforms over time.

    positions: (F, J, 3) local translations (metres; equal to the offsets except where a joint has
    position channels); rotations: (F, J, 4) local rotations; fps: frames per second.
    """

    skeleton: Skeleton
    positions: np.ndarray
    rotations: np.ndarray
    fps: float
    source: str = ""
    tags: list[str] = field(default_factory=list)
    name: str = ""                 # the clip's name when a file holds several (a glTF animation's name)

    @property
    def num_frames(self) -> int:
        return self.positions.shape[0]

    @property
    def duration(self) -> float:
        return self.num_frames / self.fps

    def global_transforms(self) -> tuple[np.ndarray, np.ndarray]:
        """World positions (F, J, 3) and rotations (F, J, 4)."""
        return forward_kinematics(self.positions, self.rotations, self.skeleton.parents)
