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

from harp_submit.request import array_size
from harp_submit.units import parse_duration_s, parse_size_mb
from harpd.slurm.base import FINISHED_STATES, JobChanges, JobInfo, QueuedJob, SlurmError, whole_minutes

__all__ = ["AmbiguousRecord", "job_record", "parse_kv_line", "job_info", "queued_job", "update_fields"]

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


#: keys without which harp cannot tell whose job this is, what it is doing and its limit
_ONCE = ("JobId", "UserId", "JobState", "TimeLimit")
#: every other key harp reads: slurmctld prints each at most once (the memory pair: one or the other),
#: so a second one, or both memory keys, can only come from the job's own text
_AT_MOST_ONCE = (
    "ArrayJobId",
    "ArrayTaskId",
    "JobName",
    "Reason",
    "SubmitTime",
    "Partition",
    "Account",
    "RunTime",
    "Restarts",
    "StartTime",
    "EndTime",
    "WorkDir",
    "CPUs/Task",
    "MinMemoryNode",
    "MinMemoryCPU",
    "Comment",
    "StdOut",
    "StdErr",
)


class AmbiguousRecord(SlurmError):
    """A job record whose own text (name, comment, directory, paths) reads as Slurm's fields."""


def job_record(line: str, job_id: str | None = None) -> dict[str, str]:
    """One ``scontrol show job -o`` line as a dict, refused when a user's text could be read as Slurm's.

    scontrol prints a job's name, comment, directory and paths unquoted, so
    ``--comment='x UserId=root(0)'`` (or a newline and a whole made-up
    record) would otherwise be read as the owner, the limit or another job's
    id.  harpd acts on these values as root, so a record is taken only when
    every key harp reads appears as often as slurmctld prints it: the
    always-printed keys exactly once, the others at most once (and one memory
    key, not both), an array job's ids right after its JobId, as every
    release prints them.  Anything else is ``AmbiguousRecord``: harp leaves
    that job alone rather than guess.
    """
    keys = [m.group(1) for m in _KV_KEY_RE.finditer(line)]
    counts = {k: keys.count(k) for k in (*_ONCE, *_AT_MOST_ONCE)}
    what = job_id or "?"
    bad = [k for k in _ONCE if counts[k] != 1] + [k for k in _AT_MOST_ONCE if counts[k] > 1]
    if counts["MinMemoryNode"] and counts["MinMemoryCPU"]:
        bad.append("MinMemoryNode/MinMemoryCPU")
    for pos, key in ((1, "ArrayJobId"), (2, "ArrayTaskId")):
        if counts[key] and (len(keys) <= pos or keys[pos] != key):
            bad.append(key)
    if keys[:1] != ["JobId"]:
        bad.append("JobId")
    if bad:
        raise AmbiguousRecord(
            f"Slurm's record of job {what} cannot be read safely ({', '.join(dict.fromkeys(bad))} missing, repeated or "
            "out of place: the job's name, comment or paths hold text in Slurm's own key=value form); "
            "harp leaves this job alone"
        )
    out = parse_kv_line(line)
    if job_id is not None and out.get("JobId") != job_id and not _is_task_of(out, job_id):
        raise AmbiguousRecord(
            f"Slurm answered about job {out.get('JobId')} when asked about job {job_id}; harp leaves this job alone"
        )
    return out


def _is_task_of(kv: Mapping[str, str], job_id: str) -> bool:
    """``job_id`` names this record's array (``A`` or ``A_T``): scontrol shows a task for its array's id."""
    array, task = kv.get("ArrayJobId"), kv.get("ArrayTaskId")
    return array is not None and job_id in (array, f"{array}_{task}")


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
    text = _value(kv, "JobState")
    state = text.split()[0] if text else None
    restarts = _value(kv, "Restarts") or "0"
    return JobInfo(
        job_id=_value(kv, "JobId") or "",
        name=_value(kv, "JobName"),
        user=user,
        uid=uid,
        state=state,
        reason=_value(kv, "Reason"),
        restarts=int(restarts) if restarts.isdigit() else 0,
        time_limit_s=_whole(parse_duration_s(_value(kv, "TimeLimit"))),  # UNLIMITED: None
        mem_mb=_whole(parse_size_mb(_value(kv, "MinMemoryNode"))),
        mem_per_cpu_mb=_whole(parse_size_mb(_value(kv, "MinMemoryCPU"))),
        comment=_value(kv, "Comment"),
        workdir=_value(kv, "WorkDir"),
        account=_value(kv, "Account"),
        # scontrol's EndTime of a job that still runs is its start plus its limit, a time in
        # the future, not an end: read as one, a job requeued from its own end hook looked
        # as if it had "ended 0.0 s ago" and waited until it really ended FAILED
        end_time=_epoch(_value(kv, "EndTime")) if state in FINISHED_STATES else None,
        std_out=_value(kv, "StdOut"),
        std_err=_value(kv, "StdErr"),
        submit_time=_epoch(_value(kv, "SubmitTime")),
        cpus_per_task=_count(_value(kv, "CPUs/Task")),
        requeue={"1": True, "0": False}.get(_value(kv, "Requeue") or ""),
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
        cpus_per_task=_count(_value(kv, "CPUs/Task")),
        num_tasks=_count(_value(kv, "NumTasks")),
        reason=None if _value(kv, "Reason") in (None, "None") else _value(kv, "Reason"),
        tasks=(array_size(task) or 1) if array_id is not None and not (task and task.isdigit()) else 1,
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
    if changes.get("cpus_per_task") is not None:
        # a pending single-task job: slurmctld keeps the count per task, per node and in all
        n = str(int(changes["cpus_per_task"]))
        fields.update(CPUsPerTask=n, MinCPUsNode=n, NumCPUs=n)
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
