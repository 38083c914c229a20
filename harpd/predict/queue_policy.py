"""The soft cut under a deep queue: which of harp's cuts are worth an extension that lands on a reservation.

One pure function, no I/O, because two callers must agree: harpd's decision
kernel (``harpd.predict.decide``, given a ``QueueView`` filled from
squeue/sinfo) and the closed-loop replay (the simulated queue at each
submission).  If they drifted, the replay's figures would describe a policy
harp does not run.

What the closed loop showed (issue #48, docs/metrics.md 'Closed loop').  On
CTC with its arrivals ×0.9 (utilisation 0.92) harp-soft raised the mean wait
by about 16% over the users' requests.  The rise falls on jobs harp did *not*
cut (wide, long ones at the head of the queue), and it comes from the cut
jobs that outgrow their limit: 96% of extended runs had been backfilled in
front of a reservation, and a third of the extensions pushed the head's
reservation back.  Giving only the jobs that will miss their request from
the start (an oracle) turns +16% into −16%, exact runtimes' level, while
smaller extension steps make it worse: the harm is the miss, not the size of
the extension.  A queue-depth rule (give the cut back in proportion to the
waiting work) removes the misses but also every hit, and the hits are where
the gain is.

The rule weighs each cut by what it buys.  A cut from the request ``R`` to
``L`` lets the backfill planner start the job in a hole of ``L`` instead of
``R``; a miss costs the same whatever the cut (the job runs on past its
hole, into the head's reservation).  A shallow cut (``L`` above a quarter of
``R``) saves less than three quarters of the request, often far less, yet
misses as often as a deep one (14-37% of cut jobs on the three shared traces, whatever the
depth of the cut).  So when the waiting work would keep the whole machine
busy for longer than the job's request (``drain >= R``: an extension would
land on a reservation, not on an idle machine), only the deep cuts stand and
a shallow one is planned with the request; with a shorter queue every cut
stands.  The quarter is not fitted to a trace: it is the deepest cut harp's
hard limits take by default (``Guard.min_fraction``, what two doublings walk
back to the request), the line harp already draws between a cut and a guess.

Why it should hold at loads it was not tuned on: it reads no utilisation or
trace figure, only two comparisons of durations of the job against itself
and against the queue at that instant.  It does not remove the misses'
harm; it gives up the cuts whose gain is smallest for it.

On by default (``predict.queue_rule``; harpd then reads the queue from its
watcher's listing, ``harp replay --schedule``'s closed loop follows the
setting, ``--no-queue-rule`` turns it off there alone).  Measured with
``bench/queue_load.py`` (and ``--no-queue-rule``), it brings CTC ×0.9's wait
back to the users' (+16% without it) and keeps every high-load figure no
worse than the users', for part of harp's gain at the traces' own load (KTH's
wait and slowdown, HPC2N's wait: more than two standard errors); a site
whose machine never runs near full may turn it off (docs/metrics.md,
'Closed loop').
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harpd.predict.queue_view import QueueView
from harpd.slurm.queue_load import QueueLoad

__all__ = ["KEEP_SHARE", "QueueCut", "queue_cut", "view_of", "weigh"]

#: under a queue that outlasts the request, a cut stands only where the limit is at most this share of it
KEEP_SHARE = 0.25


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
    if drain < request_s:
        return QueueCut(limit_s, 0.0, "the waiting work drains within the request: harp's cut stands")
    if limit_s <= KEEP_SHARE * request_s:
        return QueueCut(limit_s, 0.0, "a deep cut under a deep queue: it buys a hole worth its miss, it stands")
    return QueueCut(
        request_s,
        1.0,
        f"the waiting work fills the machine for {drain:,.0f} s, longer than the {request_s:,.0f} s request, "
        f"and the cut keeps more than {KEEP_SHARE:.0%} of it: a miss would land on a reservation for "
        "little gain, so the job is planned with all the time it may run",
    )


def weigh(view: QueueView, request_s: float, partition_s: float | None, limit_s: float) -> QueueCut:
    """``queue_cut`` of harp's limit against the most the job may run: its request, or the partition's limit below it.

    The one entry both callers use (the kernel's ``allocation`` and the closed
    loop's ``queue_decision``), so they weigh a cut against the same duration.
    """
    most = min(request_s, partition_s) if partition_s and math.isfinite(partition_s) else request_s
    return queue_cut(view, most, limit_s)


def view_of(load: QueueLoad, now: float) -> QueueView:
    """harpd's view at a decision from the cached squeue answer (``harpd.slurm.queue_load``)."""
    return QueueView(load.pending_jobs, load.backlog_core_s, load.running_jobs, now, total_cores=load.total_cores)
