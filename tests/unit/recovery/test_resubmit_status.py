"""``harp status JOBID``: the attempts, their limits, outcomes and reasons."""

from __future__ import annotations

import json
import os

import pytest
from resubmit_fakes import FakeSlurm, submission

from harpd.cli.main import main as harp
from harpd.config import HarpSettings
from harpd.ingest.poller import Ingestor
from harpd.records import Outcome
from harpd.recovery.machine import Recovery
from harpd.report.status_view import JobStatus
from harpd.store import Store


@pytest.fixture
def chain(tmp_path, no_harpd):
    """A resubmit chain: OOM at 100M, OOM at 200M, completed at 400M; and a tiny-partition stop."""
    db = tmp_path / "harp.db"
    store = Store.open(db)
    fake = FakeSlurm(tmp_path / "slurm.json")
    settings = HarpSettings(recovery={"mode": "resubmit"})
    ing = Ingestor(store, fake, settings)
    rec = Recovery(store, fake, settings, watch=ing.watch)
    ing.on_outcome.append(rec.on_outcome)
    jid = fake.add_job(uid=os.geteuid(), user="me", mem_mb=100)
    submission(fake, store, jid)
    fake.end_run(jid, Outcome.OOM)
    ing.poll_once()
    j2 = store.attempts(jid)[1].job_id
    fake.end_run(j2, Outcome.OOM)
    ing.poll_once()
    j3 = store.attempts(jid)[2].job_id
    fake.end_run(j3, Outcome.COMPLETED)
    ing.poll_once()
    tiny = fake.add_job(uid=os.geteuid(), user="me", time_s=180, partition="tiny")
    submission(fake, store, tiny)
    fake.end_run(tiny, Outcome.TIMEOUT)
    ing.poll_once()
    store.close()
    return db, jid, j2, j3, tiny


def test_status_lists_every_attempt_with_limits_outcome_and_reason(chain, capsys):
    db, jid, j2, j3, _ = chain
    assert harp(["status", j2, "--direct", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"job {j2}: me, attempt of job {jid}" in out
    assert "recovery:      3 attempt(s)" in out
    assert f"#1  job {jid}  done  oom  [time 1 min, mem 100M, partition short]\n" in out
    assert f"#2  job {j2}  done  oom  [time 1 min, mem 200M, partition short]  resubmitted as a new job" in out
    assert f"#3  job {j3}  done  completed  [time 1 min, mem 400M, partition short]  resubmitted" in out
    assert "harp changed:  --mem 100M -> 200M" in out and "last outcome:  oom (Slurm OUT_OF_MEMORY)" in out
    assert "why: first run; recovered because the script opted in (#HARP retry)" in out
    assert "why: ran out of mem; doubled mem; attempt 2 of 3: memory 100M -> 200M" in out
    assert f"Slurm comment: harp retry 3 of {jid}" in out
    assert "stopped:" not in out


def test_status_says_why_a_chain_stopped(chain, capsys):
    db, *_, tiny = chain
    assert harp(["status", tiny, "--direct", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert (
        "stopped: ran out of time at the cap, partition tiny MaxTime = 3 min: cannot raise further; not resubmitted"
        in out
    )


def test_status_json(chain, capsys):
    db, jid, *_ = chain
    assert harp(["status", jid, "--json", "--direct", "--db", str(db)]) == 0
    job = json.loads(capsys.readouterr().out)
    assert [a["limits"]["mem_mb"] for a in job["attempts"]] == [100, 200, 400]
    assert job["chain_id"] == jid and job["registered"] is True


def test_status_falls_back_to_the_store_when_harpd_is_down(chain, capsys, tmp_path, monkeypatch):
    db, jid, *_ = chain
    monkeypatch.setenv("HARP_STORE__PATH", str(db))
    assert harp(["status", jid]) == 0
    cap = capsys.readouterr()
    assert "harpd is not running" in cap.err and "read the store directly" in cap.err
    assert "3 attempt(s)" in cap.out


def test_status_bad_input(chain, capsys):
    db, *_ = chain
    assert harp(["status", "12x", "--direct", "--db", str(db)]) == 2
    assert "'12x' is not a Slurm job id" in capsys.readouterr().err
    assert harp(["status", "424242", "--direct", "--db", str(db)]) == 2
    assert "harp knows no job 424242" in capsys.readouterr().err
    assert harp(["status", "1", "--direct", "--db", str(db) + ".missing"]) == 2
    assert "cannot open the store " in capsys.readouterr().err


def test_status_of_a_job_without_recovery(tmp_path, capsys):
    store = Store.open(tmp_path / "h.db")
    fake = FakeSlurm(tmp_path / "s.json")
    jid = fake.add_job(uid=os.geteuid(), user="me")
    submission(fake, store, jid)
    store.close()
    assert harp(["status", jid, "--direct", "--db", str(tmp_path / "h.db")]) == 0
    out = capsys.readouterr().out
    assert "recovery:      none" in out and "asked for:     time 1 min, mem 100M" in out


def _attempt_lines(attempts):
    from harpd.cli.status_cmd import render

    text = render(JobStatus(job_id="35", user="alice", attempts=tuple(attempts)))
    return [ln for ln in text.splitlines() if ln.startswith("  #")]


def test_status_words_agree_with_the_attempts_step():
    first = {"attempt": 1, "job_id": "35", "step": "done", "outcome": "timeout", "limits": {"time_s": 60}}
    # decided, waiting on Slurm: to be resubmitted, not "resubmitted"
    waiting = {
        "attempt": 2,
        "job_id": None,
        "step": "decided",
        "outcome": None,
        "limits": {"time_s": 120, "mode": "resubmit", "last_error": "sacct failed", "failures": 3},
    }
    (_, line) = _attempt_lines([first, waiting])
    assert "(not submitted yet)" in line and "to be resubmitted as a new job" in line
    assert "  resubmitted as a new job" not in line
    # given up before sbatch: never submitted, and no word of a resubmission
    gave_up = {
        **waiting,
        "step": "done",
        "outcome": "not_submitted",
        "limits": {**waiting["limits"], "stop": "gave up after 20 failed tries: no batch script"},
    }
    (_, line) = _attempt_lines([first, gave_up])
    assert "(none: never submitted)" in line and "resubmitted" not in line and "not submitted yet" not in line
    # carried out: the new job and what happened
    done = {**waiting, "job_id": "36", "step": "submitted", "limits": {"time_s": 120, "mode": "resubmit"}}
    (_, line) = _attempt_lines([first, done])
    assert "job 36" in line and "resubmitted as a new job" in line and "not submitted" not in line
    # a requeue decided keeps the job id and says it is to come
    rq = {
        "attempt": 2,
        "job_id": "35",
        "step": "decided",
        "outcome": None,
        "limits": {"time_s": 120, "mode": "requeue"},
    }
    (_, line) = _attempt_lines([first, rq])
    assert "job 35" in line and "to be requeued in place" in line


def test_status_shows_where_each_attempts_output_is():
    from harpd.cli.status_cmd import render

    attempts = [
        {
            "attempt": 1,
            "job_id": "20",
            "step": "done",
            "outcome": "timeout",
            "limits": {"time_s": 60, "output": "/home/a/slurm-20.out"},
        },
        {
            "attempt": 2,
            "job_id": "20",
            "step": "done",
            "outcome": "completed",
            "limits": {"time_s": 120, "mode": "requeue", "output": "/home/a/slurm-20.out"},
        },
        {
            "attempt": 3,
            "job_id": "31",
            "step": "done",
            "outcome": "completed",
            "limits": {
                "time_s": 240,
                "mode": "resubmit",
                "output": "/home/a/out-31.txt",
                "error": "/home/a/err-31.txt",
            },
        },
    ]
    text = render(JobStatus(job_id="20", user="alice", attempts=tuple(attempts)))
    assert text.count("output: /home/a/slurm-20.out (the job's runs one after another)") == 2
    assert "output: /home/a/out-31.txt\n" in text and "errors: /home/a/err-31.txt" in text


def test_status_says_when_the_sites_accounting_keeps_no_copy_to_resubmit_from():
    from harpd.cli.status_cmd import render
    from harpd.recovery.site_accounting import read_site_accounting
    from harpd.slurm.base import Accounting

    class Slurm:
        def __init__(self, env):
            self.env = env

        def accounting(self):
            return Accounting(script=True, env=self.env, flags="job_script" + (",job_env" if self.env else ""))

    job = {"job_id": "7", "user": "alice", "registered": True, "attempts": []}
    lacking = render(JobStatus.from_json({**job, "accounting": read_site_accounting(Slurm(False)).as_health()}))
    assert "recoverable:   AccountingStoreFlags lacks job_env: a job that ran out can only be requeued" in lacking
    assert "recoverable:" not in render(
        JobStatus.from_json({**job, "accounting": read_site_accounting(Slurm(True)).as_health()})
    )
