"""The ``jobs`` table's columns, derived from ``JobRecord``: a field added there becomes a column.

Shared by the migrations (which create the table) and the job queries.
"""

from __future__ import annotations

import typing
from dataclasses import fields
from typing import Any

from harpd.records import JobRecord, Outcome

# (source, job_id, attempt) identifies a run; job_id leads the key's index so
# get_job(job_id) needs no second index (one index less to update per insert)
_PK = ("job_id", "source", "attempt")
# meta key: the sources harpd's sacct poller wrote, i.e. the cluster's own jobs;
# every other source came from `harp import` (a trace whose job ids may collide)
LIVE_SOURCES_KEY = "ingest.live_sources"
_BOOL_FIELDS = frozenset(f.name for f in fields(JobRecord) if typing.get_type_hints(JobRecord)[f.name] is bool)


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


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
