"""A job's limits ledger, read from the store: who set each limit of each attempt, when, why, from what.

There is no second copy of any setting: the ledger is assembled from the
records each hand already writes once: the submission (harp's decision, a
manager's retry floor included), recovery's ``attempts`` (each escalation),
``limit_changes`` (each re-size, floor lift and extension, with the attempt
it sized) and the ``jobs`` runs sacct reported (what each attempt really ran
with and how it ended).  ``harpd.limits.rule`` judges a hand's change
against it; ``harp status`` prints it.

Memory is the job's ``--mem`` (MiB per node); jobs sized by
``--mem-per-cpu`` keep their time entries only (their memory is re-sized by
its own option, never lifted by a floor of another unit).
"""

from __future__ import annotations

import time as _time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from harpd.limits.rule import DECISION, ESCALATE, EXTEND, LIFT, RESIZE, Entry, RanOut
from harpd.records import JobRecord, LimitChange, Outcome, Submission
from harpd.store import Store

__all__ = ["Ledger", "read_ledger", "sibling_runs", "runs_of", "hand_of", "WINDOW_S", "DONE"]

#: how far back a sibling's failure counts (a workflow's runs of one rule come within hours)
WINDOW_S = 24 * 3600.0
#: the step of a ``limit_changes`` row that was carried out
DONE = "done"

#: ``limit_changes`` kinds -> the hand that made them
_HAND_OF_KIND = {
    "resize": RESIZE,
    "resize-mem": RESIZE,
    "resize-mem-per-cpu": RESIZE,
    "resize-cpus": RESIZE,
    "lift": LIFT,
    "lift-mem": LIFT,
    "extend": EXTEND,
}


def hand_of(kind: str) -> str | None:
    """The hand a ``limit_changes`` kind stands for (None: not a change of a limit, e.g. a signal)."""
    return _HAND_OF_KIND.get(kind)


@dataclass(frozen=True, slots=True)
class Ledger:
    """One job's ledger: its entries (oldest first), the attempt it is at, and its own runs' ends."""

    job_id: str
    attempt: int
    entries: tuple[Entry, ...]
    runs: tuple[RanOut, ...]

    def last(self, resource: str) -> Entry | None:
        """The entry that set ``resource`` last."""
        return next((e for e in reversed(self.entries) if e.resource == resource), None)

    def at_attempt(self, attempt: int, resource: str) -> float | None:
        """What ``resource`` was set to for ``attempt`` last (None: never set)."""
        e = next((e for e in reversed(self.entries) if e.resource == resource and e.attempt <= attempt), None)
        return None if e is None else e.value


def _num(v: object) -> float | None:
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return f if f > 0 else None


def _attempt_at(starts: Sequence[tuple[float, int]], at: float) -> int:
    """The attempt running (or pending) at ``at``: the last one begun by then."""
    n = 1
    for t, a in starts:
        if t <= at:
            n = a
    return n


def read_ledger(store: Store, job_id: str, sub: Submission | None) -> Ledger:
    """The ledger of ``job_id`` (registered as ``sub``; None: only its runs and changes)."""
    jid = str(job_id)
    ids = {jid}
    raw: list[tuple[float, int, str, str, float, str]] = []  # (at, attempt, hand, resource, value, reason)
    starts: list[tuple[float, int]] = []
    first_attempt = 1
    chain = (sub.chain_id if sub is not None else None) or store.chain_of(jid)
    if chain:
        rows = store.attempts(chain)
        mine = [a for a in rows if str(a.job_id or "") == jid]
        if mine:
            first_attempt = min(int(a.attempt) for a in mine)
        for a in mine:
            n = int(a.attempt)
            starts.append((float(a.created_at), n))
            if n == 1:
                continue  # the chain's first run: the submission's decision says it
            lim, why, hand = a.limits or {}, str(a.reason or ""), ESCALATE
            if (m := _num(lim.get("mem_mb"))) is not None:
                raw.append((float(a.created_at), n, hand, "mem", m, why))
            if (t := _num(lim.get("time_s"))) is not None:
                raw.append((float(a.created_at), n, hand, "time", t, why))
    if sub is not None and str(sub.job_id) == jid and first_attempt == 1:
        reasons = {} if sub.decision is None else {c.option: str(c.reason or "") for c in sub.decision.changes}
        at = float(sub.submitted_at or 0.0)
        if (m := _num(sub.submitted.mem_mb)) is not None:
            raw.append((at, first_attempt, DECISION, "mem", m, reasons.get("mem") or "the request, kept"))
        if (t := _num(sub.submitted.time_s)) is not None:
            raw.append((at, first_attempt, DECISION, "time", t, reasons.get("time") or "the request, kept"))
    changes: list[LimitChange] = [r for i in sorted(ids) for r in store.limit_changes(i, step=DONE)]
    for r in changes:
        who = hand_of(r.kind)
        if who is None:
            continue
        n = int(r.attempt) if r.attempt else _attempt_at(sorted(starts), float(r.created_at))
        at = float(r.updated_at)
        why = str(r.reason or "")
        if r.kind in ("resize", "lift", "extend"):
            raw.append((at, n, who, "time", float(r.new_time_s), why))
        elif r.kind in ("resize-mem", "lift-mem") and r.new_mem_mb:
            raw.append((at, n, who, "mem", float(r.new_mem_mb), why))
    raw.sort(key=lambda x: (x[0], x[1]))
    entries: list[Entry] = []
    last: dict[str, float] = {}
    for at, n, who, res, value, why in raw:
        entries.append(Entry(n, who, res, value, at, why, last.get(res)))
        last[res] = value
    runs = list(_own_failures(entries))
    runs += runs_of(store.runs_of_job(jid))
    attempt = max([first_attempt, *(n for _, n in starts)])
    return Ledger(jid, attempt, tuple(entries), tuple(runs))


def _own_failures(entries: Sequence[Entry]) -> Iterable[RanOut]:
    """The sizes this job's own attempts ran out at: what was in force when an escalation of it came."""
    for i, e in enumerate(entries):
        if e.hand != ESCALATE or e.attempt < 2 or not e.raised or e.old is None:
            continue
        before = [p for p in entries[:i] if p.resource == e.resource and p.attempt < e.attempt]
        if before:
            yield RanOut(f"attempt {e.attempt - 1}", e.resource, before[-1].value, e.at)


def runs_of(records: Iterable[JobRecord]) -> list[RanOut]:
    """Sacct's runs as failures (out of memory or time at the size they had) and completions (what they used)."""
    out: list[RanOut] = []
    for r in records:
        at = float(r.end_time or r.submit_time or 0.0)
        name = f"{r.job_id}" if int(r.attempt or 1) == 1 else f"{r.job_id} (attempt {r.attempt})"
        nodes = int(r.alloc_nodes or r.req_nodes or 1) or 1
        if r.outcome == Outcome.OOM and (m := _num(r.req_mem_mb)) is not None:
            out.append(RanOut(name, "mem", m / nodes, at))
        elif r.outcome == Outcome.TIMEOUT and (t := _num(r.req_time_s)) is not None:
            out.append(RanOut(name, "time", t, at))
        elif r.outcome == Outcome.COMPLETED:
            if (u := _num(r.used_mem_mb)) is not None and (m := _num(r.req_mem_mb)) is not None:
                out.append(RanOut(name, "mem", m / nodes, at, True, u / nodes))
            if (u := _num(r.used_time_s)) is not None and (t := _num(r.req_time_s)) is not None:
                out.append(RanOut(name, "time", t, at, True, u))
    return out


def sibling_runs(store: Store, signature: str | None, now: float | None = None) -> list[RanOut]:
    """The recent failures and completions of the runs of ``signature`` (a task's siblings, earlier runs)."""
    if not signature:
        return []
    now = _time.time() if now is None else float(now)
    return runs_of(store.runs_of_signature(str(signature), now - WINDOW_S))
