"""``sacct --parsable2`` exports (gzip or plain) -> JobRecord.

A site's own accounting history is the best training data harp can get, and
``sacct -P`` is how sites export it.  Rows go through the same parser and the
same classifier as live polling (``harpd.slurm.sacct_text`` and
``harpd.slurm.classify``), so an imported job and a polled job of the same run are
the same record.

Bad rows (wrong field count, a step whose job row is missing) are skipped and
counted, the first few with their line number; a file that is not a sacct
export at all, or a gzip stream cut short, raises ``TraceFormatError`` naming
the file and the line reached.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from harpd.slurm.classify import to_record
from harpd.records import JobRecord
from harpd.slurm.sacct_records import SacctParseError
from harpd.slurm.sacct_text import Parsable2Stats, iter_parsable2
from harpd.traces._open import TraceFormatError, open_binary

__all__ = ["read_sacct_export", "SacctExportReader", "source_name", "open_trace"]

_SUFFIXES = (".gz", ".psv", ".txt", ".csv", ".sacct", ".json", ".swf")


def source_name(path: str | os.PathLike[str]) -> str:
    """``cedar-2021.sacct.psv.gz`` -> ``cedar-2021``: the records' ``source``."""
    name = Path(path).name
    changed = True
    while changed:
        changed = False
        for suf in _SUFFIXES:
            if name.endswith(suf) and len(name) > len(suf):
                name = name[: -len(suf)]
                changed = True
    return name


class _CountingReader(io.RawIOBase):
    """Wraps the raw file so progress can be read as bytes consumed / size."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        self.pos = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray) -> int:  # type: ignore[override]
        n = self.fh.readinto(b)  # type: ignore[attr-defined]
        self.pos += n or 0
        return n

    def close(self) -> None:
        self.fh.close()
        super().close()


def open_trace(path: str | os.PathLike[str]) -> tuple[io.TextIOWrapper, _CountingReader, int]:
    """(text stream, byte counter, file size) for plain or gzip text, told by content."""
    p = Path(path)
    raw = open_binary(p)
    size = os.fstat(raw.fileno()).st_size
    magic = raw.read(2)
    raw.seek(0)
    counter = _CountingReader(raw)
    buffered = io.BufferedReader(counter, buffer_size=1 << 20)
    stream: IO[bytes] = gzip.GzipFile(fileobj=buffered, mode="rb") if magic == b"\x1f\x8b" else buffered
    text = io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline="")
    return text, counter, size


class SacctExportReader:
    """Iterates the JobRecords of one export; ``stats`` counts rows and skips.

    Iterate once.  ``fraction()`` is how much of the file (compressed bytes)
    has been read, for progress bars.
    """

    def __init__(self, path: str | os.PathLike[str], source: str | None = None) -> None:
        self.path = Path(path)
        self.source = source or source_name(path)
        self.stats = Parsable2Stats()
        self._text, self._counter, self._size = open_trace(path)
        self.lines_read = 0
        self._error: TraceFormatError | None = None

    @property
    def skipped(self) -> int:
        return self.stats.skipped

    @property
    def errors(self) -> list[str]:
        return self.stats.first_errors

    def fraction(self) -> float | None:
        if not self._size:
            return None
        return min(1.0, self._counter.pos / self._size)

    def _lines(self) -> Iterator[str]:
        """The file's lines; a read error ends them cleanly and is raised after.

        One line is held back so that when the data breaks off, a last line
        cut in the middle (no newline) is dropped as a bad row instead of
        being read as a job with half its fields.
        """
        prev: str | None = None
        try:
            for line in self._text:
                self.lines_read += 1
                if prev is not None:
                    yield prev
                prev = line
        except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
            what = "gzip data ends or breaks" if not isinstance(exc, OSError) or isinstance(exc, gzip.BadGzipFile) else "read error"
            self._error = TraceFormatError(
                f"{self.path}:{self.lines_read + 1}: {what} here ({exc}); the file is truncated or corrupt, copy it again"
            )
            if prev is not None:
                if prev.endswith("\n"):
                    yield prev
                else:
                    self.stats.skip(f"{self.path}:{self.lines_read}", "line cut short where the data breaks off")
            return
        if prev is not None:
            yield prev

    def __iter__(self) -> Iterator[JobRecord]:
        src = self.source
        try:
            for job in iter_parsable2(self._lines(), where=str(self.path), stats=self.stats):
                yield to_record(job, src)
        except SacctParseError as exc:
            raise TraceFormatError(str(exc)) from None
        finally:
            self._text.close()
        if self._error is not None:
            raise self._error


def read_sacct_export(path: str | os.PathLike[str], source: str | None = None) -> Iterator[JobRecord]:
    """JobRecords of a ``sacct --parsable2`` export; ``source`` defaults to the file stem."""
    return iter(SacctExportReader(path, source))
