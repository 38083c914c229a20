"""THE escalation rule: what a job gets after it ran out of time or memory.

One place, pure functions, no I/O, because two very different callers must
agree to the byte: the daemon's recovery (a real job was killed, resubmit it)
and ``harp replay`` (a simulated job would have been killed).  If they drifted
apart, replay figures would describe a policy harp does not run.

The rule:

* only TIMEOUT (time ran out) and OOM (memory ran out) escalate; PREEMPTED,
  NODE_FAIL, CANCELLED and ordinary failures are not the allocation's fault,
  so doubling would only waste the cluster;
* while harp's allocation is below what the user originally asked for, the
  next one is ``min(2 * current, original)``: harp's shrink was the mistake, so
  harp walks back towards the user's own request without overshooting it;
* memory's last attempt (the one before ``max_attempts`` runs out) goes
  straight to the user's request: a job that fits its request is never lost,
  however deep harp cut (what extension is for time, and why
  memory needs no walk-back floor, ``harpd.predict.allocation``); time keeps
  its floor, which already brings the last attempt back to the request;
* at or past the original request (or with none), plain doubling;
* never beyond the cap (partition MaxTime, node memory, configured caps): a
  doubling that would pass it uses the cap once; if the cap itself failed,
  stop with a reason;
* at most ``max_attempts`` attempts in all (the first run counts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harpd.records import Outcome

if TYPE_CHECKING:  # numpy is imported by the vectorised walk only: the daemon's escalation never loads it
    import numpy as np
    from numpy.typing import ArrayLike

#: which resource ran out, for the outcomes that escalate
RESOURCE_OF: dict[Outcome, str] = {Outcome.TIMEOUT: "time", Outcome.OOM: "mem"}


@dataclass(frozen=True, slots=True)
class Step:
    """The decision after one failed attempt.

    ``value`` is the next allocation (same unit as ``current``) or ``None``
    when ``stop`` is true; ``reason`` is one line for the user and the logs.
    """

    value: float | None
    reason: str
    stop: bool


def resource_for(outcome: Outcome) -> str | None:
    """ "time" for TIMEOUT, "mem" for OOM, None for outcomes that never escalate."""
    return RESOURCE_OF.get(Outcome(outcome))


def _stop(reason: str) -> Step:
    return Step(None, reason, True)


def next_allocation(
    outcome: Outcome,
    current: float,
    original_request: float | None,
    cap: float | None,
    attempt: int,
    max_attempts: int = 3,
) -> Step:
    """The allocation for the attempt after ``attempt`` (1-based) failed.

    ``current`` is what the failed attempt had of the resource that ran out;
    ``original_request`` what the user asked for it (None: nothing asked);
    ``cap`` the most the job may ever get (None: no cap known).  The returned
    value is always strictly above ``current`` and never above ``cap``, so a
    chain of calls increases monotonically and ends after ``max_attempts``.
    """
    try:
        outcome = Outcome(outcome)
    except ValueError:
        return _stop(f"unknown outcome {outcome!r}: not escalated")
    res = RESOURCE_OF.get(outcome)
    if res is None:
        return _stop(f"{outcome.value}: not caused by the allocation, not escalated")
    if attempt >= max_attempts:
        return _stop(f"attempt {attempt} of {max_attempts} ran out of {res}: no attempts left")
    if not (isinstance(current, (int, float)) and math.isfinite(current) and current > 0):
        return _stop(f"invalid current {res} allocation {current!r}: not escalated")
    if cap is not None and not (math.isfinite(cap) and cap > 0):
        cap = None
    if cap is not None and current >= cap:
        return _stop(f"ran out of {res} at the cap ({_fmt(cap)}): cannot raise further")

    doubled = 2.0 * current
    orig = original_request if original_request and original_request > 0 else None
    if orig is not None and current < orig:
        if doubled >= orig:
            value, why = orig, f"back to the original request ({_fmt(orig)})"
        elif res == "mem" and attempt + 1 >= max_attempts:
            value, why = orig, f"the last attempt runs at the original request ({_fmt(orig)})"
        else:
            value, why = doubled, f"doubled {res} (still below the original request)"
    else:
        value, why = doubled, f"doubled {res}"
    if cap is not None and value > cap:
        value, why = cap, f"raised {res} to the cap ({_fmt(cap)})"
    return Step(float(value), f"ran out of {res}; {why}; attempt {attempt + 1} of {max_attempts}", False)


@dataclass(frozen=True, slots=True)
class Chain:
    """What the escalation policy does to one job whose true need is known.

    ``allocations`` holds every attempt's allocation in order; the last one
    either fitted (``fitted``) or the chain stopped (``stopped_reason``).
    ``killed`` is the sum of the allocations of the attempts that ran out
    (they were consumed in full).
    """

    allocations: tuple[float, ...]
    fitted: bool
    killed: float
    stopped_reason: str | None


def simulate(
    need: float,
    first: float,
    original_request: float | None,
    cap: float | None,
    outcome: Outcome,
    max_attempts: int = 3,
    need_is_lower_bound: bool = False,
) -> Chain:
    """Walk ``next_allocation`` for a job that needs ``need`` of one resource.

    An attempt fits when its allocation is at least ``need`` (strictly more
    when ``need_is_lower_bound``: a censored job was killed at ``need``, so it
    needs more).  ``outcome`` is the outcome an attempt that runs out gets
    (TIMEOUT for time, OOM for memory).  Used by ``harp replay``; the daemon
    calls ``next_allocation`` one real attempt at a time.
    """
    allocs = [float(first)]
    killed = 0.0
    attempt = 1
    while True:
        a = allocs[-1]
        fits = a > need if need_is_lower_bound else a >= need
        if fits:
            return Chain(tuple(allocs), True, killed, None)
        killed += a
        step = next_allocation(outcome, a, original_request, cap, attempt, max_attempts)
        if step.stop or step.value is None:
            return Chain(tuple(allocs), False, killed, step.reason)
        allocs.append(step.value)
        attempt += 1


def _fmt(v: float) -> str:
    return f"{v:g}"


def simulate_many(
    need: ArrayLike,
    first: ArrayLike,
    original_request: ArrayLike,
    cap: ArrayLike,
    outcome: Outcome = Outcome.TIMEOUT,
    max_attempts: int = 3,
    need_is_lower_bound: ArrayLike = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised ``simulate`` over numpy arrays (NaN = no request / no cap).

    The same rule as ``next_allocation``, step for step, for the replay's hot
    loops; tests/unit/recovery checks it against ``simulate`` job by job.
    Returns ``(killed, fitted, last_allocation, attempts)`` arrays.
    """
    import numpy as np

    needs = np.asarray(need, float)
    a = np.asarray(first, float).copy()
    n = a.shape[0]
    orig = np.broadcast_to(np.asarray(original_request, float), (n,))
    capa = np.broadcast_to(np.asarray(cap, float), (n,))
    lb = np.broadcast_to(np.asarray(need_is_lower_bound, bool), (n,))
    has_orig = np.isfinite(orig) & (orig > 0)
    has_cap = np.isfinite(capa) & (capa > 0)
    escalates = Outcome(outcome) in RESOURCE_OF
    killed = np.zeros(n)
    fitted = np.zeros(n, bool)
    attempts = np.ones(n, np.int64)
    active = np.ones(n, bool)
    for attempt in range(1, max(max_attempts, 1) + 1):
        fits = np.where(lb, a > needs, a >= needs) & active
        fitted |= fits
        active &= ~fits
        if not active.any():
            break
        killed = np.where(active, killed + a, killed)
        can = active & escalates & (attempt < max_attempts) & (a > 0) & np.isfinite(a)
        can &= ~(has_cap & (a >= capa))
        nxt = np.where(has_orig & (a < orig), np.minimum(2.0 * a, np.where(has_orig, orig, np.inf)), 2.0 * a)
        if RESOURCE_OF.get(Outcome(outcome)) == "mem" and attempt + 1 >= max_attempts:
            nxt = np.where(has_orig & (a < orig), orig, nxt)  # memory's last attempt: the request
        nxt = np.where(has_cap, np.minimum(nxt, np.where(has_cap, capa, np.inf)), nxt)
        active &= can
        a = np.where(active, nxt, a)
        attempts = np.where(active, attempts + 1, attempts)
    return killed, fitted, a, attempts
