"""Standard Workload Format (Parallel Workloads Archive) → JobRecord.

SWF is how two decades of real cluster logs are published, so harp can be
trained and replayed on them before a site has history of its own.  The
format: ``;`` header lines, then one job a line, 18 whitespace-separated
fields; -1 means unknown.  Conversions (fixed here so nothing else guesses):

* used memory (field 7) and requested memory (field 10) are KB *per
  processor*: harp's per-job MiB is ``KB * procs / 1024``;
* status 1 → COMPLETED, 0 → FAILED, 5 → CANCELLED, anything else UNKNOWN;
* a run time at or past the requested time means the scheduler killed the
  job at its limit: TIMEOUT, and its run time is only a lower bound
  (``censored_time``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from harpd.records import JobRecord, Outcome
from harpd.traces._open import TraceFormatError, TraceText

N_FIELDS = 18
_STATUS = {1: Outcome.COMPLETED, 0: Outcome.FAILED, 5: Outcome.CANCELLED}


def source_name(path: str | os.PathLike[str]) -> str:
    """Trace file stem without .gz/.swf/.psv suffixes: the record's ``source``."""
    name = Path(path).name
    for suf in (".gz", ".swf", ".psv", ".txt", ".csv"):
        if name.endswith(suf):
            name = name[: -len(suf)]
    return name


def _num(tok: str) -> float | None:
    v = float(tok)
    return None if v < 0 else v


class SwfReader:
    """The JobRecords of one SWF file (gzip or plain); iterate once.

    Times become epoch seconds from the header's ``UnixStartTime``, or from
    ``start`` (epoch seconds) when given, which wins over the header.  Without
    either, times count from 1970-01-01 and ``warnings`` says so once, with
    what to do: some archive files (METACENTRUM's) have no such header.
    ``fraction()`` is the share of the file read, for progress bars.
    """

    def __init__(self, path: str | os.PathLike[str], source: str | None = None, start: float | None = None) -> None:
        self.path = path
        self.source = source or source_name(path)
        self.start = start
        self.warnings: list[str] = []
        self._text = TraceText(path)

    def fraction(self) -> float | None:
        return self._text.fraction()

    def __iter__(self) -> Iterator[JobRecord]:
        """Raises TraceFormatError naming the line for a malformed job line (a trace
        that silently loses jobs would bias every figure computed from it), and,
        after the jobs before it, for a file that breaks off (a truncated gzip)."""
        path, src = self.path, self.source
        header: float | None = None
        base: float | None = self.start
        for lineno, line in enumerate(self._text.lines(), 1):
            s = line.strip()
            if not s:
                continue
            if s.startswith(";"):
                key, _, val = s[1:].partition(":")
                if key.strip() == "UnixStartTime":
                    try:
                        header = float(val.split()[0])
                    except (ValueError, IndexError):
                        pass
                continue
            if base is None:
                base = header if header is not None else 0.0
                if header is None:
                    self.warnings.append(
                        f"{path}: no UnixStartTime header, so job times count from 1970-01-01; "
                        "pass --start DATE (the day the trace begins, e.g. --start 2012-01-01) to place them"
                    )
            tok = s.split()
            if len(tok) < N_FIELDS:
                raise TraceFormatError(
                    f"{path}:{lineno}: expected {N_FIELDS} SWF fields, found {len(tok)}; is this an SWF file?"
                )
            try:
                rec = _record(tok, src, base)
            except ValueError:
                raise TraceFormatError(f"{path}:{lineno}: non-numeric SWF field in {s[:60]!r}") from None
            yield rec
        if self._text.error is not None:
            raise self._text.error


def read_swf(path: str | os.PathLike[str], source: str | None = None) -> Iterator[JobRecord]:
    """Yield one JobRecord per job line of an SWF file (see ``SwfReader``)."""
    return iter(SwfReader(path, source))


def _record(tok: list[str], src: str, base: float) -> JobRecord:
    job = tok[0]
    submit, wait, run = _num(tok[1]), _num(tok[2]), _num(tok[3])
    alloc = _num(tok[4])
    cpu_avg = _num(tok[5])
    used_kb = _num(tok[6])
    req_procs = _num(tok[7])
    req_time = _num(tok[8])
    req_kb = _num(tok[9])
    status = int(float(tok[10]))
    user, group, exe, queue, part = (int(float(t)) for t in tok[11:16])

    procs = req_procs or alloc
    mem_procs = alloc or req_procs
    if req_time == 0:
        req_time = None
    outcome = _STATUS.get(status, Outcome.UNKNOWN)
    censored = False
    if run is not None and req_time is not None and run >= req_time:
        outcome, censored = Outcome.TIMEOUT, True
    sub = None if submit is None else submit + base
    start = None if sub is None or wait is None else sub + wait
    end = None if start is None or run is None else start + run
    if part >= 0:
        partition = str(part)
    elif queue >= 0:
        partition = f"q{queue}"
    else:
        partition = None
    return JobRecord(
        job_id=job,
        source=src,
        user=str(user) if user >= 0 else None,
        group=str(group) if group >= 0 else None,
        partition=partition,
        signature=f"exe{exe}" if exe >= 0 else None,
        submit_time=sub,
        start_time=start,
        end_time=end,
        outcome=outcome,
        state=f"swf:{status}",
        req_time_s=req_time,
        req_mem_mb=(req_kb * mem_procs / 1024.0) if req_kb and mem_procs else None,
        req_cpus=int(procs) if procs else None,
        alloc_cpus=int(alloc) if alloc else None,
        used_time_s=run,
        used_mem_mb=(used_kb * mem_procs / 1024.0) if used_kb is not None and mem_procs else None,
        used_cpu_s=(cpu_avg * alloc) if cpu_avg is not None and alloc else None,
        censored_time=censored,
    )


def machine_size(path: str | os.PathLike[str]) -> int | None:
    """The machine's processors from the SWF header (``MaxProcs``, else ``MaxNodes``); None if absent.

    The queue simulation (``harp replay --schedule``) needs the machine the
    trace ran on; only the header says it.  Reads the header lines only.
    """
    found: dict[str, int] = {}
    with TraceText(path) as fh:
        for line in fh.text:
            s = line.strip()
            if not s:
                continue
            if not s.startswith(";"):
                break
            key, _, val = s[1:].partition(":")
            key = key.strip()
            if key in ("MaxProcs", "MaxNodes") and key not in found:
                try:
                    v = int(float(val.split()[0]))
                except (ValueError, IndexError):
                    continue
                if v > 0:
                    found[key] = v
    return found.get("MaxProcs") or found.get("MaxNodes")
