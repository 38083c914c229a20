"""When to retrain: at start without a model, on a timer, after enough new outcomes,
and soon after the first outcomes while the models are missing or young.

Kept apart from ``champions`` so the daemon can wire the trigger at start
without loading scikit-learn (``harpd --check-config`` stays fast); the fit
itself is the ``retrain`` callable the daemon passes in (``Trainer.retrain``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harpd.config import RetrainSettings

log = logging.getLogger("harpd.training")


def should_retrain(
    last_trained_at: float | None, now: float, new_outcomes: int, retrain_settings: RetrainSettings
) -> bool:
    """Due when never trained, when ``interval_s`` passed, or after ``after_n_outcomes`` outcomes."""
    if last_trained_at is None:
        return True
    if now - last_trained_at >= retrain_settings.interval_s:
        return True
    return new_outcomes >= retrain_settings.after_n_outcomes


def first_gap_s(retrain_settings: RetrainSettings, streak: int) -> float:
    """The wait of the early trigger: ``first_after_s``, doubled per early training in a row.

    A young store trains cheaply (few jobs), so the first models come soon;
    a store whose trainings keep yielding no model (too little history, or
    a hold-out too short) backs off towards ``interval_s`` instead of
    paying a full training every few minutes.
    """
    base = float(retrain_settings.first_after_s)
    return min(base * 2.0 ** min(max(streak, 0), 30), float(retrain_settings.interval_s))


class RetrainSchedule:
    """Counts outcomes since the last training; the daemon asks ``due()`` after each ingest.

    Besides the day-long timer and the N-outcomes count, an early trigger
    serves a daemon whose models are missing or young (``young=True`` in
    ``due``): new outcomes make a training due ``first_after_s`` after the
    first of them arrived, and at least that long after the last training.
    """

    def __init__(self, retrain_settings: RetrainSettings, last_trained_at: float | None = None) -> None:
        self.settings = retrain_settings
        self.last_trained_at = last_trained_at
        self.new_outcomes = 0
        self.first_new_at: float | None = None  # when the first outcome since the last training arrived
        self.early_streak = 0  # early trainings in a row (each doubles the next wait)
        self._early = False

    def note_outcomes(self, k: int, now: float | None = None) -> None:
        k = max(int(k), 0)
        if k and self.new_outcomes == 0:
            self.first_new_at = time.time() if now is None else now
        self.new_outcomes += k

    def due(self, now: float | None = None, young: bool = False) -> bool:
        now = time.time() if now is None else now
        self._early = False
        if should_retrain(self.last_trained_at, now, self.new_outcomes, self.settings):
            return True
        if not young:
            self.early_streak = 0
            return False
        gap = first_gap_s(self.settings, self.early_streak)
        self._early = (
            self.new_outcomes > 0
            and self.first_new_at is not None
            and self.last_trained_at is not None
            and now - self.first_new_at >= gap
            and now - self.last_trained_at >= gap
        )
        return self._early

    def trained(self, now: float | None = None) -> None:
        self.last_trained_at = time.time() if now is None else now
        self.early_streak = self.early_streak + 1 if self._early else 0
        self._early = False
        self.new_outcomes = 0
        self.first_new_at = None


def is_young(trained_on: int | None, retrain_settings: RetrainSettings) -> bool:
    """No model yet, or the best one learnt from fewer than ``first_below_jobs`` jobs."""
    return trained_on is None or trained_on < int(retrain_settings.first_below_jobs)


def attach_retrain(
    scheduler: Any,
    retrain: Callable[[], Any],
    retrain_settings: RetrainSettings,
    check_every_s: float = 60.0,
    *,
    trained_on: Callable[[], int | None] | None = None,
    train_now: bool = False,
    history_size: Callable[[], int] | None = None,
) -> Callable[[Any], None]:
    """Retrain on the daemon's scheduler: every ``interval_s``, after ``after_n_outcomes``,
    and soon after new outcomes while the models are young (``trained_on``: the most
    jobs a loaded champion learnt from, None without one).

    ``train_now``: the store has history and harpd no model, so the first
    check runs at once instead of a day later.  ``history_size`` (the
    store's finished jobs): while there is no model, jobs that reach the
    store other than as outcomes (an admin ``import`` into a running harpd)
    count as new outcomes for the early trigger.  Returns the outcome listener
    to register on the ingestor (it only counts); the training itself runs in
    the scheduler's job (one at a time, ``max_instances=1``), never on the
    poll's thread, so a long fit cannot delay the recording of outcomes nor
    the answers to requests.
    """
    schedule = RetrainSchedule(retrain_settings, last_trained_at=None if train_now else time.time())
    lock = threading.Lock()
    seen = [history_size() if history_size is not None else 0]  # store size at the last look

    def listener(_record: Any) -> None:
        with lock:
            schedule.note_outcomes(1)

    def check() -> None:
        size = trained_on() if trained_on is not None else 0
        young = trained_on is not None and is_young(size, retrain_settings)
        if size is None and history_size is not None:
            n = history_size()
            with lock:
                schedule.note_outcomes(n - seen[0])
                seen[0] = max(seen[0], n)
        with lock:
            due = schedule.due(young=young)
        if not due:
            return
        try:
            retrain()
        except Exception:  # noqa: BLE001 - a failed fit keeps the old models serving
            log.exception("scheduled retrain failed; keeping the current models")
        with lock:
            schedule.trained()

    kw: dict[str, Any] = {}
    if train_now:
        from datetime import datetime

        kw["next_run_time"] = datetime.now()  # APScheduler: the first check at once
    scheduler.add_job(check, "interval", seconds=check_every_s, id="harp-retrain", max_instances=1, coalesce=True, **kw)
    return listener


def train_in_background(retrain: Callable[[], Any]) -> threading.Thread:
    """The start-up training where there is no scheduler (no Slurm: nothing is polled)."""

    def run() -> None:
        try:
            retrain()
        except Exception:  # noqa: BLE001 - predictions go on without a model
            log.exception("training at start failed; requests are kept until a model is trained")

    t = threading.Thread(target=run, name="harp-train-at-start", daemon=True)
    t.start()
    return t
