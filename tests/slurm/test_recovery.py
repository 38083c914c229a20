"""Recovery against the real Slurm 22.05, end to end.

Real ``harpd`` daemons (the real ingest poller with recovery as its listener,
polling every 2 s) and real ``harp-submit`` submissions of scripts that opt
in with ``#HARP retry``:

* a root harpd (``mode = "auto"`` resolves to requeue): a 90 s job under
  ``--time=1`` completes on its second run with a 2-minute limit, same job
  id; a 300 MB job under ``--mem=100M`` completes at 400M after 200M; a
  ``tiny`` job (MaxTime 3) under ``--time=2`` that needs 5 minutes gets the
  cap once and is then given up, with the reason; a job without
  ``#HARP retry`` and a plain failure are left alone;
* a per-user harpd run by ``harptest1`` (``auto`` resolves to resubmit): the
  same TIMEOUT and OOM jobs come back as new jobs of harptest1 with the same
  script, arguments and working directory and a ``harp retry N of JOB``
  comment;
* one harpd of each kind that SIGKILLs itself at one step
  (``HARP_TEST_CRASH_AT``) and is restarted: the attempt happens exactly once.

Everything is submitted first and then waited for, so the module takes about
as long as its slowest chain (the capped one: 2 + 3 minutes of run time).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harp_submit import client
from tests.helpers.harpd_process import HARD_CUTS_KEY
from tests.helpers.users import ensure_user, user_python
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
USER = "harptest1"
POLL_S = 2.0
RUN_SUBMIT = "import sys; from harp_submit.cli import main; sys.exit(main())"
RUN_HARP = "import sys; from harpd.cli.main import main; sys.exit(main())"
CHAIN_TIMEOUT_S = 15 * 60

SCRIPTS = {
    "sleep90.sh": "#!/bin/bash\n#HARP retry\nprintf '<%s>' \"$@\" > \"args-$SLURM_JOB_ID.txt\"\n"
    "sleep 90\necho finished\n",
    "oom.sh": "#!/bin/bash\n#HARP retry\npython3 -c \"s = b'x' * (300 << 20); import time; time.sleep(10)\"\n",
    "need5.sh": "#!/bin/bash\n#HARP retry\nsleep 300\n",
    "plain.sh": "#!/bin/bash\nsleep 600\n",
    "fails.sh": "#!/bin/bash\n#HARP retry\nexit 3\n",
}


# ---------------------------------------------------------------- helpers


@dataclass
class Daemon:
    """One harpd process (restarted when it SIGKILLs itself at its crash point)."""

    name: str
    dir: Path
    user: str | None  # None: root
    python: str
    pythonpath: str
    slurm_conf: str
    crash_at: str | None = None
    proc: subprocess.Popen | None = None
    crashes: int = 0
    restarts: int = 0
    stopping: bool = False
    _monitor: threading.Thread | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def socket(self) -> str:
        return str(self.dir / "harpd.sock")

    @property
    def db(self) -> Path:
        return self.dir / "harp.db"

    @property
    def log(self) -> Path:
        return self.dir / "harpd.log"

    def write_config(self) -> None:
        (self.dir / "harpd.toml").write_text(
            f'[server]\nsocket = "{self.socket}"\n'
            f'[store]\npath = "{self.db}"\n'
            f"[ingest]\npoll_interval_s = {POLL_S}\nmax_backoff_s = 10.0\n"
            '[recovery]\nmode = "auto"\nmax_attempts = 3\n'
            f"[predict]\n{HARD_CUTS_KEY}\n"  # a per-user harpd is under hard limits: these tests need its cuts
        )

    def _argv(self) -> list[str]:
        cmd = [self.python, "-m", "harpd.daemon.main", "--config", str(self.dir / "harpd.toml"), "--log-level", "info"]
        env = [
            f"SLURM_CONF={self.slurm_conf}",
            f"PYTHONPATH={self.pythonpath}",
            f"PATH={os.environ.get('PATH', '/usr/bin:/bin')}",
        ]
        if self.crash_at and not self.crashes:
            env.append(f"HARP_TEST_CRASH_AT={self.crash_at}")
        if self.user:
            home = pwd.getpwnam(self.user).pw_dir
            return [
                "runuser",
                "-u",
                self.user,
                "--",
                "env",
                "-i",
                f"HOME={home}",
                f"USER={self.user}",
                f"LOGNAME={self.user}",
                *env,
                *cmd,
            ]
        return ["env", "-i", "HOME=/root", "USER=root", *env, *cmd]

    def start(self) -> None:
        with self.lock:
            with open(self.log, "a") as fh:
                fh.write(
                    f"---- start ({'crash at ' + self.crash_at if self.crash_at and not self.crashes else 'normal'})\n"
                )
                self.proc = subprocess.Popen(
                    self._argv(), stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                )
        proc = self.proc

        def answering() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"harpd {self.name} exited {proc.returncode} at start:\n{self.log_tail()}", pytrace=False)
            try:
                client.call(self.socket, {"op": "health"}, 2.0)
                return True
            except client.HarpdUnavailable:
                return False

        wait_for(f"harpd {self.name} answering", answering, 60, interval=0.2, log=self.log_tail)
        if self._monitor is None:
            self._monitor = threading.Thread(target=self._watch, name=f"monitor-{self.name}", daemon=True)
            self._monitor.start()

    def _watch(self) -> None:
        """Restart a harpd that killed itself at its crash point, like systemd's Restart=."""
        while not self.stopping:
            proc = self.proc
            assert proc is not None
            rc = proc.wait()
            if self.stopping:
                return
            # SIGKILLed: -9 from Popen, 137 through runuser (which reports its child's signal as 128+N)
            if rc in (-signal.SIGKILL, 128 + signal.SIGKILL) and self.crash_at and not self.crashes:
                self.crashes += 1
            self.restarts += 1
            try:
                self.start()
            except BaseException:  # noqa: BLE001 - reported by the tests through the log
                with open(self.log, "a") as fh:
                    fh.write(f"---- restart failed (exit {rc})\n")
                return

    def stop(self) -> None:
        self.stopping = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def _ask(self, request: dict[str, Any], what: str) -> dict[str, Any]:
        """harpd's answer to ``request``, waiting out a restart after its crash."""

        def answer() -> dict[str, Any] | None:
            try:
                return client.call(self.socket, request, 10.0)
            except client.HarpdUnavailable:  # restarting after its crash
                return None

        return wait_for(f"harpd {self.name}: {what}", answer, 60, interval=1.0, log=self.log_tail)

    def status(self, job_id: str) -> dict[str, Any]:
        """harpd's own status op (the test runs as root: an admin for every harpd)."""
        return self._ask({"op": "status", "job_id": job_id}, f"status of {job_id}")["job"]

    def polls(self) -> int:
        """How many sacct polls harpd has completed since it started (health's ``ingest.polls``)."""
        return int(self._ask({"op": "health"}, "health")["ingest"]["polls"])

    def wait_polled(self, n: int = 2) -> None:
        """Until harpd has completed ``n`` more polls (outcomes stored, recovery told) than now.

        The positive signal before asserting that nothing more happened: harpd
        has looked at Slurm again since, and acted on what it saw.  A harpd
        restarted meanwhile counts from 0 again: then ``n`` polls of the new one.
        """
        start = self.polls()

        def polled() -> bool:
            now = self.polls()
            return now >= (start + n if now >= start else n)

        wait_for(f"harpd {self.name} to poll {n} more time(s)", polled, 120, interval=0.5, log=self.log_tail)


@dataclass
class Run:
    cluster: Any
    base: Path
    daemons: dict[str, Daemon]
    workdirs: dict[str, Path]
    jobs: dict[str, str] = field(default_factory=dict)  # key -> first job id
    started: float = field(default_factory=time.monotonic)

    def submit(self, key: str, daemon: str, script: str, *args: str, opts: list[str]) -> str:
        d = self.daemons[daemon]
        wd = self.workdirs[d.user or "root"]
        env = [
            f"SLURM_CONF={self.cluster.conf}",
            f"HARP_SOCKET={d.socket}",
            f"PYTHONPATH={d.pythonpath}",
            "HARP_CONFIG=/nonexistent/harpd.toml",
            f"PATH={os.environ.get('PATH', '/usr/bin:/bin')}",
        ]
        argv = ["env", "-i", *env, d.python, "-c", RUN_SUBMIT, "--parsable", *opts, script, *args]
        if d.user:
            argv = ["runuser", "-u", d.user, "--", *argv]
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=str(wd), stdin=subprocess.DEVNULL, timeout=120)
        assert proc.returncode == 0, f"harp-submit {script} for {key}: {proc.stderr}"
        job_id = proc.stdout.strip().split(";")[0]
        assert job_id.isdigit(), proc.stdout
        self.jobs[key] = job_id
        return job_id

    def wait_registered(self, key: str, daemon: str) -> None:
        d, jid = self.daemons[daemon], self.jobs[key]

        def registered() -> bool:
            try:
                return bool(d.status(jid).get("registered"))
            except AssertionError:  # no status at all yet
                return False

        # registration runs in the background
        wait_for(f"job {jid} ({key}) registered with harpd {daemon}", registered, 120, interval=0.3, log=d.log_tail)

    def wait_chain(self, key: str, daemon: str, timeout: float = CHAIN_TIMEOUT_S) -> dict[str, Any]:
        """Until the chain ends: its last attempt done and completed, or stopped."""
        d, jid = self.daemons[daemon], self.jobs[key]

        def ended() -> dict[str, Any] | None:
            job = d.status(jid)
            att = job.get("attempts") or []
            last = att[-1] if att else None
            return (
                job
                if last and last["step"] == "done" and (last["outcome"] == "completed" or last["limits"].get("stop"))
                else None
            )

        def why() -> str:
            queue = self.cluster.run(["squeue", "--states=all", "-o", "%i %u %T %r %l %k"], check=False).stdout
            return f"{json.dumps(d.status(jid).get('attempts'), indent=1)}\n{queue}\n{d.log_tail()}"

        return wait_for(f"chain {jid} ({key}) to end", ended, timeout, interval=POLL_S, log=why)

    def wait_closed(self, key: str, daemon: str, timeout: float = 600) -> dict[str, Any]:
        """Until harpd has the job's outcome (its submission closed), plus two polls."""
        d, jid = self.daemons[daemon], self.jobs[key]
        wait_for(f"job {jid} ({key}) closed", lambda: d.status(jid).get("state") == "done", timeout, POLL_S, d.log_tail)
        d.wait_polled(2)  # recovery has had two polls to act on the outcome
        return d.status(jid)

    def sacct(self, job_id: str, fields: str, *, duplicates: bool = False) -> list[dict[str, str]]:
        return [
            r for r in self.cluster.sacct(job_id, fields, steps=False, duplicates=duplicates) if r["JobID"] == job_id
        ]


@pytest.fixture(scope="module")
def run(slurm_cluster):
    c = slurm_cluster
    pw = ensure_user(USER)
    upy, upath = user_python(USER)
    base = Path(tempfile.mkdtemp(prefix="hrc-", dir="/tmp"))  # short: socket paths are limited
    base.chmod(0o755)
    workdirs = {"root": base / "work-root", USER: base / "work-user"}
    for owner, wd in workdirs.items():
        wd.mkdir()
        for name, text in SCRIPTS.items():
            (wd / name).write_text(text)
        if owner != "root":
            for p in [wd, *wd.iterdir()]:
                os.chown(p, pw.pw_uid, pw.pw_gid)
    daemons = {
        "root": Daemon("root", base / "d-root", None, sys.executable, str(REPO), str(c.conf)),
        "user": Daemon("user", base / "d-user", USER, upy, upath, str(c.conf)),
        "crash_rq": Daemon("crash_rq", base / "d-crq", None, sys.executable, str(REPO), str(c.conf), crash_at="held"),
        "crash_rs": Daemon("crash_rs", base / "d-crs", USER, upy, upath, str(c.conf), crash_at="submitted"),
    }
    for d in daemons.values():
        d.dir.mkdir()
        d.write_config()
        if d.user:
            os.chown(d.dir, pw.pw_uid, pw.pw_gid)
            os.chown(d.dir / "harpd.toml", pw.pw_uid, pw.pw_gid)
    r = Run(c, base, daemons, workdirs)
    try:
        for d in daemons.values():
            d.start()
        # everything first (the cluster runs them side by side), then wait
        # a comment of the job's own (Snakemake's executor names the rule there) survives the requeue
        r.submit(
            "rq_timeout",
            "root",
            "sleep90.sh",
            "a b",
            "c",
            opts=["--time=1", "--mem=100M", "--comment=rule_slow_wildcards_s1"],
        )
        r.submit("rq_oom", "root", "oom.sh", opts=["--time=5", "--mem=100M"])
        r.submit("rq_cap", "root", "need5.sh", opts=["-p", "tiny", "--time=2", "--mem=100M"])
        r.submit("rq_plain", "root", "plain.sh", opts=["-p", "tiny", "--time=1", "--mem=100M"])
        r.submit("rq_fails", "root", "fails.sh", opts=["--time=1", "--mem=100M"])
        r.submit("rs_timeout", "user", "sleep90.sh", "a b", "c", opts=["--time=1", "--mem=100M"])
        r.submit("rs_oom", "user", "oom.sh", opts=["--time=5", "--mem=100M"])
        r.submit("crash_rq", "crash_rq", "oom.sh", opts=["--time=5", "--mem=100M"])
        r.submit("crash_rs", "crash_rs", "oom.sh", opts=["--time=5", "--mem=100M"])
        for key, daemon in [
            ("rq_timeout", "root"),
            ("rq_oom", "root"),
            ("rq_cap", "root"),
            ("rq_plain", "root"),
            ("rq_fails", "root"),
            ("rs_timeout", "user"),
            ("rs_oom", "user"),
            ("crash_rq", "crash_rq"),
            ("crash_rs", "crash_rs"),
        ]:
            r.wait_registered(key, daemon)
        yield r
    finally:
        ids = set(r.jobs.values())  # and every attempt's job, to cancel what is left
        for d in daemons.values():
            for jid in list(r.jobs.values()):
                try:
                    for a in client.call(d.socket, {"op": "status", "job_id": jid}, 2.0)["job"].get("attempts") or []:
                        ids.add(str(a.get("job_id")))
                except client.HarpdUnavailable:
                    pass
        for d in daemons.values():
            d.stop()
        live = c.run(["squeue", "-h", "-o", "%i"], check=False).stdout.split()
        leftover = [j for j in live if j in ids]
        if leftover:
            c.run(["scancel", *leftover], check=False)
        print(f"\nrecovery module: {time.monotonic() - r.started:.0f} s from first submission to teardown")
        shutil.rmtree(base, ignore_errors=True)


def _steps(job: dict[str, Any]) -> list[tuple]:
    return [(a["attempt"], a["step"], a["outcome"]) for a in job["attempts"]]


# ---------------------------------------------------------------- requeue (root harpd)


def test_timeout_requeued_in_place_completes_with_2_minutes(run):
    job = run.wait_chain("rq_timeout", "root")
    jid = run.jobs["rq_timeout"]
    assert _steps(job) == [(1, "done", "timeout"), (2, "done", "completed")]
    a1, a2 = job["attempts"]
    assert a1["limits"]["time_s"] == 60 and a2["limits"]["time_s"] == 120
    assert a2["limits"]["mode"] == "requeue" and a2["job_id"] == jid  # same job id, same user
    assert "doubled time" in a2["reason"] and "1 min -> 2 min" in a2["reason"]
    runs = run.sacct(jid, "JobID,State,Timelimit,Comment,User", duplicates=True)
    # run 1 as sacct words it: REQUEUED on 22.05, still TIMEOUT on 25.11 and 26.05 (harp's records agree below)
    assert [r["State"].split()[0] for r in runs] == [run.cluster.requeued_state("TIMEOUT"), "COMPLETED"], runs
    assert runs[-1]["Timelimit"] == "00:02:00" and runs[-1]["User"] == "root"
    assert runs[-1]["Comment"] == f"rule_slow_wildcards_s1; harp retry 2 of {jid}"
    args = (run.workdirs["root"] / f"args-{jid}.txt").read_text()
    assert args == "<a b><c>"  # requeue keeps the script's arguments

    # every attempt is recorded for the models: the TIMEOUT run says "needs more than 60 s"
    from harpd.store import Store

    with Store.open(run.daemons["root"].db) as s:
        recs = sorted((r for r in s.iter_jobs() if r.job_id == jid), key=lambda r: r.attempt)
    assert [(r.attempt, r.outcome.value, r.censored_time, r.req_time_s) for r in recs] == [
        (1, "timeout", True, 60.0),
        (2, "completed", False, 120.0),
    ]
    assert recs[0].used_time_s >= 60 and recs[1].harp_sized


def test_oom_requeued_with_memory_doubled_twice(run):
    job = run.wait_chain("rq_oom", "root")
    jid = run.jobs["rq_oom"]
    assert _steps(job) == [(1, "done", "oom"), (2, "done", "oom"), (3, "done", "completed")]
    assert [a["limits"]["mem_mb"] for a in job["attempts"]] == [100, 200, 400]
    assert [a["limits"]["time_s"] for a in job["attempts"]] == [300, 300, 300]  # only memory doubled
    runs = run.sacct(jid, "JobID,State,ReqMem", duplicates=True)
    assert [r["ReqMem"] for r in runs] == ["100M", "200M", "400M"], runs
    assert runs[-1]["State"].startswith("COMPLETED")


def test_cap_is_used_once_then_the_chain_stops_with_its_reason(run):
    job = run.wait_chain("rq_cap", "root")
    jid = run.jobs["rq_cap"]
    assert _steps(job) == [(1, "done", "timeout"), (2, "done", "timeout")]
    a1, a2 = job["attempts"]
    assert a1["limits"]["time_s"] == 120 and a2["limits"]["time_s"] == 180
    assert "to the cap, partition tiny MaxTime = 3 min" in a2["reason"]
    assert "at the cap, partition tiny MaxTime = 3 min: cannot raise further; not resubmitted" in a2["limits"]["stop"]
    run.daemons["root"].wait_polled(2)  # nothing more happens: harpd has looked twice since
    assert len(run.daemons["root"].status(jid)["attempts"]) == 2
    runs = run.sacct(jid, "JobID,State,Timelimit", duplicates=True)
    assert [(r["State"].split()[0], r["Timelimit"]) for r in runs] == [
        (run.cluster.requeued_state("TIMEOUT"), "00:02:00"),
        ("TIMEOUT", "00:03:00"),
    ]
    # two TIMEOUT runs in sacct on 25.11/26.05, and still only two attempts: the first is not recovered twice
    run.daemons["root"].wait_polled(2)  # harpd has seen both runs in sacct since
    assert len(run.daemons["root"].status(jid)["attempts"]) == 2


def test_jobs_that_did_not_opt_in_or_failed_otherwise_are_left_alone(run):
    for key in ("rq_fails", "rq_plain"):
        job = run.wait_closed(key, "root")
        assert job["attempts"] == [], (key, job)
        runs = run.sacct(run.jobs[key], "JobID,State", duplicates=True)
        assert len(runs) == 1, runs
    assert run.daemons["root"].status(run.jobs["rq_plain"])["outcome"] == "timeout"
    assert run.daemons["root"].status(run.jobs["rq_fails"])["outcome"] == "failed"


# ---------------------------------------------------------------- resubmit (per-user harpd)


def test_timeout_resubmitted_by_a_per_user_harpd_as_a_new_job(run):
    job = run.wait_chain("rs_timeout", "user")
    jid = run.jobs["rs_timeout"]
    assert _steps(job) == [(1, "done", "timeout"), (2, "done", "completed")]
    a2 = job["attempts"][1]
    new = a2["job_id"]
    assert a2["limits"]["mode"] == "resubmit" and new != jid and a2["limits"]["time_s"] == 120
    [row] = run.sacct(new, "JobID,State,Timelimit,Comment,User,WorkDir,JobName,ReqMem")
    assert row["State"].startswith("COMPLETED") and row["Timelimit"] == "00:02:00"
    assert row["Comment"] == f"harp retry 2 of {jid}" and row["User"] == USER
    assert row["WorkDir"] == str(run.workdirs[USER]) and row["JobName"] == "sleep90.sh" and row["ReqMem"] == "100M"
    # same script, same arguments, same working directory
    assert (run.workdirs[USER] / f"args-{new}.txt").read_text() == "<a b><c>"
    assert "finished" in (run.workdirs[USER] / f"slurm-{new}.out").read_text()
    # the new job's status leads back to the chain
    via_new = run.daemons["user"].status(new)
    assert via_new["chain_id"] == jid and via_new["record"]["attempt"] == 2
    assert via_new["record"]["outcome"] == "completed" and via_new["record"]["req_time_s"] == 120


def test_oom_resubmitted_by_a_per_user_harpd(run):
    job = run.wait_chain("rs_oom", "user")
    jid = run.jobs["rs_oom"]
    assert _steps(job) == [(1, "done", "oom"), (2, "done", "oom"), (3, "done", "completed")]
    ids = [a["job_id"] for a in job["attempts"]]
    assert ids[0] == jid and len(set(ids)) == 3
    reqs = [run.sacct(j, "JobID,ReqMem,User,Comment")[0] for j in ids]
    assert [r["ReqMem"] for r in reqs] == ["100M", "200M", "400M"]
    assert all(r["User"] == USER for r in reqs)
    assert [r["Comment"] for r in reqs[1:]] == [f"harp retry 2 of {jid}", f"harp retry 3 of {jid}"]
    rec2 = run.daemons["user"].status(ids[1])["record"]
    assert rec2["outcome"] == "oom" and rec2["censored_mem"] and rec2["attempt"] == 2


def test_harp_status_shows_the_attempts_to_the_user(run):
    run.wait_chain("rs_oom", "user")
    d = run.daemons["user"]
    jid = run.jobs["rs_oom"]
    env = [f"HARP_SOCKET={d.socket}", f"PYTHONPATH={d.pythonpath}", "HARP_CONFIG=/nonexistent/harpd.toml"]
    proc = subprocess.run(
        ["runuser", "-u", USER, "--", "env", "-i", *env, d.python, "-c", RUN_HARP, "status", jid],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"job {jid}: {USER}" in out and "recovery:      3 attempt(s)" in out
    assert "[time 5 min, mem 200M, partition short]  resubmitted as a new job" in out
    assert "why: ran out of mem; doubled mem; attempt 3 of 3: memory 200M -> 400M" in out
    assert f"Slurm comment: harp retry 2 of {jid}" in out


# ---------------------------------------------------------------- killed mid-recovery


def test_requeue_killed_after_requeuehold_happens_exactly_once(run):
    d = run.daemons["crash_rq"]
    job = run.wait_chain("crash_rq", "crash_rq")
    jid = run.jobs["crash_rq"]
    assert d.crashes == 1, d.log_tail()
    assert "HARP_TEST_CRASH_AT=held: killing harpd" in d.log.read_text()
    assert _steps(job) == [(1, "done", "oom"), (2, "done", "oom"), (3, "done", "completed")]
    runs = run.sacct(jid, "JobID,State,ReqMem", duplicates=True)
    assert [r["ReqMem"] for r in runs] == ["100M", "200M", "400M"], runs


def test_resubmit_killed_after_sbatch_happens_exactly_once(run):
    d = run.daemons["crash_rs"]
    job = run.wait_chain("crash_rs", "crash_rs")
    jid = run.jobs["crash_rs"]
    assert d.crashes == 1, d.log_tail()
    log = d.log.read_text()
    assert "HARP_TEST_CRASH_AT=submitted: killing harpd" in log
    assert "found its resubmission" in log  # adopted after the restart, not submitted again
    assert _steps(job) == [(1, "done", "oom"), (2, "done", "oom"), (3, "done", "completed")]
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 3600))
    out = run.cluster.run(["sacct", "-X", "-n", "-P", "-u", USER, "-S", since, "-o", "JobID,Comment"]).stdout
    comments = [ln.split("|", 1)[1] for ln in out.splitlines() if "|" in ln]
    assert comments.count(f"harp retry 2 of {jid}") == 1 and comments.count(f"harp retry 3 of {jid}") == 1
