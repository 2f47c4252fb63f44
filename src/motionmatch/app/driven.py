"""What a page's Session drives: the members every character the app serves has (the classic and the
learned runtime Character, runtime/character.py, and VR mode's VRCharacter, app/vr.py), so a Session
uses them directly instead of asking which ones a character has. tests/app/test_driven.py checks each
character against it, member by member and signature by signature.
"""
from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from ..motion.animation import Skeleton
from ..posedb.database import Database
from ..runtime.controller import Controller, GamepadInput
from ..runtime.database_sets import SetSpec
from ..runtime.input_log import InputLog
from ..runtime.settings import CharacterSettings
from ..search import Searcher


@runtime_checkable
class DrivenCharacter(Protocol):
    """A character a Session steps, configures and draws. Optional behaviour is an explicit answer, not
    a missing member: `input_log` is None while no log runs, and a request a character cannot honour
    raises ValueError (the page gets the text as an error)."""

    db: Database
    settings: CharacterSettings     # every messages.SETTINGS_FIELDS is one of its attributes
    skeleton: Skeleton
    channel_names: Sequence[str]    # the feature channels, in the schema's order
    known_tags: Sequence[str]
    slices: dict[str, slice]        # feature channel -> its columns
    controller: Controller
    input_log: InputLog | None

    @property
    def searcher(self) -> Searcher:
        """The search over the character's normalized features (the inspector ranks them)."""

    @property
    def time(self) -> float:
        """Simulated seconds since the last reset."""

    @property
    def root_pos(self) -> np.ndarray:
        """(3,) root position, metres."""

    @property
    def root_velocity(self) -> np.ndarray:
        """(3,) root velocity, m/s."""

    @property
    def global_positions(self) -> np.ndarray:
        """(J, 3) world joint positions of the pose drawn."""

    def step(self, inp: GamepadInput | None = None, dt: float = 1.0 / 60.0) -> None:
        """Advance one frame."""

    def reset(self) -> None:
        """Stand at the origin and start again."""

    def apply_settings(self) -> None:
        """Take `settings` as changed; ValueError (settings unchanged by it) for values it refuses."""

    def start_input_log(self) -> InputLog:
        """Reset and record every input from now on (runtime/input_log.py)."""

    def local_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """The drawn pose as local positions (J, 3) and rotations (J, 4), joint 0 in the world."""

    def debug(self) -> dict:
        """The frame's state for the page's overlays (JSON-ready)."""

    def pose_before_inertialization(self) -> np.ndarray:
        """(J, 3) world joint positions of the database pose playing now."""

    def pose_before_touchups(self) -> np.ndarray:
        """(J, 3) world joint positions before warping, foot locking and IK."""

    def set_driver(self, driver) -> None:
        """Drive the controller from a scenario's driver (None: the gamepad)."""

    def set_obstacles(self, obstacles) -> None:
        """Static obstacles to steer around (None: none)."""

    def set_terrain(self, terrain) -> None:
        """Walk on a Heightfield (None: flat ground)."""

    def play_clip(self, range_index: int | None, offset_frames: int = 0) -> None:
        """Play clip `range_index` from `offset_frames` (None: back to searching)."""

    def request_action(self, event: str, event_in: float) -> None:
        """Perform the action marked `event`, the event `event_in` seconds from now."""

    def use_set(self, spec: SetSpec, interrupt: bool = True) -> None:
        """Search another set of the database."""
