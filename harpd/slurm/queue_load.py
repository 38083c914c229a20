"""How loaded the queue is, as harpd sees it at a decision: the watcher's listing and the partitions.

The soft queue rule (``harpd.predict.queue_policy``) weighs a cut against the
work already waiting, so a decision needs the waiting jobs' processor-seconds
and the cluster's processors.  Both come from answers harpd already has: the
watcher's one ``backend.queue()`` per interval (``squeue --json``: job names,
comments and paths are user text, never split out of plain text), which
``harpd.watch.feedback`` turns into a ``QueueLoad`` for the predictor's soft
state, and the partitions (``scontrol``, cached by ``harpd.slurm.partitions``).
squeue costs tens of milliseconds to seconds on a busy controller, too slow
for every sbatch: no decision asks for one.

Only jobs in line for processors count (``QueuedJob.eligible``): a held job,
or one waiting on a dependency or a begin time, is not waiting work, and one
user's thousand held jobs must not make harp plan everyone's jobs as if the
machine were full.  A pending array that squeue lists as one record counts
each of its tasks (``array_task_string``).

Approximations, each on the safe side of the rule (a smaller backlog cuts
more, as harp does without the rule): a pending job without a time limit
(unlimited) adds nothing; an array's tasks held back by its ``%N`` throttle
add nothing; the cluster's processors are its nodes' (each node once, with
the most processors any of its partitions allows).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from harpd.slurm.base import PartitionInfo, QueuedJob

__all__ = ["QueueLoad", "queue_load", "total_cores"]


@dataclass(frozen=True, slots=True)
class QueueLoad:
    """The queue at one squeue: jobs waiting, their limits' processor-seconds, jobs running, the cores."""

    pending_jobs: int
    backlog_core_s: float
    running_jobs: int
    total_cores: int


def total_cores(parts: Mapping[str, PartitionInfo]) -> int:
    """The cluster's processors: each node once (partitions share nodes), 0 when unknown."""
    per_node: dict[str, int] = {}
    anonymous = 0
    for p in parts.values():
        cpus = p.max_cpus_per_node or 0
        if p.node_names:
            for n in p.node_names:
                per_node[n] = max(per_node.get(n, 0), cpus)
        else:  # no node list: the partition's own count (may overlap another's)
            anonymous += p.nodes * cpus
    return sum(per_node.values()) + anonymous


def queue_load(jobs: Iterable[QueuedJob], parts: Mapping[str, PartitionInfo]) -> QueueLoad:
    """The load of ``jobs`` (one ``queue()``) on the cluster of ``parts``."""
    pending = running = 0
    backlog = 0.0
    for j in jobs:
        if j.running:
            running += 1
        elif j.eligible:
            pending += j.tasks
            if j.time_limit_s is not None and j.time_limit_s > 0:
                backlog += j.tasks * (j.cpus_per_task or 1) * (j.num_tasks or 1) * float(j.time_limit_s)
    return QueueLoad(pending, backlog, running, total_cores(parts))
