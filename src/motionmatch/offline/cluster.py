"""The distributed engine (Dask distributed): a local cluster on 127.0.0.1 started and stopped by the
command, or a running cluster joined by address; ordered maps for builds and quality runs.

Why Dask rather than Ray (measured on this 2-core machine, two single-threaded workers, 50 ms numpy
tasks; see docs/tuning.md): start-up 0.8-3.6 s vs 2.2-4.2 s, resident memory of the cluster 198 MB
in 4 processes vs 772 MB in 10, 28-31 vs 32-35 tasks/s (a trial takes seconds, so the per-task
overhead does not matter), 24 MB installed vs 240 MB.

A running cluster to join (`--address tcp://HOST:8786`):

    dask scheduler --host HOST --port 8786
    dask worker tcp://HOST:8786 --nworkers 2 --nthreads 1     # on each machine, with motionmatch installed

Workers open a database memory-mapped once per process (`worker_database`), so trials share its pages.
"""
from __future__ import annotations

import logging
import warnings
from contextlib import contextmanager
from pathlib import Path
from ..posedb.database_join import load_databases

# One thread per worker process: the workers are the parallelism (two BLAS or numba threads per
# process on two cores made single searches slower, see the project's notes).
WORKER_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "NUMBA_NUM_THREADS": "1"}

_databases: dict = {}


def _numba_threads_plugin():
    """A worker plugin that makes numba read WORKER_ENV before any task runs. A local cluster's worker
    process imports numba (unpickling its start-up) before the nanny sets WORKER_ENV, so numba's
    thread count stays the core count; its compiler re-reads the environment at the next compile and
    raises once parallel threads were launched ("Cannot set NUMBA_NUM_THREADS ... once the threads
    have been launched": a crowd of 32 agents or more, then any new compile). Plugins also run on a
    worker the nanny restarts."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class NumbaThreads(WorkerPlugin):
        name = "motionmatch-numba-threads"

        def setup(self, worker):
            import numba
            numba.config.reload_config()
    return NumbaThreads()


def worker_database(path):
    """The database at `path`, loaded (memory-mapped) once per process and reused while the file
    is unchanged. A list of paths: those files joined as one (database_join.load_databases, as a
    repeated `--db` joins them), reused while none of them changes."""
    paths = [Path(p).resolve() for p in ([path] if isinstance(path, (str, Path)) else path)]
    key = tuple((str(p), p.stat().st_mtime_ns) for p in paths)
    if key not in _databases:
        _databases.clear()
        _databases[key] = load_databases(paths)
    return _databases[key]


@contextmanager
def open_client(workers: int | None = None, address: str | None = None, allowed_failures: int = 1):
    """A dask.distributed Client: joined to the scheduler at `address`, or to a new local cluster of
    `workers` single-threaded worker processes bound to 127.0.0.1 (closed on exit).

    allowed_failures: how often a task may take its worker down (killed, out of memory) before it is
    reported failed (KilledWorker) instead of being retried elsewhere.
    """
    import dask
    from dask.distributed import Client, LocalCluster

    with dask.config.set({"distributed.scheduler.allowed-failures": allowed_failures}):
        if address:
            try:
                client = Client(address, timeout="20s")
            except OSError as e:
                raise ValueError(f"--address {address}: no Dask scheduler answers ({e})") from None
            try:
                yield client
            finally:
                client.close()
            return
        n = max(1, int(workers or 1))
        # The scheduler's HTTP endpoint (no dashboard) tries port 8787 first and says so when another
        # cluster holds it; it then takes a free port on 127.0.0.1, which is all we want.
        warnings.filterwarnings("ignore", message="Port 8787 is already in use")
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                               scheduler_port=0, dashboard_address=None, silence_logs=logging.ERROR,
                               env=WORKER_ENV)
        client = Client(cluster)
        try:
            client.register_plugin(_numba_threads_plugin())
            yield client
        finally:
            client.close()
            cluster.close()


def worker_count(client) -> int:
    """Worker threads available to the client (the number of tasks that run at once)."""
    return max(1, sum(client.nthreads().values()))


def ordered_map(client, fn, items, progress: str | None = None):
    """Results of fn(item) for each item, in order (the work spread over the cluster); an exception
    in a task is raised here. progress: a tqdm label, or None for no bar."""
    import sys
    from tqdm import tqdm
    futures = client.map(fn, list(items), pure=False)
    try:
        for f in tqdm(futures, desc=progress, disable=progress is None, file=sys.stderr):
            yield f.result()
    finally:
        client.cancel(futures)


def parallel_map(fn, items, workers: int | None = None, address: str | None = None,
                 progress: str | None = None) -> list:
    """fn over items on a cluster opened for the call (see open_client); results in order."""
    with open_client(workers, address) as client:
        return list(ordered_map(client, fn, items, progress))

