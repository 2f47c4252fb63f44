"""STAND-IN for the batched runtime of issue 10; replaced at merge.

Implements the agreed `Crowd` interface as a Python loop over `Character` objects so the crowd file,
avoidance, crowd synthesis and the app's crowd mode can be built and tested before the batched runtime
lands. Yaw in radians (0 faces +Z, positive turns +Z toward +X); metres and seconds.
"""
from __future__ import annotations

import copy

import numpy as np

from .character import Character, CharacterSettings
from .controller import GamepadInput


class Crowd:
    """N motion-matched characters over one Database (stand-in: one Character each)."""

    def __init__(self, db, n: int, settings=None, start_frames=None, controller_settings=None):
        if isinstance(settings, (list, tuple)):
            per_agent = list(settings)
        else:
            per_agent = [copy.deepcopy(settings or CharacterSettings()) for _ in range(n)]
        self.n = int(n)
        self.characters = [Character(db, per_agent[i], copy.deepcopy(controller_settings),
                                     None if start_frames is None else int(start_frames[i]))
                           for i in range(self.n)]
        J = db.num_joints
        self.global_positions = np.zeros((self.n, J, 3), dtype=np.float32)
        self.global_rotations = np.zeros((self.n, J, 4), dtype=np.float32)
        self.root_positions = np.zeros((self.n, 3))
        self.root_yaws = np.zeros(self.n)
        self.sim_positions = np.zeros((self.n, 3))
        self.sim_velocities = np.zeros((self.n, 3))
        self.desired_velocities = np.zeros((self.n, 3))
        self.searches_last_tick = 0
        for i in range(self.n):
            self._gather(i)

    def reset_agent(self, i: int, position=(0.0, 0.0, 0.0), yaw: float = 0.0, start_frame=None) -> None:
        self.characters[i].reset(start_frame, position, yaw)
        self._gather(i)

    def set_tag_filter(self, i: int, expr: str | None) -> None:
        self.characters[i].set_tag_filter(expr)

    def set_terrain(self, terrain) -> None:
        for ch in self.characters:
            ch.set_terrain(terrain)

    def step(self, move, run, strafe, look, dt: float = 1.0 / 60.0) -> None:
        searches = 0
        for i, ch in enumerate(self.characters):
            lk = None if np.isnan(look[i]).any() else (float(look[i][0]), float(look[i][1]))
            ch.step(GamepadInput(move=(float(move[i][0]), float(move[i][1])), look=lk, run=bool(run[i]),
                                 strafe=bool(strafe[i])), dt)
            searches += ch.t_search_us > 0
            self._gather(i)
        self.searches_last_tick = int(searches)

    def _gather(self, i: int) -> None:
        ch = self.characters[i]
        self.global_positions[i] = ch.global_positions
        self.global_rotations[i] = ch.global_rotations
        self.root_positions[i] = ch.root_pos
        self.root_yaws[i] = ch.facing_yaw
        self.sim_positions[i] = ch.controller.position
        self.sim_velocities[i] = ch.controller.velocity
        self.desired_velocities[i] = ch.controller.desired_velocity

    def local_pose(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return self.characters[i].local_pose()
