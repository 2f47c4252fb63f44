"""A stand-in for the runtime character, for app tests and development only.

It offers the same interface as `motionmatch.runtime.character.Character` (step, skeleton, global
poses, local_pose, debug, settings, apply_settings, reset) but does no matching: it loops one BVH take
in place, with the root's own travel and yaw removed, and carries it along a simulation object that a
damped spring pulls toward the gamepad's desired velocity. The server never uses it by default.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..animation import Skeleton
from ..io.bvh import read_bvh
from ..kinematics import forward_kinematics
from ..rotations import quat_from_yaw, quat_mul, quat_rotate, yaw_of_direction

DEFAULT_BVH = Path(__file__).resolve().parents[3].parent / "shared/mocap/jlpm22-locomotion/locomotion_take1.bvh"

CHANNELS = ("left_foot_position", "right_foot_position", "left_foot_velocity", "right_foot_velocity",
            "hip_velocity", "trajectory_position", "trajectory_direction")
TAGS = ("idle", "walk", "run")
TRAJECTORY_FRAMES = (20, 40, 60)


@dataclass
class GamepadInput:
    """Stand-in for motionmatch.runtime.controller.GamepadInput (x right, z forward)."""

    move: tuple[float, float] = (0.0, 0.0)
    look: tuple[float, float] | None = None
    run: bool = False
    strafe: bool = False


@dataclass
class CharacterSettings:
    weights: dict[str, float] = field(default_factory=lambda: {c: 1.0 for c in CHANNELS})
    search_interval: float = 0.1
    bias: float = 0.0
    inertialization: str = "spring"
    halflife: float = 0.1
    adjustment: bool = True
    clamping: bool = True
    foot_locking: bool = True
    tag_filter: str | None = None


def _check_tag_expression(expr: str) -> None:
    """Accept `tag`, `!tag`, `a & b`, `a | b`, parentheses; raise ValueError otherwise."""
    tokens = re.findall(r"\s*(\(|\)|&|\||!|[A-Za-z0-9_-]+|\S)", expr)
    depth, expect_operand = 0, True
    for tok in tokens:
        if expect_operand:
            if tok == "(":
                depth += 1
            elif tok == "!":
                pass
            elif tok in TAGS:
                expect_operand = False
            else:
                raise ValueError(f"unknown tag or misplaced {tok!r} in tag expression {expr!r}")
        else:
            if tok == ")" and depth > 0:
                depth -= 1
            elif tok in ("&", "|"):
                expect_operand = True
            else:
                raise ValueError(f"unexpected {tok!r} in tag expression {expr!r}")
    if expect_operand or depth:
        raise ValueError(f"incomplete tag expression {expr!r}")


class Character:
    """Loops a BVH take on a spring-driven simulation object (see module docstring)."""

    def __init__(self, db=None, settings: CharacterSettings | None = None, bvh_path=DEFAULT_BVH, frames=900):
        anim = read_bvh(bvh_path)
        n = min(frames, anim.num_frames)
        src = anim.skeleton
        # Joint 0 is a simulation bone, as in the real database, so the page skips it the same way.
        self.skeleton = Skeleton(
            names=["Simulation"] + list(src.names),
            parents=np.concatenate([[-1], np.where(src.parents < 0, 0, src.parents + 1)]).astype(np.int64),
            offsets=np.concatenate([np.zeros((1, 3)), src.offsets]),
            end_sites={j + 1: v for j, v in src.end_sites.items()},
            channels=[("Xposition", "Yposition", "Zposition", "Zrotation", "Xrotation", "Yrotation")]
            + list(src.channels),
        )
        pos = anim.positions[:n].astype(np.float64).copy()
        rot = anim.rotations[:n].astype(np.float64).copy()
        # Remove the take's own travel and heading (the hips face their local -Z in this data), so the
        # body faces the simulation bone's +Z.
        fwd = quat_rotate(rot[:, 0], np.array([0.0, 0.0, -1.0]))
        yaw = yaw_of_direction(fwd)
        rot[:, 0] = quat_mul(quat_from_yaw(-yaw), rot[:, 0])
        pos[:, 0, 0] = 0.0
        pos[:, 0, 2] = 0.0
        self._clip_pos, self._clip_rot = pos, rot
        self._left = self.skeleton.index("LeftFoot")
        self._right = self.skeleton.index("RightFoot")
        self.channel_names = list(CHANNELS)
        self.known_tags = list(TAGS)
        self.settings = settings or CharacterSettings()
        self.reset()

    def reset(self) -> None:
        self.frame = 0
        self.position = np.zeros(3)
        self.velocity = np.zeros(3)
        self.yaw = 0.0
        self.desired_velocity = np.zeros(3)
        self._last_feet = None
        self._feet_vel = np.zeros((2, 3))
        self._last_transition = None
        self.time = 0.0
        self._pose()

    def apply_settings(self) -> None:
        s = self.settings
        if s.tag_filter:
            _check_tag_expression(s.tag_filter)
        total = sum(max(0.0, w) for w in s.weights.values()) or 1.0
        self._normalized = {k: max(0.0, w) / total for k, w in s.weights.items()}

    def step(self, inp, dt: float = 1.0 / 60.0) -> None:
        move = np.array([inp.move[0], 0.0, inp.move[1]], dtype=np.float64)
        norm = np.linalg.norm(move)
        if norm > 1.0:
            move /= norm
        speed = 3.0 if inp.run else 1.4
        self.desired_velocity = move * speed
        k = 5.0
        self.velocity += (self.desired_velocity - self.velocity) * (1.0 - math.exp(-k * dt))
        self.position += self.velocity * dt
        if inp.strafe and inp.look is not None and math.hypot(*inp.look) > 0.1:
            target = math.atan2(inp.look[0], inp.look[1])
        elif norm > 0.1:
            target = math.atan2(move[0], move[2])
        else:
            target = self.yaw
        diff = (target - self.yaw + math.pi) % (2 * math.pi) - math.pi
        self.yaw += diff * (1.0 - math.exp(-6.0 * dt))
        prev = self.frame
        self.frame = (self.frame + 1) % len(self._clip_pos)
        if self.frame < prev:
            self._last_transition = {"time": self.time, "from": prev, "to": self.frame}
        self.time += dt
        self._pose(dt)

    def _pose(self, dt: float = 1.0 / 60.0) -> None:
        lp, lr = self.local_pose()
        self.global_positions, self.global_rotations = forward_kinematics(lp, lr, self.skeleton.parents)
        feet = self.global_positions[[self._left, self._right]]
        if self._last_feet is not None:
            self._feet_vel = (feet - self._last_feet) / dt
        self._last_feet = feet.copy()

    def local_pose(self) -> tuple[np.ndarray, np.ndarray]:
        J = self.skeleton.num_joints
        pos = np.zeros((J, 3))
        rot = np.zeros((J, 4))
        pos[0] = self.position
        rot[0] = quat_from_yaw(self.yaw)
        pos[1:] = self._clip_pos[self.frame]
        rot[1:] = self._clip_rot[self.frame]
        return pos, rot

    def _predict(self, velocity_target: np.ndarray, frames) -> list[list[float]]:
        k = 5.0
        out = []
        for f in frames:
            t = f / 60.0
            p = self.position + velocity_target * t + (self.velocity - velocity_target) * (1 - math.exp(-k * t)) / k
            out.append([float(v) for v in p])
        return out

    def debug(self) -> dict:
        feet = {}
        for side, i in (("left", 0), ("right", 1)):
            p = self._last_feet[i]
            v = self._feet_vel[i]
            contact = bool(p[1] < 0.12 and np.linalg.norm(v) < 0.6)
            feet[side] = {"position": p.tolist(), "velocity": v.tolist(), "contact": contact,
                          "locked": contact and self.settings.foot_locking}
        speed = float(np.linalg.norm(self.velocity))
        return {
            "sim_position": self.position.tolist(),
            "sim_direction": [math.sin(self.yaw), 0.0, math.cos(self.yaw)],
            "desired_trajectory": self._predict(self.desired_velocity, TRAJECTORY_FRAMES),
            "matched_trajectory": self._predict(self.velocity, TRAJECTORY_FRAMES),
            "feet": feet,
            "clip": "locomotion_take1 (stand-in)",
            "frame": int(self.frame),
            "style": "run" if speed > 2.0 else "walk" if speed > 0.2 else "idle",
            "search_us": 0.0,
            "frame_us": 0.0,
            "channel_costs": {c: 0.0 for c in self.channel_names},
            "last_transition": self._last_transition,
        }

