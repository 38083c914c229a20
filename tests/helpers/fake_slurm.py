"""The one in-memory Slurm of the unit tests: every ``SlurmBackend`` method, as slurmctld and sacct answer.

Holds jobs as slurmctld would report them (owner, limits, submit time,
comment) and answers ``show_job``/``queue`` the way the CLI backend does,
including its errors: an id it does not know is scontrol's "Invalid job id
specified", and ``down`` makes every controller call fail as an unreachable
controller.  Accounting is ``records`` (JobRecords, as ``sacct_jobs`` returns
them); ``sacct_error`` makes sacct fail as a slurmdbd that is down.  What
harpd asked of it is kept (``updates``, ``actions``, ``sacct_calls``,
``submitted``), so a test can check what harpd did, not only what it said.

tests/unit/test_fake_slurm.py checks it against the ``SlurmBackend``
Protocol, so a method added to the Protocol cannot be missed here.  Real
behaviour is covered against a real Slurm in tests/slurm/.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from harpd.records import JobRecord
from harpd.slurm.base import JobInfo, PartitionInfo, QueuedJob, SlurmError

__all__ = ["FakeSlurm", "DEFAULT_PARTITIONS"]

_NAMES = {0: "root", 1000: "alice", 1001: "bob", 65534: "nobody"}
_UNREACHABLE = "Unable to contact slurm controller"
DEFAULT_PARTITIONS = {"short": PartitionInfo("short", 3600, 8000, 2, 1, default=True)}


class FakeSlurm:
    """Jobs by id; ``add`` submits one, ``show_job``/``queue`` read them back, ``records`` is sacct."""

    def __init__(
        self, records: list[JobRecord] | None = None, partitions: dict[str, PartitionInfo] | None = None
    ) -> None:
        self.jobs: dict[str, JobInfo] = {}
        self.down = False
        self.listings = 0  # calls of held_jobs: each is a listing of the whole queue
        self.updates: list[tuple[str, dict]] = []
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
    ) -> JobInfo:
        info = JobInfo(
            job_id=str(job_id),
            user=_NAMES.get(uid, str(uid)),
            uid=uid,
            state=state,
            time_limit_s=time_s,
            mem_mb=mem_mb,
            mem_per_cpu_mb=mem_per_cpu_mb,
            cpus_per_task=cpus_per_task,
            comment=comment,
            submit_time=float(int(time.time() if submit_time is None else submit_time)),
        )
        self.jobs[str(job_id)] = info
        return info

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
            raise SlurmError(self.sacct_error)
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
            raise SlurmError(f"scontrol show job {job_id}: slurm_load_jobs error: Invalid job id specified")
        return self.jobs[job_id]

    def partitions(self) -> dict[str, PartitionInfo]:
        self._controller("scontrol show partition")
        self.partition_calls += 1
        return dict(self.parts)

    def requeue_hold(self, job_id: str) -> None:
        info = self._known("requeuehold", job_id)
        self.actions.append(("requeue_hold", job_id))
        self.jobs[job_id] = dataclasses.replace(
            info, state="PENDING", restarts=info.restarts + 1, reason="job_requeued_in_held_state"
        )

    def update_job(self, job_id: str, **changes: Any) -> None:
        self.updates.append((job_id, changes))
        info = self.jobs[job_id]
        if "time_limit_s" in changes:
            info = dataclasses.replace(info, time_limit_s=changes["time_limit_s"])
        if "comment" in changes:
            info = dataclasses.replace(info, comment=changes["comment"])
        self.jobs[job_id] = info

    def queue(self) -> list[QueuedJob]:
        self._controller("squeue")
        return [
            QueuedJob(
                job_id=j.job_id,
                state=j.state or "PENDING",
                user=j.user,
                uid=j.uid,
                time_limit_s=j.time_limit_s,
                time_used_s=0,
                comment=j.comment,
                mem_mb=j.mem_mb,
                mem_per_cpu_mb=j.mem_per_cpu_mb,
            )
            for j in self.jobs.values()
        ]

    def held_jobs(self) -> list[QueuedJob]:
        self.listings += 1
        return self.queue()

    def release(self, job_id: str) -> None:
        info = self._known("release", job_id)
        self.actions.append(("release", job_id))
        self.jobs[job_id] = dataclasses.replace(info, reason=None)

    def cancel(self, job_id: str) -> None:
        info = self._known("scancel", job_id)
        self.actions.append(("cancel", job_id))
        self.jobs[job_id] = dataclasses.replace(info, state="CANCELLED")

    def signal(self, job_id: str, signal: str) -> None:
        self._known("scancel --signal", job_id)
        self.actions.append(("signal", job_id, signal))

    # ------------------------------------------------------------------ errors as the CLI words them

    def _controller(self, command: str, prefix: str = "") -> None:
        if self.down:
            raise SlurmError(f"{command}: {prefix}{_UNREACHABLE}")

    def _known(self, command: str, job_id: str) -> JobInfo:
        self._controller(f"scontrol {command}")
        if job_id not in self.jobs:
            raise SlurmError(f"scontrol {command} {job_id}: Invalid job id specified")
        return self.jobs[job_id]
