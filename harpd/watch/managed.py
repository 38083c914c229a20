"""Which live jobs are harp's to change, and within what: read from their registered submission.

harp-submit registers each job it sized with the user's own request
(``original``) and harp's decision.  Only those jobs are touched, only when
harp changed their time (a job with no decision, or opted out with ``#HARP
off``, is never registered with one), and never beyond the user's request.
"""

from __future__ import annotations

from typing import Any

from harpd.slurm.base import QueuedJob
from harpd.slurm.job_ids import submitted_id
from harpd.store import Store

__all__ = ["submission_of", "original_time_s", "harp_set_time", "harp_set_mem"]


def submission_of(store: Store, job: QueuedJob) -> dict[str, Any] | None:
    """The registration of ``job`` (an array task's is its array's)."""
    sub = store.get_submission(job.job_id)
    if sub is None and job.array_job_id:
        sub = store.get_submission(job.array_job_id)
    if sub is None:
        sub = store.get_submission(submitted_id(job.job_id))
    return sub


def original_time_s(sub: dict[str, Any]) -> int | None:
    """The user's own ``--time`` in seconds (None: none given: harp leaves the job alone)."""
    t = (sub.get("original") or {}).get("time_s")
    try:
        return int(t) if t and int(t) > 0 else None
    except (TypeError, ValueError):
        return None


def _changed(sub: dict[str, Any]) -> list[str]:
    """The options harp's decision changed at submission (none without a decision)."""
    decision = sub.get("decision")
    if not isinstance(decision, dict):
        return []
    return [str(c.get("option")) for c in decision.get("changes") or [] if isinstance(c, dict)]


def harp_set_time(sub: dict[str, Any]) -> bool:
    """Whether harp's decision changed the job's time (else: not harp's limit to move)."""
    return "time" in _changed(sub)


def harp_set_mem(sub: dict[str, Any]) -> str | None:
    """Which memory option harp's decision changed at submission (None: not harp's memory to move)."""
    return next((o for o in _changed(sub) if o in ("mem", "mem-per-cpu")), None)
