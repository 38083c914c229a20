"""Start a real ``harpd`` process for a test and stop it afterwards.

Several test modules need the real daemon (not a fake) on a private socket and
store; one helper keeps how it is started, waited for and stopped in one place.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from harp_submit import client
from tests.helpers.wait import wait_for

HARD_CUTS_KEY = "hard_cut_gain = 1.0"


def with_hard_cuts(toml: str) -> str:
    """``toml`` with harp's time cuts on under hard limits, unless it sets ``hard_cut_gain`` itself.

    The product's default (``predict.hard_cut_gain = 0``) keeps time under hard
    limits, because a kill costs the queue more than the cut saves on every
    trace measured (docs/metrics.md, "Queue").  These tests are about what
    happens when harp does cut (the kill, the recovery, the race with a
    manager), so the harpd they start cuts as a site that opts in would.
    """
    if "hard_cut_gain" in toml:
        return toml
    if "[predict]\n" in toml:
        return toml.replace("[predict]\n", f"[predict]\n{HARD_CUTS_KEY}\n", 1)
    return f"{toml}\n[predict]\n{HARD_CUTS_KEY}\n"


@contextlib.contextmanager
def running_harpd(
    workdir: Path,
    *,
    slurm_conf: str | os.PathLike[str] | None = None,
    extra_toml: str = "",
    poll_interval_s: float = 3600,
    timeout_s: float = 60,
) -> Iterator[str]:
    """Yield the socket path of a harpd serving from ``workdir`` (config, store, socket)."""
    workdir = Path(workdir)
    cfg = workdir / "harpd.toml"
    sock = workdir / "harpd.sock"
    cfg.write_text(
        f'[server]\nsocket = "{sock}"\n[store]\npath = "{workdir}/lib/harp.db"\n'
        f"[ingest]\npoll_interval_s = {poll_interval_s}\n{with_hard_cuts(extra_toml)}"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARP_")}
    if slurm_conf is not None:
        env["SLURM_CONF"] = str(slurm_conf)
    log = open(workdir / "harpd.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "harpd.daemon.main", "--config", str(cfg)], stdout=log, stderr=subprocess.STDOUT, env=env
    )
    try:
        wait_for_health(str(sock), proc, workdir / "harpd.log", timeout_s)
        yield str(sock)
    finally:
        stop_harpd(proc)
        log.close()


def wait_for_health(sock: str, proc: subprocess.Popen, log: Path | None = None, timeout_s: float = 60) -> None:
    """Return once harpd on ``sock`` answers health ok; AssertionError if it exits or stays silent.

    The failure message carries the end of harpd's output (``log``, else its
    piped stderr) because that is where the reason it did not start is.
    """

    def output() -> str:
        if log is not None:
            return Path(log).read_text(errors="replace")[-2000:]
        if proc.stderr is not None and proc.poll() is not None:
            out = proc.stderr.read()
            return out.decode(errors="replace") if isinstance(out, bytes) else out
        return ""

    def healthy() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"harpd exited (code {proc.returncode}): " + output())
        try:
            client.call(sock, {"op": "health"}, 5)
        except (client.HarpdUnavailable, OSError):
            return False
        return True

    wait_for("harpd to come up", healthy, timeout_s, interval=0.1, log=output)


def stop_harpd(proc: subprocess.Popen) -> int:
    """SIGTERM harpd and wait for it (killing it after 30 s); its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode
