"""The soft cut under a deep queue: how much of harp's cut a job keeps, given what waits.

One pure function, no I/O, because two callers must agree: harpd at a
submission (with ``QueueView`` filled from squeue/sinfo) and the closed-loop
replay (with the simulated queue at that submission).  If they drifted, the
replay's figures would describe a policy harp does not run.

Why the queue matters to a soft cut.  A soft limit ``L`` below the user's
request ``R`` is a bet: the backfill planner may start the job in a hole that
ends before ``L``; if the job outruns ``L`` the extender moves its planned end
to ``R`` and the reservation of the job at the head of the queue, computed from
that planned end, slips by up to ``R − L``.  On an idle machine nobody waits
behind that reservation and the bet is free.  On a loaded one every job in
the queue waits behind it, and the cut job's own gain is small: the waiting
work fills the machine anyway.

The rule compares two durations, so it holds without a fitted constant:
``drain`` = the waiting jobs' processor-seconds over the cluster's processors
(how long the whole machine would take to run what already waits), against
the job's own request ``R``.  The job gives back the share ``min(1, drain /
R)`` of its cut: with no queue it keeps harp's limit, with a queue that would
keep the machine busy for its whole request it is planned with the request
(an extension could then only push back work that was already waiting), and
linearly in between.  It reads no load level, utilisation or trace figure, so
it does the same at loads it was not measured on: what decides is whether
the queue, at that instant, is longer than the job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harpd.predict.queue_view import QueueView
from harpd.slurm.queue_load import QueueLoad

__all__ = ["QueueCut", "queue_cut", "view_of"]


@dataclass(frozen=True, slots=True)
class QueueCut:
    """The start limit after the queue rule, and the share of harp's cut given back (0: none, 1: all)."""

    limit_s: float
    given_back: float
    reason: str


def queue_cut(view: QueueView, request_s: float, limit_s: float) -> QueueCut:
    """harp's soft limit ``limit_s`` for a job requesting ``request_s``, given the queue ``view``.

    Unchanged where there is no cut (``limit_s >= request_s``), no known
    request, or no known cluster size (``view.total_cores`` 0): the rule never
    guesses the depth of a queue it cannot measure.
    """
    drain = view.drain_s
    if drain is None or not (math.isfinite(request_s) and request_s > 0) or not limit_s < request_s:
        return QueueCut(limit_s, 0.0, "no cut to weigh against the queue")
    share = min(1.0, max(0.0, drain / request_s))
    if share == 0.0:
        return QueueCut(limit_s, 0.0, "nothing waits: harp's cut stands")
    limit = limit_s + share * (request_s - limit_s)
    return QueueCut(
        limit,
        share,
        f"the waiting work fills the machine for {drain:,.0f} s against a request of {request_s:,.0f} s: "
        f"{share:.0%} of the cut given back",
    )


def view_of(load: QueueLoad, now: float) -> QueueView:
    """harpd's view at a decision from the cached squeue answer (``harpd.slurm.queue_load``)."""
    return QueueView(load.pending_jobs, load.backlog_core_s, load.running_jobs, now, total_cores=load.total_cores)
