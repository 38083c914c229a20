"""Nextflow trace files (``nextflow run -with-trace``) -> JobRecord.

Workflow tasks are a large share of what reaches Slurm, and a Nextflow
trace is the history a workflow user already has: one row per task attempt
with its request (``memory``, ``time``, ``cpus``) and what it used
(``peak_rss``, ``realtime``, ``%cpu``, ``rchar``).  The process name is the
task's signature (every sample run by ``NFCORE_RNASEQ:...:STAR_ALIGN`` is
the same program), and ``rchar`` (bytes the task read) is its input size.

The file is tab-separated (Nextflow's default) or comma-separated (how
published traces are often shared), with a header line.  Values come in
Nextflow's human units (``1.5 GB``, ``2h 3m 4s``, ``95.3%``) or raw (bytes,
milliseconds, epoch milliseconds: ``trace.raw = true``); ``-`` is unknown.
A missing required column or an unreadable size/duration is one line naming
the file, the line and what to do; a gzip cut short is reported after the
rows before it (``TraceText``).
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from harpd.records import JobRecord, Outcome
from harpd.traces._open import TraceFormatError, TraceText

__all__ = ["NextflowReader", "REQUIRED", "is_nextflow_header", "parse_size", "parse_duration"]

#: columns without which a row says nothing harp can learn from
REQUIRED = ("process", "status", "memory", "realtime", "peak_rss")
MIB = 1024.0 * 1024.0
_UNITS = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4, "PB": 1024**5}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([KMGTP]?B)?\s*$", re.IGNORECASE)
_DUR_PART = re.compile(r"([0-9]*\.?[0-9]+)\s*(ms|d|h|m|s)", re.IGNORECASE)
_DUR_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
#: Nextflow task status -> harp outcome (CACHED: a result reused from an earlier run, its usage as then)
_STATUS = {
    "COMPLETED": Outcome.COMPLETED,
    "CACHED": Outcome.COMPLETED,
    "FAILED": Outcome.FAILED,
    "ABORTED": Outcome.CANCELLED,
}
#: exit codes of a task killed for memory (SIGKILL from the OOM killer or cgroup; Slurm's OOM)
_OOM_EXIT = {137}


class _Bad(ValueError):
    """One field that cannot be read; the reader adds file and line."""


def _missing(v: str) -> bool:
    return v is None or v.strip() in ("", "-", "null", "NA")


def parse_size(v: str) -> float | None:
    """Bytes from ``1.5 GB``/``512 MB``/``1024`` (raw bytes); None for ``-``."""
    if _missing(v):
        return None
    m = _SIZE.match(v)
    if not m:
        raise _Bad(f"size {v.strip()!r} is not a number of bytes nor like '1.5 GB'")
    return float(m.group(1)) * _UNITS[(m.group(2) or "B").upper()]


def _ms_or(v: str, other: Callable[[str], float]) -> float | None:
    """Seconds from a raw millisecond count (``trace.raw``), else ``other(text)``; None for ``-``."""
    if _missing(v):
        return None
    s = v.strip()
    try:
        return float(s) / 1000.0
    except ValueError:
        return other(s)


def _human_duration(s: str) -> float:
    parts = _DUR_PART.findall(s)
    if not parts or _DUR_PART.sub("", s).strip():
        raise _Bad(f"duration {s!r} is not milliseconds nor like '1h 2m 3s'")
    return sum(float(n) * _DUR_S[u.lower()] for n, u in parts)


def parse_duration(v: str) -> float | None:
    """Seconds from ``1h 2m 3s``/``45.2s``/``300ms``/``12345`` (raw milliseconds); None for ``-``."""
    return _ms_or(v, _human_duration)


def _percent(v: str) -> float | None:
    if _missing(v):
        return None
    try:
        return float(v.strip().rstrip("%"))
    except ValueError:
        raise _Bad(f"percentage {v.strip()!r} is not a number like '95.3%'") from None


def _iso_date(s: str) -> float:
    try:
        return datetime.fromisoformat(s).replace(tzinfo=UTC).timestamp()
    except ValueError:
        raise _Bad(f"date {s!r} is neither epoch milliseconds nor like '2023-01-23 16:48:23.249'") from None


def _instant(v: str) -> float | None:
    """Epoch seconds from raw epoch milliseconds or ``2023-01-23 16:48:23.249`` (read as UTC)."""
    return _ms_or(v, _iso_date)


def _split(line: str, sep: str) -> list[str]:
    return next(csv.reader([line], delimiter=sep))


def header_columns(line: str) -> tuple[str, list[str]] | None:
    """(separator, column names) when ``line`` is a Nextflow trace header, else None."""
    for sep in ("\t", ","):
        if sep in line:
            cols = [c.strip() for c in _split(line.rstrip("\r\n"), sep)]
            if "process" in cols and ("peak_rss" in cols or "rchar" in cols or "realtime" in cols):
                return sep, cols
    return None


def is_nextflow_header(line: str) -> bool:
    """Whether the first line of a file is a Nextflow trace header (for ``detect_format``)."""
    return header_columns(line) is not None


class NextflowReader:
    """The JobRecords of one Nextflow trace; iterate once.

    Rows whose status is not a finished one (``SUBMITTED``, ``RUNNING``) are
    skipped and counted.  ``fraction()`` is the share of the file read.
    """

    def __init__(self, path: str | os.PathLike[str], source: str | None = None) -> None:
        from harpd.traces.sacct_export import source_name

        self.path = Path(path)
        self.source = source or source_name(path).removesuffix(".trace")
        self.skipped = 0
        self.errors: list[str] = []
        self._text = TraceText(path)

    def fraction(self) -> float | None:
        return self._text.fraction()

    def _skip(self, where: str, why: str) -> None:
        self.skipped += 1
        if len(self.errors) < 5:
            self.errors.append(f"{where}: {why}")

    def __iter__(self) -> Iterator[JobRecord]:
        return (rec for _, rec in self.rows())

    def rows(self) -> Iterator[tuple[dict[str, str], JobRecord]]:
        """Each finished task's raw row (column -> text) with its record, for callers that need
        columns a JobRecord does not carry (the Sizey protocol's ``rss``)."""
        sep: str | None = None
        cols: list[str] = []
        try:
            for lineno, line in enumerate(self._text.lines(), 1):
                if not line.strip():
                    continue
                where = f"{self.path}:{lineno}"
                if sep is None:
                    found = header_columns(line)
                    if found is None:
                        raise TraceFormatError(f"{where}: not a Nextflow trace header (no 'process' column)")
                    sep, cols = found
                    lack = [c for c in REQUIRED if c not in cols]
                    if lack:
                        raise TraceFormatError(
                            f"{where}: Nextflow trace without the column(s) {', '.join(lack)}; run with "
                            f"`-with-trace` and trace.fields including {','.join(REQUIRED)}"
                        )
                    continue
                vals = _split(line.rstrip("\r\n"), sep)
                if len(vals) != len(cols):
                    raise TraceFormatError(
                        f"{where}: {len(vals)} fields where the header has {len(cols)}; "
                        "is the file cut or were two traces joined?"
                    )
                row = dict(zip(cols, vals))
                try:
                    rec = self._record(row, lineno)
                except _Bad as exc:
                    raise TraceFormatError(f"{where}: {exc}; fix or drop this row") from None
                if rec is None:
                    self._skip(where, f"status {row.get('status', '').strip()!r} is not a finished task")
                    continue
                yield row, rec
        finally:
            self._text.close()
        if sep is None and self._text.error is None:
            raise TraceFormatError(f"{self.path}: empty file, nothing to import")
        if self._text.error is not None:
            raise self._text.error

    def _record(self, row: dict[str, str], lineno: int) -> JobRecord | None:
        status = row["status"].strip().upper()
        outcome = _STATUS.get(status)
        if outcome is None:
            return None
        g = row.get
        exit_code = None if _missing(g("exit", "-")) else int(float(g("exit", "0")))
        censored = False
        if outcome is Outcome.FAILED and exit_code in _OOM_EXIT:
            outcome, censored = Outcome.OOM, True
        peak = parse_size(row["peak_rss"])
        req_mem = parse_size(row["memory"])
        realtime = parse_duration(row["realtime"])
        cpu_pct = _percent(g("%cpu", "-"))
        cpus = None if _missing(g("cpus", "-")) else int(float(g("cpus", "1")))
        submit = _instant(g("submit", "-"))
        start = _instant(g("start", "-"))
        end = _instant(g("complete", "-"))
        if start is None and end is not None and realtime is not None:
            start = end - realtime
        attempt = None if _missing(g("attempt", "-")) else int(float(g("attempt", "1")))
        task = g("task_id") or g("hash") or g("native_id") or str(lineno)
        return JobRecord(
            job_id=f"{task.strip()}" + (f".{attempt}" if attempt and attempt > 1 and not g("task_id") else ""),
            source=self.source,
            signature=row["process"].strip(),
            job_name=(g("name") or row["process"]).strip(),
            submit_time=submit if submit is not None else start,
            start_time=start,
            end_time=end,
            outcome=outcome,
            state=f"nextflow:{status}",
            exit_code=exit_code,
            req_time_s=parse_duration(g("time", "-")),
            req_mem_mb=None if req_mem is None else req_mem / MIB,
            req_cpus=cpus,
            alloc_cpus=cpus,
            used_time_s=realtime,
            used_mem_mb=None if peak is None else peak / MIB,
            used_cpu_s=(cpu_pct / 100.0 * realtime) if cpu_pct is not None and realtime is not None else None,
            input_bytes=parse_size(g("rchar", "-")),
            censored_mem=censored,
            attempt=attempt or 1,
        )
