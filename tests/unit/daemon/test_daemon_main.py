"""The real ``harpd`` process: config errors, start, serve, stop."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_helpers import call

from tests.helpers.wait import wait_for

HARPD = [sys.executable, "-m", "harpd.daemon.main"]


def run(args, env=None, timeout=60):
    e = {k: v for k, v in os.environ.items() if not k.startswith("HARP_")}
    e.update(env or {})
    return subprocess.run(HARPD + args, capture_output=True, text=True, timeout=timeout, env=e)


def write_config(d: Path, extra: str = "") -> Path:
    cfg = d / "harpd.toml"
    cfg.write_text(
        f"""
[server]
socket = "{d}/run/harpd.sock"
request_timeout_s = 2.0
log_level = "debug"
{extra}
[store]
path = "{d}/lib/harp.db"
"""
    )
    return cfg


@pytest.mark.parametrize(
    "body, needles",
    [
        ("[server]\nmax_clients = 0\n", ["server.max_clients", "greater than 0"]),
        ("[server]\nsocket_mode = 0o1777\n", ["server.socket_mode"]),
        ("[server]\nlog_level = \"loud\"\n", ["server.log_level"]),
        ("[server]\nno_such_key = 1\n", ["server.no_such_key", "not permitted"]),
        ("[store]\nbusy_timeout_s = -1\n", ["store.busy_timeout_s"]),
        ("[server]\nadmin_group = \"no-such-group-xyz\"\n", ["server.admin_group", "no such group"]),
        ("[server]\nsocket = \"relative.sock\"\n", ["server.socket", "absolute"]),
        ("[server\nbroken", ["not valid TOML"]),
    ],
)
def test_invalid_config_fails_at_start_naming_the_key(tmp_path, body, needles):
    cfg = tmp_path / "harpd.toml"
    cfg.write_text(body)
    for extra in ([], ["--check-config"]):
        out = run(["--config", str(cfg), *extra])
        assert out.returncode == 2, out
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("harpd: "), out.stderr
        for n in needles:
            assert n in lines[0], lines[0]


def test_missing_explicit_config(tmp_path):
    out = run(["--config", str(tmp_path / "nope.toml")])
    assert out.returncode == 2 and "no such config file" in out.stderr


def test_env_override_is_validated_too(tmp_path):
    out = run(["--config", str(write_config(tmp_path)), "--check-config"], env={"HARP_SERVER__MAX_CLIENTS": "-3"})
    assert out.returncode == 2 and "server.max_clients" in out.stderr


def test_check_config_ok(tmp_path):
    out = run(["--config", str(write_config(tmp_path)), "--check-config"])
    assert out.returncode == 0 and "config OK" in out.stdout
    assert not (tmp_path / "lib").exists()  # validation only: nothing created


def test_unusable_store_is_one_line_exit_1(tmp_path):
    (tmp_path / "lib").write_text("a file where the store directory should be")
    out = run(["--config", str(write_config(tmp_path))])
    assert out.returncode == 1
    assert out.stderr.strip().startswith("harpd: cannot create store directory") and "Traceback" not in out.stderr


def _start(cfg: Path, env=None) -> subprocess.Popen:
    e = {k: v for k, v in os.environ.items() if not k.startswith("HARP_")}
    e.update(env or {})
    return subprocess.Popen(HARPD + ["--config", str(cfg)], stderr=subprocess.PIPE, text=True, env=e)


def _wait_ready(sock: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    def up() -> bool:
        assert proc.poll() is None, proc.stderr.read()
        try:
            return bool(call(sock, {"op": "health"}, timeout=5)["ok"])
        except OSError:
            return False

    wait_for("harpd to come up", up, timeout)


def test_real_harpd_serves_and_stops_cleanly(short_dir):
    cfg = write_config(short_dir)
    sock = f"{short_dir}/run/harpd.sock"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(short_dir / "notify"))
    notify.settimeout(60)
    proc = _start(cfg, env={"NOTIFY_SOCKET": str(short_dir / "notify")})
    try:
        ready = notify.recv(4096).decode()
        assert "READY=1" in ready  # systemd Type=notify
        _wait_ready(sock, proc)
        assert oct(os.stat(sock).st_mode & 0o777) == oct(0o666)
        pred = call(sock, {"v": 1, "op": "predict", "job": {"partition": "cpu", "request": {"time_s": 600}}})
        assert pred["ok"] is True and pred["decision"]["changes"] == [] and pred["token"]
        # an id Slurm does not know (above Slurm's largest job id), or no Slurm to ask: never stored
        reg = call(
            sock,
            {
                "v": 1,
                "op": "register",
                "job_id": "99999999",
                "job": {},
                "original": {"time_s": 600},
                "submitted": {"time_s": 600},
                "token": pred["token"],
            },
        )
        assert reg["ok"] is False and (
            "Slurm does not know job 99999999 yet" in reg["error"]
            or "cannot ask Slurm about job 99999999" in reg["error"]
        ), reg
        st = call(sock, {"v": 1, "op": "status", "job_id": "99999999"})
        assert st == {"ok": False, "error": "harp knows no job 99999999"}
        assert call(sock, b"garbage\n")["ok"] is False
        assert call(sock, {"op": "health"})["ok"] is True
        # a second harpd on the same store (and socket) refuses to start and leaves the first alone
        second = run(["--config", str(cfg)])
        assert second.returncode == 1 and "is in use by another harpd" in second.stderr
        assert f"pid {proc.pid}" in second.stderr and second.stderr.count("\n") == 1
        assert call(sock, {"op": "health"})["ok"] is True
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert "STOPPING=1" in notify.recv(4096).decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        notify.close()
    log = proc.stderr.read()
    assert "INFO harpd.server: listening on" in log and "SIGTERM: shutting down" in log
    assert "Traceback" not in log
    assert not os.path.exists(sock)
    # the decision harpd recorded survived the restart, unclaimed
    proc = _start(cfg)
    try:
        _wait_ready(sock, proc)
        from harpd.store import Store

        with Store.open(short_dir / "lib" / "harp.db") as store:
            row = store.get_decision(pred["token"])
        assert row.uid == os.geteuid() and row.job["request"]["time_s"] == 600 and row.job_id is None
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_harpd_restarts_after_sigkill_over_its_stale_socket(short_dir):
    cfg = write_config(short_dir)
    sock = f"{short_dir}/run/harpd.sock"
    proc = _start(cfg)
    _wait_ready(sock, proc)
    proc.kill()
    proc.wait()
    assert os.path.exists(sock)  # left behind
    proc = _start(cfg)
    try:
        _wait_ready(sock, proc)
        assert "replacing stale socket" in _stop_and_log(proc)
    finally:
        if proc.poll() is None:
            proc.kill()


def _stop_and_log(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
    return proc.stderr.read()


def test_journald_gets_syslog_priorities(short_dir):
    cfg = write_config(short_dir)
    proc = _start(cfg, env={"JOURNAL_STREAM": "8:1234"})
    try:
        _wait_ready(f"{short_dir}/run/harpd.sock", proc)
        log = _stop_and_log(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "<6>INFO harpd" in log and "<7>DEBUG harpd.server" in log
