"""A standby harpd: refused beside an active one on the same store, or waiting to take over with --standby."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from daemon_helpers import call

from harpd.daemon.active_lock import StoreInUse, hold, lock_path
from tests.helpers.harpd_process import stop_harpd
from tests.helpers.wait import wait_for

HARPD = [sys.executable, "-m", "harpd.daemon.main"]


def _config(d: Path, name: str, store: Path) -> Path:
    cfg = d / f"{name}.toml"
    cfg.write_text(
        f'[server]\nsocket = "{d}/{name}.sock"\n[store]\npath = "{store}"\n[ingest]\npoll_interval_s = 3600\n'
    )
    return cfg


def _start(cfg: Path, *extra: str) -> subprocess.Popen[str]:
    """harpd on ``cfg``, its log in ``<cfg>.log``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARP_")}
    with open(f"{cfg}.log", "w") as log:
        return subprocess.Popen([*HARPD, "--config", str(cfg), *extra], stderr=log, text=True, env=env)


def _health(sock: str, proc: subprocess.Popen[str], timeout: float = 90) -> None:
    def answers() -> bool:
        assert proc.poll() is None, f"harpd exited {proc.returncode}"
        try:
            return bool(call(sock, {"op": "health"}, 5)["ok"])
        except OSError:
            return False

    wait_for("harpd to answer health", answers, timeout, interval=0.1)


_stop = stop_harpd


def test_the_lock_names_its_holder_and_is_free_again_once_closed(tmp_path: Path) -> None:
    store = tmp_path / "lib" / "harp.db"
    fd = hold(store)
    try:
        assert f"pid {os.getpid()}" in lock_path(store).read_text()
        pid = os.fork()
        if pid == 0:  # a second process with a descriptor of its own
            try:
                hold(store)
                os._exit(3)
            except StoreInUse as exc:
                os._exit(0 if f"pid {os.getppid()}" in str(exc) and "--standby" in str(exc) else 4)
        assert os.waitpid(pid, 0)[1] == 0
    finally:
        os.close(fd)
    os.close(hold(store))


def test_a_standby_harpd_waits_and_takes_over_when_the_active_one_stops(short_dir: Path) -> None:
    store = short_dir / "shared" / "harp.db"
    active = _start(_config(short_dir, "a", store))
    standby = None
    try:
        _health(f"{short_dir}/a.sock", active)
        refused = subprocess.run(
            [*HARPD, "--config", str(_config(short_dir, "b", store))],
            capture_output=True,
            text=True,
            timeout=120,
            env={k: v for k, v in os.environ.items() if not k.startswith("HARP_")},
        )
        assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
        assert "is in use by another harpd" in refused.stderr and f"pid {active.pid}" in refused.stderr
        standby = _start(_config(short_dir, "b", store), "--standby")
        log = short_dir / "b.toml.log"

        def says_waiting() -> bool:  # it says so, and serves nothing meanwhile
            assert standby.poll() is None, log.read_text()
            return "waiting to take over" in log.read_text()

        wait_for("the standby to say it waits", says_waiting, 90, interval=0.1, log=log.read_text)
        assert standby.poll() is None and not os.path.exists(f"{short_dir}/b.sock")
        _stop(active)
        _health(f"{short_dir}/b.sock", standby)  # took over: now it answers
    finally:
        _stop(active)
        if standby is not None:
            _stop(standby)
    text = (short_dir / "b.toml.log").read_text()
    assert f"standby: store {store} is in use by the active harpd (host" in text, text
    assert "let go of" in text and "taking over" in text and "Traceback" not in text, text
