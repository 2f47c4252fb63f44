"""A real Dask cluster, as docs/tuning.md starts one: a `dask scheduler` process and a `dask worker` process
with two single-threaded workers, joined with `--address`. A worker killed mid-batch loses nothing: its
files run again on the other, the rest are kept, and the outputs are what a serial run writes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from motionmatch.cli import main
from motionmatch.offline.batch_synth import SUMMARY, without_timings
from motionmatch.offline.cluster import WORKER_ENV
from cluster_fixtures import kill_a_worker_once_it_runs_a_task

DASK = Path(sys.executable).with_name("dask")


@pytest.fixture(scope="module")
def real_cluster(tmp_path_factory):
    """(scheduler address, client) of a scheduler and a two-worker `dask worker` process on 127.0.0.1."""
    from dask.distributed import Client
    folder = tmp_path_factory.mktemp("cluster")
    sched_file = folder / "scheduler.json"
    env = {**os.environ, **WORKER_ENV}
    procs = [subprocess.Popen([str(DASK), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                               "--scheduler-file", str(sched_file)], env=env, cwd=folder,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 60
        while not sched_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sched_file.exists(), "dask scheduler did not start in 60 s"
        procs.append(subprocess.Popen([str(DASK), "worker", "--scheduler-file", str(sched_file), "--nworkers", "2",
                                       "--nthreads", "1", "--no-dashboard"], env=env, cwd=folder,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        client = Client(scheduler_file=str(sched_file), timeout="30s")
        client.wait_for_workers(2, timeout=120)
        yield json.loads(sched_file.read_text())["address"], client
        client.close()
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGINT)
        for p in reversed(procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.mark.slow
def test_a_batch_on_a_real_cluster_survives_a_killed_worker(real_cluster, jlpm_db_path, tmp_path):
    address, client = real_cluster
    scen = tmp_path / "scenarios"
    scen.mkdir()
    for k in range(4):
        (scen / f"walk_{k}.json").write_text(json.dumps(
            {"duration": 2.0, "inputs": [{"t": 0.0, "move": [0.0, 1.0]}, {"t": 1.0, "move": [[1.0, -1.0][k % 2], 0.0],
                                                                       "run": k >= 2}]}))
    serial = tmp_path / "serial"
    assert main(["synth", "--db", str(jlpm_db_path), "--scenarios", str(scen), "-o", str(serial), "--quiet"]) == 0
    out = tmp_path / "cluster"
    killed: list = []
    killer = threading.Thread(target=kill_a_worker_once_it_runs_a_task, args=(client, killed))
    killer.start()
    code = main(["synth", "--db", str(jlpm_db_path), "--scenarios", str(scen), "-o", str(out), "--quiet",
                 "--address", address])
    killer.join()
    assert killed and code == 0
    summary = json.loads((out / SUMMARY).read_text())
    assert summary["done"] == 4 and summary["failed"] == 0 and summary["workers"] == 2
    for k in range(4):
        a, b = (d / f"walk_{k}" for d in (serial, out))
        assert (a / "motion.bvh").read_bytes() == (b / "motion.bvh").read_bytes()
        assert without_timings(json.loads((a / "metrics.json").read_text())) == \
            without_timings(json.loads((b / "metrics.json").read_text()))
