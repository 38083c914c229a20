"""Check harpd's decision before acting on it: harp-submit trusts no answer blindly.

A decision is applied only if every change names an option harp may change,
carries a value sbatch accepts and that can be written without quoting, and
stays within the limits the decision itself reports for the partition
(``decision.limits``).  Anything else is refused as a whole, and the caller
submits the user's request unchanged: a half-applied decision would be a
request nobody chose.
"""

from __future__ import annotations

import math

from . import units
from .directives import is_safe_value
from .request import MEMORY_OPTIONS

TYPE_CHECKING = False  # typing costs milliseconds to import; checkers still see these
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from .wire import DecisionDict, ResourcesDict

#: The options a decision may change (design.md, Decision.changes[].option).
#: The one list: harpd's ``protocol.ChangeOption`` is built from it, so the
#: daemon's model accepts exactly what this client applies.
CHANGEABLE = (
    "time",
    "mem",
    "mem-per-cpu",
    "mem-per-gpu",
    "cpus-per-task",
    "gres",
    "gpus",
    "partition",
    "nodes",
    "ntasks-per-node",
)


class BadDecision(ValueError):
    """A decision harp-submit will not apply; the message is one line for the user."""


class Change:
    """One validated change."""

    __slots__ = ("option", "value", "old", "reason", "amount")

    def __init__(self, option: str, value: str, old: str | None, reason: str, amount: Any):
        self.option = option
        self.value = value
        self.old = old
        self.reason = reason
        self.amount = amount  # the parsed value: seconds, MiB, a count, or the text

    def __repr__(self) -> str:
        return f"Change({self.option!r}, {self.value!r})"


def _int_or_none(d: Mapping[str, object], key: str) -> int | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v) or v < 0:
        raise BadDecision(f"limits.{key} is not a number")
    return int(v)


def parse_changes(decision: Any) -> list[Change]:
    """The decision's changes, each checked on its own; raises BadDecision."""
    if not isinstance(decision, dict):
        raise BadDecision("the decision is not an object")
    raw = decision.get("changes", [])
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise BadDecision("decision.changes is not a list")
    out: list[Change] = []
    seen: set[str] = set()
    for item in raw:
        if not isinstance(item, dict):
            raise BadDecision("a change is not an object")
        option, value = item.get("option"), item.get("value")
        if option not in CHANGEABLE:
            raise BadDecision(f"harp cannot change option {option!r}")
        # no sbatch value harp sets starts with "-": one that does could read as an
        # option wherever the value stands alone (``-p VALUE``), so it is refused
        if not isinstance(value, str) or not is_safe_value(value) or value.startswith("-"):
            raise BadDecision(f"unusable value {value!r} for --{option}")
        family = "memory" if option in MEMORY_OPTIONS else option
        if family in seen:
            raise BadDecision(f"two changes for --{option}")
        seen.add(family)
        reason = item.get("reason")
        reason = " ".join(reason.split()) if isinstance(reason, str) else ""
        old = item.get("old")
        old = old if isinstance(old, str) else None
        out.append(Change(option, value, old, reason, _amount(option, value)))
    return out


def _amount(option: str, value: str) -> Any:
    try:
        if option == "time":
            secs = units.parse_time(value)
            if secs is None:
                raise BadDecision("harp does not hand out unlimited time")
            return secs
        if option in MEMORY_OPTIONS:
            mb = units.parse_mem(value)
            if mb <= 0:
                raise BadDecision(f"--{option}={value} is not a memory size harp should set")
            return mb
        if option in ("cpus-per-task", "ntasks-per-node"):
            return units.parse_int(value)
        if option == "nodes":
            return units.parse_nodes(value)
    except ValueError as exc:
        if isinstance(exc, BadDecision):
            raise
        raise BadDecision(f"sbatch would reject --{option}={value}") from None
    return value


def check_limits(decision: DecisionDict, changes: list[Change], resources: ResourcesDict) -> None:
    """Refuse changes beyond ``decision.limits``; ``resources`` is the user's request.

    Memory per CPU is checked as per-task memory (times the CPUs per task the
    job will have), against the partition's memory per node.
    """
    if not changes:
        return
    limits = decision.get("limits")
    if not isinstance(limits, dict):
        raise BadDecision("the decision has no partition limits")
    max_time = _int_or_none(limits, "max_time_s")
    max_mem = _int_or_none(limits, "max_mem_mb")
    max_cpus = _int_or_none(limits, "max_cpus")
    by = {c.option: c for c in changes}
    part = limits.get("partition")
    target_part = by["partition"].value if "partition" in by else resources.get("partition")
    if isinstance(part, str) and part and target_part and "," not in target_part and part != target_part:
        raise BadDecision(f"its limits are for partition {part}, but the job goes to {target_part}")
    where = f"partition {part}" if isinstance(part, str) and part else "the partition"
    cpus = by["cpus-per-task"].amount if "cpus-per-task" in by else (resources.get("cpus_per_task") or 1)
    for c in changes:
        if c.option == "time" and max_time is not None and c.amount > max_time:
            raise BadDecision(f"--time={c.value} is beyond {where}'s limit of {units.format_time(max_time)}")
        if c.option == "mem" and max_mem is not None and c.amount > max_mem:
            raise BadDecision(f"--mem={c.value} is beyond {where}'s limit of {units.format_mem(max_mem)}")
        if c.option == "mem-per-cpu" and max_mem is not None and c.amount * cpus > max_mem:
            raise BadDecision(
                f"--mem-per-cpu={c.value} x {cpus} CPUs is beyond {where}'s limit of {units.format_mem(max_mem)}"
            )
        if c.option == "cpus-per-task" and max_cpus is not None and c.amount > max_cpus:
            raise BadDecision(f"--cpus-per-task={c.value} is beyond {where}'s limit of {max_cpus} CPUs")


def validate(answer: Mapping[str, Any], resources: ResourcesDict) -> tuple[DecisionDict, list[Change]]:
    """The decision of a ``predict`` answer and its checked changes; raises BadDecision."""
    decision: DecisionDict | None = answer.get("decision")
    changes = parse_changes(decision)
    assert isinstance(decision, dict)  # parse_changes refused anything else
    check_limits(decision, changes, resources)
    check_cores(changes, resources)
    check_time_options(changes, resources)
    return decision, changes


FLOOR_S = 60  # Slurm's smallest limit: a signal's lead comes on top of at least this


def check_time_options(changes: list[Change], resources: ResourcesDict) -> None:
    """Refuse a time limit that breaks ``--time-min`` or ``--signal``; raises BadDecision.

    slurmctld refuses a ``--time`` below ``--time-min``; and a job that asks
    to be signalled N seconds before its end must keep at least N seconds
    plus a minute, or the warning comes as it starts (harpd leaves more room,
    ``harpd.predict.time_options``; this is the client's own check).
    """
    for c in changes:
        if c.option != "time":
            continue
        time_min, lead = resources.get("time_min_s"), resources.get("signal_s")
        if time_min and c.amount < time_min:
            raise BadDecision(f"--time={c.value} is below your --time-min of {units.format_time(time_min)}")
        if lead and c.amount < lead + FLOOR_S:
            raise BadDecision(f"--time={c.value} leaves no room for --signal's warning {lead}s before the end")


def check_cores(changes: list[Change], resources: ResourcesDict) -> None:
    """Refuse a ``--cpus-per-task`` change harp-submit would not apply safely; raises BadDecision.

    harpd lowers the cores of single-task jobs only; the client checks again
    on its own reading of the request, because a wrong answer here would take
    cores from MPI ranks (``--ntasks`` stays) or shrink a ``--mem-per-cpu``
    job's memory with its cores: such a change must come with a total
    ``--mem``.
    """
    by = {c.option: c for c in changes}
    if "cpus-per-task" not in by:
        return
    ntasks, nodes = resources.get("ntasks") or 1, resources.get("nodes") or 1
    if ntasks > 1 or nodes > 1:
        raise BadDecision(f"harp changes the CPUs of single-task jobs only (--ntasks={ntasks}, --nodes={nodes})")
    if by["cpus-per-task"].amount > (resources.get("cpus_per_task") or 1):
        raise BadDecision("harp lowers --cpus-per-task, it never raises it")
    if resources.get("mem_per_cpu_mb") and "mem" not in by:
        raise BadDecision("fewer CPUs with --mem-per-cpu would shrink the memory; no total --mem came with them")


def check_beside(changes: list[Change], tres_per_task: str | None, tasks_per_node: str | None = None) -> None:
    """Refuse changes sbatch would reject beside the user's other options; raises BadDecision.

    sbatch 23.02 and later die on ``--cpus-per-task`` beside a
    ``--tres-per-task`` that counts CPUs (``cpu=4``): that user has already
    said how many CPUs each task gets, in the newer spelling.  And a job
    with ``--ntasks-per-node`` above one runs several tasks (harpd is not
    told that option): its CPUs per task stay.
    """
    if tasks_per_node not in (None, "1") and any(c.option == "cpus-per-task" for c in changes):
        raise BadDecision(f"--ntasks-per-node={tasks_per_node} runs several tasks; their CPUs stay")
    if tres_per_task is None or "cpu" not in tres_per_task.lower():
        return
    if any(c.option == "cpus-per-task" for c in changes):
        raise BadDecision(
            f"--tres-per-task={tres_per_task} sets the CPUs per task, and sbatch refuses --cpus-per-task beside it"
        )
