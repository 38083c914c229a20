"""Whether Slurm vouches that a job is the chain owner's: asked before every action of every attempt.

harpd runs as root, so recovery must never move, read or resubmit a job
that is not the chain's: an attempt acts on a job id it found (a requeue's
own job, a resubmission it made, one a search found after a restart), and
ids can be claimed, registrations forged, comments written by anyone (#44's
takeover went through a comment).  So each action first asks slurmctld
(``show_job``, from Slurm's JSON) or, for a job it no longer holds,
accounting, and goes on only when Slurm's owner is the chain's uid and, for
a job found by search, it was submitted after the attempt was decided.

One pure rule over Slurm's answer (``why_not_vouched``); the callers do the
asking and turn a refusal into ``Stop`` (the chain ends, with the reason in
``harp status``) or into "not this job" (a search hit is ignored).
"""

from __future__ import annotations

import math

from harpd.slurm.base import JobInfo

__all__ = ["why_not_vouched", "why_not_vouched_in_accounting", "CLOCK_SKEW_S"]

#: how much earlier than harpd's decision Slurm may stamp a job harpd submitted after it (whole
#: seconds on slurmctld's clock, harpd's may run ahead of it a little on another host)
CLOCK_SKEW_S = 5.0


def why_not_vouched(info: JobInfo, uid: int, submitted_after: float | None = None) -> str | None:
    """Why slurmctld's record ``info`` is not the chain owner's job (None: it is).

    ``submitted_after``: the job must have been submitted at or after this
    time (epoch seconds): a resubmission harpd made for a decided attempt.
    """
    if info.uid is None:
        return f"Slurm has not named the owner of job {info.job_id} yet"
    if int(info.uid) != int(uid):
        return f"Slurm reports job {info.job_id} as uid {info.uid}'s, not the chain owner's (uid {uid})"
    return _too_early(info.job_id, info.submit_time, submitted_after)


def why_not_vouched_in_accounting(
    job_id: str, owner: str | None, submit_time: float | None, user: str, submitted_after: float | None = None
) -> str | None:
    """The same rule over accounting's record of a job slurmctld no longer holds (owner by name)."""
    if not owner:
        return f"accounting has not named the owner of job {job_id} yet"
    if owner != user:
        return f"accounting reports job {job_id} as {owner}'s, not the chain owner's ({user})"
    return _too_early(job_id, submit_time, submitted_after)


def _too_early(job_id: str, submit_time: float | None, after: float | None) -> str | None:
    if after is None:
        return None
    if submit_time is None or submit_time < math.floor(after) - CLOCK_SKEW_S:
        return f"job {job_id} was not submitted after the attempt was decided"
    return None
