"""The harp metric and cost (docs/metrics.md has the formulas and the why).

Everything is computed from four numbers per job: the user's request R, what
the job used U (a lower bound when ``censored``), harp's first allocation A,
and a weight w (cores for time, so sums are core-seconds; 1 for memory).
Jobs that harp would have killed go through ``harpd.recovery.escalation`` —
the very rule the daemon's recovery applies — and every killed attempt is
charged in full.

Censored jobs (killed at the user's limit in the trace) only say "needs more
than R"; the trace cannot tell what a longer run would have done, so their
simulation stops at the user's own request (the cap of the replay horizon):
harp is charged for its killed attempts below R, and the attempt at R
consumes R, as it did in reality.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from harpd.recovery.escalation import simulate
from harpd.records import Outcome


@dataclass
class ModelMetrics:
    model: str
    jobs: int
    changed: float  # share of jobs whose allocation differs from the request
    under_rate: float  # share of fitting jobs that run out under harp's first allocation
    under_jobs: int
    lost: int  # chains that ran out of attempts before fitting
    reserved_over_used: float  # Σw·final allocation / Σw·used
    over_reservation: float  # Σw·(final − used), resource units × weight
    over_vs_request: float | None  # over_reservation / the users' own over-reservation
    consumed_over_used: float  # Σw·(killed + final use) / Σw·used
    consumed_vs_request: float | None  # consumed / what the users' own requests consumed
    killed: float  # Σw·allocations of killed attempts
    score: float  # the asymmetric harp score, lower is better
    under_rate_weighted: float = 0.0  # Σw over under-predicted / Σw over fitting jobs
    over_reservation_jobs: float = 0.0  # Σ(final − used), unweighted
    over_jobs_vs_request: float | None = None

    def to_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}


def penalty(alpha: float) -> float:
    """λ of the score: a miss costs (1−α)/α times a unit of over-reservation.

    The same ratio that makes α the optimal miss rate under pinball loss
    (τ = c_u/(c_u+c_o) = 1−α), so the score ranks models by the trade-off the
    per-resource α already states.
    """
    return (1.0 - alpha) / alpha


def evaluate(
    model: str,
    alloc: np.ndarray,
    need: np.ndarray,
    request: np.ndarray,
    censored: np.ndarray,
    weight: np.ndarray,
    *,
    resource: str = "time",
    alpha: float = 0.05,
    max_attempts: int = 3,
    cap: np.ndarray | None = None,
    baseline: "ModelMetrics | None" = None,
) -> ModelMetrics:
    """The metric row of one model.

    ``alloc`` is harp's first allocation (NaN: the request stands);
    ``request`` NaN means the user asked nothing (memory traces without
    requests: then only the jobs harp predicted are evaluated).
    """
    alloc = np.asarray(alloc, float)
    need = np.maximum(np.asarray(need, float), 0.0)
    req = np.asarray(request, float)
    cens = np.asarray(censored, bool)
    w = np.asarray(weight, float)
    has_req = np.isfinite(req) & (req > 0)
    first = np.where(np.isfinite(alloc), alloc, req)
    sel = np.isfinite(first)
    first, need, req, cens, w, has_req = first[sel], need[sel], req[sel], cens[sel], w[sel], has_req[sel]
    capv = None if cap is None else np.asarray(cap, float)[sel]
    n = len(first)
    # a censored job used all of its request (at least): that is what it consumed
    used = np.where(cens & has_req, np.where(has_req, req, 0.0), need)
    fit = ~cens
    outcome = Outcome.TIMEOUT if resource == "time" else Outcome.OOM

    final = first.copy()
    killed = np.zeros(n)
    run_use = used.copy()  # what the attempt that finally ran consumed
    lost = 0
    # only jobs whose first allocation falls short need the escalation walk
    short = np.where(cens, first <= need, first < need)
    for i in np.flatnonzero(short):
        orig = float(req[i]) if has_req[i] else None
        if cens[i] and has_req[i]:
            c: float | None = float(req[i])  # the replay horizon: the user's own request
        elif capv is not None and math.isfinite(capv[i]):
            c = float(max(capv[i], need[i]))
        else:
            c = None
        ch = simulate(float(need[i]), float(first[i]), orig, c, outcome, max_attempts,
                      need_is_lower_bound=bool(cens[i]))
        killed[i] = ch.killed
        if ch.fitted:
            final[i] = ch.allocations[-1]
        elif cens[i] and has_req[i]:
            # killed at R as in the trace; if harp's attempts ran out below R,
            # the user resubmits with R and it is killed there again
            final[i] = req[i]
            run_use[i] = 0.0 if ch.allocations[-1] >= req[i] else req[i]
        else:
            lost += 1  # the user resubmits by hand with the original request
            final[i] = req[i] if has_req[i] else need[i]
    final_used = np.where(cens, np.where(has_req, req, need), need)
    sum_used = float(np.sum(w * used))
    over = float(np.sum(w * (final - final_used)))
    over_jobs = float(np.sum(final - final_used))
    consumed = float(np.sum(w * (killed + run_use)))
    under = fit & (first < need)
    n_fit = int(fit.sum())
    under_rate = float(under.sum() / n_fit) if n_fit else 0.0
    wfit = float(np.sum(w[fit]))
    m = ModelMetrics(
        model=model,
        jobs=n,
        changed=float(np.mean(has_req & (np.abs(first - req) > 1e-9))) if n else 0.0,
        under_rate=under_rate,
        under_jobs=int(under.sum()),
        lost=lost,
        reserved_over_used=float(np.sum(w * final) / sum_used) if sum_used else math.nan,
        over_reservation=over,
        over_vs_request=None,
        consumed_over_used=consumed / sum_used if sum_used else math.nan,
        consumed_vs_request=None,
        killed=float(np.sum(w * killed)),
        score=(over + float(np.sum(w * killed))) / sum_used + penalty(alpha) * under_rate if sum_used else math.nan,
        under_rate_weighted=float(np.sum(w[under]) / wfit) if wfit else 0.0,
        over_reservation_jobs=over_jobs,
    )
    if baseline is not None:
        m.over_vs_request = over / baseline.over_reservation if baseline.over_reservation else None
        m.over_jobs_vs_request = (
            over_jobs / baseline.over_reservation_jobs if baseline.over_reservation_jobs else None
        )
        base_consumed = baseline.consumed_over_used * sum_used
        m.consumed_vs_request = consumed / base_consumed if base_consumed else None
    return m
