"""``harp import``: a history file into the store, streamed in batches.

A site's years of history can hold millions of jobs, so nothing here holds
more than one batch: the reader yields records, the store writes each batch
in one transaction.  Importing the same file twice changes nothing (the store
upserts by source, job id and attempt), which is also how an interrupted or
failed import is resumed: run it again.

When the file turns out broken part-way (a truncated gzip), every complete
record read before the break is still written (a line cut by the break never
is), then the error is raised saying how many were written and where: nothing
readable is lost, nothing half-read is stored, and importing a complete copy
later updates those records instead of duplicating them.

Progress is the share of the file's bytes read (``TraceText.fraction``),
drawn by ``harpd.progress`` on a terminal only.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from harpd.records import JobRecord
from harpd.traces import TraceFormatError, TraceReader, read_trace

__all__ = ["ImportSummary", "ImportFailed", "import_file", "LEARNT"]

#: the values of a record harp learns from, counted when missing (``ImportSummary.gaps``)
LEARNT: dict[str, str] = {
    "time limit": "req_time_s",
    "run time": "used_time_s",
    "memory request": "req_mem_mb",
    "peak memory": "used_mem_mb",
    "user": "user",
}


class ImportFailed(ValueError):
    """The import stopped; ``summary`` says what was written before it did."""

    def __init__(self, message: str, summary: ImportSummary) -> None:
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
    warnings: list[str] = field(default_factory=list)
    store: str = ""
    lacking: dict[str, int] = field(default_factory=dict)  # what harp learns from -> records without it

    def gaps(self) -> str | None:
        """One line: how many of the imported records lack each value harp learns from; None if none lacks any."""
        parts = [f"{n:,} no {what}" for what, n in self.lacking.items() if n]
        if not parts or not self.records:
            return None
        return f"of {self.records:,} records imported, {', '.join(parts)}: harp learns less from those"

    def line(self) -> str:
        rate = self.records / self.seconds if self.seconds > 0 else 0.0
        into = f" into {self.store}" if self.store else ""
        return (
            f"imported {self.records:,} records from {os.path.basename(self.path)} as source "
            f"{self.source!r} ({self.skipped:,} skipped) in {self.seconds:.1f} s ({rate:,.0f} records/s){into}"
        )


def import_file(
    path: str | os.PathLike[str],
    store: Any,
    source: str | None = None,
    *,
    batch_size: int = 20_000,
    progress: bool | None = None,
    stream: TextIO | None = None,
    start: float | None = None,
    reader: TraceReader | None = None,
) -> ImportSummary:
    """Load a trace (SWF, sacct -P export, sacct --json) into ``store``.

    ``progress``: draw a progress bar on ``stream`` (stderr); default: only
    when it is a terminal.  ``start``: epoch seconds that place an SWF's
    relative times (its ``UnixStartTime`` otherwise).  Raises
    ``TraceFormatError`` for a file that is not a trace at all, ``ImportFailed``
    (with ``.summary``) when reading breaks part-way, after writing every
    complete record read before the break.  ``reader``: the file already
    opened with ``read_trace`` (so that a file refused there never opens a store).
    """
    from harpd.progress import Bar

    out = stream if stream is not None else sys.stderr
    t0 = time.monotonic()
    reader = reader if reader is not None else read_trace(path, source, start)
    summary = ImportSummary(
        path=str(path), source=reader.source, format=reader.format, store=str(getattr(store, "path", "") or "")
    )
    label = f"importing {os.path.basename(str(path))}"
    size = os.path.getsize(path) if reader.fraction() is not None else None
    bar = Bar(label, total=size, stream=out, enabled=progress, unit="B" if size else "records", unit_scale=bool(size))
    count = 0
    failure: list[BaseException] = []
    lacking = dict.fromkeys(LEARNT, 0)

    def show() -> None:
        frac = reader.fraction()
        bar.to(count if size is None or frac is None else frac * size)
        bar.note(f"{count:,} records")

    def records() -> Iterator[JobRecord]:
        nonlocal count
        try:
            for rec in reader:
                count += 1
                if not count & 255:
                    show()
                for what, attr in LEARNT.items():
                    if getattr(rec, attr) is None:
                        lacking[what] += 1
                yield rec
        except TraceFormatError as exc:  # stop cleanly: what was read still gets written
            failure.append(exc)

    try:
        summary.records = store.insert_jobs(records(), batch_size=batch_size)
        show()
    finally:
        bar.close()
        summary.skipped = reader.skipped
        summary.errors = reader.errors
        summary.warnings = reader.warnings
        summary.lacking = lacking
        summary.seconds = time.monotonic() - t0
    if failure:
        where = f" into {summary.store}" if summary.store else ""
        raise ImportFailed(
            f"{failure[0]}; the {summary.records:,} records before it were imported{where} "
            "(importing a complete copy updates them, never duplicates)",
            summary,
        )
    return summary
