"""Recovery against a fake Slurm, through the real ingest poller.

Each test drives ``Ingestor.poll_once`` with ``Recovery.on_outcome`` as its
listener, as harpd does, and checks what Slurm was asked to do, what the store
recorded, and that nothing happens twice.
"""

from __future__ import annotations

import os

import pytest
from resubmit_fakes import fake, fake_of_each_release, registered_again, store, submission  # noqa: F401 (fixtures)

from harpd.config import HarpSettings
from harpd.ingest.poller import WATCH_KEY, Ingestor
from harpd.records import JobRecord, Outcome
from harpd.recovery import machine as rs
from harpd.recovery.mode import REQUEUE, RESUBMIT, resolve_mode

T, M = Outcome.TIMEOUT, Outcome.OOM
ME = os.geteuid()


def machine(store, fake, mode="requeue", **recovery):
    settings = HarpSettings(ingest={"poll_interval_s": 5}, recovery={"mode": mode, **recovery})
    ing = Ingestor(store, fake, settings)
    rec = rs.Recovery(store, fake, settings, watch=ing.watch)
    ing.on_outcome.append(rec.on_outcome)
    return ing, rec


def rows(store, chain):
    return store.attempts(chain)


# ------------------------------------------------------------------ requeue


def test_requeue_timeout_doubles_time_and_completes(store, fake_of_each_release):
    fake = fake_of_each_release
    ing, _ = machine(store, fake, "requeue")
    jid = fake.add_job(time_s=60, mem_mb=100)
    submission(fake, store, jid)
    fake.end_run(jid, T)
    ing.poll_once()

    a = rows(store, jid)
    assert [(r.attempt, r.step, r.outcome) for r in a] == [(1, "done", "timeout"), (2, "requeued", None)]
    assert a[0].limits["time_s"] == 60 and a[0].limits["mem_mb"] == 100
    assert a[1].limits["time_s"] == 120 and a[1].limits["mem_mb"] == 100
    assert a[1].limits["mode"] == "requeue" and a[1].job_id == jid
    assert "doubled time" in a[1].reason and "1 min -> 2 min" in a[1].reason
    job = fake.state["jobs"][jid]
    assert job["restarts"] == 1 and not job["held"] and job["time_s"] == 120 and job["mem_mb"] == 100
    assert job["comment"] == f"harp retry 2 of {jid}"
    assert len(fake.calls("requeue_hold")) == 1 and len(fake.calls("release")) == 1
    (upd,) = fake.calls("update_job")
    assert upd[2] == {"TimeLimit": "2", "Comment": f"harp retry 2 of {jid}", "StartTime": "now"}
    assert store.get_meta(WATCH_KEY) == {jid: 2}

    fake.end_run(jid, Outcome.COMPLETED)
    ing.poll_once()
    a = rows(store, jid)
    assert [(r.attempt, r.step, r.outcome) for r in a] == [(1, "done", "timeout"), (2, "done", "completed")]
    first = [r for r in store.iter_jobs() if r.job_id == jid and r.attempt == 1][0]
    assert first.outcome == T and first.censored_time and first.req_time_s == 60  # needs more than 60 s
    second = store.get_job(jid)
    assert second.attempt == 2 and second.outcome == Outcome.COMPLETED and second.req_time_s == 120
    assert second.signature == "sig-job.sh" and second.harp_sized  # models see it as the same job
    ing.poll_once()
    assert len(fake.calls("requeue_hold")) == 1 and len(rows(store, jid)) == 2


def test_a_job_is_requeued_only_once_slurmd_would_relaunch_it(store, fake):
    """In the second a job timed out, slurmd refuses its relaunch ("Job credential revoked"): wait, no failed try."""
    import time

    settings = HarpSettings(ingest={"poll_interval_s": 5}, recovery={"mode": "requeue"})
    now = [time.time()]
    ing = Ingestor(store, fake, settings)
    rec = rs.Recovery(store, fake, settings, watch=ing.watch, clock=lambda: now[0])
    ing.on_outcome.append(rec.on_outcome)
    jid = fake.add_job(time_s=60, mem_mb=100)
    submission(fake, store, jid)
    fake.end_run(jid, T, ago_s=0.5)
    ing.poll_once()
    rec.resume()
    a = rows(store, jid)
    assert [(r.attempt, r.step) for r in a] == [(1, "done"), (2, "decided")]
    assert fake.calls("requeue_hold") == [] and not a[1].limits.get("failures")

    now[0] += 4.0
    rec.resume()
    a = rows(store, jid)
    assert [(r.attempt, r.step) for r in a] == [(1, "done"), (2, "requeued")]
    assert len(fake.calls("requeue_hold")) == 1 and not a[1].limits.get("failures")
    assert fake.state["jobs"][jid]["time_s"] == 120


def test_requeue_oom_per_cpu_memory_updates_min_memory_cpu(store, fake):
    ing, _ = machine(store, fake, "requeue")
    jid = fake.add_job(mem_mb=None, mem_per_cpu_mb=100)
    submission(fake, store, jid)
    fake.end_run(jid, M)
    ing.poll_once()
    a = rows(store, jid)
    assert a[1].limits["mem_per_cpu_mb"] == 200 and "mem_mb" not in a[1].limits
    assert fake.calls("update_job")[0][2]["MinMemoryCPU"] == "200"
    assert fake.state["jobs"][jid]["mem_per_cpu_mb"] == 200


def test_cap_used_once_then_stop_with_reason(store, fake_of_each_release):
    fake = fake_of_each_release
    ing, _ = machine(store, fake, "requeue")
    jid = fake.add_job(time_s=120, partition="tiny")  # tiny: MaxTime 3 min
    submission(fake, store, jid)
    fake.end_run(jid, T)
    ing.poll_once()
    a = rows(store, jid)
    assert a[1].limits["time_s"] == 180
    assert "cap, partition tiny MaxTime = 3 min" in a[1].reason
    fake.end_run(jid, T)
    ing.poll_once()
    a = rows(store, jid)
    assert len(a) == 2 and a[1].outcome == "timeout" and a[1].step == "done"
    stop = a[1].limits["stop"]
    assert "at the cap, partition tiny MaxTime = 3 min" in stop and "not resubmitted" in stop
    assert len(fake.calls("requeue_hold")) == 1
    ing.poll_once()
    assert len(fake.calls("requeue_hold")) == 1 and len(rows(store, jid)) == 2


def test_configured_cap_and_max_attempts(store, fake):
    ing, _ = machine(store, fake, "requeue", max_time_s=150 * 60, max_attempts=3)
    jid = fake.add_job(time_s=3600, partition="long")
    submission(fake, store, jid)
    fake.end_run(jid, T)
    ing.poll_once()
    assert rows(store, jid)[1].limits["time_s"] == 7200
    fake.end_run(jid, T)
    ing.poll_once()
    assert rows(store, jid)[2].limits["time_s"] == 9000  # recovery.max_time_s, not 4 h
    assert "recovery.max_time_s" in rows(store, jid)[2].reason
    fake.end_run(jid, T)
    ing.poll_once()
    a = rows(store, jid)
    assert len(a) == 3 and "no attempts left" in a[2].limits["stop"]


def test_walks_back_to_the_original_request_when_harp_shrank_it(store, fake):
    ing, _ = machine(store, fake, "requeue", max_attempts=5)
    jid = fake.add_job(time_s=600, partition="long")
    change = [{"option": "time", "value": "10", "old": "60", "reason": "p95 of 40 runs"}]
    submission(fake, store, jid, harp_lines=(), changes=change, original={"time_s": 3600, "mem_mb": 100})
    got = []
    for _ in range(4):
        fake.end_run(jid, T)
        ing.poll_once()
        got.append(rows(store, jid)[-1].limits["time_s"])
    assert got == [1200, 2400, 3600, 7200]  # doubled, capped at the request, then doubled again
    assert "first run; recovered because harp had changed its request" == rows(store, jid)[0].reason


@pytest.mark.parametrize(
    "lines,changes,recovered",
    [
        ((), [], False),  # the user's own limits: left alone
        (("#HARP retry",), [], True),
        (("#HARP retry off",), [{"option": "time", "value": "1", "old": "5"}], False),
        (("#HARP noretry",), [{"option": "time", "value": "1", "old": "5"}], False),
        ((), [{"option": "time", "value": "1", "old": "5"}], True),
    ],
)
def test_eligibility(store, fake, lines, changes, recovered):
    ing, _ = machine(store, fake, "requeue")
    jid = fake.add_job()
    submission(fake, store, jid, harp_lines=lines, changes=changes)
    fake.end_run(jid, T)
    ing.poll_once()
    assert bool(rows(store, jid)) is recovered
    assert len(fake.calls("requeue_hold")) == (1 if recovered else 0)


@pytest.mark.parametrize("outcome", [Outcome.PREEMPTED, Outcome.NODE_FAIL, Outcome.CANCELLED, Outcome.FAILED])
def test_never_resubmits_other_endings(store, fake, outcome):
    ing, _ = machine(store, fake, "requeue")
    jid = fake.add_job()
    submission(fake, store, jid)
    fake.end_run(jid, outcome)
    ing.poll_once()
    assert rows(store, jid) == [] and fake.calls("requeue_hold") == []


def test_a_later_attempt_preempted_ends_the_chain_with_its_reason(store, fake):
    ing, _ = machine(store, fake, "requeue")
    jid = fake.add_job()
    submission(fake, store, jid)
    fake.end_run(jid, T)
    ing.poll_once()
    fake.end_run(jid, Outcome.PREEMPTED)
    ing.poll_once()
    a = rows(store, jid)
    assert len(a) == 2 and a[1].outcome == "preempted"
    assert "ended preempted: not caused by its limits" in a[1].limits["stop"]
    assert len(fake.calls("requeue_hold")) == 1


def test_repeated_announcements_decide_once(store, fake):
    ing, rec = machine(store, fake, "requeue")
    jid = fake.add_job()
    submission(fake, store, jid)
    fake.end_run(jid, T)
    ing.poll_once()
    first = store.get_job(jid)
    for _ in range(3):
        rec.on_outcome(first)
    rec.resume()
    assert len(fake.calls("requeue_hold")) == 1 and len(fake.calls("release")) == 1
    assert len(rows(store, jid)) == 2


def test_requeue_of_a_purged_job_falls_back_to_resubmit(store, fake):
    ing, _ = machine(store, fake, "requeue")
    jid = fake.add_job(uid=1000, user="alice")
    submission(fake, store, jid)
    fake.end_run(jid, T)
    fake.purge(jid)  # harpd was down longer than MinJobAge
    ing.poll_once()
    a = rows(store, jid)
    assert a[1].limits["mode"] == "resubmit" and "MinJobAge" in a[1].limits["note"]
    new = a[1].job_id
    assert new != jid and a[1].step == "submitted"
    (sub,) = fake.calls("submit")
    assert sub[4] == 1000  # submitted as the job's owner
    # the job's own environment, from accounting (job_env), not harpd's nor a login's
    assert fake.state["jobs"][new]["env"] == fake.state["jobs"][jid]["env"]
    assert fake.calls("job_env") == [["job_env", jid]]


def test_requeue_interrupted_then_purged_falls_back_without_duplicating(store, fake):
    ing, rec = machine(store, fake, "requeue")
    jid = fake.add_job()
    submission(fake, store, jid)
    fake.end_run(jid, T)
    fake.fail_next("requeue_hold", "Unable to contact slurm controller (connect failure)")
    ing.poll_once()
    a = rows(store, jid)
    assert a[1].step == "decided" and a[1].limits["failures"] == 1
    assert "Unable to contact" in a[1].limits["last_error"]
    fake.purge(jid)
    rec.resume()
    a = rows(store, jid)
    assert a[1].step == "submitted" and a[1].limits["mode"] == "resubmit" and a[1].job_id != jid
    rec.resume()
    assert len(fake.calls("submit")) == 1


def test_a_job_slurm_will_not_requeue_is_resubmitted_instead(store, fake):
    ing, _ = machine(store, fake, "requeue")
    jid = fake.add_job(uid=1000, user="alice")
    submission(fake, store, jid)
    fake.end_run(jid, T)
    # what 22.05 answers for a job submitted with --no-requeue
    fake.fail_next("requeue_hold", f"Requested operation is presently disabled for job {jid}")
    ing.poll_once()
    a = rows(store, jid)
    assert a[1].step == "submitted" and a[1].limits["mode"] == "resubmit"
    assert "requeuehold" in a[1].limits["note"] and a[1].job_id != jid
    assert fake.state["jobs"][jid]["restarts"] == 0 and len(fake.calls("submit")) == 1


def test_limits_refused_leave_the_job_held_and_say_how_to_release_it(store, fake):
    ing, _ = machine(store, fake, "requeue")
    jid = fake.add_job()
    submission(fake, store, jid)
    fake.end_run(jid, T)
    fake.fail_next("update_job", "Access/permission denied for job", once=False)
    ing.poll_once()
    a = rows(store, jid)
    assert a[1].step == "done" and a[1].outcome == "not_submitted"
    assert f"scontrol release {jid}" in a[1].limits["stop"]
    assert fake.calls("release") == []


# ------------------------------------------------------------------ resubmit


def test_resubmit_oom_doubles_memory_twice_with_the_same_script_and_arguments(store, fake):
    ing, _ = machine(store, fake, "resubmit")
    own_env = {
        "SBATCH_ACCOUNT": "proj",
        "SBATCH_MEM_PER_CPU": "50",
        "PATH": "/opt/conda/envs/x/bin:/usr/bin",
        "CONDA_PREFIX": "/opt/conda/envs/x",
        "BASH_FUNC_module%%": "() {  eval $(modulecmd bash $*)\n}",
    }
    jid = fake.add_job(
        uid=ME, user="me", mem_mb=100, time_s=300, script="#!/bin/bash\necho \"$@\"\n", workdir="/tmp/w", env=own_env
    )
    argv = ["--mem=100M", "-t", "5", "--comment=mine", "-c", "1", "job.sh", "a b", "c"]
    submission(fake, store, jid, argv=argv, sbatch_env={"SBATCH_ACCOUNT": "proj", "SBATCH_MEM_PER_CPU": "50"})
    fake.end_run(jid, M)
    ing.poll_once()
    a = rows(store, jid)
    j2 = a[1].job_id
    assert a[1].step == "submitted" and a[1].limits["mem_mb"] == 200 and a[1].limits["time_s"] == 300
    (call,) = fake.calls("submit")
    new_argv, script, cwd, as_uid = call[1], call[2], call[3], call[4]
    assert new_argv == [
        "--cpus-per-task=1",
        "--job-name=job.sh",
        "--partition=short",
        "--account=harp",
        "--chdir=/tmp/w",
        f"--comment=harp retry 2 of {jid}",
        "--time=5",
        "--mem=200M",
        "/dev/stdin",
        "a b",
        "c",
    ]
    assert script == "#!/bin/bash\necho \"$@\"\n" and cwd == "/tmp/w" and as_uid is None
    env = fake.state["jobs"][j2]["env"]
    assert "SBATCH_MEM_PER_CPU" not in env  # would clash with --mem; the rest exactly the job's own
    assert env == {k: v for k, v in own_env.items() if k != "SBATCH_MEM_PER_CPU"}
    sub2 = store.get_submission(j2)
    assert sub2.chain_id == jid and sub2.submitted.mem_mb == 200 and sub2.decision.model == "recovery"
    assert store.chain_of(j2) == jid

    fake.end_run(j2, M)
    ing.poll_once()
    a = rows(store, jid)
    j3 = a[2].job_id
    assert a[1].outcome == "oom" and a[2].limits["mem_mb"] == 400 and j3 not in (jid, j2)
    assert fake.calls("batch_script")[-1][1] == j2  # the script of the run that failed
    fake.end_run(j3, Outcome.COMPLETED)
    ing.poll_once()
    a = rows(store, jid)
    assert [(r.attempt, r.outcome, r.step) for r in a] == [
        (1, "oom", "done"),
        (2, "oom", "done"),
        (3, "completed", "done"),
    ]
    recs = {r.job_id: r for r in store.iter_jobs()}
    assert recs[j2].attempt == 2 and recs[j2].censored_mem and recs[j2].req_mem_mb == 200
    assert recs[j3].attempt == 3 and recs[j3].outcome == Outcome.COMPLETED and recs[j3].signature == "sig-job.sh"
    assert len(fake.calls("submit")) == 2


def test_resubmit_of_a_wrap_job_drops_wrap_and_reads_the_stored_script(store, fake):
    ing, _ = machine(store, fake, "resubmit")
    jid = fake.add_job(uid=ME, user="me", script="#!/bin/sh\n# This script was created by sbatch --wrap.\n\nsleep 90\n")
    submission(fake, store, jid, argv=["--time=1", "--wrap=sleep 90", "--wait", "-H"])
    fake.end_run(jid, T)
    ing.poll_once()
    (call,) = fake.calls("submit")
    assert not any(a.startswith(("--wrap", "--wait", "--hold")) for a in call[1])
    assert "/dev/stdin" not in call[1] and call[2].endswith("sleep 90\n") and "--time=2" in call[1]


def test_a_submit_that_failed_after_slurm_took_the_job_is_adopted_not_repeated(store, fake):
    ing, rec = machine(store, fake, "resubmit")
    jid = fake.add_job(uid=ME, user="me")
    submission(fake, store, jid)
    fake.fail_next("submit", "sbatch gave no answer within 30 s", after=True)
    fake.end_run(jid, T)
    ing.poll_once()
    a = rows(store, jid)
    assert a[1].step == "decided" and a[1].limits["failures"] == 1
    rec.resume()
    a = rows(store, jid)
    marked = [j for j, x in fake.state["jobs"].items() if x["comment"] == f"harp retry 2 of {jid}"]
    assert a[1].step == "submitted" and [a[1].job_id] == marked
    assert len(fake.calls("submit")) == 1


def test_resubmit_needs_the_registered_arguments(store, fake):
    ing, _ = machine(store, fake, "resubmit")
    jid = fake.add_job(uid=ME, user="me")
    submission(fake, store, jid)
    sub = store.get_submission(jid)
    job = dict(sub.job)
    del job["argv"]  # registered by a harp-submit from before recovery
    registered_again(store, jid, job)
    fake.end_run(jid, T)
    ing.poll_once()
    a = rows(store, jid)
    assert a[1].outcome == "not_submitted" and "lacks sbatch's arguments" in a[1].limits["stop"]
    assert fake.calls("submit") == []


def test_a_per_user_harpd_does_not_submit_for_someone_else(store, fake, monkeypatch):
    ing, _ = machine(store, fake, "resubmit")
    jid = fake.add_job(uid=4321, user="bob")
    submission(fake, store, jid)
    fake.end_run(jid, T)
    monkeypatch.setattr(os, "geteuid", lambda: 1234)
    ing.poll_once()
    a = rows(store, jid)
    assert "cannot submit for bob (uid 4321)" in a[1].limits["stop"] and fake.calls("submit") == []


def test_a_failing_side_effect_is_given_up_after_max_failures(store, fake, monkeypatch):
    monkeypatch.setattr(rs, "MAX_FAILURES", 3)
    ing, rec = machine(store, fake, "resubmit")
    jid = fake.add_job(uid=ME, user="me")
    submission(fake, store, jid)
    fake.fail_next("batch_script", "Slurm has no batch script for job", once=False)
    fake.end_run(jid, T)
    ing.poll_once()
    rec.resume()
    assert rows(store, jid)[1].step == "decided"
    rec.resume()
    a = rows(store, jid)
    assert a[1].step == "done" and a[1].outcome == "not_submitted"
    assert "gave up after 3 failed tries" in a[1].limits["stop"]
    rec.resume()
    assert len(fake.calls("batch_script")) == 3


def test_disabled_recovery_does_nothing(store, fake):
    ing, _ = machine(store, fake, "requeue", enabled=False)
    jid = fake.add_job()
    submission(fake, store, jid)
    fake.end_run(jid, T)
    ing.poll_once()
    assert rows(store, jid) == [] and fake.calls("requeue_hold") == []


def test_array_jobs_are_not_recovered(store, fake):
    ing, rec = machine(store, fake, "requeue")
    jid = fake.add_job()
    submission(fake, store, jid)
    rec.on_outcome(JobRecord(job_id=f"{jid}_3", outcome=T, req_time_s=60, partition="short"))
    assert rows(store, f"{jid}_3") == [] and rows(store, jid) == []


# ------------------------------------------------------------------ mode


class _Info:
    def __init__(self, slurm_user="slurm", admin=None, fail=False):
        self.su, self.admin, self.fail = slurm_user, admin or {}, fail

    def slurm_user(self):
        if self.fail:
            raise RuntimeError("slurmctld down")
        return self.su

    def admin_level(self, user):
        return self.admin.get(user)


def test_mode_resolution(monkeypatch):
    assert resolve_mode("resubmit", _Info())[:2] == (RESUBMIT, "recovery.mode = 'resubmit'")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert resolve_mode("auto", _Info())[0] == REQUEUE
    monkeypatch.setattr(os, "geteuid", lambda: 4242424)  # no passwd entry: name "4242424"
    assert resolve_mode("auto", _Info(slurm_user="4242424"))[0] == REQUEUE
    mode, why, certain = resolve_mode("auto", _Info(admin={"4242424": "Operator"}))
    assert mode == REQUEUE and "operator" in why and certain
    mode, why, certain = resolve_mode("auto", _Info())
    assert mode == RESUBMIT and certain and "not root, SlurmUser or a Slurm operator" in why
    assert resolve_mode("auto", _Info(fail=True))[::2] == (RESUBMIT, False)


def test_config_rejects_unknown_mode():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        HarpSettings(recovery={"mode": "requeu"})


def test_no_resubmission_without_the_jobs_own_environment(store, fake):
    # the site's accounting keeps no environment (no job_env): a resubmission would run other work
    fake.set_keeps_env(False)
    ing, _ = machine(store, fake, "resubmit")
    jid = fake.add_job(uid=ME, user="me")
    submission(fake, store, jid)
    fake.end_run(jid, T)
    ing.poll_once()
    a = rows(store, jid)
    assert a[1].step == "done" and a[1].outcome == "not_submitted"
    assert "AccountingStoreFlags lacks job_env" in a[1].limits["stop"]
    assert "not resubmitted" in a[1].limits["stop"]
    assert fake.calls("submit") == []  # never with harpd's or a login-like environment
