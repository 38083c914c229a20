"""The store's connection: opening and migrating the file, one connection per thread, transactions, meta, health.

Durability: WAL journal with ``synchronous=FULL``.  In WAL mode ``NORMAL``
already survives a killed process, but a power cut or kernel crash can roll
back the last transactions that ``COMMIT`` had reported done; ``FULL`` fsyncs
the WAL at every commit so nothing reported committed is ever lost.  The cost
is one fsync per transaction, which is why bulk writes (``insert_jobs``) go in
big batches rather than row by row.

Concurrency: every thread gets its own connection (WAL lets readers run
beside the one writer, so a long report never stalls a ``predict``), writes
start with ``BEGIN IMMEDIATE`` so two writers queue on ``busy_timeout`` instead
of failing half-way with a lock upgrade error, and separate processes (the
daemon and ``harp import``) share the file the same way.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Self

import sqlite_utils

from harpd.store import migrations
from harpd.store.columns import _JOB_TYPES, JOB_COLUMNS


class StoreError(Exception):
    """A store problem, phrased as the one line the admin should read."""


class OwnerChanged(StoreError):
    """A registration would give a stored job another owner: refused, the stored one stays."""


class QuotaExceeded(StoreError):
    """A user's stored decisions are at their quota: nothing more is stored for them until some are used."""


def _explain(exc: BaseException, path: Path) -> str:
    msg = str(exc)
    low = msg.lower()
    if "not a database" in low or "malformed" in low:
        return f"{path}: not a harp database ({msg}); move it aside or set store.path to another file"
    if "disk is full" in low or "database or disk is full" in low:
        return f"{path}: disk full ({msg}); free space on {path.parent} and retry"
    if "readonly" in low or "read-only" in low:
        return f"{path}: store is read-only ({msg}); make the file and {path.parent} writable by uid {os.geteuid()}"
    if "unable to open" in low:
        return f"{path}: cannot open the store ({msg}); check that {path.parent} exists and is writable"
    if "locked" in low or "busy" in low:
        return f"{path}: store is locked by another process for too long ({msg}); retry later"
    return f"{path}: store error ({msg})"


def _is_translatable(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError | sqlite3.DatabaseError) and not isinstance(
        exc, sqlite3.IntegrityError | sqlite3.ProgrammingError | sqlite3.InterfaceError
    )


def _dumps(v: Any) -> str | None:
    return None if v is None else json.dumps(v, separators=(",", ":"), sort_keys=True)


def _loads(v: str | None) -> Any:
    return None if v is None else json.loads(v)


# --------------------------------------------------------------------------


class _ThreadConn:
    """One thread's connection and transaction depth.

    It lives in the store's thread-local, so when the thread ends (harpd runs
    one short thread per client) the holder is dropped and the connection
    closed: connections never pile up over days of requests.
    """

    __slots__ = ("db", "depth", "read_only", "relaxed", "__weakref__")

    def __init__(self, db: sqlite_utils.Database, read_only: bool = False) -> None:
        self.db = db
        self.depth = 0
        # the connection's synchronous mode: FULL (False, as opened) or NORMAL, left as the last
        # outermost transaction set it, since only commits read it and each commit sets its own
        self.relaxed = False
        # SQLite opens a file it may not write read-only, and the connection stays so
        # after the admin fixes the modes: such a connection is replaced (``transaction``)
        self.read_only = read_only

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.db.conn.close()

    def __del__(self) -> None:
        self.close()


class StoreBase:
    """The connection side of the store: opening, migrating, transactions, meta, health.

    Each table's queries are a mixin on top of it (``harpd.store.jobs`` ...);
    ``harpd.store.Store`` is all of them.
    """

    def __init__(self, path: Path, busy_timeout_s: float = 30.0) -> None:
        self.path = path
        self.busy_timeout_s = busy_timeout_s
        self._local = threading.local()
        self._conns: weakref.WeakSet[_ThreadConn] = weakref.WeakSet()
        self._conns_lock = threading.Lock()
        self._closed = False
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file once open
        self._write_error: str | None = None  # why the last write failed, until one succeeds (health)
        self._autocheckpoint = True  # False: commits leave the WAL to ``checkpoints.Checkpointer``

    # ---------------------------------------------------------------- opening

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, busy_timeout_s: float = 30.0) -> Self:
        """Open (creating and migrating as needed) the store at ``path``.

        Raises StoreError with one line for every way this can fail at start:
        directory not creatable/writable, read-only file, a file that is not a
        harp database, a schema from a newer harp, a full disk.
        """
        p = Path(path).expanduser()
        if not p.is_absolute():
            p = Path.cwd() / p
        parent = p.parent
        try:
            if not parent.is_dir():
                parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot create store directory {parent} ({exc.strerror}); create it or set store.path"
            ) from None
        if not parent.is_dir():
            raise StoreError(f"{parent} is not a directory; set store.path to a file in a directory")
        if p.exists() and p.is_dir():
            raise StoreError(f"{p} is a directory; set store.path to a file name")
        # WAL needs to create <db>-wal and <db>-shm beside the file
        if not os.access(parent, os.W_OK | os.X_OK):
            raise StoreError(
                f"store directory {parent} is not writable by uid {os.geteuid()}; fix its permissions or set store.path"
            )
        if p.exists() and not os.access(p, os.R_OK | os.W_OK):
            raise StoreError(
                f"store file {p} is read-only for uid {os.geteuid()}; fix its permissions or set store.path"
            )
        store = cls(p, busy_timeout_s=busy_timeout_s)
        try:
            store._migrate()
            st = os.stat(p)
            store._identity = (st.st_dev, st.st_ino)
        except StoreError:
            store.close()
            raise
        except (sqlite3.Error, OSError) as exc:
            store.close()
            raise StoreError(_explain(exc, p)) from None
        return store

    def _connect(self) -> sqlite_utils.Database:
        if self._closed:
            raise StoreError(f"{self.path}: store is closed")
        conn = sqlite3.connect(
            str(self.path),
            timeout=self.busy_timeout_s,
            isolation_level=None,  # no implicit transactions: transaction() decides
            check_same_thread=False,  # close() may run on another thread
        )
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(
                    f"{self.path}: cannot switch to WAL journal (got {mode}); put the store on a local disk"
                )
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
            conn.execute("PRAGMA foreign_keys=OFF")
            if not self._autocheckpoint:
                conn.execute("PRAGMA wal_autocheckpoint=0")
        except BaseException:
            conn.close()
            raise
        return sqlite_utils.Database(conn, execute_plugins=False)

    def _check_file(self) -> None:
        """Refuse to go on when the store file was deleted or replaced under us.

        SQLite would carry on regardless: open connections write into the
        unlinked file (lost at close) and a new one silently creates an empty
        database in its place.  One stat per use, microseconds.
        """
        if self._identity is None:
            return
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise StoreError(
                f"{self.path}: the store file was deleted while harpd was running; restore it, "
                "or restart harpd to start an empty store"
            ) from None
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot check the store file ({exc.strerror})") from None
        if (st.st_dev, st.st_ino) != self._identity:
            raise StoreError(f"{self.path}: the store file was replaced while harpd was running; restart harpd")

    def _holder(self) -> _ThreadConn:
        self._check_file()
        h = getattr(self._local, "conn", None)
        if h is None or self._closed:
            try:
                h = _ThreadConn(self._connect(), self._identity is not None and self._read_only() is not None)
            except sqlite3.Error as exc:  # a store corrupted under a running harpd: one line, as for a query
                if _is_translatable(exc):
                    raise StoreError(_explain(exc, self.path)) from None
                raise
            with self._conns_lock:
                self._conns.add(h)
            self._local.conn = h
        return h

    @property
    def db(self) -> sqlite_utils.Database:
        """This thread's sqlite-utils Database (one connection per thread)."""
        return self._holder().db

    @property
    def open_connections(self) -> int:
        """Connections currently open (one per live thread that used the store)."""
        with self._conns_lock:
            return len(self._conns)

    def defer_checkpoints(self) -> None:
        """Commits stop copying the WAL into the database; ``checkpoint()`` must then be called.

        SQLite checkpoints on the commit that takes the WAL past 1000 pages:
        it copies the WAL into the file and fsyncs it, 20 ms to half a
        second, inside whichever request committed.  harpd calls this at
        start, before other threads use the store, and checkpoints from a
        thread of its own (``harpd.store.checkpoints``).
        """
        self._autocheckpoint = False
        with self._conns_lock:
            holders = list(self._conns)
        for h in holders:
            with contextlib.suppress(sqlite3.Error):
                h.db.conn.execute("PRAGMA wal_autocheckpoint=0")

    def checkpoint(self) -> tuple[int, int]:
        """Copy what it can of the WAL into the database without waiting for anyone (PASSIVE).

        Returns (frames in the WAL, frames copied); StoreError when SQLite refuses.
        """
        row = self._read("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return int(row[1]), int(row[2])

    def close(self) -> None:
        """Close every connection (of every thread); later calls raise StoreError."""
        self._closed = True
        with self._conns_lock:
            holders = list(self._conns)
            self._conns = weakref.WeakSet()
        for h in holders:
            h.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _migrate(self) -> None:
        db = self.db
        names = set(db.table_names())
        if names and "meta" not in names:
            raise StoreError(
                f"{self.path}: not a harp database (tables {', '.join(sorted(names))} but no meta table); "
                "move it aside or set store.path"
            )
        with self.transaction():
            db.table("meta").create({"key": str, "value": str}, pk="key", if_not_exists=True)
            current = self.get_meta("schema_version", 0)
            if not isinstance(current, int) or current < 0:
                raise StoreError(f"{self.path}: not a harp database (schema_version {current!r})")
            if current > migrations.SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path}: written by a newer harp (schema {current} > {migrations.SCHEMA_VERSION}); "
                    "upgrade harp"
                )
            for version in range(current, migrations.SCHEMA_VERSION):
                migrations.MIGRATIONS[version](db)
                self.set_meta("schema_version", version + 1)
            # fields added to JobRecord since the table was created
            have = set(db.table("jobs").columns_dict)
            for name in JOB_COLUMNS:
                if name not in have:
                    db.table("jobs").add_column(name, _JOB_TYPES[name])

    # ----------------------------------------------------------- transactions

    @contextlib.contextmanager
    def transaction(self, durable: bool = True) -> Iterator[sqlite_utils.Database]:
        """All writes inside commit together or not at all; nests (savepoints).

        The outermost level takes the write lock at once (BEGIN IMMEDIATE), so
        a read-then-write block never fails on a lock upgrade.  SQLite errors
        that mean disk full / read-only / corrupt come out as StoreError.

        ``durable=False`` (outermost level only): this commit skips its fsync
        (``synchronous=NORMAL`` for it).  It still survives a killed harpd; only
        a power cut or kernel crash before the next durable commit (which
        fsyncs the whole WAL, this one included) or checkpoint can lose it.
        For writes on a request's path whose loss at a power cut costs nothing
        the crash itself does not (a ``predict`` decision: the job's
        registration, a durable commit, follows within the submission).
        """
        h = self._holder()
        if h.depth == 0 and self._identity is not None:
            # a connection opened before the file or its folder became read-only
            # still writes through its open descriptors, while a new one cannot:
            # which a request got would depend on its thread, so every write asks
            read_only = self._read_only()
            if read_only:
                self._write_error = read_only
                raise StoreError(read_only)
            if h.read_only:
                # opened while the store was read-only, which SQLite makes for good; the admin has
                # fixed the modes since: this thread writes through a new connection (reads in
                # progress elsewhere are unaffected; one on this thread could not write anyway)
                h.close()
                self._local.conn = None
                h = self._holder()
        db = h.db
        depth = h.depth
        relaxed = not durable
        if depth == 0 and relaxed != h.relaxed:
            # set per outermost transaction, and only when it changes: a run of decisions on one
            # thread then costs no PRAGMA each (two of a decision's five statements before)
            try:
                db.conn.execute("PRAGMA synchronous=NORMAL" if relaxed else "PRAGMA synchronous=FULL")
            except sqlite3.Error as exc:
                self._write_error = _explain(exc, self.path)
                raise StoreError(self._write_error) from None
            h.relaxed = relaxed
        with self._transaction(h, db, depth) as got:
            yield got

    @contextlib.contextmanager
    def _transaction(self, h: _ThreadConn, db: sqlite_utils.Database, depth: int) -> Iterator[sqlite_utils.Database]:
        """``transaction``'s body: BEGIN (or a savepoint), yield, COMMIT or roll back."""
        try:
            if depth == 0:
                db.conn.execute("BEGIN IMMEDIATE")
            else:
                db.conn.execute(f"SAVEPOINT harp_{depth}")
        except sqlite3.Error as exc:
            self._write_error = _explain(exc, self.path)
            raise StoreError(self._write_error) from None
        h.depth = depth + 1
        try:
            yield db
        except BaseException as exc:
            h.depth = depth
            if db.conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    if depth == 0:
                        db.conn.execute("ROLLBACK")
                    else:
                        db.conn.execute(f"ROLLBACK TO SAVEPOINT harp_{depth}")
                        db.conn.execute(f"RELEASE SAVEPOINT harp_{depth}")
            if _is_translatable(exc):
                self._write_error = _explain(exc, self.path)
                raise StoreError(self._write_error) from None
            raise
        else:
            h.depth = depth
            try:
                if depth == 0:
                    db.conn.execute("COMMIT")
                    self._write_error = None
                else:
                    db.conn.execute(f"RELEASE SAVEPOINT harp_{depth}")
            except sqlite3.Error as exc:
                if depth == 0 and db.conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        db.conn.execute("ROLLBACK")
                self._write_error = _explain(exc, self.path)
                raise StoreError(self._write_error) from None

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Rows as dicts (sqlite-utils' query), with SQLite errors as StoreError."""
        try:
            return list(self.db.query(sql, list(params)))
        except sqlite3.Error as exc:
            if _is_translatable(exc):
                raise StoreError(_explain(exc, self.path)) from None
            raise

    def _read(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        try:
            return self.db.conn.execute(sql, tuple(params))
        except sqlite3.Error as exc:
            if _is_translatable(exc):
                raise StoreError(_explain(exc, self.path)) from None
            raise

    # ------------------------------------------------------------------- meta

    def get_meta(self, key: str, default: Any = None) -> Any:
        """A value stored with set_meta (JSON round trip), or ``default``."""
        row = self._read("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None else _loads(row[0])

    def set_meta(self, key: str, value: Any) -> None:
        with self.transaction() as db:
            db.conn.execute(
                "INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, _dumps(value)),
            )

    def _read_only(self) -> str | None:
        """Why this process may not write the store file (None: it may), by the file's and folder's modes."""
        if os.access(self.path, os.W_OK) and os.access(self.path.parent, os.W_OK | os.X_OK):
            return None
        return f"{self.path}: store is read-only for uid {os.geteuid()}; make the file and {self.path.parent} writable"

    def check(self) -> str:
        """'ok' or a one-line reason: a cheap liveness probe for ``health``."""
        try:
            self._read("SELECT count(*) FROM meta").fetchone()
        except (StoreError, sqlite3.Error) as exc:
            return str(exc)
        # readable is not enough: registrations and outcomes are writes
        if self._write_error is not None:
            return f"writes failing: {self._write_error}"
        return self._read_only() or "ok"
