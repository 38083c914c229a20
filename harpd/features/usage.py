"""What a finished run says about what its program needs: a sample, or only a lower bound.

The one rule every learner reads outcomes through (the live history in
``harpd.predict.live``, the replay's and training's ``harpd.replay.dataset``),
so a run harp learns from live is learnt the same way in a replay.

Only a run that COMPLETED below its limit is a sample of its program's
need.  Every other finished run is censored, its usage a lower bound:

* killed at its limit (TIMEOUT for time, OUT_OF_MEMORY for memory, or the
  record's own censoring flag): it needed more than it had;
* ran to its whole request, whatever its state: a COMPLETED run that used all
  of its memory was held at its cgroup limit (reclaimed, swapped, slowed) and
  one that used all of its time was about to be killed; what it would have
  used with more is unknown, so it is censored too.  Reading it as a sample
  would let a rule size the next run at exactly the size that held this one;
* a run a requeue ended (state REQUEUED, neither out of time nor memory) is no
  run of its own: the job goes on under its id, and its later run is learnt;
* FAILED, CANCELLED, NODE_FAIL, PREEMPTED (or an end not recorded): it stopped before its program
  finished, so it used at least what it used, and perhaps far less than the
  program needs (a step refused at start uses nothing).  Such a run must never
  lower a later size.

``ran_out`` keeps apart the first two cases, where the need is at least the
request (what the metric charges, training clips at the request and the
history features count as censored, in the replay and live alike), from a
run that merely stopped early (a lower bound at its usage only).  The
trained models see such a run's usage as a trace recorded it (see
``harpd.replay.dataset.prepare`` for why); the live history rule, which
sizes a program from its last few runs alone, keeps the request while one
is among them (``RecentRuns``), so six refused runs never lower the next
size.  A run the manager or the user cancelled (``says_nothing``) is no
evidence either way: the history rule neither keeps the request for it nor
lets it push a completed run out of its last few.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from harpd.records import JobRecord, Outcome

#: the outcome that kills a run for each resource
RAN_OUT: dict[str, Outcome] = {"time": Outcome.TIMEOUT, "mem": Outcome.OOM}


@dataclass(frozen=True, slots=True)
class Usage:
    """One finished run's use of one resource.

    ``used`` is seconds or MiB; ``request`` what the run had (None: no limit).
    ``censored``: a lower bound, not a sample of the need.  ``ran_out``: the
    run was stopped by (or ran to) its limit, so it needed at least ``request``.
    """

    used: float
    request: float | None
    censored: bool
    ran_out: bool


def usage_of(r: JobRecord, resource: str) -> Usage | None:
    """The run's usage of ``resource`` ("time" or "mem"); None when it is unknown or the run is still running.

    A run whose end is not recorded (``Outcome.UNKNOWN``: an SWF status of -1)
    is kept, censored: nothing says it completed.
    """
    if r.outcome == Outcome.RUNNING:
        return None
    if r.outcome == Outcome.PREEMPTED and r.state == "REQUEUED":
        # a run its job's requeue ended (its own ``scontrol requeue``, submitit's checkpoint, a preemption's):
        # the job runs again under its id and that run says what it needs; this one is neither (#51)
        return None
    if resource == "time":
        used, req, flag = r.used_time_s, r.req_time_s, r.censored_time
    elif resource == "mem":
        used, req, flag = r.used_mem_mb, r.req_mem_mb, r.censored_mem
    else:
        raise ValueError(f"unknown resource {resource!r}: use time or mem")
    if used is None or math.isnan(used) or used < 0:
        return None
    ran_out = bool(flag) or r.outcome == RAN_OUT[resource] or (req is not None and req > 0 and used >= req)
    return Usage(float(used), None if req is None else float(req), ran_out or r.outcome != Outcome.COMPLETED, ran_out)


#: outcomes that say nothing of what a program needs: the workflow manager or the user cancelled the
#: run (a Ctrl-C of the workflow makes the Snakemake plugin scancel its jobs), not its program or its limits
NO_EVIDENCE = (Outcome.CANCELLED,)


def says_nothing(r: JobRecord, usage: Usage) -> bool:
    """Whether a run is no evidence at all of its program's need: cancelled, and not at its limit.

    A cancelled run neither ran out nor finished: its usage is where someone
    stopped it.  It must not keep the request (a Ctrl-C of a workflow would
    undo harp's cut for the next runs), and it must not lower a size either
    (its short run displacing completed ones among the last few).  A run
    cancelled at or past its limit still ran out (``usage.ran_out``) and counts.
    """
    return r.outcome in NO_EVIDENCE and not usage.ran_out


class RecentRuns:
    """Per group, the evidence of its last ``keep`` runs for the live history rule.

    Each run is a sample (completed below its limit: its usage), ran out
    (needed at least its limit) or stopped early (failed, node failure,
    preempted: a lower bound only); cancelled runs (``says_nothing``) are not
    kept, so they neither hold the request nor push samples out.  The history
    features count only runs that ran out as censored, the same in a replay
    and live; this is what the live history rule reads instead.  Not
    thread-safe (the predictor locks).
    """

    def __init__(self, keep: int = 8) -> None:
        self.keep = keep
        self._runs: dict[str, deque[tuple[float, bool, bool]]] = {}  # (used, ran out, stopped)

    def add(self, key: str, r: JobRecord, usage: Usage) -> None:
        if says_nothing(r, usage):
            return
        runs = self._runs.get(key)
        if runs is None:
            runs = self._runs[key] = deque(maxlen=self.keep)
        runs.append((max(usage.used, 1.0), usage.ran_out, usage.censored and not usage.ran_out))

    def stopped(self, key: str) -> bool:
        """Whether one of the group's last runs stopped early (failed: its usage a lower bound only)."""
        return any(s for _, _, s in self._runs.get(key, ()))

    def ran_out(self, key: str) -> bool:
        """Whether one of the group's last runs ran out of (or filled) its limit."""
        return any(o for _, o, _ in self._runs.get(key, ()))

    def most(self, key: str, last: int = 5) -> float | None:
        """The most the group's last ``last`` runs used (None: no run)."""
        runs = list(self._runs.get(key, ()))[-last:]
        return max(u for u, _, _ in runs) if runs else None
