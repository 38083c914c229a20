"""Which live jobs are harp's to change, and within what: read from their registered submission.

harp-submit registers each job it sized with the user's own request
(``original``) and harp's decision.  Only those jobs are touched, only when
harp changed their time (a job with no decision, or opted out with ``#HARP
off``, is never registered with one), and never beyond the user's request.
One exception, for memory: a workflow task that harp left as asked because
no task of its type had finished yet (``cold_task_mem``).
"""

from __future__ import annotations

from typing import Any

from harpd.features.workflow import is_workflow_signature
from harpd.slurm.base import QueuedJob
from harpd.slurm.job_ids import submitted_id
from harpd.store import Store

__all__ = ["submission_of", "original_time_s", "harp_set_time", "harp_set_mem", "cold_task_mem"]


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


def cold_task_mem(sub: dict[str, Any]) -> str | None:
    """The user's memory option of a workflow task harp was asked about but left as requested; else None.

    A workflow submits all samples of a process at once, before any of them
    has finished, so harp keeps their request at submission; they often wait
    in the queue while their first siblings finish.  Such a pending task is
    re-decided like one whose memory harp set (never above the user's own
    request), so harp sizes it from the siblings that had ended before it
    started (docs/metrics.md, "decided at start").
    """
    if not isinstance(sub.get("decision"), dict) or harp_set_mem(sub) is not None:
        return None
    if not is_workflow_signature((sub.get("job") or {}).get("signature")):
        return None
    original = sub.get("original") or {}
    if original.get("mem_mb"):
        return "mem"
    if original.get("mem_per_cpu_mb"):
        return "mem-per-cpu"
    return None
