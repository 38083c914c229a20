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

The ``harp`` row is harpd's own decision (one decision path): a
history-only live predictor (``harpd.predict.live.ModelPredictor``) is
handed each finished task as the ingest poller hands it a stored outcome
(``learn``), and asked ``decide`` for each task's submission with the
replay's clock; its memory change is the first attempt, and recovery's
escalation (``max_attempts`` of harpd's defaults, the last at the request)
the next ones.  A task whose usage passes its own request goes on doubling
past harpd's attempts (what the user's own retries would do), counted as
failures all the same.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np

from harpd.evaluate.sizey_metric import Wastage, WastageFigures
from harpd.evaluate.workflow_baselines import BASELINES, NODE_BYTES, Baseline
from harpd.features.usage import usage_of
from harpd.features.workflow import WORKFLOW_PREFIX
from harpd.records import JobRecord, Outcome
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


class WorkflowFigures(TypedDict):
    """``Result.to_dict``: the workflow replay's figures, as ``harp replay`` prints them in JSON."""

    protocol: str
    seed: int | None
    tasks: int
    types: int
    rows: dict[str, WastageFigures]  # predictor -> its row
    predict_ms_p99: float | None
    seconds: float
    decided_at: str | None  # chronological: "start" or "submit"


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
    # harpd's first allocation (bytes; None: the request kept) per task, in the order the rows add them
    harp_first: list[float | None] = field(default_factory=list)

    def to_dict(self) -> WorkflowFigures:
        p = self.predict_ms
        return WorkflowFigures(
            protocol=self.protocol,
            seed=self.seed,
            tasks=self.tasks,
            types=self.types,
            rows={k: v.to_dict() for k, v in self.rows.items()},
            predict_ms_p99=float(np.percentile(p, 99)) if p else None,
            seconds=round(self.seconds, 2),
            decided_at=self.decided_at,
        )


def read_tasks(path: str | os.PathLike[str], protocol: str) -> list[Task]:
    """The finished tasks of a Nextflow trace (harpd.traces.nextflow), usage by protocol."""
    from harpd.traces import detect_format
    from harpd.traces.nextflow import NextflowReader, parse_size

    fmt = detect_format(path)
    if fmt != "nextflow":
        raise WorkflowReplayError(
            f"{path}: a {fmt} trace; workflow task memory (--protocol sizey) needs a "
            "Nextflow trace (`nextflow run -with-trace`)"
        )
    out: list[Task] = []
    for row, rec in NextflowReader(path).rows():
        peak = (rec.used_mem_mb or 0.0) * MIB
        usage = peak
        if protocol == "sizey":
            if "rss" not in row:
                raise WorkflowReplayError(
                    f"{path}: no rss column; the Sizey protocol measures tasks by "
                    "Nextflow's rss as the paper's code does: add rss to trace.fields"
                )
            usage = parse_size(row["rss"]) or 0.0
        start = rec.start_time if rec.start_time is not None else 0.0
        out.append(
            Task(
                process=rec.signature or "?",
                input_bytes=rec.input_bytes or 0.0,
                usage=usage,
                peak=peak,
                runtime_s=rec.used_time_s or 0.0,
                request=(rec.req_mem_mb * MIB) if rec.req_mem_mb else math.nan,
                submit=rec.submit_time if rec.submit_time is not None else start,
                end=rec.end_time if rec.end_time is not None else start + (rec.used_time_s or 0.0),
                start=rec.start_time if rec.start_time is not None else math.nan,
                sample=not getattr(usage_of(rec, "mem"), "censored", True),
            )
        )
    return out


class LiveHarp:
    """harpd's live predictor as one replay sizer: a task's first allocation is what ``decide`` answers.

    One predictor per history (a chronological replay's, one Sizey type's);
    ``sizer(kind)`` is its view for one task type (``kind``: the process).
    """

    name = "harp"
    USER, UID = "replay", 0

    def __init__(self, settings=None) -> None:
        from harpd.config import HarpSettings
        from harpd.predict.live import ModelPredictor

        self.settings = settings if settings is not None else HarpSettings()
        self.predictor = ModelPredictor.history_only(self.settings, resources=("mem",))
        self.max_attempts = int(self.settings.recovery.max_attempts)
        self._n = 0

    def sizer(self, kind: str) -> _LiveType:
        return _LiveType(self, kind)

    def job(self, kind: str, input_bytes: float, request: float):
        """The submission harp-submit would send for a task of ``kind`` (memory request in bytes, NaN: none)."""
        from harpd.protocol import JobRequest, Resources

        mem = int(math.ceil(request / MIB)) if not math.isnan(request) and request > 0 else None
        return JobRequest(
            signature=WORKFLOW_PREFIX + kind,
            job_name=kind,
            request=Resources(mem_mb=mem),
            input_bytes=int(input_bytes) if input_bytes and input_bytes > 0 else None,
        )

    def record(self, kind: str, task: Task, ran_out_at: float | None = None) -> JobRecord:
        """A finished task as the store holds it (MiB, seconds); a non-sample as a failed run.

        ``ran_out_at``: an attempt of it harp gave that many bytes and that ran out of them (OUT_OF_MEMORY).
        """
        self._n += 1
        req: float | None
        if ran_out_at is not None:
            outcome, req, used = Outcome.OOM, ran_out_at / MIB, ran_out_at / MIB
        else:
            outcome = Outcome.COMPLETED if task.sample else Outcome.FAILED
            req = task.request / MIB if task.request == task.request and task.request > 0 else None
            used = task.usage / MIB
        return JobRecord(
            job_id=str(self._n),
            source="replay",
            user=self.USER,
            job_name=kind,
            signature=WORKFLOW_PREFIX + kind,
            submit_time=task.submit,
            start_time=task.start,
            end_time=task.end,
            outcome=outcome,
            req_mem_mb=req,
            used_mem_mb=used,
            used_time_s=task.runtime_s,
            censored_mem=ran_out_at is not None,
            input_bytes=task.input_bytes,
        )

    def first(self, kind: str, input_bytes: float, request: float, now: float | None = None) -> float | None:
        """The first allocation in bytes harpd gives this task, or None where it keeps the request."""
        from harp_submit.units import parse_mem

        d = self.predictor.decide(self.job(kind, input_bytes, request), self.USER, self.UID, now=now)
        for ch in d.changes:
            if ch.option == "mem":
                return float(parse_mem(ch.value)) * MIB
        return None


class _LiveType:
    """``LiveHarp`` for one task type, with the sizer interface of the baselines."""

    name = "harp"

    def __init__(self, live: LiveHarp, kind: str) -> None:
        self.live, self.kind = live, kind

    def fit(self, tasks: list[Task]) -> None:
        self.live.predictor.learn([self.live.record(self.kind, t) for t in tasks])

    def first(self, input_bytes: float, request: float, now: float | None = None) -> float | None:
        return self.live.first(self.kind, input_bytes, request, now)

    def learn(self, task: Task, ran_out: list[float] | None = None) -> None:
        """The task's outcome, after those of its attempts that ran out (``ran_out``: their allocations)."""
        failed = [self.live.record(self.kind, task, a) for a in ran_out or ()]
        self.live.predictor.learn([*failed, self.live.record(self.kind, task)])


@dataclass(slots=True)
class _Sizers:
    """The predictors of one task type: harpd's (``harp``) and the baselines, by name in the rows' order."""

    harp: _LiveType
    baselines: dict[str, Baseline]


def _sizers(live: LiveHarp, kind: str) -> _Sizers:
    return _Sizers(live.sizer(kind), {name: make() for name, make in BASELINES.items()})


def _harp_chain(sizer: _LiveType, task: Task, first: float | None) -> list[float]:
    """harpd's attempts of one task (recovery's escalation), the last one fitting."""
    y = task.usage
    req = task.request if task.request > 0 else None
    if first is None:  # nothing learnt yet: the task runs as the user asked (a node without a request)
        first = task.request if task.request > 0 else NODE_BYTES
    if first <= 0:
        first = req or NODE_BYTES
    ch = simulate(y, first, req, None, Outcome.OOM, max_attempts=sizer.live.max_attempts)
    allocs = list(ch.allocations)
    return allocs if ch.fitted else allocs[:-1] + _retries(allocs[-1], y, lambda a: 2.0 * a)


def _baseline_chain(sizer: Baseline, task: Task, first: float | None) -> list[float]:
    """A baseline's attempts of one task under its own retry rule, the last one fitting."""
    if first is None:  # nothing learnt yet: the task runs as the user asked (a node without a request)
        return _retries(task.request if task.request > 0 else NODE_BYTES, task.usage, lambda a: 2.0 * a)
    return _retries(first, task.usage, sizer.retry)


def _retries(first: float, y: float, retry: Callable[[float], float]) -> list[float]:
    allocs = [first]
    while allocs[-1] < y and len(allocs) < MAX_RETRIES:
        allocs.append(retry(allocs[-1]))
    if allocs[-1] < y:
        allocs.append(y)
    return [max(a, 0.0) for a in allocs]


def _harp_first(sizer: _LiveType, task: Task, timings: list[float], now: float | None) -> float | None:
    """harpd's decision for ``task`` at ``now`` (the replay's clock), timed."""
    t0 = time.perf_counter()
    first = sizer.first(task.input_bytes, task.request, now)
    timings.append((time.perf_counter() - t0) * 1000.0)
    return first


def _size(rows: dict[str, Wastage], sizers: _Sizers, task: Task, harp_first: float | None) -> list[float]:
    """Every row's attempts for ``task``; ``harp_first``: harpd's first allocation, decided by the caller.

    Returns harp's attempts that ran out (their allocations): harpd is handed
    their outcomes as it is the task's (``_learn``).
    """
    chain = _harp_chain(sizers.harp, task, harp_first)
    rows["harp"].add(chain, task.usage, task.runtime_s)
    ran_out = [a for a in chain if a < task.usage]
    for name, sizer in sizers.baselines.items():
        first = sizer.first(task.input_bytes, task.request)
        rows[name].add(_baseline_chain(sizer, task, first), task.usage, task.runtime_s)
    req = task.request if task.request > 0 else task.peak
    rows["request"].add([max(req, task.peak)], task.peak, task.runtime_s)
    return ran_out


def _learn(sizers: _Sizers, task: Task, ran_out: list[float] | None = None) -> None:
    sizers.harp.learn(task, ran_out)  # harpd is handed every outcome, its attempts' that ran out included
    if not task.sample:  # a failed or killed task's usage is a lower bound: no sizer learns it as a need
        return
    for sizer in sizers.baselines.values():
        sizer.learn(task.input_bytes, task.usage, task.runtime_s)


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


def run_sizey(tasks: list[Task], seed: int, settings=None) -> Result:
    t0 = time.perf_counter()
    rows, timings, decided = _empty_rows(), list[float](), list[float | None]()
    n = types = 0
    for proc, train, test in sizey_split(tasks, seed):
        types += 1
        sizers = _sizers(LiveHarp(settings), proc)  # a fresh harpd per type: the paper's per-type protocol
        cols = [np.array([getattr(t, f) for t in train]) for f in ("input_bytes", "usage", "runtime_s")]
        sizers.harp.fit(train)
        for sizer in sizers.baselines.values():
            sizer.fit(*cols)
        for task in test:
            first = _harp_first(sizers.harp, task, timings, None)
            decided.append(first)
            _learn(sizers, task, _size(rows, sizers, task, first))
            n += 1
    if not n:
        raise WorkflowReplayError(
            f"no task type has {MIN_TYPE_ROWS} or more usable rows (usage > 0, no zero "
            "runtime): the Sizey protocol has nothing to test"
        )
    return Result("sizey", seed, n, types, rows, timings, time.perf_counter() - t0, harp_first=decided)


def decided_at(task: Task, at: str) -> float:
    """When a task's first allocation is decided: its submission, or its start (re-decided while pending)."""
    return task.start if at == "start" and task.start == task.start else task.submit


def run_chronological(tasks: list[Task], at: str = "start", settings=None) -> Result:
    """Every predictor sizes each task from the tasks of its type that had ended by ``at`` (DECIDE_AT).

    One harpd for the whole trace, walked in time order: ends (learnt), then
    submissions (decided), then starts.  Decided at the start, harp's answer
    is the one harpd's resizer would leave: re-decided at the start when a
    sibling ended while the task was pending (``harpd.watch.resize`` re-decides
    a signature's pending jobs on its outcomes), else the one at submission
    (another type's end re-decides nothing).
    """
    if at not in DECIDE_AT:
        raise WorkflowReplayError(f"unknown decision time {at!r}; use one of {', '.join(DECIDE_AT)}")
    t0 = time.perf_counter()
    rows, timings, decided = _empty_rows(), list[float](), list[float | None]()
    order = [t for t in tasks if t.usage > 0 and t.runtime_s > 0]
    if not order:
        raise WorkflowReplayError("no finished task with a memory usage and a runtime: nothing to replay")
    END, SUBMIT, DECIDE = 0, 1, 2  # at one instant: what ended is learnt before anything is decided
    events = []
    for i, t in enumerate(order):
        events += [(t.end, END, i), (t.submit, SUBMIT, i), (max(decided_at(t, at), t.submit), DECIDE, i)]
    events.sort()
    live = LiveHarp(settings)
    sizers: dict[str, _Sizers] = {}
    ended: dict[str, int] = {}  # per type, its tasks ended so far
    at_submit: dict[int, tuple[float | None, int]] = {}  # harp's decision at submission, and its siblings ended then
    ran_out: dict[int, list[float]] = {}  # harp's attempts of a started task that ran out, learnt at its end
    for when, kind, i in events:
        task = order[i]
        own = sizers.get(task.process)
        if own is None:
            own = sizers[task.process] = _sizers(live, task.process)
        if kind == END:
            _learn(own, task, ran_out.pop(i, None))
            ended[task.process] = ended.get(task.process, 0) + 1
        elif kind == SUBMIT:
            at_submit[i] = (_harp_first(own.harp, task, timings, when), ended.get(task.process, 0))
        else:
            first, seen = at_submit.pop(i)
            if ended.get(task.process, 0) != seen:  # a sibling ended while it was pending: the resizer's answer
                first = _harp_first(own.harp, task, timings, when)
            decided.append(first)
            ran_out[i] = _size(rows, own, task, first)
    return Result(
        "chronological", None, len(order), len(sizers), rows, timings, time.perf_counter() - t0, at, harp_first=decided
    )


def replay_workflow(
    path: str | os.PathLike[str], protocol: str = "chronological", seed: int = 1996, at: str = "start"
) -> Result:
    """Sizey's wastage of harp, the baselines and the users' requests on one Nextflow trace."""
    if protocol not in PROTOCOLS:
        raise WorkflowReplayError(f"unknown protocol {protocol!r}; use one of {', '.join(PROTOCOLS)}")
    tasks = read_tasks(path, protocol)
    return run_sizey(tasks, seed) if protocol == "sizey" else run_chronological(tasks, at)
