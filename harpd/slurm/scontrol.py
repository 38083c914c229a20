"""scontrol's text, both ways: ``show -o`` lines to typed records, typed changes to ``update`` arguments.

Pure functions, apart from the backend that runs scontrol, so the spelling
of scontrol's keys and values lives in this one module and is tested without
a cluster.  Times and sizes are read with harp_submit's ``units`` in the
forms Slurm prints them (``parse_duration_s``, ``parse_size_mb``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping

from harp_submit.units import parse_duration_s, parse_size_mb
from harpd.slurm.base import JobChanges, JobInfo, QueuedJob, SlurmError, whole_minutes

__all__ = ["parse_kv_line", "job_info", "queued_job", "update_fields"]

# a key of `scontrol show -o` output: a word right after a space, up to '='
_KV_KEY_RE = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_/:.\-]*)=")
# what scontrol prints for a field it has no value for
_UNSET = frozenset({"", "(null)", "N/A", "None"})


def parse_kv_line(line: str) -> dict[str, str]:
    """``Key=Value Key2=a=b,c=d`` (one ``scontrol show -o`` line) -> dict.

    Values may contain ``=`` and ``,`` (TRES=cpu=1,mem=100M); a value runs up
    to the next `` Key=``, so values with spaces (Reason, Command) survive.
    """
    out: dict[str, str] = {}
    matches = list(_KV_KEY_RE.finditer(line))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out[m.group(1)] = line[m.end() : end].strip()
    return out


def _value(kv: Mapping[str, str], key: str) -> str | None:
    v = (kv.get(key) or "").strip()
    return None if v in _UNSET else v


def _whole(value: float | None) -> int | None:
    return None if value is None else int(round(value))


def _owner(text: str | None) -> tuple[str | None, int | None]:
    """``alice(1000)`` -> ("alice", 1000); a part Slurm has not filled in is None."""
    raw = text or ""
    name = raw
    if "(" in raw and raw.endswith(")"):
        name, raw = raw[: raw.rindex("(")], raw[raw.rindex("(") + 1 : -1]
    elif raw.isdigit():
        name = ""
    uid = int(raw) if raw.isdigit() else None
    return (None if name in _UNSET else name), uid


def job_info(kv: Mapping[str, str]) -> JobInfo:
    """A parsed ``scontrol show job -o`` line as a ``JobInfo``."""
    user, uid = _owner(_value(kv, "UserId"))
    state = _value(kv, "JobState")
    restarts = _value(kv, "Restarts") or "0"
    return JobInfo(
        job_id=_value(kv, "JobId") or "",
        name=_value(kv, "JobName"),
        user=user,
        uid=uid,
        state=state.split()[0] if state else None,
        reason=_value(kv, "Reason"),
        restarts=int(restarts) if restarts.isdigit() else 0,
        time_limit_s=_whole(parse_duration_s(_value(kv, "TimeLimit"))),  # UNLIMITED: None
        mem_mb=_whole(parse_size_mb(_value(kv, "MinMemoryNode"))),
        mem_per_cpu_mb=_whole(parse_size_mb(_value(kv, "MinMemoryCPU"))),
        comment=_value(kv, "Comment"),
        workdir=_value(kv, "WorkDir"),
        account=_value(kv, "Account"),
        end_time=_epoch(_value(kv, "EndTime")),
        std_out=_value(kv, "StdOut"),
        std_err=_value(kv, "StdErr"),
        submit_time=_epoch(_value(kv, "SubmitTime")),
        cpus_per_task=_count(_value(kv, "CPUs/Task")),
    )


def _count(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def _epoch(text: str | None) -> float | None:
    """scontrol's ``2026-11-23T21:40:01`` (local time) -> epoch seconds; None for Unknown."""
    if not text or not text[:1].isdigit():
        return None
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def queued_job(kv: Mapping[str, str]) -> QueuedJob:
    """A parsed ``scontrol show job -o`` line as a ``QueuedJob`` (the watcher's view)."""
    user, uid = _owner(_value(kv, "UserId"))
    state = (_value(kv, "JobState") or "").split()
    array_id = _value(kv, "ArrayJobId")
    task = _value(kv, "ArrayTaskId")
    job_id = _value(kv, "JobId") or ""
    if array_id is not None:
        # an array's pending tasks come as one record (ArrayTaskId=3-9): act on the array's id
        job_id = f"{array_id}_{task}" if task and task.isdigit() else array_id
    return QueuedJob(
        job_id=job_id,
        state=state[0] if state else "",
        user=user,
        uid=uid,
        array_job_id=array_id,
        array_task=task if task and task.isdigit() else None,
        time_limit_s=_whole(parse_duration_s(_value(kv, "TimeLimit"))),
        time_used_s=_whole(parse_duration_s(_value(kv, "RunTime"))),
        start_time=_epoch(_value(kv, "StartTime")),
        partition=_value(kv, "Partition"),
        comment=_value(kv, "Comment"),
        mem_mb=_whole(parse_size_mb(_value(kv, "MinMemoryNode"))),
        mem_per_cpu_mb=_whole(parse_size_mb(_value(kv, "MinMemoryCPU"))),
    )


def update_fields(changes: JobChanges) -> dict[str, str]:
    """``scontrol update`` keys and values for ``changes``, in the order scontrol gets them.

    ``TimeLimit`` in whole minutes and memory as a plain number of MB
    (scontrol refuses ``600M`` there).  SlurmError for no change at all or a
    value that cannot go on scontrol's command line.
    """
    unknown = sorted(set(changes) - set(JobChanges.__annotations__))
    if unknown:
        raise SlurmError(f"update_job cannot change {', '.join(map(repr, unknown))}")
    fields: dict[str, str] = {}
    if changes.get("time_limit_s") is not None:
        fields["TimeLimit"] = str(whole_minutes(changes["time_limit_s"]))
    if changes.get("mem_per_cpu_mb") is not None:
        fields["MinMemoryCPU"] = str(int(changes["mem_per_cpu_mb"]))
    if changes.get("mem_mb") is not None:
        fields["MinMemoryNode"] = str(int(changes["mem_mb"]))
    if changes.get("comment") is not None:
        fields["Comment"] = str(changes["comment"])
    if changes.get("start_now"):
        fields["StartTime"] = "now"
    if not fields:
        raise SlurmError("update_job needs at least one field")
    for k, v in fields.items():
        if not v or any(c in v for c in "\n\r\x00"):
            raise SlurmError(f"invalid value for {k}: {v!r}")
    return fields
