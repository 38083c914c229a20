"""The job's end hook: harpd recovers only on accounting's evidence, and the hook never fails a job."""

from __future__ import annotations

import itertools
import time
from contextlib import contextmanager

from resubmit_fakes import FakeSlurm, submission

from harp_submit import task_epilog
from harpd.config import HarpSettings
from harpd.protocol import Decision, Resources
from harpd.records import Outcome
from harpd.recovery import requeue
from harpd.recovery.ending import ran_out_of_memory
from harpd.recovery.machine import Recovery
from harpd.slurm.base import SlurmError
from harpd.slurm.sacct_records import SacctJob, SacctStep
from harpd.store import Store


class _Accounting:
    """sacct_raw answering from a list of successive answers (the last one repeats)."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = 0

    def sacct_raw(self, job_ids, since, until, all_users):
        self.calls += 1
        got = self.answers[min(self.calls, len(self.answers)) - 1]
        if isinstance(got, Exception):
            raise got
        return got


def _job(*steps: SacctStep) -> SacctJob:
    return SacctJob(job_id="7", user="alice", state="RUNNING", req_mem_mb=400.0, steps=list(steps))


BATCH = SacctStep(step_id="batch", state="RUNNING")
KILLED = SacctStep(step_id="0", state="CANCELLED", exit_signal=9, max_rss_mb=420.0, ntasks=1, nnodes=1)
FINE = SacctStep(step_id="0", state="COMPLETED", exit_code=0, max_rss_mb=100.0, ntasks=1, nnodes=1)
STILL = SacctStep(step_id="0", state="RUNNING")


def _ask(backend):
    t = [0.0]
    return ran_out_of_memory(backend, "7", wait_s=5, clock=lambda: t[0], sleep=lambda s: t.__setitem__(0, t[0] + s))


def test_a_step_killed_above_the_limit_is_an_oom_record_of_the_running_job() -> None:
    rec = _ask(_Accounting([_job(BATCH, KILLED)]))
    assert rec is not None and rec.outcome == Outcome.OOM and rec.censored_mem and rec.user == "alice"


def test_steps_that_ended_well_are_answered_at_once() -> None:
    backend = _Accounting([_job(BATCH, FINE)])
    assert _ask(backend) is None and backend.calls == 1


def test_a_step_accounting_has_not_closed_yet_is_waited_for() -> None:
    backend = _Accounting([_job(BATCH, STILL)], SlurmError("slurmdbd down"), [_job(BATCH, KILLED)])
    assert _ask(backend) is not None and backend.calls == 3


def test_no_evidence_within_the_wait_leaves_the_job_alone() -> None:
    backend = _Accounting([_job(BATCH, STILL)])
    assert _ask(backend) is None and 5 <= backend.calls <= 7


def test_a_job_step_accounting_has_not_recorded_yet_is_waited_for_when_the_job_runs_one() -> None:
    """Snakemake's job always runs a step: accounting that shows none yet (slurmdbd lagging) is not the answer."""
    t = [0.0]

    def ask(backend, expect_step):
        t[0] = 0.0
        return ran_out_of_memory(
            backend,
            "7",
            wait_s=5,
            expect_step=expect_step,
            clock=lambda: t[0],
            sleep=lambda s: t.__setitem__(0, t[0] + s),
        )

    backend = _Accounting([_job(BATCH)], [_job(BATCH)], [_job(BATCH, KILLED)])
    assert ask(backend, True) is not None and backend.calls == 3
    backend = _Accounting([_job(BATCH)], [_job(BATCH, KILLED)])
    assert ask(backend, False) is None and backend.calls == 1  # a job with no step of its own: answered at once
    backend = _Accounting([_job(BATCH)])
    assert ask(backend, True) is None and 5 <= backend.calls <= 7  # never recorded: left alone after the wait


def test_the_hook_asks_only_for_the_batch_task_and_never_fails(tmp_path, capsys) -> None:
    assert task_epilog.is_batch_task({"SLURM_JOB_ID": "7"})
    assert task_epilog.is_batch_task({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "4294967294"})
    assert not task_epilog.is_batch_task({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0"})
    assert not task_epilog.is_batch_task({})
    env = {"SLURM_JOB_ID": "7", "HARP_SOCKET": str(tmp_path / "none.sock"), "HARP_CONFIG": "/nonexistent"}
    assert task_epilog.main([], env) == 0
    assert capsys.readouterr().err == ""  # nothing in every job's output where no harpd runs
    assert task_epilog.main([], {**env, "HARP_DEBUG": "1"}) == 0
    assert "harpd not asked" in capsys.readouterr().err
    assert task_epilog.main([], {**env, "HARP_TASK_EPILOG": "0"}) == 0


def test_an_array_task_is_named_as_accounting_names_it() -> None:
    """The last task of array 47 runs as job 47: asked as '47', accounting answers with the whole array (#51)."""
    env = {"SLURM_JOB_ID": "47", "SLURM_ARRAY_JOB_ID": "47", "SLURM_ARRAY_TASK_ID": "9"}
    assert task_epilog.job_name(env) == "47_9"
    assert task_epilog.job_name({"SLURM_JOB_ID": "56"}) == "56"
    assert task_epilog.job_name({**env, "SLURM_ARRAY_TASK_ID": "x"}) == "47"  # not Slurm's: the job id


def test_a_harpd_that_can_only_resubmit_leaves_a_running_job_alone(tmp_path) -> None:
    """A resubmission is a new job: never made while the old one still runs (the poll makes it after)."""

    class _Backend:
        def sacct_raw(self, *a):  # pragma: no cover - must not be asked
            raise AssertionError("accounting asked although nothing will be done")

    with Store.open(tmp_path / "h.db") as st:
        st.add_submission(
            "7",
            1000,
            "alice",
            {"signature": "s"},
            Resources(time_s=60),
            Resources(time_s=60),
            Decision.model_validate({"changes": [{"option": "time", "value": "1", "old": "2"}]}),
            verified=True,
        )
        rec = Recovery(st, _Backend(), HarpSettings(recovery={"mode": "resubmit"}), watch=lambda *a: None)
        assert rec.run_ending("7", 1000) == ("left", "harpd recovers by resubmission here, once the job has ended")
        assert rec.run_ending("7", 1001)[0] == "left" and st.attempts("7") == []


class _KilledWhileRunning(FakeSlurm):
    """A fake Slurm whose accounting shows each job running, its step killed above its 100 MB."""

    def sacct_raw(self, job_ids, since, until, all_users):
        (jid,) = job_ids
        return [SacctJob(job_id=jid, user="alice", state="RUNNING", req_mem_mb=100.0, steps=[BATCH, KILLED])]


@contextmanager
def _running_job(tmp_path, completing_shows: int = 2):
    """(fake Slurm, store, job id, Recovery) for alice's running job, registered through harp-submit.

    Recovery's clock is the real time moving on a second per reading: no real wait for SETTLE_S.
    """
    fake = _KilledWhileRunning(tmp_path / "slurm.json")
    ticks = itertools.count(time.time(), 1.0)
    with Store.open(tmp_path / "h.db") as st:
        jid = fake.add_job(time_s=600, mem_mb=100)
        submission(fake, st, jid, user="alice", uid=1000)
        fake.start_run(jid, completing_shows=completing_shows)
        rec = Recovery(
            st, fake, HarpSettings(recovery={"mode": "requeue"}), watch=lambda *a: None, clock=lambda: next(ticks)
        )
        yield fake, st, jid, rec


def test_a_running_job_a_step_of_which_was_killed_for_memory_is_requeued_and_released(tmp_path) -> None:
    """As slurmctld shows it: a running job's EndTime is its projected end (not an end), and a job held
    while it runs is COMPLETING before it is PENDING and held.  Read as an end, the requeue waited
    for the job to really end (FAILED, seen by the workflow manager); taken for held while still
    COMPLETING, the requeue was committed unreleased and the job stayed held for good."""
    with _running_job(tmp_path) as (fake, st, jid, rec):
        action, why = rec.run_ending(jid, 1000)
        assert action == "requeued", why
        job = fake.state["jobs"][jid]
        assert job["restarts"] == 1 and job["state"] == "PENDING" and not job["held"], job
        assert job["mem_mb"] > 100 and len(fake.calls("release")) == 1
        (attempt2,) = [a for a in st.attempts(jid) if a.attempt == 2]
        assert attempt2.step == "requeued" and attempt2.limits.get("while_running"), attempt2
        assert attempt2.limits.get("held_running"), attempt2  # held before Slurm ended it: no final state seen


def test_a_job_slurmd_is_slow_to_kill_stays_decided_and_is_released_on_a_later_tick(tmp_path, monkeypatch) -> None:
    """COMPLETING longer than harpd waits is nobody's fault: no failed try; a later tick releases it."""
    monkeypatch.setattr(requeue, "COMPLETING_WAIT_S", 2.0)
    with _running_job(tmp_path, completing_shows=10**6) as (fake, st, jid, rec):
        assert rec.run_ending(jid, 1000)[0] == "left"
        (attempt2,) = [a for a in st.attempts(jid) if a.attempt == 2]
        assert attempt2.step == "decided" and not attempt2.limits.get("failures"), attempt2
        assert attempt2.limits.get("held_running"), attempt2
        assert fake.state["jobs"][jid]["held"] and fake.calls("release") == []

        state = fake._load()
        state["jobs"][jid]["completing_shows"] = 1  # slurmd has killed the run at last
        fake._save(state)
        rec.resume()
        job = fake.state["jobs"][jid]
        assert job["restarts"] == 1 and not job["held"] and job["mem_mb"] > 100, job
        assert len(fake.calls("requeue_hold")) == 1 and len(fake.calls("release")) == 1
        (attempt2,) = [a for a in st.attempts(jid) if a.attempt == 2]
        assert attempt2.step == "requeued" and attempt2.limits.get("held_running")  # held while it ran, released later


def test_a_run_whose_start_accounting_has_not_recorded_is_waited_for() -> None:
    """slurmdbd may hold the step's kill before the job's start (22.05: the job PENDING, ReqMem unreadable):
    the kill is judged against the request once accounting shows the run running with it, never before."""
    lagging = SacctJob(job_id="7", user="alice", state="PENDING", req_mem_mb=None, steps=[BATCH, KILLED])
    backend = _Accounting([lagging], [lagging], [_job(BATCH, KILLED)])
    rec = _ask(backend)
    assert rec is not None and rec.outcome == Outcome.OOM and backend.calls == 3
    # a request accounting shows, but the run not yet running: still not judged (a user's scancel -9 looks alike)
    early = SacctJob(job_id="7", user="alice", state="PENDING", req_mem_mb=16.0, steps=[BATCH, KILLED])
    backend = _Accounting([early])
    assert _ask(backend) is None and 5 <= backend.calls <= 7


def test_a_run_requeued_or_cancelled_while_its_hook_runs_is_answered_at_once() -> None:
    """submitit's checkpoint requeues its own job: the hook is answered before slurmstepd kills it (#51)."""
    for state in ("REQUEUED", "CANCELLED"):
        ended = SacctJob(job_id="7", user="alice", state=state, req_mem_mb=400.0, steps=[BATCH, STILL])
        backend = _Accounting([ended])
        assert _ask(backend) is None and backend.calls == 1, state


def test_the_hook_killed_while_it_waits_ends_quietly(tmp_path) -> None:
    """A SIGTERM while harpd is asked (the job is being requeued): exit status 0, nothing on stderr."""
    import os
    import subprocess
    import sys

    sock = tmp_path / "harpd.sock"
    import socket

    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(sock))
    srv.listen(1)  # accepts and never answers: the hook waits
    env = {
        **os.environ,
        "SLURM_JOB_ID": "7",
        "SLURM_STEP_ID": "batch",
        "HARP_SOCKET": str(sock),
        "PYTHONPATH": str(__import__("pathlib").Path(task_epilog.__file__).resolve().parents[1]),
    }
    p = subprocess.Popen(
        [sys.executable, "-m", "harp_submit.task_epilog"], env=env, stderr=subprocess.PIPE, stdout=subprocess.PIPE
    )
    conn, _ = srv.accept()  # the hook is asking now
    p.terminate()
    _, err = p.communicate(timeout=60)
    conn.close()
    srv.close()
    assert p.returncode == 0 and err == b""


def test_a_run_its_job_requeued_under_the_hook_is_answered_at_once() -> None:
    """22.05 shows the requeued run REQUEUED and the next one PENDING with no step: no 20 s wait (#51)."""
    now = time.time()
    requeued = SacctJob(job_id="7", user="alice", state="REQUEUED", req_mem_mb=400.0, steps=[FINE], end_time=now - 2)
    nxt = SacctJob(job_id="7", user="alice", state="PENDING", req_mem_mb=400.0, run=2)
    backend = _Accounting([requeued, nxt])
    assert _ask(backend) is None and backend.calls == 1
    # a run whose start accounting has not recorded yet shows its steps: still waited for
    lagging = SacctJob(job_id="7", user="alice", state="PENDING", req_mem_mb=None, steps=[BATCH, KILLED], run=2)
    backend = _Accounting([requeued, lagging])
    _ask(backend)
    assert backend.calls > 1
