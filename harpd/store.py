"""harp's SQLite store: the only module that opens the database.

One module owns SQL so the schema, its migrations and its durability rules live
in one place; everything else speaks ``JobRecord`` and plain dicts.  That is
also why it is longer than harp's other modules: splitting it would spread the
SQL (and the import-linter rule "only harpd.store opens SQLite") over files.

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

Schema: ``meta.schema_version`` counts the entries of ``MIGRATIONS`` applied;
``Store.open`` applies the missing ones in one transaction, so a crash during a
migration leaves the previous version intact.  ``jobs`` mirrors ``JobRecord``:
a field added to the dataclass becomes a nullable column at the next open
without a hand-written migration.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
import typing
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import fields
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np
import sqlite_utils

from harpd.records import JobRecord, Outcome

# Bind Outcome as its plain string value: sqlite3's generic str-subclass path
# costs microseconds per row, which is most of a million-row import.
sqlite3.register_adapter(Outcome, lambda o: o._value_)

__all__ = ["Store", "StoreError", "JOB_COLUMNS", "SCHEMA_VERSION"]


class StoreError(Exception):
    """A store problem, phrased as the one line the admin should read."""


# --------------------------------------------------------------------------
# jobs columns, derived from JobRecord

# (source, job_id, attempt) identifies a run; job_id leads the key's index so
# get_job(job_id) needs no second index (one index less to update per insert)
_PK = ("job_id", "source", "attempt")
# meta key: the sources harpd's sacct poller wrote, i.e. the cluster's own jobs;
# every other source came from `harp import` (a trace whose job ids may collide)
LIVE_SOURCES_KEY = "ingest.live_sources"
_BOOL_FIELDS = frozenset(
    f.name for f in fields(JobRecord) if typing.get_type_hints(JobRecord)[f.name] is bool
)


def _sql_type(tp: Any) -> type:
    """Map a JobRecord annotation to the Python type sqlite-utils turns into a column type."""
    args = [a for a in typing.get_args(tp) if a is not type(None)] or [tp]
    base = args[0]
    if base is bool or base is int:
        return int
    if base is float:
        return float
    return str  # str, Outcome (a str enum)


_HINTS = typing.get_type_hints(JobRecord)
JOB_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(JobRecord))
_JOB_TYPES: dict[str, type] = {name: _sql_type(_HINTS[name]) for name in JOB_COLUMNS}
_OUTCOMES = {o.value: o for o in Outcome}
_UNFINISHED = (Outcome.RUNNING.value, Outcome.UNKNOWN.value)

# columns iter_jobs may order by / filter times on (user input never reaches SQL text)
_ORDERABLE = frozenset(JOB_COLUMNS)


_COLUMN_SLICE = 20_000  # rows job_columns converts at a time


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# --------------------------------------------------------------------------
# migrations: append only; index i brings the schema from version i to i+1


def _m001_initial(db: sqlite_utils.Database) -> None:
    db["jobs"].create(
        dict(_JOB_TYPES),
        pk=_PK,
        not_null=["job_id", "source", "attempt", "outcome", "censored_time", "censored_mem", "harp_sized"],
        if_not_exists=True,
    )
    db["jobs"].create_index(["submit_time"], if_not_exists=True)
    db["jobs"].create_index(["end_time"], if_not_exists=True)
    db["submissions"].create(
        {
            "job_id": str,
            "uid": int,
            "user": str,
            "submitted_at": float,
            "job": str,
            "original": str,
            "submitted": str,
            "decision": str,
            "state": str,
            "chain_id": str,
            "outcome": str,
            "done_at": float,
        },
        pk="job_id",
        not_null=["uid", "state", "submitted_at"],
        if_not_exists=True,
    )
    db["submissions"].create_index(["state"], if_not_exists=True)
    db["submissions"].create_index(["chain_id"], if_not_exists=True)
    db["attempts"].create(
        {
            "chain_id": str,
            "attempt": int,
            "job_id": str,
            "limits": str,
            "reason": str,
            "step": str,
            "outcome": str,
            "created_at": float,
            "updated_at": float,
        },
        pk=("chain_id", "attempt"),
        not_null=["chain_id", "attempt", "step", "created_at"],
        if_not_exists=True,
    )
    db["attempts"].create_index(["job_id"], if_not_exists=True)
    db["models"].create(
        {
            "id": int,
            "name": str,
            "resource": str,
            "trained_at": float,
            "n_train": int,
            "score": str,
            "champion": int,
            "path": str,
        },
        pk="id",
        not_null=["name", "resource", "trained_at", "champion"],
        if_not_exists=True,
    )
    db["models"].create_index(["resource", "champion"], if_not_exists=True)


def _m002_limit_changes(db: sqlite_utils.Database) -> None:
    # harpd's own changes to a live job's time limit: "extend" (running, before
    # its limit) and "resize" (pending, re-decided).  The unique (job, kind,
    # old limit) key is the exactly-once rule: one change per crossing.
    db["limit_changes"].create(
        {
            "job_id": str,
            "kind": str,
            "old_time_s": int,
            "new_time_s": int,
            "old_mem_mb": int,
            "new_mem_mb": int,
            "step": str,
            "reason": str,
            "created_at": float,
            "updated_at": float,
        },
        pk=("job_id", "kind", "old_time_s"),
        not_null=["job_id", "kind", "old_time_s", "step", "created_at"],
        if_not_exists=True,
    )
    db["limit_changes"].create_index(["step"], if_not_exists=True)


def _m003_decisions(db: sqlite_utils.Database) -> None:
    # what harpd decided for a predict call, bound to the token harp-submit echoes at
    # registration (and leaves in the job's comment): the request and limits
    # harpd extends up to and checks against Slurm come from here, never from
    # the registering client.  ``job_id`` is set once, when a job claims it.
    db["decisions"].create(
        {
            "token": str,
            "uid": int,
            "user": str,
            "decided_at": float,
            "job": str,
            "decided": str,
            "decision": str,
            "job_id": str,
            "used_at": float,
        },
        pk="token",
        not_null=["token", "uid", "decided_at"],
        if_not_exists=True,
    )
    db["decisions"].create_index(["job_id"], if_not_exists=True)
    db["decisions"].create_index(["decided_at"], if_not_exists=True)
    # a registration's decision token, and whether slurmctld vouched for it
    # (owner, limits, submit time): only verified rows are harp's to change or learn from
    db["submissions"].add_column("token", str)
    db["submissions"].add_column("verified", int)


def _m004_cpu_changes(db: sqlite_utils.Database) -> None:
    # a pending job's CPUs re-sized at start (kind "resize-cpus"): CPUs per task before and after
    db["limit_changes"].add_column("old_cpus", int)
    db["limit_changes"].add_column("new_cpus", int)


def _m005_trials(db: sqlite_utils.Database) -> None:
    # convergence-aware trials (harpd.dnn.trials): what running trials report
    # (``harp progress``; uid is Slurm's owner of the job, checked at the report),
    # each owner's study policy, and what harpd last did to a trial (nice, stop)
    db["trial_reports"].create(
        {"id": int, "job_id": str, "uid": int, "study": str, "metric": str, "value": float,
         "elapsed_s": float, "reported_at": float},
        pk="id",
        not_null=["job_id", "uid", "study", "metric", "value", "elapsed_s", "reported_at"],
        if_not_exists=True,
    )
    db["trial_reports"].create_index(["job_id"], if_not_exists=True)
    db["trial_reports"].create_index(["uid", "study"], if_not_exists=True)
    db["trial_studies"].create(
        {"uid": int, "study": str, "policy": str, "updated_at": float},
        pk=("uid", "study"),
        not_null=["uid", "study", "updated_at"],
        if_not_exists=True,
    )
    db["trial_actions"].create(
        {"job_id": str, "uid": int, "study": str, "nice": int, "stopped": int, "reason": str, "at": float},
        pk="job_id",
        not_null=["job_id", "uid", "study", "at"],
        if_not_exists=True,
    )


MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = [_m001_initial, _m002_limit_changes, _m003_decisions,
                                                              _m004_cpu_changes, _m005_trials]
SCHEMA_VERSION = len(MIGRATIONS)


# --------------------------------------------------------------------------
# error translation


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

    __slots__ = ("db", "depth", "__weakref__")

    def __init__(self, db: sqlite_utils.Database) -> None:
        self.db = db
        self.depth = 0

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.db.conn.close()

    def __del__(self) -> None:
        self.close()


class Store:
    """The harp database.  Use ``Store.open(path)``; thread-safe."""

    def __init__(self, path: Path, busy_timeout_s: float = 30.0) -> None:
        self.path = path
        self.busy_timeout_s = busy_timeout_s
        self._local = threading.local()
        self._conns: weakref.WeakSet[_ThreadConn] = weakref.WeakSet()
        self._conns_lock = threading.Lock()
        self._closed = False
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file once open
        self._write_error: str | None = None  # why the last write failed, until one succeeds (health)

    # ---------------------------------------------------------------- opening

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, busy_timeout_s: float = 30.0) -> Store:
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
                raise StoreError(f"{self.path}: cannot switch to WAL journal (got {mode}); put the store on a local disk")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
            conn.execute("PRAGMA foreign_keys=OFF")
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
                h = _ThreadConn(self._connect())
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

    def close(self) -> None:
        """Close every connection (of every thread); later calls raise StoreError."""
        self._closed = True
        with self._conns_lock:
            holders = list(self._conns)
            self._conns = weakref.WeakSet()
        for h in holders:
            h.close()

    def __enter__(self) -> Store:
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
            db["meta"].create({"key": str, "value": str}, pk="key", if_not_exists=True)
            current = self.get_meta("schema_version", 0)
            if not isinstance(current, int) or current < 0:
                raise StoreError(f"{self.path}: not a harp database (schema_version {current!r})")
            if current > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path}: written by a newer harp (schema {current} > {SCHEMA_VERSION}); upgrade harp"
                )
            for version in range(current, SCHEMA_VERSION):
                MIGRATIONS[version](db)
                self.set_meta("schema_version", version + 1)
            # fields added to JobRecord since the table was created
            have = set(db["jobs"].columns_dict)
            for name in JOB_COLUMNS:
                if name not in have:
                    db["jobs"].add_column(name, _JOB_TYPES[name])
        self._insert_sql = self._make_insert_sql()

    # ----------------------------------------------------------- transactions

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite_utils.Database]:
        """All writes inside commit together or not at all; nests (savepoints).

        The outermost level takes the write lock at once (BEGIN IMMEDIATE), so
        a read-then-write block never fails on a lock upgrade.  SQLite errors
        that mean disk full / read-only / corrupt come out as StoreError.
        """
        h = self._holder()
        db = h.db
        depth = h.depth
        if depth == 0 and self._identity is not None:
            # a connection opened before the file or its folder became read-only
            # still writes through its open descriptors, while a new one cannot:
            # which a request got would depend on its thread, so every write asks
            read_only = self._read_only()
            if read_only:
                self._write_error = read_only
                raise StoreError(read_only)
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

    # ------------------------------------------------------------------- jobs

    def _make_insert_sql(self) -> str:
        cols = ", ".join(_q(c) for c in JOB_COLUMNS)
        marks = ", ".join("?" for _ in JOB_COLUMNS)
        updates = ", ".join(f"{_q(c)} = excluded.{_q(c)}" for c in JOB_COLUMNS if c not in _PK)
        pk = ", ".join(_q(c) for c in _PK)
        return f"INSERT INTO jobs ({cols}) VALUES ({marks}) ON CONFLICT({pk}) DO UPDATE SET {updates}"

    def insert_jobs(self, records: Iterable[JobRecord], batch_size: int = 20000) -> int:
        """Upsert records; returns how many were written.  Idempotent.

        A record with the same (source, job_id, attempt) as a stored one
        replaces it (the latest observation wins).  Each batch is one
        transaction (one fsync), unless called inside ``transaction()``.
        Dicts are accepted too (``JobRecord.from_dict``).
        """
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        getter = attrgetter(*JOB_COLUMNS)
        sql = self._insert_sql
        total = 0
        batch: list[tuple[Any, ...]] = []

        def flush() -> None:
            nonlocal total
            try:
                with self.transaction() as db:
                    db.conn.executemany(sql, batch)
            except sqlite3.IntegrityError as exc:
                raise StoreError(f"{self.path}: job record rejected ({exc}); job_id and source are required") from None
            total += len(batch)
            batch.clear()

        for rec in records:
            if not isinstance(rec, JobRecord):
                rec = JobRecord.from_dict(rec)  # type: ignore[arg-type]
            batch.append(getter(rec))
            if len(batch) >= batch_size:
                flush()
        if batch:
            flush()
        return total

    @staticmethod
    def _job_filters(
        source: str | None,
        since: float | None,
        until: float | None,
        user: str | None,
        finished_only: bool,
        time_field: str,
    ) -> tuple[str, list[Any]]:
        if time_field not in _ORDERABLE:
            raise ValueError(f"unknown job column {time_field!r}")
        where: list[str] = []
        params: list[Any] = []
        if source is not None:
            where.append("source = ?")
            params.append(source)
        if since is not None:
            where.append(f"{_q(time_field)} >= ?")
            params.append(since)
        if until is not None:
            where.append(f"{_q(time_field)} < ?")
            params.append(until)
        if user is not None:
            where.append('"user" = ?')
            params.append(user)
        if finished_only:
            where.append("outcome NOT IN (?, ?)")
            params.extend(_UNFINISHED)
        return (" WHERE " + " AND ".join(where)) if where else "", params

    @staticmethod
    def _row_to_record(row: Sequence[Any]) -> JobRecord:
        rec = JobRecord(*row)
        rec.outcome = _OUTCOMES.get(rec.outcome, Outcome.UNKNOWN)  # type: ignore[arg-type]
        rec.censored_time = bool(rec.censored_time)
        rec.censored_mem = bool(rec.censored_mem)
        rec.harp_sized = bool(rec.harp_sized)
        return rec

    def iter_jobs(
        self,
        source: str | None = None,
        since: float | None = None,
        until: float | None = None,
        user: str | None = None,
        finished_only: bool = True,
        order: str | None = "submit_time",
        *,
        time_field: str = "submit_time",
        limit: int | None = None,
    ) -> Iterator[JobRecord]:
        """Stream job records.

        ``since`` (inclusive) and ``until`` (exclusive) apply to ``time_field``
        (submit_time by default; end_time for "finished since").
        ``finished_only`` drops running/unknown outcomes (never train on
        them).  ``order`` is a JobRecord field (ties broken by the primary
        key, so the order is deterministic) or None for storage order.
        """
        where, params = self._job_filters(source, since, until, user, finished_only, time_field)
        cols = ", ".join(_q(c) for c in JOB_COLUMNS)
        sql = f"SELECT {cols} FROM jobs{where}"
        if order is not None:
            if order not in _ORDERABLE:
                raise ValueError(f"unknown job column {order!r} to order by")
            sql += f" ORDER BY {_q(order)}, job_id, source, attempt"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        cur = self._read(sql, params)
        conv = self._row_to_record
        while True:
            rows = cur.fetchmany(5000)
            if not rows:
                return
            for row in rows:
                yield conv(row)

    def count_jobs(
        self,
        source: str | None = None,
        since: float | None = None,
        until: float | None = None,
        user: str | None = None,
        finished_only: bool = True,
        *,
        time_field: str = "submit_time",
    ) -> int:
        """How many jobs iter_jobs would yield with the same filters."""
        where, params = self._job_filters(source, since, until, user, finished_only, time_field)
        return int(self._read(f"SELECT count(*) FROM jobs{where}", params).fetchone()[0])

    def get_job(self, job_id: str, source: str | None = None) -> JobRecord | None:
        """The stored record of ``job_id`` (latest attempt; latest end if several sources)."""
        cols = ", ".join(_q(c) for c in JOB_COLUMNS)
        sql = f"SELECT {cols} FROM jobs WHERE job_id = ?"
        params: list[Any] = [str(job_id)]
        if source is not None:
            sql += " AND source = ?"
            params.append(source)
        sql += " ORDER BY attempt DESC, coalesce(end_time, submit_time, 0) DESC LIMIT 1"
        row = self._read(sql, params).fetchone()
        return None if row is None else self._row_to_record(row)

    def job_columns(
        self,
        columns: list[str],
        where: str | None = None,
        params: Sequence[Any] = (),
        *,
        order: str | None = None,
    ) -> dict[str, np.ndarray]:
        """Whole columns of ``jobs`` as numpy arrays, for reports and training.

        Numeric columns (int or float fields) come back as float64 with NaN
        for NULL; bool fields as bool; text fields (and ``outcome``, as its
        string value) as object arrays with None for NULL.  ``where`` is an
        SQL condition over job columns with ``?`` placeholders bound to
        ``params`` (callers write it in code, never from user input).
        ``order`` is a column name to sort by (ties by primary key).
        """
        cols = list(columns)
        if not cols:
            raise ValueError("job_columns needs at least one column")
        for c in cols:
            if c not in _ORDERABLE:
                raise ValueError(f"unknown job column {c!r}")
        sql = f"SELECT {', '.join(_q(c) for c in cols)} FROM jobs"
        if where:
            sql += f" WHERE {where}"
        if order is not None:
            if order not in _ORDERABLE:
                raise ValueError(f"unknown job column {order!r} to order by")
            sql += f" ORDER BY {_q(order)}, job_id, source, attempt"
        # read and convert in slices: one transpose of a million rows is a single
        # C call that holds the GIL for a second, stalling harpd's predictions
        # while a report runs; slices let the other threads in between
        cur = self._read(sql, params)
        parts: dict[str, list[np.ndarray]] = {c: [] for c in cols}
        try:
            while rows := cur.fetchmany(_COLUMN_SLICE):
                for c, values in zip(cols, zip(*rows)):
                    parts[c].append(self._column_array(c, values))
        except sqlite3.Error as exc:
            if _is_translatable(exc):
                raise StoreError(_explain(exc, self.path)) from None
            raise
        return {
            c: np.concatenate(parts[c]) if parts[c] else np.empty(0, dtype=self._dtype(c)) for c in cols
        }

    def _column_array(self, col: str, values: tuple[Any, ...]) -> np.ndarray:
        dt = self._dtype(col)
        if dt is bool:
            return np.array(values, dtype=bool)  # C loop: a generator costs seconds per 1M rows
        if dt is float:
            return np.array(values, dtype=np.float64)  # None -> NaN, in C
        arr = np.empty(len(values), dtype=object)
        arr[:] = values
        return arr

    @staticmethod
    def _dtype(col: str) -> type:
        if col in _BOOL_FIELDS:
            return bool
        t = _JOB_TYPES[col]
        return float if t in (int, float) else object

    # ------------------------------------------------------------ submissions

    def add_submission(
        self,
        job_id: str,
        uid: int,
        user: str | None,
        job: dict[str, Any],
        original: dict[str, Any],
        submitted: dict[str, Any],
        decision: dict[str, Any] | None,
        chain_id: str | None = None,
        *,
        token: str | None = None,
        verified: bool = False,
    ) -> None:
        """Record what harp-submit submitted (state ``pending``).

        Registering the same job id again (a client retry) updates the
        record but keeps its first ``submitted_at`` and its state.
        ``verified``: slurmctld vouched for the owner and limits (harpd's
        registration checks); ``token``: the decision it was bound to.
        """
        with self.transaction() as db:
            db.conn.execute(
                """INSERT INTO submissions
                   (job_id, uid, user, submitted_at, job, original, submitted, decision, state, chain_id,
                    token, verified)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?)
                   ON CONFLICT(job_id) DO UPDATE SET
                     uid = excluded.uid, user = excluded.user, job = excluded.job,
                     original = excluded.original, submitted = excluded.submitted,
                     decision = excluded.decision,
                     chain_id = coalesce(excluded.chain_id, submissions.chain_id),
                     token = coalesce(excluded.token, submissions.token),
                     verified = excluded.verified""",
                (
                    str(job_id),
                    int(uid),
                    user,
                    time.time(),
                    _dumps(job),
                    _dumps(original),
                    _dumps(submitted),
                    _dumps(decision),
                    chain_id,
                    token,
                    1 if verified else 0,
                ),
            )

    def register_decided(self, token: str, job_id: str, uid: int, user: str | None, job: dict[str, Any],
                         original: dict[str, Any], submitted: dict[str, Any],
                         decision: dict[str, Any] | None) -> bool:
        """Claim decision ``token`` for ``job_id`` and record the verified submission, in one transaction.

        False (and nothing written) when the token is unknown or already
        claimed: a decision binds one job, once, whoever races for it.
        """
        with self.transaction() as db:
            cur = db.conn.execute(
                "UPDATE decisions SET job_id = ?, used_at = ? WHERE token = ? AND job_id IS NULL",
                (str(job_id), time.time(), str(token)),
            )
            if cur.rowcount != 1:
                return False
            self.add_submission(job_id, uid, user, job, original, submitted, decision, token=token, verified=True)
            return True

    # -------------------------------------------------------------- decisions

    def add_decision(self, token: str, uid: int, user: str | None, job: dict[str, Any], decided: dict[str, Any],
                     decision: dict[str, Any], decided_at: float | None = None) -> None:
        """Record what harpd decided for one ``predict`` call, under a fresh ``token``."""
        with self.transaction() as db:
            db.conn.execute(
                """INSERT INTO decisions (token, uid, user, decided_at, job, decided, decision)
                   VALUES (?, ?, ?, ?, ?, ?, ?)""",
                (str(token), int(uid), user, time.time() if decided_at is None else float(decided_at),
                 _dumps(job), _dumps(decided), _dumps(decision)),
            )

    @staticmethod
    def _decision_row(row: dict[str, Any]) -> dict[str, Any]:
        for k in ("job", "decided", "decision"):
            row[k] = _loads(row[k])
        return row

    def get_decision(self, token: str) -> dict[str, Any] | None:
        """The recorded decision of ``token`` (claimed or not); None when harpd never made it."""
        rows = self._query("SELECT * FROM decisions WHERE token = ?", [str(token)])
        return self._decision_row(rows[0]) if rows else None

    def unclaimed_tokens(self, since: float) -> set[str]:
        """Tokens of decisions made at or after ``since`` that no job has claimed yet.

        Only decisions that changed something: harp-submit puts the token in
        the job's comment only then, so a dry run or an unchanged job never
        makes harpd list the queue looking for it.
        """
        rows = self._read("SELECT token FROM decisions WHERE job_id IS NULL AND decided_at >= ? "
                          "AND json_array_length(decision, '$.changes') > 0", (float(since),))
        return {r[0] for r in rows}

    def drop_decisions(self, before: float) -> int:
        """Forget unclaimed decisions older than ``before`` (their job never came); returns how many."""
        with self.transaction() as db:
            cur = db.conn.execute("DELETE FROM decisions WHERE job_id IS NULL AND decided_at < ?", (float(before),))
            return int(cur.rowcount)

    @staticmethod
    def _submission(row: dict[str, Any]) -> dict[str, Any]:
        for k in ("job", "original", "submitted", "decision"):
            row[k] = _loads(row[k])
        return row

    def get_submission(self, job_id: str) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM submissions WHERE job_id = ?", [str(job_id)])
        return self._submission(rows[0]) if rows else None

    def submissions_since(self, uid: int, since: float) -> list[dict[str, Any]]:
        """The submissions of ``uid`` registered at or after ``since``, oldest first (a manager's retries)."""
        rows = self._query("SELECT * FROM submissions WHERE uid = ? AND submitted_at >= ? ORDER BY submitted_at, job_id",
                           [int(uid), float(since)])
        return [self._submission(r) for r in rows]

    _SUBMISSION_COLS = frozenset({"job_id", "uid", "user", "submitted_at", "state", "chain_id", "outcome", "done_at",
                                  "token", "verified"})
    _SUBMISSION_JSON = frozenset({"job", "original", "submitted", "decision"})

    def submission_values(self, job_ids: Sequence[str], paths: Sequence[str]) -> dict[str, list[Any]]:
        """Fields of many submissions, aligned with ``job_ids`` (None where absent).

        A path is a column (``chain_id``) or ``json_column.key``
        (``original.time_s``, ``decision.model``); SQLite extracts the JSON,
        so a report reads 100k submissions without decoding each in Python.
        """
        sel: list[str] = []
        params: list[Any] = []
        for p in paths:
            col, _, key = p.partition(".")
            if key and col in self._SUBMISSION_JSON and key.replace("_", "").isalnum():
                sel.append(f"json_extract({_q(col)}, ?)")
                params.append(f"$.{key}")
            elif not key and col in self._SUBMISSION_COLS:
                sel.append(_q(col))
            else:
                raise ValueError(f"unknown submission field {p!r}")
        ids = [str(j) for j in job_ids]
        found: dict[str, tuple[Any, ...]] = {}
        for i in range(0, len(ids), 900):
            chunk = ids[i : i + 900]
            marks = ", ".join("?" for _ in chunk)
            sql = f"SELECT job_id{''.join(', ' + c for c in sel)} FROM submissions WHERE job_id IN ({marks})"
            for row in self._read(sql, [*params, *chunk]):
                found[row[0]] = row[1:]
        missing = (None,) * len(sel)
        rows = [found.get(j, missing) for j in ids]
        return {p: [r[k] for r in rows] for k, p in enumerate(paths)}

    def all_attempts(self) -> list[dict[str, Any]]:
        """Every attempt of every chain, by chain then attempt (reports; the table holds only resubmissions)."""
        rows = self._query("SELECT * FROM attempts ORDER BY chain_id, attempt")
        return [{**r, "limits": _loads(r["limits"])} for r in rows]

    def pending_submissions(self) -> list[dict[str, Any]]:
        """Submissions whose outcome is not yet known, oldest first."""
        rows = self._query("SELECT * FROM submissions WHERE state = 'pending' ORDER BY submitted_at, job_id")
        return [self._submission(r) for r in rows]

    def mark_submission_done(self, job_id: str, outcome: str) -> bool:
        """Close a submission with its outcome; False if the job id is unknown."""
        with self.transaction() as db:
            cur = db.conn.execute(
                "UPDATE submissions SET state = 'done', outcome = ?, done_at = ? WHERE job_id = ?",
                (str(outcome.value if isinstance(outcome, Outcome) else outcome), time.time(), str(job_id)),
            )
            return cur.rowcount > 0

    def user_extensions(self, user: str, last: int = 50) -> tuple[int, int]:
        """(jobs, extended) among ``user``'s last ``last`` verified registrations whose time harp cut.

        A job counts as extended when harpd extended it (or one of its array
        tasks) at least once: the per-user side of the soft-limit budget.
        """
        row = self._read(
            """SELECT count(*), coalesce(sum(ext), 0) FROM (
                 SELECT EXISTS(SELECT 1 FROM limit_changes c WHERE c.kind = 'extend' AND c.step = 'done'
                               AND (c.job_id = s.job_id OR substr(c.job_id, 1, length(s.job_id) + 1) = s.job_id || '_')) AS ext
                 FROM submissions s
                 WHERE s.user = ? AND s.verified = 1
                   AND EXISTS(SELECT 1 FROM json_each(s.decision, '$.changes') ch
                              WHERE json_extract(ch.value, '$.option') = 'time')
                 ORDER BY s.submitted_at DESC LIMIT ?)""",
            (str(user), int(last)),
        ).fetchone()
        return int(row[0]), int(row[1])

    # --------------------------------------------------------------- attempts

    _ATTEMPT_COLS = frozenset({"job_id", "limits", "reason", "step", "outcome"})

    def add_attempt(
        self,
        chain_id: str,
        attempt: int,
        job_id: str | None,
        limits: dict[str, Any],
        reason: str,
        step: str,
    ) -> bool:
        """Insert attempt ``attempt`` of ``chain_id``; False if it already exists.

        The unique (chain_id, attempt) key is what makes a resubmission
        happen exactly once even if two threads or a restart race on it.
        """
        now = time.time()
        with self.transaction() as db:
            cur = db.conn.execute(
                """INSERT INTO attempts (chain_id, attempt, job_id, limits, reason, step, created_at, updated_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(chain_id, attempt) DO NOTHING""",
                (str(chain_id), int(attempt), None if job_id is None else str(job_id), _dumps(limits), reason, step, now, now),
            )
            return cur.rowcount > 0

    def update_attempt(self, chain_id: str, attempt: int, **cols: Any) -> bool:
        """Set columns (job_id, limits, reason, step, outcome) of one attempt; False if absent."""
        bad = set(cols) - self._ATTEMPT_COLS
        if bad:
            raise ValueError(f"unknown attempt column(s): {', '.join(sorted(bad))}")
        if not cols:
            return False
        values = []
        for k, v in cols.items():
            if k == "limits":
                v = _dumps(v)
            elif isinstance(v, Outcome):
                v = v.value
            elif k == "job_id" and v is not None:
                v = str(v)
            values.append(v)
        sets = ", ".join(f"{_q(k)} = ?" for k in cols)
        with self.transaction() as db:
            cur = db.conn.execute(
                f"UPDATE attempts SET {sets}, updated_at = ? WHERE chain_id = ? AND attempt = ?",
                (*values, time.time(), str(chain_id), int(attempt)),
            )
            return cur.rowcount > 0

    def attempts(self, chain_id: str) -> list[dict[str, Any]]:
        rows = self._query("SELECT * FROM attempts WHERE chain_id = ? ORDER BY attempt", [str(chain_id)])
        out = []
        for r in rows:
            r["limits"] = _loads(r["limits"])
            out.append(r)
        return out

    def chain_of(self, job_id: str) -> str | None:
        """The chain (first job id) a job belongs to, from attempts or submissions."""
        row = self._read("SELECT chain_id FROM attempts WHERE job_id = ? LIMIT 1", (str(job_id),)).fetchone()
        if row is not None:
            return row[0]
        row = self._read(
            "SELECT chain_id FROM submissions WHERE job_id = ? AND chain_id IS NOT NULL", (str(job_id),)
        ).fetchone()
        if row is not None:
            return row[0]
        row = self._read("SELECT chain_id FROM attempts WHERE chain_id = ? LIMIT 1", (str(job_id),)).fetchone()
        return None if row is None else row[0]

    # ---------------------------------------------------------- limit changes

    _LIMIT_CHANGE_COLS = frozenset({"new_time_s", "new_mem_mb", "new_cpus", "step", "reason"})

    def add_limit_change(
        self, job_id: str, kind: str, old_time_s: int, new_time_s: int, reason: str, step: str,
        *, old_mem_mb: int | None = None, new_mem_mb: int | None = None,
        old_cpus: int | None = None, new_cpus: int | None = None,
    ) -> bool:
        """Record a decided change of a live job's limit; False if this crossing already has one."""
        now = time.time()
        with self.transaction() as db:
            cur = db.conn.execute(
                """INSERT INTO limit_changes (job_id, kind, old_time_s, new_time_s, old_mem_mb, new_mem_mb,
                                              old_cpus, new_cpus, step, reason, created_at, updated_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(job_id, kind, old_time_s) DO NOTHING""",
                (str(job_id), str(kind), int(old_time_s), int(new_time_s), old_mem_mb, new_mem_mb, old_cpus,
                 new_cpus, step, reason, now, now),
            )
            return cur.rowcount > 0

    def update_limit_change(self, job_id: str, kind: str, old_time_s: int, **cols: Any) -> bool:
        """Set columns (new_time_s, new_mem_mb, step, reason) of one change; False if absent."""
        bad = set(cols) - self._LIMIT_CHANGE_COLS
        if bad:
            raise ValueError(f"unknown limit change column(s): {', '.join(sorted(bad))}")
        if not cols:
            return False
        sets = ", ".join(f"{_q(k)} = ?" for k in cols)
        with self.transaction() as db:
            cur = db.conn.execute(
                f"UPDATE limit_changes SET {sets}, updated_at = ? WHERE job_id = ? AND kind = ? AND old_time_s = ?",
                (*cols.values(), time.time(), str(job_id), str(kind), int(old_time_s)),
            )
            return cur.rowcount > 0

    def limit_changes(self, job_id: str | None = None, *, step: str | None = None) -> list[dict[str, Any]]:
        """Changes of one job (or of all), oldest first; optionally only those at ``step``."""
        sql, params = "SELECT * FROM limit_changes WHERE 1 = 1", []
        if job_id is not None:
            sql += " AND job_id = ?"
            params.append(str(job_id))
        if step is not None:
            sql += " AND step = ?"
            params.append(step)
        return self._query(sql + " ORDER BY created_at, job_id, old_time_s", params)

    # ----------------------------------------------------------------- trials

    def add_trial_report(self, job_id: str, uid: int, study: str, metric: str, value: float,
                         policy: dict[str, Any] | None = None) -> float:
        """Record a running trial's report; its run time counted from the trial's first report, returned.

        ``uid`` is Slurm's owner of the job (the daemon checked it); a policy,
        when given, replaces that owner's policy of the study.
        """
        now = time.time()
        with self.transaction() as db:
            row = db.conn.execute("SELECT MIN(reported_at) FROM trial_reports WHERE job_id = ? AND uid = ?",
                                  (str(job_id), int(uid))).fetchone()
            elapsed = 0.0 if row is None or row[0] is None else max(0.0, now - float(row[0]))
            db.conn.execute(
                """INSERT INTO trial_reports (job_id, uid, study, metric, value, elapsed_s, reported_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?)""",
                (str(job_id), int(uid), str(study), str(metric), float(value), elapsed, now),
            )
            if policy is not None:
                db.conn.execute(
                    """INSERT INTO trial_studies (uid, study, policy, updated_at) VALUES (?, ?, ?, ?)
                       ON CONFLICT(uid, study) DO UPDATE SET policy = excluded.policy,
                       updated_at = excluded.updated_at""",
                    (int(uid), str(study), _dumps(policy), now),
                )
        return elapsed

    def trial_reports(self, since: float | None = None) -> list[dict[str, Any]]:
        """Every trial report (or those since ``since``), oldest first."""
        sql, params = "SELECT * FROM trial_reports", []
        if since is not None:
            sql += " WHERE reported_at >= ?"
            params.append(float(since))
        return self._query(sql + " ORDER BY reported_at, id", params)

    def trial_studies(self) -> list[dict[str, Any]]:
        """Each owner's study policies (policy decoded)."""
        return [{**r, "policy": _loads(r["policy"])} for r in self._query("SELECT * FROM trial_studies")]

    def set_trial_action(self, job_id: str, uid: int, study: str, nice: int | None, stopped: bool,
                         reason: str) -> None:
        """What harpd last did to a trial (shown by ``harp status``)."""
        with self.transaction() as db:
            db.conn.execute(
                """INSERT INTO trial_actions (job_id, uid, study, nice, stopped, reason, at)
                   VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(job_id) DO UPDATE SET uid = excluded.uid,
                   study = excluded.study, nice = excluded.nice, stopped = excluded.stopped,
                   reason = excluded.reason, at = excluded.at""",
                (str(job_id), int(uid), str(study), nice, int(bool(stopped)), reason, time.time()),
            )

    def trial_actions(self) -> dict[str, dict[str, Any]]:
        """job id -> harpd's last action on that trial."""
        return {r["job_id"]: r for r in self._query("SELECT * FROM trial_actions")}

    def trial_status(self, job_id: str) -> dict[str, Any] | None:
        """One trial's study, owner, last report and harpd's last action; None if it never reported nor was acted on."""
        jid = str(job_id)
        last = self._query("SELECT * FROM trial_reports WHERE job_id = ? ORDER BY reported_at DESC, id DESC LIMIT 1",
                           [jid])
        acts = self._query("SELECT * FROM trial_actions WHERE job_id = ?", [jid])
        if not acts and "_" in jid:  # a pending array task is acted on through its array's id
            acts = self._query("SELECT * FROM trial_actions WHERE job_id = ?", [jid.split("_", 1)[0]])
        if not last and not acts:
            return None
        n = self._read("SELECT COUNT(*) FROM trial_reports WHERE job_id = ?", (jid,)).fetchone()[0]
        first = (last or acts)[0]
        return {"study": first["study"], "uid": first["uid"], "reports": int(n),
                "last_report": last[0] if last else None, "action": acts[0] if acts else None}

    def drop_trial_reports(self, before: float) -> int:
        """Forget reports older than ``before`` (epoch seconds); how many went."""
        with self.transaction() as db:
            return db.conn.execute("DELETE FROM trial_reports WHERE reported_at < ?", (float(before),)).rowcount

    # ----------------------------------------------------------------- models

    def save_model(
        self,
        name: str,
        resource: str,
        n_train: int,
        score: dict[str, Any],
        path: str,
        champion: bool,
    ) -> int:
        """Record a trained model; returns its id.

        Saving a champion demotes the previous champion of the same resource
        in the same transaction, so there is never zero or two champions.
        """
        with self.transaction() as db:
            if champion:
                db.conn.execute("UPDATE models SET champion = 0 WHERE resource = ? AND champion = 1", (resource,))
            cur = db.conn.execute(
                "INSERT INTO models (name, resource, trained_at, n_train, score, champion, path) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (name, resource, time.time(), int(n_train), _dumps(score), 1 if champion else 0, str(path)),
            )
            return int(cur.lastrowid)

    @staticmethod
    def _model(row: dict[str, Any]) -> dict[str, Any]:
        row["score"] = _loads(row["score"])
        row["champion"] = bool(row["champion"])
        return row

    def models(self) -> list[dict[str, Any]]:
        """Every model ever saved, oldest first."""
        return [self._model(r) for r in self._query("SELECT * FROM models ORDER BY trained_at, id")]

    def champion(self, resource: str) -> dict[str, Any] | None:
        rows = self._query(
            "SELECT * FROM models WHERE resource = ? AND champion = 1 ORDER BY trained_at DESC, id DESC LIMIT 1",
            [resource],
        )
        return self._model(rows[0]) if rows else None

    # ----------------------------------------------------------------- health

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
