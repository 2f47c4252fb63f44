"""Shared helper of the tests that take a Dask worker down mid-task (offline/test_faults.py,
test_dataset.py, test_dask_cluster.py)."""
from __future__ import annotations

import os
import signal
import time


def kill_a_worker_once_it_runs_a_task(client, killed: list, timeout_s: float = 600.0) -> None:
    """SIGKILL the worker process that first executes a task (its nanny starts a new one); its address
    goes into `killed`."""
    pids = client.run(os.getpid)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        busy = [w for w, n in client.run(lambda dask_worker: len(dask_worker.state.executing)).items() if n]
        if busy:
            os.kill(pids[busy[0]], signal.SIGKILL)
            killed.append(busy[0])
            return
        time.sleep(0.05)
