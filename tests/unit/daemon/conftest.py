"""Fixtures for the daemon tests: a store, an in-process server, a raw client."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import call

from harpd.daemon.door import Door
from harpd.daemon.handlers import Handlers
from harpd.daemon.server import Server, ServerLimits
from harpd.store import Store


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short, world-traversable directory: socket paths max 107 bytes, and
    tests that drop to ``nobody`` must reach the socket inside."""
    d = Path(tempfile.mkdtemp(prefix="hd-", dir="/tmp"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(tmp_path / "harp.db")
    yield s
    s.close()


class RunningServer:
    def __init__(self, server: Server, thread: threading.Thread) -> None:
        self.server = server
        self.thread = thread
        self.path = str(server.path)

    def call(self, request: Any, timeout: float = 10.0) -> dict[str, Any]:
        return call(self.path, request, timeout)


@pytest.fixture
def serve(short_dir: Path, store: Store):
    """serve(handlers=..., mode=..., doors=..., **limits) → RunningServer, stopped at teardown.

    ``limits``: ``ServerLimits``' fields a test varies (the others keep the server's defaults).
    """
    running: list[RunningServer] = []

    def start(
        handlers: Handlers | None = None, *, mode: int = 0o666, doors: Sequence[Door] = (), **limits: Any
    ) -> RunningServer:
        h = handlers or Handlers(store)
        srv = Server(short_dir / "harpd.sock", h, mode=mode, doors=doors, limits=ServerLimits(**limits))
        srv.bind()
        t = threading.Thread(target=srv.serve_forever, daemon=True)
        t.start()
        r = RunningServer(srv, t)
        running.append(r)
        return r

    yield start
    for r in running:
        r.server.shutdown()
        r.thread.join(15)
        r.server.close()
