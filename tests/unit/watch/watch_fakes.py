"""An in-memory Slurm for the watcher tests: running/pending jobs with limits, time used and comments."""

from __future__ import annotations

from typing import Any

import pytest

from harp_submit.units import parse_mem
from harpd.config import HarpSettings
from harpd.slurm.base import PartitionInfo, QueuedJob, SlurmError
from harpd.slurm.scontrol import update_fields
from harpd.store import Store


class FakeQueue:
    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, dict[str, str]]] = []
        self.fail: str | None = None  # the next update_job raises this
        self.fail_after = False  # ... after it took effect
        self.listings = 0
        self.signals: list[tuple[str, str]] = []

    def add(
        self,
        jid: str,
        *,
        state: str = "RUNNING",
        limit_s: int = 60,
        used_s: int = 0,
        comment: str | None = None,
        partition: str = "debug",
        array_job_id: str | None = None,
        mem_mb: int | None = None,
        mem_per_cpu_mb: int | None = None,
        cpus: int | None = None,
        start: float = 1_700_000_000.0,
    ) -> None:
        self.jobs[jid] = dict(
            state=state,
            limit=limit_s,
            used=used_s,
            comment=comment,
            partition=partition,
            array=array_job_id,
            mem=mem_mb,
            mem_cpu=mem_per_cpu_mb,
            cpus=cpus,
            start=start,
        )

    def queue(self) -> list[QueuedJob]:
        self.listings += 1
        return [
            QueuedJob(
                job_id=j,
                state=v["state"],
                user="alice",
                uid=1000,
                time_limit_s=v["limit"],
                time_used_s=v["used"],
                partition=v["partition"],
                comment=v["comment"],
                array_job_id=v["array"],
                mem_mb=v["mem"],
                mem_per_cpu_mb=v["mem_cpu"],
                cpus_per_task=v["cpus"],
                num_tasks=1,
                start_time=v["start"] if v["state"] == "RUNNING" else None,
            )
            for j, v in self.jobs.items()
            if v["state"] in ("RUNNING", "PENDING")
        ]

    def update_job(self, job_id: str, **changes: Any) -> None:
        fields = update_fields(changes)
        self.calls.append((job_id, fields))
        if self.fail and not self.fail_after:
            msg, self.fail = self.fail, None
            raise SlurmError(msg)
        j = self.jobs.get(job_id)
        if j is None or j["state"] not in ("RUNNING", "PENDING"):
            raise SlurmError(f"scontrol update JobId={job_id} failed (exit 1): Job has already finished")
        if "TimeLimit" in fields:
            j["limit"] = int(fields["TimeLimit"]) * 60
        if "Comment" in fields:
            j["comment"] = fields["Comment"]
        if "MinMemoryNode" in fields:
            j["mem"] = int(fields["MinMemoryNode"])
        if "MinMemoryCPU" in fields:
            j["mem_cpu"] = int(fields["MinMemoryCPU"])
        if "CPUsPerTask" in fields:
            j["cpus"] = int(fields["CPUsPerTask"])
        if self.fail:
            msg, self.fail, self.fail_after = self.fail, None, False
            raise SlurmError(msg)

    def signal(self, job_id: str, signal: str) -> None:
        j = self.jobs.get(job_id)
        if j is None or j["state"] != "RUNNING":
            raise SlurmError(f"scancel --signal={signal} --batch {job_id} failed (exit 1): Job has already finished")
        self.signals.append((job_id, signal))

    def partitions(self) -> dict[str, PartitionInfo]:
        return {
            "debug": PartitionInfo("debug", 3600, 8000, 8, 1, default=True),
            "tiny": PartitionInfo("tiny", 180, 8000, 8, 1),
        }


def register(
    store: Store,
    jid: str,
    *,
    original_s: int | None = 600,
    harp_time: str | None = "1",
    signature: str = "sig-a",
    user: str = "alice",
    uid: int = 1000,
    decision: bool = True,
    original_mem_mb: int | None = None,
    harp_mem: str | None = None,
    mem_option: str = "mem",
    verified: bool = True,
    harp_lines: list[str] | None = None,
    options: dict[str, Any] | None = None,
) -> None:
    """What harp-submit registers for a job harp shortened to ``harp_time`` (minutes) (and ``harp_mem``)."""
    changes = [] if harp_time is None else [{"option": "time", "value": harp_time, "old": "10", "reason": "model"}]
    if harp_mem is not None:
        changes.append({"option": mem_option, "value": harp_mem, "old": f"{original_mem_mb}M", "reason": "model"})
    key = "mem_mb" if mem_option == "mem" else "mem_per_cpu_mb"
    original = {"time_s": original_s, **({key: original_mem_mb} if original_mem_mb else {}), **(options or {})}
    job = {
        "signature": signature,
        "job_name": "job.sh",
        "partition": "debug",
        "request": original,
        "harp_lines": list(harp_lines or []),
    }
    # what harpd stores once slurmctld vouched for it: the decided limits, verified
    decided = {**original, "time_s": int(harp_time) * 60 if harp_time is not None else original_s}
    if harp_mem is not None:
        decided[key] = parse_mem(harp_mem)
    store.add_submission(
        jid,
        uid,
        user,
        job,
        original,
        decided,
        {"changes": changes, "limits": {}, "model": "m", "explain": {}} if decision else None,
        verified=verified,
    )


def settings(**watch: Any) -> HarpSettings:
    return HarpSettings(watch={"interval_s": 5, "margin_s": 45, **watch})


@pytest.fixture
def store(tmp_path):
    s = Store.open(tmp_path / "harp.db")
    yield s
    s.close()


@pytest.fixture
def slurm():
    return FakeQueue()
