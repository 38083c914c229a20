"""Memory of workflow tasks replayed as Sizey measures it: harp, the baselines and the users' requests.

Two protocols walk the same tasks (docs/metrics.md, "Workflow task memory"):

* ``chronological`` (the default): every finished task with a usage and a
  runtime; each is sized from the tasks of its type that had ended by its
  start (``at="start"``: harpd's resizer re-decides a pending task each time
  a sibling finishes, ``harpd.watch.resize``) or by its submission
  (``at="submit"``), every predictor alike.  A type's first tasks, with
  nothing of their type learnt, keep the user's request under the baselines
  and get harp's prior (``workflow_prior``) as it stood at their submission
  (a task of another type ending does not re-decide them).
* ``sizey``: the paper's evaluation (Bader et al., CLUSTER 2024, code at
  github.com/dos-group/sizey): per task type, rows with usage > 0, types with
  fewer than 34 rows or any zero runtime dropped, ``train_test_split(
  test_size=0.7, random_state=seed)``, fit on the 30 %, then the 70 % in that
  shuffled order, each task's usage learnt right after it ran.  The usage is
  Nextflow's ``rss`` column as in that code (``peak_rss`` in chronological).

Every predictor sizes each task's first attempt; after a failure harp follows
its own escalation rule, the baselines their published retry rules
(``workflow_baselines``); the users' request is what the task ran with.
"""

from __future__ import annotations

import heapq
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from harpd.features.usage import usage_of
from harpd.predict.sizey_metric import Wastage
from harpd.predict.workflow_baselines import BASELINES, NODE_BYTES
from harpd.predict.workflow_harp import HarpTaskModel
from harpd.predict.workflow_prior import TypePrior
from harpd.records import Outcome
from harpd.recovery.escalation import simulate

PROTOCOLS = ("chronological", "sizey")
#: when the chronological replay decides a task: at its start (harpd re-sizes a pending task as its
#: siblings finish, ``harpd.watch.resize``), or at its submission only
DECIDE_AT = ("start", "submit")
MIN_TYPE_ROWS = 34  # the paper's code drops task types with fewer rows
TRAIN_SHARE = 0.3
MAX_RETRIES = 64  # a safety bound: every retry rule at least doubles, so this is never reached in practice
MIB = 1024.0 * 1024.0


class WorkflowReplayError(ValueError):
    """A trace that cannot be replayed this way; the message says why and what to do."""


@dataclass(slots=True)
class Task:
    """One finished workflow task: what the predictors see (type, input size, request) and what it used."""

    process: str
    input_bytes: float
    usage: float  # bytes: the usage a first attempt must reach (rss or peak_rss, by protocol)
    peak: float  # bytes: peak_rss, what the users' request is measured against
    runtime_s: float
    request: float  # bytes asked for (NaN: none)
    submit: float
    end: float
    start: float = math.nan  # when it started running (NaN: unknown, taken as its submission)
    # completed below its limit (``harpd.features.usage``): else its usage is a lower bound, never learnt
    sample: bool = True


@dataclass(slots=True)
class Result:
    protocol: str
    seed: int | None
    tasks: int
    types: int
    rows: dict[str, Wastage]
    predict_ms: list[float] = field(default_factory=list)
    seconds: float = 0.0
    decided_at: str | None = None  # chronological: "start" or "submit"

    def to_dict(self) -> dict:
        p = self.predict_ms
        return {"protocol": self.protocol, "seed": self.seed, "tasks": self.tasks, "types": self.types,
                "rows": {k: v.to_dict() for k, v in self.rows.items()},
                "predict_ms_p99": float(np.percentile(p, 99)) if p else None, "seconds": round(self.seconds, 2),
                "decided_at": self.decided_at}


def read_tasks(path: str | os.PathLike[str], protocol: str) -> list[Task]:
    """The finished tasks of a Nextflow trace (harpd.traces.nextflow), usage by protocol."""
    from harpd.traces import detect_format
    from harpd.traces.nextflow import NextflowReader, parse_size

    fmt = detect_format(path)
    if fmt != "nextflow":
        raise WorkflowReplayError(f"{path}: a {fmt} trace; workflow task memory (--protocol sizey) needs a "
                                  "Nextflow trace (`nextflow run -with-trace`)")
    out: list[Task] = []
    for row, rec in NextflowReader(path).rows():
        peak = (rec.used_mem_mb or 0.0) * MIB
        usage = peak
        if protocol == "sizey":
            if "rss" not in row:
                raise WorkflowReplayError(f"{path}: no rss column; the Sizey protocol measures tasks by "
                                          "Nextflow's rss as the paper's code does: add rss to trace.fields")
            usage = parse_size(row["rss"]) or 0.0
        start = rec.start_time if rec.start_time is not None else 0.0
        out.append(Task(process=rec.signature or "?", input_bytes=rec.input_bytes or 0.0, usage=usage,
                        peak=peak, runtime_s=rec.used_time_s or 0.0,
                        request=(rec.req_mem_mb * MIB) if rec.req_mem_mb else math.nan,
                        submit=rec.submit_time if rec.submit_time is not None else start,
                        end=rec.end_time if rec.end_time is not None else start + (rec.used_time_s or 0.0),
                        start=rec.start_time if rec.start_time is not None else math.nan,
                        sample=not getattr(usage_of(rec, "mem"), "censored", True)))
    return out


def _sizers(prior: TypePrior | None = None, kind: str = "") -> dict[str, object]:
    made: dict[str, object] = {"harp": HarpTaskModel(prior, kind)}
    made.update({name: make() for name, make in BASELINES.items()})
    return made


def _chain(name: str, sizer, task: Task, first: float | None) -> list[float]:
    """The attempts of one task under one predictor, the last one fitting."""
    y = task.usage
    if first is None:  # nothing learnt yet: the task runs as the user asked (a node without a request)
        first = task.request if task.request > 0 else NODE_BYTES
        if name != "harp":
            return _retries(first, y, lambda a: 2.0 * a)
    if name == "harp":
        req = task.request if task.request > 0 else None
        if first <= 0:
            first = req or NODE_BYTES
        ch = simulate(y, first, req, None, Outcome.OOM, max_attempts=MAX_RETRIES)
        return list(ch.allocations)
    return _retries(first, y, sizer.retry)


def _retries(first: float, y: float, retry: Callable[[float], float]) -> list[float]:
    allocs = [first]
    while allocs[-1] < y and len(allocs) < MAX_RETRIES:
        allocs.append(retry(allocs[-1]))
    if allocs[-1] < y:
        allocs.append(y)
    return [max(a, 0.0) for a in allocs]


def _size(rows: dict[str, Wastage], sizers: dict[str, object], task: Task, timings: list[float]) -> None:
    for name, sizer in sizers.items():
        t0 = time.perf_counter()
        if name == "harp":  # a type's prior is the one at submission: only a sibling's end re-decides a task
            first = sizer.first(task.input_bytes, task.request, task.submit)  # type: ignore[attr-defined]
            timings.append((time.perf_counter() - t0) * 1000.0)
        else:
            first = sizer.first(task.input_bytes, task.request)  # type: ignore[attr-defined]
        rows[name].add(_chain(name, sizer, task, first), task.usage, task.runtime_s)
    req = task.request if task.request > 0 else task.peak
    rows["request"].add([max(req, task.peak)], task.peak, task.runtime_s)


def _learn(sizers: dict[str, object], task: Task) -> None:
    if not task.sample:  # a failed or killed task's usage is a lower bound: no sizer learns it as a need
        return
    for name, sizer in sizers.items():
        if name == "harp":
            sizer.learn(task.input_bytes, task.usage, task.runtime_s, task.request,  # type: ignore[attr-defined]
                        task.end)
        else:
            sizer.learn(task.input_bytes, task.usage, task.runtime_s)  # type: ignore[attr-defined]


def _empty_rows() -> dict[str, Wastage]:
    return {name: Wastage() for name in ("harp", *BASELINES, "request")}


def sizey_split(tasks: list[Task], seed: int) -> Iterator[tuple[str, list[Task], list[Task]]]:
    """(type, training 30 %, test 70 % in the shuffled order) per kept type, types in order of appearance."""
    from sklearn.model_selection import train_test_split

    by: dict[str, list[Task]] = {}
    for t in tasks:
        by.setdefault(t.process, []).append(t)
    for proc, rows in by.items():
        rows = [t for t in rows if t.usage > 0]
        if len(rows) < MIN_TYPE_ROWS or any(t.runtime_s == 0 for t in rows):
            continue
        train, test = train_test_split(np.arange(len(rows)), test_size=1.0 - TRAIN_SHARE, random_state=seed)
        yield proc, [rows[i] for i in train], [rows[i] for i in test]


def run_sizey(tasks: list[Task], seed: int) -> Result:
    t0 = time.perf_counter()
    rows, timings = _empty_rows(), []
    n = types = 0
    for _proc, train, test in sizey_split(tasks, seed):
        types += 1
        sizers = _sizers()
        cols = [np.array([getattr(t, f) for t in train]) for f in ("input_bytes", "usage", "runtime_s")]
        for name, sizer in sizers.items():
            if name == "harp":
                sizer.fit(*cols, np.array([t.request for t in train]))  # type: ignore[attr-defined]
            else:
                sizer.fit(*cols)  # type: ignore[attr-defined]
        for task in test:
            _size(rows, sizers, task, timings)
            _learn(sizers, task)
            n += 1
    if not n:
        raise WorkflowReplayError(f"no task type has {MIN_TYPE_ROWS} or more usable rows (usage > 0, no zero "
                                  "runtime): the Sizey protocol has nothing to test")
    return Result("sizey", seed, n, types, rows, timings, time.perf_counter() - t0)


def decided_at(task: Task, at: str) -> float:
    """When a task's first allocation is decided: its submission, or its start (re-decided while pending)."""
    return task.start if at == "start" and task.start == task.start else task.submit


def run_chronological(tasks: list[Task], at: str = "start") -> Result:
    """Every predictor sizes each task from the tasks of its type that had ended by ``at`` (DECIDE_AT)."""
    if at not in DECIDE_AT:
        raise WorkflowReplayError(f"unknown decision time {at!r}; use one of {', '.join(DECIDE_AT)}")
    t0 = time.perf_counter()
    rows, timings = _empty_rows(), []
    order = sorted((t for t in tasks if t.usage > 0 and t.runtime_s > 0), key=lambda t: decided_at(t, at))
    if not order:
        raise WorkflowReplayError("no finished task with a memory usage and a runtime: nothing to replay")
    sizers: dict[str, dict[str, object]] = {}
    pending: list[tuple[float, int, Task]] = []
    prior = TypePrior()  # harp's only: what the baselines publish sizes a type from its own runs
    for i, task in enumerate(order):
        while pending and pending[0][0] <= decided_at(task, at):
            _, _, done = heapq.heappop(pending)
            _learn(sizers[done.process], done)
        own = sizers.setdefault(task.process, _sizers(prior, task.process))
        _size(rows, own, task, timings)
        heapq.heappush(pending, (task.end, i, task))
    return Result("chronological", None, len(order), len(sizers), rows, timings, time.perf_counter() - t0, at)


def replay_workflow(path: str | os.PathLike[str], protocol: str = "chronological", seed: int = 1996,
                    at: str = "start") -> Result:
    """Sizey's wastage of harp, the baselines and the users' requests on one Nextflow trace."""
    if protocol not in PROTOCOLS:
        raise WorkflowReplayError(f"unknown protocol {protocol!r}; use one of {', '.join(PROTOCOLS)}")
    tasks = read_tasks(path, protocol)
    return run_sizey(tasks, seed) if protocol == "sizey" else run_chronological(tasks, at)
