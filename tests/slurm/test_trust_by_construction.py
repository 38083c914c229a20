"""#44's five attacks by one ordinary user, B, on a root harpd, replayed on the real cluster: none does harm.

A (``harptest1``) and B (``harptest2``) are ordinary users; harpd runs as
root with recovery on its defaults and the watcher listing the queue every
2 s, serving the Unix socket.  Each test replays one attack as it was first
seen, then checks that the victim (A's job, A's store rows, A's answers, the
other users' service) is exactly as it would be without it:

1. a comment ``x\\nV|harp retry 2 of C`` on a job of B's, while B's own
   harp job C times out with ``--no-requeue`` (so recovery resubmits): harpd
   never adopts A's job V, never changes it, never registers it to B;
2. B holds 200 idle connections to the socket: root and A are still answered;
3. a newline in the comment of B's held job: the watcher's tick stays short
   and lists every job;
4. B sends 1 MB predicts: the store grows by at most B's quota, A is decided;
5. B's predicts with the most ``#HARP dnn`` lines harpd reads, from three
   loops: A's dry runs are answered within harp-submit's own timeout.
"""

from __future__ import annotations

import json
import os
import pwd
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from load_submit import Harpd  # noqa: E402

from harp_submit import client  # noqa: E402
from harpd.store import Store  # noqa: E402
from tests.helpers.processes import short_tmpdir  # noqa: E402
from tests.helpers.users import ensure_user, user_python  # noqa: E402
from tests.helpers.wait import wait_for  # noqa: E402

pytestmark = pytest.mark.slurm

A, B = "harptest1", "harptest2"
QUOTA = 256 << 10  # B's unclaimed decisions, in bytes (store.max_pending_decision_bytes_per_user): ~12 big ones
LEAD_S = 30.0
CHAIN_S = 8 * 60  # a 1-minute job on a busy 2-core host: start, limit, kill, accounting, resubmission
C_SCRIPT = "#!/bin/bash\n#SBATCH --time=1\n#SBATCH --no-requeue\n#SBATCH -o /dev/null\n#HARP retry\nsleep 300\n"
RUN_SUBMIT = "import sys; from harp_submit.cli import main; sys.exit(main())"
RUN_HARP = "import sys; from harpd.cli.main import main; sys.exit(main())"
ASK = r"""
import json, sys
from harp_submit import client
try:
    print(json.dumps(client.call(sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3]))))
except client.HarpdUnavailable as exc:
    print(json.dumps({"ok": False, "error": exc.reason, "unavailable": True}))
"""


class Site:
    def __init__(self, cluster: Any, work: Path, harpd: Harpd) -> None:
        self.cluster, self.work, self.harpd = cluster, work, harpd
        self.jobs: list[str] = []

    def as_user(self, user: str, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        py, pythonpath = user_python(user)
        env = [
            f"PATH={self.cluster.user_path}",  # the release's own sbatch, not Debian's 22.05 one
            f"PYTHONPATH={pythonpath}",
            f"SLURM_CONF={self.cluster.conf}",
            f"HARP_SOCKET={self.harpd.socket}",
            "HARP_CONFIG=/nonexistent/harpd.toml",
        ]
        return subprocess.run(
            ["runuser", "-u", user, "--", "env", "-i", *env, py, *argv],
            capture_output=True,
            text=True,
            cwd=str(self.work),
            stdin=subprocess.DEVNULL,
            timeout=timeout,
        )

    def ask(self, user: str, message: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        proc = self.as_user(user, "-c", ASK, self.harpd.socket, json.dumps(message), str(timeout))
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        return json.loads(proc.stdout)

    def status(self, user: str, jid: str) -> str:
        proc = self.as_user(user, "-c", RUN_HARP, "status", jid)
        return proc.stdout + proc.stderr

    def sbatch(self, user: str, *opts: str) -> str:
        jid = self.cluster.sbatch(*opts, user=user, cwd=self.work)
        self.jobs.append(jid)
        return jid

    def show(self, jid: str) -> dict[str, Any]:
        """slurmctld's record of the job, from its JSON (whose text fields cannot be forged)."""
        out = self.cluster.run(["squeue", "--json", "--states=all", "--jobs", jid]).stdout
        jobs = [j for j in json.loads(out)["jobs"] if str(j["job_id"]) == jid]
        assert jobs, f"slurmctld does not list job {jid}"
        j = jobs[0]
        limit = j["time_limit"]
        return {
            "user": j["user_name"],
            "comment": j.get("comment") or "",
            "limit": limit["number"] if isinstance(limit, dict) else limit,
            "restarts": j.get("restart_cnt"),
        }

    def rows(self, jid: str) -> tuple[Any, Any, Any]:
        with Store.open(self.harpd.store) as store:
            return store.get_submission(jid), store.limit_changes(jid), store.chain_of(jid)


@pytest.fixture(scope="module")
def site(slurm_cluster):
    for user in (A, B):
        ensure_user(user)
    with short_tmpdir("h44-") as work:
        os.chmod(work, 0o1777)
        (work / "c.sh").write_text(C_SCRIPT)
        os.chmod(work / "c.sh", 0o755)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HARP_", "SLURM_"))}
        env.update({"SLURM_CONF": str(slurm_cluster.conf), "PYTHONPATH": str(REPO)})
        (work / "d").mkdir()
        os.chmod(work / "d", 0o755)
        h = Harpd(work / "d", env, "debug")
        h.config.write_text(
            h.config.read_text()
            .replace("poll_interval_s = 3600", "poll_interval_s = 3")
            .replace("[recovery]\nenabled = false\n", "[recovery]\n")
            .replace("[store]\n", f"[store]\nmax_pending_decision_bytes_per_user = {QUOTA}\n")
            + f"[watch]\ninterval_s = 2.0\nmargin_s = {LEAD_S}\n"
        )
        h.start()
        s = Site(slurm_cluster, work, h)
        try:
            yield s
        finally:
            h.stop()
            if s.jobs:
                slurm_cluster.run(["scancel", *s.jobs], check=False)


def test_a_newline_in_a_comment_never_lets_b_take_over_as_job(site) -> None:
    victim = site.sbatch(A, "-t", "10", "-o", "/dev/null", "--wrap", "sleep 600")
    before = site.show(victim)
    a_sees = site.status(A, victim)
    proc = site.as_user(B, "-c", RUN_SUBMIT, "--parsable", "c.sh")
    assert proc.returncode == 0, proc.stderr
    chain = proc.stdout.strip().split(";")[0]
    site.jobs.append(chain)
    forged = site.sbatch(
        B, "-H", "-o", "/dev/null", f"--comment=x\n{victim}|harp retry 2 of {chain}", "--wrap", "sleep 1"
    )

    def second_attempt() -> str | None:
        with Store.open(site.harpd.store) as store:
            rows = {a.attempt: a for a in store.attempts(chain)}
        a2 = rows.get(2)
        return a2.job_id if a2 is not None and a2.job_id and a2.step in ("submitted", "done") else None

    log = lambda: site.harpd.log.read_text(errors="replace")[-3000:]  # noqa: E731
    new = wait_for(f"job {chain}'s attempt 2 to be submitted", second_attempt, CHAIN_S, interval=2, log=log)
    site.jobs.append(new)
    assert new not in (victim, forged, chain)
    assert site.show(new)["user"] == B  # B's own job, submitted for B's chain
    assert site.show(victim) == before  # A's job: owner, comment, limit, restarts as sbatch left them
    sub, changes, victim_chain = site.rows(victim)
    assert sub is None and changes == [] and victim_chain is None
    assert site.status(A, victim) == a_sees
    assert "found its resubmission" not in site.harpd.log.read_text(errors="replace")


def test_idle_connections_of_one_user_never_make_harpd_busy(site) -> None:
    uid = pwd.getpwnam(B).pw_uid
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # B: 200 connections that send the start of a request and wait
        os.close(r)
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            held = []
            for _ in range(200):
                s = socket.socket(socket.AF_UNIX)
                s.connect(site.harpd.socket)
                s.sendall(b'{"v":1,')
                held.append(s)
            os.write(w, b"ready")
            time.sleep(120)
        finally:
            os._exit(0)
    os.close(w)
    try:
        assert os.read(r, 16) == b"ready"
        for _ in range(3):
            assert client.call(site.harpd.socket, {"op": "health"}, 10)["ok"] is True
        ans = site.ask(A, {"op": "predict", "job": {"job_name": "x", "request": {"time_s": 600}}})
        assert ans["ok"] is True, ans
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(r)


def test_a_newline_comment_neither_slows_the_watcher_nor_hides_jobs(site) -> None:
    held = site.sbatch(B, "-H", "-t", "5", "-o", "/dev/null", "--wrap", "sleep 1")
    proc = site.cluster.run(["scontrol", "update", f"jobid={held}", "comment=a\nb JobId=1 UserId=root(0)"], user=B)
    assert proc.returncode == 0, proc.stderr
    plain = site.sbatch(A, "-H", "-t", "5", "-o", "/dev/null", "--wrap", "sleep 1")

    def tick_after(t0: float) -> dict[str, Any] | None:
        w = (client.call(site.harpd.socket, {"op": "health"}, 10).get("watch")) or {}
        return w if (w.get("at") or 0) > t0 + 2 else None  # a tick that began after both jobs were there

    t0 = time.time()
    w = wait_for("a watcher tick after the comment", lambda: tick_after(t0), 120, interval=1)
    queued = json.loads(site.cluster.run(["squeue", "--json"]).stdout)["jobs"]
    states = [j["job_state"] if isinstance(j["job_state"], str) else j["job_state"][0] for j in queued]
    active = [s for s in states if s in ("RUNNING", "PENDING")]
    assert w["last_tick_s"] < LEAD_S / 2 and w["lead_s"] == LEAD_S
    assert w["jobs"] >= 2 and abs(w["jobs"] - len(active)) <= 2, (w, len(active))  # every job, jobs come and go
    assert f"job {plain} left out" not in site.harpd.log.read_text(errors="replace")


def test_one_users_big_predicts_are_held_to_their_quota(site) -> None:
    big = {
        "op": "predict",
        "job": {
            "job_name": "big",
            "commands": ["x" * 4000] * 20,
            "harp_lines": ["#HARP " + "y" * 500] * 32,
            "argv": ["z" * 4000] * 200,
        },
    }
    before = sum(p.stat().st_size for p in site.harpd.store.parent.glob(site.harpd.store.name + "*"))
    answers = _many(site, B, big, 30)
    refused = [a for a in answers if not a.get("ok")]
    assert refused and all("no more decisions for you" in a["error"] for a in refused), refused[:2]
    with Store.open(site.harpd.store) as store:
        stored, size = store._read(
            "SELECT count(*), sum(length(job) + length(decided) + length(decision)) FROM decisions "
            "WHERE user = ? AND job_id IS NULL",
            (B,),
        ).fetchone()
    assert 0 < stored < 30 and size <= QUOTA, (stored, size)
    after = sum(p.stat().st_size for p in site.harpd.store.parent.glob(site.harpd.store.name + "*"))
    # the files: the quota's rows, and the write-ahead log's copies of their pages until a checkpoint
    # (SQLite's automatic one comes at 1,000 pages, 4 MiB)
    assert after - before <= QUOTA + (4 << 20), (before, after)
    ans = site.ask(A, {"op": "predict", "job": {"job_name": "x", "request": {"time_s": 600}}})
    assert ans["ok"] is True, ans


def _many(site: Site, user: str, message: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """``n`` requests from one process of ``user`` (one runuser, not ``n``)."""
    code = (
        "import json, sys\nfrom harp_submit import client\nout = []\nmsg = json.load(open(sys.argv[2]))\n"
        f"for _ in range({n}):\n"
        "    try:\n        out.append(client.call(sys.argv[1], msg, 30.0))\n"
        "    except client.HarpdUnavailable as exc:\n        out.append({'ok': False, 'error': exc.reason})\n"
        "print(json.dumps(out))\n"
    )
    path = site.work / f"message-{threading.get_ident()}.json"  # too long for a command line
    path.write_text(json.dumps(message))
    os.chmod(path, 0o644)
    proc = site.as_user(user, "-c", code, site.harpd.socket, str(path), timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_one_users_slow_predicts_never_delay_anothers_dry_runs(site) -> None:
    heavy = {
        "op": "predict",
        "dry_run": True,
        "job": {"job_name": "dnn", "harp_lines": ["#HARP dnn params=7e9 " + "x=1 " * 100] * 32},
    }
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            _many(site, B, heavy, 10)

    loops = [threading.Thread(target=loop, daemon=True) for _ in range(3)]
    for t in loops:
        t.start()
    try:
        dry = {"op": "predict", "dry_run": True, "job": {"job_name": "x", "request": {"time_s": 600}}}
        answers = [site.ask(A, dry, timeout=2.0) for _ in range(6)]  # harp-submit's own dry-run timeout
    finally:
        stop.set()
        for t in loops:
            t.join(120)
    assert all(a.get("ok") for a in answers), answers
