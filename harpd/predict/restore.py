"""A resource harp cut comes back, for good, once a run failed at the cut size.

harp cannot see every way a smaller allocation breaks a program: a job step
hidden in a program the script calls may ask for more CPUs than harp left
(``srun: error: Unable to create step ... More processors requested than
permitted`` on 22.05; 25.11 and 26.05's srun waits for the CPUs instead, "Job
step may never run", until the job times out), a program may fail with its own out-of-memory error instead of
being killed for memory.  Such runs end FAILED, which recovery does not
retry, and a rule sized from its history would cut the next run the same way.

So a run that ended FAILED while harp held one of its resources below the
user's request restores that resource for the run's signature: harp stops
cutting it.  For good, in practice: harp gives the request from then on,
so no run at the cut size comes to say the cut was safe; the restoration
lasts while the failed run is in the history harpd loads (its most recent
finished jobs, ``live.HISTORY_JOBS``).  A TIMEOUT after a CPU cut restores
the CPUs too (fewer cores made it slower); its time is recovery's to extend,
and OUT_OF_MEMORY and TIMEOUT otherwise go to the escalation rule
(``harpd.recovery.escalation``), which already gives the next attempt more.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from harpd.records import Outcome, Resources, Submission

#: what harp cuts, by the name its explanations use
RESOURCES = ("cpus", "mem", "time")


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


def total_mem(res: Resources) -> float | None:
    """A submission's memory for the whole job (MiB), None when it asks none."""
    cpus = (_num(res.cpus_per_task) or 1) * (_num(res.ntasks) or 1)
    per_node = _num(res.mem_mb)
    if per_node is not None:
        return per_node * (_num(res.nodes) or 1)
    per_cpu = _num(res.mem_per_cpu_mb)
    return per_cpu * cpus if per_cpu is not None else None


def cut_resources(sub: Submission | None) -> set[str]:
    """The resources a registered submission got below what the user asked (its ``original``)."""
    if sub is None:
        return set()
    orig, got = sub.original, sub.submitted
    out: set[str] = set()
    for name, a, b in (
        ("cpus", _num(orig.cpus_per_task), _num(got.cpus_per_task)),
        ("time", _num(orig.time_s), _num(got.time_s)),
    ):
        if a is not None and b is not None and b < a:
            out.add(name)
    a, b = total_mem(orig), total_mem(got)
    if a is not None and b is not None and b < a:
        out.add("mem")
    return out


def restoring_outcome(outcome: Outcome) -> bool:
    """Whether a run that ended so may restore what harp cut (FAILED, or TIMEOUT for its CPUs)."""
    return outcome in (Outcome.FAILED, Outcome.TIMEOUT)


def restored_by(outcome: Outcome, cut: Iterable[str]) -> set[str]:
    """Which of the ``cut`` resources a run that ended ``outcome`` restores."""
    cut = set(cut)
    if outcome == Outcome.FAILED:
        return cut
    if outcome == Outcome.TIMEOUT:
        return cut & {"cpus"}
    return set()


class Restored:
    """Per signature, the resources harp no longer cuts; not thread-safe (the predictor locks)."""

    def __init__(self) -> None:
        self._by_sig: dict[str, set[str]] = {}

    def add_all(self, pairs: Iterable[tuple[str, str]]) -> None:
        for sig, res in pairs:
            self._by_sig.setdefault(sig, set()).add(res)

    def has(self, signature: str | None, resource: str) -> bool:
        return bool(signature) and resource in self._by_sig.get(str(signature), ())

    @staticmethod
    def reason(resource: str) -> str:
        return f"a run of this program failed after harp lowered its {resource}: its request stands from now on"
