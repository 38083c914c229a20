"""``harp import``: a history file into the store, streamed in batches.

A site's years of history can hold millions of jobs, so nothing here holds
more than one batch: the reader yields records, the store writes each batch
in one transaction.  Importing the same file twice changes nothing (the store
upserts by source, job id and attempt), which is also how an interrupted or
failed import is resumed: run it again.

When the file turns out broken part-way (a truncated gzip), every record read
before the break is still written, then the error is raised: nothing readable
is lost and the message names the line to look at.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from harpd.records import JobRecord
from harpd.traces import TraceFormatError, TraceReader, read_trace

__all__ = ["ImportSummary", "ImportFailed", "import_file"]


class ImportFailed(ValueError):
    """The import stopped; ``summary`` says what was written before it did."""

    def __init__(self, message: str, summary: "ImportSummary") -> None:
        super().__init__(message)
        self.summary = summary


@dataclass
class ImportSummary:
    path: str
    source: str
    format: str
    records: int = 0
    skipped: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    def line(self) -> str:
        rate = self.records / self.seconds if self.seconds > 0 else 0.0
        return (
            f"imported {self.records:,} records from {os.path.basename(self.path)} as source "
            f"{self.source!r} ({self.skipped:,} skipped) in {self.seconds:.1f} s ({rate:,.0f} records/s)"
        )


class _Progress:
    """One self-overwriting stderr line, at most five updates a second."""

    def __init__(self, stream: IO[str], reader: TraceReader, label: str) -> None:
        self.stream = stream
        self.reader = reader
        self.label = label
        self.t0 = time.monotonic()
        self.last = 0.0

    def update(self, n: int, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < 0.2:
            return
        self.last = now
        el = max(now - self.t0, 1e-9)
        frac = self.reader.fraction()
        if frac is not None:
            width = 24
            done = int(frac * width)
            bar = f"[{'#' * done}{'.' * (width - done)}] {frac * 100:5.1f}% "
        else:
            bar = ""
        self.stream.write(f"\r{self.label}: {bar}{n:,} records, {n / el:,.0f}/s ")
        self.stream.flush()

    def close(self, n: int) -> None:
        self.update(n, force=True)
        self.stream.write("\n")
        self.stream.flush()


def import_file(
    path: str | os.PathLike[str],
    store: Any,
    source: str | None = None,
    *,
    batch_size: int = 20_000,
    progress: bool | None = None,
    stream: IO[str] | None = None,
) -> ImportSummary:
    """Load a trace (SWF, sacct -P export, sacct --json) into ``store``.

    ``progress``: draw a progress line on ``stream`` (stderr); default: only
    when it is a terminal.  Raises ``TraceFormatError`` for a file that is
    not a trace at all, ``ImportFailed`` (with ``.summary``) when reading
    breaks part-way, after writing every record read before the break.
    """
    out = stream if stream is not None else sys.stderr
    if progress is None:
        progress = bool(getattr(out, "isatty", lambda: False)())
    t0 = time.monotonic()
    reader = read_trace(path, source)
    summary = ImportSummary(path=str(path), source=reader.source, format=reader.format)
    bar = _Progress(out, reader, f"importing {os.path.basename(str(path))}") if progress else None
    count = 0
    failure: list[BaseException] = []

    def records() -> Iterator[JobRecord]:
        nonlocal count
        try:
            for rec in reader:
                count += 1
                if bar is not None and not count & 1023:
                    bar.update(count)
                yield rec
        except TraceFormatError as exc:  # stop cleanly: what was read still gets written
            failure.append(exc)

    try:
        summary.records = store.insert_jobs(records(), batch_size=batch_size)
    finally:
        if bar is not None:
            bar.close(count)
        summary.skipped = reader.skipped
        summary.errors = reader.errors
        summary.seconds = time.monotonic() - t0
    if failure:
        raise ImportFailed(f"{failure[0]} ({summary.records:,} records before it were imported)", summary)
    return summary
