"""A slurmctld stand-in for unit tests of what harpd verifies with Slurm.

Holds jobs as slurmctld would report them (owner, limits, submit time,
comment) and answers ``show_job``/``queue`` the way the CLI backend does,
including its errors: an id it does not know is scontrol's "Invalid job id
specified", and ``down`` makes every call fail as an unreachable controller.
Real behaviour is covered against a real Slurm in tests/slurm/.
"""

from __future__ import annotations

import dataclasses
import time

from harpd.slurm.base import JobInfo, QueuedJob, SlurmError

__all__ = ["FakeSlurm"]

_NAMES = {0: "root", 1000: "alice", 1001: "bob", 65534: "nobody"}


class FakeSlurm:
    """Jobs by id; ``add`` submits one, ``show_job``/``queue`` read them back."""

    def __init__(self) -> None:
        self.jobs: dict[str, JobInfo] = {}
        self.down = False
        self.listings = 0  # calls of held_jobs: each is a listing of the whole queue
        self.updates: list[tuple[str, dict]] = []

    def add(self, job_id: str, uid: int, *, time_s: int | None = None, mem_mb: int | None = None,
            mem_per_cpu_mb: int | None = None, cpus_per_task: int | None = 1, comment: str | None = None,
            submit_time: float | None = None, state: str = "PENDING") -> JobInfo:
        info = JobInfo(job_id=str(job_id), user=_NAMES.get(uid, str(uid)), uid=uid, state=state,
                       time_limit_s=time_s, mem_mb=mem_mb, mem_per_cpu_mb=mem_per_cpu_mb,
                       cpus_per_task=cpus_per_task, comment=comment,
                       submit_time=float(int(time.time() if submit_time is None else submit_time)))
        self.jobs[str(job_id)] = info
        return info

    def show_job(self, job_id: str) -> JobInfo:
        if self.down:
            raise SlurmError("scontrol show job: slurm_load_jobs error: Unable to contact slurm controller")
        if job_id not in self.jobs:
            raise SlurmError(f"scontrol show job {job_id}: slurm_load_jobs error: Invalid job id specified")
        return self.jobs[job_id]

    def held_jobs(self) -> list[QueuedJob]:
        self.listings += 1
        return self.queue()

    def queue(self) -> list[QueuedJob]:
        if self.down:
            raise SlurmError("squeue: Unable to contact slurm controller")
        return [QueuedJob(job_id=j.job_id, state=j.state or "PENDING", user=j.user, uid=j.uid,
                          time_limit_s=j.time_limit_s, time_used_s=0, comment=j.comment, mem_mb=j.mem_mb,
                          mem_per_cpu_mb=j.mem_per_cpu_mb) for j in self.jobs.values()]

    def update_job(self, job_id: str, **changes) -> None:
        self.updates.append((job_id, changes))
        info = self.jobs[job_id]
        if "time_limit_s" in changes:
            info = dataclasses.replace(info, time_limit_s=changes["time_limit_s"])
        if "comment" in changes:
            info = dataclasses.replace(info, comment=changes["comment"])
        self.jobs[job_id] = info
