"""The crowd's per-joint fast paths give what the full computations give: the series quaternion
exponential of the inertialization, the legs-only forward kinematics and the hips drop as a
translation of the world pose (runtime/ik.legs_pose)."""
from __future__ import annotations

import numpy as np

from motionmatch.maths.kinematics import fk_pose_into, fk_subtrees_into
from motionmatch.maths.ik import leg_chains, legs_pose
from motionmatch.maths.scalar_quat import qexp, qexp_series


def test_series_exponential_matches_qexp():
    rng = np.random.default_rng(3)
    axes = rng.normal(size=(4000, 3))
    axes /= np.linalg.norm(axes, axis=1, keepdims=True)
    # Angles on both sides of the series' 1 radian bound, down to zero, as the offsets of a transition decay.
    angles = np.concatenate([rng.uniform(0.0, 1.0, 2000), rng.uniform(1.0, np.pi, 1000), 10.0 ** -rng.uniform(1, 12, 1000)])
    worst = 0.0
    for r in axes * angles[:, None]:
        worst = max(worst, np.abs(np.subtract(qexp_series(*r), qexp(*r))).max())
    assert worst < 4e-16, worst                  # a few ulps of 1: the series is qexp to rounding
    assert qexp_series(0.0, 0.0, 0.0) == (1.0, 0.0, 0.0, 0.0)


def _pose(db, frame):
    lp = np.ascontiguousarray(db.positions[frame], dtype=np.float64)
    lr = np.ascontiguousarray(db.rotations[frame], dtype=np.float64)
    return lp, lr


def test_leg_subtrees_forward_kinematics_is_the_full_pass(jlpm_db):
    db = jlpm_db
    parents = np.asarray(db.skeleton.parents, dtype=np.int64)
    legs = leg_chains(db.roles)
    lp, lr = _pose(db, 100)
    gp, gr = np.empty_like(lp), np.empty_like(lr)
    fk_pose_into(lp, lr, parents, gp, gr)
    # New local rotations for the legs' joints (another frame's), then both ways of updating the world pose.
    other = _pose(db, 400)[1]
    for j in legs.ravel():
        lr[j] = other[j]
    full_p, full_r = gp.copy(), gr.copy()
    fk_pose_into(lp, lr, parents, full_p, full_r)
    fk_subtrees_into(lp, lr, parents, gp, gr, legs[:, 0])
    assert np.array_equal(gp, full_p) and np.array_equal(gr, full_r)
    assert not np.array_equal(full_p[legs[0, 2]], _fk(lp, _pose(db, 100)[1], parents)[0][legs[0, 2]])  # the legs moved


def _fk(lp, lr, parents):
    gp, gr = np.empty_like(lp), np.empty_like(lr)
    fk_pose_into(lp, lr, parents, gp, gr)
    return gp, gr


def test_hips_drop_moves_the_pose_as_forward_kinematics_would(jlpm_db):
    db = jlpm_db
    parents = np.asarray(db.skeleton.parents, dtype=np.int64)
    legs = leg_chains(db.roles)
    lp, lr = _pose(db, 250)
    lp[0] = (1.5, 0.0, -2.0)                     # placed away from the origin, as a crowd's agents are
    gp, gr = _fk(lp, lr, parents)
    targets = gp[legs[:, 2]] + np.array([[0.02, 0.03, -0.01], [-0.01, 0.0, 0.02]])
    drop = 0.012
    # The full path: the root lowered, a whole forward kinematics pass, then the legs solved without a drop.
    full_lp, full_lr = lp.copy(), lr.copy()
    full_lp[0, 1] -= drop
    full_gp, full_gr = _fk(full_lp, full_lr, parents)
    legs_pose(full_lp, full_lr, full_gp, full_gr, parents, legs, targets, 0, np.zeros(2), 0.0)
    legs_pose(lp, lr, gp, gr, parents, legs, targets, 0, np.zeros(2), drop)
    assert lp[0, 1] == -drop and np.array_equal(lp, full_lp)
    assert np.abs(gp - full_gp).max() < 1e-12 and np.abs(gr - full_gr).max() < 1e-12
    assert np.abs(lr - full_lr).max() < 1e-12
    # And the result is the forward kinematics of what legs_pose left in lp / lr.
    ref_p, ref_r = _fk(lp, lr, parents)
    assert np.abs(gp - ref_p).max() < 1e-12 and np.abs(gr - ref_r).max() < 1e-12
