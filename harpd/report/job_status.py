"""What harp knows about one job, as the asker may see it: the path `harp status` and harpd share.

harpd's ``status`` operation answers users over the socket; ``harp status
--direct`` reads the store as an admin.  Both call ``job_status`` so the
answer, and who may see it, cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from harpd.store import Store


class JobStatusError(ValueError):
    """No job to show this asker; the text is the one-line answer."""


def job_status(store: Store, job_id: str, *, admin: bool, uid: int, user: str) -> dict[str, Any]:
    """The job's registration, Slurm record, limit changes and recovery attempts (StoreError if the store fails)."""
    sub = store.get_submission(job_id)
    chain = store.chain_of(job_id)
    if sub is None and chain is not None:
        sub = store.get_submission(chain)
    record = store.get_job(job_id)
    if sub is None and record is None:
        raise JobStatusError(f"harp knows no job {job_id}")
    if not admin:
        # Slurm's record names the owner; a registration only where there is none
        # yet: a job id claimed by someone else before it existed (when Slurm could
        # not vouch for the owner) reveals nothing of the owner's run to the claimant
        if record is not None and record.user is not None:
            if record.user != user:
                raise JobStatusError(f"job {job_id} is not yours")
        elif sub is not None and sub["uid"] != uid:
            raise JobStatusError(f"job {job_id} is not yours")
        if sub is not None and sub["uid"] != uid:
            sub = None  # the claimant's registration is not the owner's business either
    job: dict[str, Any] = {
        "job_id": job_id,
        "registered": sub is not None,
        "chain_id": chain or (sub or {}).get("chain_id"),
        "record": None if record is None else record.to_dict(),
        "attempts": store.attempts(chain) if chain else [],
        # harpd's changes of the live job's limit: extensions while it ran, re-sizes while it waited
        "limit_changes": store.limit_changes(job_id),
    }
    if sub is not None:
        for k in ("uid", "user", "state", "outcome", "submitted_at", "done_at", "original", "submitted", "decision"):
            job[k] = sub.get(k)
        job["registered_job_id"] = sub["job_id"]
    else:
        job["user"] = record.user if record else None
        job["outcome"] = record.outcome.value if record else None
    return job
