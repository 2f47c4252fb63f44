"""The query's trajectory_height columns (posedb/features.py): the terrain's height under each point of the
desired trajectory relative to the height under the character root, so clips that climb or descend
are chosen by matching where the database has them (seed 003: "slope anims are automatically chosen
by 3D trajectory matching"). Without terrain the ground is flat: every height is 0.

Conventions: metres; Y up; the plane is x, z.
"""
from __future__ import annotations

import numba
import numpy as np

from ..world.terrain import height_at


def height_layout(schema, slices, offsets) -> np.ndarray:
    """(D, 2) int64 rows (feature column, index into the trajectory offsets) of the schema's
    trajectory_height channels; offsets (K,): the trajectory offsets the query predicts (sorted)."""
    offsets = list(offsets)
    rows = [(slices[c.name].start + d, offsets.index(o)) for c in schema.channels if c.kind == "trajectory_height"
            for d, o in enumerate(c.offsets)]
    return np.array(rows, dtype=np.int64).reshape(-1, 2)


@numba.njit(cache=True)
def height_query(agents, traj_pos, root_pos, terrain, layout, out):
    """Fill the trajectory_height columns of the raw queries out (len(agents), F) in place: the terrain
    height at each predicted point traj_pos (n, K, 3) minus the height under the root. terrain: the
    crowd's touchups.Terrain."""
    has, heights, ox, oz, cell, _ = terrain
    for a in range(agents.shape[0]):
        i = agents[a]
        here = height_at(heights, ox, oz, cell, root_pos[i, 0], root_pos[i, 2]) if has else 0.0
        for d in range(layout.shape[0]):
            col, k = layout[d, 0], layout[d, 1]
            if has:
                out[a, col] = height_at(heights, ox, oz, cell, traj_pos[i, k, 0], traj_pos[i, k, 2]) - here
            else:
                out[a, col] = 0.0
