"""``harp replay``: walk a real trace in submission order with harp in the loop.

The replay answers "what would harp have done here", so it must not know the
future: each job is predicted from the history of jobs that had *finished*
when it was submitted, models are retrained every ``retrain_every`` new
outcomes on what was known at that moment (as the daemon retrains), and
every job harp would have cut short goes through the daemon's own escalation
rule (``harpd.recovery.escalation``) when the metrics are computed.

Three passes keep 200k jobs inside a few minutes on one core:

1. ``harpd.replay.dataset.prepare``: one chronological walk builds every
   job's feature row from the ``History`` of finished jobs (the daemon's code
   path), and remembers which jobs finished between consecutive submissions;
2. trained models are refitted at each retrain point and predict the jobs up
   to the next one in one batch (the model is fixed in between);
3. the conformal model's online part (ACI, sliding residual windows) walks
   the jobs again, feeding back each job as it finishes, and each job's
   bound goes through harpd's own decision kernel (``harpd.predict.decide``:
   the guard rails, the hard-limit kill-cost gate, whole minutes), so the
   figures are those of the code harpd runs.  The other candidates' rows
   (tsafrir, alea, the plain quantile model) go through the same kernel with
   their batch bounds, so champion scoring compares models on harpd's code.

``limits="soft"`` replays a privileged harpd that extends jobs
instead of letting Slurm kill them: harp's limits are decided again at each
job's start and scored by ``metric.evaluate_soft`` (``harpd.predict.soft``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from harpd.models import construct
from harpd.models.base import float32_row, predict_row
from harpd.predict.allocation import Guard
from harpd.predict.decide import KernelInput, ResourceRule, allocation, rule_of
from harpd.predict.soft import SoftPolicy, recent_bound, soft_guard
from harpd.replay.bounds import allocations, soft_allocations
from harpd.replay.dataset import Prepared, ReplayError, fit_rows
from harpd.replay.metric import Jobs, ModelMetrics, evaluate, evaluate_soft
from harpd.replay.soft_walk import soft_starts

if TYPE_CHECKING:
    from harpd.config import HarpSettings


@dataclass
class ReplayConfig:
    alpha: float = 0.05
    guard: Guard = field(default_factory=Guard)
    retrain_every: int | None = None  # None: n/20, at least 500
    min_train: int = 1000
    train_window: int = 100_000
    max_attempts: int = 3
    gbm: dict = field(default_factory=dict)  # GbmQuantile parameters
    conformal: dict = field(default_factory=dict)  # Calibrator parameters
    models: tuple[str, ...] = ("request", "tsafrir", "alea", "gbm", "harp")
    waste_budget: float = 0.04
    points: list[int] | None = None  # explicit retrain points (training.py's hold-out)
    evaluate_from: int = 0  # metrics over jobs from this submission index on
    bounds: bool = False  # add the reference rows of harpd.replay.bounds (needs keep_templates)
    # "hard": harp's limit is Slurm's kill time (today's daemon); "soft": harpd
    # extends a job before its limit, up to the user's request:
    # ``ReplayResult.alloc[name]`` is then the limit the scheduler sees when the
    # job STARTS (NaN = the user's request stands), raised by the escalation rule
    limits: str = "hard"
    soft: SoftPolicy = field(default_factory=SoftPolicy)  # the soft policy's knobs (limits="soft")
    # hard limits: harp's time cuts pass the kernel's kill-cost gate with this gain (None: not gated)
    hard_cut_gain: float | None = None

    @classmethod
    def of_site(cls, settings: HarpSettings, resource: str, limits: str = "hard", **more: Any) -> ReplayConfig:
        """The replay of a site whose harpd runs ``settings``: its alpha, guard, attempts, budget and soft policy.

        One place reads the site's settings into a replay, so ``harp replay``
        and the benches replay the harpd the site runs; ``more`` sets the rest.
        """
        pr = settings.predict
        return cls(
            alpha=pr.alpha_time if resource == "time" else pr.alpha_mem,
            guard=Guard.from_settings(pr, resource, settings.recovery.max_attempts),
            max_attempts=settings.recovery.max_attempts,
            waste_budget=pr.waste_budget,
            limits=limits,
            soft=SoftPolicy.from_settings(pr, settings.watch),
            hard_cut_gain=pr.hard_cut_gain,
            **more,
        )

    def make_model(self, name: str, prep: Prepared) -> Any:
        """A fresh predictor ``name`` with this replay's tuning, for ``prep``'s trace."""
        if self.limits == "soft":
            return construct.make_model(
                name,
                resource=prep.resource,
                relative=prep.has_requests,
                alpha=1.0 - self.soft.quantile,
                max_attempts=self.max_attempts,
                waste_budget=self.waste_budget,
                min_fraction=0.0,
                gbm=self.gbm,
                conformal={"aim": 1.0, "soft": True, **self.conformal},
            )
        return construct.make_model(
            name,
            resource=prep.resource,
            relative=prep.has_requests,
            alpha=self.alpha,
            max_attempts=self.max_attempts,
            waste_budget=self.waste_budget,
            min_fraction=self.guard.min_fraction,
            gbm=self.gbm,
            conformal=self.conformal,
        )


@dataclass
class ReplayResult:
    prepared: Prepared
    alloc: dict[str, np.ndarray]
    metrics: list[ModelMetrics]
    retrains: int
    seconds: float
    notes: dict[str, str] = field(default_factory=dict)
    limits: str = "hard"  # the ReplayConfig.limits this result was replayed under
    soft: SoftPolicy | None = None  # the soft policy's knobs (limits="soft")


def retrain_points(known_at: np.ndarray, every: int, min_train: int) -> list[int]:
    """Submission indices at which the daemon would have retrained."""
    pts: list[int] = []
    last = -(10**18)
    for i, k in enumerate(known_at):
        if k >= min_train and k - last >= every:
            pts.append(i)
            last = int(k)
    return pts


def _train_rows(prep: Prepared, i: int, window: int) -> np.ndarray:
    k = int(prep.known_at[i])
    return prep.finish_seq[max(0, k - window) : k]


def _batch_model(name: str, prep: Prepared, cfg: ReplayConfig, pts: list[int]) -> np.ndarray:
    """Upper bounds of a model without online feedback: fit at each point, predict ahead."""
    n = prep.n
    log_bound = np.full(n, np.nan)
    bounds = pts + [n]
    for s, i in enumerate(pts):
        model = fit_rows(cfg.make_model(name, prep), prep, _train_rows(prep, i, cfg.train_window))
        log_bound[i : bounds[s + 1]] = model.predict(prep.X[i : bounds[s + 1]], groups=prep.groups[i : bounds[s + 1]])
    return log_bound


@dataclass(frozen=True, slots=True)
class _Rails:
    """What the replay hands the decision kernel (``harpd.predict.decide``) besides each job's own numbers."""

    rule: ResourceRule
    guard: Guard
    soft: bool
    gain: float | None  # the hard-limit kill-cost gate's gain (None: not gated)
    p_kill: float
    floor_s: int

    @classmethod
    def of(cls, prep: Prepared, cfg: ReplayConfig, guard: Guard) -> _Rails:
        soft = cfg.limits == "soft"
        floor_s = int(cfg.guard.floor) if prep.resource == "time" else 60
        return cls(rule_of(prep.resource), guard, soft, None if soft else cfg.hard_cut_gain, cfg.alpha, floor_s)

    def amount(self, prep: Prepared, i: int, log_bound: float, theta: float | None) -> float | None:
        """Job ``i``'s allocation from its bound, as harpd would ask it (None: the request stands)."""
        req = float(prep.request[i])
        lim = None if prep.limit is None or not math.isfinite(prep.limit[i]) else float(prep.limit[i])
        inp = KernelInput(
            request=req if math.isfinite(req) else None,
            log_bound=log_bound,
            n_history=int(prep.n_hist[i]),
            limit=lim,
            guard=self.guard,
            theta=theta,
            soft=self.soft,
            hard_cut_gain=self.gain,
            p_kill=self.p_kill,
            floor_time_s=self.floor_s,
        )
        return allocation(self.rule, inp).amount

    def many(self, prep: Prepared, log_bound: np.ndarray) -> np.ndarray:
        """Every job's allocation from its bound, job by job through the kernel (NaN: the request stands)."""
        out = np.full(prep.n, np.nan)
        for i, b in enumerate(np.asarray(log_bound, float).tolist()):
            v = self.amount(prep, i, b, None)
            if v is not None:
                out[i] = v
        return out


def _online_model(
    name: str,
    prep: Prepared,
    cfg: ReplayConfig,
    pts: list[int],
    progress: Callable[[str], None] | None,
    bounds_out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """harp's path: refit at each point, then walk the jobs feeding each finished one back.

    Returns the allocations (NaN: request kept), the base predictions and θ over time;
    ``bounds_out`` (if given) receives each job's calibrated bound (log need/request).
    Under soft limits the guard loses its walk-back floor and the model is
    calibrated at the soft quantile (a miss is an extension, not a kill).
    """
    n = prep.n
    req = prep.request
    base_pred = np.full(n, np.nan)
    out = np.full(n, np.nan)
    bounds = pts + [n]
    fin = prep.finish_seq
    y, cens, need, groups, w = prep.y, prep.censored, prep.need, prep.groups, prep.weight
    has_req = np.isfinite(req)
    soft = cfg.limits == "soft"
    guard = soft_guard(cfg.guard) if soft else cfg.guard
    model = None
    seg = 0
    prev_known = int(prep.known_at[0]) if n else 0
    thetas: list[float] = []
    hfloor = cfg.make_model(name, prep).floor_of(prep.X)  # a function of the features alone
    rails = _Rails.of(prep, cfg, guard)  # each job through harpd's decision kernel
    for i in range(n):
        if seg < len(pts) and i == bounds[seg]:
            idx = _train_rows(prep, i, cfg.train_window)
            model = fit_rows(cfg.make_model(name, prep), prep, idx)
            stop = bounds[seg + 1]
            base_pred[i:stop] = model.predict_base(prep.X[i:stop])
            seg += 1
            if progress:
                progress(f"{name}: retrain {seg}/{len(pts)} on {len(idx)} finished jobs (job {i} of {n})")
        k = int(prep.known_at[i])
        if model is not None and k > prev_known:
            cal = model.cal_
            for j in fin[prev_known:k]:
                if not math.isfinite(base_pred[j]):
                    continue
                a = out[j]
                r = float(req[j]) if has_req[j] else None
                first = a if not math.isnan(a) else (r if r is not None else math.inf)
                cal.feedback(
                    groups[j],
                    float(base_pred[j]),
                    None if cens[j] else float(y[j]),
                    float(first),
                    float(need[j]),
                    r,
                    bool(cens[j]),
                    float(w[j]),
                )
        prev_known = k
        if model is None:
            continue
        log_bound = max(model.cal_.bound(groups[i], float(base_pred[i])), float(hfloor[i]))
        if bounds_out is not None:
            bounds_out[i] = log_bound
        v = rails.amount(prep, i, log_bound, model.theta)
        if v is not None:
            out[i] = v
        if i % 1000 == 0:
            thetas.append(model.theta)
    return out, base_pred, thetas


def champion_walk(prep: Prepared, cfg: ReplayConfig, model: Any) -> np.ndarray:
    """Each job decided by one fixed champion, as harpd runs one between retrains: the request path's numbers.

    The bound is the champion's one-row prediction of the job's features at
    submission (``predict_row`` on the float32 row, as ``ModelPredictor``
    reads it), then the decision kernel (``harpd.predict.decide``) with the
    replay's rails; under soft limits the bound is the soft policy's start
    bound (``soft.recent_bound``).  No online feedback and no running
    siblings, tilts or budget scale (the soft walk's timeline): what a
    harpd with that champion and an idle watcher asks.  NaN: the request stands.
    """
    soft = cfg.limits == "soft"
    rails = _Rails.of(prep, cfg, soft_guard(cfg.guard, cfg.soft) if soft else cfg.guard)
    theta = getattr(model, "theta", None)
    out = np.full(prep.n, np.nan)
    for i in range(prep.n):
        if prep.has_requests and not math.isfinite(prep.request[i]):
            continue
        row = float32_row(prep.X[i])
        log_bound = predict_row(model, row, prep.groups[i])
        if soft:
            log_bound, _ = recent_bound(row, log_bound, cfg.soft)
        v = rails.amount(prep, i, log_bound, theta)
        if v is not None:
            out[i] = v
    return out


def run(prep: Prepared, cfg: ReplayConfig | None = None, progress: Callable[[str], None] | None = None) -> ReplayResult:
    """Replay ``prep`` under every model of ``cfg.models``; metrics per model."""
    cfg = cfg or ReplayConfig()
    _check_limits(prep, cfg)
    soft = cfg.limits == "soft"
    t0 = time.perf_counter()
    n = prep.n
    every = cfg.retrain_every or max(500, n // 20)
    pts = cfg.points if cfg.points is not None else retrain_points(prep.known_at, every, cfg.min_train)
    alloc: dict[str, np.ndarray] = {}
    notes: dict[str, str] = {}
    base_of_harp: np.ndarray | None = None
    names = list(dict.fromkeys(cfg.models))
    if "harp" in names:  # first, so "gbm" can reuse its base model
        names.remove("harp")
        names.insert(0, "harp")
    for name in names:
        if name == "request":
            if prep.has_requests:
                alloc[name] = np.full(n, np.nan)
            continue
        if name == "harp":
            ups = np.full(n, np.inf) if soft else None
            a, base_of_harp, thetas = _online_model(name, prep, cfg, pts, progress, ups)
            if soft:
                assert ups is not None  # filled by _online_model when soft
                a = _soft_start(prep, cfg, ups, notes)
            alloc[name] = a
            if thetas:
                notes["harp_theta"] = " ".join(f"{t:.2f}" for t in thetas[:: max(1, len(thetas) // 10)])
            continue
        if name == "gbm" and base_of_harp is not None:
            # harp's base model without its calibration: the plain quantile model
            log_bound = base_of_harp
            notes["gbm"] = "harp's base quantile model, without calibration"
        else:
            model = cfg.make_model(name, prep)
            if not getattr(model, "needs_training", True):
                log_bound = model.predict(prep.X, groups=prep.groups)
            else:
                log_bound = _batch_model(name, prep, cfg, pts)
        # the same kernel and rails as harp's row: what harpd would ask with this model as its champion
        alloc[name] = _Rails.of(prep, cfg, soft_guard(cfg.guard) if soft else cfg.guard).many(prep, log_bound)

    if soft:
        soft_metrics = _soft_metrics(prep, cfg, alloc)
        return ReplayResult(
            prep, alloc, soft_metrics, len(pts), time.perf_counter() - t0, notes, limits=cfg.limits, soft=cfg.soft
        )
    metrics = _hard_metrics(prep, cfg, alloc)
    return ReplayResult(prep, alloc, metrics, len(pts), time.perf_counter() - t0, notes, limits=cfg.limits)


def _jobs(prep: Prepared) -> Jobs:
    """The judged columns of a prepared trace."""
    return Jobs(prep.need, prep.request, prep.censored, prep.weight)


def _check_limits(prep: Prepared, cfg: ReplayConfig) -> None:
    """A one-line ``ReplayError`` for limits the trace cannot be replayed under."""
    if cfg.limits not in ("hard", "soft"):
        raise ReplayError(f"unknown limits {cfg.limits!r}: use hard or soft")
    if cfg.limits != "soft":
        return
    if prep.resource != "time":
        raise ReplayError(f"soft limits are time limits: replay --resource time, or --limits hard for {prep.resource}")
    if not prep.has_requests:
        raise ReplayError(
            "soft limits need the users' requested times and this trace has none (an SWF trace's field 9 is -1 "
            "throughout): replay it with --limits hard"
        )
    if prep.template is None:
        raise ReplayError("soft limits need each job's template: prepare the trace with keep_templates=True")


def _hard_metrics(prep: Prepared, cfg: ReplayConfig, alloc: dict[str, np.ndarray]) -> list[ModelMetrics]:
    """Each model's figures under hard limits from ``cfg.evaluate_from`` on; the users' row first, then the bounds."""
    sel = slice(cfg.evaluate_from, prep.n)
    jobs = _jobs(prep).at(sel)

    def score(name: str, a: np.ndarray, base: ModelMetrics | None) -> ModelMetrics:
        return evaluate(
            name,
            a[sel],
            jobs,
            resource=prep.resource,
            alpha=cfg.alpha,
            max_attempts=cfg.max_attempts,
            baseline=base,
        )

    metrics: list[ModelMetrics] = []
    base: ModelMetrics | None = None
    if "request" in alloc:
        base = score("request", alloc["request"], None)
        base.over_vs_request = base.consumed_vs_request = base.over_jobs_vs_request = 1.0
        metrics.append(base)
    metrics += [score(name, alloc[name], base) for name in cfg.models if name in alloc and name != "request"]
    if cfg.bounds and base is not None:
        metrics += [score(f"bound:{name}", a, base) for name, a in allocations(prep).items()]
    return metrics


def _soft_start(prep: Prepared, cfg: ReplayConfig, ups: np.ndarray, notes: dict[str, str]) -> np.ndarray:
    """harp's start limits under soft limits (``soft.soft_starts``: the daemon's own steps)."""
    scales: list[float] = []
    out, use = soft_starts(prep, ups, cfg.guard, cfg.soft, scales)
    pol = cfg.soft
    notes["harp_soft"] = (
        f"start-time rule ({pol.recent_margin:g} x the most of the template's last "
        f"{pol.recent_runs} runs) for {use.mean():.0%} of jobs, the model at quantile "
        f"{pol.quantile:g} for the rest; never below a running sibling's run so far; burst tilt "
        f"{pol.burst_tilt:g}, stake tilt {pol.stake_tilt:g}; budget controller scale over time: "
        + " ".join(f"{x:.2f}" for x in scales[:: max(1, len(scales) // 10)])
    )
    return out


def _soft_metrics(prep: Prepared, cfg: ReplayConfig, alloc: dict[str, np.ndarray]) -> list[ModelMetrics]:
    """Every model's (and reference rule's) row under soft limits: ``alloc`` are start limits."""
    sel = slice(cfg.evaluate_from, prep.n)
    budget = cfg.soft.extension_budget
    jobs = _jobs(prep).at(sel)

    def row(name: str, a: np.ndarray, base: ModelMetrics | None) -> ModelMetrics:
        return evaluate_soft(
            name,
            a[sel],
            jobs,
            extension_budget=budget,
            baseline=base,
            max_extensions=cfg.soft.max_extensions,
            lead_s=cfg.soft.lead_s,
            look_s=cfg.soft.look_s,
            started_at=None if prep.start is None else prep.start[sel],
        )

    base = row("request", np.full(prep.n, np.nan), None)
    base.over_vs_request = base.consumed_vs_request = base.over_jobs_vs_request = 1.0
    base.planned_wrongly_vs_request = 1.0
    metrics = [base] if "request" in alloc else []
    metrics += [row(name, alloc[name], base) for name in cfg.models if name in alloc and name != "request"]
    if cfg.bounds:
        metrics += [row(f"bound:{name}", a, base) for name, a in soft_allocations(prep).items()]
    return metrics
