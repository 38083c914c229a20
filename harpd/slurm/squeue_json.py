"""``squeue --json``: slurmctld's jobs as typed records, with users' text read as data, never as Slurm's word.

Why JSON: a job's name, comment, working directory and output paths are
written by its user, and Slurm's text output prints them unquoted, line
breaks and ``Key=value`` runs included, so any reader that splits that text
by lines or separators can be told another job's owner, limit or id by a
user (the takeover of issue #44 came through a newline in ``--comment``).
In JSON every value is a string inside its own field: nothing a user writes
can leave it.  Every release harp supports prints it (``squeue --json``:
22.05 with openapi v0.0.38, 23.02+ through a data_parser plugin), and this
module reads both layouts:

* 22.05: ``job_state`` a string, numbers plain (``time_limit`` in minutes,
  ``0``/``None`` for unset), array tasks with their raw id in ``job_id``;
* 23.02 and later: ``job_state`` a list of flags, numbers as
  ``{"set": bool, "infinite": bool, "number": N}``.

22.05's squeue ignores ``--jobs`` and ``--states`` with ``--json`` and
prints every job slurmctld holds (finished ones too, until ``MinJobAge``);
later releases honour them.  The backend therefore always asks for every
state and selects the job itself (``find``), so both behave the same.

Pure functions over the parsed document, so the layouts are tested from
recorded answers (tests/fixtures/squeue) and on the real clusters.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

from harp_submit.request import array_size
from harpd.slurm.base import FINISHED_STATES, JobInfo, QueuedJob, SlurmError
from harpd.slurm.cli_errors import failure

__all__ = [
    "SqueueParseError",
    "parse_squeue_json",
    "job_info",
    "job_infos",
    "queued_job",
    "queued_jobs",
    "find",
    "asked_by",
    "expand_path",
]


class SqueueParseError(SlurmError):
    """``squeue --json`` printed something that is not its JSON (an old release, or no JSON plugin)."""


def parse_squeue_json(text: str, where: str = "squeue --json") -> list[dict[str, Any]]:
    """The ``jobs`` list of squeue's JSON document; SqueueParseError for anything else."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SqueueParseError(f"{where} did not print JSON ({exc.msg} at line {exc.lineno}); Slurm too old?") from None
    except ValueError as exc:  # not text at all (a lone surrogate)
        raise SqueueParseError(f"{where} did not print JSON ({exc}); Slurm too old?") from None
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        raise SqueueParseError(f"{where} printed JSON without a 'jobs' list")
    errors = doc.get("errors") if isinstance(doc, dict) else None
    if errors and not jobs:
        first = errors[0] if isinstance(errors[0], dict) else {"error": str(errors[0])}
        # a stopped slurmctld: exit 0, {"description": "Failed while looking for jobs", "error": "Unspecified
        # error"} (22.05): no answer, not a refusal (harpd.slurm.cli_errors, #50)
        words = json.dumps(errors)
        raise failure(f"{where} failed: {first.get('description') or first.get('error') or first}", words)
    return [j for j in jobs if isinstance(j, dict)]


def _number(value: Any) -> int | None:
    """A number in either layout; None when unset, infinite or not a number (``NO_VAL`` stays None)."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    n = int(value)
    return None if n < 0 or n >= 0xFFFFFFFE else n


def _text(value: Any) -> str | None:
    """A string field; '' and Slurm's "no value" spellings are None."""
    if not isinstance(value, str) or value in ("", "(null)", "N/A"):
        return None
    return value


def _states(job: Mapping[str, Any]) -> list[str]:
    raw = job.get("job_state")
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list):
        return [s for s in raw if isinstance(s, str)]
    return []


def _state(job: Mapping[str, Any]) -> str:
    """The job's base state word (``RUNNING``); 23.02+ lists flags after it (``REQUEUED``, ``COMPLETING``)."""
    states = _states(job)
    # a job being held while it runs is COMPLETING first: that flag is the state harp waits on
    if "COMPLETING" in states[1:]:
        return "COMPLETING"
    return states[0] if states else ""


def _job_id(job: Mapping[str, Any]) -> str:
    """The id Slurm acts on: ``123``, ``123_4`` for an array task, the array's id for its pending rest."""
    raw = _number(job.get("job_id"))
    array = _number(job.get("array_job_id"))
    task = _number(job.get("array_task_id"))
    if array:
        return f"{array}_{task}" if task is not None else str(array)
    return "" if raw is None else str(raw)


def _time(job: Mapping[str, Any], key: str) -> float | None:
    n = _number(job.get(key))
    return float(n) if n else None


def _minutes(job: Mapping[str, Any], key: str) -> int | None:
    n = _number(job.get(key))
    return None if n is None or n == 0 else n * 60


def _cpus_per_task(job: Mapping[str, Any]) -> int | None:
    """CPUs per task; 22.05 leaves ``cpus_per_task`` unset for ``-c N`` and counts ``cpus`` in all."""
    n = _number(job.get("cpus_per_task"))
    if n:
        return n
    cpus, tasks = _number(job.get("cpus")), _number(job.get("tasks"))
    if cpus and tasks:
        return max(1, cpus // tasks)
    return cpus or None


def _run_time_s(job: Mapping[str, Any], now: float) -> int | None:
    """What scontrol prints as RunTime: time run so far, less time suspended."""
    start = _time(job, "start_time")
    if not start or _state(job) == "PENDING":
        return 0 if _state(job) == "PENDING" else None
    end = _time(job, "end_time")
    if _state(job) in FINISHED_STATES and end:
        return max(0, int(end - start))
    suspended = _time(job, "suspend_time")
    before = _number(job.get("pre_sus_time")) or 0
    if suspended and _state(job) == "RUNNING":
        return max(0, int(before + now - suspended))
    if suspended:  # SUSPENDED: the clock stopped at the suspension
        return int(before)
    return max(0, int(now - start))


def expand_path(pattern: str | None, job: Mapping[str, Any]) -> str | None:
    """An output path with sbatch's ``%`` patterns filled in, as scontrol prints StdOut (``%j``, ``%x``, ...).

    22.05's JSON prints the pattern as given; harp shows where a run wrote.
    Unknown patterns are left as they are.
    """
    if not pattern:
        return None
    if "%" not in pattern:
        return pattern
    raw = _number(job.get("job_id"))
    array = _number(job.get("array_job_id"))
    task = _number(job.get("array_task_id"))
    host = _text(job.get("batch_host")) or ""
    values = {
        "%": "%",
        "j": str(raw or ""),
        "J": str(raw or ""),
        "A": str(array or raw or ""),
        "a": "4294967294" if task is None else str(task),
        "u": _text(job.get("user_name")) or "",
        "x": _text(job.get("name")) or "",
        "N": host,
        "n": "0",
        "t": "0",
        "s": "batch",
    }
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "%" and i + 1 < len(pattern) and pattern[i + 1] in values:
            out.append(values[pattern[i + 1]])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def output_path(job: Mapping[str, Any], key: str) -> str | None:
    """Where the job writes (``standard_output``/``standard_error``) as scontrol prints StdOut/StdErr.

    The JSON has the path as sbatch was given it: empty for sbatch's default
    (``slurm-%j.out``, ``slurm-%A_%a.out`` for an array), and relative to the
    job's working directory unless absolute; scontrol shows it expanded and
    absolute.  Standard error without a path of its own is standard output's
    (None here; the caller falls back).
    """
    raw = _text(job.get(key))
    if raw is None:
        if key != "standard_output":
            return None
        raw = "slurm-%A_%a.out" if _number(job.get("array_job_id")) else "slurm-%j.out"
    path = expand_path(raw, job)
    cwd = _text(job.get("current_working_directory"))
    if path and not path.startswith("/") and cwd:
        path = cwd.rstrip("/") + "/" + path
    return path


def _requeue(job: Mapping[str, Any]) -> bool | None:
    v = job.get("requeue")
    return v if isinstance(v, bool) else None


def _memory(job: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(per-node MB, per-CPU MB); 22.05 prints one of ``memory_per_node``/``memory_per_cpu`` set."""
    per_node = _number(job.get("memory_per_node"))
    per_cpu = _number(job.get("memory_per_cpu"))
    if per_cpu:
        return None, per_cpu
    return per_node or None, None


def _reason(job: Mapping[str, Any]) -> str | None:
    """Why a pending job waits (``state_reason``); None where Slurm prints ``None``."""
    reason = _text(job.get("state_reason"))
    return None if reason == "None" else reason


def job_info(job: Mapping[str, Any]) -> JobInfo:
    """One job of the document as ``JobInfo`` (what ``show_job`` returns)."""
    state = _state(job)
    mem, mem_per_cpu = _memory(job)
    stdout = output_path(job, "standard_output")
    stderr = output_path(job, "standard_error") or stdout
    raw = _number(job.get("job_id"))
    return JobInfo(
        job_id="" if raw is None else str(raw),  # as scontrol prints JobId: an array task's own id
        name=_text(job.get("name")),
        user=_text(job.get("user_name")),
        uid=_number(job.get("user_id")),
        state=state or None,
        reason=_reason(job),
        restarts=_number(job.get("restart_cnt")) or 0,
        time_limit_s=_minutes(job, "time_limit"),
        mem_mb=mem,
        mem_per_cpu_mb=mem_per_cpu,
        comment=_text(job.get("comment")),
        workdir=_text(job.get("current_working_directory")),
        account=_text(job.get("account")),
        # a running job's end_time is its start plus its limit: a plan, not an end
        end_time=_time(job, "end_time") if state in FINISHED_STATES else None,
        std_out=stdout,
        std_err=stderr,
        submit_time=_time(job, "submit_time"),
        cpus_per_task=_cpus_per_task(job),
        requeue=_requeue(job),
    )


def queued_job(job: Mapping[str, Any], now: float) -> QueuedJob:
    """One job of the document as ``QueuedJob`` (the watcher's view)."""
    mem, mem_per_cpu = _memory(job)
    array = _number(job.get("array_job_id"))
    task = _number(job.get("array_task_id"))
    return QueuedJob(
        job_id=_job_id(job),
        state=_state(job),
        user=_text(job.get("user_name")),
        uid=_number(job.get("user_id")),
        array_job_id=str(array) if array else None,
        array_task=str(task) if array and task is not None else None,
        time_limit_s=_minutes(job, "time_limit"),
        time_used_s=_run_time_s(job, now),
        start_time=_time(job, "start_time"),
        partition=_text(job.get("partition")),
        comment=_text(job.get("comment")),
        mem_mb=mem,
        mem_per_cpu_mb=mem_per_cpu,
        cpus_per_task=_cpus_per_task(job),
        num_tasks=_number(job.get("tasks")),
        reason=_reason(job),
        tasks=(array_size(_text(job.get("array_task_string"))) or 1) if array and task is None else 1,
    )


def job_infos(jobs: Iterable[Mapping[str, Any]]) -> list[JobInfo]:
    return [job_info(j) for j in jobs]


def queued_jobs(jobs: Iterable[Mapping[str, Any]], now: float | None = None) -> list[QueuedJob]:
    at = time.time() if now is None else now
    return [queued_job(j, at) for j in jobs]


def asked_by(job: Mapping[str, Any]) -> set[str]:
    """Every id Slurm answers with this job for: its own, its array's, ``ARRAY_TASK``."""
    raw, array = _number(job.get("job_id")), _number(job.get("array_job_id"))
    return {x for x in (_job_id(job), "" if raw is None else str(raw), str(array) if array else "") if x}


def find(jobs: Iterable[Mapping[str, Any]], job_id: str) -> Mapping[str, Any] | None:
    """The job Slurm calls ``job_id``: a plain id, ``ARRAY_TASK``, or an array's raw task id.

    An array's own id names its first listed record, as ``scontrol show job
    ARRAY`` shows the array's tasks (the pending rest first).
    """
    wanted = str(job_id)
    fallback: Mapping[str, Any] | None = None
    for j in jobs:
        if _job_id(j) == wanted:
            return j
        raw = _number(j.get("job_id"))
        array = _number(j.get("array_job_id"))
        if raw is not None and str(raw) == wanted:
            fallback = fallback or j
        elif array and str(array) == wanted and fallback is None:
            fallback = j
    return fallback
