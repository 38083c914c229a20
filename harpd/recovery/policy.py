"""Which jobs recovery may resubmit, and with which limits: pure functions.

Eligibility (docs in etc/harpd.toml ``[recovery]``): a job is recovered when
harp-submit registered it AND either harp changed its request (the shrink may
be what killed it) or the script opted in with a ``#HARP retry`` line.  A
``#HARP retry off`` (or ``#HARP noretry``) line opts out even of the first
case.  Everything else is left alone: doubling a request the user chose
themselves, unasked, would spend their allocation on a guess.  Array and
heterogeneous jobs are never recovered (one task's limits cannot be raised
alone).

Limits (``attempts.AttemptLimits``) are in the units Slurm applies them:
``time_s`` (whole minutes, in seconds) and the memory in the option the job
used, per node (``mem_mb``, ``--mem``/``MinMemoryNode``) or per CPU
(``mem_per_cpu_mb``, ``--mem-per-cpu``/``MinMemoryCPU``), because sbatch
refuses ``--mem`` beside a script's ``#SBATCH --mem-per-cpu``.  The doubling
itself is ``harpd.recovery.escalation.next_allocation``, the one rule
``harp replay`` simulates too; this module only supplies its inputs (current
value, the user's original request, the cap) and rounds its answer to what
Slurm can express.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harp_submit.harp_lines import retry_choice
from harp_submit.units import fmt_mem, fmt_time
from harpd.protocol import Resources
from harpd.records import JobRecord, Outcome, Submission
from harpd.recovery.attempts import AttemptLimits
from harpd.recovery.escalation import next_allocation, resource_for

__all__ = ["retry_choice", "eligible", "first_limits", "next_limits", "Next"]

_PLAIN_JOB_ID = re.compile(r"^\d+$")


def eligible(job_id: str, submission: Submission | None) -> tuple[bool, str]:
    """(may recovery resubmit this job, the one-line reason)."""
    if not _PLAIN_JOB_ID.match(str(job_id)):
        return False, "array and heterogeneous jobs are not recovered"
    if submission is None:
        return False, "not submitted through harp-submit"
    job = submission.job
    if job.get("array_size"):
        return False, "array jobs are not recovered"
    choice = retry_choice(job.get("harp_lines"))
    if choice is False:
        return False, "the script opted out (#HARP retry off)"
    if choice is True:
        return True, "the script opted in (#HARP retry)"
    if submission.decision is not None and submission.decision.changes:
        return True, "harp had changed its request"
    return False, "harp did not change its request and the script has no #HARP retry line"


def _pos(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and f > 0 else None


def first_limits(rec: JobRecord, submission: Submission) -> AttemptLimits:
    """The limits the first run had, in the units recovery escalates.

    Slurm's record is the truth for what was applied (a partition default
    time when none was asked); the registered ``submitted`` resources say in
    which option memory was requested.
    """
    sub = submission.submitted
    nodes = int(_pos(rec.alloc_nodes) or _pos(rec.req_nodes) or _pos(sub.nodes) or 1)
    t = _pos(rec.req_time_s) or _pos(sub.time_s)
    mem: dict[str, int | None]
    if (per_gpu := _pos(sub.mem_per_gpu_mb)) is not None:
        mem = {"mem_per_gpu_mb": int(per_gpu)}
    elif (per_cpu := _pos(sub.mem_per_cpu_mb)) is not None:
        mem = {"mem_per_cpu_mb": int(per_cpu)}
    else:
        per_node = _pos(rec.req_mem_mb)
        per_node = per_node / nodes if per_node is not None else _pos(sub.mem_mb)
        mem = {"mem_mb": None if per_node is None else int(math.ceil(per_node - 1e-9))}
    cpus = _pos(rec.alloc_cpus) or _pos(rec.req_cpus)
    return AttemptLimits(
        time_s=None if t is None else int(round(t)),
        **mem,
        partition=rec.partition or sub.partition or submission.job.get("partition"),
        nodes=nodes,
        cpus_per_node=None if cpus is None else int(math.ceil(cpus / nodes)),
    )


@dataclass(frozen=True, slots=True)
class Next:
    """The limits for the next attempt, or why there is none (``limits`` None)."""

    limits: AttemptLimits | None
    reason: str
    resource: str | None = None


def _smallest(caps: list[tuple[float | None, str]]) -> tuple[float | None, str | None]:
    known = [(c, n) for c, n in caps if c is not None and c > 0]
    if not known:
        return None, None
    return min(known, key=lambda x: x[0])


@dataclass(frozen=True, slots=True)
class Caps:
    """What bounds a resubmission: recovery's settings and the partition the job ran in (None: no cap)."""

    max_attempts: int
    partition_max_time_s: float | None = None
    node_mem_mb: float | None = None  # the partition's memory per node
    cfg_max_time_s: float | None = None  # recovery.max_time_s
    cfg_max_mem_mb: float | None = None  # recovery.max_mem_mb
    partition: str | None = None  # named in the reason
    request_factor: float | None = None  # recovery.max_request_factor


def next_limits(outcome: Outcome, attempt: int, limits: AttemptLimits, original: Resources | None, caps: Caps) -> Next:
    """Limits after attempt ``attempt`` ended with ``outcome``; only what ran out changes.

    ``limits`` are the failed attempt's, ``original`` the user's own request
    (``Resources`` as harp-submit registered it).  Caps: the partition's
    MaxTime and ``recovery.max_time_s`` for time; the node's memory and
    ``recovery.max_mem_mb`` (both per node) for memory; and, with
    ``request_factor`` (``recovery.max_request_factor``), that many times the
    user's own request of the resource (1.0: recovery never goes past what
    the user asked for).
    """
    try:
        outcome = Outcome(outcome)
    except ValueError:
        return Next(None, f"unknown outcome {outcome!r}: not resubmitted")
    res = resource_for(outcome)
    if res is None:
        return Next(None, f"ended {outcome.value}: not caused by its limits, so not resubmitted")
    original = original or Resources()
    where = f"partition {caps.partition}" if caps.partition else "the partition"
    if res == "time":
        current = _pos(limits.time_s)
        if current is None:
            return Next(None, "ran out of time with no known time limit: not resubmitted", res)
        cap, cap_name = _smallest(
            [
                (caps.partition_max_time_s, f"{where} MaxTime"),
                (caps.cfg_max_time_s, "recovery.max_time_s"),
                _request_cap(_pos(original.time_s), caps.request_factor),
            ]
        )
        step = next_allocation(outcome, current, _pos(original.time_s), cap, attempt, caps.max_attempts)
        if step.stop or step.value is None:
            return Next(None, _explain_stop(step.reason, cap, cap_name, fmt_time) + "; not resubmitted", res)
        minutes = math.ceil(step.value / 60 - 1e-9)
        if cap is not None and minutes * 60 > cap:
            minutes = int(cap // 60)  # Slurm limits are whole minutes: stay within the cap
        if minutes * 60 <= current:
            return Next(
                None,
                f"ran out of time at {fmt_time(current)}: {cap_name} ({fmt_time(cap)}) "
                "leaves no whole minute more; not resubmitted",
                res,
            )
        new = limits.but(time_s=minutes * 60)
        return Next(
            new,
            f"{_explain_stop(step.reason, cap, cap_name, fmt_time)}: "
            f"time {fmt_time(current)} -> {fmt_time(minutes * 60)}",
            res,
        )

    # memory
    if _pos(limits.mem_per_gpu_mb):
        return Next(None, "ran out of memory requested per GPU (--mem-per-gpu): not resubmitted", res)
    key = "mem_per_cpu_mb" if _pos(limits.mem_per_cpu_mb) else "mem_mb"
    current = _pos(getattr(limits, key))
    if current is None:
        return Next(None, "ran out of memory with no known memory limit: not resubmitted", res)
    per = 1
    if key == "mem_per_cpu_mb":
        per = int(_pos(limits.cpus_per_node) or 1)
    mem_caps = [
        (None if caps.node_mem_mb is None else caps.node_mem_mb / per, "the node's memory"),
        (None if caps.cfg_max_mem_mb is None else caps.cfg_max_mem_mb / per, "recovery.max_mem_mb"),
        _request_cap(_pos(getattr(original, key)), caps.request_factor),
    ]
    cap, cap_name = _smallest(mem_caps)
    if cap is not None:
        cap = float(math.floor(cap))
    step = next_allocation(outcome, current, _pos(getattr(original, key)), cap, attempt, caps.max_attempts)
    if step.stop or step.value is None:
        return Next(None, _explain_stop(step.reason, cap, cap_name, fmt_mem) + "; not resubmitted", res)
    value = int(math.ceil(step.value - 1e-9))
    if cap is not None and value > cap:
        value = int(cap)
    if value <= current:
        return Next(None, f"ran out of memory at {fmt_mem(current)}: {cap_name} leaves no room; not resubmitted", res)
    new = limits.but(**{key: value})
    what = "memory per CPU" if key == "mem_per_cpu_mb" else "memory"
    return Next(
        new, f"{_explain_stop(step.reason, cap, cap_name, fmt_mem)}: {what} {fmt_mem(current)} -> {fmt_mem(value)}", res
    )


def _request_cap(request: float | None, factor: float | None) -> tuple[float | None, str]:
    """The cap ``recovery.max_request_factor`` puts on a resource the user asked ``request`` of."""
    if request is None or factor is None:
        return None, ""
    if factor == 1.0:
        return request, "the user's own request (recovery.max_request_factor = 1)"
    return request * factor, f"{factor:g} x the user's request (recovery.max_request_factor)"


def _explain_stop(reason: str, cap: float | None, cap_name: str | None, fmt: Callable[[float], str]) -> str:
    """escalation's stop reason, with the cap named ("the cap (180)" says little)."""
    if cap is not None and cap_name and "the cap" in reason:
        return reason.replace(f"the cap ({cap:g})", f"the cap, {cap_name} = {fmt(cap)}")
    return reason
