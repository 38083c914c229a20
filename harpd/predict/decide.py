"""The decision kernel: from one resource's bound to the change harp asks for, the same for harpd and the replay.

``ModelPredictor`` (``harpd.predict.live``) keeps the state (histories, the
champions, locks) and gathers what it sees at the moment of a decision into a
``KernelInput``; ``harp replay`` (``harpd.replay.engine``) builds the same
record from its prepared trace for each job.  Both then call ``decide`` (or
``allocation``, its numbers without the words), so every rule after the bound
applies identically in both: the guard rails (``allocation.allocate``), the
hard-limit kill-cost gate (``kill_cost.worth_cutting``), a workflow retry's
floor, the cores slowdown, ``--time-min``/``--signal`` (``time_options.fit_time``)
and the rounding to what sbatch takes (whole minutes; whole MiB per node or per
CPU).  What differs between time and memory lives in one rule object each
(``TIME``, ``MEM``) instead of branches on the resource's name.

Pure: no locks, no store, no history; the same input gives the same output.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from harp_submit.units import format_mem, format_time
from harpd.predict.allocation import BOUND, FLOOR, REQUEST_FLOOR, Guard, allocate
from harpd.predict.kill_cost import why_kept, worth_cutting
from harpd.predict.queue_policy import weigh
from harpd.predict.queue_view import QueueView
from harpd.predict.time_options import SUBMITIT_KEPT, fit_time

__all__ = [
    "MEM",
    "TIME",
    "Allocation",
    "BoundSource",
    "Explanation",
    "JobShape",
    "KernelInput",
    "KernelOutput",
    "Proposal",
    "ResourceRule",
    "RetryLeast",
    "allocation",
    "decide",
    "rule_of",
]

ROUNDED_KEPT = "rounded bound reaches the request: kept"


@dataclass(frozen=True, slots=True)
class JobShape:
    """What of the request the rounding and sbatch's time options read (seconds, MiB)."""

    time_s: float | None = None
    time_min_s: int | None = None  # --time-min
    signal_s: int | None = None  # --signal's N seconds
    mem_mb: int | None = None  # --mem, per node
    mem_per_cpu_mb: int | None = None  # --mem-per-cpu
    cores: int = 1  # CPUs asked (cpus per task x tasks)
    nodes: int = 1
    given: int | None = None  # the CPUs per task harp gives (a lowered --cpus-per-task), None: as asked
    commands: tuple[str, ...] | None = None  # the job's commands (a submitit job keeps its time)


@dataclass(frozen=True, slots=True)
class BoundSource:
    """Where the bound came from, in the decision's words (the replay leaves it empty)."""

    model: str | None = None  # the champion's name; None: the history or task rule
    reason: str = ""  # the reason's opening words ("harp-gbm: time bound from 12 runs of this program")
    extra: Mapping[str, Any] = field(default_factory=dict)  # the rule's own explanation (rule, source, soft policy)
    floor_key: str | None = None  # the setting that set the floor, when not the resource's own


@dataclass(frozen=True, slots=True)
class RetryLeast:
    """A workflow retry's or a task's failures' floor for this resource (``retry_floor``)."""

    amount: float
    reason: str


@dataclass(frozen=True, slots=True)
class KernelInput:
    """Everything one resource's decision reads, as harpd sees it at that moment."""

    request: float | None  # the request of this resource (s; MiB in total), None: not asked
    log_bound: float  # the bound: log(need / request) with a request, log(need) without
    n_history: int  # finished runs of this program
    limit: float | None  # the partition's (or recovery's) limit of this resource for this job
    guard: Guard
    shape: JobShape = field(default_factory=JobShape)
    theta: float | None = None  # a calibrated model's own leave-alone ratio
    prior: bool = False  # the bound is its own cold start (a task type's prior): no min_history
    soft: bool = False  # harpd extends this job's time up to the request (soft limits)
    hard_cut_gain: float | None = None  # hard limits: the kill-cost gate's gain (None: not gated)
    p_kill: float = 0.05  # the chance a cut is too short (predict.alpha_time), for the gate
    floor_time_s: int = 60  # predict.floor_time_s (--signal's room)
    retry: RetryLeast | None = None
    slowdown: float = 1.0  # how much longer the cores harp gives make the run (time only)
    source: BoundSource = field(default_factory=BoundSource)
    # the queue at this moment; given (soft limits), the queue rule weighs the cut (``queue_policy``)
    queue: QueueView | None = None


@dataclass(frozen=True, slots=True)
class Settled:
    """A value rounded to what sbatch takes, in the option it takes it as, or why the request is kept."""

    amount: float | None  # in the resource's unit, in total (None: kept)
    shown: int = 0  # the option's own number (seconds, MiB per node or per CPU)
    option: str = ""
    old: str | None = None
    moved: str | None = None  # what sbatch's time options moved (``fit_time``)
    kept: str | None = None


@dataclass(frozen=True, slots=True)
class Allocation:
    """The kernel's numbers: the amount harp asks (None: the request stands) and what set it."""

    amount: float | None
    why: str  # ``allocate``'s words: the bound or the rail that set the value, or why kept
    value: float | None = None  # the value before rounding (after the gate, retry floor and slowdown)
    at_least: str | None = None  # the retry floor that set the value
    settled: Settled | None = None


@dataclass(frozen=True, slots=True)
class Explanation:
    """One resource's ``--harp-explain`` entry."""

    model: str | None
    n_history: int
    bound_ratio: float | None
    leave_alone_ratio: float | None
    reason: str
    extra: Mapping[str, Any] = field(default_factory=dict)
    time_options: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The wire form (``Decision.explain[resource]``)."""
        out: dict[str, Any] = {
            "model": self.model,
            "n_history": self.n_history,
            "bound_ratio": self.bound_ratio,
            "leave_alone_ratio": self.leave_alone_ratio,
            "reason": self.reason,
            **self.extra,
        }
        if self.time_options is not None:
            out["time_options"] = self.time_options
        out["reason"] = self.reason
        return out


@dataclass(frozen=True, slots=True)
class Proposal:
    """The change harp asks sbatch for: ``--option=value`` in place of ``old``."""

    option: str
    value: str
    old: str | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"option": self.option, "value": self.value, "old": self.old, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class KernelOutput:
    change: Proposal | None
    allocation: Allocation
    explanation: Explanation


class ResourceRule(Protocol):
    """What differs between resources: the limit, the gate, the floors, the rounding, the words."""

    name: str
    words: str  # the resource in a sentence
    floor_setting: str

    def limit_of(self, limits: Any, recovery: Any, nodes: int) -> float | None: ...
    def least(self, retry: Any) -> float | None: ...
    def gate(self, inp: KernelInput, value: float) -> str | None: ...
    def stretch(self, value: float, slow: float) -> float: ...
    def settle(self, value: float, inp: KernelInput) -> Settled: ...
    def amount(self, v: float) -> str: ...


class TimeRule:
    """Time: the kill-cost gate under hard limits, the cores slowdown, ``fit_time``, whole minutes."""

    name = "time"
    words = "time"
    floor_setting = "predict.floor_time_s"

    @staticmethod
    def limit_of(limits: Any, recovery: Any, nodes: int) -> float | None:
        """The partition's time limit (``protocol.Limits``), else recovery's (``recovery.max_time_s``)."""
        return limits.max_time_s or recovery.max_time_s

    @staticmethod
    def least(retry: Any) -> float | None:
        """A retry floor's time (``retry_floor.Floor``)."""
        return retry.time_s

    @staticmethod
    def gate(inp: KernelInput, value: float) -> str | None:
        """Why a hard cut is not worth its kill risk (``kill_cost``), or None."""
        if inp.soft or inp.hard_cut_gain is None or not inp.request:
            return None
        if worth_cutting(inp.request, value, inp.p_kill, inp.hard_cut_gain):
            return None
        return why_kept(inp.hard_cut_gain)

    @staticmethod
    def stretch(value: float, slow: float) -> float:
        return value * slow if slow > 1.0 else value

    @staticmethod
    def settle(value: float, inp: KernelInput) -> Settled:
        """``--time-min``/``--signal`` kept meaningful, then whole minutes (sbatch rounds to them anyway)."""
        shape, req = inp.shape, inp.request
        if shape.signal_s or shape.time_min_s:
            value, moved = fit_time(value, shape, inp.floor_time_s, shape.commands)
        else:
            moved = None
        secs = int(math.ceil(value / 60.0) * 60)
        if req and secs >= req:
            return Settled(None, moved=moved, kept=moved if moved == SUBMITIT_KEPT else ROUNDED_KEPT)
        return Settled(float(secs), secs, "time", format_time(int(req)) if req else None, moved)

    @staticmethod
    def amount(v: float) -> str:
        return format_time(int(math.ceil(v)))


class MemRule:
    """Memory: no gate or slowdown; whole MiB per node (``--mem``) or per CPU (``--mem-per-cpu``)."""

    name = "mem"
    words = "memory"
    floor_setting = "predict.floor_mem_mb"

    @staticmethod
    def limit_of(limits: Any, recovery: Any, nodes: int) -> float | None:
        """The per-node limit (the partition's, else ``recovery.max_mem_mb``) over the job's nodes."""
        per_node = limits.max_mem_mb or recovery.max_mem_mb
        return per_node * nodes if per_node else None

    @staticmethod
    def least(retry: Any) -> float | None:
        """A retry floor's memory (``retry_floor.Floor``)."""
        return retry.mem_mb

    @staticmethod
    def gate(inp: KernelInput, value: float) -> str | None:
        return None

    @staticmethod
    def stretch(value: float, slow: float) -> float:
        return value

    @staticmethod
    def settle(value: float, inp: KernelInput) -> Settled:
        """The option the request used, in whole MiB; a ``--mem-per-cpu`` request with fewer cores becomes a total."""
        s = inp.shape
        if s.mem_mb:
            mb = int(math.ceil(value / s.nodes))
            if mb >= s.mem_mb:
                return Settled(None, kept=ROUNDED_KEPT)
            return Settled(float(mb * s.nodes), mb, "mem", format_mem(s.mem_mb))
        if s.mem_per_cpu_mb and s.given is not None:
            mb = int(math.ceil(value / s.nodes))
            if mb >= s.mem_per_cpu_mb * s.cores:
                return Settled(None, kept="rounded bound reaches the request: kept as a total")
            return Settled(float(mb * s.nodes), mb, "mem", f"{format_mem(s.mem_per_cpu_mb)} per CPU")
        if s.mem_per_cpu_mb:
            mb = int(math.ceil(value / s.cores))
            if mb >= s.mem_per_cpu_mb:
                return Settled(None, kept=ROUNDED_KEPT)
            return Settled(float(mb * s.cores), mb, "mem-per-cpu", format_mem(s.mem_per_cpu_mb))
        mb = int(math.ceil(value / s.nodes))
        if inp.request and mb * s.nodes >= inp.request:  # a request the trace gives in total
            return Settled(None, kept=ROUNDED_KEPT)
        return Settled(float(mb * s.nodes), mb, "mem", None)

    @staticmethod
    def amount(v: float) -> str:
        return format_mem(int(math.ceil(v)))


TIME = TimeRule()
MEM = MemRule()
_RULES: dict[str, ResourceRule] = {"time": TIME, "mem": MEM}


def rule_of(resource: str) -> ResourceRule:
    """The rule of a resource by its name (``time`` or ``mem``)."""
    return _RULES[resource]


def allocation(rule: ResourceRule, inp: KernelInput) -> Allocation:
    """The kernel's numbers for one resource of one job (what ``harp replay`` records)."""
    n = max(inp.n_history, inp.guard.min_history) if inp.prior else inp.n_history
    value, why = allocate(inp.request, inp.log_bound, n, inp.limit, inp.guard, inp.theta)
    if value is not None and (kept := rule.gate(inp, value)) is not None:
        value, why = None, kept
    at_least = None
    if value is not None and inp.retry is not None and value < inp.retry.amount:
        value, at_least = inp.retry.amount, f"at least {inp.retry.reason}"
    if value is None:
        return Allocation(None, why)
    value = rule.stretch(value, inp.slowdown)
    if inp.soft and inp.queue is not None and inp.request:
        weighed = weigh(inp.queue, inp.request, inp.limit, value)
        if weighed.given_back and weighed.limit_s >= inp.request:  # the whole cut back: the request stands
            return Allocation(None, weighed.reason)
        if weighed.given_back:
            value, why = weighed.limit_s, weighed.reason
    settled = rule.settle(value, inp)
    return Allocation(settled.amount, why, value, at_least, settled)


def decide(rule: ResourceRule, inp: KernelInput) -> KernelOutput:
    """One resource's change (or None) with its reason and explanation (what harpd answers)."""
    a = allocation(rule, inp)
    lb = inp.log_bound
    base = Explanation(
        model=inp.source.model,
        n_history=inp.n_history,
        bound_ratio=round(math.exp(lb), 4) if lb is not None and math.isfinite(lb) else None,
        leave_alone_ratio=None if inp.theta is None else round(float(inp.theta), 3),
        reason=a.why,
        extra=inp.source.extra,
    )
    if a.value is None or a.settled is None:
        return KernelOutput(None, a, base)
    reason = inp.source.reason
    if inp.slowdown > 1.0 and rule.stretch(1.0, inp.slowdown) > 1.0:
        reason += f", plus {inp.slowdown - 1.0:.1%} for the fewer cores harp gives"
    ex_reason = a.why
    if a.at_least is not None:
        reason += f"; raised to {rule.amount(a.value)}: {a.at_least}"
        ex_reason = f"{a.why}; {a.at_least}"
    elif a.why != BOUND:
        reason += "; " + rail_words(rule, a.why, inp)
    if inp.soft and inp.request:
        if a.why == BOUND and inp.guard.headroom:
            reason += f", plus {inp.guard.headroom:g} s: harpd extends a job that long before its limit"
        reason += f" (extended automatically up to {format_time(int(inp.request))} while it runs)"
    s = a.settled
    if s.moved:
        reason += f" ({s.moved})"
    explanation = Explanation(
        base.model,
        base.n_history,
        base.bound_ratio,
        base.leave_alone_ratio,
        s.kept if s.kept is not None else ex_reason,
        base.extra,
        s.moved,
    )
    if s.amount is None:
        return KernelOutput(None, a, explanation)
    value = format_time(s.shown) if rule.name == "time" else format_mem(s.shown)
    return KernelOutput(Proposal(s.option, value, s.old, reason), a, explanation)


def rail_words(rule: ResourceRule, by: str, inp: KernelInput) -> str:
    """Which guard rail moved the bound, in the decision's words.

    A value the rule's own words ("1.1 x the most of its last runs") do not
    explain must name what set it, or a 3-minute limit for 20-second runs
    reads as the rule's.
    """
    guard, req = inp.guard, inp.request
    if by == REQUEST_FLOOR:
        share = round(1 / guard.min_fraction) if guard.min_fraction else 0
        return (
            f"raised to {rule.amount((req or 0) * guard.min_fraction)}, the floor of request/{share:g}: "
            "harp never cuts deeper than recovery can double back to the request within its attempts"
        )
    if by == FLOOR:
        return f"raised to the floor of {rule.amount(guard.floor)} ({inp.source.floor_key or rule.floor_setting})"
    return f"lowered to the partition limit of {'?' if inp.limit is None else rule.amount(inp.limit)}"


def shape_of(rq: Any, cores: int, nodes: int, given: int | None, commands: Sequence[str] | None) -> JobShape:
    """A request's shape (``protocol.Resources``) for the kernel."""
    return JobShape(
        time_s=float(rq.time_s) if rq.time_s else None,
        time_min_s=rq.time_min_s,
        signal_s=rq.signal_s,
        mem_mb=rq.mem_mb,
        mem_per_cpu_mb=rq.mem_per_cpu_mb,
        cores=cores,
        nodes=nodes,
        given=given,
        commands=tuple(commands) if commands else None,
    )
