"""A resumable job that ran out of time resumes from its checkpoint: same limit, charged only the lost time.

harpd's watcher asks a job with a ``#HARP checkpoint`` line to checkpoint
(``harpd.watch.checkpoint_signal``) ``lead`` before its end, and records the
signal as a ``limit_changes`` row of kind ``CHECKPOINT_SIGNAL`` keyed by the
run's start time (each requeued run is signalled once), with the run time at
the signal.  When that run then ends TIMEOUT, what it did up to the signal is
in its checkpoint: only the time since the signal is lost, and the resumed
run (requeued in place: same job id, same files, so its checkpoint is there)
needs only what is left of the work, not twice the time.  So the next
attempt keeps the limit that ran out (at most what is left of the user's own
request) instead of doubling it, and its cost is the time since the signal.
A job never signalled (not resumable, or it ended before its signal) is
escalated as any other (``escalation.next_allocation``).

A job submitted with its own ``--signal=[{R|B}:]SIG@N`` and ``--requeue``
declares the same (``signal_declared``): Slurm itself sends SIG ``N`` seconds
before the job's actual limit (harp's shortened one under hard limits), so
harpd sends none and records none; recovery takes the signal time as
``limit - N`` (``slurm_signal_at``) once slurmctld vouches that it will
requeue the job (``Requeue=1``; 22.05's ``scontrol show job`` does not print
the signal, so its time comes from the request harp-submit passed through).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from harp_submit.units import fmt_time
from harpd.records import LimitChange

__all__ = ["CHECKPOINT_SIGNAL", "Resumed", "last_signal", "resumed_time", "signal_declared", "slurm_signal_at"]

#: ``limit_changes.kind`` of a checkpoint signal: old_time_s = the run's start (epoch s), new_time_s = run time at it
CHECKPOINT_SIGNAL = "checkpoint-signal"


@dataclass(frozen=True, slots=True)
class Resumed:
    """The resumed attempt's time limit, what the failed run costs, and why (one line)."""

    time_s: int
    charged_s: int
    reason: str


def last_signal(store: Any, job_id: str) -> LimitChange | None:
    """The last checkpoint signal harpd sent to ``job_id`` (its latest run's), or None."""
    rows = [r for r in store.limit_changes(str(job_id)) if r.kind == CHECKPOINT_SIGNAL and r.step == "done"]
    return max(rows, key=lambda r: int(r.old_time_s)) if rows else None


def signal_declared(signal_s: int | None, requeue: bool | None) -> bool:
    """Whether the user's own options declare a resumable job: ``--signal`` with a lead and ``--requeue``.

    ``--signal=SIG@0`` warns at the very end (no time to checkpoint) and
    ``--no-requeue`` (False) or no requeue option (None) does not ask to be
    requeued: neither declares anything.
    """
    return bool(signal_s and signal_s > 0 and requeue is True)


def slurm_signal_at(limit_s: float | None, lead_s: int | None, used_s: float | None) -> float | None:
    """The run time at which Slurm sent the job's own ``--signal`` (``lead_s`` before ``limit_s``).

    None when unknown (no limit, no lead) or not reached: a run that ended
    before ``limit_s - lead_s`` was never signalled, so nothing of it is in a
    checkpoint.  A lead at or above the limit signals at the start (0).
    """
    if not limit_s or limit_s <= 0 or not lead_s or lead_s <= 0 or used_s is None or used_s <= 0:
        return None
    at = max(0.0, float(limit_s) - float(lead_s))
    return at if used_s >= at else None


def resumed_time(
    current_s: float,
    used_s: float | None,
    signalled_at_s: float,
    original_s: float | None,
    cap_s: float | None,
    attempt: int,
    max_attempts: int,
) -> Resumed | None:
    """The next limit of a run that ran out ``used_s`` into a limit of ``current_s``, signalled at ``signalled_at_s``.

    None: not a resume (no attempts left, or nothing known of the run): the
    caller escalates as usual.  The limit stays ``current_s`` (whole minutes)
    but never above what is left of the user's request after the checkpoint
    (``original_s - signalled_at_s``) when harp's limit was below that
    request; a run that used up the user's own request (their ``--time``
    ran out, the request says nothing of the work left) keeps the current
    limit, and so does a request already used up.  Never above ``cap_s``.
    """
    if attempt >= max_attempts or not current_s or current_s <= 0 or signalled_at_s < 0:
        return None
    used = current_s if used_s is None or used_s <= 0 else used_s
    charged = int(max(0.0, used - signalled_at_s))
    value = float(current_s)
    why = "the limit that ran out, not doubled"
    if original_s and original_s > current_s:  # harp's shortened limit ran out, not the user's own request
        left = original_s - signalled_at_s
        if 0 < left < value:
            value, why = left, f"what is left of the requested {fmt_time(original_s)}"
    if cap_s and cap_s > 0 and value > cap_s:
        value, why = cap_s, f"the cap ({fmt_time(cap_s)})"
    minutes = max(1, math.ceil(value / 60 - 1e-9))
    if cap_s and cap_s > 0 and minutes * 60 > cap_s:
        minutes = max(1, int(cap_s // 60))
    reason = (
        f"ran out of time {fmt_time(charged)} after its checkpoint signal: resumes from its checkpoint "
        f"(requeued in place) with {fmt_time(minutes * 60)}, {why}; charged {fmt_time(charged)} "
        f"since the signal, not the whole {fmt_time(used)} run; attempt {attempt + 1} of {max_attempts}"
    )
    return Resumed(minutes * 60, charged, reason)
