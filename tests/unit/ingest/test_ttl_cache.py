"""harpd.slurm.ttl_cache: one scontrol per interval, while it works and while it fails."""

from __future__ import annotations

import logging

import pytest

from harpd.slurm.base import PartitionInfo, SlurmError
from harpd.slurm.billing import cached_billing
from harpd.slurm.partitions import cached_partitions
from harpd.slurm.ttl_cache import ttl_cached


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Fetch:
    """A controller that answers ``answers`` in turn; an exception in the list is raised."""

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)
        self.calls = 0

    def __call__(self) -> object:
        self.calls += 1
        got = self.answers[min(self.calls, len(self.answers)) - 1]
        if isinstance(got, Exception):
            raise got
        return got


def _depth(exc: BaseException) -> int:
    tb, n = exc.__traceback__, 0
    while tb is not None:
        tb, n = tb.tb_next, n + 1
    return n


def test_one_fetch_per_ttl() -> None:
    clock, fetch = Clock(), Fetch({"a": 1}, {"a": 2})
    get = ttl_cached(fetch, "limits", ttl_s=60, clock=clock)
    assert get() == {"a": 1} and get() == {"a": 1}
    assert fetch.calls == 1
    clock.t += 61
    assert get() == {"a": 2}
    assert fetch.calls == 2


def test_a_failure_is_remembered_not_retried_per_call(caplog: pytest.LogCaptureFixture) -> None:
    """slurmctld down: one scontrol per retry interval, not one per submission, and one log line."""
    clock, fetch = Clock(), Fetch(SlurmError("scontrol gave no answer within 10 s"), {"p": 1})
    get = ttl_cached(fetch, "partition limits", ttl_s=60, retry_s=10, clock=clock)
    with caplog.at_level(logging.WARNING, logger="harpd.slurm"):
        for _ in range(50):
            with pytest.raises(SlurmError, match="no answer"):
                get()
    assert fetch.calls == 1
    with pytest.raises(SlurmError) as first:
        get()
    with pytest.raises(SlurmError) as second:
        get()
    # a new exception per raise: one kept and raised again piles up a traceback (and a cycle) per submission
    assert first.value is not second.value
    assert _depth(first.value) == _depth(second.value)
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "partition limits unavailable" in warned[0] and "next try in 10 s" in warned[0]
    clock.t += 10
    assert get() == {"p": 1}
    assert fetch.calls == 2
    assert "partition limits available again" in caplog.records[-1].getMessage()


def test_a_failure_after_a_good_answer_serves_the_last_one(caplog: pytest.LogCaptureFixture) -> None:
    clock, fetch = Clock(), Fetch({"p": "old"}, SlurmError("connection refused"), {"p": "new"})
    get = ttl_cached(fetch, "partition limits", ttl_s=60, retry_s=10, clock=clock)
    assert get() == {"p": "old"}
    clock.t += 61
    with caplog.at_level(logging.WARNING, logger="harpd.slurm"):
        assert get() == {"p": "old"} and get() == {"p": "old"}
    assert fetch.calls == 2
    assert "using the answer of 61 s ago" in caplog.records[0].getMessage()
    clock.t += 5
    assert get() == {"p": "old"} and fetch.calls == 2  # within the retry interval: no scontrol
    clock.t += 5
    assert get() == {"p": "new"} and fetch.calls == 3


def test_retry_never_waits_longer_than_the_ttl() -> None:
    clock, fetch = Clock(), Fetch(SlurmError("down"), {"p": 1})
    get = ttl_cached(fetch, "x", ttl_s=2, retry_s=10, clock=clock)
    with pytest.raises(SlurmError):
        get()
    clock.t += 2
    assert get() == {"p": 1}


class DownBackend:
    """A backend whose controller does not answer (every scontrol fails)."""

    def __init__(self) -> None:
        self.runs = 0

    def partitions(self) -> dict[str, PartitionInfo]:
        self.runs += 1
        raise SlurmError("scontrol gave no answer within 10 s (slurm.command_timeout_s)")

    def _run(self, cmd: str, args: list[str]) -> str:
        self.runs += 1
        raise SlurmError("scontrol gave no answer within 10 s (slurm.command_timeout_s)")


@pytest.mark.parametrize("make", [cached_partitions, cached_billing])
def test_the_daemons_caches_do_not_run_scontrol_per_submission(make: object) -> None:
    backend = DownBackend()
    get = make(backend)  # type: ignore[operator]
    for _ in range(20):
        with pytest.raises(SlurmError):
            get()
    assert backend.runs == 1
