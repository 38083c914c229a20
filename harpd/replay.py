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

from harpd.decide import Guard, allocate, allocate_many
from harpd.features.history import COL, History, JobKeys, as_matrix, keys_of
from harpd.metrics import ModelMetrics, evaluate
from harpd.models.baselines import Alea, Tsafrir
from harpd.models.conformal import HarpModel
from harpd.models.gbm import GbmQuantile
from harpd.records import JobRecord, Outcome

Y_MIN, Y_MAX = -15.0, 3.0


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
    skipped: dict[str, int] = field(default_factory=dict)

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


def prepare(records: Iterable[JobRecord], resource: str = "time", limit: int | None = None) -> Prepared:
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
        if r.submit_time is None:
            skipped["no submit time"] += 1
            continue
        if req is not None and req > 0:
            n_req += 1
            if resource == "mem" and abs(req - used) < 1e-6 * max(req, 1.0):
                n_same += 1
        end = r.end_time
        if end is None:
            end = (r.start_time if r.start_time is not None else r.submit_time) + used if resource == "time" else r.submit_time
            if resource == "mem" and r.used_time_s is not None:
                end = (r.start_time or r.submit_time) + r.used_time_s
        cores = r.req_cpus or r.alloc_cpus or 1
        rows.append((r.submit_time, end, used, req, cens, cores, r))
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
    groups = np.array([row[6].partition or "?" for row in rows], dtype=object)
    keys: list[JobKeys] = []
    for row in rows:
        r = row[6]
        keys.append(keys_of(r.user, r.account, r.signature, r.job_name,
                            None if absolute else row[3], row[5], r.array_size))
    ref = np.where(np.isfinite(request), request, 1.0)
    y = np.clip(np.log(np.maximum(need, 1.0) / ref), Y_MIN, Y_MAX)
    y = np.where(cens & np.isfinite(request), np.maximum(y, 0.0), y)

    hist = History()
    feats: list[list[float]] = []
    n_hist = np.zeros(n, np.int32)
    known_at = np.zeros(n, np.int64)
    finish: list[int] = []
    heap: list[tuple[float, int]] = []
    pop, push = heapq.heappop, heapq.heappush
    own = [row[3] for row in rows]
    for i in range(n):
        t = submit[i]
        while heap and heap[0][0] <= t:
            _, j = pop(heap)
            kj = keys[j]
            hist.add(kj, need[j], own[j], bool(cens[j]))
            hist.finished(kj)
            finish.append(j)
        known_at[i] = len(finish)
        k = keys[i]
        n_hist[i] = hist.count(k, "s")
        feats.append(hist.features(k, t))
        hist.submitted(k, t)
        push(heap, (end[i], i))
    while heap:
        finish.append(pop(heap)[1])
    return Prepared(
        resource=resource, source=source, submit=submit, need=need, request=request,
        censored=cens, weight=weight, n_hist=n_hist, X=as_matrix(feats), y=y, groups=groups,
        known_at=known_at, finish_seq=np.array(finish, np.int64), skipped=skipped,
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
    conformal: dict = field(default_factory=dict)  # HarpModel parameters
    models: tuple[str, ...] = ("request", "tsafrir", "alea", "gbm", "harp")


@dataclass
class ReplayResult:
    prepared: Prepared
    alloc: dict[str, np.ndarray]
    metrics: list[ModelMetrics]
    retrains: int
    seconds: float


def retrain_points(known_at: np.ndarray, every: int, min_train: int) -> list[int]:
    """Submission indices at which the daemon would have retrained."""
    pts: list[int] = []
    last = -(10**18)
    for i, k in enumerate(known_at):
        if k >= min_train and k - last >= every:
            pts.append(i)
            last = int(k)
    return pts


def run(prep: Prepared, cfg: ReplayConfig | None = None,
        progress: Callable[[str], None] | None = None) -> ReplayResult:
    cfg = cfg or ReplayConfig()
    t0 = time.perf_counter()
    n = prep.n
    if prep.resource == "mem":
        cfg.guard = Guard(**{**cfg.guard.__dict__, "floor": max(cfg.guard.floor, 100.0)}) \
            if cfg.guard.floor == 60.0 else cfg.guard
    every = cfg.retrain_every or max(500, n // 20)
    pts = retrain_points(prep.known_at, every, cfg.min_train)
    limit = None
    alloc: dict[str, np.ndarray] = {}
    req = prep.request
    if "request" in cfg.models and prep.has_requests:
        alloc["request"] = np.full(n, np.nan)
    for name, cls in (("tsafrir", Tsafrir), ("alea", Alea)):
        if name in cfg.models:
            up = cls().predict(prep.X)
            alloc[name] = allocate_many(req, up, prep.n_hist, limit, cfg.guard)

    want_ml = any(m in cfg.models for m in ("gbm", "harp"))
    if want_ml:
        base_pred = np.full(n, np.nan)
        harp_alloc = np.full(n, np.nan)
        bounds = pts + [n]
        model: HarpModel | None = None
        fin = prep.finish_seq
        y, cens, need, groups, w = prep.y, prep.censored, prep.need, prep.groups, prep.weight
        has_req = np.isfinite(req)
        size = w * np.where(has_req, req, 1.0)
        prev_known = int(prep.known_at[0]) if n else 0
        seg = 0
        guard = cfg.guard
        thetas = []
        for i in range(n):
            if seg < len(pts) and i == bounds[seg]:
                k = int(prep.known_at[i])
                idx = fin[max(0, k - cfg.train_window):k]
                model = HarpModel(alpha=cfg.alpha, base=GbmQuantile(**cfg.gbm), relative=prep.has_requests,
                                  resource=prep.resource, calibrator=cfg.conformal)
                model.fit(prep.X[idx], y[idx], censored=cens[idx], groups=groups[idx], sample_weight=size[idx])
                stop = bounds[seg + 1]
                base_pred[i:stop] = model.predict_base(prep.X[i:stop])
                seg += 1
                if progress:
                    progress(f"retrain {seg}/{len(pts)} on {len(idx)} jobs (at job {i}): {model.seeded_}")
            k = int(prep.known_at[i])
            if model is not None and k > prev_known:
                cal = model.cal_
                for j in fin[prev_known:k]:
                    if not math.isfinite(base_pred[j]):
                        continue
                    a = harp_alloc[j]
                    r = float(req[j]) if has_req[j] else None
                    first = a if a == a else (r if r is not None else math.inf)
                    cal.feedback(groups[j], None if cens[j] else float(y[j] - base_pred[j]),
                                 float(first), float(need[j]), r, bool(cens[j]), float(w[j]))
            prev_known = k
            if model is None:
                continue
            up = base_pred[i] + model.cal_.offset(groups[i])
            theta = model.theta
            v, _ = allocate(req[i] if has_req[i] else None, up, int(prep.n_hist[i]), limit, guard, theta)
            if v is not None:
                harp_alloc[i] = v
            if i % 1000 == 0:
                thetas.append(theta)
        if progress and thetas:
            progress(f"theta over time: {np.round(thetas[:: max(1, len(thetas) // 12)], 2).tolist()}")
        if "gbm" in cfg.models:
            alloc["gbm"] = allocate_many(req, base_pred, prep.n_hist, limit, cfg.guard)
        if "harp" in cfg.models:
            alloc["harp"] = harp_alloc

    metrics: list[ModelMetrics] = []
    base: ModelMetrics | None = None
    order = [m for m in ("request", "tsafrir", "alea", "gbm", "harp") if m in alloc]
    for name in order:
        m = evaluate(name, alloc[name], prep.need, req, prep.censored, prep.weight,
                     resource=prep.resource, alpha=cfg.alpha, max_attempts=cfg.max_attempts,
                     baseline=base)
        if name == "request":
            base = m
            m.over_vs_request = 1.0
            m.consumed_vs_request = 1.0
            m.over_jobs_vs_request = 1.0
        metrics.append(m)
    return ReplayResult(prep, alloc, metrics, len(pts), time.perf_counter() - t0)
