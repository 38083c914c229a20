"""The one interface between harp and Slurm.

Everything harp asks of Slurm goes through ``SlurmBackend`` so that the rest of
the daemon never builds a command line, never parses scheduler text and can be
tested against a fake.  The implementation over the stable commands lives in
``cli_backend``; ``harpd.slurm.get_backend`` picks one from the config.

Units follow ``harpd.records``: seconds, MiB, counts; ``None`` means unknown or
unlimited.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypedDict, TypeGuard, Unpack, runtime_checkable

from harpd.records import JobRecord

__all__ = [
    "SlurmBackend",
    "SlurmError",
    "JobUnknown",
    "SlurmUnavailable",
    "NotRecordedYet",
    "waiting_on_slurm",
    "PartitionInfo",
    "JobInfo",
    "QueuedJob",
    "NOT_IN_LINE",
    "JobChanges",
    "FINISHED_STATES",
    "Accounting",
    "whole_minutes",
]

#: job states after which a job no longer runs (``scontrol requeuehold`` accepts only these)
FINISHED_STATES = frozenset(
    {"COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "CANCELLED", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE"}
)


class SlurmError(Exception):
    """A Slurm command failed; the message is one line an admin can act on.

    The subclasses say what the failure means for the job asked about, so
    that a caller can tell "Slurm said no" from "Slurm said nothing": a slow
    or stopped slurmctld/slurmdbd must delay harp, never make it forget a job.
    A plain ``SlurmError`` is a refusal or a fault that asking again will not
    change by itself (a bad option, no permission, a missing command).
    """


class JobUnknown(SlurmError):
    """Slurm answered, and has no such job (``Invalid job id specified``): slurmctld, or what was asked."""


class SlurmUnavailable(SlurmError):
    """Slurm did not answer in time or could not be reached: nothing is known about the job.

    A command timeout (``slurm.command_timeout_s``), a refused or timed-out
    connection to slurmctld or slurmdbd, a controller too busy to take the
    call.  Asking again later is the only right answer.
    """


class NotRecordedYet(SlurmError):
    """Accounting answered but has no record of the job (yet): slurmdbd lags slurmctld under load.

    Not proof that the job is gone: slurmctld sends its records to slurmdbd
    through a queue that a busy or restarted slurmdbd drains minutes later.
    Only a long enough absence (``recovery.slurm_wait_h``) is.
    """


def waiting_on_slurm(exc: BaseException) -> TypeGuard[SlurmUnavailable | NotRecordedYet]:
    """True for a failure that says nothing about the job, only that Slurm has not answered (yet)."""
    return isinstance(exc, (SlurmUnavailable, NotRecordedYet))


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """What a job can get in one partition: the limits decisions must respect.

    ``max_mem_mb_per_node`` is the smaller of the partition's MaxMemPerNode
    and the largest node's RealMemory; ``max_cpus_per_node`` likewise with
    MaxCPUsPerNode and CPUTot.  ``gres`` is the generic resources of its
    nodes as Slurm prints them (``gpu:a100:4``), ``gpus_per_node`` the GPU
    count in it.
    """

    name: str
    max_time_s: int | None
    max_mem_mb_per_node: int | None
    max_cpus_per_node: int | None
    nodes: int
    gres: str | None = None
    gpus_per_node: int = 0
    default: bool = False
    max_nodes: int | None = None
    node_names: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class Accounting:
    """What the site's accounting keeps of a job besides its usage (``AccountingStoreFlags``).

    A job that left slurmctld (``MinJobAge``) can be resubmitted only from
    accounting's copies: ``script`` (``job_script``) and ``env``
    (``job_env``, the environment it was submitted with).  ``flags`` is the
    setting as Slurm printed it, for messages.
    """

    script: bool
    env: bool
    flags: str = ""

    @property
    def lacks(self) -> list[str]:
        """The flags recovery needs and the site does not set."""
        return [f for f, on in (("job_script", self.script), ("job_env", self.env)) if not on]


@dataclass(frozen=True, slots=True)
class JobInfo:
    """One job as slurmctld sees it now (``scontrol show job``), the fields harp acts on.

    Fields Slurm has not filled in (``(null)``, ``N/A``, ``None``, absent) are
    None, so "unknown" never passes for a value: a pending job's owner may be
    unknown for a moment, and a job without a memory limit has ``mem_mb`` None.
    ``mem_mb`` is the per-node limit (``--mem``, MinMemoryNode),
    ``mem_per_cpu_mb`` the per-CPU one (``--mem-per-cpu``, MinMemoryCPU): a
    job has at most one of them.
    """

    job_id: str
    name: str | None = None
    user: str | None = None
    uid: int | None = None
    state: str | None = None
    reason: str | None = None
    restarts: int = 0
    time_limit_s: int | None = None
    mem_mb: int | None = None
    mem_per_cpu_mb: int | None = None
    comment: str | None = None
    workdir: str | None = None
    account: str | None = None
    end_time: float | None = None  # epoch seconds the last run ended (EndTime); None while it runs
    std_out: str | None = None  # the output file as slurmctld expanded it (StdOut)
    std_err: str | None = None  # the error file (StdErr): the output file unless the job split them
    submit_time: float | None = None  # epoch seconds slurmctld accepted it (SubmitTime; whole seconds)
    cpus_per_task: int | None = None  # CPUs/Task
    requeue: bool | None = None  # Requeue=1: slurmctld will requeue it (--requeue, or the site's JobRequeue=1)

    @property
    def held(self) -> bool:
        """Pending and held: after ``requeuehold`` (REQUEUE_HOLD, or PENDING for a held reason)."""
        state = (self.state or "").upper()
        reason = (self.reason or "").lower()
        return state.startswith("REQUEUE_HOLD") or (state.startswith("PENDING") and "held" in reason)

    @property
    def completing(self) -> bool:
        """COMPLETING: slurmd is still ending the run (a job held while it ran is PENDING only after)."""
        return (self.state or "").upper().startswith("COMPLETING")

    @property
    def finished(self) -> bool:
        """The job's run has ended (a state in ``FINISHED_STATES``)."""
        return (self.state or "") in FINISHED_STATES


#: state reasons of a pending job that is not in line for processors now: held, after another job, not yet
#: begun, or an array's tasks beyond its ``%N`` throttle (they run a few at a time, never filling the machine)
NOT_IN_LINE = frozenset(
    {"JobHeldUser", "JobHeldAdmin", "Dependency", "DependencyNeverSatisfied", "BeginTime", "JobArrayTaskLimit"}
)


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """One job slurmctld still runs or keeps pending: a row of ``queue()``.

    What harpd's watcher needs to extend running jobs and re-size pending
    ones, for every job at once (one Slurm call per interval, never one per
    job).  ``job_id`` is the id Slurm acts on (``123`` or ``123_4`` for an
    array task); ``array_job_id`` the array's id (None for a plain job), with
    ``array_task`` None for the array's still-pending tasks listed as one
    record, which stands for ``tasks`` jobs (``array_task_string``, 1 for any
    other record).  ``time_used_s`` is Slurm's RunTime; ``time_limit_s`` None
    means unlimited or unknown.  ``reason`` is why a pending job waits
    (Slurm's state reason; None when it gives none).
    """

    job_id: str
    state: str
    user: str | None = None
    uid: int | None = None
    array_job_id: str | None = None
    array_task: str | None = None
    time_limit_s: int | None = None
    time_used_s: int | None = None
    start_time: float | None = None
    partition: str | None = None
    comment: str | None = None
    mem_mb: int | None = None
    mem_per_cpu_mb: int | None = None
    cpus_per_task: int | None = None
    num_tasks: int | None = None
    reason: str | None = None
    tasks: int = 1

    @property
    def running(self) -> bool:
        return self.state == "RUNNING"

    @property
    def pending(self) -> bool:
        return self.state == "PENDING"

    @property
    def eligible(self) -> bool:
        """Pending and waiting for the machine, not for a hold, another job or a begin time.

        What the queue's depth counts (``harpd.slurm.queue_load``): a held job
        or one waiting on a dependency or ``--begin`` is not in line for
        processors now, and a user who holds a thousand jobs must not make
        harp plan everyone else's jobs as if the machine were full.
        """
        return self.pending and (self.reason or "") not in NOT_IN_LINE

    @property
    def time_left_s(self) -> int | None:
        """Seconds until the limit as Slurm counts it; None when unlimited or unknown."""
        if self.time_limit_s is None or self.time_used_s is None:
            return None
        return self.time_limit_s - self.time_used_s


class JobChanges(TypedDict, total=False):
    """What ``update_job`` may change; keys left out stay as they are.

    ``time_limit_s`` goes to Slurm in whole minutes, rounded up
    (``whole_minutes``); ``start_now`` lets a requeued job start at once
    instead of waiting out its BeginTime (about two minutes).
    """

    time_limit_s: int
    mem_mb: int
    mem_per_cpu_mb: int
    cpus_per_task: int  # of a pending single-task job: its CPUs per task, per node and in all
    comment: str
    start_now: bool


def whole_minutes(seconds: int) -> int:
    """A time limit as Slurm keeps it: whole minutes, rounded up, at least one.

    Slurm stores limits in minutes, so sbatch's ``--time=N`` and scontrol's
    ``TimeLimit=N`` take minutes; harp's seconds are rounded up so a limit
    never ends up shorter than decided.
    """
    return max(1, -(-int(seconds) // 60))


@runtime_checkable
class SlurmBackend(Protocol):
    """Slurm as harp uses it.  Every method raises ``SlurmError`` on failure.

    Where the failure's meaning is known it is a subclass: ``JobUnknown``
    (slurmctld answered: no such job), ``SlurmUnavailable`` (no answer in
    time), ``NotRecordedYet`` (accounting has no record of the job yet).
    """

    def submit(
        self,
        argv: list[str],
        script: bytes | None,
        cwd: str | os.PathLike[str] | None,
        env: Mapping[str, str] | None,
        as_uid: int | None = None,
    ) -> str:
        """Run ``sbatch --parsable ARGV`` (script on stdin) and return the job id.

        ``argv`` are sbatch options (and, when ``script`` is None, the script
        path and its arguments).  ``env`` is the environment of sbatch, which
        the job inherits; ``as_uid`` submits as that user (harpd runs as root).
        """
        ...

    def sacct_jobs(
        self,
        job_ids: list[str] | None,
        since: float | None,
        until: float | None,
        all_users: bool,
    ) -> list[JobRecord]:
        """Accounting records of the given jobs (or of every job in the window).

        Finished and running jobs alike (``outcome`` RUNNING for the latter),
        classified by ``harpd.slurm.classify``.  A job requeued in place appears once
        per run, ``attempt`` numbering the runs from 1.
        """
        ...

    def show_job(self, job_id: str) -> JobInfo:
        """The controller's view of the job (``scontrol show job``); JobUnknown when it does not know it."""
        ...

    def partitions(self) -> dict[str, PartitionInfo]:
        """Every partition with its limits, from ``scontrol show partition/node``."""
        ...

    def requeue_hold(self, job_id: str) -> None:
        """``scontrol requeuehold JOB``: back to pending, held, same job id."""
        ...

    def update_job(self, job_id: str, **changes: Unpack[JobChanges]) -> None:
        """Change a (held or pending) job's limits and comment: ``scontrol update``.

        At least one change; SlurmError when Slurm refuses any of them.
        """
        ...

    def queue(self) -> list[QueuedJob]:
        """Every running and pending job slurmctld holds, all users, in ONE Slurm call."""
        ...

    def held_jobs(self) -> list[QueuedJob]:
        """Every job slurmctld still holds, finished ones too (kept for MinJobAge), in ONE Slurm call.

        What harpd searches for decision tokens: a job that ran in seconds has
        left the queue before the next poll, not slurmctld.
        """
        ...

    def release(self, job_id: str) -> None:
        """``scontrol release JOB``."""
        ...

    def cancel(self, job_id: str) -> None:
        """``scancel JOB``."""
        ...

    def signal(self, job_id: str, signal: str) -> None:
        """``scancel --signal=SIG --batch JOB``: the job's batch shell only (a checkpoint request)."""
        ...
