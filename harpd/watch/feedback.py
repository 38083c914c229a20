"""What the soft policy learns from the live queue: running siblings and the extension budget.

The replay's soft walk (``harpd.replay.soft_walk.soft_starts``) knows, at each
start, which siblings of the job's template are running and how often
jobs outgrew their start limits.  harpd learns the same from what the
watcher already has: the one queue listing per interval (running jobs,
their time used) and the outcomes of the jobs that passed through harp,
and hands it to the predictor's ``SoftState``:

* each tick: template -> (siblings running, longest run so far), from the
  running jobs harp registered (their template is computed from the
  registered request, as at submission); and the queue's load (jobs in
  line, their limits' processor-seconds, the cluster's processors) that the
  queue rule weighs a cut against (``harpd.slurm.queue_load``), so a
  decision reads this listing, not an squeue of its own;
* each job's first extension: the budget controller steps up;
* each job that passed through harp and ended without an extension: it
  steps down.  The scale is saved to the store once per tick.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from harpd.predict.soft_state import SoftState
from harpd.protocol import JobRequest
from harpd.records import JobRecord
from harpd.slurm.base import PartitionInfo, QueuedJob, SlurmError
from harpd.slurm.job_ids import submitted_id
from harpd.slurm.queue_load import queue_load
from harpd.store import Store
from harpd.watch.changes import DONE
from harpd.watch.extend import EXTEND
from harpd.watch.managed import submission_of

log = logging.getLogger("harpd.watch")

__all__ = ["SoftFeedback"]


class SoftFeedback:
    """Feeds ``state`` from the watcher's listing, its extensions and the poller's outcomes."""

    def __init__(
        self,
        store: Store,
        predictor: Any,
        state: SoftState,
        partitions: Callable[[], dict[str, PartitionInfo]] | None = None,
    ) -> None:
        """``partitions``: the daemon's cached partitions, for the cluster's processors (None: no queue load)."""
        self.store = store
        self.predictor = predictor
        self.state = state
        self.partitions = partitions
        self._template: dict[str, str | None] = {}  # job id -> template (None: not harp's or no time)

    def _template_of(self, job: QueuedJob) -> str | None:
        if job.job_id in self._template:
            return self._template[job.job_id]
        key = None
        sub = submission_of(self.store, job)
        if sub is not None and sub.job:
            try:
                key = self.predictor.template_of(JobRequest.model_validate(sub.job), str(sub.user or ""))
            except Exception as exc:  # noqa: BLE001 - a bad registration must not stop the listing
                log.debug("job %s: no template (%s)", job.job_id, exc)
        self._template[job.job_id] = key
        return key

    def tick(self, jobs: Iterable[QueuedJob]) -> int:
        """Siblings in flight per template from one listing; saves the budget scale. Returns templates seen."""
        jobs = list(jobs)
        running: dict[str, tuple[int, float]] = {}
        seen: set[str] = set()
        for job in jobs:
            seen.add(job.job_id)
            if not job.running:
                continue
            key = self._template_of(job)
            if key is None:
                continue
            n, longest = running.get(key, (0, 0.0))
            running[key] = (n + 1, max(longest, float(job.time_used_s or 0)))
        self._template = {k: v for k, v in self._template.items() if k in seen}
        self.state.set_running(running)
        if self.partitions is not None:
            try:
                self.state.set_queue(queue_load(jobs, self.partitions()))
            except SlurmError as exc:  # no cluster size this tick: the last load ages out (SoftState.queue)
                log.warning("watch: no partitions for the queue's load (%s)", exc)
        self.state.save()
        return len(running)

    def on_extended(self, job_id: str) -> None:
        """The extender made an extension; the first of a job counts against the budget."""
        done = [r for r in self.store.limit_changes(job_id) if r.kind == EXTEND and r.step == DONE]
        if len(done) == 1:
            self.state.extended()

    def on_outcome(self, rec: JobRecord) -> None:
        """Poller listener: a job harp passed that ended within its start limit steps the budget down."""
        if not rec.outcome.finished:
            return
        if (
            self.store.get_submission(rec.job_id) is None
            and self.store.get_submission(submitted_id(rec.job_id)) is None
        ):
            return  # not a job that passed through harp
        if any(r.kind == EXTEND and r.step == DONE for r in self.store.limit_changes(rec.job_id)):
            return  # counted when it was extended
        self.state.ended()
