"""The escalation rule (harpd.recovery.escalation), case by case and as properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harpd.records import Outcome
from harpd.recovery.escalation import Step, next_allocation, resource_for, simulate

T, M = Outcome.TIMEOUT, Outcome.OOM


def test_resource_for():
    assert resource_for(T) == "time"
    assert resource_for(M) == "mem"
    assert resource_for(Outcome.FAILED) is None


def test_doubles_below_original_request():
    s = next_allocation(T, 600, 3600, None, attempt=1, max_attempts=3)
    assert s == Step(1200.0, s.reason, False)
    assert "doubled time" in s.reason and "attempt 2 of 3" in s.reason


def test_stops_at_original_request_instead_of_overshooting():
    s = next_allocation(T, 2000, 3600, None, 1, 3)
    assert s.value == 3600 and not s.stop
    assert "original request" in s.reason


def test_plain_doubling_past_original_request():
    assert next_allocation(T, 3600, 3600, None, 1, 3).value == 7200
    assert next_allocation(M, 5000, 4000, None, 1, 3).value == 10000


def test_plain_doubling_without_original_request():
    assert next_allocation(M, 1024, None, None, 1, 3).value == 2048
    assert next_allocation(M, 1024, 0, None, 1, 3).value == 2048


def test_cap_used_once_then_stop():
    s = next_allocation(T, 3600, 3600, 5000, 1, 5)
    assert s.value == 5000 and not s.stop and "cap" in s.reason
    s2 = next_allocation(T, 5000, 3600, 5000, 2, 5)
    assert s2.stop and s2.value is None and "cap" in s2.reason


def test_cap_below_original_request_wins():
    assert next_allocation(T, 1000, 10000, 1500, 1, 3).value == 1500


def test_max_attempts():
    s = next_allocation(T, 100, 3600, None, attempt=3, max_attempts=3)
    assert s.stop and s.value is None and "no attempts left" in s.reason
    assert next_allocation(T, 100, 3600, None, attempt=1, max_attempts=1).stop


@pytest.mark.parametrize(
    "outcome",
    [
        Outcome.PREEMPTED,
        Outcome.NODE_FAIL,
        Outcome.CANCELLED,
        Outcome.FAILED,
        Outcome.COMPLETED,
        Outcome.UNKNOWN,
        Outcome.RUNNING,
    ],
)
def test_never_escalates_other_outcomes(outcome):
    s = next_allocation(outcome, 100, 3600, None, 1, 3)
    assert s.stop and s.value is None and outcome.value in s.reason


def test_outcome_given_as_string_value():
    assert next_allocation("timeout", 100, None, None, 1, 3).value == 200
    assert next_allocation("bogus", 100, None, None, 1, 3).stop


@pytest.mark.parametrize("bad", [0, -5, math.nan, math.inf])
def test_invalid_current_stops(bad):
    s = next_allocation(T, bad, 3600, None, 1, 3)
    assert s.stop and "invalid" in s.reason


def test_simulate_fits_first_try():
    c = simulate(need=500, first=600, original_request=3600, cap=None, outcome=T)
    assert c.fitted and c.allocations == (600.0,) and c.killed == 0


def test_simulate_walks_back_to_request():
    c = simulate(need=3000, first=1000, original_request=3600, cap=None, outcome=T)
    assert c.allocations == (1000.0, 2000.0, 3600.0) and c.fitted
    assert c.killed == 3000.0


def test_simulate_runs_out_of_attempts():
    c = simulate(need=3500, first=100, original_request=3600, cap=None, outcome=T, max_attempts=3)
    assert not c.fitted and c.allocations == (100.0, 200.0, 400.0)
    assert c.killed == 700.0 and "no attempts left" in c.stopped_reason


def test_simulate_censored_need_is_strict():
    # a job killed at its request (3600) needs more: the request itself fails again
    c = simulate(need=3600, first=3600, original_request=3600, cap=3600, outcome=T, need_is_lower_bound=True)
    assert not c.fitted and c.killed == 3600 and "cap" in c.stopped_reason


pos = st.floats(min_value=1.0, max_value=1e7, allow_nan=False, allow_infinity=False)


@settings(max_examples=400, deadline=None)
@given(
    outcome=st.sampled_from([T, M]),
    current=pos,
    original=st.one_of(st.none(), pos),
    cap=st.one_of(st.none(), pos),
    attempt=st.integers(1, 10),
    max_attempts=st.integers(1, 10),
)
def test_step_properties(outcome, current, original, cap, attempt, max_attempts):
    s = next_allocation(outcome, current, original, cap, attempt, max_attempts)
    assert isinstance(s.reason, str) and s.reason
    if s.stop:
        assert s.value is None
        return
    assert attempt < max_attempts
    assert s.value > current  # monotone increase
    last_at_request = outcome is M and attempt + 1 >= max_attempts and original is not None and current < original
    if not last_at_request:
        assert s.value <= 2 * current + 1e-9  # never more than a doubling, but memory's last attempt (the request)
    if cap is not None:
        assert s.value <= cap  # never above the cap
    if original is not None and current < original and (cap is None or cap >= original):
        assert s.value <= original  # walks back to the request, not past it


@settings(max_examples=300, deadline=None)
@given(
    outcome=st.sampled_from([T, M]),
    first=pos,
    original=st.one_of(st.none(), pos),
    cap=st.one_of(st.none(), pos),
    max_attempts=st.integers(1, 12),
    need=pos,
)
def test_chain_terminates_monotone_capped(outcome, first, original, cap, max_attempts, need):
    if cap is not None:
        first = min(first, cap)
    c = simulate(need, first, original, cap, outcome, max_attempts)
    a = c.allocations
    assert 1 <= len(a) <= max_attempts  # terminates within the attempt budget
    assert all(y > x for x, y in zip(a, a[1:]))
    if cap is not None:
        assert max(a) <= cap
    assert c.fitted == (a[-1] >= need)
    assert math.isclose(c.killed, sum(a) - (a[-1] if c.fitted else 0.0))
    if not c.fitted:
        assert c.stopped_reason


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(
        st.tuples(pos, pos, st.one_of(st.none(), pos), st.one_of(st.none(), pos), st.booleans()),
        min_size=1,
        max_size=20,
    ),
    max_attempts=st.integers(1, 6),
    outcome=st.sampled_from([T, M]),
)
def test_simulate_many_matches_simulate(rows, max_attempts, outcome):
    import numpy as np

    from harpd.recovery.escalation import simulate_many

    rows = [(need, min(first, cap) if cap else first, orig, cap, lb) for need, first, orig, cap, lb in rows]
    arr = lambda k: np.array([np.nan if r[k] is None else r[k] for r in rows], float)  # noqa: E731
    killed, fitted, last, attempts = simulate_many(
        arr(0), arr(1), arr(2), arr(3), outcome, max_attempts, np.array([r[4] for r in rows])
    )
    for i, (need, first, orig, cap, lb) in enumerate(rows):
        c = simulate(need, first, orig, cap, outcome, max_attempts, need_is_lower_bound=lb)
        assert fitted[i] == c.fitted
        assert math.isclose(killed[i], c.killed, rel_tol=1e-12)
        assert last[i] == c.allocations[-1]
        assert attempts[i] == len(c.allocations)


def test_memory_first_retry_doubles_and_the_last_attempt_runs_at_the_request():
    """Issue 27: however deep harp cut memory, a job that fits its request is never lost within max_attempts."""
    first = next_allocation(M, 500, 16000, None, attempt=1, max_attempts=3)
    assert first.value == 1000 and "doubled mem" in first.reason
    last = next_allocation(M, 1000, 16000, None, attempt=2, max_attempts=3)
    assert last.value == 16000 and "last attempt" in last.reason
    assert simulate(15000, 500, 16000, None, M, max_attempts=3).fitted
    assert simulate(15000, 500, 16000, None, M, max_attempts=3).allocations == (500, 1000, 16000)
    # time keeps its rule (its walk-back floor brings the last attempt to the request)
    assert next_allocation(T, 100, 3600, None, attempt=2, max_attempts=3).value == 200
    # a job past its own request is not saved by the rule: doubling, then no attempts left
    assert not simulate(40000, 500, 16000, None, M, max_attempts=3).fitted
