"""Which of a sacct export's columns harp learns from: refuse a file with none, name the missing ones.

``sacct -P -o ...`` writes whatever columns it was asked for, and the reader
reads any subset (a missing column is an empty field).  So a file with the
wrong columns would import as records with nothing in them, and an export
without ``Timelimit`` would import without a word, though harp cannot learn
how far under their limits those jobs ran.  This module looks at the header
once, before anything is stored: no column harp learns from is a refusal
naming what to export; a missing useful column is a warning (the importer
adds how many records lack each value, ``harpd.ingest.importer``).
"""

from __future__ import annotations

from pathlib import Path

from harpd.traces.swf import TraceFormatError

__all__ = ["EXPORT", "check_header"]

#: the export command the messages suggest: every column harp reads for learning
EXPORT = (
    "sacct -a -P -S START -E END -o JobID,User,Account,Partition,JobName,Submit,Start,End,Elapsed,"
    "Timelimit,State,ExitCode,ReqMem,ReqCPUS,ReqNodes,ReqTRES,AllocCPUS,AllocTRES,NNodes,MaxRSS,TotalCPU"
)

#: what harp learns, and the columns (any one of them) that carry it
LEARNT_FROM: dict[str, tuple[str, ...]] = {
    "run time": ("Elapsed", "ElapsedRaw", "End"),
    "peak memory": ("MaxRSS",),
    "CPU time": ("TotalCPU",),
    "outcome": ("State",),
}
#: useful beside them: without these harp learns less from each record
USEFUL: dict[str, tuple[str, ...]] = {
    "time limit": ("Timelimit", "TimelimitRaw"),
    "memory request": ("ReqMem", "ReqTRES"),
    "user": ("User",),
    "submit time": ("Submit",),
    "cores": ("AllocCPUS", "ReqCPUS", "NCPUS", "AllocTRES", "ReqTRES"),
}


def check_header(path: Path, header_line: str) -> list[str]:
    """A one-line warning naming the useful columns the header lacks; TraceFormatError if it has none harp uses."""
    cols = {c.strip() for c in header_line.rstrip("\r\n").split("|")}
    have = [what for what, names in LEARNT_FROM.items() if cols & set(names)]
    if not have:
        shown = ", ".join(sorted(c for c in cols if c)[:8]) or "none"
        wanted = ", ".join(" or ".join(names) for names in LEARNT_FROM.values())
        raise TraceFormatError(
            f"{path}:1: none of the columns harp learns from ({wanted}) is in the header (it has {shown}); "
            f"nothing imported; export again with `{EXPORT}`"
        )
    lacking = [
        f"{'/'.join(names)} ({what})" for what, names in {**LEARNT_FROM, **USEFUL}.items() if not cols & set(names)
    ]
    if not lacking:
        return []
    return [
        f"{path}: no {', no '.join(lacking)} column, so no record has those; harp learns less from them; "
        f"export with `{EXPORT}` to give harp all of it"
    ]
