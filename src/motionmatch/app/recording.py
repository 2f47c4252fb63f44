"""A session's BVH recording: local poses kept in a few large preallocated float32 blocks.

Two small arrays a frame (the first version) cost ~1 kB of allocator overhead each and fragmented the
heap: 20 recording pages grew the server by 44 MB a minute and it kept that memory after they closed.
Blocks of BLOCK_FRAMES frames are single large allocations that the allocator maps on their own, so
they go back to the system as soon as the session (or a clear) drops them.
"""
from __future__ import annotations

import numpy as np

BLOCK_FRAMES = 3600             # one minute at 60 fps a block (~2.5 MB for a 25-joint skeleton)


class Recording:
    """Local poses of a (J)-joint skeleton, at most `max_frames` of them: positions (J, 3) in metres
    and rotations (J, 4) as (w, x, y, z) quaternions, as `Character.local_pose()` gives them."""

    def __init__(self, max_frames: int, joints: int | None = None):
        """joints: None takes the count from the first frame appended."""
        self.joints, self.max_frames = joints, int(max_frames)
        self._pos: list[np.ndarray] = []
        self._rot: list[np.ndarray] = []
        self._n = 0

    def __len__(self) -> int:
        return self._n

    @property
    def full(self) -> bool:
        return self._n >= self.max_frames

    def append(self, positions, rotations) -> bool:
        """Add one frame; False (nothing stored) once `max_frames` are held."""
        if self.full:
            return False
        if self.joints is None:
            self.joints = len(positions)
        k = self._n % BLOCK_FRAMES
        if k == 0:
            size = min(BLOCK_FRAMES, self.max_frames - self._n)
            self._pos.append(np.empty((size, self.joints, 3), np.float32))
            self._rot.append(np.empty((size, self.joints, 4), np.float32))
        self._pos[-1][k] = positions
        self._rot[-1][k] = rotations
        self._n += 1
        return True

    def clear(self) -> None:
        """Drop every frame and the blocks holding them."""
        self._pos, self._rot, self._n = [], [], 0

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(positions (n, J, 3), rotations (n, J, 4)) float32 copies of the frames held."""
        if self._n == 0:
            j = self.joints or 0
            return np.empty((0, j, 3), np.float32), np.empty((0, j, 4), np.float32)
        used = self._n - BLOCK_FRAMES * (len(self._pos) - 1)
        pos = np.concatenate(self._pos[:-1] + [self._pos[-1][:used]])
        rot = np.concatenate(self._rot[:-1] + [self._rot[-1][:used]])
        return pos, rot
