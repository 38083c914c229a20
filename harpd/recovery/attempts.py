"""One attempt of a recovery chain, typed, and its row in the store's ``attempts`` table.

The store keeps each attempt's limits and bookkeeping as one JSON object
(``attempts.limits``) that ``harp status`` shows and older harpd versions
wrote; ``to_json`` writes exactly the keys that object has always had, so a
row read and written back is unchanged byte for byte.

``AttemptLimits`` is a pydantic model rather than ``protocol.Resources``:
recovery needs ``cpus_per_node`` (the per-CPU memory cap is the node's memory
over it), which the wire contract has no field for, and the wire contract's
bounds are meant for untrusted requests, not for limits Slurm itself applied.
It is pydantic rather than a dataclass because a row's keys matter, not only
its values: a first run with no known memory stores ``"mem_mb": null``, a
per-CPU job no ``mem_mb`` at all, and pydantic's set-fields tracking keeps
that distinction through reads and updates.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from harpd.records import AttemptRecord, LimitChange

__all__ = [
    "AttemptLimits",
    "Plan",
    "Attempt",
    "Stop",
    "Fallback",
    "marker",
    "MEM_KEYS",
    "DECIDED",
    "SUBMITTED",
    "REQUEUED",
    "DONE",
    "NOT_SUBMITTED",
]

# the persisted steps of an attempt (the machine in harpd.recovery.machine)
DECIDED = "decided"
SUBMITTED = "submitted"
REQUEUED = "requeued"
DONE = "done"
NOT_SUBMITTED = "not_submitted"  # outcome of a decided attempt that could not be carried out

#: the memory options, one of which an attempt's limits carry: the one the job used
MEM_KEYS = ("mem_mb", "mem_per_cpu_mb", "mem_per_gpu_mb")
_LIMIT_KEYS = frozenset({"time_s", "partition", "nodes", "cpus_per_node", *MEM_KEYS})


class Stop(Exception):
    """The decided attempt cannot be carried out, now or later: the chain ends (reason)."""


class NotYet(Exception):
    """The attempt cannot be carried out yet, through nobody's fault: a later tick does it (not a failed try)."""


class Fallback(Exception):
    """Requeue is impossible and nothing was done: resubmit instead (reason)."""


def marker(chain: str, attempt: int) -> str:
    """The Slurm comment of attempt ``attempt`` of ``chain``: visible to users, searchable after a crash."""
    return f"harp retry {attempt} of {chain}"


_MARKER = re.compile(r"^harp retry \d+ of \S+$")
#: harpd's extender's note (``harpd.watch.extend.note``): true only while that run lasts
EXTENDED_NOTE = re.compile(r"^harp extended \S.* -> \S.*$")


def without_notes(comment: str | None, *patterns: re.Pattern[str]) -> list[str]:
    """The comment's ``; ``-separated parts, without Slurm's "(null)" and the parts ``patterns`` match."""
    return [
        p for p in (comment or "").split("; ") if p.strip() and p != "(null)" and not any(r.match(p) for r in patterns)
    ]


def with_marker(comment: str | None, mark: str) -> str:
    """The job's comment with harp's ``mark`` appended, a previous attempt's marker dropped.

    A requeue keeps the job id, so whatever reads the comment goes on reading
    it: Snakemake's Slurm executor names the rule there (``rule_work_wildcards_s1``)
    and reads it back for its efficiency report.  Replacing it would lose that;
    appending each attempt's marker would grow it without end.  An
    extension's note goes too: a requeued job starts again at the limit its
    attempt plans, and "harp extended 1 min -> 2 min" would no longer be true.
    """
    return "; ".join([*without_notes(comment, _MARKER, EXTENDED_NOTE), mark])


class AttemptLimits(BaseModel):
    """The limits one attempt runs with, in the units Slurm applies them.

    ``time_s`` is whole minutes in seconds; memory is in the option the job
    used: per node (``mem_mb``, ``--mem``), per CPU (``mem_per_cpu_mb``) or
    per GPU (``mem_per_gpu_mb``, never raised).  None: unknown.
    """

    model_config = ConfigDict(frozen=True)

    time_s: int | None = None
    mem_mb: int | None = None
    mem_per_cpu_mb: int | None = None
    mem_per_gpu_mb: int | None = None
    partition: str | None = None
    nodes: int | None = None
    cpus_per_node: int | None = None

    @classmethod
    def from_json(cls, row: Mapping[str, Any] | None) -> AttemptLimits:
        """The limit keys of an ``attempts.limits`` object (its bookkeeping keys are ``Plan``'s)."""
        return cls.model_validate({k: v for k, v in (row or {}).items() if k in _LIMIT_KEYS})

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True)

    def but(self, **changes: Any) -> AttemptLimits:
        """A copy with ``changes``; a key it lacked is added, as in the stored row."""
        return self.model_copy(update=changes)

    @property
    def mem_key(self) -> str:
        """The memory option a resubmission or update sets: per CPU when the job used that, else per node."""
        return "mem_per_cpu_mb" if self.mem_per_cpu_mb else "mem_mb"

    @property
    def mem(self) -> int | None:
        """The memory in ``mem_key``'s unit."""
        return self.mem_per_cpu_mb if self.mem_per_cpu_mb else self.mem_mb


@dataclass(frozen=True, slots=True)
class Plan:
    """An attempt's ``attempts.limits`` object: its limits and how it is carried out.

    Everything the side effect needs is here before it happens (the decision
    is committed first), so a restarted harpd can finish it.  A None field is
    absent from the stored object.
    """

    limits: AttemptLimits
    escalated: str | None = None  # "time", "mem" or "gpu": what ran out
    comment: str | None = None  # marker(chain, attempt)
    mode: str | None = None  # requeue or resubmit
    restarts_before: int | None = None  # requeue: the job's Restarts when decided
    while_running: bool | None = None  # requeue: decided at the job's end hook, before Slurm ended it
    held_running: bool | None = None  # requeue: held while Slurm still ran it (the manager saw no final state)
    note: str | None = None  # why the mode changed
    failures: int | None = None  # failed tries of the side effect so far
    last_error: str | None = None
    waiting: str | None = None  # Slurm did not answer (or had no record yet): the last such error
    waiting_since: float | None = None  # epoch seconds the wait began
    missing_since: float | None = None  # epoch seconds accounting first had no record of the job
    waited_s: int | None = None  # how long the side effect waited on Slurm before it was carried out
    stop: str | None = None  # why the chain ends here
    output: str | None = None  # where this run wrote its output (scontrol's StdOut), for harp status
    error: str | None = None  # its error file, when apart from the output
    charged_s: int | None = None  # resumed from a checkpoint: what the failed run cost (the time since its signal)
    gpu: dict[str, Any] | None = None  # a larger GPU configuration (gpu_escalation): options, env, from, to, dnn

    @classmethod
    def from_json(cls, row: Mapping[str, Any] | None) -> Plan:
        row = row or {}
        extra = {f.name: row.get(f.name) for f in dataclasses.fields(cls) if f.name != "limits"}
        return cls(limits=AttemptLimits.from_json(row), **extra)

    def to_json(self) -> dict[str, Any]:
        out = self.limits.to_json()
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name != "limits" and v is not None:
                out[f.name] = v
        return out

    def but(self, **changes: Any) -> Plan:
        """A copy with ``changes`` (None removes a field)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One row of the ``attempts`` table."""

    chain: str
    number: int
    job_id: str | None
    plan: Plan
    reason: str
    step: str
    outcome: str | None
    created_at: float | None

    @classmethod
    def from_row(cls, row: AttemptRecord) -> Attempt:
        jid = row.job_id
        return cls(
            chain=str(row.chain_id),
            number=int(row.attempt),
            job_id=None if jid is None else str(jid),
            plan=Plan.from_json(row.limits),
            reason=str(row.reason or ""),
            step=str(row.step),
            outcome=row.outcome,
            created_at=row.created_at,
        )


#: ``limit_changes`` kinds that set a pending or running job's memory (``--mem``) and time (harpd.watch)
_MEM_CHANGES = ("resize-mem", "lift-mem")
_TIME_CHANGES = ("resize", "lift", "extend")


def as_ran(changes: Iterable[LimitChange], since: float | None, limits: AttemptLimits) -> AttemptLimits:
    """An attempt's limits as it really ran: its plan's, with the watcher's later changes of them applied.

    ``changes``: the job's carried-out ``limit_changes`` (the limits ledger's
    rows, oldest first); those from ``since`` (the attempt's creation) on
    changed this attempt (a floor lift of a pending attempt, an extension of
    a running one).  Recovery escalates from what the run had, so an
    attempt the re-sizer raised never gets its failed size again.
    """
    mem, time_s = limits.mem_mb, limits.time_s
    for c in changes:
        if since is not None and float(c.created_at) < float(since):
            continue
        if c.kind in _MEM_CHANGES and c.new_mem_mb and limits.mem_mb is not None:
            mem = int(c.new_mem_mb)
        elif c.kind in _TIME_CHANGES and c.new_time_s and limits.time_s is not None:
            time_s = int(c.new_time_s)
    if mem == limits.mem_mb and time_s == limits.time_s:
        return limits
    return limits.but(mem_mb=mem, time_s=time_s)
