"""The ``progress`` operation: a running trial's metric, taken only from Slurm's owner of the job.

``harp progress --metric loss=0.31`` runs inside the trial; the caller's uid
comes from the socket (the kernel, or the TCP door's authentication), the
job's owner and state from slurmctld.  A report for a job that is not the
caller's, or not running, is refused with one line.  The study is the
``#HARP study=...`` words the job passes (``HARP_STUDY``), scoped to the
owner (two users' studies of the same name never mix), else an array's tasks
form the study ``array-<array id>``.
"""

from __future__ import annotations

import dataclasses
import shlex
from typing import Any

from harpd.dnn.errors import DnnError
from harpd.dnn.trials import StudyPolicy, parse_study
from harpd.slurm.base import SlurmError
from harpd.store import Store

MAX_REPORTS_PER_TRIAL = 10_000


class ProgressRefused(ValueError):
    """The one line the caller reads."""


def study_of(job_id: str, study: str | None) -> tuple[str, StudyPolicy | None]:
    """The study name and (when the job states one) its policy; ProgressRefused for neither."""
    if study:
        try:
            pol = parse_study(shlex.split(study))
        except (DnnError, ValueError) as exc:
            raise ProgressRefused(str(exc)) from None
        return pol.study, pol
    if "_" in job_id:
        return f"array-{job_id.split('_', 1)[0]}", None
    raise ProgressRefused(
        f"job {job_id} is not an array task: name its study (harp progress --study 'study=NAME', or HARP_STUDY)"
    )


def record_progress(
    store: Store, slurm: Any, uid: int, job_id: str, metric: str, value: float, study: str | None
) -> tuple[str, float]:
    """Check the job with Slurm and store the report; (study, trial run time in s) or ProgressRefused."""
    if slurm is None:
        raise ProgressRefused("this harpd has no Slurm to check the job's owner with; progress not recorded")
    name, policy = study_of(job_id, study)
    try:
        info = slurm.show_job(job_id)
    except SlurmError as exc:
        raise ProgressRefused(f"job {job_id}: Slurm does not show it ({exc})") from None
    if info.uid is None or info.uid != uid:
        raise ProgressRefused(f"job {job_id} is not yours: progress is taken from the job's owner only")
    if (info.state or "") != "RUNNING":
        raise ProgressRefused(
            f"job {job_id} is {info.state or 'in no known state'}, not running: "
            "progress is taken from running trials only"
        )
    status = store.trial_status(job_id)
    if status is not None and status.reports >= MAX_REPORTS_PER_TRIAL:
        raise ProgressRefused(f"job {job_id} has reported {MAX_REPORTS_PER_TRIAL} times; report less often")
    # the store keeps the policy as its JSON object
    stored = None if policy is None else dataclasses.asdict(policy)
    return name, store.add_trial_report(job_id, uid, name, metric, value, stored)
