"""A resumable run that timed out after its checkpoint signal: same limit, charged only the time since it."""

from __future__ import annotations

import pytest

from harpd.recovery.attempts import Plan
from harpd.recovery.resume import CHECKPOINT_SIGNAL, last_signal, resumed_time, signal_declared, slurm_signal_at
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
    own = resumed_time(120, 121, 80, 120, None, attempt=1, max_attempts=3)  # the user's own --time ran out
    assert own is not None and own.time_s == 120 and own.charged_s == 41 and "not doubled" in own.reason


def test_no_attempts_left_is_not_a_resume():
    assert resumed_time(120, 120, 90, 600, None, attempt=3, max_attempts=3) is None


def test_last_signal_is_the_latest_runs_and_plan_keeps_the_charge(tmp_path):
    store = Store.open(tmp_path / "harp.db")
    try:
        assert last_signal(store, "7") is None
        store.add_limit_change("7", CHECKPOINT_SIGNAL, 1000, 90, "run 1", "done")
        store.add_limit_change("7", CHECKPOINT_SIGNAL, 2000, 95, "run 2", "done")
        store.add_limit_change("7", CHECKPOINT_SIGNAL, 3000, 95, "run 3, never sent", "refused")
        assert last_signal(store, "7").old_time_s == 2000
    finally:
        store.close()
    plan = Plan.from_json(Plan(limits=Plan.from_json({"time_s": 120}).limits, charged_s=31).to_json())
    assert plan.charged_s == 31 and plan.limits.time_s == 120


# ------------------------------------------------------------------ through the recovery machine (requeue mode)

from resubmit_fakes import fake, submission  # noqa: E402,F401 (fixtures)
from resubmit_fakes import store as rstore  # noqa: E402,F401 (fixtures)

from harpd.config import HarpSettings  # noqa: E402
from harpd.ingest.poller import Ingestor  # noqa: E402
from harpd.records import Outcome  # noqa: E402
from harpd.recovery import machine as rs  # noqa: E402


def _machine(store, fake):
    settings = HarpSettings(ingest={"poll_interval_s": 5}, recovery={"mode": "requeue"})
    ing = Ingestor(store, fake, settings)
    rec = rs.Recovery(store, fake, settings, watch=ing.watch)
    ing.on_outcome.append(rec.on_outcome)
    return ing


@pytest.mark.parametrize("signalled_this_run", [True, False])
def test_a_signalled_timeout_is_requeued_with_the_same_limit(rstore, fake, signalled_this_run):
    ing = _machine(rstore, fake)
    jid = fake.add_job(time_s=60, mem_mb=100)
    submission(
        fake, rstore, jid, harp_lines=["#HARP retry", "#HARP checkpoint cost=5s lead=20s"], original={"time_s": 600}
    )
    fake.end_run(jid, Outcome.TIMEOUT)
    start = int(fake.state["jobs"][jid]["runs"][-1]["start"])
    rstore.add_limit_change(
        jid, CHECKPOINT_SIGNAL, start if signalled_this_run else start - 3600, 40, "SIGUSR1", "done"
    )
    ing.poll_once()
    a = rstore.attempts(jid)
    assert [(r.attempt, r.step) for r in a] == [(1, "done"), (2, "requeued")]
    assert a[1].job_id == jid and a[1].limits["mode"] == "requeue"  # in place: same id, same files
    if signalled_this_run:
        assert a[1].limits["time_s"] == 60 and a[1].limits["charged_s"] == 20
        assert "resumes from its checkpoint" in a[1].reason and "not doubled" in a[1].reason
        assert fake.state["jobs"][jid]["time_s"] == 60
    else:  # the signal was an earlier run's: escalated as any timeout
        assert a[1].limits["time_s"] == 120 and "charged_s" not in a[1].limits


# ------------------------------------------------------------------ the job's own --signal with --requeue


def test_signal_declared_needs_a_lead_and_requeue():
    assert signal_declared(40, True)
    assert not signal_declared(40, None) and not signal_declared(40, False)  # no --requeue, or --no-requeue
    assert not signal_declared(0, True) and not signal_declared(None, True)  # @0: no time to checkpoint


def test_slurm_signal_at_is_the_lead_before_the_limit_once_reached():
    assert slurm_signal_at(120, 40, 121) == 80
    assert slurm_signal_at(120, 40, 79) is None  # ended before Slurm's signal: nothing checkpointed
    assert slurm_signal_at(60, 600, 60) == 0  # a lead over the limit signals at the start
    for bad in ((None, 40, 120), (120, None, 120), (120, 0, 120), (120, 40, None), (0, 40, 10), (120, -5, 120)):
        assert slurm_signal_at(*bad) is None, bad


@pytest.mark.parametrize(
    "requeue_opt, slurm_requeue, resumes",
    [(True, "1", True), (None, "1", False), (False, "1", False), (True, "0", False)],
)
def test_a_timeout_after_the_jobs_own_signal_resumes_when_slurm_will_requeue_it(
    rstore, fake, requeue_opt, slurm_requeue, resumes
):
    """--signal=B:USR1@40 --requeue: Slurm signalled 40 s before the 60 s limit; charged those 40 s, not doubled."""
    ing = _machine(rstore, fake)
    jid = fake.add_job(time_s=60, mem_mb=100)
    st = fake.state
    st["jobs"][jid]["requeue"] = slurm_requeue
    fake._save(st)
    submission(fake, rstore, jid, original={"time_s": 600, "signal_s": 40, "requeue": requeue_opt})
    fake.end_run(jid, Outcome.TIMEOUT)
    ing.poll_once()
    a = rstore.attempts(jid)
    assert [(r.attempt, r.step) for r in a] == [(1, "done"), (2, "requeued")]
    assert not any(r.kind == CHECKPOINT_SIGNAL for r in rstore.limit_changes(jid))  # harpd sent and recorded none
    if resumes:
        assert a[1].limits["time_s"] == 60 and a[1].limits["charged_s"] == 40
        assert "resumes from its checkpoint" in a[1].reason
    else:  # not declared, or Slurm would not requeue it: escalated as any timeout
        assert a[1].limits["time_s"] == 120 and "charged_s" not in a[1].limits
