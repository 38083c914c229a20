"""The ``harp status`` answer as a typed record: what harpd's status op sends and ``harp status`` prints.

``job_status`` builds a ``JobStatus``; harpd sends ``to_json()`` over its
socket and ``harp status`` reads it back with ``from_json`` before rendering,
so the wire JSON (and ``--format json``) is the one shape both ends agree on,
and the renderer reads named fields instead of string keys.

Parts whose JSON is another record's own (a Slurm record's ``to_dict``, a
recovery attempt, a limit change, a trial's row) stay that record's JSON: they
are shown as they were stored, and typing them belongs to their own packages.
Optional parts are ``None`` when the answer leaves their key out, so a record
read from an answer writes the same answer back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

from harpd.dnn.observed import GpuMemoryDict as GpuMemoryJson  # a DNN job's GPU memory per GPU
from harpd.protocol import AccountingHealth, LimitsHealth
from harpd.records import AttemptRow, LimitChangeRow


class RanWith(TypedDict):
    """What one run of the job really had, from Slurm's record."""

    attempt: int
    mem_mb: float | None
    time_s: float | None
    outcome: str
    state: str | None


class RunView(TypedDict):
    """One run's Slurm record and its seff efficiencies (``cpu_eff``, ``mem_eff``, ``time_eff``)."""

    job_id: str
    first: bool
    record: dict[str, Any]
    efficiency: dict[str, float | None]


class JobStatusJson(TypedDict, total=False):
    """``JobStatus`` on the wire: what harpd's status op answers and ``harp status --format json`` prints.

    Every key is optional for a reader: an older harpd's answer lacks some.
    """

    job_id: str
    registered: bool
    chain_id: str | None
    record: dict[str, Any] | None
    source: str | None
    source_kind: str | None
    also_imported: list[str]
    attempts: list[AttemptRow]
    limit_changes: list[LimitChangeRow]
    runs: list[RunView]
    ledger: list[dict[str, Any]]
    ran_with: list[RanWith]
    trial: dict[str, Any]
    other_records: list[dict[str, Any]]
    uid: int | None
    user: str | None
    state: str | None
    outcome: str | None
    submitted_at: float | None
    done_at: float | None
    original: dict[str, Any] | None
    submitted: dict[str, Any] | None
    decision: dict[str, Any] | None
    registered_job_id: str | None
    gpu_memory: GpuMemoryJson
    limits_mode: LimitsHealth
    accounting: AccountingHealth


@dataclass(frozen=True)
class JobStatus:
    """One job as its asker may see it: registration, Slurm record, limit changes, runs, recovery attempts.

    ``registered``: harp-submit registered it, and the registration fields
    (``uid`` .. ``registered_job_id``, ``gpu_memory``) are part of the answer;
    otherwise ``user`` and ``outcome`` come from Slurm's record.  ``ledger`` and
    ``ran_with`` are ``None`` where harp never handled the job; ``limits_mode``
    and ``accounting`` are harpd's own, added by its status op.
    """

    job_id: str
    registered: bool = False
    chain_id: str | None = None
    record: dict[str, Any] | None = None
    # where the record comes from: "cluster" (harpd's own), "imported" (a trace), "unknown" (cannot tell)
    source: str | None = None
    source_kind: str | None = None
    # other imported traces holding the same job id: a different job, never mixed in
    also_imported: tuple[str, ...] = ()
    attempts: tuple[AttemptRow, ...] = ()
    # harpd's changes of the live job's limit: extensions while it ran, re-sizes while it waited
    limit_changes: tuple[LimitChangeRow, ...] = ()
    runs: tuple[RunView, ...] = ()
    ledger: tuple[dict[str, Any], ...] | None = None
    ran_with: tuple[RanWith, ...] | None = None
    trial: dict[str, Any] | None = None
    other_records: tuple[dict[str, Any], ...] | None = None
    uid: int | None = None
    user: str | None = None
    state: str | None = None
    outcome: str | None = None
    submitted_at: float | None = None
    done_at: float | None = None
    original: dict[str, Any] | None = None
    submitted: dict[str, Any] | None = None
    decision: dict[str, Any] | None = None
    registered_job_id: str | None = None
    gpu_memory: GpuMemoryJson | None = None
    limits_mode: LimitsHealth | None = None
    accounting: AccountingHealth | None = None

    def to_json(self) -> JobStatusJson:
        """The answer's JSON object, keys in the order harpd has always sent them."""
        out: JobStatusJson = {
            "job_id": self.job_id,
            "registered": self.registered,
            "chain_id": self.chain_id,
            "record": self.record,
            "source": self.source,
            "source_kind": self.source_kind,
            "also_imported": list(self.also_imported),
            "attempts": list(self.attempts),
            "limit_changes": list(self.limit_changes),
            "runs": list(self.runs),
        }
        if self.ledger is not None or self.ran_with is not None:
            out["ledger"] = list(self.ledger or ())
            out["ran_with"] = list(self.ran_with or ())
        if self.trial is not None:
            out["trial"] = self.trial
        if self.other_records is not None:
            out["other_records"] = list(self.other_records)
        if self.registered:
            out["uid"] = self.uid
            out["user"] = self.user
            out["state"] = self.state
            out["outcome"] = self.outcome
            out["submitted_at"] = self.submitted_at
            out["done_at"] = self.done_at
            out["original"] = self.original
            out["submitted"] = self.submitted
            out["decision"] = self.decision
            out["registered_job_id"] = self.registered_job_id
            if self.gpu_memory is not None:
                out["gpu_memory"] = self.gpu_memory
        else:
            out["user"] = self.user
            out["outcome"] = self.outcome
        if self.limits_mode is not None:
            out["limits_mode"] = self.limits_mode
        if self.accounting is not None:
            out["accounting"] = self.accounting
        return out

    @classmethod
    def from_json(cls, job: JobStatusJson) -> JobStatus:
        """Read an answer back (keys it lacks take their defaults: an older harpd's answer still renders)."""
        ledger, ran_with, others = job.get("ledger"), job.get("ran_with"), job.get("other_records")
        return cls(
            job_id=str(job.get("job_id")),
            registered=bool(job.get("registered")),
            chain_id=job.get("chain_id"),
            record=job.get("record"),
            source=job.get("source"),
            source_kind=job.get("source_kind"),
            also_imported=tuple(job.get("also_imported") or ()),
            attempts=tuple(job.get("attempts") or ()),
            limit_changes=tuple(job.get("limit_changes") or ()),
            runs=tuple(job.get("runs") or ()),
            ledger=None if ledger is None else tuple(ledger),
            ran_with=None if ran_with is None else tuple(ran_with),
            trial=job.get("trial"),
            other_records=None if others is None else tuple(others),
            uid=job.get("uid"),
            user=job.get("user"),
            state=job.get("state"),
            outcome=job.get("outcome"),
            submitted_at=job.get("submitted_at"),
            done_at=job.get("done_at"),
            original=job.get("original"),
            submitted=job.get("submitted"),
            decision=job.get("decision"),
            registered_job_id=job.get("registered_job_id"),
            gpu_memory=job.get("gpu_memory"),
            limits_mode=job.get("limits_mode"),
            accounting=job.get("accounting"),
        )
