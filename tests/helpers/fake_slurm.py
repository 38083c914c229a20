"""The one in-memory Slurm of the unit tests: every ``SlurmBackend`` method, as slurmctld and sacct answer.

Holds jobs as slurmctld would report them (``FakeJob``: owner, state, limits,
time used, partition, comment) and answers ``show_job``/``held_jobs``/``queue``
the way the CLI backend does, including its errors: an id it does not know is
scontrol's "Invalid job id specified", a job that is no longer running or
pending cannot be updated or signalled (``JobUnknown`` and ``SlurmError``
as the CLI backend classifies them), and ``down`` makes every controller
call fail as an unreachable controller (``SlurmUnavailable``).  A test moves a job on by setting its
fields (``jobs["7"].time_used_s = 95``, ``jobs["7"].state = "TIMEOUT"``).
``update_error`` makes the next ``update_job`` fail, before it took effect or,
with ``update_error_after``, after (a timed-out scontrol whose change happened).
Accounting is ``records`` (JobRecords, as ``sacct_jobs`` returns them);
``sacct_error`` makes sacct fail as a slurmdbd that is down (``SlurmUnavailable``).  What harpd asked
of it is kept (``updates`` in scontrol's spelling, ``actions``, ``signals``,
``sacct_calls``, ``submitted``), so a test can check what harpd did, not only
what it said.

tests/unit/test_fake_slurm.py checks it against the ``SlurmBackend``
Protocol, so a method added to the Protocol cannot be missed here.  Real
behaviour is covered against a real Slurm in tests/slurm/.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from harpd.records import JobRecord
from harpd.slurm.base import JobInfo, JobUnknown, PartitionInfo, QueuedJob, SlurmError, SlurmUnavailable
from harpd.slurm.scontrol import update_fields

__all__ = ["FakeSlurm", "FakeJob", "DEFAULT_PARTITIONS"]

_NAMES = {0: "root", 1000: "alice", 1001: "bob", 65534: "nobody"}
_UNREACHABLE = "Unable to contact slurm controller"
DEFAULT_PARTITIONS = {"short": PartitionInfo("short", 3600, 8000, 2, 1, default=True)}


@dataclass
class FakeJob:
    """One job slurmctld holds, as the fake keeps it: what ``scontrol show job`` and ``squeue`` both read.

    Mutable, so a test can move the job on (its time used, its state) between
    two calls of harpd's code.
    """

    job_id: str
    uid: int | None  # None (and user None): slurmctld has not filled in the owner yet
    user: str | None
    state: str = "PENDING"
    reason: str | None = None
    restarts: int = 0
    time_limit_s: int | None = None
    time_used_s: int = 0
    mem_mb: int | None = None
    mem_per_cpu_mb: int | None = None
    cpus_per_task: int | None = 1
    comment: str | None = None
    partition: str | None = None
    array_job_id: str | None = None
    start_time: float | None = None  # when its run started (shown while it runs)
    submit_time: float | None = None

    @property
    def active(self) -> bool:
        """Running or pending: what squeue lists, and what scontrol may still change."""
        return self.state in ("RUNNING", "PENDING")

    def info(self) -> JobInfo:
        """As ``scontrol show job`` reports it."""
        return JobInfo(
            job_id=self.job_id,
            user=self.user,
            uid=self.uid,
            state=self.state,
            reason=self.reason,
            restarts=self.restarts,
            time_limit_s=self.time_limit_s,
            mem_mb=self.mem_mb,
            mem_per_cpu_mb=self.mem_per_cpu_mb,
            cpus_per_task=self.cpus_per_task,
            comment=self.comment,
            submit_time=self.submit_time,
        )

    def queued(self) -> QueuedJob:
        """As one line of the queue listing."""
        return QueuedJob(
            job_id=self.job_id,
            state=self.state,
            user=self.user,
            uid=self.uid,
            array_job_id=self.array_job_id,
            time_limit_s=self.time_limit_s,
            time_used_s=self.time_used_s,
            start_time=self.start_time if self.state == "RUNNING" else None,
            partition=self.partition,
            comment=self.comment,
            mem_mb=self.mem_mb,
            mem_per_cpu_mb=self.mem_per_cpu_mb,
            cpus_per_task=self.cpus_per_task,
            num_tasks=1,
        )


class FakeSlurm:
    """Jobs by id; ``add`` submits one, ``show_job``/``queue`` read them back, ``records`` is sacct."""

    def __init__(
        self, records: list[JobRecord] | None = None, partitions: dict[str, PartitionInfo] | None = None
    ) -> None:
        self.jobs: dict[str, FakeJob] = {}
        self.down = False
        self.listings = 0  # listings of the whole queue (held_jobs, and queue through it)
        self.updates: list[tuple[str, dict[str, str]]] = []  # (job_id, scontrol update fields) of each update_job
        self.update_error: str | None = None  # the next update_job raises SlurmError(this) ...
        self.update_error_after = False  # ... after its change took effect
        self.records: list[JobRecord] = list(records or [])
        self.sacct_error: str | None = None  # every sacct_jobs raises SlurmError(this): slurmdbd down
        self.sacct_calls: list[tuple[Any, ...]] = []  # (job_ids, since, until, all_users) of each sacct_jobs
        self.parts = dict(DEFAULT_PARTITIONS if partitions is None else partitions)
        self.partition_calls = 0
        self.submitted: list[tuple[list[str], bytes | None, str | None, int | None]] = []
        self.actions: list[tuple[str, ...]] = []  # ("requeue_hold" | "release" | "cancel" | "signal", job_id, ...)
        self._next_id = 5000

    # ------------------------------------------------------------------ test controls

    def add(
        self,
        job_id: str,
        uid: int,
        *,
        time_s: int | None = None,
        mem_mb: int | None = None,
        mem_per_cpu_mb: int | None = None,
        cpus_per_task: int | None = 1,
        comment: str | None = None,
        submit_time: float | None = None,
        state: str = "PENDING",
        time_used_s: int = 0,
        partition: str | None = None,
        array_job_id: str | None = None,
        start_time: float | None = None,
    ) -> FakeJob:
        job = FakeJob(
            job_id=str(job_id),
            uid=uid,
            user=_NAMES.get(uid, str(uid)),
            state=state,
            time_limit_s=time_s,
            time_used_s=time_used_s,
            mem_mb=mem_mb,
            mem_per_cpu_mb=mem_per_cpu_mb,
            cpus_per_task=cpus_per_task,
            comment=comment,
            partition=partition,
            array_job_id=array_job_id,
            start_time=start_time,
            submit_time=float(int(time.time() if submit_time is None else submit_time)),
        )
        self.jobs[job.job_id] = job
        return job

    def put(self, info: JobInfo) -> FakeJob:
        """Hold a job exactly as ``scontrol show job`` described it (``job_info`` of its text)."""
        job = FakeJob(
            job_id=info.job_id,
            uid=info.uid,
            user=info.user,
            state=info.state or "PENDING",
            reason=info.reason,
            restarts=info.restarts,
            time_limit_s=info.time_limit_s,
            mem_mb=info.mem_mb,
            mem_per_cpu_mb=info.mem_per_cpu_mb,
            cpus_per_task=info.cpus_per_task,
            comment=info.comment,
            submit_time=info.submit_time,
        )
        self.jobs[job.job_id] = job
        return job

    @property
    def signals(self) -> list[tuple[str, str]]:
        """(job_id, signal) of each ``signal`` that reached a running job."""
        return [(a[1], a[2]) for a in self.actions if a[0] == "signal"]

    # ------------------------------------------------------------------ SlurmBackend

    def submit(self, argv: list[str], script: bytes | None, cwd: Any, env: Any, as_uid: int | None = None) -> str:
        self._controller("sbatch")
        self.submitted.append((list(argv), script, None if cwd is None else str(cwd), as_uid))
        self._next_id += 1
        uid = 0 if as_uid is None else as_uid
        self.add(str(self._next_id), uid)
        return str(self._next_id)

    def sacct_jobs(
        self, job_ids: list[str] | None, since: float | None, until: float | None, all_users: bool
    ) -> list[JobRecord]:
        """``records`` of the jobs asked for (an array's tasks by the array's id too),
        or of those ended since ``since``."""
        self.sacct_calls.append((None if job_ids is None else list(job_ids), since, until, all_users))
        if self.sacct_error:
            raise SlurmUnavailable(self.sacct_error)
        out = []
        for r in self.records:
            if job_ids is not None:
                if r.job_id in job_ids or r.job_id.split("_")[0] in job_ids:
                    out.append(JobRecord.from_dict(r.to_dict()))
            elif r.end_time is None or since is None or r.end_time >= since:
                out.append(JobRecord.from_dict(r.to_dict()))
        return out

    def show_job(self, job_id: str) -> JobInfo:
        self._controller("scontrol show job", "slurm_load_jobs error: ")
        if job_id not in self.jobs:
            raise JobUnknown(f"scontrol show job {job_id}: slurm_load_jobs error: Invalid job id specified")
        return self.jobs[job_id].info()

    def partitions(self) -> dict[str, PartitionInfo]:
        self._controller("scontrol show partition")
        self.partition_calls += 1
        return dict(self.parts)

    def requeue_hold(self, job_id: str) -> None:
        job = self._known("requeuehold", job_id)
        self.actions.append(("requeue_hold", job_id))
        job.state, job.restarts, job.reason = "PENDING", job.restarts + 1, "job_requeued_in_held_state"

    def update_job(self, job_id: str, **changes: Any) -> None:
        """``scontrol update``: recorded in scontrol's spelling, refused for a job that has ended."""
        fields = update_fields(changes)
        self.updates.append((job_id, fields))
        if self.update_error and not self.update_error_after:
            message, self.update_error = self.update_error, None
            raise SlurmError(message)
        job = self.jobs.get(job_id)
        if job is None or not job.active:
            raise SlurmError(f"scontrol update JobId={job_id} failed (exit 1): Job has already finished")
        if "TimeLimit" in fields:
            job.time_limit_s = int(fields["TimeLimit"]) * 60
        if "Comment" in fields:
            job.comment = fields["Comment"]
        if "MinMemoryNode" in fields:
            job.mem_mb = int(fields["MinMemoryNode"])
        if "MinMemoryCPU" in fields:
            job.mem_per_cpu_mb = int(fields["MinMemoryCPU"])
        if "CPUsPerTask" in fields:
            job.cpus_per_task = int(fields["CPUsPerTask"])
        if self.update_error:
            message, self.update_error, self.update_error_after = self.update_error, None, False
            raise SlurmError(message)

    def queue(self) -> list[QueuedJob]:
        """The running and pending jobs, from one listing (as the CLI backend filters ``held_jobs``)."""
        return [j for j in self.held_jobs() if j.running or j.pending]

    def held_jobs(self) -> list[QueuedJob]:
        """Every job slurmctld holds, finished ones too."""
        self._controller("scontrol show job")
        self.listings += 1
        return [j.queued() for j in self.jobs.values()]

    def release(self, job_id: str) -> None:
        job = self._known("release", job_id)
        self.actions.append(("release", job_id))
        job.reason = None

    def cancel(self, job_id: str) -> None:
        job = self._known("scancel", job_id)
        self.actions.append(("cancel", job_id))
        job.state = "CANCELLED"

    def signal(self, job_id: str, signal: str) -> None:
        """``scancel --signal --batch``: reaches only a running job's batch shell."""
        self._controller("scancel --signal")
        job = self.jobs.get(job_id)
        if job is None or job.state != "RUNNING":
            raise SlurmError(f"scancel --signal={signal} --batch {job_id} failed (exit 1): Job has already finished")
        self.actions.append(("signal", job_id, signal))

    # ------------------------------------------------------------------ errors as the CLI words them

    def _controller(self, command: str, prefix: str = "") -> None:
        if self.down:
            raise SlurmUnavailable(f"{command}: {prefix}{_UNREACHABLE}")

    def _known(self, command: str, job_id: str) -> FakeJob:
        self._controller(f"scontrol {command}")
        if job_id not in self.jobs:
            raise JobUnknown(f"scontrol {command} {job_id}: Invalid job id specified")
        return self.jobs[job_id]
