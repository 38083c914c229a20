"""harpd.store.checkpoints: the WAL is copied back by harpd's own thread, never inside a request's commit."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest

from harpd.protocol import Decision, JobRequest, Resources
from harpd.store import Store
from harpd.store.checkpoints import Checkpointer
from tests.helpers.wait import wait_for

JOB = {"commands": ["x" * 3000], "request": {"time_s": 3600}}


def _decide(store: Store, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        store.add_decision(f"tok{i}", 1000, "u", JobRequest.model_validate(JOB), Resources(), Decision())


def _wal(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


def _autocheckpoint(store: Store) -> int:
    return int(store.db.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0])


def test_deferred_commits_leave_the_wal_alone(tmp_path: Path) -> None:
    """Without the deferral a commit past 1000 pages checkpoints (the stall); with it, none does."""
    store = Store.open(tmp_path / "harp.db")
    try:
        _decide(store, 1500)  # ~5 MB of WAL: SQLite's own checkpoint ran inside some commit
        assert _wal(tmp_path / "harp.db") < 5 * 1024 * 1024
        store.defer_checkpoints()
        assert _autocheckpoint(store) == 0
        before = _wal(tmp_path / "harp.db")
        _decide(store, 1500, 1500)
        assert _wal(tmp_path / "harp.db") > before + 3 * 1024 * 1024  # grew: nobody copied it back
        frames, copied = store.checkpoint()
        assert frames > 1000 and copied == frames
    finally:
        store.close()


def test_every_threads_connection_is_deferred(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "harp.db")
    try:
        store.defer_checkpoints()
        got: list[int] = []
        t = threading.Thread(target=lambda: got.append(_autocheckpoint(store)))  # a new request thread
        t.start()
        t.join()
        assert got == [0]
    finally:
        store.close()


def test_the_thread_checkpoints_and_stops(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "harp.db")
    cp = Checkpointer.start(store, interval_s=0.05)
    try:
        assert _autocheckpoint(store) == 0
        _decide(store, 400)
        wait_for("the checkpointer to copy the WAL back", lambda: cp.copied >= 400, 60, interval=0.05)
        assert any(t.name == "harpd-checkpoint" for t in threading.enumerate())
    finally:
        cp.shutdown()
        store.close()
    assert not any(t.name == "harpd-checkpoint" and t.is_alive() for t in threading.enumerate())
    # nothing lost: the rows are in the file
    again = Store.open(tmp_path / "harp.db")
    try:
        assert again.get_decision("tok399") is not None
    finally:
        again.close()


def test_a_failing_checkpoint_is_logged_once_and_its_end(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = Store.open(tmp_path / "harp.db")
    cp = Checkpointer(store)
    try:
        os.rename(tmp_path / "harp.db", tmp_path / "moved.db")  # the store file replaced under harpd
        with caplog.at_level(logging.WARNING, logger="harpd.store"):
            assert cp.run_once() is False and cp.run_once() is False
            lines = [r.getMessage() for r in caplog.records]
            assert len(lines) == 1 and "WAL checkpoint failed" in lines[0] and "deleted" in lines[0]
            os.rename(tmp_path / "moved.db", tmp_path / "harp.db")
            assert cp.run_once() is True
            assert caplog.records[-1].getMessage() == "WAL checkpoints work again"
    finally:
        store.close()
