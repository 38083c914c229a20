"""harpd's view of the queue, the queue rule's input (``predict.queue_rule``), from the real squeue and scontrol.

Two held jobs with user-written names that hold separators are counted as
waiting, with their limits' processor-seconds as backlog, and the cluster's
processors are its one node's CPUs, counted once though every partition
shares the node.  Cheap: nothing runs.
"""

from __future__ import annotations

import time

import pytest

from harpd.config import HarpSettings
from harpd.predict.queue_policy import view_of
from harpd.slurm.cli_backend import CliBackend
from harpd.slurm.partitions import cached_partitions
from harpd.slurm.queue_load import cached_queue_load

pytestmark = pytest.mark.slurm


def _node_cpus(c) -> int:
    """The cluster's processors as sinfo lists them: each node once."""
    rows = c.run(["sinfo", "-h", "-N", "-o", "%N %c"]).stdout.split("\n")
    return sum(int(cpus) for _node, cpus in {tuple(r.split()) for r in rows if r.strip()})


def test_the_queue_view_counts_the_real_queue_once_per_node(slurm_cluster) -> None:
    c = slurm_cluster
    backend = CliBackend(HarpSettings())
    load = cached_queue_load(backend, cached_partitions(backend, 60.0), ttl_s=0.0)  # each call asks squeue
    before = load()
    names = ["q|load;1", "q load,2 "]
    jobs = [c.sbatch("--hold", "--time=10", "--ntasks=2", f"--job-name={n}", script="sleep 1\n") for n in names]
    try:
        now = load()
        assert now.pending_jobs == before.pending_jobs + 2
        assert now.backlog_core_s - before.backlog_core_s == pytest.approx(2 * 2 * 600.0)
        assert now.total_cores == _node_cpus(c) > 0
        view = view_of(now, time.time())
        assert view.drain_s == pytest.approx(now.backlog_core_s / now.total_cores)
    finally:
        for j in jobs:
            c.run(["scancel", j], check=False)
