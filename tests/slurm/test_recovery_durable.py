"""Recovery that never loses a job and never runs different work, on the real Slurm 22.05.

Real harpd daemons and real ``harp-submit`` submissions, all submitted at the
start and waited for side by side (helpers from ``test_recovery``):

* ``user`` (a per-user harpd: resubmits): a job submitted with an exported
  ``DUR=90`` and a variable from a file the user sourced times out at 1 min
  and is resubmitted; the new job sees the same values (Slurm's copy of the
  environment, ``AccountingStoreFlags=job_env``), so it does the same work;
* ``cap1`` (``recovery.max_request_factor = 1``): a job that runs out at its
  own 1-minute request is not run again, with the reason; ``cap2`` (factor
  2): doubled once to 2 minutes, then stopped at that cap;
* ``late`` (a root harpd: requeues): SIGKILLed before its job times out and
  restarted well after; the job is requeued, its output file holds both
  runs, ``harp status`` says where, and sacct's REQUEUED row (ending at the
  requeue) is read as the run it was, not as a run lasting until the requeue;
* ``fresh``: six small runs of a program make a dry run cut ``--mem 200M ->
  100M``; the seventh is killed at 100M; the dry run right after harpd has its
  outcome no longer cuts;
* ``gone`` (a root harpd), last: SIGKILLed, its timed-out job kept past
  ``MinJobAge`` (lowered for this test with ``scontrol reconfigure``, restored
  after), restarted: the job, no longer in slurmctld, is resubmitted from
  accounting's script and environment and completes the same work.

Why MinJobAge is lowered here and not in scripts/localslurm: every other
recovery test needs finished jobs to stay in slurmctld long enough to be
requeued on a busy machine, and a cluster-wide short MinJobAge would race
them; this test lowers it only while the other chains of the module are done.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from harp_submit import client
from harpd.config import HarpSettings
from harpd.slurm.cli_backend import CliBackend
from tests.helpers.users import ensure_user, user_python
from tests.helpers.wait import wait_for
from tests.slurm.test_recovery import POLL_S, RUN_HARP, RUN_SUBMIT, USER, Daemon, Run

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]

# DUR and FROM_FILE come from the submitting shell: lost, the job would sleep 5 s and "complete"
ENV_JOB = (
    "#!/bin/bash\n#HARP retry\nprintf 'DUR=%s FROM_FILE=%s\\n' \"${DUR:-unset}\" \"${FROM_FILE:-unset}\""
    " > \"env-$SLURM_JOB_ID.txt\"\nsleep \"${DUR:-5}\"\n"
)
SOURCED = "export FROM_FILE='from a sourced file: a b'\n"
SCRIPTS = {
    "envjob.sh": ENV_JOB,
    "sleep90.sh": "#!/bin/bash\n#HARP retry\nsleep 90\n",
    "sleep150.sh": "#!/bin/bash\n#HARP retry\nsleep 150\n",
    # each run says which it is; the second ends at once
    "runs.sh": "#!/bin/bash\n#HARP retry\necho \"run ${SLURM_RESTART_COUNT:-0}\"\n"
    "[ \"${SLURM_RESTART_COUNT:-0}\" -ge 1 ] && exit 0\nsleep 600\n",
    "mem.sh": "#!/bin/bash\n"
    "python3 -c \"import os, time; b = b'x' * (int(os.environ['SIZE']) << 20); time.sleep(4)\"\n",
    "vars.sh": SOURCED,
}


class Harpd(Daemon):
    """A test_recovery Daemon with its own [recovery] settings, which a test may SIGKILL and start again."""

    recovery: str = 'mode = "auto"\nmax_attempts = 3\n'

    def write_config(self) -> None:
        (self.dir / "harpd.toml").write_text(
            f'[server]\nsocket = "{self.socket}"\n[store]\npath = "{self.db}"\n'
            f"[ingest]\npoll_interval_s = {POLL_S}\nmax_backoff_s = 10.0\n[recovery]\n{self.recovery}"
        )

    def kill(self) -> None:
        """SIGKILL, as an OOM killer or `kill -9` would; nothing restarts it until ``start``."""
        self.stopping = True  # the monitor thread lets it lie
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def start_again(self) -> None:
        self.stopping = False
        self._monitor = None
        self.start()


def _harpd(name, base, recovery=None, user=None, py=sys.executable, path=str(REPO), conf=""):
    d = Harpd(name, base / f"d-{name}", user, py, path, conf)
    if recovery is not None:
        d.recovery = recovery
    return d


def _submit(
    r: Run,
    key: str,
    daemon: str,
    script: str,
    *opts: str,
    env: dict[str, str] | None = None,
    source: str | None = None,
    extra: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """harp-submit as the daemon's user from a login-like shell: ``env`` exported, ``source`` sourced first."""
    d = r.daemons[daemon]
    wd = r.workdirs[d.user or "root"]
    base = {
        "SLURM_CONF": str(r.cluster.conf),
        "HARP_SOCKET": d.socket,
        "PYTHONPATH": d.pythonpath,
        "HARP_CONFIG": "/nonexistent/harpd.toml",
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(wd),
        **(env or {}),
    }
    shell = (f"source {source}; " if source else "") + 'exec "$@"'
    argv = [
        "env",
        "-i",
        *(f"{k}={v}" for k, v in base.items()),
        "bash",
        "-c",
        shell,
        "harp-submit",
        d.python,
        "-c",
        RUN_SUBMIT,
        *extra,
        "--parsable",
        *opts,
        script,
    ]
    if d.user:
        argv = ["runuser", "-u", d.user, "--", *argv]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=str(wd), stdin=subprocess.DEVNULL, timeout=120)
    if "--harp-dry-run" not in extra:
        assert proc.returncode == 0, f"harp-submit {script} for {key}: {proc.stderr}"
        job_id = proc.stdout.strip().split(";")[0]
        assert job_id.isdigit(), proc.stdout
        r.jobs[key] = job_id
    return proc


def _env_of(wd: Path, job_id: str) -> str:
    return (wd / f"env-{job_id}.txt").read_text()


def _in_slurmctld(cluster, job_id: str) -> bool:
    return cluster.run(["scontrol", "show", "job", job_id], check=False).returncode == 0


@pytest.fixture(scope="module")
def run(slurm_cluster):
    c = slurm_cluster
    flags = c.run(["scontrol", "show", "config"]).stdout
    if "job_env" not in flags or "job_script" not in flags:
        pytest.fail(
            "the test cluster's AccountingStoreFlags lacks job_script/job_env: restart it "
            "(scripts/localslurm stop; scripts/localslurm start) to get scripts/localslurm's",
            pytrace=False,
        )
    pw = ensure_user(USER)
    upy, upath = user_python(USER)
    base = Path(tempfile.mkdtemp(prefix="hrd-", dir="/tmp"))
    base.chmod(0o755)
    workdirs = {"root": base / "work-root", USER: base / "work-user"}
    for owner, wd in workdirs.items():
        wd.mkdir()
        for name, text in SCRIPTS.items():
            (wd / name).write_text(text)
        if owner != "root":
            for p in [wd, *wd.iterdir()]:
                os.chown(p, pw.pw_uid, pw.pw_gid)
    conf = str(c.conf)
    daemons = {
        "user": _harpd("user", base, user=USER, py=upy, path=upath, conf=conf),
        "cap1": _harpd("cap1", base, 'max_attempts = 3\nmax_request_factor = 1.0\n', conf=conf),
        "cap2": _harpd("cap2", base, 'max_attempts = 3\nmax_request_factor = 2.0\n', conf=conf),
        "late": _harpd("late", base, conf=conf),
        "fresh": _harpd("fresh", base, "enabled = false\n", conf=conf),
        "gone": _harpd("gone", base, conf=conf),
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
        _submit(r, "env", "user", "envjob.sh", "--time=1", "--mem=100M", env={"DUR": "90"}, source="./vars.sh")
        _submit(r, "cap1", "cap1", "sleep90.sh", "--time=1", "--mem=100M")
        _submit(r, "cap2", "cap2", "sleep150.sh", "--time=1", "--mem=100M")
        _submit(r, "late", "late", "runs.sh", "-p", "tiny", "--time=1", "--mem=100M")
        _submit(r, "gone", "gone", "envjob.sh", "--time=1", "--mem=100M", env={"DUR": "90"}, source="./vars.sh")
        for key, daemon in [("env", "user"), ("cap1", "cap1"), ("cap2", "cap2"), ("late", "late"), ("gone", "gone")]:
            r.wait_registered(key, daemon)
        daemons["late"].kill()
        daemons["gone"].kill()
        yield r
    finally:
        for d in daemons.values():
            d.stop()
        ids = set(r.jobs.values())
        for d in daemons.values():  # every attempt's job, to cancel what is left
            for jid in list(r.jobs.values()):
                try:
                    for a in client.call(d.socket, {"op": "status", "job_id": jid}, 2.0)["job"].get("attempts") or []:
                        ids.add(str(a.get("job_id")))
                except client.HarpdUnavailable:
                    pass
        live = c.run(["squeue", "-h", "-o", "%i"], check=False).stdout.split()
        if [j for j in live if j in ids]:
            c.run(["scancel", *[j for j in live if j in ids]], check=False)
        print(f"\ndurable recovery module: {time.monotonic() - r.started:.0f} s")
        shutil.rmtree(base, ignore_errors=True)


def _steps(job):
    return [(a["attempt"], a["step"], a["outcome"]) for a in job["attempts"]]


# ---------------------------------------------------------------- the job's own environment


def test_a_resubmitted_job_runs_with_the_environment_it_was_submitted_with(run):
    job = run.wait_chain("env", "user")
    jid = run.jobs["env"]
    assert _steps(job) == [(1, "done", "timeout"), (2, "done", "completed")]
    new = job["attempts"][1]["job_id"]
    assert job["attempts"][1]["limits"]["mode"] == "resubmit" and new != jid
    wd = run.workdirs[USER]
    want = "DUR=90 FROM_FILE=from a sourced file: a b\n"
    assert _env_of(wd, jid) == want
    assert _env_of(wd, new) == want  # the same work: not the script's default of 5 s
    [row] = run.sacct(new, "JobID,State,Elapsed")
    assert row["State"].startswith("COMPLETED") and row["Elapsed"] >= "00:01:30", row


# ---------------------------------------------------------------- the cap at and above the request


def test_recovery_capped_at_the_users_request_stops_there(run):
    job = run.wait_chain("cap1", "cap1")
    assert _steps(job) == [(1, "done", "timeout")]
    stop = job["attempts"][0]["limits"]["stop"]
    assert "at the cap, the user's own request (recovery.max_request_factor = 1) = 1 min" in stop, stop
    assert len(run.sacct(run.jobs["cap1"], "JobID,State", duplicates=True)) == 1  # never run again


def test_recovery_capped_at_twice_the_request_goes_there_once(run):
    job = run.wait_chain("cap2", "cap2")
    jid = run.jobs["cap2"]
    assert _steps(job) == [(1, "done", "timeout"), (2, "done", "timeout")]
    assert [a["limits"]["time_s"] for a in job["attempts"]] == [60, 120]
    stop = job["attempts"][1]["limits"]["stop"]
    assert "at the cap, 2 x the user's request (recovery.max_request_factor) = 2 min" in stop, stop
    runs = run.sacct(jid, "JobID,State,Timelimit", duplicates=True)
    assert [r["Timelimit"] for r in runs] == ["00:01:00", "00:02:00"]


# ---------------------------------------------------------------- requeued late: accounting and output


def test_a_job_requeued_long_after_its_run_keeps_its_usage_and_its_output(run):
    d, jid, c = run.daemons["late"], run.jobs["late"], run.cluster
    assert c.wait_job(jid, timeout=300) == "TIMEOUT"
    end = float(
        subprocess.run(
            ["sacct", "-X", "-n", "-P", "-j", jid, "-o", "End"],
            capture_output=True,
            text=True,
            env=dict(c.env, SLURM_TIME_FORMAT="%s"),
            check=True,
        ).stdout.split()[0]
    )
    # harpd stays away a while after the run ended (a down harpd), then comes back and requeues
    wait_for("harpd down 45 s past the job's end", lambda: time.time() - end >= 45, 120, interval=1)
    # after a SIGKILL the socket file is left behind: the client names it as such
    with pytest.raises(client.HarpdUnavailable) as gone:
        client.call(d.socket, {"op": "health"}, 2.0)
    assert gone.value.reason == f"harpd is not answering at {d.socket} (connection refused; stale socket?)"
    d.start_again()
    job = run.wait_chain("late", "late")
    assert _steps(job) == [(1, "done", "timeout"), (2, "done", "completed")]
    assert job["attempts"][1]["limits"]["mode"] == "requeue"
    rows = c.sacct(jid, "JobID,State,Elapsed", steps=False, duplicates=True)
    assert [r["State"].split()[0] for r in rows] == [c.requeued_state("TIMEOUT"), "COMPLETED"], rows
    h, m, s = (int(x) for x in rows[0]["Elapsed"].split(":"))
    if c.version == "22.05":
        assert h * 3600 + m * 60 + s >= 100  # 22.05: sacct's REQUEUED row runs until the requeue
    else:
        assert h * 3600 + m * 60 + s < 100  # 25.11, 26.05: the row keeps the run's own end
    # ... the run lasted its minute: harp reads it so on every release, from any store that reads it now
    [first] = [r for r in CliBackend(HarpSettings()).sacct_jobs([jid], None, None, True) if r.attempt == 1]
    assert first.outcome.value == "timeout" and 60 <= first.used_time_s < 90, first
    assert first.end_time - first.start_time == first.used_time_s
    from harpd.store import Store

    with Store.open(d.db) as s:
        stored = [r for r in s.iter_jobs() if r.job_id == jid and r.attempt == 1]
    assert stored and stored[0].used_time_s < 90
    # both runs' messages are in the output file (--open-mode=append), and harp status says where
    out = (run.workdirs["root"] / f"slurm-{jid}.out").read_text()
    assert "run 0" in out and "DUE TO TIME LIMIT" in out and "run 1" in out, out
    status = subprocess.run(
        [sys.executable, "-c", RUN_HARP, "status", jid],
        env={**os.environ, "HARP_SOCKET": d.socket, "HARP_CONFIG": "/nonexistent/harpd.toml", "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    assert (
        status.stdout.count(f"output: {run.workdirs['root']}/slurm-{jid}.out (the job's runs one after another)") == 2
    )


# ---------------------------------------------------------------- fresh history


def test_a_dry_run_right_after_an_oom_outcome_does_not_cut_below_what_failed(run):
    d = run.daemons["fresh"]
    opts = ("--time=5", "--mem=200M")
    small = [f"small{i}" for i in range(6)]
    for key in small:
        _submit(run, key, "fresh", "mem.sh", *opts, env={"SIZE": "1"})
    for key in small:
        run.wait_closed(key, "fresh")

    def dry() -> str:
        return _submit(run, "dry", "fresh", "mem.sh", *opts, env={"SIZE": "300"}, extra=("--harp-dry-run",)).stderr

    assert "--mem 200M -> 100M" in dry()
    _submit(run, "big", "fresh", "mem.sh", *opts, env={"SIZE": "300"})  # harp cuts it to 100M: killed
    jid = run.jobs["big"]
    wait_for("harpd has the OOM outcome", lambda: d.status(jid).get("outcome") == "oom", 300, interval=0.2)
    out = dry()  # at once: no refresh, no request in between
    assert "--mem 200M" not in out, out


# ---------------------------------------------------------------- past MinJobAge (last: it lowers MinJobAge)


def test_a_job_that_left_slurmctld_is_resubmitted_from_accounting(run):
    c, d, jid = run.cluster, run.daemons["gone"], run.jobs["gone"]
    assert c.wait_job(jid, timeout=300) == "TIMEOUT"
    conf = Path(c.conf)
    original = conf.read_text()
    assert re.search(r"^MinJobAge=\d+$", original, re.M)
    try:
        conf.write_text(re.sub(r"^MinJobAge=\d+$", "MinJobAge=2", original, flags=re.M))
        c.run(["scontrol", "reconfigure"])
        # slurmctld purges finished jobs past MinJobAge about once a minute
        wait_for("slurmctld dropped the job", lambda: not _in_slurmctld(c, jid), 240, interval=2.0)
    finally:
        conf.write_text(original)
        c.run(["scontrol", "reconfigure"], check=False)
    # 22.05: scontrol says nothing on stdout and exits 0 for a job it no longer holds
    w = c.run(["scontrol", "write", "batch_script", jid, "-"], check=False)
    assert w.returncode == 0 and w.stdout == ""
    d.start_again()
    job = run.wait_chain("gone", "gone")
    assert _steps(job) == [(1, "done", "timeout"), (2, "done", "completed")]
    a2 = job["attempts"][1]
    assert a2["limits"]["mode"] == "resubmit" and "MinJobAge" in a2["limits"]["note"]
    new = a2["job_id"]
    wd = run.workdirs["root"]
    assert _env_of(wd, new) == _env_of(wd, jid) == "DUR=90 FROM_FILE=from a sourced file: a b\n"
    [row] = run.sacct(new, "JobID,State,Comment")
    assert row["State"].startswith("COMPLETED") and row["Comment"] == f"harp retry 2 of {jid}"
    health = client.call(d.socket, {"op": "health"}, 5.0)
    assert health["accounting"]["job_script"] and health["accounting"]["job_env"]
