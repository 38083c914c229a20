"""munged for the TCP tests: the local cluster's own, and a foreign one with another key."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.helpers.harpd_process import stop_harpd
from tests.helpers.wait import wait_for

SYSTEM_SOCKET = "/run/munge/munge.socket.2"


def cluster_munge_socket(slurm_conf: str | os.PathLike[str]) -> str:
    """The munged the cluster authenticates with: slurm.conf's AuthInfo=socket=..., else munged's default."""
    m = re.search(r"^AuthInfo=.*\bsocket=([^,\s]+)", Path(slurm_conf).read_text(), re.M)
    return m.group(1) if m else SYSTEM_SOCKET


def free_port() -> int:
    """A TCP port nobody listens on right now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def foreign_munged(d: Path) -> Iterator[str]:
    """A munged with a key of its own (another cluster's): yields its socket."""
    key = d / "foreign.key"
    key.write_bytes(os.urandom(128))
    key.chmod(0o600)
    sock = d / "foreign.sock"
    proc = subprocess.Popen(
        [
            "munged",
            "--foreground",
            "--force",
            f"--socket={sock}",
            f"--key-file={key}",
            f"--log-file={d}/foreign-munged.log",
            f"--pid-file={d}/foreign-munged.pid",
            f"--seed-file={d}/foreign-munged.seed",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:

        def started() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"foreign munged exited: {(d / 'foreign-munged.log').read_text()[-800:]}")
            return subprocess.run(["munge", "-n", "-S", str(sock)], capture_output=True).returncode == 0

        wait_for(
            "the foreign munged to start",
            started,
            30,
            interval=0.1,
            log=lambda: (d / "foreign-munged.log").read_text()[-800:],
        )
        yield str(sock)
    finally:
        stop_harpd(proc)  # SIGTERM, wait, kill: any daemon's stop
