"""Workflow tasks: harp's recovery and the manager's own retry never both run the work.

Driven as harpd does (the ingest poller with recovery as its listener) against
the fake Slurm.  A Snakemake task that ran out of harp's limit is requeued in
place (same job id, the one its manager watches) with its comment kept; once
the manager has submitted the task again itself, harp leaves the retry to it;
and it is never resubmitted under a new id the manager would not see.
"""

from __future__ import annotations

from resubmit_fakes import fake, registered_again, store, submission  # noqa: F401 (fixtures)

from harpd.config import HarpSettings
from harpd.ingest.poller import Ingestor
from harpd.records import Outcome
from harpd.recovery import machine as rs

T = Outcome.TIMEOUT


def _wrap(rule: str, sample: str, attempt: int = 1) -> str:
    return (
        f"python -m snakemake --snakefile Snakefile --target-jobs '{rule}:sample={sample}' "
        f"--allowed-rules {rule} --cores all --attempt {attempt} --mode remote"
    )


def machine(store, fake, mode: str):
    settings = HarpSettings(ingest={"poll_interval_s": 5}, recovery={"mode": mode})
    ing = Ingestor(store, fake, settings)
    rec = rs.Recovery(store, fake, settings, watch=ing.watch)
    ing.on_outcome.append(rec.on_outcome)
    return ing


def task_job(store, fake, rule: str, sample: str, attempt: int = 1) -> str:
    """A Snakemake task submitted through harp-submit, harp-sized (so recovery covers it)."""
    jid = fake.add_job(
        time_s=60, mem_mb=100, workdir="/home/alice/wf", name="run-uuid", comment=f"rule_{rule}_wildcards_{sample}"
    )
    submission(
        fake,
        store,
        jid,
        harp_lines=(),
        changes=[{"option": "time", "value": "1", "old": "20"}],
        original={"time_s": 1200, "mem_mb": 100, "partition": "short"},
    )
    sub = store.get_submission(jid)
    job = {**sub.job, "signature": None, "commands": [_wrap(rule, sample, attempt)]}
    registered_again(store, jid, job)
    return jid


def steps(store, chain):
    return [(a.attempt, a.step, a.outcome) for a in store.attempts(chain)]


def test_a_task_is_requeued_in_place_with_its_comment_kept(store, fake) -> None:
    ing = machine(store, fake, "requeue")
    jid = task_job(store, fake, "work", "s1")
    fake.end_run(jid, T)
    ing.poll_once()
    assert steps(store, jid) == [(1, "done", "timeout"), (2, "requeued", None)]
    assert fake.state["jobs"][jid]["comment"] == f"rule_work_wildcards_s1; harp retry 2 of {jid}"


def test_once_the_manager_retried_the_task_harp_does_not_requeue_it(store, fake) -> None:
    ing = machine(store, fake, "requeue")
    jid = task_job(store, fake, "work", "s1")
    fake.end_run(jid, T)
    retry = task_job(store, fake, "work", "s1", attempt=2)  # Snakemake saw TIMEOUT first (--retries)
    ing.poll_once()
    [first] = store.attempts(jid)
    assert first.outcome == "timeout" and f"submitted it again itself (job {retry})" in first.limits["stop"]
    assert fake.calls("requeue_hold") == [] and fake.calls("submit") == []


def test_another_sample_or_rule_is_no_retry(store, fake) -> None:
    ing = machine(store, fake, "requeue")
    jid = task_job(store, fake, "work", "s1")
    fake.end_run(jid, T)
    task_job(store, fake, "work", "s2")
    task_job(store, fake, "slow", "s1")
    ing.poll_once()
    assert steps(store, jid) == [(1, "done", "timeout"), (2, "requeued", None)]


def test_a_task_is_never_resubmitted_under_a_new_id(store, fake) -> None:
    ing = machine(store, fake, "resubmit")
    jid = task_job(store, fake, "work", "s1")
    fake.end_run(jid, T)
    ing.poll_once()
    [first] = store.attempts(jid)
    assert "tracks it by job id" in first.limits["stop"]
    assert fake.calls("submit") == []


def test_a_retry_registered_between_the_decision_and_the_requeue_is_left_the_task(store, fake) -> None:
    """Decided at the moment of acting: the requeue waits ``SETTLE_S`` after the decision, and the
    manager's retry registered meanwhile stops it (the work runs once, as the manager's)."""
    import time

    shift = [0.0]
    settings = HarpSettings(ingest={"poll_interval_s": 5}, recovery={"mode": "requeue"})
    ing = Ingestor(store, fake, settings)
    rec = rs.Recovery(store, fake, settings, watch=ing.watch, clock=lambda: time.time() + shift[0])
    ing.on_outcome.append(rec.on_outcome)
    jid = task_job(store, fake, "work", "s1")
    fake.end_run(jid, T, ago_s=0.5)  # harpd sees it within the second: decided, requeued after SETTLE_S
    ing.poll_once()
    assert steps(store, jid) == [(1, "done", "timeout"), (2, "decided", None)]
    retry = task_job(store, fake, "work", "s1", attempt=2)  # the manager saw the TIMEOUT meanwhile
    shift[0] = 10.0
    rec.resume()
    rows = store.attempts(jid)
    assert [r.step for r in rows] == ["done", "done"] and rows[1].outcome == "not_submitted", rows
    assert f"submitted it again itself (job {retry})" in rows[1].limits["stop"]
    assert fake.calls("requeue_hold") == []


def test_a_nextflow_task_is_left_to_its_error_strategy(store, fake) -> None:
    """Nextflow reads the task's .exitcode before any requeue: harp never runs the task a second time."""
    ing = machine(store, fake, "requeue")
    jid = fake.add_job(time_s=60, mem_mb=100, workdir="/home/alice/nf/work/ab/cdef", name="nf-FASTQC_(s1)")
    submission(
        fake,
        store,
        jid,
        harp_lines=(),
        changes=[{"option": "time", "value": "1", "old": "20"}],
        original={"time_s": 1200, "mem_mb": 100, "partition": "short"},
    )
    sub = store.get_submission(jid)
    job = {
        **sub.job,
        "signature": None,
        "commands": ["bash .command.run"],
        "job_name": "nf-FASTQC_(s1)",
        "script_name": ".command.run",
        "cwd": "/home/alice/nf/work/ab/cdef",
    }
    registered_again(store, jid, job)
    fake.end_run(jid, T)
    ing.poll_once()
    [first] = store.attempts(jid)
    assert first.outcome == "timeout" and "errorStrategy" in first.limits["stop"], first
    assert fake.calls("requeue_hold") == [] and fake.calls("submit") == []
