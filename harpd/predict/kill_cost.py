"""Under hard limits a cut is a bet against a kill: harp cuts a job's time only where the queue gains.

A hard limit is Slurm's kill time.  A job harp cuts from its request ``R``
to ``L`` that needs more than ``L`` is killed there: its partial run (``L``
seconds of its cores) is lost, and it queues again behind everything that
waits (recovery resubmits it), so its user waits for the partial run *and*
a second trip through the queue.  What the cut can buy is a shorter
reservation: ``R - L`` seconds the backfill planner may give to others, of
which the queue turns only a share into earlier starts.  How small that
share is was measured (docs/metrics.md, "Queue"): with EASY backfilling
even exact runtimes, which cut every job to its need and kill none, change
the users' mean wait by -5% to +4% on the shared traces, while harp's hard
cuts, with about 2% of jobs killed, raised it by 2% to 151%.

So a hard cut must pay for its kill risk::

    cut to L  only where  p * L  <  gain * (1 - p) * (R - L)

``p``: the chance the job needs more than ``L`` (the hard bound's miss
rate, ``predict.alpha_time``); ``gain``: the share of a reservation cut the
queue turns into earlier starts (``predict.hard_cut_gain``).  The re-queue's
wait is left out of the cost (it is not known at submission, and only adds
to it), so the rule errs towards cutting, never towards the queue.  The
default gain is 0: on every trace measured no cut was safe, so under hard
limits harp leaves time requests alone (memory is not a reservation in
time and is not gated here).  A site whose `harp replay TRACE --schedule`
shows a gain sets it.

One rule for the daemon and the replay: ``worth_cutting``, which the
decision kernel (``harpd.predict.decide``) applies to every job either decides.
"""

from __future__ import annotations

__all__ = ["worth_cutting", "why_kept"]


def worth_cutting(request_s: float, limit_s: float, p_kill: float, gain: float) -> bool:
    """Whether a hard cut from ``request_s`` to ``limit_s`` is expected to save the queue more than its kill costs."""
    if not (limit_s < request_s) or gain <= 0:
        return False
    p = min(max(float(p_kill), 0.0), 1.0)
    return p * limit_s < gain * (1.0 - p) * (request_s - limit_s)


def why_kept(gain: float) -> str:
    """The explanation a job whose time harp kept under hard limits is given."""
    if gain <= 0:
        return (
            "time kept: under hard limits a kill costs the queue more than a cut saves "
            "(predict.hard_cut_gain = 0; docs/metrics.md, 'Queue')"
        )
    return (
        f"time kept: under hard limits this cut's kill risk outweighs what it saves the queue "
        f"(predict.hard_cut_gain = {gain:g}; docs/metrics.md, 'Queue')"
    )
