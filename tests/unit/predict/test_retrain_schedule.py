"""The daemon's retrain trigger: counts outcomes, trains when due, survives a failing fit."""

from __future__ import annotations

from harpd.config import RetrainSettings
from harpd.training.schedule import attach_retrain


class FakeScheduler:
    """Records the job instead of running a clock: the test calls it."""

    def __init__(self) -> None:
        self.jobs: dict[str, object] = {}

    def add_job(self, func, trigger, **kw) -> None:
        assert trigger == "interval" and kw["seconds"] > 0
        self.jobs[kw["id"]] = func


def test_retrains_after_n_outcomes_and_not_before() -> None:
    calls: list[int] = []
    sched = FakeScheduler()
    listener = attach_retrain(sched, lambda: calls.append(1), RetrainSettings(after_n_outcomes=3, interval_s=1e9))
    check = sched.jobs["harp-retrain"]
    listener(object())
    listener(object())
    check()
    assert calls == []
    listener(object())
    check()
    assert calls == [1]
    check()  # the count was reset by the training
    assert calls == [1]


def test_a_failing_retrain_does_not_stop_the_schedule(caplog) -> None:
    sched = FakeScheduler()
    tries: list[int] = []

    def boom() -> None:
        tries.append(1)
        raise RuntimeError("fit failed")

    listener = attach_retrain(sched, boom, RetrainSettings(after_n_outcomes=1, interval_s=1e9))
    listener(object())
    sched.jobs["harp-retrain"]()  # must not raise
    assert tries == [1] and "scheduled retrain failed" in caplog.text
    sched.jobs["harp-retrain"]()  # the failed try counts as a training: no new outcome, no new try
    assert tries == [1]
    listener(object())
    sched.jobs["harp-retrain"]()  # the next outcome is counted and trains again
    assert tries == [1, 1]
