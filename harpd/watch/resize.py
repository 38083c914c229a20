"""Re-size pending jobs as their siblings finish: a better bound before the job starts.

Many jobs wait in the queue while jobs of the same signature (same script,
same array, same burst) finish.  Each outcome makes harp's bound for the
rest better, so when an outcome of a signature arrives (the poller's
listener ``on_outcome``), the next tick re-decides that signature's pending
jobs harp sized, through the same predictor as at submission, and updates
their TimeLimit when the new one differs enough to matter (at least
``watch.resize_min_ratio`` of it and ``watch.resize_min_s``): never above the
user's request, never below the floor, never for a job harp did not size.
Memory the same way (``MinMemoryNode``/``MinMemoryCPU``, which Slurm lets an
operator change while a job is pending), for jobs whose memory harp sized
at submission and for workflow tasks harp left as asked because none of
their type had finished (``managed.cold_task_mem``: a process's samples are
submitted together): at least ``watch.resize_min_ratio`` and 64 MB apart,
between the memory floor and the user's request.
CPUs per task the same way (``CPUsPerTask``, with ``MinCPUsNode`` and
``NumCPUs``, which slurmctld lets an operator change while a single-task job
is pending), kind ``resize-cpus``: for jobs whose CPUs harp lowered and for
workflow tasks it left as asked (``managed.cpus_to_resize``), to what the
predictor gives now (its step floor and restored CPUs included; the request
when it gives nothing), never above the user's request.
An array's pending tasks are one record, updated through the array's id.

Exactly once per (job, kind, old time limit) (kinds ``resize`` for time,
``resize-mem`` for memory, whose old and new values are the row's
``old_mem_mb``/``new_mem_mb``), with the same persisted steps as
extensions (``extend``'s module docstring): the change is committed
``decided`` before ``scontrol update`` and finished after a crash by
looking at the job (still pending with the old limit: update; with the new
one: done; started or gone: ``ended``, a running job is never shortened).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from harp_submit.units import fmt_time, parse_duration_s, parse_mem
from harpd.config import HarpSettings
from harpd.features.workflow import registered_signature
from harpd.limits.ledger import Ledger, read_ledger, sibling_runs
from harpd.limits.rule import LIFT, Floor, Verdict, floor_of, judge
from harpd.limits.rule import RESIZE as RESIZE_HAND
from harpd.predict.retry_floor import redeciding
from harpd.protocol import Decision, JobRequest
from harpd.records import JobRecord, LimitChange, Submission
from harpd.slurm.base import QueuedJob, SlurmError, waiting_on_slurm, whole_minutes
from harpd.store import Resize, Store
from harpd.watch.changes import DECIDED, DONE, REFUSED, decided, limit, row_of, set_step, still_to_do
from harpd.watch.managed import (
    LeftAlone,
    cold_task_mem,
    cpus_to_resize,
    harp_set_mem,
    harp_set_time,
    original_time_s,
    submission_of,
)

log = logging.getLogger("harpd.watch")

__all__ = ["Resizer", "RESIZE", "MEM_KINDS", "CPU_KIND", "Fresh", "decider"]

RESIZE = "resize"
#: the kinds of a pending job raised to the floor a failure set (``harpd.limits.rule``): time, memory
LIFT_KIND, LIFT_MEM_KIND = "lift", "lift-mem"
#: the kinds of memory re-sizes, by the memory option harp changed at submission
MEM_KINDS = {"mem": "resize-mem", "mem-per-cpu": "resize-mem-per-cpu"}
MEM_OPTION_OF = {**{kind: option for option, kind in MEM_KINDS.items()}, LIFT_MEM_KIND: "mem"}
#: the kind of a CPU re-size (``old_cpus``/``new_cpus`` of the row: CPUs per task)
CPU_KIND = "resize-cpus"


@dataclass(frozen=True)
class Fresh:
    """What the predictor decides for a registered job now: its time, its memory (None: no change)."""

    time_s: int | None = None
    mem_option: str | None = None  # "mem" (MB per node) or "mem-per-cpu"
    mem_mb: int | None = None
    cpus: int | None = None  # CPUs per task (None: the request)


#: a submission -> harp's bounds for it now
Decider = Callable[[Submission], Fresh]

#: memory re-sizes smaller than this are not worth a change
MIN_MEM_STEP_MB = 64


def decider(predictor: Any) -> Decider:
    """Ask ``predictor`` (the daemon's, as at submission) again for a registered job's time and memory."""

    def decide(sub: Submission) -> Fresh:
        job = JobRequest.model_validate(sub.job)
        with redeciding(sub.job_id):  # not the manager's retry of itself (harpd.predict.retry_floor)
            got = predictor.decide(job, str(sub.user or ""), int(sub.uid or 0))
        decision = got if isinstance(got, Decision) else Decision.model_validate(got)
        time_s = mem_mb = option = cpus = None
        for change in decision.changes:
            if change.option == "time":
                t = parse_duration_s(change.value)
                time_s = None if t is None else int(t)
            elif change.option == "cpus-per-task" and str(change.value).isdigit():
                cpus = int(change.value)
            elif change.option in ("mem", "mem-per-cpu"):
                try:
                    mem_mb, option = parse_mem(change.value), change.option
                except ValueError:
                    pass
        # no change now (no model yet, or the bound is too close to the request
        # to bother): leave what was decided at submission as it is
        return Fresh(time_s, option, mem_mb, cpus)

    return decide


class Resizer:
    """Re-decides pending jobs whose signature had new outcomes.  ``on_outcome`` is thread-safe."""

    def __init__(self, store: Store, backend: Any, settings: HarpSettings, decide: Decider) -> None:
        self.store = store
        self.backend = backend
        self.decide = decide
        self.floor_s = int(settings.predict.floor_time_s)
        self.floor_mb = int(settings.predict.floor_mem_mb)
        self.min_ratio = float(settings.watch.resize_min_ratio)
        self.min_s = int(settings.watch.resize_min_s)
        self._dirty: set[str] = set()
        self._lock = threading.Lock()
        self._left_alone = LeftAlone()  # Slurm's owner and limit checked before each re-size
        self._refused: dict[tuple[str, str], str] = {}  # (job, resource) -> the ledger's refusal last logged

    def on_outcome(self, rec: JobRecord) -> None:
        """Poller listener: this signature's pending jobs are worth another look."""
        if rec.outcome.finished and rec.signature:
            with self._lock:
                self._dirty.add(str(rec.signature))

    def tick(self, jobs: Iterable[QueuedJob]) -> int:
        """Finish interrupted re-sizes, then re-decide the signatures that had outcomes; returns changes made."""
        by_id = {j.job_id: j for j in jobs}
        made = 0
        for kind in (RESIZE, LIFT_KIND, *MEM_KINDS.values(), LIFT_MEM_KIND, CPU_KIND):
            for row in decided(self.store, kind):
                made += self._carry_out(row, by_id.get(row.job_id))
        with self._lock:
            dirty, self._dirty = self._dirty, set()
        if not dirty:
            return made
        for job in by_id.values():
            if not job.pending or job.time_limit_s is None:
                continue
            sub = submission_of(self.store, job)
            if sub is None or registered_signature(sub.job) not in dirty:
                continue
            time_set, mem_option = harp_set_time(sub), harp_set_mem(sub) or cold_task_mem(sub)
            cpus_set = cpus_to_resize(sub)
            if not time_set and mem_option is None and not cpus_set:
                continue
            if not self._left_alone.check(self.store, job, sub, "re-sized"):
                continue
            try:
                fresh = self.decide(sub)
                if time_set:
                    made += self._consider(job, sub, fresh)
                if mem_option is not None:
                    made += self._consider_mem(job, sub, fresh, mem_option)
                if cpus_set:
                    made += self._consider_cpus(job, sub, fresh)
            except Exception as exc:  # noqa: BLE001 - one job must not stop the others
                log.warning("job %s: not re-sized: %s", job.job_id, exc)
        return made

    def bound(self, job: QueuedJob, sub: Submission, fresh: Fresh) -> int | None:
        """The limit the job should have now, within the floor and the user's request; None: leave it."""
        original = original_time_s(sub)
        want = fresh.time_s
        if want is None or original is None:
            return None
        want = max(self.floor_s, min(int(want), original))
        return min(whole_minutes(want) * 60, max(original, self.floor_s))

    def _ledger_verdict(
        self, job: QueuedJob, sub: Submission, resource: str, current: int, new: int | None, request: int | None
    ) -> tuple[Verdict, Floor, Ledger]:
        """The ledger's judgement of re-sizing ``resource`` from ``current`` to ``new`` (``harpd.limits.rule``).

        The re-sizer decides from the job's submission, so a raise by another
        hand since (recovery's escalation, a floor lift) makes a lowering a
        conflict; every failure of the job, of its siblings (same signature)
        and of earlier runs is a floor it never goes below.
        """
        ledger = read_ledger(self.store, job.job_id, sub)
        runs = [*ledger.runs, *sibling_runs(self.store, registered_signature(sub.job))]
        fmt = fmt_time if resource == "time" else _fmt_mb
        floor = floor_of(resource, ledger.entries, runs, ledger.attempt, request, fmt=fmt)
        own = [e.at for e in ledger.entries if e.hand in (RESIZE_HAND, LIFT) and e.resource == resource]
        since = max([float(sub.submitted_at or 0.0), *own])
        verdict = judge(RESIZE_HAND, resource, current, new, since, ledger.entries, floor, request, fmt=fmt)
        return verdict, floor, ledger

    def _refuse(self, job: QueuedJob, resource: str, verdict: Verdict) -> int:
        """Log a refusal of the ledger once per job and resource (a tick runs every few seconds)."""
        key = (job.job_id, resource)
        if self._refused.get(key) != verdict.why:
            self._refused[key] = verdict.why
            log.warning("job %s: not re-sized: %s", job.job_id, verdict.why)
        return 0

    def _consider(self, job: QueuedJob, sub: Submission, fresh: Fresh) -> int:
        current = int(job.time_limit_s or 0)
        new = self.bound(job, sub, fresh)
        verdict, _floor, ledger = self._ledger_verdict(job, sub, "time", current, new, original_time_s(sub))
        if verdict.refused:
            return self._refuse(job, "time", verdict) if new is not None and new < current else 0
        if verdict.value is None:
            return 0
        lifted = bool(verdict.why) and verdict.value > current  # raised to a failure's floor
        new = whole_minutes(int(-(-verdict.value // 1))) * 60
        if new == current:
            return 0
        if not lifted and abs(new - current) < max(self.min_ratio * current, self.min_s):
            return 0
        kind = LIFT_KIND if lifted else RESIZE
        reason = (
            f"raised while pending: {fmt_time(current)} -> {fmt_time(new)}, {verdict.why}"
            if lifted
            else f"re-decided while pending after its siblings' outcomes: {fmt_time(current)} -> {fmt_time(new)}"
            + (f" ({verdict.why})" if verdict.why else "")
        )
        if not self.store.add_limit_change(job.job_id, kind, current, new, reason, DECIDED, attempt=ledger.attempt):
            return 0  # this limit was re-sized before: never twice
        log.info("job %s: %s", job.job_id, reason)
        row = row_of(self.store, job.job_id, kind, current)
        return self._carry_out(row, job)

    def mem_bound(self, sub: Submission, fresh: Fresh, option: str) -> int | None:
        """The memory (MB, of ``option``) the job should have now, within the floor and the user's request."""
        if fresh.mem_option != option or fresh.mem_mb is None:
            return None
        original = _original_mb(sub, option)
        if original is None:
            return None  # the user gave no such memory: nothing to stay under
        return max(min(self.floor_mb, original), min(int(fresh.mem_mb), original))

    def _consider_mem(self, job: QueuedJob, sub: Submission, fresh: Fresh, option: str) -> int:
        current = job.mem_mb if option == "mem" else job.mem_per_cpu_mb
        new = self.mem_bound(sub, fresh, option)
        if current is None:
            return 0
        lifted, attempt, why = False, None, ""
        if option == "mem":  # the ledger keeps --mem (harpd.limits.ledger)
            request = _original_mb(sub, "mem")
            verdict, _floor, ledger = self._ledger_verdict(job, sub, "mem", int(current), new, request)
            attempt = ledger.attempt
            if verdict.refused:
                return self._refuse(job, "mem", verdict) if new is not None and new < current else 0
            if verdict.value is None:
                return 0
            why = verdict.why
            lifted = bool(why) and verdict.value > current  # raised to a failure's floor
            new = int(-(-verdict.value // 1))
        if new is None or new == current:
            return 0
        if not lifted and abs(new - current) < max(self.min_ratio * current, MIN_MEM_STEP_MB):
            return 0
        kind = LIFT_MEM_KIND if lifted else MEM_KINDS[option]
        at = int(job.time_limit_s or 0)
        reason = (
            f"raised while pending: --{option} {current} MB -> {new} MB, {why}"
            if lifted
            else f"re-decided while pending after its siblings' outcomes: --{option} {current} MB -> {new} MB"
            + (f" ({why})" if why else "")
        )
        if not self.store.add_limit_change(
            job.job_id, kind, at, at, reason, DECIDED, mem=Resize(int(current), int(new)), attempt=attempt
        ):
            return 0  # this job's memory was re-sized at this time limit before: never twice
        log.info("job %s: %s", job.job_id, reason)
        return self._carry_out(row_of(self.store, job.job_id, kind, at), job)

    def _consider_cpus(self, job: QueuedJob, sub: Submission, fresh: Fresh) -> int:
        """CPUs per task at start: what the predictor gives now (its step and restore rules included),
        the request when it gives nothing; never above the request."""
        current = job.cpus_per_task
        try:
            requested = int(sub.original.cpus_per_task or 0)
        except (TypeError, ValueError):
            return 0
        if current is None or requested < 1 or (job.num_tasks or 1) != 1:
            return 0
        new = min(requested, fresh.cpus or requested)
        if new == current:
            return 0
        at = int(job.time_limit_s or 0)
        reason = f"re-decided while pending after its siblings' outcomes: --cpus-per-task {current} -> {new}"
        if not self.store.add_limit_change(
            job.job_id, CPU_KIND, at, at, reason, DECIDED, cpus=Resize(int(current), int(new))
        ):
            return 0  # this job's CPUs were re-sized at this time limit before: never twice
        log.info("job %s: %s", job.job_id, reason)
        return self._carry_out(row_of(self.store, job.job_id, CPU_KIND, at), job)

    def _carry_out(self, row: LimitChange, job: QueuedJob | None) -> int:
        jid = str(row.job_id)
        if row.kind == CPU_KIND:
            return self._carry_out_cpus(row, job)
        option = MEM_OPTION_OF.get(row.kind)
        if not still_to_do(self.store, row, job, "PENDING", memory=option):
            return 0
        if option is None:
            old, new = int(row.old_time_s), int(row.new_time_s)
            change: dict[str, int] = {"time_limit_s": new}
            shown = f"{fmt_time(old)} -> {fmt_time(new)}"
        else:
            old, new = limit(row, row.old_mem_mb, "old_mem_mb"), limit(row, row.new_mem_mb, "new_mem_mb")
            change = {"mem_mb" if option == "mem" else "mem_per_cpu_mb": new}
            shown = f"--{option} {old} MB -> {new} MB"
        try:
            self.backend.update_job(jid, **change)
        except SlurmError as exc:
            if waiting_on_slurm(exc):  # no answer is not a refusal: the next tick tries again
                log.info("job %s: re-size %s not made yet (%s)", jid, shown, exc)
                return 0
            set_step(self.store, row, REFUSED, f"Slurm refused: {exc}")
            log.warning("job %s: re-size %s refused by Slurm (%s)", jid, shown, exc)
            return 0
        set_step(self.store, row, DONE)
        return 1

    def _carry_out_cpus(self, row: LimitChange, job: QueuedJob | None) -> int:
        jid = str(row.job_id)
        if not still_to_do(self.store, row, job, "PENDING", memory="cpus"):
            return 0
        old, new = limit(row, row.old_cpus, "old_cpus"), limit(row, row.new_cpus, "new_cpus")
        try:
            self.backend.update_job(jid, cpus_per_task=new)
        except SlurmError as exc:
            if waiting_on_slurm(exc):  # no answer is not a refusal: the next tick tries again
                log.info("job %s: re-size --cpus-per-task %d -> %d not made yet (%s)", jid, old, new, exc)
                return 0
            set_step(self.store, row, REFUSED, f"Slurm refused: {exc}")
            log.warning("job %s: re-size --cpus-per-task %d -> %d refused by Slurm (%s)", jid, old, new, exc)
            return 0
        set_step(self.store, row, DONE)
        return 1


def _fmt_mb(v: float) -> str:
    return f"{int(-(-v // 1))}M"


def _original_mb(sub: Submission, option: str) -> int | None:
    """The user's own memory of ``option`` (MB), None when none was given."""
    original = sub.original.mem_mb if option == "mem" else sub.original.mem_per_cpu_mb
    try:
        return int(original) if original else None
    except (TypeError, ValueError):
        return None
