"""History readers: each turns one trace format into an iterator of JobRecord.

``read_trace(path)`` picks the reader by the file's content, not its name
(gzip is recognised by its magic bytes): SWF (``;`` header lines or 18
numeric fields), a ``sacct --parsable2`` export (a ``|`` header with JobID),
a saved ``sacct --json`` document or a Nextflow trace (a tab- or
comma-separated header with a ``process`` column).  Anything else is refused with one
line naming the file and what its first line looks like.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harpd.records import JobRecord
from harpd.traces.swf import TraceFormatError

__all__ = ["read_trace", "TraceReader", "TraceFormatError", "detect_format"]


def _first_line(path: Path) -> str:
    from harpd.traces._open import TraceText

    text = TraceText(path).text
    try:
        for _ in range(1000):
            line = text.readline(65536)
            if not line:
                return ""
            if line.strip():
                return line
        return ""
    except (EOFError, OSError, ValueError) as exc:
        raise TraceFormatError(
            f"{path}:1: cannot read the start of the file ({exc}); is it a complete trace?"
        ) from None
    finally:
        text.close()


def detect_format(path: str | os.PathLike[str]) -> str:
    """``"swf"``, ``"sacct"`` (parsable2), ``"sacct-json"`` or ``"nextflow"``; TraceFormatError otherwise."""
    from harpd.traces.nextflow import is_nextflow_header

    p = Path(path)
    head = _first_line(p)
    if not head:
        raise TraceFormatError(f"{p}: empty file, nothing to import")
    s = head.strip()
    if s.startswith("{"):
        return "sacct-json"
    if "|" in s:
        cols = s.split("|")
        if "JobID" in cols or "JobIDRaw" in cols:
            return "sacct"
        raise TraceFormatError(
            f"{p}:1: '|'-separated but no JobID column in the first line; "
            "export with `sacct -P -o JobID,...` (header line included)"
        )
    if s.startswith(";"):
        return "swf"
    if is_nextflow_header(head):
        return "nextflow"
    if any(name in s for name in ("JobID", "JobIDRaw")):
        sep = next(
            (f"{name}-separated" for ch, name in (("\t", "tab"), (",", "comma"), (";", "semicolon")) if ch in s),
            "not '|'-separated",
        )
        raise TraceFormatError(
            f"{p}:1: a sacct export, but {sep}; harp reads sacct's own "
            "--parsable2 format: export again with `sacct -P -o JobID,...`"
        )
    tok = s.split()
    if len(tok) >= 18 and all(t.lstrip("-").replace(".", "", 1).isdigit() for t in tok[:18]):
        return "swf"
    raise TraceFormatError(
        f"{p}:1: unknown trace format (first line {s[:40]!r}); "
        "expected SWF, a sacct --parsable2 export or a Nextflow trace"
    )


class TraceReader:
    """An iterator of JobRecords that also reports skipped rows and progress.

    ``skipped`` and ``errors`` (the first few reasons, with file:line) are
    filled while iterating; ``fraction()`` is the share of the file read, or
    None when the format's reader cannot tell.
    """

    def __init__(self, path: str | os.PathLike[str], source: str | None = None, start: float | None = None) -> None:
        self.path = Path(path)
        self.format = detect_format(self.path)
        self._inner: Any = None
        if start is not None and self.format != "swf":
            raise TraceFormatError(
                f"{self.path}: a start date places SWF jobs; this {self.format} file "
                "carries its own dates, drop --start"
            )
        self._header_warnings: list[str] = []
        if self.format == "sacct":
            from harpd.traces.sacct_columns import check_header
            from harpd.traces.sacct_export import SacctExportReader

            self._header_warnings = check_header(self.path, _first_line(self.path))
            self._inner = SacctExportReader(self.path, source)
            self.source = self._inner.source
            self._it: Iterator[JobRecord] = iter(self._inner)
        elif self.format == "nextflow":
            from harpd.traces.nextflow import NextflowReader

            self._inner = NextflowReader(self.path, source)
            self.source = self._inner.source
            self._it = iter(self._inner)
        elif self.format == "sacct-json":
            self.source, self._it = self._json(source)
        else:
            from harpd.traces.swf import SwfReader

            self._inner = SwfReader(self.path, source, start)
            self.source = self._inner.source
            self._it = iter(self._inner)

    def _json(self, source: str | None) -> tuple[str, Iterator[JobRecord]]:
        from harpd.slurm.classify import to_records
        from harpd.slurm.sacct_json import parse_json
        from harpd.slurm.sacct_records import SacctParseError
        from harpd.traces._open import TraceText
        from harpd.traces.sacct_export import source_name

        text = TraceText(self.path).text
        try:
            data = text.read()
        except (EOFError, OSError) as exc:
            raise TraceFormatError(f"{self.path}: cannot read ({exc}); the file is truncated or corrupt") from None
        finally:
            text.close()
        try:
            jobs = parse_json(data, where=str(self.path))
        except SacctParseError as exc:
            raise TraceFormatError(str(exc)) from None
        src = source or source_name(self.path)
        return src, to_records(jobs, src)

    @property
    def skipped(self) -> int:
        return getattr(self._inner, "skipped", 0)

    @property
    def errors(self) -> list[str]:
        return list(getattr(self._inner, "errors", []))

    @property
    def warnings(self) -> list[str]:
        """Things the reader had to assume (an SWF without UnixStartTime), one line each."""
        return self._header_warnings + list(getattr(self._inner, "warnings", []))

    def fraction(self) -> float | None:
        return self._inner.fraction() if self._inner is not None else None

    def __iter__(self) -> TraceReader:
        return self

    def __next__(self) -> JobRecord:
        return next(self._it)


def read_trace(path: str | os.PathLike[str], source: str | None = None, start: float | None = None) -> TraceReader:
    """The records of a history file, reader chosen by content (see ``TraceReader``).

    ``start`` (epoch seconds) places an SWF's relative times; refused for other formats.
    """
    return TraceReader(path, source, start)
