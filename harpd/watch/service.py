"""One Slurm listing per interval, handed to the extender and the re-sizer.

Runs on the daemon's scheduler (one thread pool, one place that
stops), every ``watch.interval_s``, only when harpd may change other users'
jobs and soft limits are on: otherwise nothing here runs and harp's limit
is the kill time (recovery resubmits what ran out).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from harpd.config import HarpSettings
from harpd.metrics import record as metrics
from harpd.predict.soft_state import SoftState
from harpd.slurm.base import PartitionInfo, SlurmError
from harpd.store import Store, StoreError
from harpd.watch.checkpoint_signal import CheckpointSignal
from harpd.watch.extend import Extender
from harpd.watch.feedback import SoftFeedback
from harpd.watch.privilege import Privilege
from harpd.watch.resize import Resizer, decider
from harpd.watch.trials import TrialStep

log = logging.getLogger("harpd.watch")

__all__ = ["Watch", "make"]

JOB_ID = "harp-watch"


class Watch:
    """The watcher: ``tick`` lists the queue once and lets each part act on it."""

    def __init__(
        self,
        store: Store,
        backend: Any,
        settings: HarpSettings,
        predictor: Any = None,
        partitions: Callable[[], dict[str, PartitionInfo]] | None = None,
        soft_limits: bool = True,
        soft_state: SoftState | None = None,
    ) -> None:
        """``soft_state``: the live predictor's soft-policy state (None: no feedback to it)."""
        self.backend = backend
        self.settings = settings
        # resumable jobs are asked to checkpoint before their end, under hard or soft limits
        self.checkpoint = CheckpointSignal(store, backend, soft_limits) if settings.watch.checkpoint_signal else None
        self.feedback: SoftFeedback | None = None
        self.extender: Extender | None = None
        self.resizer: Resizer | None = None
        self.trials: TrialStep | None = None
        if not soft_limits:  # hard limits: harp's limit is the kill time; only the checkpoint signal runs
            self._lock = threading.Lock()
            return
        # the soft policy learns from this listing and these extensions (harpd.watch.feedback)
        self.feedback = None if soft_state is None else SoftFeedback(store, predictor, soft_state, partitions)
        self.extender = Extender(
            store,
            backend,
            settings,
            partitions,
            on_extended=None if self.feedback is None else self.feedback.on_extended,
        )
        if settings.watch.resize and predictor is not None:
            self.resizer = Resizer(store, backend, settings, decider(predictor))
        # convergence-aware trials: nice and successive-halving stops (harpd.watch.trials)
        self.trials = TrialStep(store, backend, settings) if settings.watch.trials else None
        self._lock = threading.Lock()

    # the last tick, for ``harp health``: its seconds against the lead, how many jobs it listed, when
    last_tick_s: float | None = None
    last_tick_jobs: int = 0
    last_tick_at: float | None = None
    _slow_said = False

    @property
    def lead_s(self) -> float:
        """How long before a job's limit the watcher must have looked (``watch.margin_s``)."""
        return float(self.settings.watch.margin_s)

    def _timed(self, started: float, jobs: int) -> None:
        """Record the tick's duration; log once when it outlasts half the lead (and once when it is back)."""
        took = time.monotonic() - started
        self.last_tick_s, self.last_tick_jobs, self.last_tick_at = took, jobs, time.time()
        metrics.watch_tick(took)
        slow = took > self.lead_s / 2
        if slow and not self._slow_said:
            log.warning(
                "watch: a tick took %.1f s for %d jobs, over half the %g s lead (watch.margin_s): extensions may "
                "come too late; is slurmctld slow?",
                took,
                jobs,
                self.lead_s,
            )
        elif not slow and self._slow_said:
            log.info("watch: a tick takes %.1f s again, within half the lead", took)
        self._slow_said = slow

    def on_outcome(self, rec: Any) -> None:
        for part in (self.feedback, self.resizer):
            if part is None:
                continue
            try:
                part.on_outcome(rec)
            except StoreError as exc:  # the admin's one line (health says it too), not a bug's traceback
                log.error("watch: %s on job %s: %s", type(part).__name__, getattr(rec, "job_id", "?"), exc)
            except Exception:  # noqa: BLE001 - one listener must not stop the other
                log.exception("watch: %s failed on job %s", type(part).__name__, getattr(rec, "job_id", "?"))

    def tick(self) -> None:
        """Scheduled: never raises."""
        with self._lock:
            started = time.monotonic()
            try:
                jobs = self.backend.queue()
            except SlurmError as exc:
                log.warning("watch: cannot list the queue (%s); next try in %g s", exc, self.settings.watch.interval_s)
                return
            try:
                self._act(jobs)
            finally:
                self._timed(started, len(jobs))

    def _act(self, jobs: list[Any]) -> None:
        """Each part acts on this one listing; one part's failure never stops the others."""
        # feedback first: the re-sizer then decides with this listing's siblings in flight
        for part in (self.feedback, self.extender, self.resizer, self.trials, self.checkpoint):
            if part is None:
                continue
            try:
                part.tick(jobs)
            except StoreError as exc:  # the admin's one line (health says it too), not a bug's traceback
                log.error("watch: %s: %s", type(part).__name__, exc)
            except Exception:  # noqa: BLE001 - a scheduler job must not die
                log.exception("watch: %s failed", type(part).__name__)

    def schedule(self, scheduler: Any) -> Watch:
        """Run ``tick`` on the daemon's scheduler (the daemon also has the poller tell it each outcome)."""
        metrics.watch_timing(self.settings.watch.margin_s, self.settings.watch.interval_s)
        scheduler.every(
            self.tick,
            self.settings.watch.interval_s,
            id=JOB_ID,
            name="harp watch (extend running, re-size pending jobs)",
        )
        if self.extender is None:
            log.info("watch: on (every %g s, checkpoint signals only)", self.settings.watch.interval_s)
        else:
            log.info(
                "watch: on (every %g s, extend with %g s left%s)",
                self.settings.watch.interval_s,
                self.settings.watch.margin_s,
                ", re-size pending jobs" if self.resizer else "",
            )
        return self


def make(
    *,
    settings: HarpSettings,
    store: Store,
    backend: Any,
    privilege: Privilege,
    predictor: Any = None,
    partitions: Callable[[], dict[str, PartitionInfo]] | None = None,
    soft_state: SoftState | None = None,
) -> Watch | None:
    """The watcher, or None when it has nothing to do (unprivileged, disabled, no Slurm).

    Under hard limits (privileged, ``watch.soft_limits = false``) it only asks
    resumable jobs to checkpoint (``watch.checkpoint_signal``).
    """
    if backend is None or not privilege.privileged or not settings.watch.enabled:
        log.info("watch: off (%s limits: %s)", privilege.mode, privilege.why)
        return None
    if not privilege.soft_limits:
        if not settings.watch.checkpoint_signal:
            log.info("watch: off (%s limits: %s)", privilege.mode, privilege.why)
            return None
        log.info("watch: checkpoint signals only (%s limits: %s)", privilege.mode, privilege.why)
        return Watch(store, backend, settings, predictor, partitions, soft_limits=False)
    return Watch(store, backend, settings, predictor, partitions, soft_state=soft_state)
