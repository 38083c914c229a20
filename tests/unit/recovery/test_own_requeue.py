"""A job that requeues itself (submitit's checkpoint) is followed run by run, and recovery counts only its
own requeues as attempts (#51), against a fake Slurm through the real ingest poller."""

from __future__ import annotations

from resubmit_fakes import fake, fake_of_each_release, store, submission  # noqa: F401 (fixtures)

from harpd.config import HarpSettings
from harpd.features.usage import usage_of
from harpd.ingest.poller import Ingestor
from harpd.records import Outcome
from harpd.recovery import machine as rs


def machine(store, fake):
    settings = HarpSettings(ingest={"poll_interval_s": 5}, recovery={"mode": "requeue"})
    ing = Ingestor(store, fake, settings)
    rec = rs.Recovery(store, fake, settings, watch=ing.watch)
    ing.on_outcome.append(rec.on_outcome)
    return ing, rec


def _runs(store, jid):
    return sorted((r.attempt, r.state, r.outcome) for r in store.iter_jobs() if r.job_id == jid)


def test_a_job_that_requeues_itself_twice_is_stored_run_by_run_and_its_completed_run_learnt(
    store, fake_of_each_release
):
    fake = fake_of_each_release
    ing, _ = machine(store, fake)
    jid = fake.add_job(time_s=600, mem_mb=1000)
    submission(fake, store, jid)
    for _ in range(2):
        fake.own_requeue(jid, used_mem_mb=300)
        ing.poll_once()
        assert store.get_submission(jid).outcome is None  # still open: the job runs again
    fake.end_run(jid, Outcome.COMPLETED, used_mem_mb=320)
    ing.poll_once()
    runs = _runs(store, jid)
    assert [(a, o) for a, _, o in runs] == [(1, Outcome.PREEMPTED), (2, Outcome.PREEMPTED), (3, Outcome.COMPLETED)]
    assert store.get_submission(jid).outcome == "completed"
    requeued = [r for r in store.iter_jobs() if r.job_id == jid and r.attempt < 3]
    # a run its own requeue ended is no sample and no sign of a failure; the completed one is a sample
    assert all(usage_of(r, "mem") is None for r in requeued)
    done = store.get_job(jid)
    u = usage_of(done, "mem")
    assert u is not None and not u.censored and u.used == 320
    assert done.signature == "sig-" + fake.state["jobs"][jid]["name"]
    assert store.attempts(jid) == []  # recovery never opened a chain: nothing failed
    assert not fake.calls("requeue_hold")


def test_recovery_matches_its_attempts_to_the_runs_it_caused(store, fake_of_each_release):
    """#51's reproduction: run 1 requeues itself, run 2 runs out of memory, harp requeues it once with more
    memory, run 3 completes: attempt 2 is run 3, and nothing runs after it."""
    fake = fake_of_each_release
    ing, _ = machine(store, fake)
    jid = fake.add_job(time_s=600, mem_mb=100)
    submission(fake, store, jid)
    fake.own_requeue(jid)
    ing.poll_once()
    fake.end_run(jid, Outcome.OOM, used_mem_mb=100)
    ing.poll_once()
    a = store.attempts(jid)
    assert [(r.attempt, r.step, r.outcome) for r in a] == [(1, "done", "oom"), (2, "requeued", None)]
    assert len(fake.calls("requeue_hold")) == 1
    fake.end_run(jid, Outcome.COMPLETED, used_mem_mb=150)
    ing.poll_once()
    ing.poll_once()
    a = store.attempts(jid)
    assert [(r.attempt, r.step, r.outcome) for r in a] == [(1, "done", "oom"), (2, "done", "completed")]
    assert len(fake.calls("requeue_hold")) == 1  # the completed function is never run again
    assert [o for _, _, o in _runs(store, jid)] == [Outcome.PREEMPTED, Outcome.OOM, Outcome.COMPLETED]


def test_an_own_requeue_inside_a_harp_attempt_keeps_the_attempt(store, fake_of_each_release):
    """Attempt 2's run requeues itself, then runs out of memory again: that is attempt 2's outcome, and
    attempt 3 follows; the requeued run is no attempt's end."""
    fake = fake_of_each_release
    ing, _ = machine(store, fake)
    jid = fake.add_job(time_s=600, mem_mb=100)
    submission(fake, store, jid)
    fake.end_run(jid, Outcome.OOM, used_mem_mb=100)
    ing.poll_once()
    fake.own_requeue(jid)
    ing.poll_once()
    a = store.attempts(jid)
    assert [(r.attempt, r.step, r.outcome) for r in a] == [(1, "done", "oom"), (2, "requeued", None)]
    fake.end_run(jid, Outcome.OOM, used_mem_mb=200)
    ing.poll_once()
    a = store.attempts(jid)
    assert [(r.attempt, r.outcome) for r in a][:2] == [(1, "oom"), (2, "oom")]
    assert len(a) == 3 and len(fake.calls("requeue_hold")) == 2
