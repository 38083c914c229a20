"""How a job ended, and what it really used: SacctJob -> JobRecord.

Learning depends on telling "the job needed less" from "the job was stopped":
a TIMEOUT's run time and an OOM-killed job's peak memory are only lower bounds
of what the job needed, so they are marked censored rather than taken as the
truth.  The censoring flags say *what ran out*: ``censored_time`` when the
time limit ended the job, ``censored_mem`` when memory did (a job can carry
both, e.g. a TIMEOUT whose srun step had been killed for memory).

Out of memory comes in three shapes and all three count:

* cgroup enforcement: state OUT_OF_MEMORY on the job or on any step;
* the same with only the exit code to show for it: signal 125 (``0:125``);
* ``JobAcctGatherParams=OverMemoryKill`` (no cgroups, as on the local 22.05
  cluster): the job FAILED ``0:9`` (or COMPLETED, when only an ``srun`` step
  died), the step CANCELLED by signal 9 with a MaxRSS at or above what it was
  allowed on its node.  ``OOM_RSS_FRACTION`` leaves room for rounding in
  sacct's KiB figures.

Peak memory (``used_mem_mb``) is per job like the request: the largest
per-node peak of any step times the job's node count.  A step's per-node peak
is its largest task's RSS times the tasks it ran per node (capped by the sum
over tasks when sacct gives it).  The limit Slurm enforces is per node, so
``used_mem_mb / nodes`` is exactly the ``--mem`` that would have been enough on
every node; on unbalanced multi-node jobs it over-states the total, never the
need.

GPU memory (``used_gpumem_mb``) is per GPU, since a GPU's memory is the limit:
the largest step's ``gres/gpumem`` peak (its largest task's, summed over the
GPUs that task sees) divided by the GPUs each of its tasks had (the job's GPUs
per node over the step's tasks per node, at least 1).  A data-parallel job
spreads memory evenly over its GPUs, so this is each GPU's peak; where one
task holds several GPUs unevenly it is their mean, and where the job's GPU
count is unknown the division is by 1, which over-states, never under-states.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

from harpd.records import JobRecord, Outcome
from harpd.slurm.sacct_records import SacctJob, SacctStep

__all__ = ["classify", "gpu_peak_mb", "killed_for_memory", "to_record", "to_records", "OOM_RSS_FRACTION", "OOM_SIGNAL"]

OOM_RSS_FRACTION = 0.95
OOM_SIGNAL = 125  # what cgroup OOM kills leave in ExitCode ("0:125")
SIGKILL = 9

_NOT_FINISHED = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "STOPPED",
        "SIGNALING",
        "STAGE_OUT",
        "COMPLETING",
        "CONFIGURING",
    }
)
_BY_STATE = {
    "COMPLETED": Outcome.COMPLETED,
    "TIMEOUT": Outcome.TIMEOUT,
    "OUT_OF_MEMORY": Outcome.OOM,
    "FAILED": Outcome.FAILED,
    "SPECIAL_EXIT": Outcome.FAILED,
    "CANCELLED": Outcome.CANCELLED,
    "DEADLINE": Outcome.CANCELLED,
    "REVOKED": Outcome.CANCELLED,
    "NODE_FAIL": Outcome.NODE_FAIL,
    "BOOT_FAIL": Outcome.NODE_FAIL,
    "PREEMPTED": Outcome.PREEMPTED,
}


def _nodes(job: SacctJob) -> int:
    return max(1, job.alloc_nodes or job.req_nodes or 1)


def step_node_peak_mb(step: SacctStep) -> float | None:
    """Largest RSS the step had on one node (upper bound from per-task figures)."""
    if step.max_rss_mb is None:
        return None
    nn = max(1, step.nnodes or 1)
    per_node_tasks = max(1, math.ceil((step.ntasks or 1) / nn))
    peak = step.max_rss_mb * per_node_tasks
    if step.tot_rss_mb is not None and step.tot_rss_mb > 0:
        peak = min(peak, max(step.tot_rss_mb, step.max_rss_mb))
    return peak


def node_peak_mb(job: SacctJob) -> float | None:
    if not job.steps:
        return None
    peaks = [p for p in (step_node_peak_mb(s) for s in job.steps) if p is not None]
    return max(peaks) if peaks else None


def gpu_peak_mb(job: SacctJob) -> float | None:
    """Peak GPU memory per GPU over the job's steps (MiB), or None where Slurm gathered none."""
    gpus = job.alloc_gpus or job.req_gpus
    gpus_per_node = max(1, (gpus or 1) // _nodes(job))
    peaks = []
    for s in job.steps:
        if s.max_gpumem_mb is None:
            continue
        tasks_per_node = max(1, math.ceil((s.ntasks or 1) / max(1, s.nnodes or 1)))
        peaks.append(s.max_gpumem_mb / max(1, gpus_per_node // tasks_per_node))
    return max(peaks) if peaks else None


def killed_for_memory(job: SacctJob) -> bool:
    """Whether Slurm's record shows a step (or the job) killed for memory, whatever the job's state."""
    return _killed_for_memory(job)


def _killed_for_memory(job: SacctJob) -> bool:
    if job.state == "OUT_OF_MEMORY" or job.exit_signal == OOM_SIGNAL:
        return True
    for s in job.steps:
        if s.state == "OUT_OF_MEMORY" or s.exit_signal == OOM_SIGNAL:
            return True
    if job.req_mem_mb is None or not job.steps:
        return False
    allowed = job.req_mem_mb / _nodes(job)
    for s in job.steps:
        if s.exit_signal == SIGKILL or (job.exit_signal == SIGKILL and s.state in ("CANCELLED", "FAILED")):
            peak = step_node_peak_mb(s)
            if peak is not None and peak >= OOM_RSS_FRACTION * allowed:
                return True
    return False


def run_elapsed_s(job: SacctJob) -> float | None:
    """How long the run really ran.

    22.05's slurmdbd rewrites a finished run that was requeued afterwards as
    REQUEUED, ending at the requeue (``scontrol requeuehold``), which may come
    long after the run itself ended (harpd was down): its Elapsed counts the
    time it sat finished.  Its steps keep their own times, so such a run
    lasted as long as its longest step (the batch step starts with the
    allocation).  25.11 and 26.05 leave that run as it ended (TIMEOUT, its
    own End), so it reads like any other finished run.
    """
    if job.state == "REQUEUED":
        steps = [s.elapsed_s for s in job.steps if s.elapsed_s is not None]
        if steps:
            return max(steps) if job.elapsed_s is None else min(job.elapsed_s, max(steps))
    return job.elapsed_s


def _hit_time_limit(job: SacctJob) -> bool:
    elapsed = run_elapsed_s(job)
    return job.limit_s is not None and elapsed is not None and elapsed >= job.limit_s


def classify(job: SacctJob) -> tuple[Outcome, bool, bool]:
    """(outcome, censored_time, censored_mem) of one job run.

    Order: not finished -> RUNNING; memory evidence wins over every state
    but TIMEOUT (a timed-out job is TIMEOUT, flagged censored_mem as well if
    a step was killed for memory); a REQUEUED run (an earlier run of a job
    requeued in place) is TIMEOUT or OOM when the evidence says so, else
    PREEMPTED; the rest maps by state.
    """
    state = job.state
    if state is None:
        return Outcome.UNKNOWN, False, False
    if state in _NOT_FINISHED:
        return Outcome.RUNNING, False, False
    oom = _killed_for_memory(job)
    if state == "TIMEOUT":
        return Outcome.TIMEOUT, True, oom
    if oom:
        return Outcome.OOM, False, True
    if state == "REQUEUED":
        if _hit_time_limit(job):
            return Outcome.TIMEOUT, True, False
        return Outcome.PREEMPTED, False, False
    return _BY_STATE.get(state, Outcome.UNKNOWN), False, False


def to_record(job: SacctJob, source: str | None = None) -> JobRecord:
    """The JobRecord of one parsed run (``source``: cluster name or trace stem)."""
    outcome, c_time, c_mem = classify(job)
    used_time = run_elapsed_s(job)
    end_time = job.end_time
    if used_time is None and job.start_time and job.end_time:
        used_time = max(0.0, job.end_time - job.start_time)
    elif used_time is not None and job.start_time and job.state == "REQUEUED":
        end_time = job.start_time + used_time  # when the run ended, not when it was requeued
    peak = node_peak_mb(job)
    used_mem = None if peak is None else peak * _nodes(job)
    return JobRecord(
        job_id=job.job_id,
        source=source or job.cluster or "slurm",
        user=job.user,
        account=job.account,
        group=job.group,
        partition=job.partition,
        job_name=job.job_name,
        submit_time=job.submit_time,
        start_time=job.start_time,
        end_time=end_time,
        outcome=outcome,
        state=job.state,
        exit_code=job.exit_code,
        exit_signal=job.exit_signal,
        req_time_s=job.limit_s,
        req_mem_mb=job.req_mem_mb,
        req_cpus=job.req_cpus,
        req_nodes=job.req_nodes,
        req_gpus=job.req_gpus,
        alloc_cpus=job.alloc_cpus,
        alloc_nodes=job.alloc_nodes,
        alloc_gpus=job.alloc_gpus,
        used_time_s=used_time,
        used_mem_mb=used_mem,
        used_cpu_s=job.cpu_s,
        used_gpumem_mb=gpu_peak_mb(job),
        censored_time=c_time,
        censored_mem=c_mem,
        attempt=job.run,
    )


def to_records(jobs: Iterable[SacctJob], source: str | None = None) -> Iterator[JobRecord]:
    for job in jobs:
        yield to_record(job, source)
