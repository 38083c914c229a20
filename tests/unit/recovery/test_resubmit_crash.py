"""Exactly once: harpd SIGKILLed at every step of recovery, then restarted.

A child process plays harpd (the real store, poller and recovery; a fake Slurm
kept in a file, so the "cluster" outlives the process) and is killed with
SIGKILL at one ``HARP_TEST_CRASH_AT`` point; a second child plays the
restarted harpd.  Afterwards Slurm must have been asked exactly once
(one requeue, or one new job carrying the marker comment) and the store must
link the attempt to it, and the chain must go on to its end as if nothing
had happened.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from resubmit_fakes import FakeSlurm, submission

from harpd.ingest.poller import WATCH_KEY
from harpd.records import Outcome
from harpd.recovery.crash import CRASH_ENV, CRASH_POINTS
from harpd.store import Store

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]

CHILD = textwrap.dedent(
    """\
    import sys
    sys.path.insert(0, sys.argv[4])
    from resubmit_fakes import FakeSlurm
    from harpd.config import HarpSettings
    from harpd.ingest.poller import Ingestor
    from harpd.recovery.machine import Recovery
    from harpd.store import Store

    db, state, mode = sys.argv[1:4]
    store = Store.open(db)
    fake = FakeSlurm(state)
    settings = HarpSettings(ingest={"poll_interval_s": 5}, recovery={"mode": mode})
    ing = Ingestor(store, fake, settings)
    rec = Recovery(store, fake, settings, watch=ing.watch)
    ing.on_outcome.append(rec.on_outcome)   # as harpd.daemon.main wires it: before the first poll
    ing.poll_once()                         # re-announces what a killed harpd left
    rec.resume()                            # the recovery tick
    print("ok")
    """
)

REQUEUE_POINTS = ["done", "decided", "held", "updated", "released", "committed"]
RESUBMIT_POINTS = ["done", "decided", "submitted", "committed"]


def harpd(tmp_path: Path, mode: str, crash: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV and not k.startswith("HARP_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    if crash:
        env[CRASH_ENV] = crash
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "harp.db"), str(tmp_path / "slurm.json"), mode, str(HERE)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def killed(proc: subprocess.CompletedProcess) -> bool:
    return proc.returncode == -signal.SIGKILL


def setup_job(tmp_path: Path, outcome: Outcome = Outcome.TIMEOUT) -> tuple[FakeSlurm, str]:
    fake = FakeSlurm(tmp_path / "slurm.json")
    jid = fake.add_job(uid=os.geteuid(), user="me", time_s=60, mem_mb=100)
    store = Store.open(tmp_path / "harp.db")
    submission(fake, store, jid)
    store.close()
    fake.end_run(jid, outcome)
    return fake, jid


def attempts(tmp_path: Path, chain: str) -> list[dict]:
    with Store.open(tmp_path / "harp.db") as s:
        return s.attempts(chain)


def test_crash_points_are_known():
    assert set(REQUEUE_POINTS) | set(RESUBMIT_POINTS) == set(CRASH_POINTS)


@pytest.mark.parametrize("point", REQUEUE_POINTS)
def test_requeue_killed_at_each_step(tmp_path, point):
    fake, jid = setup_job(tmp_path)
    first = harpd(tmp_path, "requeue", point)
    assert killed(first), f"not killed at {point}: rc {first.returncode}\n{first.stderr[-2000:]}"
    again = harpd(tmp_path, "requeue")
    assert again.returncode == 0, again.stderr[-3000:]

    assert len(fake.calls("requeue_hold")) == 1 and len(fake.calls("release")) == 1
    job = fake.state["jobs"][jid]
    assert job["restarts"] == 1 and not job["held"] and job["time_s"] == 120
    assert job["comment"] == f"harp retry 2 of {jid}"
    a = attempts(tmp_path, jid)
    assert [(r.attempt, r.step) for r in a] == [(1, "done"), (2, "requeued")]
    with Store.open(tmp_path / "harp.db") as s:
        assert s.get_meta(WATCH_KEY) == {jid: 2}

    fake.end_run(jid, Outcome.COMPLETED)
    assert harpd(tmp_path, "requeue").returncode == 0
    a = attempts(tmp_path, jid)
    assert [(r.attempt, r.step, r.outcome) for r in a] == [(1, "done", "timeout"), (2, "done", "completed")]
    assert len(fake.calls("requeue_hold")) == 1


@pytest.mark.parametrize("point", RESUBMIT_POINTS)
def test_resubmit_killed_at_each_step(tmp_path, point):
    fake, jid = setup_job(tmp_path)
    first = harpd(tmp_path, "resubmit", point)
    assert killed(first), f"not killed at {point}: rc {first.returncode}\n{first.stderr[-2000:]}"
    again = harpd(tmp_path, "resubmit")
    assert again.returncode == 0, again.stderr[-3000:]

    marked = [j for j, x in fake.state["jobs"].items() if x["comment"] == f"harp retry 2 of {jid}"]
    assert len(marked) == 1 and len(fake.calls("submit")) == 1
    a = attempts(tmp_path, jid)
    assert [(r.attempt, r.step, r.job_id) for r in a] == [(1, "done", jid), (2, "submitted", marked[0])]
    with Store.open(tmp_path / "harp.db") as s:
        assert s.get_submission(marked[0]).chain_id == jid

    fake.end_run(marked[0], Outcome.COMPLETED)
    assert harpd(tmp_path, "resubmit").returncode == 0
    a = attempts(tmp_path, jid)
    assert a[1].step == "done" and a[1].outcome == "completed" and len(fake.calls("submit")) == 1


@pytest.mark.parametrize("mode", ["requeue", "resubmit"])
def test_killed_after_a_later_outcome_still_decides_the_next_attempt(tmp_path, mode):
    """Attempt 2 ran out too; harpd dies right after recording it: attempt 3 still comes, once."""
    fake, jid = setup_job(tmp_path, Outcome.OOM)
    assert harpd(tmp_path, mode).returncode == 0
    second = attempts(tmp_path, jid)[1].job_id
    fake.end_run(second, Outcome.OOM)
    assert killed(harpd(tmp_path, mode, "done"))
    a = attempts(tmp_path, jid)
    assert len(a) == 2 and a[1].step == "done" and a[1].outcome == "oom"
    assert harpd(tmp_path, mode).returncode == 0
    a = attempts(tmp_path, jid)
    assert [r.limits["mem_mb"] for r in a] == [100, 200, 400]
    assert a[2].step in ("requeued", "submitted")
    assert harpd(tmp_path, mode).returncode == 0
    n = len(fake.calls("requeue_hold" if mode == "requeue" else "submit"))
    assert n == 2


def test_killed_at_every_step_in_turn(tmp_path):
    """One requeue, killed after each of its steps in a row: still exactly one requeue."""
    fake, jid = setup_job(tmp_path)
    for point in REQUEUE_POINTS:
        proc = harpd(tmp_path, "requeue", point)
        assert killed(proc) or proc.returncode == 0, proc.stderr[-2000:]
    assert harpd(tmp_path, "requeue").returncode == 0
    assert len(fake.calls("requeue_hold")) == 1 and len(fake.calls("release")) == 1
    assert attempts(tmp_path, jid)[1].step == "requeued"
