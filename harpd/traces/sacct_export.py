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

import os
from collections.abc import Iterator
from pathlib import Path

from harpd.records import JobRecord
from harpd.slurm.classify import to_record
from harpd.slurm.sacct_records import SacctParseError
from harpd.slurm.sacct_text import Parsable2Stats, iter_parsable2
from harpd.traces._open import TraceFormatError, TraceText

__all__ = ["read_sacct_export", "SacctExportReader", "source_name"]

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


class SacctExportReader:
    """Iterates the JobRecords of one export; ``stats`` counts rows and skips.

    Iterate once.  ``fraction()`` is how much of the file (compressed bytes)
    has been read, for progress bars.
    """

    def __init__(self, path: str | os.PathLike[str], source: str | None = None) -> None:
        self.path = Path(path)
        self.source = source or source_name(path)
        self.stats = Parsable2Stats()
        self._text = TraceText(path)

    @property
    def lines_read(self) -> int:
        return self._text.lines_read

    @property
    def skipped(self) -> int:
        return self.stats.skipped

    @property
    def errors(self) -> list[str]:
        return self.stats.first_errors

    def fraction(self) -> float | None:
        return self._text.fraction()

    def _lines(self) -> Iterator[str]:
        """The file's lines; a last line cut where the data breaks off is a skipped row."""
        return self._text.lines(
            on_cut=lambda n: self.stats.skip(f"{self.path}:{n}", "line cut short where the data breaks off")
        )

    def __iter__(self) -> Iterator[JobRecord]:
        src = self.source
        try:
            for job in iter_parsable2(self._lines(), where=str(self.path), stats=self.stats):
                yield to_record(job, src)
        except SacctParseError as exc:
            raise TraceFormatError(str(exc)) from None
        finally:
            self._text.close()
        if self._text.error is not None:
            raise self._text.error


def read_sacct_export(path: str | os.PathLike[str], source: str | None = None) -> Iterator[JobRecord]:
    """JobRecords of a ``sacct --parsable2`` export; ``source`` defaults to the file stem."""
    return iter(SacctExportReader(path, source))
