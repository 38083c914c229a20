"""A job on the test cluster as ``scontrol show job`` reports it, and waiting for it to end."""

from __future__ import annotations

import re
from typing import Any

from tests.helpers.wait import wait_for

# JobState values after which a job runs no more (DEADLINE: a --deadline the job could not meet)
FINISHED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "DEADLINE")


def scontrol_fields(cluster: Any, job_id: str) -> dict[str, str]:
    """``scontrol show job``'s KEY=VALUE fields (values up to the next space)."""
    out = cluster.scontrol("show", "job", job_id)
    return dict(m.groups() for m in re.finditer(r"([\w/]+)=(\S*)", out))


def wait_finished(cluster: Any, job_id: str, timeout: float = 240.0) -> str:
    """The job's final JobState, once slurmctld reports one.

    AssertionError with its fields if not within ``timeout``.
    """

    def final_state() -> str | None:
        state = scontrol_fields(cluster, job_id).get("JobState", "")
        return state if state in FINISHED else None

    return wait_for(
        f"job {job_id} to finish", final_state, timeout, interval=1, log=lambda: str(scontrol_fields(cluster, job_id))
    )
