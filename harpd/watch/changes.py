"""The persisted steps of one change of a live job's limit, shared by ``extend`` and ``resize``.

A change is a row of the store's ``limit_changes`` table keyed (job, kind,
old limit), committed ``decided`` before Slurm is asked (``extend``'s module
docstring tells why that makes it exactly once).  What a row left
``decided`` by a crash means is read from the job as Slurm lists it now,
the same way for both kinds: only the state the job must still be in
differs (running for an extension, pending for a re-size).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harp_submit.units import fmt_time
from harpd.records import LimitChange
from harpd.slurm.base import QueuedJob
from harpd.store import Store

__all__ = ["DECIDED", "DONE", "ENDED", "REFUSED", "decided", "limit", "row_of", "set_step", "still_to_do"]

DECIDED = "decided"
DONE = "done"
ENDED = "ended"  # not carried out: the job had left the state the change was for
REFUSED = "refused"


def decided(store: Store, kind: str) -> list[LimitChange]:
    """Changes of ``kind`` decided but not yet carried out (a crash, or a transient refusal)."""
    return [r for r in store.limit_changes(step=DECIDED) if r.kind == kind]


def row_of(store: Store, job_id: str, kind: str, old_time_s: int) -> LimitChange:
    """The stored change of ``job_id`` from ``old_time_s`` (it exists: just added, or added before)."""
    return next(r for r in store.limit_changes(job_id) if r.kind == kind and int(r.old_time_s) == old_time_s)


def limit(row: LimitChange, value: int | None, what: str) -> int:
    """A limit column the row's kind always carries (a re-size's memory or CPUs): the row was written with it.

    A row without it was not written by harpd (an edited store): an error naming the row, not a guess.
    """
    if value is None:
        raise ValueError(f"limit change of job {row.job_id} ({row.kind}) has no {what} in the store")
    return int(value)


def set_step(store: Store, row: LimitChange, step: str, why: str | None = None) -> None:
    """Move a change to ``step``, adding ``why`` to its reason."""
    cols: dict[str, Any] = {"step": step}
    if why:
        cols["reason"] = f"{row.reason}; {why}"
    store.update_limit_change(row.job_id, row.kind, int(row.old_time_s), **cols)


def still_to_do(store: Store, row: LimitChange, job: QueuedJob | None, state: str, memory: str | None = None) -> bool:
    """Whether the decided change must be made now; else its final step is recorded.

    The job no longer in ``state``: ended (never changed after that); its
    limit already the new one: made before a crash; its limit neither old
    nor new: someone else changed it, refused.  ``memory`` ("mem" or
    "mem-per-cpu"): the change is of that memory limit (``old_mem_mb`` →
    ``new_mem_mb``), not of the time limit; ``"cpus"``: of the CPUs per task
    (``old_cpus`` → ``new_cpus``).
    """
    if job is None or job.state != state:
        set_step(store, row, ENDED, f"the job was no longer {state.lower()}: not changed")
        return False
    shown: Callable[[int | None], str]
    if memory == "cpus":
        now, shown = job.cpus_per_task, (lambda v: f"{v} CPUs")
        old, new = limit(row, row.old_cpus, "old_cpus"), limit(row, row.new_cpus, "new_cpus")
    elif memory is None:
        now, old, new, shown = job.time_limit_s, int(row.old_time_s), int(row.new_time_s), fmt_time
    else:
        now, shown = (job.mem_mb if memory == "mem" else job.mem_per_cpu_mb), (lambda v: f"{v} MB")
        old, new = limit(row, row.old_mem_mb, "old_mem_mb"), limit(row, row.new_mem_mb, "new_mem_mb")
    if now == new:
        set_step(store, row, DONE)
        return False
    if now != old:
        set_step(store, row, REFUSED, f"its limit changed meanwhile to {shown(now)}")
        return False
    return True
