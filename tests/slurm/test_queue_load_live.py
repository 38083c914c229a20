"""harpd's view of the queue, the queue rule's input (``predict.queue_rule``), from the real squeue and scontrol.

A job holding every processor keeps the others in line.  Two waiting jobs
with user-written names that hold separators count, with their limits'
processor-seconds as backlog; a pending array counts each of its tasks; a
held job and one waiting for its ``--begin`` time do not count (they are not
in line for processors).  The cluster's processors are its nodes' CPUs,
counted once though every partition shares a node.
"""

from __future__ import annotations

import time

import pytest

from harpd.config import HarpSettings
from harpd.predict.queue_policy import view_of
from harpd.slurm.cli_backend import CliBackend
from harpd.slurm.partitions import cached_partitions
from harpd.slurm.queue_load import queue_load

pytestmark = pytest.mark.slurm


def _until_running(c, job: str, timeout: float = 180.0) -> None:
    deadline = time.time() + timeout
    state = ""
    while time.time() < deadline:
        state = c.run(["squeue", "-h", "-j", job, "-o", "%T"], check=False).stdout.strip()
        if state == "RUNNING":
            return
        time.sleep(1.0)
    raise AssertionError(f"the job holding every processor is {state or 'gone'}, not RUNNING, after {timeout:.0f} s")


def test_the_queue_view_counts_the_jobs_in_line_once_per_task_and_each_node_once(slurm_cluster) -> None:
    c = slurm_cluster
    backend = CliBackend(HarpSettings())
    parts = cached_partitions(backend, 60.0)

    def load():  # what harpd's watcher makes of each of its listings (harpd.watch.feedback)
        return queue_load(backend.queue(), parts())

    cpus = c.node_cpus()
    jobs = [c.sbatch(f"--ntasks={cpus}", "--mem=100M", "--time=10", "--job-name=q-all", script="sleep 600\n")]
    try:
        _until_running(c, jobs[0])
        before = load()
        waiting = ["q|load;1", "q load,2 "]
        jobs += [
            c.sbatch("--time=10", "--ntasks=2", "--mem=100M", f"--job-name={n}", script="sleep 1\n") for n in waiting
        ]
        jobs.append(c.sbatch("--array=1-3", "--time=5", "--mem=100M", "--job-name=q\narray", script="sleep 1\n"))
        jobs.append(c.sbatch("--hold", "--time=60", "--ntasks=2", "--mem=100M", script="sleep 1\n"))
        jobs.append(c.sbatch("--begin=now+3600", "--time=60", "--mem=100M", script="sleep 1\n"))
        now = load()
        assert now.pending_jobs - before.pending_jobs == 2 + 3  # the held and the not-yet-begun job: none
        assert now.backlog_core_s - before.backlog_core_s == pytest.approx(2 * 2 * 600.0 + 3 * 300.0)
        assert now.running_jobs >= 1
        assert now.total_cores == cpus > 0
        view = view_of(now, time.time())
        assert view.drain_s == pytest.approx(now.backlog_core_s / now.total_cores)
    finally:
        for j in jobs:
            c.run(["scancel", j], check=False)
