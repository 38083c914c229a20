"""A trace as arrays, each job with the features it had when it was submitted.

Replay and training both learn from a trace (or the store's history) walked
in submission order: ``prepare`` builds every job's feature row from the
``History`` of jobs that had *finished* by then (the daemon's own code path),
and remembers which jobs finished between consecutive submissions, so that a
model retrained at job i sees only what the daemon would have known there.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from harpd.features.history import (
    COL,
    N_FEATURES,
    History,
    conformal_group,
    key_fields,
    keys_from_fields,
)
from harpd.features.usage import usage_of
from harpd.models import construct
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


# -- features at submission time ----------------------------------------------


@dataclass
class Prepared:
    """A trace as arrays in submission order, with features at submission time."""

    resource: str
    source: str
    submit: np.ndarray
    need: np.ndarray  # used amount (lower bound when censored)
    request: np.ndarray  # the user's request, NaN when none
    censored: np.ndarray  # ran out or ran to its request: needed at least the request (``Usage.ran_out``)
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
    # when each job started and ended (the trace's; a job without a start time
    # starts when submitted): the soft-limit replay decides again at the start
    start: np.ndarray | None = None
    end: np.ndarray | None = None

    @property
    def n(self) -> int:
        return len(self.submit)

    @property
    def has_requests(self) -> bool:
        return bool(np.isfinite(self.request).any())


class TraceRow(NamedTuple):
    """The few fields of one finished job that ``prepare`` keeps (a tuple: training holds a million)."""

    submit: float
    end: float  # when its outcome became known
    used: float  # usage_of's amount (a lower bound when ``ran_out``)
    request: float | None
    ran_out: bool  # ran out or ran to its request: needed at least the request
    cores: int
    keys: tuple  # ``key_fields``: what the History groups it by, recomputed into keys when read
    partition: str | None
    began: float  # its start (its submission where the trace has none)


def prepare(
    records: Iterable[JobRecord], resource: str = "time", limit: int | None = None, keep_templates: bool = False
) -> Prepared:
    """Arrays and submission-time features of a trace's finished jobs, oldest first.

    Jobs without a request are dropped when most jobs have one (they cannot
    be compared with the user's own request); when almost none has one (a
    memory trace like METACENTRUM) every job is kept and sized absolutely.
    Each job's usage is read by ``harpd.features.usage.usage_of``, the rule
    the live history uses.  ``censored`` is its ``ran_out``: the runs that
    ran out or ran to their request, which the metric charges their request
    and the models' calibrator reads as "needed at least the request".  A
    run that merely stopped early keeps its usage here: the metric scores a
    trace's every job by what it used, and its usage is the best predictor
    of the same user's next job there (treated as a lower bound or left out,
    METACENTRUM's memory under-prediction rose from 4.4 % to 5.4-5.8 %).
    The live history rule, which sizes from a handful of runs, never takes
    one as a sample (``harpd.features.usage.RecentRuns``).
    ``keep_templates`` also keeps each job's template key (same user, request
    and cores: the History's "r" group), for evaluations that group jobs.
    """
    if resource not in ("time", "mem"):
        raise ReplayError(f"unknown resource {resource!r}: use time or mem")
    rows: list[TraceRow] = []
    skipped = {"no usage": 0, "no submit time": 0, "no request": 0, "not finished": 0}
    source = ""
    n_req = n_same = 0
    for r in records:
        source = source or r.source
        if r.outcome in (Outcome.RUNNING,):
            skipped["not finished"] += 1
            continue
        u = usage_of(r, resource)
        if u is None:
            skipped["no usage"] += 1
            continue
        used, req, cens = u.used, u.request, u.ran_out
        if r.submit_time is None:
            skipped["no submit time"] += 1
            continue
        if req is not None and req > 0:
            n_req += 1
            if resource == "mem" and abs(req - used) < 1e-6 * max(req, 1.0):
                n_same += 1
        began = r.start_time if r.start_time is not None else r.submit_time
        end = r.end_time
        if end is None:  # when its outcome became known: start (or submit) + run time
            end = began + (r.used_time_s or 0.0)
        cores = r.req_cpus or r.alloc_cpus or 1
        # keep a few fields, not the record: training holds a million of these
        rows.append(TraceRow(r.submit_time, end, used, req, cens, cores, key_fields(r, resource), r.partition, began))
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
        rows = [row for row in rows if row.request is not None and row.request > 0]
        skipped["no request"] += before - len(rows)
    rows.sort(key=lambda row: row.submit)
    if limit:
        rows = rows[:limit]
    n = len(rows)

    submit = np.array([row.submit for row in rows], float)
    end_at = np.array([max(row.end, row.submit) for row in rows], float)
    start = np.clip(np.array([row.began for row in rows], float), submit, end_at)
    need = np.array([row.used for row in rows], float)
    request = np.array([row.request if (row.request and not absolute) else np.nan for row in rows], float)
    censored = np.array([row.ran_out for row in rows], bool)
    weight = np.array([row.cores if resource == "time" else 1.0 for row in rows], float)
    relative = not absolute
    ref = np.where(np.isfinite(request), request, 1.0)
    # relative targets live in [-15, 3]; absolute ones (no requests) are log MiB/seconds
    y = np.log(np.maximum(need, 1.0) / ref)
    y = np.clip(y, Y_MIN, Y_MAX) if not absolute else np.clip(y, 0.0, 40.0)
    y = np.where(censored & np.isfinite(request), np.maximum(y, 0.0), y)

    hist = History()
    X = np.empty((n, N_FEATURES), dtype=np.float32)  # rows filled in place: no list of lists
    n_hist = np.zeros(n, np.int32)
    known_at = np.zeros(n, np.int64)
    finish: list[int] = []
    heap: list[tuple[float, int]] = []
    pop, push = heapq.heappop, heapq.heappush
    own = [row.request for row in rows]
    parts = [row.partition or "?" for row in rows]
    # traces carry no partition limits: the largest use seen so far in the
    # partition stands in for "node memory" / MaxTime where there is no request
    part_max: dict[str, float] = {}
    limit_at = np.full(n, np.nan)
    for i in range(n):
        t = submit[i]
        while heap and heap[0][0] <= t:
            _, j = pop(heap)
            kj = keys_from_fields(rows[j].keys, relative)  # recomputed: cheaper than holding a million
            hist.add(kj, need[j], own[j], bool(censored[j]), end_at[j])
            hist.finished(kj)
            finish.append(j)
            if need[j] > part_max.get(parts[j], 0.0):
                part_max[parts[j]] = float(need[j])
        if absolute:
            limit_at[i] = part_max.get(parts[i], np.nan)
        known_at[i] = len(finish)
        k = keys_from_fields(rows[i].keys, relative)
        n_hist[i] = hist.count(k, "s")
        X[i] = hist.features(k, t)
        hist.submitted(k, t)
        push(heap, (end_at[i], i))
    while heap:
        finish.append(pop(heap)[1])
    lp = X[:, COL["log_pending"]]
    groups = np.array([conformal_group(row.partition, float(lp[i])) for i, row in enumerate(rows)], dtype=object)
    return Prepared(
        resource=resource,
        source=source,
        submit=submit,
        need=need,
        request=request,
        censored=censored,
        weight=weight,
        n_hist=n_hist,
        X=X,
        y=y,
        groups=groups,
        known_at=known_at,
        finish_seq=np.array(finish, np.int64),
        skipped=skipped,
        limit=limit_at if absolute else None,
        template=np.array([keys_from_fields(row.keys, relative).req for row in rows], dtype=object)
        if keep_templates
        else None,
        start=start,
        end=end_at,
    )


def fit_rows(model, prep: Prepared, idx: np.ndarray):
    """``model`` fitted on rows ``idx``, each weighed by its size (request × cores, as the metric weighs it)."""
    size = prep.weight[idx] * np.where(np.isfinite(prep.request[idx]), prep.request[idx], 1.0)
    return construct.fit(
        model, prep.X[idx], prep.y[idx], censored=prep.censored[idx], groups=prep.groups[idx], sample_weight=size
    )
