"""What the app simulates: a Backend makes each session's character and inputs and parses scenarios;
`runtime_backend` is the library's runtime over a database, `character_for` the body the page draws.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..runtime.settings_schema import database_weights
from ..offline.scenario import Scenario, parse_scenario
from .driven import DrivenCharacter
from ..runtime.character import Character, CharacterSettings, warm_up
from ..runtime.controller import GamepadInput
from ..body import rigged_model
from ..motion.preprocess import planted_toe_height_m
from ..body.mesh import ensure_body_glb

GROUND_FIT_FRAMES = 2000     # database frames the character's ground is fitted on (rigged_model.live_retarget)
CROWD_VOXEL_M = 0.03            # m: the crowd's default body (the user's is mesh.VOXEL_M, 1.5 cm)


@dataclass
class Backend:
    """How sessions get their character, inputs and scenarios (the real runtime by default)."""

    new_character: Callable[[], DrivenCharacter]
    make_input: Callable[..., Any]
    load_scenario: Callable[[dict], Scenario] | None = None
    description: str = ""
    character: dict | None = None   # {"glb": bytes, "name": str, "retarget": rigged_model table, and for the
                                    # default body "crowd_glb": a coarser mesh for crowd mode} or None
    # More client message types: {type: (schema as in messages.SCHEMAS, handler(session, fields) -> reply
    # or None)}, joining websocket.HANDLERS
    messages: dict = field(default_factory=dict)
    # {feature channel: default weight} of the database (GET /api/settings/schema lists them; None: unknown)
    channel_weights: dict | None = None


def runtime_backend(db, character: dict | None = None, settings=None) -> Backend:
    """The library's runtime character over a loaded database (its kernels compiled up front, so the
    first client's stream does not stall on JIT compilation); `character` is the body the page draws
    (see character_for); settings: a settings_file.RuntimeSettings every new character starts from
    (None: the defaults)."""
    import copy

    def new_character():
        if settings is None:
            return Character(db, CharacterSettings())
        rs = copy.deepcopy(settings)
        return Character(db, rs.character, rs.controller)

    warm_up(db)
    return Backend(new_character=new_character, make_input=GamepadInput,
                   load_scenario=parse_scenario, description=str(getattr(db, "meta", {}).get("source", "database")),
                   character=character, channel_weights=database_weights(db))


def character_for(db, db_path, model_path=None, role_map=None) -> dict:
    """The body the page draws: the user's rigged humanoid `model_path` (.glb) retargeted live, else the
    default body generated for the database skeleton (cached beside the database file). Raises GLTFError /
    SkeletonError for a model that is not a readable humanoid rig."""
    if model_path is not None:
        model = rigged_model.load_rigged_model(model_path, role_map)
        bind = rigged_model.source_bind_pose(db.skeleton, db.roles, db.positions, db.rotations)
        # The ground fit's sample of the database: frames spread over every clip.
        frames = np.unique(np.linspace(0, db.num_frames - 1, min(db.num_frames, GROUND_FIT_FRAMES)).astype(np.int64))
        return {"glb": model.glb, "name": model.name,
                "retarget": rigged_model.live_retarget(db.skeleton, db.roles, bind, model,
                                                       source_floor=planted_toe_height_m(db),
                                                       source_motion=db.global_transforms(frames))}
    glb = ensure_body_glb(db_path, db.skeleton, db.roles)
    # The crowd's copy at 3 cm voxels: a quarter of the vertices (2,600), for thousands of agents.
    crowd = ensure_body_glb(db_path, db.skeleton, db.roles, voxel=CROWD_VOXEL_M)
    return {"glb": glb.read_bytes(), "crowd_glb": crowd.read_bytes(), "name": "default body",
            "retarget": rigged_model.identity_retarget(db.skeleton, db.roles)}
