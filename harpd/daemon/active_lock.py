"""One active harpd per store: a lock beside it, held for the daemon's life.

Two harpds on one store would both poll sacct and both act on the same
outcomes (the attempts table makes each decision once, but an interrupted
attempt's side effect is retried by whoever finds it).  So harpd takes an
exclusive lock (flock) on ``<store>.harpd.lock`` at start, before it opens
the store: a second harpd stops with one line naming the holder, or,
started with ``--standby``, waits until the lock is free and then starts as
the active one.  The kernel drops the lock when the holder exits, however it
exits.  flock, not lockf: a POSIX lock is dropped when the process closes
*any* descriptor of the file, an flock only with its own.  On a store shared
between two hosts, Linux's NFS client maps flock to the server's locks
(Lustre needs the ``flock`` mount option), as a backup slurmctld relies on
its shared StateSaveLocation (docs/deployment.md).
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("harpd")


class StoreInUse(Exception):
    """Another harpd holds the store; the text is the one line to print."""


def lock_path(store: Path) -> Path:
    return store.with_name(store.name + ".harpd.lock")


def hold(
    store: Path, *, standby: bool = False, poll_s: float = 1.0, on_wait: Callable[[str], object] | None = None
) -> int:
    """The open, locked file descriptor (keep it open); StoreInUse, or wait when ``standby``."""
    path = lock_path(store)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
    except OSError as exc:
        raise StoreInUse(f"cannot create the lock {path} ({exc.strerror}); check store.path") from None
    waiting = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            holder = _holder(fd) or "unknown host and pid"
            if not standby:
                os.close(fd)
                raise StoreInUse(
                    f"store {store} is in use by another harpd ({holder}); stop that one first, "
                    "or start this one with --standby to take over when it stops"
                ) from None
            if not waiting:
                waiting = True
                line = f"standby: store {store} is in use by the active harpd ({holder}); waiting to take over"
                log.info("%s", line)
                if on_wait is not None:
                    on_wait(line)
            time.sleep(poll_s)
    if waiting:
        log.info("standby: the active harpd let go of %s; taking over", store)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"host {socket.gethostname()} pid {os.getpid()}\n".encode(), 0)
    return fd


def _holder(fd: int) -> str:
    try:
        return os.pread(fd, 200, 0).decode(errors="replace").strip()
    except OSError:
        return ""
