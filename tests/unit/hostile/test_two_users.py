"""Two real Unix users against one real harpd: neither reaches the other's jobs.

harpd runs as root (as systemd runs it) from a temporary config, with Slurm
out of reach (``slurm.bin_dir`` points nowhere), so job owners cannot be
checked with Slurm and only the socket's own rules protect the jobs.  The
clients are forked children that drop to ``harptest1`` / ``harptest2`` (made
with useradd when missing) before connecting: the kernel's SO_PEERCRED then
names them, whatever their messages claim.

What is shown:

* without Slurm to vouch for a job no registration is stored, whoever sends it
  (each user's own jobs stay theirs: tests/slurm/test_trust_adversarial.py);
* admin operations (retrain, reload, import of any path) are refused to both;
* identity cannot be claimed in the message (unknown fields are refused);
* the store file itself is out of their reach (the service's UMask=0027 and
  its 0750 state directory), and so is the socket's directory.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.harpd_process import stop_harpd, wait_for_health

REPO = Path(__file__).resolve().parents[3]
USERS = ("harptest1", "harptest2")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: creates users and drops to them")


def ensure_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    proc = subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], capture_output=True, text=True)
    if proc.returncode not in (0, 9):  # 9: created meanwhile by another test session
        pytest.fail(f"useradd {name} failed: {proc.stderr.strip()}")
    return pwd.getpwnam(name)


@pytest.fixture(scope="module")
def users() -> dict[str, pwd.struct_passwd]:
    return {name: ensure_user(name) for name in USERS}


class Harpd:
    def __init__(self, d: Path, proc: subprocess.Popen[str], log: Path) -> None:
        self.dir = d
        self.proc = proc
        self.log = log
        self.socket = str(d / "run" / "harpd.sock")
        self.store = d / "lib" / "harp.db"


@pytest.fixture(scope="module")
def harpd(users) -> Iterator[Harpd]:
    d = Path(tempfile.mkdtemp(prefix="h2u-", dir="/tmp"))
    os.chmod(d, 0o755)
    (d / "run").mkdir(mode=0o755)
    (d / "lib").mkdir(mode=0o750)  # StateDirectoryMode=0750
    cfg = d / "harpd.toml"
    cfg.write_text(
        f'[server]\nsocket = "{d}/run/harpd.sock"\nrequest_timeout_s = 5\n'
        f'[store]\npath = "{d}/lib/harp.db"\n'
        f'[slurm]\nbin_dir = "{d}/no-slurm-here"\n'
        "[ingest]\npoll_interval_s = 3600\n[recovery]\nenabled = false\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARP_", "SLURM_"))}
    env["PYTHONPATH"] = str(REPO)
    log = d / "harpd.log"
    with log.open("w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "harpd.daemon.main", "--config", str(cfg), "--log-level", "info"],
            stdout=fh,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=str(d),
            preexec_fn=lambda: os.umask(0o027),  # UMask=0027 of systemd/harpd.service
        )
    h = Harpd(d, proc, log)
    wait_for_health(h.socket, proc, log)
    yield h
    stop_harpd(proc)
    shutil.rmtree(d, ignore_errors=True)


def as_user(name: str | None, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` in a forked child as ``name`` (groups, gid, uid all dropped); its JSON-able result."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(r)
            if name is not None:
                pw = pwd.getpwnam(name)
                os.setgroups(os.getgrouplist(name, pw.pw_gid))
                os.setgid(pw.pw_gid)
                os.setuid(pw.pw_uid)
            try:
                result = {"value": fn()}
            except Exception as exc:  # noqa: BLE001 - reported to the parent
                result = {"raised": type(exc).__name__, "message": str(exc)}
            os.write(w, json.dumps(result).encode())
        except BaseException:  # noqa: BLE001
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 65536):
        chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"child as {name} failed"
    out = json.loads(b"".join(chunks))
    if "raised" in out:
        raise RuntimeError(f"{out['raised']}: {out['message']}")
    return out["value"]


def raw_call(path: str, request: dict[str, Any]) -> dict[str, Any]:
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(path)
        s.sendall(json.dumps({"v": 1, **request}).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf)


def call_as(name: str | None, path: str, request: dict[str, Any]) -> dict[str, Any]:
    if name is None:
        return raw_call(path, request)
    return as_user(name, lambda: raw_call(path, request))


def register(job_id: str, job_name: str, time_s: int = 600) -> dict[str, Any]:
    res = {"time_s": time_s, "partition": "short"}
    return {
        "op": "register",
        "job_id": job_id,
        "job": {
            "job_name": job_name,
            "partition": "short",
            "request": res,
            "argv": ["-J", job_name, "job.sh"],
            "sbatch_env": {},
        },
        "original": res,
        "submitted": res,
        "decision": None,
    }


def test_clients_really_run_as_the_two_users(users) -> None:
    got = [as_user(n, lambda: [os.getuid(), os.geteuid(), os.getgid(), sorted(os.getgroups())]) for n in USERS]
    for name, (uid, euid, gid, groups) in zip(USERS, got):
        pw = users[name]
        assert uid == euid == pw.pw_uid != 0 and gid == pw.pw_gid and 0 not in groups


def test_without_slurm_no_user_registers_a_job(harpd, users) -> None:
    """harpd cannot ask slurmctld who owns a job: it stores no one's word for it."""
    u1, u2 = USERS
    for who, job in ((u1, "910001"), (u2, "910002"), (u2, "910001")):
        ans = call_as(who, harpd.socket, register(job, f"{who}-job"))
        assert ans["ok"] is False and f"cannot ask Slurm about job {job}" in ans["error"]
    for who, job in ((u1, "910001"), (u2, "910001"), (None, "910002")):
        assert call_as(who, harpd.socket, {"op": "status", "job_id": job}) == {
            "ok": False,
            "error": f"harp knows no job {job}",
        }
    log = harpd.log.read_text()
    assert f"registration of job 910001 by uid={users[u2].pw_uid} " in log  # refusals are logged with the peer


def test_identity_cannot_be_claimed_in_the_message(harpd, users) -> None:
    u2 = USERS[1]
    for extra in ({"uid": 0}, {"user": "root"}, {"peer": {"uid": 0}}):
        ans = call_as(u2, harpd.socket, {"op": "status", "job_id": "910001", **extra})
        assert ans["ok"] is False and "Extra inputs are not permitted" in ans["error"]
    claim = register("910021", "claimed")
    claim["job"]["user"] = USERS[0]
    ans = call_as(u2, harpd.socket, claim)
    assert ans["ok"] is False and "job.user" in ans["error"]
    assert call_as(None, harpd.socket, {"op": "status", "job_id": "910021"}) == {
        "ok": False,
        "error": "harp knows no job 910021",
    }


@pytest.mark.parametrize(
    "request_",
    [
        {"op": "retrain"},
        {"op": "reload"},
        {"op": "import", "path": "/etc/shadow"},
        {"op": "import", "path": "/etc/passwd"},
    ],
    ids=lambda r: r["op"] + r.get("path", ""),
)
def test_no_admin_action_for_either_user(harpd, users, request_) -> None:
    for name in USERS:
        ans = call_as(name, harpd.socket, request_)
        assert ans == {"ok": False, "error": f"{request_['op']} is an admin operation: run it as root"}
    log = harpd.log.read_text()
    for name in USERS:
        assert f"refused {request_['op']} from uid {users[name].pw_uid} ({name}): not an admin" in log
        assert f"requested by {name}" not in log  # nothing started on their behalf


def test_the_store_and_the_socket_directory_are_out_of_reach(harpd, users) -> None:
    assert harpd.store.exists()

    def poke() -> dict[str, str]:
        out = {}
        for what, action in (
            ("read store", lambda: open(harpd.store, "rb").read(16)),
            ("list store dir", lambda: os.listdir(harpd.store.parent)),
            ("replace socket", lambda: os.unlink(harpd.socket)),
            ("plant file beside socket", lambda: open(Path(harpd.socket).parent / "x", "w")),
        ):
            try:
                action()
                out[what] = "allowed"
            except PermissionError:
                out[what] = "denied"
        return out

    for name in USERS:
        assert as_user(name, poke) == {
            "read store": "denied",
            "list store dir": "denied",
            "replace socket": "denied",
            "plant file beside socket": "denied",
        }
    assert call_as(USERS[0], harpd.socket, {"op": "health"})["ok"] is True  # the socket itself is for everyone


# ------------------------------------------------------------------ reports
# The store is root's (0750 directory), so `harp report` run by a user cannot
# open it and asks harpd, which must scope the report by the kernel's word.


def _harp_cli(argv: list[str]) -> list[Any]:
    """`harp ARGV` in this process: [exit code, stdout, stderr]."""
    import contextlib
    import io

    from harpd.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return [rc, out.getvalue(), err.getvalue()]


def harp_as(name: str | None, daemon: Harpd, *args: str) -> list[Any]:
    # everything the child needs is imported before the fork: the users may not read the checkout
    import harp_submit.client  # noqa: F401
    import harpd.cli.ask
    import harpd.cli.main
    import harpd.cli.report_cmd
    import harpd.config
    import harpd.report.window  # noqa: F401

    argv = ["--config", str(daemon.dir / "harpd.toml"), "report", *args]
    return _harp_cli(argv) if name is None else as_user(name, lambda: _harp_cli(argv))


@pytest.fixture(scope="module")
def reported(harpd) -> Harpd:
    import time

    from harpd.records import JobRecord, Outcome
    from harpd.store import Store

    now = time.time()

    def rec(job_id: str, user: str, name: str, outcome: Outcome = Outcome.COMPLETED) -> JobRecord:
        return JobRecord(
            job_id=job_id,
            user=user,
            account="acct",
            partition="short",
            signature=name,
            submit_time=now - 7200,
            start_time=now - 7000,
            end_time=now - 3600,
            outcome=outcome,
            req_time_s=7200.0,
            req_mem_mb=4096.0,
            req_cpus=2,
            alloc_cpus=2,
            used_time_s=3400.0,
            used_mem_mb=1000.0,
            used_cpu_s=3400.0,
        )

    with Store.open(harpd.store) as s:  # root, beside the running harpd (WAL: both may)
        s.insert_jobs(
            [
                rec("920001", USERS[0], "u1-secret-sig"),
                rec("920002", USERS[0], "u1-other"),
                rec("920003", USERS[1], "u2-sig", Outcome.OOM),
            ]
        )
    return harpd


def test_a_user_gets_their_own_report_from_harpd(reported, users) -> None:
    u1, u2 = USERS
    rc, out, err = harp_as(u1, reported, "--format", "json", "--by", "signature", "--since", "all")
    assert rc == 0, err
    d = json.loads(out)
    assert d["scope"] == f"user {u1}" and d["total"]["jobs"] == 2
    assert {g["key"] for g in d["groups"]} == {"u1-secret-sig", "u1-other"}
    assert "u2-sig" not in out and u2 not in out

    rc, out, err = harp_as(u2, reported, "--since", "all", "--by", "signature")  # the terminal table
    assert rc == 0, err
    assert "u2-sig" in out and "u1-secret-sig" not in out and u1 not in out


def test_a_user_cannot_get_someone_elses_report(reported, users) -> None:
    u1, u2 = USERS
    rc, out, err = harp_as(u2, reported, "--user", u1, "--since", "all", "--format", "csv")
    assert rc == 2 and out == ""
    assert err.startswith("harp: only admins") and err.count("\n") == 1 and "u1-secret-sig" not in err
    # nor by asking the socket directly, with the identity in the message
    ans = call_as(u2, reported.socket, {"op": "report", "user": u1, "since": "all"})
    assert ans["ok"] is False and "only admins" in ans["error"]


def test_root_reports_on_everyone_directly_and_through_harpd(reported, users) -> None:
    for extra in ((), ("--daemon",)):
        rc, out, err = harp_as(None, reported, "--format", "json", "--since", "all", *extra)
        assert rc == 0, err
        d = json.loads(out)
        assert d["scope"] == "all users" and {g["key"] for g in d["groups"]} >= set(USERS)
        assert d["total"]["oom"] >= 1
        assert ("harpd (" in d.get("source", "")) == bool(extra)


def test_a_user_without_harpd_gets_one_line_naming_both_ways(reported, users) -> None:
    cfg = reported.dir / "down.toml"
    cfg.write_text(f'[server]\nsocket = "{reported.dir}/nobody-here.sock"\n[store]\npath = "{reported.store}"\n')
    os.chmod(cfg, 0o644)

    def run() -> list[Any]:
        return _harp_cli(["--config", str(cfg), "report"])

    rc, out, err = as_user(USERS[0], run)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"cannot open the store {reported.store} (permission denied)" in err and "harpd is not running" in err
