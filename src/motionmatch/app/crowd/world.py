"""The crowd of the app's crowd mode: N agents on the ground roam between random goals in a square
around the origin (where users' characters start), avoiding each other and the users (world/avoidance.py),
and stepped together by one runtime Crowd. crowd_process.py runs it in its own process.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...world.avoidance import AvoidanceState, avoid
from ...offline.crowd_synth import AgentSpec, DriverState, drive, driver_state, stick_to_velocity, velocity_to_stick
from ...runtime.controller import ControllerSettings
from ..limits import DT
from ...runtime.crowd import Crowd

MAX_AGENTS = 2000
RUN_FRACTION = 0.2           # of new goals reached running
MAX_WAIT = 2.0               # s an arrived agent waits before its next goal (uniform 0..MAX_WAIT)
USER_REACH = 1000.0          # m: users farther from the origin (or not finite) are left out of avoidance
# An agent that has not come PROGRESS_M closer to its goal for STALL_S gives it up and picks another:
# a goal another agent (or a user) stands on is never reached within crowd_synth.ARRIVE_DISTANCE, so
# without this the agent stands there for good (its wait for a new goal starts only on arrival).
STALL_S = 3.0
PROGRESS_M = 0.25


@dataclass
class CrowdWorld:
    """The roaming crowd: the runtime Crowd, goals, avoidance state, the skeleton (joint names, parents,
    the hips joint) and the tick count and simulated time (s)."""
    crowd: object
    drivers: DriverState
    avoidance: AvoidanceState
    controller: ControllerSettings
    half_size: float             # m: goals are drawn in [-half_size, half_size]^2
    wait: np.ndarray             # (n,) s left before an arrived agent gets a new goal
    best: np.ndarray             # (n,) m: the closest each came to its current goal (within PROGRESS_M)
    stall_s: np.ndarray          # (n,) s since that distance last shrank by PROGRESS_M
    rng: np.random.Generator
    names: list
    parents: list
    hips: int
    seq: int = 0
    time: float = 0.0


def crowd_world(db, n: int, seed: int = 0) -> CrowdWorld:
    """n roaming agents on a jittered grid around (not on) the origin, where users' characters start."""

    rng = np.random.default_rng(seed)
    half = max(6.0, 1.5 * math.sqrt(n))
    side = math.ceil(math.sqrt(n + 9))
    cells = (np.stack(np.meshgrid(np.arange(side), np.arange(side)), -1).reshape(-1, 2) + 0.5) / side
    spots = (cells * 2.0 - 1.0) * half
    spots = spots[np.linalg.norm(spots, axis=1) > 2.0]
    spots = spots[rng.permutation(len(spots))[:n]] + rng.uniform(-0.2, 0.2, (n, 2)) * half / side
    goals = rng.uniform(-half, half, (n, 2))
    agents = [AgentSpec(start=tuple(p), goal=tuple(g), run=bool(rng.random() < RUN_FRACTION)) for p, g in zip(spots, goals)]
    cs = ControllerSettings()
    crowd = Crowd(db, n, controller_settings=cs)
    for i, a in enumerate(agents):
        crowd.reset_agent(i, (a.start[0], 0.0, a.start[1]), float(rng.uniform(-math.pi, math.pi)))
    return CrowdWorld(crowd=crowd, drivers=driver_state(agents), avoidance=AvoidanceState.zeros(n), controller=cs,
                      half_size=half, wait=rng.uniform(0.0, MAX_WAIT, n), best=np.full(n, np.inf),
                      stall_s=np.zeros(n), rng=rng, names=list(db.skeleton.names),
                      parents=[int(p) for p in db.skeleton.parents], hips=int(db.roles["hips"]))


def step_world(world: CrowdWorld, users_xz: np.ndarray, users_vel: np.ndarray, dt: float = DT) -> None:
    """One tick: new goals for agents that waited long enough or made no progress for STALL_S, drivers, avoidance (of each other and of
    the users at (u, 2) positions moving at (u, 2) m/s), then one Crowd.step for all agents."""
    c, d, cs = world.crowd, world.drivers, world.controller
    n = c.n
    sim = c.sim_positions
    world.wait[d.arrived] -= dt
    dist = np.linalg.norm(d.goals - sim[:, [0, 2]], axis=1)
    closer = dist < world.best - PROGRESS_M
    world.best[closer] = dist[closer]
    world.stall_s[closer | d.arrived] = 0.0
    world.stall_s[~closer & ~d.arrived] += dt
    renew = (d.arrived & (world.wait <= 0.0)) | (world.stall_s > STALL_S)
    if renew.any():
        k = int(renew.sum())
        world.wait[renew] = world.rng.uniform(0.0, MAX_WAIT, k)
        d.goals[renew] = world.rng.uniform(-world.half_size, world.half_size, (k, 2))
        d.goal_run[renew] = world.rng.random(k) < RUN_FRACTION
        d.arrived[renew] = False
        world.best[renew] = np.inf
        world.stall_s[renew] = 0.0
    move, run, strafe, look = drive(d, world.time, sim, cs)
    # Users count as neighbours moving at their own velocity; their rows of the answer are dropped.
    pos = np.vstack([sim[:, [0, 2]], users_xz])
    vel = np.vstack([c.sim_velocities[:, [0, 2]], users_vel])
    pref = np.vstack([stick_to_velocity(move, run, cs), users_vel])
    top = np.concatenate([np.where(run, cs.run_forward_speed, cs.walk_forward_speed),
                          np.maximum(np.linalg.norm(users_vel, axis=1), 0.1)])
    state = AvoidanceState(np.vstack([world.avoidance.chosen, users_vel]))
    # On the threads the crowd's last tick measured faster (runtime/threads.py): a busy core makes both serial.
    chosen = avoid(state, pos, vel, pref, top, parallel=c.threads_last_tick > 1)[:n]
    world.avoidance.chosen[:] = chosen
    c.step(velocity_to_stick(chosen, run, cs), run, strafe, look, dt)
    world.time += dt
    world.seq += 1


def users_near(positions: np.ndarray, velocities: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The users (rows of (u, 2) ground positions in m and velocities in m/s) the crowd should avoid:
    finite and within USER_REACH of the origin. One page driving its character to 1e30 m (a hostile
    tracker message) must not turn the shared avoidance step into infinities for every viewer."""
    keep = (np.isfinite(positions).all(axis=1) & np.isfinite(velocities).all(axis=1)
            & (np.abs(positions).max(axis=1, initial=0.0) <= USER_REACH)
            & (np.abs(velocities).max(axis=1, initial=0.0) <= USER_REACH))
    return positions[keep], velocities[keep]


def warm_up_world(db, n: int, ticks: int = 3) -> None:
    """Compile (or load from numba's cache) the kernels a crowd of n uses (serial or parallel stages,
    avoidance) on a throw-away world, so the first ticks of the real one are not compilations."""
    world = crowd_world(db, n)
    none = np.zeros((0, 2))
    for _ in range(ticks):
        step_world(world, none, none)
