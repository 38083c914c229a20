"""``harp status JOBID``: what harp did with a job, its recovery attempts included.

Asks the running harpd (``status`` op over its socket), which answers users
about their own jobs and admins about any.  ``--direct`` reads the store
instead (an admin's view, also when harpd is down); without it, a daemon that
cannot be reached falls back to the store when this user can open it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any, cast

from harpd.cli.ask import Unreachable, ask
from harpd.cli.main import CliError, no_store_no_daemon, open_store, settings_of, store_problem
from harpd.dnn.observed import GpuMemoryDict as GpuMemoryJson
from harpd.records import AttemptRow
from harpd.report.status_view import JobStatus, JobStatusJson, RunView

NAME = "status"
HELP = "what harp did with a job: its source, request, outcome and recovery attempts"

_JOB_ID = re.compile(r"^[0-9]{1,20}(_[0-9]{1,10}|\+[0-9]{1,4})?$")
# how an attempt runs (or was to run): what happened once it has its job, what is to happen before
_MODE_WORDS = {"requeue": "requeued in place", "resubmit": "resubmitted as a new job"}
_MODE_PLANNED = {"requeue": "to be requeued in place", "resubmit": "to be resubmitted as a new job"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job_id", metavar="JOBID", help="Slurm job id (any attempt of a chain)")
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="text (default), or json: harpd's answer as it came"
    )
    # the old spelling, kept working for scripts but no longer shown: every subcommand says --format json
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--direct", action="store_true", help="read the store instead of asking harpd (admins)")
    parser.add_argument(
        "--db", metavar="PATH", help="store to read with --direct (default: store.path from the config)"
    )
    parser.add_argument("--timeout", type=float, default=5.0, metavar="S", help="seconds to wait for harpd (default 5)")


def run(args: argparse.Namespace) -> int:
    job_id = str(args.job_id).strip()
    if not _JOB_ID.match(job_id):
        raise CliError(f"{args.job_id!r} is not a Slurm job id (like 123 or 123_4)")
    if args.timeout <= 0:
        raise CliError("--timeout must be positive")
    if args.json:
        print("harp: --json is deprecated; use --format json", file=sys.stderr)
        args.format = "json"
    note = None
    if args.direct or args.db:
        job = _from_store(job_id, args)
    else:
        try:
            job = _from_daemon(job_id, args)
        except Unreachable as exc:
            problem = store_problem(_store_path(args), hint=False)
            if problem is not None:
                raise CliError(no_store_no_daemon(problem, exc)) from None
            job = _from_store(job_id, args)
            note = f"harp: {exc}; read the store directly"
    if note:
        print(note, file=sys.stderr)
    if args.format == "json":
        print(json.dumps(job.to_json(), indent=2, sort_keys=True, default=str))
    else:
        sys.stdout.write(render(job))
    return 0


def _from_daemon(job_id: str, args: argparse.Namespace) -> JobStatus:
    answer = ask(args, {"op": "status", "job_id": job_id}, args.timeout)
    job = answer.get("job")
    if not isinstance(job, dict):
        raise CliError("harpd's status answer has no job")
    return JobStatus.from_json(cast(JobStatusJson, job))  # read leniently: any key may be missing


def _store_path(args: argparse.Namespace) -> str:
    return str(args.db or settings_of(args).store.path)


def _from_store(job_id: str, args: argparse.Namespace) -> JobStatus:
    """The answer harpd's status operation gives, read from the store as an admin."""
    from harpd.report.job_status import JobStatusError, job_status
    from harpd.store import StoreError

    settings = settings_of(args)
    db = args.db or settings.store.path
    problem = store_problem(db)
    if problem is not None:
        raise CliError(problem)
    store = open_store(db)
    try:
        # whoever can open the store sees every job in it: an admin's view
        return job_status(store, job_id, admin=True, uid=os.geteuid(), user="", cluster=settings.slurm.cluster)
    except JobStatusError as exc:
        raise CliError(str(exc)) from None
    except StoreError as exc:
        raise CliError(str(exc)) from None  # as harp report says it
    finally:
        store.close()


# ---------------------------------------------------------------- rendering


def _limits(lim: Mapping[str, Any] | None) -> str:
    from harp_submit.units import fmt_mem, fmt_time

    lim = lim or {}
    parts = []
    if lim.get("time_s"):
        parts.append(f"time {fmt_time(lim['time_s'])}")
    if lim.get("mem_per_cpu_mb"):
        parts.append(f"mem-per-cpu {fmt_mem(lim['mem_per_cpu_mb'])}")
    elif lim.get("mem_per_gpu_mb"):
        parts.append(f"mem-per-gpu {fmt_mem(lim['mem_per_gpu_mb'])}")
    elif lim.get("mem_mb"):
        parts.append(f"mem {fmt_mem(lim['mem_mb'])}")
    if lim.get("partition"):
        parts.append(f"partition {lim['partition']}")
    return ", ".join(parts) or "limits unknown"


def _resources(r: dict[str, Any] | None) -> str:
    r = r or {}
    return _limits({k: r.get(k) for k in ("time_s", "mem_mb", "mem_per_cpu_mb", "mem_per_gpu_mb", "partition")})


_CHANGE_WORDS = {"extend": "extended", "resize": "re-sized", "resize-mem": "re-sized", "resize-mem-per-cpu": "re-sized"}
_STEP_WORDS = {
    "done": "",
    "decided": " (not made yet)",
    "ended": " (not made: the job had ended)",
    "refused": " (refused)",
}


def _trial(job: JobStatus) -> list[str]:
    """A trial's study, its last reported metric and what harpd did to it (nice, cancel, hold)."""
    t = job.trial
    if not t:
        return []
    out = [f"  trial:         study {t.get('study')}, {t.get('reports')} progress report(s)"]
    last = t.get("last_report") or {}
    if last:
        out[-1] += (
            f", last {last.get('metric')}={last.get('value'):g} at {float(last.get('elapsed_s') or 0) / 60:.0f} min"
        )
    act = t.get("action") or {}
    if act.get("reason"):
        out.append(f"      harp: {act['reason']}")
    return out


def _limit_changes(job: JobStatus) -> list[str]:
    """The limits mode harpd runs in and each change harpd made to the live job's time limit."""
    from harp_submit.units import fmt_time

    out: list[str] = []
    mode: Mapping[str, Any] = job.limits_mode or {}  # an older harpd's answer may lack it
    if mode.get("mode"):
        words = (
            "soft: harp's limit is extended up to the request while the job runs"
            if mode["mode"] == "soft"
            else "hard: harp's limit is the kill time; recovery resubmits what runs out"
        )
        out.append(f"  time limits:   {words}")
    changes = job.limit_changes
    n = sum(1 for c in changes if c.get("kind") == "extend" and c.get("step") == "done")
    if changes:
        out.append(f"  extensions:    {n}")
    for c in changes:
        kind = _CHANGE_WORDS.get(str(c.get("kind")), str(c.get("kind")))
        if c.get("kind") == "checkpoint-signal":  # asked to checkpoint (harpd.watch.checkpoint_signal)
            out.append(
                f"    asked to checkpoint after {fmt_time(c.get('new_time_s'))} of its run"
                f"{_STEP_WORDS.get(str(c.get('step')), ' (' + str(c.get('step')) + ')')}"
            )
            if c.get("reason"):
                out.append(f"      why: {c['reason']}")
            continue
        if str(c.get("kind")).startswith("resize-mem"):  # a pending job's memory: MB, not time
            what = "--mem-per-cpu" if c.get("kind") == "resize-mem-per-cpu" else "--mem"
            values = f"{what} {c.get('old_mem_mb')} MB -> {c.get('new_mem_mb')} MB"
        else:
            values = f"{fmt_time(c.get('old_time_s'))} -> {fmt_time(c.get('new_time_s'))}"
        line = f"    {kind} {values}{_STEP_WORDS.get(str(c.get('step')), ' (' + str(c.get('step')) + ')')}"
        out.append(line)
        if c.get("reason"):
            out.append(f"      why: {c['reason']}")
    return out


def _source(kind: str | None, source: str | None) -> str:
    """Where a shown job comes from, in words: the cluster's own records never read like a trace's."""
    if kind == "imported":
        return f"imported trace {source} (history loaded with harp import: not a job of this cluster)"
    if kind == "cluster":
        return f"this cluster ({source})" if source else "this cluster (registered by harp-submit; no Slurm record yet)"
    return f"{source} (harp cannot tell whether it is this cluster's or imported: harpd has not polled yet)"


def render(job: JobStatus) -> str:
    """The human view of a status answer."""
    out = _identity_lines(job) + _registration_lines(job) + _outcome_lines(job)
    out += _limit_changes(job)
    out += ledger_lines(job)
    out += gpu_memory_lines(job.gpu_memory)
    for run_ in job.runs:
        out += seff_lines(run_)
    out += _trial(job)
    acc: Mapping[str, Any] = job.accounting or {}
    if acc.get("recovery") and not (acc.get("job_script") and acc.get("job_env")):
        out.append(f"  recoverable:   {acc['recovery']}")
    attempts = job.attempts
    if not attempts:
        if job.source_kind != "imported":  # harp never ran a trace's job
            out.append("  recovery:      none (no attempt was made to run it again)")
        return "\n".join(out + _other_records(job)) + "\n"
    out.append(f"  recovery:      {len(attempts)} attempt(s)")
    stop = None
    for a in attempts:
        lim = a.get("limits") or {}
        out += _attempt_lines(a, lim, attempts)
        if lim.get("stop"):
            stop = lim["stop"]
    if stop:
        out.append(f"  stopped: {stop}")
    return "\n".join(out + _other_records(job)) + "\n"


def _identity_lines(job: JobStatus) -> list[str]:
    """Whose job it is, of which chain, from which source (and a same-id job of a trace left out)."""
    jid = job.job_id
    who = job.user or "?"
    head = f"job {jid}: {who}"
    if job.chain_id and str(job.chain_id) != str(jid):
        head += f", attempt of job {job.chain_id}"
    out = [head]
    if job.source or job.source_kind:
        out.append(f"  source:        {_source(job.source_kind, job.source)}")
    if job.also_imported:
        out.append(
            f"  not shown:     job {jid} of imported trace(s) {', '.join(job.also_imported)}, "
            "a different job with the same id"
        )
    return out


def _registration_lines(job: JobStatus) -> list[str]:
    """What harp-submit registered: what the user asked, what was submitted, and harp's changes."""
    if not job.registered:
        return []
    out: list[str] = []
    jid, reg = job.job_id, job.registered_job_id
    if reg and str(reg) != str(jid):
        out.append(f"  registered as job {reg}")
    out.append(f"  asked for:     {_resources(job.original)}")
    out.append(f"  submitted:     {_resources(job.submitted)}")
    decision = job.decision or {}
    for c in decision.get("changes") or []:
        out.append(
            f"  harp changed:  --{c.get('option')} {c.get('old') or '(unset)'} -> {c.get('value')}"
            + (f" ({c['reason']})" if c.get("reason") else "")
        )
    return out


def _outcome_lines(job: JobStatus) -> list[str]:
    """The last outcome, with Slurm's state of that same run."""
    rec = job.record or {}
    outcome = rec.get("outcome") or job.outcome
    ran = job.ran_with or ()
    if ran:  # the last run Slurm has, with its own state: never another run's state beside this outcome
        rec = {"outcome": ran[-1].get("outcome"), "state": ran[-1].get("state")}
        outcome = rec["outcome"] or outcome
    if not outcome:
        return []
    return [f"  last outcome:  {outcome}" + (f" (Slurm {rec['state']})" if rec.get("state") else "")]


def _attempt_lines(a: AttemptRow, lim: Mapping[str, Any], attempts: Sequence[AttemptRow]) -> list[str]:
    """One recovery attempt: its job, step, outcome and limits, then why, its files and its waits."""
    job_words, mode = _attempt_words(a, lim)
    line = f"  #{a.get('attempt')}  job {job_words}"
    line += f"  {a.get('step')}"
    if a.get("outcome"):
        line += f"  {a['outcome']}"
    line += f"  [{_limits(lim)}]"
    if mode:
        line += f"  {mode}"
    out = [line]
    if a.get("reason"):
        out.append(f"      why: {a['reason']}")
    if lim.get("comment"):
        out.append(f"      Slurm comment: {lim['comment']}")
    if lim.get("note"):
        out.append(f"      note: {lim['note']}")
    out += _gpu_lines(lim.get("gpu"))
    if lim.get("output"):
        shared = lim.get("mode") == "requeue" or (a.get("attempt") == 1 and _requeued(attempts))
        out.append(f"      output: {lim['output']}" + (" (the job's runs one after another)" if shared else ""))
    if lim.get("error"):
        out.append(f"      errors: {lim['error']}")
    return out + _attempt_wait_lines(a, lim)


def _attempt_wait_lines(a: AttemptRow, lim: Mapping[str, Any]) -> list[str]:
    """An attempt's waits on Slurm: waiting now (decided, not yet carried out), or how long it waited."""
    import time

    from harp_submit.units import fmt_time

    out: list[str] = []
    if lim.get("waiting") and a.get("step") == "decided":
        since = lim.get("waiting_since")
        ago = f" for {fmt_time(max(0, int(time.time() - float(since))))}" if since else ""
        out.append(f"      waiting on Slurm{ago}: {lim['waiting']} (harpd asks again; a slow Slurm delays it only)")
    if lim.get("waited_s"):
        out.append(f"      waited {fmt_time(int(lim['waited_s']))} for Slurm to answer before it was carried out")
    if lim.get("last_error") and a.get("step") == "decided":
        out.append(f"      waiting: {lim['last_error']} ({lim.get('failures', 1)} failed tries)")
    return out


def ledger_lines(job: JobStatus) -> list[str]:
    """The job's limits ledger (who set each limit, when, why) and what each attempt ran with, from Slurm."""
    import time

    from harp_submit.units import fmt_time

    def amount(resource: str, v: Any) -> str:
        if v is None:
            return "---"
        return fmt_time(int(v)) if resource == "time" else f"{int(v)}M"

    out: list[str] = []
    entries = job.ledger or ()
    if entries:
        out.append("  limits ledger: (who set each limit, from what, why)")
        for e in entries:
            at = time.strftime("%H:%M:%S", time.localtime(float(e.get("at") or 0)))
            was = "" if e.get("old") is None else f"{amount(e['resource'], e['old'])} -> "
            line = f"    #{e.get('attempt')}  {at}  {e.get('hand'):<12} {e.get('resource'):<4} "
            line += f"{was}{amount(e['resource'], e.get('value'))}"
            if e.get("reason"):
                line += f"  ({e['reason']})"
            out.append(line)
    for r in job.ran_with or ():
        out.append(
            f"  ran with:      #{r.get('attempt')}  mem {amount('mem', r.get('mem_mb'))}  "
            f"time {amount('time', r.get('time_s'))}  {r.get('outcome')} (Slurm {r.get('state') or '?'})"
        )
    return out


def _gpu_lines(gpu: Any) -> list[str]:
    """A larger GPU configuration after a GPU out-of-memory: the sbatch options and variables it ran with."""
    if not isinstance(gpu, dict) or not gpu.get("options"):
        return []
    opts = " ".join(f"--{k}={v}" for k, v in gpu["options"].items())
    env = " ".join(f"{k}={v}" for k, v in (gpu.get("env") or {}).items())
    return [f"      GPUs: {opts}" + (f"; environment: {env}" if env else "")]


def gpu_memory_lines(gm: GpuMemoryJson | None) -> list[str]:
    """A DNN job's GPU memory per GPU: harp's estimate against the peak Slurm recorded (gres/gpumem)."""
    if not gm:
        return []
    where = f"{gm.get('n_gpus')} x {gm.get('gpu_type') or 'GPU'}, zero={gm.get('zero')}"
    est = gm.get("estimate_gib")
    line = f"  GPU memory:    {where}: estimate {'---' if est is None else f'{est:.2f} GiB'} per GPU"
    if gm.get("estimate_source") and gm["estimate_source"] != "formula":
        line += f" ({gm['estimate_source']})"
    seen = gm.get("observed_gib")
    if seen is None:
        line += ", observed peak --- (Slurm recorded no gres/gpumem)"
    else:
        line += f", observed peak {seen:.2f} GiB"
        if gm.get("capacity_gib"):
            line += f" of {gm['capacity_gib']:.0f} GiB"
        if gm.get("out_of_gpu_memory"):
            line += " (out of GPU memory: the next run of this setup gets a larger configuration)"
    return [line]


def _seff_time(seconds: float | None) -> str:
    """seff's time: HH:MM:SS, with D- in front from a day on."""
    if seconds is None:
        return "---"
    s = int(round(float(seconds)))
    d, s = divmod(s, 86400)
    text = f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{d}-{text}" if d else text


def _seff_mem(mb: float | None) -> str:
    """seff's memory: two decimals in the largest binary unit that keeps the number at least 1."""
    if mb is None:
        return "---"
    value, units = float(mb) * 1024, ("KB", "MB", "GB", "TB", "PB")
    i = 0
    while value >= 1024 and i < len(units) - 1:
        value /= 1024
        i += 1
    return f"{value:.2f} {units[i]}"


def _pct(x: float | None) -> str:
    return "---" if x is None else f"{x * 100:.2f}%"


def seff_lines(run_: RunView) -> list[str]:
    """One run of the job in seff's words (State, Cores, CPU Utilized, ... Memory Efficiency)."""
    rec = run_.get("record") or {}
    eff = run_.get("efficiency") or {}
    attempt = rec.get("attempt") or 1
    head = f"  run of job {run_.get('job_id')}" + (f" (harp attempt {attempt})" if attempt > 1 else "")
    state = rec.get("state") or str(rec.get("outcome") or "unknown").upper()
    if rec.get("exit_code") is not None:
        state += f" (exit code {rec['exit_code']})"
    cores = rec.get("alloc_cpus") if rec.get("alloc_cpus") is not None else rec.get("req_cpus")
    wall = rec.get("used_time_s")
    core_wall = wall * cores if wall is not None and cores else None
    out = [
        head + ":",
        f"    State: {state}",
        f"    Cores: {cores if cores is not None else '---'}",
        f"    CPU Utilized: {_seff_time(rec.get('used_cpu_s'))}",
        f"    CPU Efficiency: {_pct(eff.get('cpu_eff'))} of {_seff_time(core_wall)} core-walltime",
        f"    Job Wall-clock time: {_seff_time(wall)}",
    ]
    if rec.get("req_time_s"):
        out.append(f"    Time Limit: {_seff_time(rec['req_time_s'])} ({_pct(eff.get('time_eff'))} used)")
    used = rec.get("used_mem_mb")
    out.append(f"    Memory Utilized: {_seff_mem(used)}")
    out.append(f"    Memory Efficiency: {_pct(eff.get('mem_eff'))} of {_seff_mem(rec.get('req_mem_mb'))}")
    return out


def _requeued(attempts: Sequence[AttemptRow]) -> bool:
    return any((a.get("limits") or {}).get("mode") == "requeue" for a in attempts)


def _attempt_words(a: AttemptRow, lim: Mapping[str, Any]) -> tuple[str, str]:
    """(the attempt's job, how it runs) in words that agree with its step.

    A decided attempt has not run yet: it says what is to happen; one given up
    before its side effect never had a job of its own and says nothing of a
    resubmission that never was.
    """
    mode, job_id, step = str(lim.get("mode") or ""), a.get("job_id"), a.get("step")
    if a.get("outcome") == "not_submitted" or (lim.get("stop") and step != "done"):
        return ("(none: never submitted)" if mode != "requeue" or not job_id else f"{job_id} (not requeued)"), ""
    if step == "decided":
        return (str(job_id) if mode == "requeue" and job_id else "(not submitted yet)"), _MODE_PLANNED.get(mode, "")
    return str(job_id or "(unknown)"), _MODE_WORDS.get(mode, "")


def _other_records(job: JobStatus) -> list[str]:
    """The same job id in further sources (only where none is the cluster's), each with its source."""
    out: list[str] = []
    for other in job.other_records or ():
        out.append(f"job {job.job_id}: {other.get('user') or '?'}")
        out.append(f"  source:        {_source(job.source_kind, other.get('source'))}")
        out.append(
            f"  last outcome:  {other.get('outcome')}" + (f" (Slurm {other['state']})" if other.get("state") else "")
        )
    return out
