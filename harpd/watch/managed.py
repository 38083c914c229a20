"""Which live jobs are harp's to change, and within what: read from their registered submission.

harp-submit registers each job it sized with the user's own request
(``original``) and harp's decision.  Only those jobs are touched, only when
harp changed their time (a job with no decision, or opted out with ``#HARP
off``, is never registered with one), and never beyond the user's request.
One exception, for memory: a workflow task that harp left as asked because
no task of its type had finished yet (``cold_task_mem``).
"""

from __future__ import annotations

import logging

from harpd.features.workflow import is_workflow_signature, registered_signature
from harpd.predict.cores import resized_while_pending
from harpd.records import Submission
from harpd.slurm.base import QueuedJob, whole_minutes
from harpd.slurm.job_ids import submitted_id
from harpd.store import Store

log = logging.getLogger("harpd.watch")

__all__ = [
    "submission_of",
    "original_time_s",
    "harp_set_time",
    "harp_set_mem",
    "cold_task_mem",
    "cpus_to_resize",
    "harp_time_s",
    "why_not_harps",
    "LeftAlone",
]

#: kinds of ``limit_changes`` rows that set a job's time limit
TIME_KINDS = ("extend", "resize", "lift")


def submission_of(store: Store, job: QueuedJob) -> Submission | None:
    """The registration of ``job`` (an array task's is its array's)."""
    sub = store.get_submission(job.job_id)
    if sub is None and job.array_job_id:
        sub = store.get_submission(job.array_job_id)
    if sub is None:
        sub = store.get_submission(submitted_id(job.job_id))
    return sub


def original_time_s(sub: Submission) -> int | None:
    """The user's own ``--time`` in seconds (None: none given: harp leaves the job alone)."""
    t = sub.original.time_s
    try:
        return int(t) if t and int(t) > 0 else None
    except (TypeError, ValueError):
        return None


def _changed(sub: Submission) -> list[str]:
    """The options harp's decision changed at submission (none without a decision)."""
    return [] if sub.decision is None else sub.decision.changed


def harp_set_time(sub: Submission) -> bool:
    """Whether harp's decision changed the job's time (else: not harp's limit to move)."""
    return "time" in _changed(sub)


def harp_set_mem(sub: Submission) -> str | None:
    """Which memory option harp's decision changed at submission (None: not harp's memory to move)."""
    return next((o for o in _changed(sub) if o in ("mem", "mem-per-cpu")), None)


def cold_task_mem(sub: Submission) -> str | None:
    """The user's memory option of a workflow task harp was asked about but left as requested; else None.

    A workflow submits all samples of a process at once, before any of them
    has finished, so harp keeps their request at submission; they often wait
    in the queue while their first siblings finish.  Such a pending task is
    re-decided like one whose memory harp set (never above the user's own
    request), so harp sizes it from the siblings that had ended before it
    started (docs/metrics.md, "decided at start").
    """
    if sub.decision is None or harp_set_mem(sub) is not None:
        return None
    if not is_workflow_signature(registered_signature(sub.job)):
        return None
    if sub.original.mem_mb:
        return "mem"
    if sub.original.mem_per_cpu_mb:
        return "mem-per-cpu"
    return None


def cpus_to_resize(sub: Submission) -> bool:
    """Whether a pending job's CPUs per task are harp's to re-decide at start (``cores.resized_while_pending``).

    Those harp lowered at submission, and those of a workflow task harp left
    as asked because none of its type had finished yet (as ``cold_task_mem``);
    single-task jobs only (what harp ever lowers), never above the request.
    """
    try:
        requested = int(sub.original.cpus_per_task or 1)
        ntasks = int(sub.original.ntasks or 1)
    except (TypeError, ValueError):
        return False
    if sub.decision is None:
        return False
    workflow = is_workflow_signature(registered_signature(sub.job))
    return resized_while_pending(requested, ntasks, "cpus-per-task" in _changed(sub), workflow)


def harp_time_s(store: Store, job: QueuedJob, sub: Submission) -> int | None:
    """The time limit harp last set for ``job``: its own last change, a recovery attempt's, or the decided one.

    None when harp never set one (no decided time).
    """
    ids = {job.job_id, *(i for i in (job.array_job_id, submitted_id(job.job_id)) if i)}
    latest: tuple[float, int] | None = None
    decided = sub.submitted.time_s
    if decided:
        latest = (float(sub.submitted_at or 0.0), whole_minutes(int(decided)) * 60)
    for jid in sorted(ids):
        for row in store.limit_changes(jid, step="done"):
            if row.kind in TIME_KINDS and (latest is None or float(row.updated_at) >= latest[0]):
                latest = (float(row.updated_at), whole_minutes(int(row.new_time_s)) * 60)
    chain = sub.chain_id or store.chain_of(job.job_id)
    if chain:
        for a in store.attempts(chain):
            t = (a.limits or {}).get("time_s")
            if str(a.job_id) in ids and t and (latest is None or float(a.updated_at) >= latest[0]):
                latest = (float(a.updated_at), whole_minutes(int(t)) * 60)
    return None if latest is None else latest[1]


def why_not_harps(store: Store, job: QueuedJob, sub: Submission) -> str | None:
    """Why harp must leave ``job`` alone although it is registered (None: harp may act on it).

    Slurm is asked again before each change: the owner must still be the
    registered one, and the job's time limit the one harp last set (a limit
    someone else changed is theirs).  A registration slurmctld never vouched
    for (from before harpd checked them) is never acted on; harpd's own
    resubmissions (a chain) are harp's.
    """
    if not sub.verified and not sub.chain_id:
        return "its registration was not verified with Slurm"
    if job.uid is None or job.uid != int(sub.uid):
        return f"Slurm reports owner uid {job.uid}, not the registered uid {sub.uid}"
    expected = harp_time_s(store, job, sub)
    if expected is not None and job.time_limit_s != expected:
        return f"its time limit is {job.time_limit_s} s, not the {expected} s harp last set"
    return None


class LeftAlone:
    """Logs once per job and reason why harp leaves a registered job alone (a tick runs every few seconds)."""

    def __init__(self) -> None:
        self._said: dict[str, str] = {}

    def check(self, store: Store, job: QueuedJob, sub: Submission, action: str) -> bool:
        """True when harp may act on ``job``; else logs why (once) and returns False."""
        why = why_not_harps(store, job, sub)
        if why is None:
            self._said.pop(job.job_id, None)
            return True
        if self._said.get(job.job_id) != why:
            self._said[job.job_id] = why
            log.warning("job %s: not %s: %s", job.job_id, action, why)
        return False
