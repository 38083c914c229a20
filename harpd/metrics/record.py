"""What the instrumented call sites call: one line each, bounded labels only.

Each function takes what its caller already has (a refusal's kind, a
decision and the request it answers, an extension's step) and maps it onto
the fixed label sets of ``registry``: anything unforeseen becomes ``other``,
so a new refusal kind or reason wording adds to a count, never a series.  No
job id, user name or path is ever a label.  None of these raise: a metric
must never cost a request its answer.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from harp_submit.units import parse_mem, parse_time
from harpd.metrics import registry as r
from harpd.metrics.state import polled as _polled
from harpd.protocol import Decision, JobRequest

log = logging.getLogger("harpd.metrics")

__all__ = [
    "decision",
    "decision_refused",
    "extension",
    "recovery",
    "refused",
    "request_refused",
    "predict_timer",
    "watch_tick",
    "watch_timing",
    "poll",
    "reason_class",
]

F = TypeVar("F", bound=Callable[..., Any])

#: a decision's change options, by the resource they size
_RESOURCE_OF_OPTION = {
    "time": "time",
    "mem": "mem",
    "mem-per-cpu": "mem",
    "mem-per-gpu": "mem",
    "cpus-per-task": "cpus",
    "gres": "gpus",
    "gpus": "gpus",
    "partition": "layout",
    "nodes": "layout",
    "ntasks-per-node": "layout",
}
#: the explanation's keys, by resource (live.py explains cores under "cores")
_EXPLAIN_KEY = {"time": "time", "mem": "mem", "cpus": "cores"}

#: words of a "kept" reason (harpd.predict: live, allocation, kill_cost, time_options, restore) -> class
_KEPT_WORDS = (
    ("no trained model", "no_model"),
    ("cold start", "cold_start"),
    ("no usage recorded", "cold_start"),
    ("no run of this task type yet", "cold_start"),
    ("hit its limit", "restored"),
    ("did not complete", "restored"),
    ("reaches the request", "near_request"),
    ("of the request: kept", "near_request"),
    ("same as the request", "near_request"),
    ("floor is above the request", "near_request"),
    ("above the request; raising is off", "near_request"),
    ("request to size", "no_request"),
    ("no confident bound", "no_model"),
    ("its request stands", "restored"),
    ("per-user budget", "user_budget"),
    ("--deadline", "options"),
    ("--signal", "options"),
    ("--time-min", "options"),
    ("shrinking is off", "policy"),
    ("allow_shrink", "policy"),
    ("hard_cut_gain", "policy"),
    ("one cpu asked", "policy"),
    ("prediction failed", "error"),
    ("store unavailable", "error"),
)

#: RefusalLog kinds (harpd.daemon.server) and the handlers' own refusals -> reason label
_REFUSAL_OF_KIND = {
    "busy": "busy",
    "unauthenticated limit": "quota",
    "waiting limit": "quota",
    "quota": "quota",
    "no request in time": "no_credential",
    "credential refused": "bad_credential",
    "request too large": "too_large",
    "not owner": "not_owner",
    "not admin": "not_admin",
    "metrics peer": "metrics_peer",
}


def _bounded(value: str, allowed: tuple[str, ...]) -> str:
    return value if value in allowed else r.OTHER


def _safe(fn: F) -> F:
    """A metric that fails logs at debug level and lets the caller go on."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - never the caller's problem
            log.debug("metric %s not recorded: %s", fn.__name__, exc)
            return None

    return wrapper  # type: ignore[return-value]


def reason_class(reason: str | None) -> str:
    """A "kept" explanation's class (``registry.DECISION_REASONS``), from its words; ``other`` if none fits."""
    text = (reason or "").lower()
    for words, cls in _KEPT_WORDS:
        if words in text:
            return cls
    return r.OTHER


def _why_kept(explain: dict[str, Any], resource: str) -> str:
    ex = explain.get(_EXPLAIN_KEY.get(resource, resource))
    reason = ex.get("reason") if isinstance(ex, dict) else None
    return reason_class(reason if reason else explain.get("reason"))


@_safe
def decision(job: JobRequest, d: Decision) -> None:
    """One decision harpd answered: per resource changed or kept (and why), plus what it took off."""
    changed: dict[str, bool] = {}
    for c in d.changes:
        res = _RESOURCE_OF_OPTION.get(c.option, "layout")
        changed[res] = True
    explain = d.explain if isinstance(d.explain, dict) else {}
    for res in ("time", "mem", "cpus"):
        if changed.get(res):
            ex = explain.get(_EXPLAIN_KEY[res])
            by_model = isinstance(ex, dict) and bool(ex.get("model"))
            r.DECISIONS.labels(res, "changed", "model" if by_model else "rule").inc()
        else:
            r.DECISIONS.labels(res, "kept", _why_kept(explain, res)).inc()
    for res in ("gpus", "layout"):
        if changed.get(res):
            r.DECISIONS.labels(res, "changed", "rule").inc()
    _taken_off(job, d)


@_safe
def decision_refused(why: str) -> None:
    """harpd could not decide (the predictor failed, its answer was invalid, the store is down)."""
    r.DECISIONS.labels("all", "refused", "error").inc()


def _cores(job: JobRequest, changes: dict[str, str]) -> int:
    rq = job.request
    per_task = int(changes["cpus-per-task"]) if "cpus-per-task" in changes else (rq.cpus_per_task or 1)
    return max(1, per_task) * max(1, rq.ntasks or 1)


def _mem_mb(job: JobRequest, changes: dict[str, str], cores: int) -> float | None:
    """The job's memory in total (per node x nodes, or per CPU x cores), after ``changes``."""
    rq = job.request
    nodes = max(1, rq.nodes or 1)
    if "mem" in changes:
        return float(parse_mem(changes["mem"])) * nodes
    if "mem-per-cpu" in changes:
        return float(parse_mem(changes["mem-per-cpu"])) * cores
    if rq.mem_mb:
        return float(rq.mem_mb) * nodes
    if rq.mem_per_cpu_mb:
        return float(rq.mem_per_cpu_mb) * cores
    return None


def _taken_off(job: JobRequest, d: Decision) -> None:
    """Lowered limits, and the core-hours and GB-hours asked minus those given (a raise takes nothing off)."""
    changes = {c.option: c.value for c in d.changes}
    if not changes:
        return
    rq = job.request
    before_s = rq.time_s
    after_s = parse_time(changes["time"]) if "time" in changes else before_s
    if "time" in changes and before_s and after_s and after_s < before_s:
        r.LIMITS_LOWERED.labels("time").inc()
    cores_before, cores_after = _cores(job, {}), _cores(job, changes)
    if cores_after < cores_before:
        r.LIMITS_LOWERED.labels("cpus").inc()
    mem_before, mem_after = _mem_mb(job, {}, cores_before), _mem_mb(job, changes, cores_after)
    if mem_before and mem_after is not None and mem_after < mem_before:
        r.LIMITS_LOWERED.labels("mem").inc()
    if not before_s or not after_s:
        return  # no time asked: no hours to count
    core_h = (cores_before * before_s - cores_after * after_s) / 3600.0
    if core_h > 0:
        r.CORE_HOURS_TAKEN_OFF.inc(core_h)
    if mem_before and mem_after is not None:
        gb_h = (mem_before * before_s - mem_after * after_s) / 1024.0 / 3600.0
        if gb_h > 0:
            r.GB_HOURS_TAKEN_OFF.inc(gb_h)


@_safe
def extension(outcome: str, reason: str = "near_limit") -> None:
    """An extension made, or refused (``slurm_refused``, ``job_ended``, ``left_alone``)."""
    r.EXTENSIONS.labels(_bounded(outcome, r.EXTENSION_OUTCOMES), _bounded(reason, r.EXTENSION_REASONS)).inc()


@_safe
def recovery(outcome: str) -> None:
    """A recovery step: requeued, resubmitted, gave up, or left to the workflow manager."""
    r.RECOVERIES.labels(_bounded(outcome, r.RECOVERY_OUTCOMES)).inc()


@_safe
def refused(kind: str) -> None:
    """A refusal of ``kind`` (RefusalLog's words, or a handler's), counted under its bounded reason."""
    r.REFUSALS.labels(_REFUSAL_OF_KIND.get(kind, r.OTHER)).inc()


@_safe
def request_refused(why: str) -> None:
    """A registration or progress report refused (``why``: its answer): not the owner's, too many, or bad."""
    text = why.lower()
    if "not yours" in text or "not issued to the job's owner" in text:
        r.REFUSALS.labels("not_owner").inc()
    elif "report less often" in text:
        r.REFUSALS.labels("quota").inc()
    else:
        r.REFUSALS.labels("bad_request").inc()


@contextmanager
def predict_timer() -> Iterator[None]:
    """Time one predict answer into the latency histogram."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        r.PREDICT_LATENCY.observe(time.perf_counter() - t0)


@_safe
def watch_tick(seconds: float) -> None:
    """One watcher tick took ``seconds`` (the watcher's own measure, the one health shows)."""
    r.WATCH_TICK.observe(float(seconds))


@_safe
def watch_timing(lead_s: float, interval_s: float) -> None:
    """The watcher's configured lead (watch.margin_s) and tick interval, for the dashboard to compare."""
    r.WATCH_LEAD.set(float(lead_s))
    r.WATCH_INTERVAL.set(float(interval_s))


@_safe
def poll(ok: bool) -> None:
    """One sacct poll of the ingest poller; a good one resets its lag."""
    r.POLLS.labels("ok" if ok else "failed").inc()
    if ok:
        _polled()
