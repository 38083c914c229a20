"""The one record of a finished job that every part of harp speaks.

Importers (SWF, sacct exports), the sacct poller, the store, the models, the
replay and the reports all exchange ``JobRecord``: keeping a single shape means
a model trained on imported history sees exactly what it will see live.

Units are fixed here so nobody converts twice: seconds, MiB, counts.
``None`` means "unknown" (or, for a request, "no limit").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from enum import Enum
from typing import Any


class Outcome(str, Enum):
    """How a job ended, as harp classifies it (see ``harpd.slurm.classify``)."""

    COMPLETED = "completed"
    TIMEOUT = "timeout"
    OOM = "oom"
    FAILED = "failed"
    CANCELLED = "cancelled"
    NODE_FAIL = "node_fail"
    PREEMPTED = "preempted"
    RUNNING = "running"  # not finished yet: never used for training
    UNKNOWN = "unknown"

    @property
    def finished(self) -> bool:
        return self not in (Outcome.RUNNING, Outcome.UNKNOWN)


@dataclass(slots=True)
class JobRecord:
    """What a job asked for, what it got and what it used.

    ``censored_time``/``censored_mem`` mark usage that is only a lower bound:
    a job killed at its time limit (TIMEOUT) needed more time than it used; a
    job killed for memory needed more than its peak RSS.  Models must treat such
    values as "at least", never as the true need.
    """

    job_id: str
    source: str = "slurm"  # cluster name or trace file stem
    user: str | None = None
    account: str | None = None
    group: str | None = None
    partition: str | None = None
    job_name: str | None = None
    signature: str | None = None  # normalised command signature (features)
    submit_time: float | None = None  # epoch seconds
    start_time: float | None = None
    end_time: float | None = None
    outcome: Outcome = Outcome.UNKNOWN
    state: str | None = None  # raw scheduler state, for reports
    exit_code: int | None = None
    exit_signal: int | None = None
    req_time_s: float | None = None  # None: unlimited / unknown
    req_mem_mb: float | None = None  # per job (all nodes), MiB
    req_cpus: int | None = None  # total cores
    req_nodes: int | None = None
    req_gpus: int | None = None
    alloc_cpus: int | None = None
    alloc_nodes: int | None = None
    alloc_gpus: int | None = None
    used_time_s: float | None = None  # elapsed wall time
    used_mem_mb: float | None = None  # peak RSS over steps (per job)
    used_cpu_s: float | None = None  # total CPU time
    input_bytes: float | None = None  # bytes the job read (Nextflow's rchar): workflow tasks' input size
    array_size: int | None = None
    censored_time: bool = False
    censored_mem: bool = False
    harp_sized: bool = False  # submitted through harp with a changed request
    attempt: int = 1  # 1 for a first run; >1 for harp resubmissions

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["outcome"] = self.outcome.value
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> JobRecord:
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if "outcome" in kw and not isinstance(kw["outcome"], Outcome):
            kw["outcome"] = Outcome(kw["outcome"])
        for b in ("censored_time", "censored_mem", "harp_sized"):
            if b in kw:
                kw[b] = bool(kw[b])
        return cls(**kw)
