"""The next limit of a running job that outgrows the limit harp gave it: one rule, for harpd and the replay.

A job harp shortened keeps the user's own request as its true kill time.
Its ``max_extensions``-th extension (the first, by default) goes straight to
that request, never past the partition's MaxTime: a job that outgrew harp's
limit is one harp did not predict, and a doubling that falls short again
would be one more broken promise to the backfill planner.  With more
extensions allowed, the earlier ones follow THE escalation rule
(``recovery.escalation.next_allocation``: double, back to the request at
most).  Every limit is whole minutes, as Slurm keeps it, and never above
the request.

harpd's extender (``harpd.watch.extend``) acts on it; the replay's soft walk
(``harpd.replay.soft_walk.extend``) and the queue simulation's extension
hook (``harpd.evaluate.schedule_simulation``) ask it job by job, so what the
replay scores is what harpd does.  Pure: no store, no Slurm, no clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harp_submit.units import fmt_time
from harpd.records import Outcome
from harpd.recovery.escalation import next_allocation
from harpd.slurm.base import whole_minutes


@dataclass(frozen=True, slots=True)
class Extension:
    """One extension: the new limit (whole minutes, in seconds) and the words for why it is that."""

    limit_s: int
    how: str


def next_extension(
    current_s: float, request_s: float, cap_s: float | None, made: int, max_extensions: int
) -> Extension | None:
    """The limit after ``current_s`` for a job already extended ``made`` times, or None: nothing to raise.

    ``request_s`` is the user's own limit (the kill time), ``cap_s`` the
    partition's MaxTime (None: unknown).  None when the limit is already at
    the request or the cap, so a chain of calls ends.
    """
    current, request = float(current_s), float(request_s)
    if not (math.isfinite(current) and current > 0 and math.isfinite(request)) or current >= request:
        return None
    if made + 1 >= max(int(max_extensions), 1):
        last = request if cap_s is None else min(request, float(cap_s))
        new = min(whole_minutes(int(last)) * 60, request)
        how = f"back to the requested {fmt_time(last)}"
        how = (
            f"{how} (harp extends a job once)"
            if max_extensions <= 1
            else f"extension {made + 1} of at most {max_extensions}: {how}"
        )
    else:
        step = next_allocation(Outcome.TIMEOUT, current, request, cap_s, attempt=1, max_attempts=2)
        if step.value is None:
            return None
        new = min(whole_minutes(int(step.value)) * 60, request)
        # the escalation rule's own words for what it did (its first clause is about a kill: not here)
        parts = [p.strip() for p in step.reason.split(";")]
        how = parts[1] if len(parts) > 1 else step.reason
    if new <= current:
        return None
    return Extension(int(new), how)
