"""The watcher tests' Slurm: the one fake (tests/helpers/fake_slurm.py) with the watcher's defaults."""

from __future__ import annotations

from typing import Any

import pytest

from harp_submit.units import parse_mem
from harpd.config import HarpSettings
from harpd.protocol import Decision, Resources
from harpd.slurm.base import PartitionInfo
from harpd.store import Store
from tests.helpers.fake_slurm import FakeJob, FakeSlurm

WATCH_PARTITIONS = {
    "debug": PartitionInfo("debug", 3600, 8000, 8, 1, default=True),
    "tiny": PartitionInfo("tiny", 180, 8000, 8, 1),
}


class FakeQueue(FakeSlurm):
    """``FakeSlurm`` on partitions debug and tiny, whose ``add`` defaults to alice's running job with 60 s.

    Only a shorthand for the watcher's many jobs: what Slurm does lives in FakeSlurm.
    """

    def __init__(self) -> None:
        super().__init__(partitions=WATCH_PARTITIONS)

    def add(  # type: ignore[override]  # the watcher's shorthand names
        self,
        job_id: str,
        uid: int = 1000,
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
    ) -> FakeJob:
        return super().add(
            job_id,
            uid,
            state=state,
            time_s=limit_s,
            time_used_s=used_s,
            comment=comment,
            partition=partition,
            array_job_id=array_job_id,
            mem_mb=mem_mb,
            mem_per_cpu_mb=mem_per_cpu_mb,
            cpus_per_task=cpus,
            start_time=start,
        )


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
        Resources.model_validate(original),
        Resources.model_validate(decided),
        Decision(changes=changes, model="m") if decision else None,
        verified=verified,
    )


def settings(**watch: Any) -> HarpSettings:
    return HarpSettings(watch={"interval_s": 5, "margin_s": 45, **watch})


def with_predict(s: HarpSettings, **predict: Any) -> HarpSettings:
    """``s`` with these ``[predict]`` settings changed (e.g. ``soft_max_extensions=2``)."""
    return s.model_copy(update={"predict": s.predict.model_copy(update=predict)}) if predict else s


@pytest.fixture
def store(tmp_path):
    s = Store.open(tmp_path / "harp.db")
    yield s
    s.close()


@pytest.fixture
def slurm():
    return FakeQueue()
