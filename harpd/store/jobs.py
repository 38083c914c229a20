"""The ``jobs`` table: each job run's ``JobRecord``, written in batches, read as records or as columns."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from operator import attrgetter
from typing import Any

import numpy as np

from harpd.records import JobRecord, Outcome
from harpd.store.base import StoreBase, StoreError, _explain, _is_translatable
from harpd.store.columns import (
    _BOOL_FIELDS,
    _JOB_TYPES,
    _ORDERABLE,
    _OUTCOMES,
    _PK,
    _UNFINISHED,
    JOB_COLUMNS,
    _q,
)

_COLUMN_SLICE = 20_000  # rows job_columns converts at a time


class JobsTable(StoreBase):
    """Job records: upserts, streams, counts and whole columns."""

    @functools.cached_property
    def _insert_sql(self) -> str:
        """The upsert of one job row (its columns fixed at import)."""
        return self._make_insert_sql()

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
                rec = JobRecord.from_dict(rec)
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
        rec.outcome = _OUTCOMES.get(rec.outcome, Outcome.UNKNOWN)
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

    def runs_of_signature(self, signature: str, since: float, limit: int = 500) -> list[JobRecord]:
        """The finished runs of one signature that ended since ``since``, oldest first (the newest ``limit``).

        What the limits ledger reads for a task's siblings' failures and completions.
        """
        cols = ", ".join(_q(c) for c in JOB_COLUMNS)
        sql = (
            f"SELECT {cols} FROM jobs WHERE signature = ? AND end_time >= ? AND outcome NOT IN (?, ?) "
            "ORDER BY end_time DESC, job_id, attempt LIMIT ?"
        )
        rows = self._read(sql, [str(signature), float(since), *_UNFINISHED, int(limit)]).fetchall()
        return [self._row_to_record(r) for r in reversed(rows)]

    def runs_of_job(self, job_id: str) -> list[JobRecord]:
        """Every stored run (attempt) of one job id, by attempt: what each really ran with, from sacct."""
        cols = ", ".join(_q(c) for c in JOB_COLUMNS)
        rows = self._read(f"SELECT {cols} FROM jobs WHERE job_id = ? ORDER BY attempt", [str(job_id)]).fetchall()
        return [self._row_to_record(r) for r in rows]

    def requeued_runs(self, job_id: str, before_attempt: int, source: str | None = None) -> int:
        """How many runs of ``job_id`` numbered below ``before_attempt`` a requeue ended that was not harp's
        recovery (state REQUEUED, outcome preempted: neither out of time nor memory), so recovery can tell
        a job's own requeues from its attempts (#51)."""
        sql = "SELECT count(*) FROM jobs WHERE job_id = ? AND attempt < ? AND state = 'REQUEUED' AND outcome = ?"
        params: list[Any] = [str(job_id), int(before_attempt), Outcome.PREEMPTED.value]
        if source is not None:
            sql += " AND source = ?"
            params.append(source)
        return int(self._read(sql, params).fetchone()[0])

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
        return {c: np.concatenate(parts[c]) if parts[c] else np.empty(0, dtype=self._dtype(c)) for c in cols}

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
