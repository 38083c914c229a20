"""A workflow manager's retry of a task is never sized below what its last attempt's end calls for.

Snakemake (``--retries``) submits a task again seconds after its job ran out
of memory: before harpd's poller has read the job's end and long before the
live history has it.  Sized from the rule's history alone, the retry gets the
size that has just failed.  So when the same task (user, workflow, rule or
process, wildcards or tag: ``harpd.features.workflow.TaskIdentity``) comes
again, harp reads its earlier submission (the store's submissions, which
harp-submit registered right after sbatch) and what is known of its end:

* COMPLETED, CANCELLED, NODE_FAIL, PREEMPTED: a rerun, not a retry of a size
  that failed: no floor;
* OUT_OF_MEMORY: memory at least the escalation rule's next size from what
  that attempt had (``harpd.recovery.escalation.next_allocation``, the rule
  harp's own recovery follows); TIMEOUT: time likewise, and its CPUs as asked
  if harp had lowered them (fewer cores made it slower);
* FAILED: every resource harp had lowered comes back to the request;
* not known yet (its end not polled): time and memory at least their
  escalated sizes and CPUs as asked: whichever way it ended, that is enough.

Never above the request, as every size harp gives.  Only tasks harp decided
on since it started are looked up (an in-memory note per task), so a task's
first submission costs no store read.

The sizes are read from the job's limits ledger (``harpd.limits``), not from
the submission alone: an attempt the re-sizer shrank ran with less than it
was submitted with, and its retry escalates from what it really had.  And
the floor is above every size the task ran out at (each earlier attempt of
it, each run of its rule: ``harpd.limits.rule.floor_of``), so a retry never
gets a size that task already failed at.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time as _time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harpd.features.workflow import TaskIdentity
from harpd.limits.ledger import Ledger, read_ledger, sibling_runs
from harpd.limits.rule import RanOut, floor_of
from harpd.predict.restore import cut_resources, total_mem
from harpd.records import Outcome, Submission
from harpd.recovery.escalation import next_allocation
from harpd.recovery.manager_retry import task_of

if TYPE_CHECKING:
    from harpd.store import Store

#: how long a task's earlier attempt is remembered (a manager's retry comes within minutes)
WINDOW_S = 6 * 3600.0
#: notes kept before the old ones are dropped
MAX_NOTES = 100_000


@dataclass(frozen=True)
class Floor:
    """The least a retry gets: total memory (MiB) and time (s), or None; ``keep_cpus`` a reason, or None."""

    mem_mb: float | None = None
    time_s: float | None = None
    keep_cpus: str | None = None
    reason: str = ""
    explain: dict[str, Any] = field(default_factory=dict)


def floor_after(earlier: Submission, max_attempts: int, ledger: Ledger | None = None) -> Floor | None:
    """The floor a new submission of the task of ``earlier`` (a stored submission) gets; None for none.

    ``ledger``: the earlier job's limits ledger: the sizes it last ran with
    (a re-size after submission included); None: its submitted sizes.
    """
    state, outcome = earlier.state, earlier.outcome
    known = state == "done" and outcome is not None
    try:
        ended = Outcome(outcome) if known else None
    except ValueError:
        ended = Outcome.UNKNOWN
    if ended in (Outcome.COMPLETED, Outcome.CANCELLED, Outcome.NODE_FAIL, Outcome.PREEMPTED):
        return None
    orig, got = earlier.original, earlier.submitted
    cut = cut_resources(earlier)
    job = earlier.job_id
    what = "its end not yet known" if ended is None else f"it ended {ended.value}"
    reason = f"the manager's retry of job {job} ({what})"

    def escalated(kind: Outcome, current: float | None, original: float | None) -> float | None:
        if current is None:
            return None
        step = next_allocation(kind, current, original, None, 1, max_attempts)
        return original if step.stop or step.value is None else step.value

    ran_mem = ran_time = None
    if ledger is not None:
        last_mem, last_time = ledger.last("mem"), ledger.last("time")
        ran_mem = None if last_mem is None else last_mem.value * float(got.nodes or 1)
        ran_time = None if last_time is None else last_time.value
    mem = time_s = None
    if ended in (None, Outcome.OOM, Outcome.UNKNOWN):
        mem = escalated(Outcome.OOM, ran_mem or total_mem(got), total_mem(orig))
    if ended in (None, Outcome.TIMEOUT, Outcome.UNKNOWN):
        t = ran_time or got.time_s
        o = orig.time_s
        time_s = escalated(Outcome.TIMEOUT, float(t) if t else None, float(o) if o else None)
    if ended == Outcome.FAILED:  # not the escalation's: what harp lowered goes back
        mem = total_mem(orig) if "mem" in cut else None
        o = orig.time_s
        time_s = float(o) if "time" in cut and o else None
    keep_cpus = None
    if "cpus" in cut and ended in (None, Outcome.TIMEOUT, Outcome.FAILED, Outcome.UNKNOWN):
        keep_cpus = f"{reason}: its CPUs as asked"
    if mem is None and time_s is None and keep_cpus is None:
        return None
    return Floor(
        mem,
        time_s,
        keep_cpus,
        reason,
        {
            "after_job": job,
            "ended": None if ended is None else ended.value,
            **({"mem_mb": round(mem)} if mem else {}),
            **({"time_s": round(time_s)} if time_s else {}),
        },
    )


#: the job harpd's watcher is deciding again while it waits (``redeciding``): not a new submission
_REDECIDING: contextvars.ContextVar[str | None] = contextvars.ContextVar("harp_redeciding", default=None)


@contextlib.contextmanager
def redeciding(job_id: str | None) -> Iterator[None]:
    """Mark the decisions made inside as a registered job's re-decision (``harpd.watch.resize``).

    A pending task decided again is not the manager's retry of itself: it
    keeps the floor of the attempt before it, if any, and notes nothing.
    A context variable, so the predictor's ``decide(job, user, uid)`` keeps
    the one signature every predictor (the DNN planner's wrapper included) has.
    """
    token = _REDECIDING.set(None if job_id is None else str(job_id))
    try:
        yield
    finally:
        _REDECIDING.reset(token)


class RetryFloors:
    """When harp last decided on each workflow task, and the floor a new submission of it gets."""

    def __init__(self, store: Store | None, max_attempts: int) -> None:
        self.store = store
        self.max_attempts = max_attempts
        # (uid, task) -> (the decision before the last, the last): a re-decision looks behind its own
        self._seen: dict[tuple[int, TaskIdentity], tuple[float | None, float]] = {}
        self._lock = threading.Lock()

    def floor(
        self,
        uid: int,
        task: TaskIdentity | None,
        now: float | None = None,
        signature: str | None = None,
        request: tuple[float | None, float | None] = (None, None),
    ) -> Floor | None:
        """The floor of this submission of ``task`` by ``uid`` (and note it for the next one).

        ``signature``: the task's rule (its siblings' and earlier runs' failures
        count too); ``request``: its total memory (MiB) and time (s) asked, the
        most a floor gives.
        """
        if task is None or self.store is None:
            return None
        retry, own = self._retry(uid, task, now)
        failed = self._failures(signature, request, now, own)
        return _higher(retry, failed)

    def _failures(
        self,
        signature: str | None,
        request: tuple[float | None, float | None],
        now: float | None,
        own: list[RanOut],
    ) -> Floor | None:
        """The floor every failure of the task (``own``: its last attempt's, from its ledger, which sacct's
        runs may not hold yet) or of its rule sets (``harpd.limits.rule.floor_of``)."""
        assert self.store is not None
        runs: list[RanOut] = [*own, *sibling_runs(self.store, signature, now)]
        mem = floor_of("mem", (), runs, 0, request[0], fmt=lambda v: f"{int(-(-v // 1))}M")
        time_s = floor_of("time", (), runs, 0, request[1], fmt=lambda v: f"{int(v)} s")
        if mem.value is None and time_s.value is None:
            return None
        reason = "; ".join(f"the floor of a failure of this task ({f.reason})" for f in (mem, time_s) if f.value)
        return Floor(
            mem.value,
            time_s.value,
            None,
            reason,
            {
                "failure": reason,
                **({"mem_mb": round(mem.value)} if mem.value else {}),
                **({"time_s": round(time_s.value)} if time_s.value else {}),
            },
        )

    def _retry(self, uid: int, task: TaskIdentity, now: float | None) -> tuple[Floor | None, list[RanOut]]:
        """The floor of a manager's retry of ``task`` from its latest earlier attempt, and that attempt's failures."""
        assert self.store is not None
        now = _time.time() if now is None else now
        key = (int(uid), task)
        again = _REDECIDING.get()
        with self._lock:
            prev, last = self._seen.get(key, (None, None))
            if again is None:
                self._seen[key] = (last, now)
                if len(self._seen) > MAX_NOTES:
                    self._seen = {k: v for k, v in self._seen.items() if now - v[1] < WINDOW_S}
        since = last if again is None else prev  # a re-decided job's own decision was the last one
        if since is None or now - since > WINDOW_S:
            return None, []
        own = None if again is None else self.store.get_submission(again)
        before = None if own is None else own.submitted_at
        earlier = None
        for sub in self.store.submissions_since(int(uid), since - 60.0):
            if sub.chain_id or sub.job_id == again:
                continue
            if before is not None and sub.submitted_at >= before:
                continue
            if task_of(sub) == task:
                earlier = sub  # oldest first: the last match is the latest attempt
        if earlier is None:
            return None, []
        ledger = read_ledger(self.store, earlier.job_id, earlier)
        return floor_after(earlier, self.max_attempts, ledger), list(ledger.runs)


def _higher(a: Floor | None, b: Floor | None) -> Floor | None:
    """The floor that holds both ``a`` and ``b``: each resource's higher value, with the reason of its setter."""
    if a is None or b is None:
        return a or b
    mem = max((f for f in (a, b) if f.mem_mb is not None), key=lambda f: f.mem_mb or 0.0, default=None)
    tim = max((f for f in (a, b) if f.time_s is not None), key=lambda f: f.time_s or 0.0, default=None)
    reasons = [r for r in dict.fromkeys(f.reason for f in (mem, tim) if f is not None) if r]
    return Floor(
        None if mem is None else mem.mem_mb,
        None if tim is None else tim.time_s,
        a.keep_cpus or b.keep_cpus,
        "; ".join(reasons) or a.reason,
        {**b.explain, **a.explain},
    )
