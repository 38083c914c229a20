"""A decision written into harpd's store the way harpd records one at ``predict``, for real-Slurm tests.

harpd only acts on jobs whose registration echoes the token of a decision it
recorded (harpd.daemon.registration).  Tests that need harp to have cut a
job without training a model first write that decision themselves, as the
store's owner (root) may, and then go through the real registration: harpd
still checks owner, limits and submit time with slurmctld.  ``decided_at``
lies before the job's submission, as harpd's own decision would.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from harpd.daemon.registration import decided_resources, new_token
from harpd.protocol import Decision, JobRequest
from harpd.store import Store

__all__ = ["record_decision"]


def record_decision(
    db: Path, uid: int, user: str, job: dict[str, Any], decision: dict[str, Any], decided_at: float | None = None
) -> str:
    """Store a decision for ``uid`` and return its token (``decided_at``: a minute ago by default)."""
    req = JobRequest.model_validate(job)
    dec = Decision.model_validate(decision)
    token = new_token()
    with Store.open(db) as store:
        store.add_decision(
            token,
            uid,
            user,
            req,
            decided_resources(req.request, dec),
            dec,
            time.time() - 60 if decided_at is None else decided_at,
        )
    return token
