"""Ask a resumable job to checkpoint ``lead`` before its end: once per run, to its batch shell.

A job registered with a ``#HARP checkpoint`` line (``signal=USR1 lead=2m``,
the defaults) is one harp may let run out and requeue to resume
(``harpd.recovery.resume``).  Its end is harp's limit under hard limits;
under soft limits it is the user's own request, since harpd extends harp's
limit up to it (signalling before harp's shortened limit would make the job
checkpoint for nothing).  Only jobs whose Slurm owner is the registered uid
and whose limit is the one harp last set are signalled (``LeftAlone``).

A job whose own options declare it resumable (``--signal`` with
``--requeue``, ``harpd.recovery.resume.signal_declared``) is signalled by
Slurm itself, before its actual limit: harpd sends it nothing (a second
signal would make it checkpoint twice); recovery knows when Slurm signalled.

Once per run: each signal is a ``limit_changes`` row of kind
``CHECKPOINT_SIGNAL`` keyed by the run's start time (a requeued run starts
again and is signalled again), committed ``decided`` before ``scancel
--signal``; a row left ``decided`` by a crash is sent on the next tick if the
same run still runs (a second checkpoint request is harmless, a missing one
loses work).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from harp_submit.units import fmt_time
from harpd.dnn.checkpoint import SignalPlan, signal_plan
from harpd.dnn.errors import DnnError
from harpd.records import LimitChange, Submission
from harpd.recovery.resume import CHECKPOINT_SIGNAL, signal_declared
from harpd.slurm.base import QueuedJob, SlurmError, waiting_on_slurm
from harpd.store import Store
from harpd.watch.changes import DECIDED, DONE, ENDED, REFUSED, set_step
from harpd.watch.managed import LeftAlone, harp_set_time, original_time_s, submission_of

log = logging.getLogger("harpd.watch")

__all__ = ["CheckpointSignal"]


class CheckpointSignal:
    """Signals resumable running jobs before their end.  Not thread-safe: one tick at a time."""

    def __init__(self, store: Store, backend: Any, soft_limits: bool) -> None:
        self.store = store
        self.backend = backend
        self.soft_limits = soft_limits
        self._left_alone = LeftAlone()
        self._bad_line: set[str] = set()

    def tick(self, jobs: Iterable[QueuedJob]) -> int:
        """Send the signals due now (and any a crash left decided); returns how many were sent."""
        sent = 0
        by_id = {j.job_id: j for j in jobs}
        for row in (r for r in self.store.limit_changes(step=DECIDED) if r.kind == CHECKPOINT_SIGNAL):
            job = by_id.get(str(row.job_id))
            if job is None or not job.running or int(job.start_time or 0) != int(row.old_time_s):
                set_step(self.store, row, ENDED, "that run had ended: not signalled")
                continue
            sent += self._send(row, job)
        for job in by_id.values():
            if job.running and job.start_time and job.time_used_s is not None:
                sent += self._consider(job)
        return sent

    def _plan(self, job: QueuedJob, sub: Submission) -> SignalPlan | None:
        try:
            return signal_plan(sub.job.get("harp_lines") or [])
        except DnnError as exc:
            if job.job_id not in self._bad_line:
                self._bad_line.add(job.job_id)
                log.warning("job %s: not signalled for a checkpoint: %s", job.job_id, exc)
            return None

    def _end_s(self, job: QueuedJob, sub: Submission) -> int | None:
        """The run time at which the job is killed: the user's request under soft limits if harp set the time."""
        if self.soft_limits and harp_set_time(sub):
            original = original_time_s(sub)
            if original is not None:
                return max(original, job.time_limit_s or 0)
        return job.time_limit_s

    def _consider(self, job: QueuedJob) -> int:
        sub = submission_of(self.store, job)
        if sub is None or signal_declared(sub.original.signal_s, sub.original.requeue):
            return 0  # Slurm sends the job's own --signal
        plan = self._plan(job, sub)
        if plan is None:
            return 0
        end = self._end_s(job, sub)
        used = int(job.time_used_s or 0)
        if end is None or end - used > plan.lead_s:
            return 0
        run = int(job.start_time or 0)
        if any(r.kind == CHECKPOINT_SIGNAL and int(r.old_time_s) == run for r in self.store.limit_changes(job.job_id)):
            return 0  # this run was signalled (or decided): once per run
        if not self._left_alone.check(self.store, job, sub, "signalled for a checkpoint"):
            return 0
        reason = (
            f"SIG{plan.signal} {fmt_time(end - used)} before its end at {fmt_time(end)} "
            f"({'the request: soft limits' if self.soft_limits and end != job.time_limit_s else 'its limit'}; "
            f"lead {fmt_time(plan.lead_s)})"
        )
        self.store.add_limit_change(job.job_id, CHECKPOINT_SIGNAL, run, used, reason, DECIDED)
        row = next(
            r for r in self.store.limit_changes(job.job_id) if r.kind == CHECKPOINT_SIGNAL and int(r.old_time_s) == run
        )
        return self._send(row, job) if row.step == DECIDED else 0

    def _send(self, row: LimitChange, job: QueuedJob) -> int:
        sub = submission_of(self.store, job)
        plan = None if sub is None else self._plan(job, sub)
        name = plan.signal if plan is not None else "USR1"
        try:
            self.backend.signal(job.job_id, name)
        except SlurmError as exc:
            if waiting_on_slurm(exc):  # no answer is not a refusal: the next tick tries again
                log.info("job %s: checkpoint signal not sent yet (%s)", job.job_id, exc)
                return 0
            set_step(self.store, row, REFUSED, f"Slurm refused: {exc}")
            log.warning("job %s: checkpoint signal not sent (%s)", job.job_id, exc)
            return 0
        set_step(self.store, row, DONE)
        log.info("job %s: asked to checkpoint: %s", job.job_id, row.reason)
        return 1
