"""Workflow tasks: the manager's own retry and harp's recovery must never both run the work.

A workflow manager (Snakemake's Slurm executor, Nextflow) tracks each task by
its job id and polls sacct.  When a task ends TIMEOUT or OUT_OF_MEMORY, the
manager may see it before harpd does and submit the task again itself
(Snakemake ``--retries``); harp's requeue of the old job would then run the
same work a second time.  And a resubmission under a new job id is a copy the
manager never sees: it runs orphaned while the manager counts the task failed.

So, for a workflow task (``harpd.features.workflow``): harp recovers it only
in place (requeue: the same job id the manager is watching), and not at all
once the manager has registered another submission of the same task
(same workflow, rule and wildcards, same user) after it, checked again right
before the requeue.  Snakemake reads a task's fate from sacct, which a job
requeued from its end hook (``ending.py``) never shows final; Nextflow reads
it from the task's ``.exitcode`` file, written by the job script itself
before Slurm or harp can act, so a Nextflow task is never recovered by harp:
its errorStrategy retries it (``LEFT_TO_NEXTFLOW``).
"""

from __future__ import annotations

from typing import Any

from harpd.features.workflow import TaskIdentity, identify
from harpd.records import Submission
from harpd.store import Store

LEFT_TO_MANAGER = "a workflow task whose manager submitted it again itself (job {job}): the retry is left to it"
LEFT_TO_NEXTFLOW = (
    "a Nextflow task: Nextflow reads the task's exit status from its work directory (.exitcode) "
    "as soon as the script ends, before any requeue, so the retry is left to its errorStrategy "
    "(whose retry harp sizes at least as its own recovery would)"
)
NO_RESUBMIT = (
    "a workflow task: its manager tracks it by job id and would never see a resubmitted copy; "
    "left to the manager's own retries"
)


def task_of(sub: Submission | None) -> TaskIdentity | None:
    """The workflow task a registered submission is, or None (also for a job library's, whose manager never
    submits a failed task again: ``TaskIdentity.manager_retries``)."""
    if sub is None:
        return None
    job = sub.job
    commands = job.get("commands")
    task = identify(
        [str(c) for c in commands] if isinstance(commands, list) else None,
        _text(job.get("job_name")),
        _text(job.get("script_name")),
        _text(job.get("cwd")),
        _text(job.get("function")),
    )
    return task if task is not None and task.manager_retries else None


def manager_retry(store: Store, sub: Submission, task: TaskIdentity) -> str | None:
    """The job id of the manager's own later submission of the same task, or None.

    harp's own resubmissions carry a chain id and are never the manager's.
    """
    uid, since = sub.uid, sub.submitted_at
    if uid is None or since is None:
        return None
    for other in store.submissions_since(int(uid), float(since)):
        if other.job_id == sub.job_id or other.chain_id:
            continue
        if task_of(other) == task:
            return str(other.job_id)
    return None


def _text(value: Any) -> str | None:
    return str(value) if value is not None else None
