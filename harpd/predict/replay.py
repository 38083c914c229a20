"""``harp replay``: walk a real trace in submission order with harp in the loop.

The replay answers "what would harp have done here", so it must not know the
future: each job is predicted from the history of jobs that had *finished*
when it was submitted, models are retrained every ``retrain_every`` new
outcomes on what was known at that moment (as the daemon retrains), and
every job harp would have cut short goes through the daemon's own escalation
rule (``harpd.recovery.escalation``) when the metrics are computed.

Three passes keep 200k jobs inside a few minutes on one core:

1. ``prepare``: one chronological walk builds every job's feature row from the
   ``History`` of finished jobs (the daemon's code path), and remembers which
   jobs finished between consecutive submissions;
2. trained models are refitted at each retrain point and predict the jobs up
   to the next one in one batch (the model is fixed in between);
3. the conformal model's online part (ACI, sliding residual windows) and the
   guard rails walk the jobs again, feeding back each job as it finishes.
"""

from __future__ import annotations

import heapq
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from harpd.predict.allocation import Guard, allocate, allocate_many
from harpd.features.history import (
    COL,
    N_FEATURES,
    History,
    conformal_group,
    key_fields,
    keys_from_fields,
)
from harpd.predict.metric import ModelMetrics, evaluate
from harpd.models import registry
from harpd.models.conformal import HarpModel
from harpd.models.gbm import GbmQuantile
from harpd.records import JobRecord, Outcome

Y_MIN, Y_MAX = -15.0, 3.0
#: the base model's quantile: memory traces are burstier, their tails heavier
DEFAULT_QUANTILE = {"time": 0.8, "mem": 0.95}


class ReplayError(ValueError):
    """A trace or option the replay cannot use; one line for the user."""


# -- reading ------------------------------------------------------------------

def read_trace(path: str | os.PathLike[str]) -> Iterator[JobRecord]:
    """SWF or ``sacct`` export, told apart by content (``harpd.traces.read_trace``)."""
    from harpd.traces import read_trace as _read
    from harpd.traces.swf import TraceFormatError

    try:
        return _read(path)
    except TraceFormatError as exc:
        raise ReplayError(str(exc)) from None


# -- pass 1 -------------------------------------------------------------------

@dataclass
class Prepared:
    """A trace as arrays in submission order, with features at submission time."""

    resource: str
    source: str
    submit: np.ndarray
    need: np.ndarray  # used amount (lower bound when censored)
    request: np.ndarray  # the user's request, NaN when none
    censored: np.ndarray
    weight: np.ndarray
    n_hist: np.ndarray  # finished runs of the job's signature group when submitted
    X: np.ndarray
    y: np.ndarray  # training target: log(need / reference)
    groups: np.ndarray  # conformal groups (partition)
    known_at: np.ndarray  # outcomes known when job i was submitted
    finish_seq: np.ndarray  # job indices in the order they finished
    limit: np.ndarray | None = None  # cap per job (NaN: none); the request caps relative traces
    skipped: dict[str, int] = field(default_factory=dict)
    template: np.ndarray | None = None  # per job its user+request template key (``keep_templates``)

    @property
    def n(self) -> int:
        return len(self.submit)

    @property
    def has_requests(self) -> bool:
        return bool(np.isfinite(self.request).any())


def _usage(r: JobRecord, resource: str) -> tuple[float | None, float | None, bool]:
    if resource == "time":
        cens = r.censored_time or r.outcome == Outcome.TIMEOUT
        return r.used_time_s, r.req_time_s, cens
    cens = r.censored_mem or r.outcome == Outcome.OOM
    return r.used_mem_mb, r.req_mem_mb, cens


def prepare(records: Iterable[JobRecord], resource: str = "time", limit: int | None = None,
            keep_templates: bool = False) -> Prepared:
    """Arrays and submission-time features of a trace's finished jobs, oldest first.

    Jobs without a request are dropped when most jobs have one (they cannot
    be compared with the user's own request); when almost none has one (a
    memory trace like METACENTRUM) every job is kept and sized absolutely.
    A job that ran to its request is censored whatever its state says.
    ``keep_templates`` also keeps each job's template key (same user, request
    and cores: the History's "r" group), for evaluations that group jobs.
    """
    if resource not in ("time", "mem"):
        raise ReplayError(f"unknown resource {resource!r}: use time or mem")
    rows: list[tuple] = []
    skipped = {"no usage": 0, "no submit time": 0, "no request": 0, "not finished": 0}
    source = ""
    n_req = n_same = 0
    for r in records:
        source = source or r.source
        used, req, cens = _usage(r, resource)
        if r.outcome in (Outcome.RUNNING,):
            skipped["not finished"] += 1
            continue
        if used is None or used < 0:
            skipped["no usage"] += 1
            continue
        if req is not None and req > 0 and used >= req:
            cens = True  # ran to its limit (whatever the state says): a lower bound
        if r.submit_time is None:
            skipped["no submit time"] += 1
            continue
        if req is not None and req > 0:
            n_req += 1
            if resource == "mem" and abs(req - used) < 1e-6 * max(req, 1.0):
                n_same += 1
        end = r.end_time
        if end is None:  # when its outcome became known: start (or submit) + run time
            began = r.start_time if r.start_time is not None else r.submit_time
            end = began + (r.used_time_s or 0.0)
        cores = r.req_cpus or r.alloc_cpus or 1
        # keep a few fields, not the record: training holds a million of these
        rows.append((r.submit_time, end, used, req, cens, cores, key_fields(r, resource), r.partition))
    if not rows:
        raise ReplayError(f"trace has no finished jobs with {resource} usage")
    if resource == "mem" and n_req and n_same > 0.9 * n_req:
        raise ReplayError(
            f"used memory equals the request in {n_same / n_req:.0%} of jobs: not a measurement, cannot replay memory"
        )
    with_req = n_req / len(rows)
    absolute = with_req < 0.5  # e.g. METACENTRUM: no requests at all → absolute sizes
    if not absolute:
        before = len(rows)
        rows = [row for row in rows if row[3] is not None and row[3] > 0]
        skipped["no request"] += before - len(rows)
    rows.sort(key=lambda row: row[0])
    if limit:
        rows = rows[:limit]
    n = len(rows)

    submit = np.array([row[0] for row in rows], float)
    end = np.array([max(row[1], row[0]) for row in rows], float)
    need = np.array([row[2] for row in rows], float)
    request = np.array([row[3] if (row[3] and not absolute) else np.nan for row in rows], float)
    cens = np.array([row[4] for row in rows], bool)
    weight = np.array([row[5] if resource == "time" else 1.0 for row in rows], float)
    relative = not absolute
    ref = np.where(np.isfinite(request), request, 1.0)
    # relative targets live in [-15, 3]; absolute ones (no requests) are log MiB/seconds
    y = np.log(np.maximum(need, 1.0) / ref)
    y = np.clip(y, Y_MIN, Y_MAX) if not absolute else np.clip(y, 0.0, 40.0)
    y = np.where(cens & np.isfinite(request), np.maximum(y, 0.0), y)

    hist = History()
    X = np.empty((n, N_FEATURES), dtype=np.float32)  # rows filled in place: no list of lists
    n_hist = np.zeros(n, np.int32)
    known_at = np.zeros(n, np.int64)
    finish: list[int] = []
    heap: list[tuple[float, int]] = []
    pop, push = heapq.heappop, heapq.heappush
    own = [row[3] for row in rows]
    parts = [row[7] or "?" for row in rows]
    # traces carry no partition limits: the largest use seen so far in the
    # partition stands in for "node memory" / MaxTime where there is no request
    part_max: dict[str, float] = {}
    limit = np.full(n, np.nan)
    for i in range(n):
        t = submit[i]
        while heap and heap[0][0] <= t:
            _, j = pop(heap)
            kj = keys_from_fields(rows[j][6], relative)  # recomputed: cheaper than holding a million
            hist.add(kj, need[j], own[j], bool(cens[j]), end[j])
            hist.finished(kj)
            finish.append(j)
            if need[j] > part_max.get(parts[j], 0.0):
                part_max[parts[j]] = float(need[j])
        if absolute:
            limit[i] = part_max.get(parts[i], np.nan)
        known_at[i] = len(finish)
        k = keys_from_fields(rows[i][6], relative)
        n_hist[i] = hist.count(k, "s")
        X[i] = hist.features(k, t)
        hist.submitted(k, t)
        push(heap, (end[i], i))
    while heap:
        finish.append(pop(heap)[1])
    lp = X[:, COL["log_pending"]]
    groups = np.array([conformal_group(row[7], float(lp[i])) for i, row in enumerate(rows)], dtype=object)
    return Prepared(
        resource=resource, source=source, submit=submit, need=need, request=request,
        censored=cens, weight=weight, n_hist=n_hist, X=X, y=y, groups=groups,
        known_at=known_at, finish_seq=np.array(finish, np.int64), skipped=skipped,
        limit=limit if absolute else None,
        template=np.array([keys_from_fields(row[6], relative).req for row in rows], dtype=object)
        if keep_templates else None,
    )


# -- passes 2 and 3 --------------------------------------------------------------

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
    bounds: bool = False  # add the reference rows of harpd.predict.bounds (needs keep_templates)


@dataclass
class ReplayResult:
    prepared: Prepared
    alloc: dict[str, np.ndarray]
    metrics: list[ModelMetrics]
    retrains: int
    seconds: float
    notes: dict[str, str] = field(default_factory=dict)


def retrain_points(known_at: np.ndarray, every: int, min_train: int) -> list[int]:
    """Submission indices at which the daemon would have retrained."""
    pts: list[int] = []
    last = -(10**18)
    for i, k in enumerate(known_at):
        if k >= min_train and k - last >= every:
            pts.append(i)
            last = int(k)
    return pts


def make_model(name: str, cfg: ReplayConfig, prep: Prepared):
    """A fresh predictor; harp's own get the replay's tuning, others their defaults."""
    if name == "request":
        return registry.create("request")
    gbm = {"quantile": DEFAULT_QUANTILE[prep.resource], **cfg.gbm}
    if name == "harp":
        cal = {"budget": cfg.waste_budget, "min_fraction": cfg.guard.min_fraction, **cfg.conformal}
        return HarpModel(alpha=cfg.alpha, base=GbmQuantile(**gbm), relative=prep.has_requests,
                         resource=prep.resource, calibrator=cal, max_attempts=cfg.max_attempts)
    if name == "gbm":
        return GbmQuantile(**gbm)
    return registry.create(name)


def _train_rows(prep: Prepared, i: int, window: int) -> np.ndarray:
    k = int(prep.known_at[i])
    return prep.finish_seq[max(0, k - window):k]


def _fit(model, prep: Prepared, idx: np.ndarray):
    size = prep.weight[idx] * np.where(np.isfinite(prep.request[idx]), prep.request[idx], 1.0)
    kw = {"censored": prep.censored[idx], "groups": prep.groups[idx]}
    try:
        return model.fit(prep.X[idx], prep.y[idx], sample_weight=size, **kw)
    except TypeError:  # a site model without sample_weight
        return model.fit(prep.X[idx], prep.y[idx], **kw)


def _batch_model(name: str, prep: Prepared, cfg: ReplayConfig, pts: list[int]) -> np.ndarray:
    """Upper bounds of a model without online feedback: fit at each point, predict ahead."""
    n = prep.n
    up = np.full(n, np.nan)
    bounds = pts + [n]
    for s, i in enumerate(pts):
        model = _fit(make_model(name, cfg, prep), prep, _train_rows(prep, i, cfg.train_window))
        up[i:bounds[s + 1]] = model.predict(prep.X[i:bounds[s + 1]], groups=prep.groups[i:bounds[s + 1]])
    return up


def _online_model(name: str, prep: Prepared, cfg: ReplayConfig, pts: list[int],
                  progress: Callable[[str], None] | None) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """harp's path: refit at each point, then walk the jobs feeding each finished one back.

    Returns the allocations (NaN: request kept), the base predictions and θ over time.
    """
    n = prep.n
    req = prep.request
    base_pred = np.full(n, np.nan)
    out = np.full(n, np.nan)
    bounds = pts + [n]
    fin = prep.finish_seq
    y, cens, need, groups, w = prep.y, prep.censored, prep.need, prep.groups, prep.weight
    has_req = np.isfinite(req)
    guard = cfg.guard
    model = None
    seg = 0
    prev_known = int(prep.known_at[0]) if n else 0
    thetas: list[float] = []
    hfloor = make_model(name, cfg, prep).floor_of(prep.X)  # a function of the features alone
    for i in range(n):
        if seg < len(pts) and i == bounds[seg]:
            idx = _train_rows(prep, i, cfg.train_window)
            model = _fit(make_model(name, cfg, prep), prep, idx)
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
                first = a if a == a else (r if r is not None else math.inf)
                cal.feedback(groups[j], float(base_pred[j]), None if cens[j] else float(y[j]),
                             float(first), float(need[j]), r, bool(cens[j]), float(w[j]))
        prev_known = k
        if model is None:
            continue
        up = max(model.cal_.bound(groups[i], float(base_pred[i])), float(hfloor[i]))
        lim = None if prep.limit is None or not math.isfinite(prep.limit[i]) else float(prep.limit[i])
        v, _ = allocate(req[i] if has_req[i] else None, up, int(prep.n_hist[i]), lim, guard, model.theta)
        if v is not None:
            out[i] = v
        if i % 1000 == 0:
            thetas.append(model.theta)
    return out, base_pred, thetas


def run(prep: Prepared, cfg: ReplayConfig | None = None,
        progress: Callable[[str], None] | None = None) -> ReplayResult:
    """Replay ``prep`` under every model of ``cfg.models``; metrics per model."""
    cfg = cfg or ReplayConfig()
    t0 = time.perf_counter()
    n = prep.n
    every = cfg.retrain_every or max(500, n // 20)
    pts = cfg.points if cfg.points is not None else retrain_points(prep.known_at, every, cfg.min_train)
    req = prep.request
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
            a, base_of_harp, thetas = _online_model(name, prep, cfg, pts, progress)
            alloc[name] = a
            if thetas:
                notes["harp_theta"] = " ".join(f"{t:.2f}" for t in thetas[:: max(1, len(thetas) // 10)])
            continue
        if name == "gbm" and base_of_harp is not None:
            # harp's base model without its calibration: the plain quantile model
            up = base_of_harp
            notes["gbm"] = "harp's base quantile model, without calibration"
        else:
            model = make_model(name, cfg, prep)
            if not getattr(model, "needs_training", True):
                up = model.predict(prep.X, groups=prep.groups)
            else:
                up = _batch_model(name, prep, cfg, pts)
        alloc[name] = allocate_many(req, up, prep.n_hist, prep.limit, cfg.guard)

    sel = slice(cfg.evaluate_from, n)
    metrics: list[ModelMetrics] = []
    base: ModelMetrics | None = None
    if "request" in alloc:
        base = evaluate("request", alloc["request"][sel], prep.need[sel], req[sel], prep.censored[sel],
                        prep.weight[sel], resource=prep.resource, alpha=cfg.alpha, max_attempts=cfg.max_attempts)
        base.over_vs_request = base.consumed_vs_request = base.over_jobs_vs_request = 1.0
        metrics.append(base)
    order = [m for m in cfg.models if m in alloc and m != "request"]
    for name in order:
        metrics.append(evaluate(name, alloc[name][sel], prep.need[sel], req[sel], prep.censored[sel],
                                prep.weight[sel], resource=prep.resource, alpha=cfg.alpha,
                                max_attempts=cfg.max_attempts, baseline=base))
    if cfg.bounds and base is not None:
        from harpd.predict.bounds import allocations

        for name, a in allocations(prep).items():
            metrics.append(evaluate(f"bound:{name}", a[sel], prep.need[sel], req[sel], prep.censored[sel],
                                    prep.weight[sel], resource=prep.resource, alpha=cfg.alpha,
                                    max_attempts=cfg.max_attempts, baseline=base))
    return ReplayResult(prep, alloc, metrics, len(pts), time.perf_counter() - t0, notes)
