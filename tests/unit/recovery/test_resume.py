"""A resumable run that timed out after its checkpoint signal: same limit, charged only the time since it."""

from __future__ import annotations

from harpd.recovery.attempts import Plan
from harpd.recovery.resume import CHECKPOINT_SIGNAL, last_signal, resumed_time
from harpd.store import Store


def test_keeps_the_limit_that_ran_out_and_charges_the_time_since_the_signal():
    r = resumed_time(120, 121, 90, 600, 3600, attempt=1, max_attempts=3)
    assert r is not None and r.time_s == 120 and r.charged_s == 31
    assert "not doubled" in r.reason and "since the signal, not the whole" in r.reason
    assert "attempt 2 of 3" in r.reason


def test_never_above_what_is_left_of_the_request_nor_the_cap():
    left = resumed_time(600, 600, 500, 660, None, attempt=1, max_attempts=3)
    assert left is not None and left.time_s == 180  # 160 s left of the request: whole minutes
    capped = resumed_time(600, 600, 500, None, 300, attempt=1, max_attempts=3)
    assert capped is not None and capped.time_s == 300
    used_up = resumed_time(120, 120, 100, 90, None, attempt=1, max_attempts=3)
    assert used_up is not None and used_up.time_s == 120  # the request was too small: the same limit again


def test_no_attempts_left_is_not_a_resume():
    assert resumed_time(120, 120, 90, 600, None, attempt=3, max_attempts=3) is None


def test_last_signal_is_the_latest_runs_and_plan_keeps_the_charge(tmp_path):
    store = Store.open(tmp_path / "harp.db")
    try:
        assert last_signal(store, "7") is None
        store.add_limit_change("7", CHECKPOINT_SIGNAL, 1000, 90, "run 1", "done")
        store.add_limit_change("7", CHECKPOINT_SIGNAL, 2000, 95, "run 2", "done")
        store.add_limit_change("7", CHECKPOINT_SIGNAL, 3000, 95, "run 3, never sent", "refused")
        assert last_signal(store, "7")["old_time_s"] == 2000
    finally:
        store.close()
    plan = Plan.from_json(Plan(limits=Plan.from_json({"time_s": 120}).limits, charged_s=31).to_json())
    assert plan.charged_s == 31 and plan.limits.time_s == 120
