"""Re-size pending jobs as their siblings finish: a better bound before the job starts.

Many jobs wait in the queue while jobs of the same signature (same script,
same array, same burst) finish.  Each outcome makes harp's bound for the
rest better, so when an outcome of a signature arrives (the poller's
listener ``on_outcome``), the next tick re-decides that signature's pending
jobs harp sized, through the same predictor as at submission, and updates
their TimeLimit when the new one differs enough to matter (at least
``watch.resize_min_ratio`` of it and ``watch.resize_min_s``): never above the
user's request, never below the floor, never for a job harp did not size.
An array's pending tasks are one record, updated through the array's id.

Exactly once per (job, old limit), with the same persisted steps as
extensions (``extend``'s module docstring): the change is committed
``decided`` before ``scontrol update`` and finished after a crash by
looking at the job (still pending with the old limit: update; with the new
one: done; started or gone: ``ended``, a running job is never shortened).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from harp_submit.units import parse_duration_s
from harpd.config import HarpSettings
from harpd.protocol import Decision, JobRequest
from harpd.recovery.policy import fmt_time
from harpd.records import JobRecord
from harpd.slurm.base import QueuedJob, SlurmError, whole_minutes
from harpd.store import Store
from harpd.watch.changes import DECIDED, DONE, REFUSED, decided, row_of, set_step, still_to_do
from harpd.watch.managed import harp_set_time, original_time_s, submission_of

log = logging.getLogger("harpd.watch")

__all__ = ["Resizer", "RESIZE", "time_decider"]

RESIZE = "resize"

#: a submission -> harp's time bound for it now (seconds; None: no bound, keep the current limit)
TimeDecider = Callable[[dict[str, Any]], "int | None"]


def time_decider(predictor: Any) -> TimeDecider:
    """Ask ``predictor`` (the daemon's, as at submission) again for a registered job's time."""

    def decide(sub: dict[str, Any]) -> int | None:
        job = JobRequest.model_validate(sub.get("job") or {})
        got = predictor.decide(job, str(sub.get("user") or ""), int(sub.get("uid") or 0))
        decision = got if isinstance(got, Decision) else Decision.model_validate(got)
        for change in decision.changes:
            if change.option == "time":
                t = parse_duration_s(change.value)
                return None if t is None else int(t)
        # no time change now (no model yet, or the bound is too close to the
        # request to bother): leave the limit decided at submission as it is
        return None

    return decide


class Resizer:
    """Re-decides pending jobs whose signature had new outcomes.  ``on_outcome`` is thread-safe."""

    def __init__(self, store: Store, backend: Any, settings: HarpSettings, decide: TimeDecider) -> None:
        self.store = store
        self.backend = backend
        self.decide = decide
        self.floor_s = int(settings.predict.floor_time_s)
        self.min_ratio = float(settings.watch.resize_min_ratio)
        self.min_s = int(settings.watch.resize_min_s)
        self._dirty: set[str] = set()
        self._lock = threading.Lock()

    def on_outcome(self, rec: JobRecord) -> None:
        """Poller listener: this signature's pending jobs are worth another look."""
        if rec.outcome.finished and rec.signature:
            with self._lock:
                self._dirty.add(str(rec.signature))

    def tick(self, jobs: Iterable[QueuedJob]) -> int:
        """Finish interrupted re-sizes, then re-decide the signatures that had outcomes; returns changes made."""
        by_id = {j.job_id: j for j in jobs}
        made = 0
        for row in decided(self.store, RESIZE):
            made += self._carry_out(row, by_id.get(row["job_id"]))
        with self._lock:
            dirty, self._dirty = self._dirty, set()
        if not dirty:
            return made
        for job in by_id.values():
            if not job.pending or job.time_limit_s is None:
                continue
            sub = submission_of(self.store, job)
            if sub is None or (sub.get("job") or {}).get("signature") not in dirty or not harp_set_time(sub):
                continue
            try:
                made += self._consider(job, sub)
            except Exception as exc:  # noqa: BLE001 - one job must not stop the others
                log.warning("job %s: not re-sized: %s", job.job_id, exc)
        return made

    def bound(self, job: QueuedJob, sub: dict[str, Any]) -> int | None:
        """The limit the job should have now, within the floor and the user's request; None: leave it."""
        original = original_time_s(sub)
        want = self.decide(sub)
        if want is None or original is None:
            return None
        want = max(self.floor_s, min(int(want), original))
        return min(whole_minutes(want) * 60, max(original, self.floor_s))

    def _consider(self, job: QueuedJob, sub: dict[str, Any]) -> int:
        current = int(job.time_limit_s or 0)
        new = self.bound(job, sub)
        if new is None or abs(new - current) < max(self.min_ratio * current, self.min_s):
            return 0
        reason = f"re-decided while pending after its siblings' outcomes: {fmt_time(current)} -> {fmt_time(new)}"
        if not self.store.add_limit_change(job.job_id, RESIZE, current, new, reason, DECIDED):
            return 0  # this limit was re-sized before: never twice
        log.info("job %s: %s", job.job_id, reason)
        row = row_of(self.store, job.job_id, RESIZE, current)
        return self._carry_out(row, job)

    def _carry_out(self, row: dict[str, Any], job: QueuedJob | None) -> int:
        jid, old, new = str(row["job_id"]), int(row["old_time_s"]), int(row["new_time_s"])
        if not still_to_do(self.store, row, job, "PENDING"):
            return 0
        try:
            self.backend.update_job(jid, time_limit_s=new)
        except SlurmError as exc:
            set_step(self.store, row, REFUSED, f"Slurm refused: {exc}")
            log.warning("job %s: re-size %s -> %s refused by Slurm (%s)", jid, fmt_time(old), fmt_time(new), exc)
            return 0
        set_step(self.store, row, DONE)
        return 1
