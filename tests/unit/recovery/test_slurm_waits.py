"""A slow or stopped Slurm delays recovery, never ends it (issue #50).

Recovery against the fake Slurm through the real ingest poller, with a clock
the test moves: ``SlurmUnavailable`` (no answer in time) and
``NotRecordedYet`` (accounting has no record of the job yet) are waited for,
backing off, far past ``MAX_FAILURES`` tries, with one log line per change of
state; the attempt is then carried out exactly once.  Only "no record" for
the whole ``recovery.slurm_wait_h`` ends a chain, and ``harp status`` says so.
A real refusal still counts towards ``MAX_FAILURES`` (test_resubmit.py).
"""

from __future__ import annotations

import json
import logging
import os
import time

from resubmit_fakes import fake, store, submission  # noqa: F401 (fixtures)

from harpd import protocol as p
from harpd.cli.health_cmd import render as render_health
from harpd.cli.status_cmd import render as render_status
from harpd.config import HarpSettings
from harpd.daemon.handlers import Handlers, Peer
from harpd.ingest.poller import Ingestor
from harpd.records import Outcome
from harpd.recovery import machine as rs
from harpd.recovery.waiting import MAX_PAUSE_S
from harpd.report.status_view import JobStatus

ME = os.geteuid()
NO_ENV = "no environment of job {}: accounting has no record of the job (yet)"
NO_ANSWER = "sbatch --parsable gave no answer within 30 s (slurm.command_timeout_s); is slurmctld/slurmdbd up?"


class Clock:
    """Recovery's clock, moved by the test (starts now: the fake's runs end in real time)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def after(self, seconds: float) -> None:
        self.now += seconds


def machine(store, fake, mode, clock, **recovery):
    settings = HarpSettings(ingest={"poll_interval_s": 5}, recovery={"mode": mode, **recovery})
    ing = Ingestor(store, fake, settings)
    rec = rs.Recovery(store, fake, settings, watch=ing.watch, clock=clock)
    ing.on_outcome.append(rec.on_outcome)
    return ing, rec


def attempt(store, chain, n):
    return {a.attempt: a for a in store.attempts(chain)}[n]


def lines(caplog, text):
    return [r for r in caplog.records if text in r.getMessage()]


def _health(store, rec):
    """What harpd's ``health`` operation says of recovery's waits."""
    h = Handlers(store)
    h.recovery = rec
    peer = Peer(pid=10, uid=1000, gid=1000, user="alice", groups=frozenset({1000}))
    return h.handle(peer, p.parse_request(json.dumps({"op": "health", "v": 1}))).recovery


def oom_job(fake, store):
    jid = fake.add_job(uid=ME, user="me", time_s=600, mem_mb=100)
    submission(fake, store, jid)
    return jid


def test_accounting_without_a_record_for_an_hour_is_waited_for_then_resubmitted_once(store, fake, caplog):
    caplog.set_level(logging.INFO, logger="harpd.recovery")
    clock = Clock()
    ing, rec = machine(store, fake, "resubmit", clock)
    jid = oom_job(fake, store)
    fake.fail_next("job_env", NO_ENV.format(jid), once=False, kind="not_recorded")
    fake.end_run(jid, Outcome.OOM)
    ing.poll_once()
    tries = 3 * rs.MAX_FAILURES
    for _ in range(tries):
        clock.after(MAX_PAUSE_S)  # past any back-off
        rec.resume()
    a = attempt(store, jid, 2)
    assert a.step == "decided" and a.limits.get("failures") is None
    assert "accounting has no record" in a.limits["waiting"] and a.limits["missing_since"] is not None
    assert len(fake.calls("job_env")) == tries + 1 and fake.calls("submit") == []
    [w] = rec.waiting_on_slurm()
    assert w.kind == "accounting has no record yet" and w.tries == tries + 1
    health = _health(store, rec)
    assert health.waiting_on_slurm == 1 and "accounting has no record" in health.last_error
    assert len(lines(caplog, "waits on Slurm")) == 1  # one line when the wait began, none per try
    assert lines(caplog, "not carried out yet") == []

    fake.heal("job_env")
    clock.after(MAX_PAUSE_S)
    rec.resume()
    a = attempt(store, jid, 2)
    assert a.step == "submitted" and len(fake.calls("submit")) == 1
    assert "waiting" not in a.limits and a.limits["waited_s"] >= tries * MAX_PAUSE_S
    assert rec.waiting_on_slurm() == [] and _health(store, rec).waiting_on_slurm == 0
    assert len(lines(caplog, "Slurm answered again")) == 1
    clock.after(MAX_PAUSE_S)
    rec.resume()
    assert len(fake.calls("submit")) == 1  # exactly once
    # the user's environment went with it (Slurm's copy, not harpd's)
    assert fake.state["jobs"][attempt(store, jid, 2).job_id]["env"] == fake.state["jobs"][jid]["env"]


def test_a_slurm_that_does_not_answer_is_asked_again_with_back_off(store, fake):
    clock = Clock()
    ing, rec = machine(store, fake, "resubmit", clock)
    jid = oom_job(fake, store)
    fake.fail_next("job_env", "sacct --env-vars --jobs gave no answer within 30 s", once=False, kind="unavailable")
    fake.end_run(jid, Outcome.OOM)
    ing.poll_once()
    asked = [len(fake.calls("job_env"))]
    for step in (1.0, 3.0, 1.5, 4.0, 5.0, 9.0, 2.0):
        clock.after(step)
        rec.resume()
        asked.append(len(fake.calls("job_env")))
    # first pause the poll interval (5 s), then doubled (10 s): asked at 5.5 s and 23.5 s, not on every tick
    assert asked == [1, 1, 1, 2, 2, 2, 3, 3]
    assert attempt(store, jid, 2).step == "decided"


def test_no_record_for_slurm_wait_h_ends_the_chain_and_status_says_so(store, fake, caplog):
    caplog.set_level(logging.INFO, logger="harpd.recovery")
    clock = Clock()
    ing, rec = machine(store, fake, "resubmit", clock, slurm_wait_h=1)
    jid = oom_job(fake, store)
    fake.fail_next("job_env", NO_ENV.format(jid), once=False, kind="not_recorded")
    fake.end_run(jid, Outcome.OOM)
    ing.poll_once()
    began = clock.now
    while clock.now + MAX_PAUSE_S < began + 3600 - 1:
        clock.after(MAX_PAUSE_S)
        rec.resume()
        assert attempt(store, jid, 2).step == "decided"
    clock.after(2 * MAX_PAUSE_S)
    rec.resume()
    a = attempt(store, jid, 2)
    assert a.step == "done" and a.outcome == "not_submitted" and fake.calls("submit") == []
    assert "Slurm no longer knows the job" in a.limits["stop"] and "recovery.slurm_wait_h" in a.limits["stop"]
    assert rec.waiting_on_slurm() == [] and len(lines(caplog, "given up")) == 1
    attempts = [{"attempt": r.attempt, "job_id": r.job_id, "step": r.step, "outcome": r.outcome,
                 "limits": r.limits, "reason": r.reason} for r in store.attempts(jid)]  # fmt: skip
    text = render_status(JobStatus(job_id=jid, user="me", attempts=tuple(attempts)))
    assert "stopped: Slurm no longer knows the job: no environment of job" in text


def test_a_slurm_that_answers_nothing_never_ends_the_chain(store, fake):
    clock = Clock()
    ing, rec = machine(store, fake, "resubmit", clock, slurm_wait_h=1)
    jid = oom_job(fake, store)
    fake.fail_next("submit", NO_ANSWER, once=False, kind="unavailable")
    fake.end_run(jid, Outcome.OOM)
    ing.poll_once()
    for _ in range(int(3 * 3600 / MAX_PAUSE_S)):  # three times the window
        clock.after(MAX_PAUSE_S)
        rec.resume()
    a = attempt(store, jid, 2)
    assert a.step == "decided" and "stop" not in a.limits and "gave no answer" in a.limits["waiting"]
    fake.heal("submit")
    clock.after(MAX_PAUSE_S)
    rec.resume()
    assert attempt(store, jid, 2).step == "submitted" and len(fake.calls("submit")) > 1
    assert len(fake.state["jobs"]) == 2  # the first job and one resubmission


def test_sbatch_that_timed_out_after_slurmctld_took_the_job_is_not_submitted_twice(store, fake):
    clock = Clock()
    ing, rec = machine(store, fake, "resubmit", clock)
    jid = oom_job(fake, store)
    fake.fail_next("submit", NO_ANSWER, after=True, kind="unavailable")
    fake.end_run(jid, Outcome.OOM)
    ing.poll_once()
    assert attempt(store, jid, 2).step == "decided" and len(fake.state["jobs"]) == 2
    clock.after(MAX_PAUSE_S)
    rec.resume()
    a = attempt(store, jid, 2)
    assert a.step == "submitted" and len(fake.state["jobs"]) == 2  # found by its marker, adopted
    assert a.job_id in fake.state["jobs"]


def test_a_requeue_waits_for_slurmctld_and_happens_once(store, fake, caplog):
    caplog.set_level(logging.INFO, logger="harpd.recovery")
    clock = Clock()
    ing, rec = machine(store, fake, "requeue", clock)
    jid = fake.add_job(time_s=600, mem_mb=100)
    submission(fake, store, jid)
    fake.fail_next(
        "requeue_hold",
        "scontrol requeuehold failed (exit 1): Unexpected message received",
        once=False,
        kind="unavailable",
    )
    fake.end_run(jid, Outcome.OOM)
    ing.poll_once()
    for _ in range(2 * rs.MAX_FAILURES):
        clock.after(MAX_PAUSE_S)
        rec.resume()
    a = attempt(store, jid, 2)
    assert a.step == "decided" and a.limits.get("failures") is None and a.limits["waiting"]
    fake.heal("requeue_hold")
    clock.after(MAX_PAUSE_S)
    rec.resume()
    assert attempt(store, jid, 2).step == "requeued"
    assert fake.state["jobs"][jid]["restarts"] == 1  # requeued once
    assert len(lines(caplog, "waits on Slurm")) == 1 and len(lines(caplog, "answered again")) == 1


def test_a_decision_waits_for_slurmctld_too(store, fake):
    clock = Clock()
    ing, rec = machine(store, fake, "requeue", clock)
    jid = fake.add_job(time_s=600, mem_mb=100)
    submission(fake, store, jid)
    fake.end_run(jid, Outcome.OOM)
    fake.fail_next("show_job", "slurm_load_jobs error: Socket timed out on send/recv operation", once=False,
                   kind="unavailable")  # fmt: skip
    ing.poll_once()  # the outcome is heard while slurmctld does not answer: nothing decided yet
    assert 2 not in {a.attempt for a in store.attempts(jid)}
    assert len(rec.waiting_on_slurm()) == 1
    for _ in range(rs.MAX_FAILURES + 5):
        clock.after(MAX_PAUSE_S)
        rec.resume()
    assert 2 not in {a.attempt for a in store.attempts(jid)}
    fake.heal("show_job")
    clock.after(MAX_PAUSE_S)
    rec.resume()
    assert attempt(store, jid, 2).step == "requeued" and rec.waiting_on_slurm() == []


def test_health_counts_the_attempts_waiting_on_slurm():
    text = render_health(
        {
            "version": "1",
            "recovery": {
                "waiting_on_slurm": 2,
                "waiting_since": time.time() - 600,
                "last_error": "sacct gave no answer",
            },
        }
    )
    assert (
        "  Slurm waits: 2 recovery attempt(s) waiting on Slurm, the longest for 10 min: sacct gave no answer\n" in text
    )
    quiet = render_health({"version": "1", "recovery": {"waiting_on_slurm": 0}})
    assert "  Slurm waits: 0 recovery attempt(s) waiting on Slurm\n" in quiet
    assert "Slurm waits" not in render_health({"version": "1"})  # recovery off


def test_status_says_an_attempt_waits_on_slurm():
    limits = {"time_s": 600, "mem_mb": 200, "mode": "resubmit", "waiting": "sacct gave no answer",
              "waiting_since": time.time() - 120}  # fmt: skip
    attempt = {"attempt": 2, "step": "decided", "limits": limits, "reason": "x"}
    text = render_status(JobStatus(job_id="7", user="me", attempts=(attempt,)))
    assert "waiting on Slurm for 2 min: sacct gave no answer" in text
