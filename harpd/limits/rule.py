"""THE rule of a job's limits ledger: which hand may move a limit, and how low it may go.

Several hands of harpd change a job's limits: the decision at submission,
the pending re-sizer, the watcher's extension, recovery's escalation and the
floor of a workflow manager's retry.  Each decides from its own view; this
rule, pure and without I/O like ``harpd.recovery.escalation``, is what they
all check against the one ledger of the job (``harpd.limits.ledger`` reads
it), so one hand never undoes another:

* **a failure is a floor**: a run of the task (this job's own earlier
  attempt, a sibling of the same workflow rule or program, or an earlier
  run) that ran out of memory at X (or of time at X) says the task needs
  more than X, so no hand sets that resource at or below X again: the least
  it gets is what recovery's escalation would give after X
  (``next_allocation``: double towards the user's request, never above
  it).  Later runs of the task that *completed* say more: one that used
  less than X says the need went down again, and that failure no longer
  counts (a floor must not outlive the program change that made it); if
  they all used more, the floor is the most they used with the history
  rule's margin instead (a program that grew to U needs about U, not
  twice what failed, nor the escalated size when U is above it);
* **an escalation is a floor** for its own attempt: recovery raised it
  because the run before ran out; nothing lowers it during that attempt;
* **a newer decision of another hand wins**: a hand that lowers a limit
  from a view older than another hand's raise of it (the re-sizer deciding
  from the original submission after recovery doubled the job) is refused,
  with the reason named;
* raising is always allowed up to the user's request (the floor may lift a
  pending sibling before it starts).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from harpd.records import Outcome
from harpd.recovery.escalation import next_allocation

__all__ = [
    "DECISION",
    "RESIZE",
    "LIFT",
    "EXTEND",
    "ESCALATE",
    "RETRY_FLOOR",
    "Entry",
    "RanOut",
    "Floor",
    "Verdict",
    "floor_of",
    "judge",
]

# the hands that set a job's limits (an entry's ``hand``)
DECISION = "decision"  # harp-submit's decision at submission
RESIZE = "re-size"  # the pending re-sizer (harpd.watch.resize)
LIFT = "floor lift"  # the re-sizer raising a pending job to a failure's floor
EXTEND = "extension"  # the watcher's extension of a running job (harpd.watch.extend)
ESCALATE = "escalation"  # recovery's next attempt after a run ran out (harpd.recovery)
RETRY_FLOOR = "retry floor"  # a workflow manager's retry sized above its last attempt (harpd.predict.retry_floor)

#: a failure's floor once later runs completed using more: the most they used and this margin (the history
#: rule's own, ``harpd.replay.bounds.MARGIN``), always above the failed size
HEADROOM = 1.1

#: which outcome runs out of which resource
_OUTCOME_OF = {"mem": Outcome.OOM, "time": Outcome.TIMEOUT}


@dataclass(frozen=True, slots=True)
class Entry:
    """One line of a job's ledger: ``hand`` set ``resource`` to ``value`` for ``attempt`` at ``at``.

    ``old`` is the value before (None: the first setting), ``reason`` the
    hand's own words; ``value`` is in MiB (memory, per job) or seconds (time).
    """

    attempt: int
    hand: str
    resource: str
    value: float
    at: float
    reason: str = ""
    old: float | None = None

    @property
    def raised(self) -> bool:
        """Whether this entry raised its resource (a first setting counts as no raise)."""
        return self.old is not None and self.value > self.old


@dataclass(frozen=True, slots=True)
class RanOut:
    """A run of the task or of a sibling that ran out of ``resource`` at ``size``, or completed using ``used``.

    ``completed`` runs carry what they used (``used``): one that used less
    than a failure's size after that failure releases it.
    """

    job_id: str
    resource: str
    size: float
    at: float
    completed: bool = False
    used: float | None = None


@dataclass(frozen=True, slots=True)
class Floor:
    """The least a hand may set a resource to (``value``), and why (``reason``); value None: no floor."""

    value: float | None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Verdict:
    """A proposed change judged: ``value`` to set (None: refused or nothing to do), ``why`` one line."""

    value: float | None
    why: str
    refused: bool = False


def _finite(v: float | None) -> float | None:
    try:
        f = float(v) if v is not None else None
    except (TypeError, ValueError):
        return None
    return f if f is not None and math.isfinite(f) and f > 0 else None


def _next_after(resource: str, size: float, request: float | None) -> float:
    """The least size above ``size``: recovery's escalation after running out at it (never above the request)."""
    step = next_allocation(_OUTCOME_OF[resource], size, request, None, 1, 1_000)
    if step.stop or step.value is None:
        return size
    return float(step.value)


def floor_of(
    resource: str,
    entries: Iterable[Entry],
    runs: Iterable[RanOut],
    attempt: int,
    request: float | None,
    fmt=lambda v: f"{v:g}",
) -> Floor:
    """The floor of ``resource`` for ``attempt`` of a job: its own escalation and every failure still standing.

    ``entries``: the job's ledger; ``runs``: the task's and its siblings'
    failures and completions (``RanOut``); ``request``: the user's request
    (the floor never passes it).  Bad values (NaN, negative) are ignored.
    """
    if resource not in _OUTCOME_OF:
        return Floor(None)
    best: tuple[float, str] | None = None
    for e in entries:
        v = _finite(e.value)
        if e.hand == ESCALATE and e.resource == resource and int(e.attempt) == int(attempt) and v is not None:
            if best is None or v > best[0]:
                best = (v, f"recovery's escalation of attempt {e.attempt} to {fmt(v)}")
    ran = [r for r in runs if r.resource == resource]
    done = [(r.at, _finite(r.used)) for r in ran if r.completed]
    req = _finite(request)
    for r in ran:
        x = _finite(r.size)
        if r.completed or x is None:
            continue
        later = [used for at, used in done if at > r.at and used is not None]
        if any(used < x for used in later):
            continue  # a later run completed using less: the need went down
        v = _next_after(resource, x, req)
        if later:  # later runs completed using more than x: they say how much more (with the history's margin)
            v = max(HEADROOM * max(later), math.nextafter(x, math.inf))
        if v <= x:
            continue  # at the request already: nothing above it to give
        if best is None or v > best[0]:
            best = (v, f"job {r.job_id} ran out of {resource} at {fmt(x)}")
    if best is None:
        return Floor(None)
    value = best[0] if req is None else min(best[0], req)
    return Floor(value, best[1])


def judge(
    hand: str,
    resource: str,
    current: float,
    proposed: float | None,
    since: float,
    entries: Iterable[Entry],
    floor: Floor,
    request: float | None,
    fmt=lambda v: f"{v:g}",
) -> Verdict:
    """Judge ``hand``'s change of ``resource`` from ``current`` to ``proposed`` (None: none proposed).

    ``since``: when the view the hand decided from was formed (the
    re-sizer's: the submission, or its own last change); a raise of the
    resource by another hand after it makes a lowering a conflict.  The
    value returned is never below ``floor`` and never above ``request``; a
    ``proposed`` None still lifts ``current`` to the floor.
    """
    cur = _finite(current)
    if cur is None:
        return Verdict(None, f"no current {resource} known: not changed", True)
    req = _finite(request)
    low = _finite(floor.value)
    want = _finite(proposed)
    if want is None:
        want = cur
    if want < cur:
        newer = [
            e
            for e in entries
            if e.hand != hand and e.resource == resource and e.at > since and e.raised and _finite(e.value)
        ]
        if newer:
            e = max(newer, key=lambda x: x.at)
            return Verdict(
                None,
                f"{hand} {fmt(cur)} -> {fmt(want)} refused: it conflicts with the newer {e.hand} "
                f"of attempt {e.attempt} to {fmt(e.value)} ({e.reason})",
                True,
            )
    if low is not None and want < low:
        want = low
        why = f"raised to the floor of {fmt(low)} ({floor.reason})"
    else:
        why = ""
    if req is not None and want > req:
        want = max(req, cur) if cur <= req else cur
    if want == cur:
        return Verdict(None, why or "no change")
    return Verdict(want, why)
