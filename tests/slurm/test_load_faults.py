"""harp under load and faults, against the real cluster: every job lands exactly once, always.

* load: 100 harp-submit runs from 10 concurrent clients through a real
  harpd (``bench/load_submit.py`` runs the 1,000 x 20 version and prints
  the figures);
* harpd SIGKILLed in the middle of a load, and restarted;
* the store deleted, read-only, corrupted, or on a full disk: harpd says so
  (health, log, error answers: one line naming the problem), harp-submit
  keeps submitting, and harpd recovers when the problem is fixed;
* slurmctld unreachable (a SLURM_CONF copy naming a dead port; the shared
  cluster is not touched): harp-submit's exit code and output are sbatch's;
* slurmdbd down, on a second cluster of our own: ingest backs off, and once
  slurmdbd is back every outcome is stored;
* job names, comments, script names and #HARP lines carrying shell syntax
  travel through harp-submit, harpd, Slurm and ingest without anything
  executing them.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests" / "unit" / "submit"))

from load_submit import (  # noqa: E402
    Harpd,
    cancel,
    check_landing,
    client_env,
    harp_warnings,
    queued_jobs,
    registered,
    submit_all,
)
from submit_fakes import FakeHarpd, change, decision  # noqa: E402

from harp_submit import client  # noqa: E402
from tests.helpers.outage import submit_through_outage  # noqa: E402
from tests.helpers.wait import wait_for  # noqa: E402

pytestmark = pytest.mark.slurm

RUN_MAIN = "import sys; from harp_submit.cli import main; sys.exit(main())"
JOB = "#!/bin/bash\n#SBATCH --time=5\n#SBATCH -o /dev/null\n#SBATCH -p short\ntrue\n"
# what systemd/harpd.service leaves root: no CAP_DAC_OVERRIDE, so file modes bind harpd too
NO_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-all"]


@pytest.fixture
def work():
    d = Path(tempfile.mkdtemp(prefix="hlf-", dir="/tmp"))  # short: socket paths are limited
    os.chmod(d, 0o755)
    (d / "job.sh").write_text(JOB)
    try:
        yield d
    finally:
        if os.path.ismount(d / "small"):
            subprocess.run(["umount", "-l", str(d / "small")], check=False)
        shutil.rmtree(d, ignore_errors=True)


def daemon_env(conf: Path | str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARP_", "SLURM_"))}
    env.update({"SLURM_CONF": str(conf), "PYTHONPATH": str(REPO)})
    return env


@pytest.fixture
def harpds():
    """Start harpd processes; every one is stopped at the end."""
    started: list[Harpd] = []

    def start(d: Path, conf: Path | str, **kw) -> Harpd:
        h = Harpd(d, daemon_env(conf), kw.pop("log_level", "info"), **kw)
        started.append(h)
        return h

    yield start
    for h in started:
        h.stop()


@pytest.fixture
def cleanup_tokens(slurm_cluster):
    tokens: list[str] = []
    yield tokens
    env = client_env(str(slurm_cluster.conf), "/nonexistent")
    for t in tokens:
        cancel([jid for jid, _ in queued_jobs(t, env)], env)


def new_token(tokens: list[str], kind: str) -> str:
    t = f"harp-{kind}-{uuid.uuid4().hex[:8]}"
    tokens.append(t)
    return t


def harp_submit(
    env: dict[str, str], cwd: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", RUN_MAIN, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(cwd),
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        timeout=120,
    )


# ------------------------------------------------------------------------ load


def test_100_submissions_from_10_clients_each_land_exactly_once(slurm_cluster, work, harpds, cleanup_tokens) -> None:
    h = harpds(work, slurm_cluster.conf, log_level="debug")
    h.start()
    token = new_token(cleanup_tokens, "load")
    names = [f"{token}-{i}" for i in range(100)]
    load = submit_all(names, 10, client_env(str(slurm_cluster.conf), h.socket), work, token)

    landing = check_landing(load, names, client_env(str(slurm_cluster.conf), h.socket))
    assert (landing.missing, landing.duplicated, landing.id_mismatch) == ([], [], [])
    assert landing.exactly_once == 100
    assert [r for r in load.results if r.rc != 0] == []
    assert harp_warnings(load) == []  # harpd answered every one in time: no fail-open
    # registrations finish in detached children: once harpd has all of them, nothing is left to go wrong
    wait_for("harpd to have all 100 registrations", lambda: registered(h.socket, load) == 100, 120, interval=1)
    assert h.problems() == []
    assert len(h.latencies("predict")) == 100


def test_harpd_sigkilled_during_the_load_loses_and_duplicates_nothing(
    slurm_cluster, work, harpds, cleanup_tokens
) -> None:
    h = harpds(work, slurm_cluster.conf)
    h.start()
    token = new_token(cleanup_tokens, "kill")
    names = [f"{token}-{i}" for i in range(60)]
    # up: replaces the stale socket, opens the store SIGKILL left
    submit_through_outage(h.kill, h.start, names, client_env(str(slurm_cluster.conf), h.socket), work, token)
    assert client.call(h.socket, {"op": "health"}, 5)["store"] == "ok"


# ---------------------------------------------------------------- store faults


def _corrupt(h: Harpd) -> None:
    for f in sorted(h.store.parent.glob(h.store.name + "*")):
        with open(f, "r+b") as fh:
            fh.write(b"not sqlite" * 4000)


def _read_only(h: Harpd) -> None:
    for f in h.store.parent.glob(h.store.name + "*"):
        os.chmod(f, 0o444)
    os.chmod(h.store.parent, 0o555)


def _writable(h: Harpd) -> None:
    os.chmod(h.store.parent, 0o755)
    for f in h.store.parent.glob(h.store.name + "*"):
        os.chmod(f, 0o644)


def _fill(h: Harpd) -> None:
    subprocess.run(["dd", "if=/dev/zero", f"of={h.store.parent}/filler", "bs=64k"], capture_output=True)


def _unfill(h: Harpd) -> None:
    os.unlink(h.store.parent / "filler")


FAULTS = {
    # name: (make it, undo it or None, what health and the log must say)
    "deleted": (
        lambda h: [f.unlink() for f in h.store.parent.glob(h.store.name + "*")],
        None,
        "the store file was deleted while harpd was running",
    ),
    "read_only": (_read_only, _writable, "store is read-only"),
    "corrupted": (_corrupt, None, "not a harp database (file is not a database)"),
    "disk_full": (_fill, _unfill, "disk full (database or disk is full)"),
}


def _health_store(h: Harpd) -> str:
    return client.call(h.socket, {"op": "health"}, 5)["store"]


def _wait_health(h: Harpd, words: str, timeout: float = 60) -> str:
    """harpd's health answer about its store once it says ``words``."""
    return wait_for(
        f"health to say {words!r}",
        lambda: (lambda got: got if words in got else None)(_health_store(h)),
        timeout,
        interval=0.2,
        log=lambda: h.log.read_text(errors="replace")[-2000:],
    )


@pytest.mark.parametrize("fault", list(FAULTS))
def test_store_fault_harpd_says_so_and_submissions_go_on(
    slurm_cluster, work, harpds, cleanup_tokens, fault: str
) -> None:
    make, undo, words = FAULTS[fault]
    store = None
    if fault == "disk_full":
        (work / "small").mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(work / "small")], check=True)
        store = work / "small" / "harp.db"
    h = harpds(work, slurm_cluster.conf, prefix=NO_DAC, store=store)
    h.start()
    env = client_env(str(slurm_cluster.conf), h.socket)
    token = new_token(cleanup_tokens, f"store-{fault}")

    first = harp_submit(env, work, "-H", "--parsable", "-J", f"{token}-0", f"--comment={token}", "job.sh")
    assert first.returncode == 0 and first.stderr == "", first.stderr
    make(h)
    ids = []
    for i in range(1, 4):  # harp-submit goes on as if nothing happened: predict needs no store
        proc = harp_submit(env, work, "-H", "--parsable", "-J", f"{token}-{i}", f"--comment={token}", "job.sh")
        assert proc.returncode == 0 and proc.stdout.strip().isdigit(), proc.stderr
        assert proc.stderr == ""
        ids.append(proc.stdout.strip())
    names = sorted(n for _, n in queued_jobs(token, env))
    assert names == [f"{token}-{i}" for i in range(4)]  # every job landed, once

    # harpd says so: health, the registration's error answer, the log; one line each, no traceback
    health = _wait_health(h, words)
    assert words in health and "\n" not in health, health
    status = client.call(h.socket, {"op": "health"}, 5)
    assert status["ok"] is True
    with pytest.raises(client.HarpdUnavailable) as refused:
        client.call(h.socket, {"op": "register", "job_id": ids[0], "job": {}, "original": {}, "submitted": {}}, 5)
    assert "store unavailable" in refused.value.reason and words in refused.value.reason
    log = h.log.read_text()
    assert re.search(r" ERROR harpd\.handlers: register for uid 0: .*" + re.escape(words), log), log[-2000:]
    assert "Traceback" not in log

    if undo is not None:  # fixed: harpd carries on by itself, no restart
        undo(h)
        proc = harp_submit(env, work, "-H", "--parsable", "-J", f"{token}-after", f"--comment={token}", "job.sh")
        assert proc.returncode == 0 and proc.stderr == ""
        job_id = proc.stdout.strip()

        def status() -> dict | None:
            try:
                return client.call(h.socket, {"op": "status", "job_id": job_id}, 5)["job"]
            except client.HarpdUnavailable:
                return None

        got = wait_for("the registration after the fix", status, 120, interval=0.2)  # sent in the background
        assert got["registered"] is True
        assert _health_store(h) == "ok"
    elif fault == "corrupted":  # a restart refuses the file in one line, and harp-submit fails open
        h.stop()
        proc = subprocess.run(
            [sys.executable, "-m", "harpd.daemon.main", "--config", str(h.config)],
            capture_output=True,
            text=True,
            env=h.env,
            timeout=60,
        )
        assert proc.returncode == 1
        assert proc.stderr.strip().count("\n") == 0 and "not a harp database" in proc.stderr, proc.stderr
        down = harp_submit(env, work, "-H", "--parsable", "-J", f"{token}-down", f"--comment={token}", "job.sh")
        assert down.returncode == 0 and down.stdout.strip().isdigit()
        assert down.stderr == f"harp: harpd is not running (no socket at {h.socket}); submitting your job unchanged\n"


# ------------------------------------------------------------- slurmctld down


@pytest.fixture
def dead_conf(slurm_cluster, work) -> Path:
    """A copy of the cluster's slurm.conf naming a port nobody listens on."""
    text = slurm_cluster.conf.read_text()
    port = 6817 + 777
    text = re.sub(r"(?m)^SlurmctldPort=.*$", f"SlurmctldPort={port}", text)
    text += "\nMessageTimeout=1\n"  # sbatch gives up in about a second instead of ten
    conf = work / "dead-slurm.conf"
    conf.write_text(text)
    return conf


CASES = {
    "script": (["-H", "job.sh"], None),
    "parsable": (["-H", "--parsable", "-t", "7", "job.sh"], None),
    "stdin": (["-H"], JOB),
    "wrap": (["-H", "--wrap=true", "-t", "3"], None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_slurmctld_unreachable_gives_exactly_sbatchs_own_error(
    slurm_cluster, work, harpds, dead_conf, case: str
) -> None:
    args, stdin = CASES[case]
    h = harpds(work, slurm_cluster.conf)  # harpd itself still reaches the cluster: only the client cannot
    h.start()
    env = client_env(str(dead_conf), h.socket)
    plain = subprocess.run(
        ["sbatch", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(work),
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        timeout=120,
    )
    assert plain.returncode != 0 and "Unable to contact slurm controller" in plain.stderr
    harp = harp_submit(env, work, *args, stdin=stdin)
    assert (harp.returncode, harp.stdout, harp.stderr) == (plain.returncode, plain.stdout, plain.stderr)


def test_slurmctld_unreachable_after_harp_changed_the_request(work, dead_conf) -> None:
    """Even when harp rewrote the job, the user sees sbatch's error and only that (quiet mode)."""
    lying = decision(change("time", "00:09:00"), partition="", max_time_s=None, max_mem_mb=None, max_cpus=None)
    with FakeHarpd(work / "fake.sock", lying) as fake:
        env = client_env(str(dead_conf), fake.path)
        plain = subprocess.run(
            ["sbatch", "--parsable", "job.sh"],
            capture_output=True,
            text=True,
            env=env,
            cwd=str(work),
            stdin=subprocess.DEVNULL,
            timeout=120,
        )
        harp = harp_submit(env, work, "--parsable", "job.sh")
        assert fake.ops("predict")  # harp did ask, and did change the request
    assert plain.returncode != 0
    assert (harp.returncode, harp.stdout, harp.stderr) == (plain.returncode, plain.stdout, plain.stderr)


# -------------------------------------------------------------- slurmdbd down

FAULTS_DIR = Path("/tmp/harp-faults")
FAULTS_OFFSET = "400"


def _localslurm(cmd: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HARP_SLURM_PORT_OFFSET": FAULTS_OFFSET, "HARP_SLURM_DIR": str(FAULTS_DIR)}
    env.pop("SLURM_CONF", None)
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "localslurm"), cmd, str(FAULTS_DIR)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def own_cluster(slurm_cluster):
    """A second cluster of our own (other ports, other directory), stopped at the end."""
    proc = _localslurm("start")
    if proc.returncode != 0:
        pytest.fail(f"second cluster did not start:\n{proc.stderr[-3000:]}", pytrace=False)
    try:
        yield FAULTS_DIR / "etc" / "slurm.conf"
    finally:
        _localslurm("stop")


def test_slurmdbd_down_ingest_backs_off_and_loses_nothing(own_cluster, work, harpds) -> None:
    conf = own_cluster
    (work / "quick.sh").write_text("#!/bin/bash\n#SBATCH -t 2\n#SBATCH -o /dev/null\nsleep 1\n")
    h = harpds(work, conf)
    h.config.write_text(
        h.config.read_text().replace("poll_interval_s = 3600", "poll_interval_s = 1\nmax_backoff_s = 4")
    )
    h.start()
    pids = FAULTS_DIR / "pids" / "slurmdbd"
    os.kill(int(pids.read_text()), signal.SIGKILL)

    env = client_env(str(conf), h.socket)
    token = uuid.uuid4().hex[:8]
    ids = []
    for i in range(5):  # submitted, run and finished while slurmdbd is down
        proc = harp_submit(env, work, "--parsable", "-J", f"dbd-{token}-{i}", "quick.sh")
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        ids.append(proc.stdout.strip())
    squeue = ["squeue", "-h", "-j", ",".join(ids)]
    wait_for(
        "the jobs to finish",
        lambda: not subprocess.run(squeue, capture_output=True, text=True, env=env).stdout.strip(),
        60,
        interval=1,
    )

    def failures_logged() -> list[tuple[str, str]] | None:  # the outage lasts long enough for the backoff's cap
        found = re.findall(r"ingest failed \((\d+) in a row\): .*; next try in (\d+) s", h.log.read_text())
        return found if len(found) >= 3 else None

    failures = wait_for(
        "three failed ingests in the log", failures_logged, 30, interval=0.5, log=lambda: h.log.read_text()[-2000:]
    )
    delays = [int(d) for _, d in failures]
    assert delays[0] == 2 and max(delays) == 4 and delays == sorted(delays)  # doubling, capped at max_backoff_s
    for jid in ids:  # nothing closed while accounting was away
        assert client.call(h.socket, {"op": "status", "job_id": jid}, 5)["job"]["state"] == "pending"

    with (FAULTS_DIR / "log" / "slurmdbd.out").open("ab") as out:  # back, as localslurm starts it
        dbd = subprocess.Popen(
            ["slurmdbd", "-D"],
            env=daemon_env(conf),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    pids.write_text(f"{dbd.pid}\n")  # so that `localslurm stop` stops this one ...
    threading.Thread(target=dbd.wait, daemon=True).start()  # ... and finds it gone, not a zombie of ours

    def all_done() -> list[dict] | None:
        jobs = [client.call(h.socket, {"op": "status", "job_id": j}, 5)["job"] for j in ids]
        return jobs if all(j["state"] == "done" for j in jobs) else None

    jobs = wait_for("harpd to have every job's outcome", all_done, 120, interval=1)
    assert [(j["state"], j["outcome"]) for j in jobs] == [("done", "completed")] * 5
    assert [j["record"]["job_name"] for j in jobs] == [f"dbd-{token}-{i}" for i in range(5)]
    assert "ingest recovered after" in h.log.read_text()


# -------------------------------------------------------- shell syntax as data


def test_shell_syntax_in_user_data_is_never_executed(slurm_cluster, work, harpds, cleanup_tokens) -> None:
    """Payloads in every place a user controls, through submit, registration, Slurm and ingest."""
    mark = uuid.uuid4().hex[:8]
    flag = Path(f"/tmp/harp-pwned-{mark}")
    payloads = [
        f"$(touch {flag}-a)",
        f"; touch {flag}-b",
        f"`touch {flag}-c`",
        f"x' ; touch {flag}-d ; '",
        f'x" && touch {flag}-e && "',
    ]
    script = work / f"run$(touch {flag.name}-f).sh"
    script.write_text(
        "#!/bin/bash\n"
        f"#SBATCH --comment='$(touch {flag}-g)'\n"
        "#SBATCH -o /dev/null -t 2\n"
        f"#HARP dnn model=$(touch {flag}-h)\n"
        f"echo '$(touch {flag}-i); touch {flag}-j'\n"
    )
    h = harpds(work, slurm_cluster.conf)
    h.config.write_text(h.config.read_text().replace("poll_interval_s = 3600", "poll_interval_s = 1"))
    h.start()
    env = client_env(str(slurm_cluster.conf), h.socket)
    token = new_token(cleanup_tokens, "pwn")
    ids = []
    for p in payloads:
        proc = harp_submit(env, work, "--parsable", "-J", p, script.name)
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        ids.append(proc.stdout.strip())
    wrap = harp_submit(
        env, work, "--parsable", "-o", "/dev/null", "-t", "2", f"--comment={token}", f"--wrap=echo '$(touch {flag}-k)'"
    )
    assert wrap.returncode == 0 and wrap.stderr == ""
    ids.append(wrap.stdout.strip())

    def all_done() -> list[dict] | None:  # registered (in the background), run, finished, back through sacct
        try:
            jobs = [client.call(h.socket, {"op": "status", "job_id": j}, 5)["job"] for j in ids]
        except client.HarpdUnavailable:
            return None
        return jobs if all(j["state"] == "done" for j in jobs) else None

    jobs = wait_for(
        "every job back through sacct into harpd's store",
        all_done,
        120,
        interval=1,
        log=lambda: h.log.read_text()[-2000:],
    )
    assert [j["outcome"] for j in jobs] == ["completed"] * len(ids)
    # kept verbatim as data (slurmdbd itself stores a job name's " as `: Slurm 22.05, not harp)
    assert [j["record"]["job_name"] for j in jobs[:-1]] == [p.replace('"', "`") for p in payloads]
    assert sorted(Path("/tmp").glob(f"harp-pwned-{mark}*")) == []
    assert sorted(work.glob("harp-pwned-*")) == []
    assert "Traceback" not in h.log.read_text()
