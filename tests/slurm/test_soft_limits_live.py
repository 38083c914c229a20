"""Soft time limits against the real Slurm 22.05, end to end.

Real harpd daemons with short watch settings (a listing every 2 s, extend
with less than 12 s left: the one crossing of a 1-minute limit comes well
before Slurm's own check; the extension, harp's only one by default, goes
straight back to the user's 10 minutes):

* (a) a root harpd (privileged: soft limits): a job the user asked 10 minutes
  for, that harp shortened to 1 minute, running 100 s, completes on its first
  run, same job id, one extension recorded, no requeue;
* (b) the same job with harpd stopped before its limit: killed (TIMEOUT) and
  recovered as without soft limits (requeued in place once harpd is back);
* (c) a pending job (held, so it cannot start) whose sibling finishes is
  re-decided by a harpd with a trained model (1500 synthetic runs of the
  signature, trained before the daemon starts) and gets a lower TimeLimit
  before it starts;
* (d) a plain user's job is extended by the privileged harpd and never by a
  per-user (unprivileged) harpd, which says "hard" in health;
* (e) a pending workflow task whose memory harp left as asked at submission
  (nothing of its type had finished) gets less memory once a sibling task
  finishes, before it starts.

The jobs are submitted with ``sbatch --time=1`` and registered over harpd's
socket with the token of a decision (harp shortens ``--time=10`` to 1
minute) written into harpd's store as harpd records one at ``predict``
(tests/helpers/decisions.py): no trained model is needed to make harp's
decision, and harpd still checks the job's owner, limits and submit time
with slurmctld before it registers and before each change.
"""

from __future__ import annotations

import os
import pwd
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_recovery import REPO, USER, Daemon, ensure_user, user_python

from harp_submit import client
from tests.helpers.decisions import record_decision
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.slurm

WATCH = "[watch]\ninterval_s = 2.0\nmargin_s = 12.0\n"
DEADLINE_S = 12 * 60
SCRIPT = "#!/bin/bash\nsleep 100\necho finished\n"


@dataclass
class SoftDaemon(Daemon):
    def write_config(self) -> None:
        super().write_config()
        with open(self.dir / "harpd.toml", "a") as fh:
            fh.write(WATCH)


def _owner(user: str | None) -> tuple[int, str]:
    return (0, "root") if user is None else (pwd.getpwnam(user).pw_uid, user)


def register(
    d: Daemon,
    job_id: str,
    cwd: Path,
    *,
    signature: str = "soft-test",
    asked_min: int = 10,
    given_min: int = 1,
    user: str | None = None,
    harp_lines: list[str] | None = None,
) -> None:
    """What harp-submit registers for ``--time=asked_min`` shortened by harp to ``given_min``."""
    req = {
        "op": "register",
        "job_id": job_id,
        "job": {
            "partition": "short",
            "job_name": "soft.sh",
            "signature": signature,
            "cwd": str(cwd),
            "request": {"time_s": asked_min * 60, "mem_mb": 100, "partition": "short"},
            "harp_lines": list(harp_lines or []),
        },
        "original": {"time_s": asked_min * 60, "mem_mb": 100, "partition": "short"},
        "submitted": {"time_s": given_min * 60, "mem_mb": 100, "partition": "short"},
        "decision": {
            "changes": [
                {
                    "option": "time",
                    "value": f"{given_min // 60:02d}:{given_min % 60:02d}:00",
                    "old": f"{asked_min // 60:02d}:{asked_min % 60:02d}:00",
                    "reason": "test",
                }
            ],
            "limits": {"partition": "short"},
            "model": "test",
            "explain": {},
        },
    }
    req["token"] = record_decision(d.db, *_owner(user), req["job"], req["decision"])
    answer = client.call(d.socket, req, 10.0)
    assert answer.get("ok"), answer


def register_mem(
    d: Daemon, job_id: str, cwd: Path, *, signature: str, asked_mb: int, given_mb: int | None, user: str | None = None
) -> None:
    """What harp-submit registers for ``--mem=asked_mb`` cut by harp to ``given_mb`` (its 30 minutes kept).

    ``given_mb`` None: harp was asked and kept the request (a workflow task's cold start).
    """
    changes = (
        []
        if given_mb is None
        else [{"option": "mem", "value": f"{given_mb}M", "old": f"{asked_mb}M", "reason": "test"}]
    )
    req = {
        "op": "register",
        "job_id": job_id,
        "job": {
            "partition": "short",
            "job_name": "soft.sh",
            "signature": signature,
            "cwd": str(cwd),
            "request": {"time_s": 1800, "mem_mb": asked_mb, "partition": "short"},
            "harp_lines": [],
        },
        "original": {"time_s": 1800, "mem_mb": asked_mb, "partition": "short"},
        "submitted": {"time_s": 1800, "mem_mb": given_mb or asked_mb, "partition": "short"},
        "decision": {"changes": changes, "limits": {"partition": "short"}, "model": "test", "explain": {}},
    }
    req["token"] = record_decision(d.db, *_owner(user), req["job"], req["decision"])
    answer = client.call(d.socket, req, 10.0)
    assert answer.get("ok"), answer


@dataclass
class Soft:
    cluster: Any
    base: Path
    daemons: dict[str, SoftDaemon]
    workdirs: dict[str, Path]
    jobs: dict[str, str]

    def sbatch(self, key: str, user: str | None, *opts: str, time_min: int = 1, script: str = "soft.sh") -> str:
        wd = self.workdirs[user or "root"]
        out = self.cluster.run(
            ["sbatch", "--parsable", f"--time={time_min}", "--mem=100M", "-p", "short", *opts, str(wd / script)],
            user=user,
            cwd=wd,
        ).stdout
        jid = out.strip().split(";")[0]
        assert jid.isdigit(), out
        self.jobs[key] = jid
        return jid

    def runs(self, jid: str) -> list[dict[str, str]]:
        return [
            r
            for r in self.cluster.sacct(jid, "JobID,State,Timelimit,Comment,User", steps=False, duplicates=True)
            if r["JobID"] == jid
        ]

    def wait_ended(self, jid: str, timeout: float = DEADLINE_S) -> list[dict[str, str]]:
        """Until the job's last run has ended in accounting and slurmctld no longer runs it."""

        def ended() -> list[dict[str, str]] | None:
            runs = self.runs(jid)
            queued = self.cluster.run(["squeue", "-h", "-j", jid, "-o", "%T"], check=False).stdout.strip()
            if runs and not queued and runs[-1]["State"].split()[0] not in ("RUNNING", "PENDING", "REQUEUED"):
                return runs
            return None

        return wait_for(f"job {jid} to end", ended, timeout, interval=2, log=lambda: str(self.runs(jid)))

    def limit(self, jid: str) -> str:
        out = self.cluster.run(["squeue", "-h", "-j", jid, "-o", "%l"], check=False).stdout.strip()
        return out


@pytest.fixture(scope="module")
def soft(slurm_cluster):
    c = slurm_cluster
    pw = ensure_user(USER)
    upy, upath = user_python(USER)
    base = Path(tempfile.mkdtemp(prefix="hsl-", dir="/tmp"))
    base.chmod(0o755)
    workdirs = {"root": base / "work-root", USER: base / "work-user"}
    for owner, wd in workdirs.items():
        wd.mkdir()
        (wd / "soft.sh").write_text(SCRIPT)
        (wd / "quick.sh").write_text("#!/bin/bash\nsleep 2\n")
        if owner != "root":
            for p in [wd, *wd.iterdir()]:
                os.chown(p, pw.pw_uid, pw.pw_gid)
    daemons = {
        "root": SoftDaemon("root", base / "d-root", None, sys.executable, str(REPO), str(c.conf)),
        "down": SoftDaemon("down", base / "d-down", None, sys.executable, str(REPO), str(c.conf)),
        "user": SoftDaemon("user", base / "d-user", USER, upy, upath, str(c.conf)),
        "resize": SoftDaemon("resize", base / "d-resize", None, sys.executable, str(REPO), str(c.conf)),
    }
    for d in daemons.values():
        d.dir.mkdir()
        d.write_config()
        if d.user:
            os.chown(d.dir, pw.pw_uid, pw.pw_gid)
            os.chown(d.dir / "harpd.toml", pw.pw_uid, pw.pw_gid)
    train(daemons["resize"])
    s = Soft(c, base, daemons, workdirs, {})
    try:
        for d in daemons.values():
            d.start()
        # (c): a pending (held) job harp gave 30 of its 60 minutes, then a sibling that finishes
        jp = s.sbatch("pending", None, "--hold", time_min=30)
        register(daemons["resize"], jp, workdirs["root"], signature=SIGNATURE, asked_min=60, given_min=30)
        # ... and one whose memory harp cut from 4000 to 2000 MB at submission (its time left alone)
        jm = s.sbatch("pending_mem", None, "--hold", "--mem=2000M", time_min=30)
        register_mem(daemons["resize"], jm, workdirs["root"], signature=SIGNATURE, asked_mb=4000, given_mb=2000)
        js = s.sbatch("sibling", None, time_min=30, script="quick.sh")
        register(daemons["resize"], js, workdirs["root"], signature=SIGNATURE, asked_min=60, given_min=30)
        # (e) a workflow task harp kept at its 1000 MB at submission, then a sibling task that finishes
        jw = s.sbatch("pending_task", None, "--hold", "--mem=1000M", time_min=30)
        register_mem(daemons["resize"], jw, workdirs["root"], signature=TASK_SIGNATURE, asked_mb=1000, given_mb=None)
        jt = s.sbatch("sibling_task", None, time_min=30, script="quick.sh")
        register(daemons["resize"], jt, workdirs["root"], signature=TASK_SIGNATURE, asked_min=60, given_min=30)
        # (b) first: held until harpd "down" is stopped, so it never sees the job run
        jb = s.sbatch("down", None, "--hold")
        register(daemons["down"], jb, workdirs["root"])
        daemons["down"].stop()
        c.run(["scontrol", "release", jb])
        for key, daemon, user in [("root", "root", None), ("plain_priv", "root", USER), ("plain_unpriv", "user", USER)]:
            jid = s.sbatch(key, user)
            register(daemons[daemon], jid, workdirs[user or "root"], user=user)
        yield s
    finally:
        for d in daemons.values():
            d.stop()
        live = c.run(["squeue", "-h", "-o", "%i"], check=False).stdout.split()
        left = [j for j in live if j in set(s.jobs.values())]
        if left:
            c.run(["scancel", *left], check=False)
        shutil.rmtree(base, ignore_errors=True)


SIGNATURE = "resize-test"
TASK_SIGNATURE = "wf:nextflow:RESIZE:STEP"  # a workflow task's signature (harpd.features.workflow)


def train(d: SoftDaemon) -> None:
    """A store with 1500 finished runs of SIGNATURE (about 100 s of a 1-hour request, 200 of 1000 MB) and champions.

    The memory is ten times the floor (100 MB), so a memory model can cut it
    and beats the users' requests: the pending memory re-size needs one.
    Every tenth run is one of the workflow task TASK_SIGNATURE (a workflow
    task is sized from its own runs by the history rule).
    """
    import random

    from harpd.config import HarpSettings
    from harpd.predict.live import make_predictor
    from harpd.records import JobRecord, Outcome
    from harpd.store import Store
    from harpd.training.trainer import Trainer

    rng = random.Random(16)
    now = time.time()
    recs = []
    for i in range(1500):
        used = rng.uniform(80, 120)
        end = now - 100_000 + i * 60
        recs.append(
            JobRecord(
                job_id=str(900_000 + i),
                source="slurm",
                user="root",
                partition="short",
                job_name="soft.sh",
                signature=TASK_SIGNATURE if i % 10 == 0 else SIGNATURE,
                outcome=Outcome.COMPLETED,
                submit_time=end - used - 10,
                start_time=end - used,
                end_time=end,
                req_time_s=3600.0,
                used_time_s=used,
                req_mem_mb=1000.0,
                used_mem_mb=200.0,
                req_cpus=1,
                alloc_cpus=1,
                req_nodes=1,
                alloc_nodes=1,
            )
        )
    with Store.open(d.db) as store:
        store.insert_jobs(recs)
        settings = HarpSettings(store={"path": str(d.db)})
        out = Trainer(make_predictor(settings=settings, store=store), store, settings).retrain()
    assert out["time"]["champion"], out["time"]
    assert out["mem"]["champion"] not in (None, "request"), out["mem"]


def _extensions(job: dict[str, Any]) -> list[tuple[int, int, str]]:
    return [
        (c["old_time_s"], c["new_time_s"], c["step"]) for c in job.get("limit_changes") or [] if c["kind"] == "extend"
    ]


def test_health_says_soft_for_root_and_hard_for_a_plain_user(soft):
    root = client.call(soft.daemons["root"].socket, {"op": "health"}, 10.0)
    user = client.call(soft.daemons["user"].socket, {"op": "health"}, 10.0)
    assert root["limits"]["mode"] == "soft" and root["limits"]["privileged"], root
    assert user["limits"]["mode"] == "hard" and not user["limits"]["privileged"], user
    assert "not root, SlurmUser or a Slurm operator" in user["limits"]["why"]


def test_a_shortened_job_is_extended_once_and_completes_on_its_first_run(soft):
    jid = soft.jobs["root"]
    runs = soft.wait_ended(jid)
    assert [r["State"].split()[0] for r in runs] == ["COMPLETED"], runs  # one run: no requeue, same id
    assert runs[0]["Timelimit"] == "00:10:00"  # one extension, straight back to the user's request
    assert runs[0]["Comment"] == "harp extended 1 min -> 10 min"
    job = soft.daemons["root"].status(jid)
    assert _extensions(job) == [(60, 600, "done")]
    assert job["attempts"] == []  # recovery had nothing to do
    assert job["limits_mode"]["mode"] == "soft"
    # the extension taught the soft policy's budget controller: every start limit gets more room now
    # (one first extension: +0.02·(1 − 0.095); each job ending without one: −0.02·0.095, far fewer here)
    health = client.call(soft.daemons["root"].socket, {"op": "health"}, 10.0)
    assert health["limits"]["budget_scale"] > 1.0, health


def test_with_harpd_down_the_job_is_killed_and_recovered_as_before(soft):
    jid = soft.jobs["down"]
    d = soft.daemons["down"]

    def ran_out() -> list[dict[str, str]] | None:  # the first run ends TIMEOUT at harp's 1 minute
        runs = soft.runs(jid)
        return runs if runs and runs[0]["State"].split()[0] in ("TIMEOUT", "REQUEUED") else None

    runs = wait_for(f"job {jid} to run out", ran_out, DEADLINE_S, interval=2, log=lambda: str(soft.runs(jid)))
    assert runs[0]["Timelimit"] == "00:01:00"  # nobody extended it
    d.stopping = False
    d.start()  # harpd is back: recovery requeues it, as without soft limits

    def recovered() -> dict[str, Any] | None:
        job = d.status(jid)
        att = job.get("attempts") or []
        return job if att and att[-1]["step"] == "done" and att[-1]["outcome"] == "completed" else None

    job = wait_for(
        f"job {jid} to be recovered",
        recovered,
        DEADLINE_S,
        interval=2,
        log=lambda: f"{d.status(jid).get('attempts')}\n{d.log_tail()}",
    )
    assert [(a["attempt"], a["outcome"]) for a in job["attempts"]] == [(1, "timeout"), (2, "completed")]
    assert job["attempts"][1]["job_id"] == jid
    assert all(c["old_time_s"] != 60 for c in job.get("limit_changes") or [])  # never the killed run


def test_a_plain_users_job_is_extended_by_a_privileged_harpd_only(soft):
    priv, unpriv = soft.jobs["plain_priv"], soft.jobs["plain_unpriv"]
    runs = soft.wait_ended(priv)
    assert [r["State"].split()[0] for r in runs] == ["COMPLETED"] and runs[0]["User"] == USER, runs
    assert _extensions(soft.daemons["root"].status(priv)) == [(60, 600, "done")]

    runs = soft.wait_ended(unpriv)
    first = runs[0]
    assert first["State"].split()[0] in ("TIMEOUT", "REQUEUED") and first["Timelimit"] == "00:01:00", runs
    assert "extended" not in (first["Comment"] or "")
    job = soft.daemons["user"].status(unpriv)
    assert job.get("limit_changes") == [] and job["limits_mode"]["mode"] == "hard"


def _wait_resized(d: SoftDaemon, jid: str, kind: str) -> dict[str, Any]:
    """The job's status once harpd has carried out (or given up) a re-size of ``kind``; fails at the deadline."""

    def resized() -> dict[str, Any] | None:
        job = d.status(jid)
        done = any(c["kind"] == kind and c["step"] != "decided" for c in job.get("limit_changes") or [])
        return job if done else None

    return wait_for(
        f"pending job {jid} to be re-sized ({kind})",
        resized,
        DEADLINE_S,
        interval=2,
        log=lambda: f"{d.status(jid).get('limit_changes')}\n{d.log_tail()}",
    )


def test_a_pending_job_gets_a_lower_limit_when_its_sibling_finishes(soft):
    jid = soft.jobs["pending"]
    d = soft.daemons["resize"]
    job = _wait_resized(d, jid, "resize")
    (change,) = job["limit_changes"]
    assert change["kind"] == "resize" and change["step"] == "done", change
    assert change["old_time_s"] == 1800 and 60 <= change["new_time_s"] <= 1800 - 300, change
    state = soft.cluster.run(["squeue", "-h", "-j", jid, "-o", "%T %l"], check=False).stdout.split()
    assert state[0] == "PENDING", state  # changed before it started
    minutes = change["new_time_s"] // 60
    assert state[1] == f"{minutes // 60}:{minutes % 60:02d}:00" if minutes >= 60 else state[1] == f"{minutes}:00", state
    sib = d.status(soft.jobs["sibling"])
    assert sib["limit_changes"] == []  # the finished sibling itself is not touched


def _pending_mem_resized(soft: Soft, key: str, old_mb: int, most_mb: int) -> None:
    """The pending job ``key`` had its memory lowered from ``old_mb`` (to at least the floor, at most ``most_mb``)."""
    jid = soft.jobs[key]
    job = _wait_resized(soft.daemons["resize"], jid, "resize-mem")
    (change,) = [c for c in job["limit_changes"] if c["kind"] == "resize-mem"]
    assert change["step"] == "done" and change["old_mem_mb"] == old_mb, change
    assert 100 <= change["new_mem_mb"] <= most_mb, change  # lower, never below the floor
    state = soft.cluster.run(["squeue", "-h", "-j", jid, "-o", "%T %m"], check=False).stdout.split()
    assert state[0] == "PENDING", state  # changed before it started
    assert state[1] == f"{change['new_mem_mb']}M", state


def test_a_pending_jobs_memory_follows_its_siblings_too(soft):
    # the trained runs of SIGNATURE used 200 of 1000 MB: harp's 2000 of 4000 MB is far too much
    _pending_mem_resized(soft, "pending_mem", 2000, 1800)


def test_a_pending_workflow_task_harp_kept_at_submission_is_sized_when_a_sibling_finishes(soft):
    # its type's runs used 200 of 1000 MB; harp had kept the 1000 MB asked (registered with no change)
    _pending_mem_resized(soft, "pending_task", 1000, 900)
