"""Ingestor with a fake Slurm and a real store: idempotence, durability, backoff."""

from __future__ import annotations

import pytest
from ingest_helpers import rec

from harpd.config import HarpSettings
from harpd.ingest.poller import CURSOR_KEY, UNANNOUNCED_KEY, WATCH_KEY, Ingestor
from harpd.protocol import Decision, Resources
from harpd.records import Outcome
from harpd.store import StoreError
from tests.helpers.fake_slurm import FakeSlurm


def settings(**ingest):
    return HarpSettings(ingest={"poll_interval_s": 10, "max_backoff_s": 100, **ingest})


def submit(store, job_id, decision=None, job=None, submitted_at=None, verified=True):
    """A registration as harpd stores it once slurmctld vouched for it (``verified``)."""
    store.add_submission(
        job_id,
        1000,
        "alice",
        job or {"signature": f"sig-{job_id}"},
        Resources(),
        Resources(),
        (None if decision is None else Decision.model_validate(decision)),
        verified=verified,
    )
    if submitted_at is not None:
        store.db.conn.execute("UPDATE submissions SET submitted_at = ? WHERE job_id = ?", (submitted_at, job_id))


def stored(store):
    return {(r.job_id, r.attempt): r for r in store.iter_jobs(finished_only=False, order=None)}


def test_poll_records_finished_submissions_once(store):
    be = FakeSlurm([rec("1"), rec("2", Outcome.TIMEOUT, censored_time=True), rec("3", Outcome.RUNNING, end_time=None)])
    for j in ("1", "2", "3"):
        submit(store, j, decision={"changes": [{"option": "time", "value": "10:00"}]} if j == "2" else None)
    ing = Ingestor(store, be, settings())
    heard = []
    ing.on_outcome.append(heard.append)
    assert ing.poll_once() == 2
    assert be.sacct_calls[0][0] == ["1", "2", "3"]  # only harp's jobs, learn_all_jobs is off
    got = stored(store)
    assert set(got) == {("1", 1), ("2", 1)}  # running jobs are never stored
    assert got[("2", 1)].harp_sized and not got[("1", 1)].harp_sized
    assert got[("1", 1)].signature == "sig-1"
    assert [r.job_id for r in heard] == ["1", "2"]
    assert store.get_submission("1").state == "done" and store.get_submission("2").outcome == "timeout"
    assert store.get_submission("3").state == "pending"
    # again: nothing new, nothing announced twice, nothing duplicated
    assert ing.poll_once() == 0
    assert len(heard) == 2 and store.count_jobs(finished_only=False) == 2
    # the running job ends
    be.records[2] = rec("3", Outcome.OOM, censored_mem=True)
    assert ing.poll_once() == 1
    assert [r.job_id for r in heard] == ["1", "2", "3"]
    assert store.get_submission("3").outcome == "oom"
    assert store.get_meta(UNANNOUNCED_KEY) == []


def test_an_unverified_registration_is_never_harp_sized(store):
    """A claim slurmctld never vouched for (a row from before harpd checked them) is not training data."""
    be = FakeSlurm([rec("4", Outcome.TIMEOUT, censored_time=True), rec("5", Outcome.TIMEOUT, censored_time=True)])
    submit(store, "4", decision={"changes": [{"option": "time", "value": "10:00"}]}, verified=False)
    submit(store, "5", decision={"changes": [{"option": "time", "value": "10:00"}]})
    Ingestor(store, be, settings()).poll_once()
    got = stored(store)
    assert not got[("4", 1)].harp_sized and got[("5", 1)].harp_sized


def test_learn_all_jobs_uses_and_advances_the_cursor(store):
    now = 10_000.0
    be = FakeSlurm([rec("10", end_time=now - 100), rec("11", end_time=now - 50_000)])
    ing = Ingestor(store, be, settings(learn_all_jobs=True, lookback_s=3600), clock=lambda: now)
    assert ing.poll_once() == 1  # 11 ended before the look-back window
    _, since, until, all_users = be.sacct_calls[-1]
    assert since <= now - 3600 and until == now and all_users
    assert store.get_meta(CURSOR_KEY) == now
    be.records.append(rec("12", end_time=now + 30))
    now += 60
    assert ing.poll_once() == 1
    assert be.sacct_calls[-1][1] < 10_000.0  # the next window overlaps the last one
    assert store.get_meta(CURSOR_KEY) == now
    assert {k[0] for k in stored(store)} == {"10", "12"}


def test_cursor_only_moves_with_a_committed_write(store, monkeypatch):
    now = 10_000.0
    be = FakeSlurm([rec("10", end_time=now - 100)])
    ing = Ingestor(store, be, settings(learn_all_jobs=True), clock=lambda: now)

    def broken(*a, **k):
        raise StoreError("harp.db: disk full; free space and retry")

    monkeypatch.setattr(store, "insert_jobs", broken)
    with pytest.raises(StoreError):
        ing.poll_once()
    assert store.get_meta(CURSOR_KEY) is None
    monkeypatch.undo()
    assert ing.poll_once() == 1 and store.get_meta(CURSOR_KEY) == now


def test_polls_counts_completed_polls_only(store, monkeypatch):
    """``polls`` (health's sign that harpd looked again) counts a poll once it has stored and announced."""
    be = FakeSlurm([rec("1")])
    submit(store, "1")
    ing = Ingestor(store, be, settings())
    heard: list[int] = []
    ing.on_outcome.append(lambda r: heard.append(ing.polls))
    assert ing.polls == 0
    ing.poll_once()
    assert ing.polls == 1 and heard == [0]  # the listener ran before the poll counted as done

    def broken(*a, **k):
        raise StoreError("harp.db: disk full; free space and retry")

    monkeypatch.setattr(store, "pending_submissions", broken)
    ing.tick()
    assert ing.polls == 1 and ing.failures == 1  # a failed poll has not looked
    monkeypatch.undo()
    ing._not_before = 0.0
    ing.tick()
    assert ing.polls == 2 and ing.failures == 0


def test_sacct_failure_writes_nothing_and_backs_off(store, monkeypatch):
    be = FakeSlurm([rec("1")])
    submit(store, "1")
    ing = Ingestor(store, be, settings())
    be.sacct_error = "sacct --json failed (exit 1): Problem talking to the database"
    t = [1000.0]
    monkeypatch.setattr("harpd.ingest.poller.time.monotonic", lambda: t[0])
    ing.tick()
    assert ing.failures == 1 and "Problem talking" in ing.last_error
    assert ing._not_before == 1000.0 + 20  # poll interval doubled
    n_calls = len(be.sacct_calls)
    ing.tick()  # still backing off: sacct is not asked
    assert len(be.sacct_calls) == n_calls
    for expected in (40, 80, 100, 100):  # doubling, capped at max_backoff_s
        t[0] = ing._not_before
        ing.tick()
        assert ing._not_before - t[0] == expected
    assert store.count_jobs() == 0 and store.get_submission("1").state == "pending"
    be.sacct_error = None
    t[0] = ing._not_before
    ing.tick()
    assert ing.failures == 0 and ing.last_error is None
    assert store.count_jobs() == 1 and store.get_submission("1").state == "done"


def test_crash_after_commit_announces_at_restart(store):
    be = FakeSlurm([rec("1"), rec("2")])
    submit(store, "1")
    submit(store, "2")
    first = Ingestor(store, be, settings())

    def die(r):
        raise SystemExit("killed")  # not an Exception: stands in for SIGKILL

    first.on_outcome.append(die)
    with pytest.raises(SystemExit):
        first.poll_once()
    assert store.count_jobs() == 2  # committed
    assert sorted(k[1] for k in store.get_meta(UNANNOUNCED_KEY)) == ["1", "2"]
    assert store.get_submission("1").state == "pending"
    restarted = Ingestor(store, be, settings())
    heard = []
    restarted.on_outcome.append(heard.append)
    assert restarted.poll_once() == 0  # nothing new to store...
    assert sorted(r.job_id for r in heard) == ["1", "2"]  # ...but both announced
    assert heard[0].signature == "sig-1" and heard[0].outcome is Outcome.COMPLETED
    assert store.get_meta(UNANNOUNCED_KEY) == []
    assert store.get_submission("1").state == "done"
    assert store.count_jobs() == 2


def test_a_failing_listener_does_not_stop_the_others(store):
    submit(store, "1")
    ing = Ingestor(store, FakeSlurm([rec("1")]), settings())
    heard = []
    ing.on_outcome.append(lambda r: 1 / 0)
    ing.on_outcome.append(heard.append)
    assert ing.poll_once() == 1 and len(heard) == 1
    assert store.get_meta(UNANNOUNCED_KEY) == []


@pytest.mark.parametrize("release", ["22.05", "26.05"])
def test_requeued_runs_get_their_own_attempts(store, release):
    """A job requeued in place: run 1 (timeout) stored, then run 2 appears."""
    be = FakeSlurm([rec("5", Outcome.TIMEOUT, start_time=1000.0, censored_time=True)])
    submit(store, "5")
    ing = Ingestor(store, be, settings())
    assert ing.poll_once() == 1
    ing.watch("5")
    assert store.get_meta(WATCH_KEY) == {"5": 2}
    # sacct --duplicates now: run 1 rewritten as REQUEUED (22.05) or still TIMEOUT (25.11, 26.05),
    # run 2 running, then done
    first = (
        rec("5", Outcome.PREEMPTED, state="REQUEUED", start_time=1000.0, attempt=1)
        if release == "22.05"
        else rec("5", Outcome.TIMEOUT, start_time=1000.0, censored_time=True, attempt=1)
    )
    be.records = [
        first,
        rec("5", Outcome.RUNNING, start_time=2000.0, end_time=None, attempt=2),
    ]
    assert ing.poll_once() == 0
    assert stored(store)[("5", 1)].outcome is Outcome.TIMEOUT  # not overwritten by REQUEUED
    be.records[1] = rec("5", Outcome.COMPLETED, start_time=2000.0, attempt=2, req_time_s=1800.0)
    assert ing.poll_once() == 1
    got = stored(store)
    assert got[("5", 1)].outcome is Outcome.TIMEOUT and got[("5", 2)].outcome is Outcome.COMPLETED
    assert not got[("5", 1)].harp_sized
    # the closed submission still describes the job; recovery's new limits make run 2 harp-sized
    assert got[("5", 2)].signature == "sig-5" and got[("5", 2)].harp_sized
    assert store.get_meta(WATCH_KEY) == {}


def test_window_query_missing_the_first_run_still_numbers_right(store):
    """sacct only shows run 2 (a window after run 1): the store knows run 1."""
    now = 10_000.0
    be = FakeSlurm([rec("7", Outcome.TIMEOUT, start_time=1000.0, end_time=now - 10)])
    ing = Ingestor(store, be, settings(learn_all_jobs=True), clock=lambda: now)
    ing.poll_once()
    be.records = [rec("7", Outcome.COMPLETED, start_time=5000.0, end_time=now + 50, attempt=1)]
    now += 100
    assert ing.poll_once() == 1
    assert {k: r.outcome for k, r in stored(store).items()} == {("7", 1): Outcome.TIMEOUT, ("7", 2): Outcome.COMPLETED}


def test_resubmission_under_a_new_id_takes_the_chain_attempt(store):
    submit(store, "100")
    store.add_attempt("100", 1, "100", {}, "first", "done")
    store.add_attempt("100", 2, "101", {"time_s": 7200}, "timeout: doubled time", "submitted")
    submit(store, "101")
    ing = Ingestor(store, FakeSlurm([rec("100", Outcome.TIMEOUT), rec("101")]), settings())
    ing.poll_once()
    assert set(stored(store)) == {("100", 1), ("101", 2)}


def test_array_submission_closed_when_every_task_ended(store):
    be = FakeSlurm([rec("20_1"), rec("20_2", Outcome.RUNNING, end_time=None)])
    submit(store, "20", job={"array_size": 2, "signature": "arr"})
    ing = Ingestor(store, be, settings())
    assert ing.poll_once() == 1
    assert store.get_submission("20").state == "pending"
    assert stored(store)[("20_1", 1)].array_size == 2
    be.records[1] = rec("20_2", Outcome.OOM)
    assert ing.poll_once() == 1
    sub = store.get_submission("20")
    assert sub.state == "done" and sub.outcome == "oom"  # the one needing attention


def test_submissions_sacct_never_heard_of(store):
    now = 100_000.0
    submit(store, "30", submitted_at=now - 10)
    submit(store, "31", submitted_at=now - 90_000)
    submit(store, "not-a-job")
    ing = Ingestor(store, FakeSlurm([]), settings(lookback_s=86400), clock=lambda: now)
    ing.poll_once()
    assert store.get_submission("30").state == "pending"  # may still show up
    assert store.get_submission("31").outcome == "unknown"
    assert store.get_submission("not-a-job").outcome == "unknown"


def test_changed_outcome_is_rewritten(store):
    """An outcome that changes for the same run (e.g. sacct caught up) is updated, once."""
    be = FakeSlurm([rec("40", Outcome.FAILED)])
    ing = Ingestor(store, be, settings(learn_all_jobs=True), clock=lambda: 1_000.0)
    ing.poll_once()
    be.records = [rec("40", Outcome.OOM, censored_mem=True)]
    assert ing.poll_once() == 1
    assert stored(store)[("40", 1)].outcome is Outcome.OOM and store.count_jobs() == 1


def test_schedule_adds_one_interval_job(store):
    from harpd.daemon.scheduler import Scheduler

    sched = Scheduler()  # the daemon's
    sched.jobs.start(paused=True)  # nothing runs
    try:
        ing = Ingestor(store, FakeSlurm([]), settings())
        job = ing.schedule(sched)
        ing.schedule(sched)  # replace, not add
        jobs = sched.get_jobs()
        assert len(jobs) == 1 and jobs[0].id == job.id
        assert job.trigger.interval.total_seconds() == 10 and job.max_instances == 1 and job.coalesce
    finally:
        sched.shutdown()
    assert not sched.running


def test_listeners_given_at_construction_hear_the_outcomes_a_killed_predecessor_left(store):
    """The daemon builds the poller with its listeners: they hear the first poll, leftovers included."""
    be = FakeSlurm([rec("1"), rec("2")])
    submit(store, "1")
    submit(store, "2")

    def die(r):
        raise SystemExit("killed")  # not an Exception: stands in for SIGKILL

    with pytest.raises(SystemExit):
        Ingestor(store, be, settings(), listeners=[die]).poll_once()
    heard: list[str] = []
    learnt: list[str] = []
    restarted = Ingestor(
        store,
        be,
        settings(),
        listeners=[lambda r: heard.append(r.job_id)],
        learners=[lambda rs: learnt.extend(r.job_id for r in rs)],
    )
    assert restarted.poll_once() == 0
    assert sorted(heard) == ["1", "2"] and learnt == []  # announced again; learnt only as they were stored


def test_half_written_records_wait_for_slurmdbd(store):
    """A run without partition or MaxRSS right after its end is looked at again, not stored."""
    now = [10_000.0]
    partial = rec("50", partition=None, end_time=now[0] - 2, used_mem_mb=None, job_name="allocation")
    be = FakeSlurm([partial])
    submit(store, "50")
    ing = Ingestor(store, be, settings(), clock=lambda: now[0])
    assert ing.poll_once() == 0
    assert store.count_jobs() == 0 and store.get_submission("50").state == "pending"
    be.records = [rec("50", end_time=now[0] - 2, used_mem_mb=None)]  # partition in, MaxRSS not yet
    assert ing.poll_once() == 0
    be.records = [rec("50", end_time=now[0] - 2, job_name="ing")]
    assert ing.poll_once() == 1
    assert stored(store)[("50", 1)].partition == "short" and store.get_submission("50").state == "done"


def test_records_that_never_complete_are_taken_after_a_while(store):
    now = [10_000.0]
    be = FakeSlurm([rec("60", partition=None, used_mem_mb=None, end_time=now[0] - 5)])
    ing = Ingestor(store, be, settings(learn_all_jobs=True), clock=lambda: now[0])
    assert ing.poll_once() == 0
    now[0] += 120  # no memory accounting on this site: taken as it is
    assert ing.poll_once() == 1


def test_a_job_too_short_for_a_memory_sample_is_taken_soon(store):
    now = [10_000.0]
    be = FakeSlurm([rec("70", used_mem_mb=None, end_time=now[0] - 1)])
    ing = Ingestor(store, be, settings(learn_all_jobs=True), clock=lambda: now[0])
    assert ing.poll_once() == 0
    now[0] += 15
    assert ing.poll_once() == 1 and stored(store)[("70", 1)].used_mem_mb is None


def test_a_run_stored_while_running_and_then_requeued_gets_its_real_end(store):
    """#45 D: a run seen RUNNING, then held and requeued by harp (REQUEUED on 22.05, its step killed for
    memory), is stored with that end, not left RUNNING for good."""
    be = FakeSlurm([rec("6", Outcome.OOM, start_time=1000.0)])
    submit(store, "6")
    ing = Ingestor(store, be, settings())
    ing.poll_once()
    ing.watch("6")
    be.records = [
        rec("6", Outcome.PREEMPTED, state="REQUEUED", start_time=1000.0, attempt=1),
        rec("6", Outcome.RUNNING, state="RUNNING", start_time=2000.0, end_time=None, attempt=2),
    ]
    ing.poll_once()
    be.records[1] = rec("6", Outcome.OOM, state="REQUEUED", start_time=2000.0, attempt=2)
    be.records.append(rec("6", Outcome.RUNNING, state="RUNNING", start_time=3000.0, end_time=None, attempt=3))
    ing.poll_once()
    got = stored(store)
    assert got[("6", 1)].outcome is Outcome.OOM and got[("6", 2)].outcome is Outcome.OOM, got
