"""Resubmit as a new job: the owner's sbatch arguments, script and environment, with the new limits.

Script and environment are Slurm's copies of the run that failed
(``batch_script``, ``job_env``: slurmctld's or accounting's), never harpd's:
a site whose accounting keeps neither cannot have its jobs resubmitted, and
such an attempt stops with that reason (``environment``).

The new job is submitted as the job's owner (a root harpd) or as harpd's own
user (a per-user harpd, which may only recover its user's jobs), carries the
marker comment ``harp retry N of CHAIN``, and is registered as a submission
of its own with ``chain_id`` = the first job, so the poller follows it too.

Exactly once: before submitting, Slurm is searched for a job carrying the
marker (``squeue --states=all`` and ``sacct``); one found is the resubmission
a crashed harpd made, and is adopted.  A search that fails submits nothing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from harp_submit.units import fmt_mem, fmt_time
from harpd.metrics import record as metrics
from harpd.protocol import Decision, Limits
from harpd.records import Change, Resources, Submission
from harpd.recovery.attempts import SUBMITTED, Attempt, AttemptLimits, Plan, Stop
from harpd.recovery.crash import crash_point
from harpd.recovery.environment import submit_env, user_name
from harpd.recovery.gpu_escalation import GPU, gpu_changes, gpu_resources
from harpd.recovery.sbatch_argv import ArgvError, resubmit_argv
from harpd.recovery.vouch import why_not_vouched, why_not_vouched_in_accounting
from harpd.slurm.base import JobInfo, NotRecordedYet, SlurmError
from harpd.store import OwnerChanged, Store

log = logging.getLogger("harpd.recovery")

__all__ = ["resubmit", "SEARCH_SLACK_S"]

#: how far before the decision the marker search looks in accounting (clock skew, slow sacct)
SEARCH_SLACK_S = 600.0


def resubmit(
    store: Store,
    backend: Any,  # a SlurmBackend with the CLI backend's batch_script and jobs_with_comment
    attempt: Attempt,
    plan: Plan,
    previous: Attempt | None,
    clock: Callable[[], float],
) -> None:
    """Carry out a decided resubmission (or adopt the one a crash left); Stop when it cannot be."""
    chain, number = attempt.chain, attempt.number
    sub = store.get_submission(chain)
    if sub is None:
        raise Stop(f"job {chain}'s registration is gone from the store")
    uid = int(sub.uid)
    user = sub.user or user_name(uid)
    me = os.geteuid()
    as_uid: int | None = None
    if uid != me:
        if me != 0:
            raise Stop(f"harpd runs as uid {me} and cannot submit for {user} (uid {uid})")
        as_uid = uid
    comment = str(plan.comment)
    decided_at = float(attempt.created_at or clock())
    since = decided_at - SEARCH_SLACK_S
    found = [
        j
        for j in backend.jobs_with_comment(comment, user, since)
        if _adoptable(backend, chain, number, j, uid, user, decided_at)
    ]
    if found:
        found = sorted(found, key=lambda j: (len(j), j))
        if len(found) > 1:
            log.error(
                "job %s attempt %d: several jobs carry %r: %s; following %s",
                chain,
                number,
                comment,
                ", ".join(found),
                found[0],
            )
        new_id = found[0]
        log.info("job %s attempt %d: found its resubmission %s (made before a restart)", chain, number, new_id)
    else:
        prev_id = (previous.job_id if previous else None) or chain
        new_id = _submit(store, backend, prev_id, sub, plan, as_uid)
        crash_point("submitted")
    prev_limits = previous.plan.limits if previous else AttemptLimits()
    try:
        _record(store, chain, number, new_id, uid, user, sub, plan, attempt, prev_limits)
    except OwnerChanged as exc:
        raise Stop(f"{exc}: not adopted as attempt {number}") from None
    log.info("job %s: attempt %d submitted as job %s", chain, number, new_id)
    metrics.recovery("resubmitted")
    crash_point("committed")


def _record(
    store: Store,
    chain: str,
    number: int,
    new_id: str,
    uid: int,
    user: str,
    sub: Submission,
    plan: Plan,
    attempt: Attempt,
    prev_limits: AttemptLimits,
) -> None:
    """The attempt submitted as ``new_id``, and ``new_id`` registered as the chain's (one transaction)."""
    with store.transaction():
        store.update_attempt(chain, number, step=SUBMITTED, job_id=new_id)
        store.add_submission(
            new_id,
            uid,
            user,
            sub.stored["job"] or {},
            sub.original,
            _submitted(sub, plan.limits, plan.gpu),
            _decision(attempt, plan, prev_limits),
            chain_id=chain,
        )


def _adoptable(backend: Any, chain: str, number: int, job_id: str, uid: int, user: str, decided_at: float) -> bool:
    """Whether a job found carrying the attempt's marker is the resubmission harpd made (else logged, ignored).

    Slurm must vouch that it is the chain owner's and was submitted after the
    attempt was decided: a marker is text anyone can write into a comment.
    """
    # it was listed with the marker: accounting lags, ask again rather than submit a second one
    missing = f"job {job_id} carries the marker but accounting has no record of it yet"
    why, _ = _why_not_the_chains(backend, job_id, uid, user, decided_at, missing)
    if why is not None:
        log.warning("job %s attempt %d: job %s carries its marker but is not adopted: %s", chain, number, job_id, why)
        return False
    return True


def _why_not_the_chains(
    backend: Any, job_id: str, uid: int, user: str, submitted_after: float | None, missing: str
) -> tuple[str | None, JobInfo | None]:
    """(why Slurm does not vouch that ``job_id`` is the chain owner's, or None; slurmctld's record of it).

    slurmctld answers while it holds the job, accounting after (the owner by
    name, ``vouch.why_not_vouched_in_accounting``); a job neither knows yet
    is NotRecordedYet with ``missing``: accounting may lag, and that is
    asked again, never taken for "not the owner's".
    """
    try:
        info = backend.show_job(job_id)
    except SlurmError as exc:
        if "invalid job id" not in str(exc).lower():
            raise
        runs = [r for r in backend.sacct_jobs([job_id], None, None, True) if r.job_id == job_id]
        if not runs:
            raise NotRecordedYet(missing) from None
        submitted = runs[0].submit_time if submitted_after is not None else None
        return why_not_vouched_in_accounting(job_id, runs[0].user, submitted, user, submitted_after), None
    return why_not_vouched(info, uid, submitted_after=submitted_after), info


def _submit(store: Store, backend: Any, prev_id: str, sub: Submission, plan: Plan, as_uid: int | None) -> str:
    """sbatch the script of the run that failed (``prev_id``) with the registered arguments and new limits."""
    job = sub.job
    argv = job.get("argv")
    if not isinstance(argv, list):
        raise Stop("its registration lacks sbatch's arguments (harp-submit older than recovery): not resubmitted")
    # asked at every attempt, right before the owner's script and environment are read: they are
    # resubmitted as the chain's uid, so another user's job must never be their source
    missing = f"neither slurmctld nor accounting knows job {prev_id} yet"
    why, info = _why_not_the_chains(backend, prev_id, int(sub.uid), sub.user or "", None, missing)
    if why is not None:
        raise Stop(f"{why}: its script and environment are not resubmitted")
    # info None: the job left slurmctld, so the registration's name and directory (a slurmctld that did not
    # answer was raised above: asked again, never guessed past)
    try:
        script = backend.batch_script(prev_id)
    except SlurmError as exc:
        lacks = _accounting_lacks(backend)
        if "job_script" in lacks:
            raise Stop(f"{exc}; not resubmitted") from None
        raise
    rec = store.get_job(prev_id)
    job_name = (info.name if info else None) or (rec.job_name if rec else None) or job.get("job_name")
    workdir = (info.workdir if info else None) or job.get("cwd")
    if not workdir:
        raise Stop(f"the working directory of job {prev_id} is unknown: not resubmitted")
    account = (info.account if info else None) or (rec.account if rec else None)
    try:
        new_argv = resubmit_argv(
            argv,
            plan.limits,
            job_name=job_name,
            workdir=workdir,
            comment=str(plan.comment),
            account=account,
            options=(plan.gpu or {}).get("options"),
        )
    except ArgvError as exc:
        raise Stop(str(exc)) from None
    env = submit_env(_original_env(backend, prev_id), sets_mem=bool(plan.limits.mem))
    env.update((plan.gpu or {}).get("env") or {})  # the larger GPU configuration, for the job's program
    return backend.submit(new_argv, script, workdir, env, as_uid=as_uid)


def _original_env(backend: Any, job_id: str) -> dict[str, str]:
    """The environment job ``job_id`` was submitted with, from Slurm's accounting.

    Stop (never resubmitted) when the site's accounting does not keep it;
    SlurmError (tried again) when it should but did not answer.
    """
    try:
        return dict(backend.job_env(job_id))
    except SlurmError as exc:
        if "job_env" in _accounting_lacks(backend):
            raise Stop(
                f"Slurm keeps no environment for job {job_id} (AccountingStoreFlags lacks job_env): "
                "not resubmitted, since it would run with another environment than its own"
            ) from None
        raise exc from None


def _accounting_lacks(backend: Any) -> list[str]:
    """The AccountingStoreFlags a resubmission needs and the site lacks ([] when unknown)."""
    try:
        return list(backend.accounting().lacks)
    except (SlurmError, AttributeError):
        return []


def _submitted(sub: Submission, limits: AttemptLimits, plan_gpu: dict[str, Any] | None = None) -> Resources:
    """The new job's registered ``submitted`` resources: the first job's, with the new limits."""
    out: dict[str, Any] = {}
    if limits.time_s:
        out["time_s"] = int(limits.time_s)
    if limits.mem_per_cpu_mb:
        out.update(mem_per_cpu_mb=int(limits.mem_per_cpu_mb), mem_mb=None)
    elif limits.mem_mb:
        out.update(mem_mb=int(limits.mem_mb), mem_per_cpu_mb=None)
    if limits.partition:
        out["partition"] = limits.partition
    out.update(gpu_resources(plan_gpu))
    return sub.submitted.model_copy(update=out)


def _decision(attempt: Attempt, plan: Plan, prev: AttemptLimits) -> Decision:
    """The new job's registered decision: recovery's change, as ``harp status`` shows a model's."""
    lim = plan.limits
    changes: list[Change] = []
    if plan.escalated == "time":
        changes.append(
            Change.from_json(
                {
                    "option": "time",
                    "value": fmt_time(lim.time_s),
                    "old": fmt_time(prev.time_s),
                    "reason": attempt.reason,
                }
            )
        )
    elif plan.escalated == "mem":
        key = lim.mem_key
        changes.append(
            Change.from_json(
                {
                    "option": "mem-per-cpu" if key == "mem_per_cpu_mb" else "mem",
                    "value": fmt_mem(getattr(lim, key)),
                    "old": fmt_mem(getattr(prev, key)),
                    "reason": attempt.reason,
                }
            )
        )
    explain: dict[str, Any] = {"chain": attempt.chain, "attempt": attempt.number}
    if plan.gpu:  # a larger GPU configuration, made now or at an earlier attempt and kept
        if plan.escalated == GPU:
            changes += gpu_changes(plan.gpu, attempt.reason)
        explain["dnn"] = plan.gpu.get("dnn")  # so this run's own peak or out-of-memory is learnt in turn
    return Decision(changes=changes, limits=Limits(partition=lim.partition), model="recovery", explain=explain)
