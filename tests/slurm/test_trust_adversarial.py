"""Two real unprivileged users against a root harpd on TCP+MUNGE: harpd acts only on what Slurm vouches for.

A (``harptest1``) and B (``harptest2``) are ordinary Unix users; every
message they send goes over TCP sealed with their own MUNGE credential, so
harpd knows who they are and nothing else.  harpd runs as root with soft
limits on (its watcher lists the queue every 2 s and extends jobs harp cut
with less than 12 s left), so a wrongly accepted registration would show as
an extension.  Each attack is replayed as first seen on a real cluster:

* (a) B submits with plain ``sbatch --time=1`` and sends a sealed register
  claiming an original of one hour and a harp time change, with a real
  decision token of B's and without one: refused; the job keeps its 1-minute
  limit to its TIMEOUT and is never extended;
* (b) B registers job ids that do not exist yet: refused; A's next plain
  sbatch job gets one of them, is never extended, and ``status`` tells A
  the truth (harp knows no such job), never "not yours";
* (c) B registers A's real job id: refused; the store has no row for it.

After each attack the victim's job is as plain sbatch left it (TimeLimit,
comment) and the store holds no row for it.  Then:

* (d) a harp-submit job whose registration message is lost (the
  registration child is disabled) still carries its decision's token in its
  comment, and harpd finds and registers it from the token on its poll;
* (e) every job polled from sacct has its owner, whoever submitted it.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from load_submit import Harpd, client_env  # noqa: E402

from harp_submit import client  # noqa: E402
from harpd.records import LimitChange, Submission  # noqa: E402
from harpd.slurm.scontrol import parse_kv_line  # noqa: E402
from harpd.store import Store  # noqa: E402
from tests.helpers.munge_env import cluster_munge_socket, free_port  # noqa: E402
from tests.helpers.processes import short_tmpdir  # noqa: E402
from tests.helpers.users import ensure_user, user_python  # noqa: E402
from tests.helpers.wait import wait_for  # noqa: E402

pytestmark = pytest.mark.slurm

A, B = "harptest1", "harptest2"
SLEEPER = "#!/bin/bash\n#SBATCH -o /dev/null\n#SBATCH -p short\nsleep 600\n"
# the script harp-submit sizes in (d): the store holds 1200 runs of it, each using ~4 of its 50 minutes
SIZED = "#!/bin/bash\n#SBATCH --time=50\n#SBATCH --mem=300M\n#SBATCH -o /dev/null\npython3 -c 'print(42)'\n"
ASK = r"""
import json, os, sys
from harp_submit import client, route
where = route.choose(os.environ)[0]
try:
    print(json.dumps(client.ask(where, json.loads(sys.argv[1]), 30.0)))
except client.HarpdUnavailable as exc:
    # harpd's own refusal line, without the client's "harpd at ADDR refused: " in front
    reason = exc.reason.split(" refused: ", 1)[1] if exc.final and " refused: " in exc.reason else exc.reason
    print(json.dumps({"ok": False, "error": reason}))
"""
WAIT_S = 6 * 60  # a 1-minute job on a busy 2-core host: start, limit, kill, accounting


def _seed_and_train(store_path: Path, script: str) -> None:
    """1200 finished runs of ``script`` by root (each used ~8% of its 50 minutes), and champions trained."""
    from harp_submit import directives
    from harp_submit import harp_lines as hl
    from harp_submit.request import Request
    from harp_submit.sbatch_options import SBATCH_TABLE
    from harpd.config import HarpSettings
    from harpd.features.signature import signature_of
    from harpd.records import JobRecord, Outcome
    from harpd.training.champions import retrain_all

    req = Request(
        SBATCH_TABLE.parse([]),
        {},
        directives.parse(script),
        script_path="sized.sh",
        script_text=script,
        harp_lines=hl.find(script),
    )
    sig = signature_of(req.commands())
    rnd = random.Random(26)
    t0 = time.time() - 5 * 86400
    recs = []
    for i in range(1200):
        used = 3000 * rnd.uniform(0.075, 0.08)
        sub = t0 + i * 300
        recs.append(
            JobRecord(
                job_id=f"seed{i}",
                source="seed",
                user="root",
                account="harp",
                partition="short",
                job_name="sized.sh",
                signature=sig,
                submit_time=sub,
                start_time=sub + 2,
                end_time=sub + 2 + used,
                outcome=Outcome.COMPLETED,
                state="COMPLETED",
                req_time_s=3000,
                req_mem_mb=300,
                req_cpus=1,
                req_nodes=1,
                alloc_cpus=1,
                alloc_nodes=1,
                used_time_s=used,
                used_mem_mb=300 * rnd.uniform(0.07, 0.08),
            )
        )
    with Store.open(store_path) as store:
        store.insert_jobs(recs)
        out = retrain_all(store, HarpSettings(store={"path": str(store_path)}))
    assert not out["time"].get("skipped"), out["time"]


class Trust:
    """The cluster, the TCP harpd and the two users' view of it."""

    def __init__(self, cluster: Any, work: Path, harpd: Harpd, munge_socket: str) -> None:
        self.cluster = cluster
        self.work = work
        self.harpd = harpd
        self.env = client_env(str(cluster.conf), "/nonexistent/harpd.sock")
        self.env.update({"HARP_SERVERS": harpd.listen or "", "HARP_MUNGE_SOCKET": munge_socket})
        self.jobs: list[str] = []

    def sbatch(self, user: str, *opts: str) -> str:
        """Plain sbatch as ``user``: no harp anywhere."""
        script = [] if any(o.startswith("--wrap") for o in opts) else [str(self.work / "sleeper.sh")]
        jid = self.cluster.sbatch(*opts, *script, user=user, cwd=self.work)
        assert jid.isdigit(), jid
        self.jobs.append(jid)
        return jid

    def send(self, user: str, message: dict[str, Any]) -> dict[str, Any]:
        """One message to harpd over TCP as ``user`` (sealed with their MUNGE credential)."""
        py, pythonpath = user_python(user)
        keep = [f"{k}={v}" for k, v in self.env.items() if k.startswith(("HARP_", "SLURM_"))]
        proc = subprocess.run(
            [
                "runuser",
                "-u",
                user,
                "--",
                "env",
                "-i",
                "PATH=/usr/bin:/bin",
                f"PYTHONPATH={pythonpath}",
                *keep,
                py,
                "-c",
                ASK,
                json.dumps(message),
            ],
            capture_output=True,
            text=True,
            cwd="/",
            timeout=120,
        )
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        return json.loads(proc.stdout)

    def show(self, jid: str) -> dict[str, str]:
        return parse_kv_line(self.cluster.run(["scontrol", "show", "job", "-o", jid]).stdout.splitlines()[0])

    def store_rows(self, jid: str) -> tuple[Submission | None, list[LimitChange]]:
        with Store.open(self.harpd.store) as store:
            return store.get_submission(jid), store.limit_changes(jid)

    def wait_ended(self, jid: str) -> dict[str, str]:
        """The job's accounting row once it has ended (sacct), within ``WAIT_S``."""

        def rows() -> list[dict[str, str]]:
            return [
                r
                for r in self.cluster.sacct(jid, "JobID,State,Timelimit,Comment", steps=False, duplicates=True)
                if r["JobID"] == jid
            ]

        def ended() -> dict[str, str] | None:
            got = rows()
            running = ("PENDING", "RUNNING", "REQUEUED", "")
            return got[-1] if got and got[-1]["State"].split()[0] not in running else None

        return wait_for(f"job {jid} to end", ended, WAIT_S, interval=2, log=lambda: str(rows()))

    def assert_as_plain_sbatch_left_it(self, jid: str, *, limit: str = "00:01:00") -> None:
        """TimeLimit and comment as plain sbatch set them; no registration, no change in the store."""
        info = self.show(jid)
        assert info["TimeLimit"] == limit, info
        assert info.get("Comment") in (None, "", "(null)"), info
        sub, changes = self.store_rows(jid)
        assert sub is None and changes == [], (sub, changes)


@pytest.fixture(scope="module")
def trust(slurm_cluster):
    for user in (A, B):
        ensure_user(user)
    sock = cluster_munge_socket(slurm_cluster.conf)
    with short_tmpdir("htr-") as work:
        os.chmod(work, 0o1777)
        (work / "sleeper.sh").write_text(SLEEPER)
        (work / "sized.sh").write_text(SIZED)
        for f in ("sleeper.sh", "sized.sh"):
            os.chmod(work / f, 0o755)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HARP_", "SLURM_"))}
        env.update({"SLURM_CONF": str(slurm_cluster.conf), "PYTHONPATH": str(REPO)})
        (work / "d").mkdir()
        h = Harpd(work / "d", env, "debug", listen=f"127.0.0.1:{free_port()}", munge_socket=sock)
        # the watcher on (root harpd: soft limits), the poller (and so the token search) every 3 s,
        # the trained model named so the test does not depend on which one the hold-out crowns
        h.config.write_text(
            h.config.read_text().replace("poll_interval_s = 3600", "poll_interval_s = 3")
            + '[watch]\ninterval_s = 2.0\nmargin_s = 12.0\n[predict]\npredictor = "alea"\n'
        )
        h.store.parent.mkdir(parents=True, exist_ok=True)
        _seed_and_train(h.store, SIZED)
        h.start()
        t = Trust(slurm_cluster, work, h, sock)
        try:
            yield t
        finally:
            h.stop()
            if t.jobs:
                slurm_cluster.run(["scancel", *t.jobs], check=False)


def test_a_forged_original_on_a_plain_sbatch_job_is_refused_and_never_extended(trust) -> None:
    t = trust
    # B gets a real decision token by asking harpd about a one-hour job ...
    asked = t.send(B, {"op": "predict", "job": {"partition": "short", "request": {"time_s": 3600}}})
    assert asked["ok"] is True and asked["token"], asked
    # ... then submits a 1-minute job with plain sbatch and claims harp cut it from one hour
    jid = t.sbatch(B, "--time=1")
    claim = {
        "op": "register",
        "job_id": jid,
        "job": {"partition": "short"},
        "original": {"time_s": 3600, "partition": "short"},
        "submitted": {"time_s": 60, "partition": "short"},
        "decision": {
            "changes": [{"option": "time", "value": "00:01:00", "old": "01:00:00", "reason": "x"}],
            "limits": {"partition": "short"},
            "model": "forged",
            "explain": {},
        },
    }
    with_token = t.send(B, {**claim, "token": asked["token"]})
    assert with_token["ok"] is False and "neither harp's decision nor your request" in with_token["error"], with_token
    without = t.send(B, claim)
    assert without["ok"] is False and "needs the token harpd gave" in without["error"], without
    t.assert_as_plain_sbatch_left_it(jid)
    ended = t.wait_ended(jid)
    assert ended["State"].split()[0] == "TIMEOUT" and ended["Timelimit"] == "00:01:00", ended
    assert ended["Comment"] in ("", "(null)"), ended  # no "harp extended" note: never touched
    sub, changes = t.store_rows(jid)
    assert sub is None and changes == []
    with Store.open(t.harpd.store) as store:
        assert store.get_decision(asked["token"]).job_id is None  # the token bound nothing
    log = t.harpd.log.read_text()
    assert f"registration of job {jid} by uid={ensure_user(B).pw_uid} from 127.0.0.1:" in log


def test_future_ids_and_another_users_job_id_are_refused(trust) -> None:
    t = trust
    probe = t.sbatch(B, "--time=1", "--hold")
    t.cluster.run(["scancel", probe])
    claimed = [str(int(probe) + k) for k in range(1, 6)]
    for jid in claimed:
        ans = t.send(B, {"op": "register", "job_id": jid, "job": {}, "original": {"time_s": 3600}, "submitted": {}})
        assert ans == {
            "ok": False,
            "error": f"Slurm does not know job {jid} yet; register a job after sbatch has printed its id",
        }, ans
    victim = t.sbatch(A, "--time=1")
    assert victim in claimed, (victim, claimed)  # this cluster is ours: A's job got one of B's ids
    # (c) B claims A's real job, with and without a token of B's
    token = t.send(B, {"op": "predict", "job": {"partition": "short", "request": {"time_s": 60}}})["token"]
    for extra in ({}, {"token": token}):
        ans = t.send(
            B, {"op": "register", "job_id": victim, "job": {}, "original": {"time_s": 3600}, "submitted": {}, **extra}
        )
        assert ans == {"ok": False, "error": f"job {victim} is not yours; register only jobs you submitted"}, ans
    t.assert_as_plain_sbatch_left_it(victim)
    # status tells A the truth: harp was never told of this job (not "not yours")
    assert t.send(A, {"op": "status", "job_id": victim}) == {"ok": False, "error": f"harp knows no job {victim}"}
    assert t.send(B, {"op": "status", "job_id": victim}) == {"ok": False, "error": f"harp knows no job {victim}"}
    ended = t.wait_ended(victim)
    assert ended["State"].split()[0] == "TIMEOUT" and ended["Timelimit"] == "00:01:00", ended
    sub, changes = t.store_rows(victim)
    assert sub is None and changes == []


def test_a_lost_registration_is_found_by_its_decision_token(trust) -> None:
    t = trust
    env = {**t.env, "HARP_SOCKET": t.harpd.socket, "HARP_TIMEOUT": "30", "HARP_TEST_SKIP_REGISTER": "1"}
    env.pop("HARP_SERVERS")
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from harp_submit.cli import main; sys.exit(main())",
            "--parsable",
            "--comment=my own words",
            "sized.sh",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(t.work),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    jid = proc.stdout.strip().split(";")[0]
    t.jobs.append(jid)
    info = t.show(jid)
    assert info["TimeLimit"] != "00:50:00", (proc.stderr, t.harpd.log.read_text()[-3000:])
    comment = info["Comment"]
    assert comment.startswith("my own words; harp decision "), comment  # the user's comment kept in front
    token = comment.rsplit(" ", 1)[1]
    # harpd's poll every 3 s finds it; generous for a busy host
    sub = wait_for(
        f"harpd to adopt job {jid}",
        lambda: t.store_rows(jid)[0],
        120,
        interval=0.5,
        log=lambda: t.harpd.log.read_text()[-3000:],
    )
    assert sub.uid == 0 and sub.verified and sub.token == token
    assert sub.original.time_s == 3000 and sub.decision is not None and "time" in sub.decision.changed
    line = next(ln for ln in t.harpd.log.read_text().splitlines() if f"adopt: registered job {jid}" in ln)
    assert "its registration message never came" in line
    status = client.call(t.harpd.socket, {"op": "status", "job_id": jid}, 10.0)
    assert status["job"]["registered"] is True and status["job"]["uid"] == 0


def test_every_polled_job_has_an_owner(trust, monkeypatch) -> None:
    """The owners the poller stores come from Slurm and are never null (sacct --json, then -P, then passwd)."""
    from harpd.slurm.cli_backend import CliBackend

    t = trust
    jobs = {user: t.sbatch(user, "--time=1", "-o", "/dev/null", "--wrap=true") for user in (A, B)}
    for jid in jobs.values():
        t.cluster.wait_job(jid)
    monkeypatch.setenv("SLURM_CONF", str(t.cluster.conf))
    records = CliBackend().sacct_jobs(list(jobs.values()), None, None, True)
    owners = {r.job_id: r.user for r in records}
    assert owners == {jid: user for user, jid in jobs.items()}, owners
