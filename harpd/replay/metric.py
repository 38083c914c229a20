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
consumes R, as it did in reality.  The per-job cost that harp's calibrated
model steers on (``harpd.models.cost``) is the same escalation charge, kept
below the models so that they can use it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import NamedTuple

import numpy as np

from harpd.models.cost import DISRUPTION
from harpd.records import Outcome
from harpd.recovery.escalation import simulate_many


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
    score: float  # the asymmetric harp score (weighted pinball loss), lower is better
    under_rate_weighted: float = 0.0  # Σw over under-predicted / Σw over fitting jobs
    over_reservation_jobs: float = 0.0  # Σ(final − used), unweighted
    over_jobs_vs_request: float | None = None
    # soft limits (``evaluate_soft``): None under hard limits
    limits: str = "hard"
    extensions_per_job: float | None = None  # extensions / jobs harp managed (changed)
    extended_share: float | None = None  # share of jobs (all through harp) extended at least once
    extended_share_changed: float | None = None  # the same, of the jobs whose limit harp changed
    harp_kills: int | None = None  # jobs killed below their own request: harp's kills, not the users'
    planned_wrongly: float | None = None  # Σw·|limit at start − used| / Σw·used
    planned_wrongly_vs_request: float | None = None  # the same against the users' requests
    # where the soft over-reservation is left: jobs harp kept at their request and never extended
    kept_share: float | None = None  # share of jobs
    kept_over: float | None = None  # Σw·(request − used) over them
    kept_over_vs_request: float | None = None  # the same / the users' own over-reservation
    # of those, the runs that used under a tenth of their request (they ended early: no bound
    # short of the request covers their template's long runs)
    kept_early_over: float | None = None
    kept_early_over_vs_request: float | None = None
    # for the plain verdict of `harp replay` (what harp saves and costs, in resource units × weight)
    used_total: float = 0.0  # Σw·used: the work itself, the same for every model
    killed_jobs: int = 0  # jobs with at least one attempt killed below what they needed
    # of those, what harp's own cut killed (first limit below the request; the rest the users' requests kill)
    harp_killed: float = 0.0  # Σw·allocations of the killed attempts of those jobs

    def to_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}


def harp_score(
    over: float, killed: float, used: float, under_rate: float, alpha: float = 0.05, disruption: float = DISRUPTION
) -> float:
    """The asymmetric harp score, lower is better (docs/metrics.md).

    score = (Σw·(A_final − U) + Σw·killed) / Σw·U
            + λ·u + ((1−α)/α)·max(0, u − α),      u = under-prediction rate

    Over-reservation is charged once per unit (held, not burned).  A job that
    runs out is charged its killed attempts in full (burned) plus λ = 1
    average job of disruption; past the miss budget α every further point of
    miss rate costs (1−α)/α = 19 times more (the pinball ratio of the
    (1−α)-quantile).  So a model that often under-predicts ranks below one
    that over-allocates modestly, and within budget models compete on
    resources.  The users' own requests get the same formula.
    """
    if not used:
        return math.nan
    return (over + killed) / used + disruption * under_rate + (1.0 - alpha) / alpha * max(0.0, under_rate - alpha)


class Jobs(NamedTuple):
    """The judged jobs' columns, one entry per job: what each used, asked, whether it ran out, its weight."""

    need: np.ndarray
    request: np.ndarray
    censored: np.ndarray
    weight: np.ndarray

    def at(self, sel: slice | np.ndarray) -> Jobs:
        """The same columns for the jobs ``sel`` picks."""
        return Jobs(self.need[sel], self.request[sel], self.censored[sel], self.weight[sel])


def evaluate(
    model: str,
    alloc: np.ndarray,
    jobs: Jobs,
    *,
    resource: str = "time",
    alpha: float = 0.05,
    max_attempts: int = 3,
    cap: np.ndarray | None = None,
    baseline: ModelMetrics | None = None,
) -> ModelMetrics:
    """The metric row of one model.

    ``alloc`` is harp's first allocation (NaN: the request stands);
    ``request`` NaN means the user asked nothing (memory traces without
    requests: then only the jobs harp predicted are evaluated).
    """
    alloc = np.asarray(alloc, float)
    need = np.maximum(np.asarray(jobs.need, float), 0.0)
    req = np.asarray(jobs.request, float)
    cens = np.asarray(jobs.censored, bool)
    w = np.asarray(jobs.weight, float)
    has_req = np.isfinite(req) & (req > 0)
    first = np.where(np.isfinite(alloc), alloc, req)
    # share of all jobs harp set an allocation for (other than the request)
    changed_all = (
        float(np.mean(np.isfinite(alloc) & ~(np.abs(alloc - np.where(has_req, req, np.nan)) <= 1e-9)))
        if len(alloc)
        else 0.0
    )
    sel = np.isfinite(first)
    first, need, req, cens, w, has_req = first[sel], need[sel], req[sel], cens[sel], w[sel], has_req[sel]
    capv = None if cap is None else np.asarray(cap, float)[sel]
    n = len(first)
    cut = ~has_req | (first < req - 1e-9)  # harp's first limit is below the user's request (or there is none)
    # a censored job used all of its request (at least): that is what it consumed
    used = np.where(cens & has_req, np.where(has_req, req, 0.0), need)
    fit = ~cens
    outcome = Outcome.TIMEOUT if resource == "time" else Outcome.OOM

    final = first.copy()
    run_use = used.copy()  # what the attempt that finally ran consumed
    killed = np.zeros(n)
    # only jobs whose first allocation falls short need the escalation walk
    short = np.where(cens, first <= need, first < need)
    lost = 0
    if short.any():
        idx = np.flatnonzero(short)
        c_req = cens[idx] & has_req[idx]
        cap_i = np.full(len(idx), np.nan) if capv is None else np.maximum(capv[idx], need[idx])
        cap_i = np.where(c_req, req[idx], cap_i)  # the replay horizon of a censored job: its request
        k, fitted, last, _ = simulate_many(
            need[idx], first[idx], np.where(has_req[idx], req[idx], np.nan), cap_i, outcome, max_attempts, cens[idx]
        )
        killed[idx] = k
        final[idx] = np.where(fitted, last, np.where(has_req[idx], req[idx], need[idx]))
        # a censored job is killed at R as in the trace; if harp's attempts ran
        # out below R the user resubmits with R and it is killed there again
        run_use[idx] = np.where(c_req & ~fitted, np.where(last >= req[idx], 0.0, req[idx]), run_use[idx])
        lost = int(np.sum(~fitted & ~c_req))  # the user resubmits by hand with the request
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
        changed=changed_all,
        under_rate=under_rate,
        under_jobs=int(under.sum()),
        lost=lost,
        reserved_over_used=float(np.sum(w * final) / sum_used) if sum_used else math.nan,
        over_reservation=over,
        over_vs_request=None,
        consumed_over_used=consumed / sum_used if sum_used else math.nan,
        consumed_vs_request=None,
        killed=float(np.sum(w * killed)),
        score=harp_score(over, float(np.sum(w * killed)), sum_used, under_rate, alpha),
        under_rate_weighted=float(np.sum(w[under]) / wfit) if wfit else 0.0,
        over_reservation_jobs=over_jobs,
        used_total=sum_used,
        killed_jobs=int(np.sum(killed > 0)),
        # a job harp left at (or above) its request is killed where the users' request kills it
        harp_kills=int(np.sum((killed > 0) & cut)),
        harp_killed=float(np.sum(w * killed * cut)),
    )
    if baseline is not None:
        m.over_vs_request = over / baseline.over_reservation if baseline.over_reservation else None
        m.over_jobs_vs_request = over_jobs / baseline.over_reservation_jobs if baseline.over_reservation_jobs else None
        base_consumed = baseline.consumed_over_used * sum_used
        m.consumed_vs_request = consumed / base_consumed if base_consumed else None
    return m


#: a run that used under this share of its request ended early (``ModelMetrics.kept_early_over``)
EARLY_SHARE = 0.1


def evaluate_soft(
    model: str,
    start: np.ndarray,
    jobs: Jobs,
    *,
    extension_budget: float = 0.10,
    cap: np.ndarray | None = None,
    baseline: ModelMetrics | None = None,
    max_extensions: int | None = None,
    lead_s: float = 0.0,
    look_s: float = 0.0,
    started_at: np.ndarray | None = None,
) -> ModelMetrics:
    """The metric row of one model under soft limits (docs/metrics.md, "Soft limits").

    ``start`` is the limit each job starts with (NaN: the request stands);
    harpd extends it by the escalation rule up to the request
    (``harpd.replay.soft_walk.extend``), so nothing is killed by harp and the
    consumption is the users' own.  Over-reservation is that of the FINAL
    limit F; "planned wrongly" charges the start limit S the backfill planner
    trusted: Σw·|S − U|.  The score replaces the miss penalty of the hard
    score by one on extensions beyond the budget (same pinball shape).
    Only for traces with requests (the request is the kill time).
    ``kept_*`` say where the over-reservation harp leaves is: in the jobs it
    kept at their request and never extended, and, of those, in the runs
    that ended early (docs/metrics.md, "Queue", step 9).
    """
    from harpd.predict.soft import MAX_EXTENSIONS
    from harpd.replay.soft_walk import extend

    start = np.asarray(start, float)
    need = np.maximum(np.asarray(jobs.need, float), 0.0)
    req = np.asarray(jobs.request, float)
    cens = np.asarray(jobs.censored, bool)
    w = np.asarray(jobs.weight, float)
    final, ext, harp_killed = extend(
        start,
        need,
        req,
        cens,
        cap,
        MAX_EXTENSIONS if max_extensions is None else max_extensions,
        lead_s,
        look_s,
        started_at,
    )
    first = np.where(np.isfinite(start), start, req)
    managed = np.isfinite(start) & ~(np.abs(start - req) <= 1e-9)
    used = np.where(cens, req, need)
    sum_used = float(np.sum(w * used))
    over_each = w * (final - used)
    over = float(np.sum(over_each))
    over_jobs = float(np.sum(final - used))
    n, n_man = len(first), int(managed.sum())
    extended = ext > 0
    fit = ~cens
    under = fit & (first < need)
    n_fit = int(fit.sum())
    wfit = float(np.sum(w[fit]))
    share = float(extended.mean()) if n else 0.0
    b = min(max(extension_budget, 1e-6), 1.0)
    plan = float(np.sum(w * np.abs(first - used)))
    kept = ~managed & ~extended
    kept_over = float(np.sum(over_each[kept]))
    kept_early_over = float(np.sum(over_each[kept & (used < EARLY_SHARE * req)]))
    m = ModelMetrics(
        model=model,
        jobs=n,
        changed=float(n_man / n) if n else 0.0,
        under_rate=float(under.sum() / n_fit) if n_fit else 0.0,
        under_jobs=int(under.sum()),
        lost=0,
        reserved_over_used=float(np.sum(w * final) / sum_used) if sum_used else math.nan,
        over_reservation=over,
        over_vs_request=None,
        consumed_over_used=1.0 if sum_used else math.nan,
        consumed_vs_request=None,
        killed=0.0,
        score=(over / sum_used + (1.0 - b) / b * max(0.0, share - b)) if sum_used else math.nan,
        under_rate_weighted=float(np.sum(w[under]) / wfit) if wfit else 0.0,
        over_reservation_jobs=over_jobs,
        limits="soft",
        extensions_per_job=float(ext[managed].sum() / n_man) if n_man else 0.0,
        extended_share=share,
        extended_share_changed=float(np.sum(extended & managed) / n_man) if n_man else 0.0,
        harp_kills=int(harp_killed.sum()),
        planned_wrongly=plan / sum_used if sum_used else math.nan,
        used_total=sum_used,
        killed_jobs=int(harp_killed.sum()),
        kept_share=float(kept.mean()) if n else 0.0,
        kept_over=kept_over,
        kept_early_over=kept_early_over,
    )
    if baseline is not None:
        m.over_vs_request = over / baseline.over_reservation if baseline.over_reservation else None
        if baseline.over_reservation:
            m.kept_over_vs_request = kept_over / baseline.over_reservation
            m.kept_early_over_vs_request = kept_early_over / baseline.over_reservation
        m.over_jobs_vs_request = over_jobs / baseline.over_reservation_jobs if baseline.over_reservation_jobs else None
        base_consumed = baseline.consumed_over_used * sum_used
        m.consumed_vs_request = sum_used / base_consumed if base_consumed else None
        if baseline.planned_wrongly:
            assert m.planned_wrongly is not None  # set above, NaN at worst
            m.planned_wrongly_vs_request = m.planned_wrongly / baseline.planned_wrongly
    return m
