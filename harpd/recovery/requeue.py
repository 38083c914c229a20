"""Requeue in place: the same job id runs again with the new limits.

``scontrol requeuehold``, update the limits, comment and start time,
``release``; then the ingest poller is told to ``watch`` the id for its next
run.  Not in the first seconds after the run ended (``SETTLE_S``): slurmd
revokes a killed job's credential with a time in whole seconds and refuses a
relaunch whose credential is not newer ("Job credential revoked"), so a job
requeued and started within the second it timed out fails at once, FAILED
with exit code 1, its new limits wasted.  A job requeued from its own end
hook (``ending.py``) is held while it still runs and released ``SETTLE_S``
after the hold.  Each step first asks slurmctld what already happened (a restarted harpd
may find the job requeued, held with or without the new limits, or already
released), so carrying out a decided attempt twice never requeues twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from harpd.metrics import record as metrics
from harpd.records import Submission
from harpd.recovery.attempts import REQUEUED, Attempt, Fallback, NotYet, Plan, Stop, with_marker
from harpd.recovery.crash import crash_point
from harpd.recovery.vouch import why_not_vouched, why_not_vouched_in_accounting
from harpd.slurm.base import JobChanges, JobInfo, SlurmBackend, SlurmError
from harpd.slurm.scontrol import update_fields
from harpd.store import Store

log = logging.getLogger("harpd.recovery")

__all__ = ["requeue", "pending_changes"]

#: Slurm's answers that no retry will change (the job or harpd lacks the right)
_PERMANENT = ("access/permission denied", "permission denied", "invalid", "not supported", "disabled")

Watch = Callable[[str, int], None]

#: seconds after a run's end before it is requeued: past slurmd's revocation
#: second, with room for the clocks of harpd's and slurmctld's hosts to differ
SETTLE_S = 3.0
#: seconds a job requeued while it ran may stay COMPLETING (its processes being killed; half a
#: second on a healthy node) before harpd leaves it for this round (NotYet) and carries the
#: attempt out on a later tick: recovery's lock is held meanwhile, so not for long
COMPLETING_WAIT_S = 15.0


def _permanent(exc: SlurmError) -> bool:
    return any(p in str(exc).lower() for p in _PERMANENT)


def _show(backend: SlurmBackend, jid: str) -> JobInfo | None:
    """The job as slurmctld sees it; None once it has forgotten the job (MinJobAge)."""
    try:
        return backend.show_job(jid)
    except SlurmError as exc:
        if "invalid job id" not in str(exc).lower():
            raise
        return None


def pending_changes(info: JobInfo, plan: Plan) -> JobChanges:
    """The changes the held job still needs to match the plan (always a start now)."""
    lim = plan.limits
    changes: JobChanges = {}
    if lim.time_s and info.time_limit_s != int(lim.time_s):
        changes["time_limit_s"] = int(lim.time_s)
    if lim.mem_per_cpu_mb:
        if info.mem_per_cpu_mb != int(lim.mem_per_cpu_mb):
            changes["mem_per_cpu_mb"] = int(lim.mem_per_cpu_mb)
    elif lim.mem_mb:
        if info.mem_mb != int(lim.mem_mb):
            changes["mem_mb"] = int(lim.mem_mb)
    if plan.comment:
        comment = with_marker(info.comment, plan.comment)  # the job's own comment kept
        if info.comment != comment:
            changes["comment"] = comment
    changes["start_now"] = True  # a requeued job otherwise waits ~2 min (BeginTime)
    return changes


def requeue(
    store: Store,
    backend: SlurmBackend,
    watch: Watch | None,
    attempt: Attempt,
    plan: Plan,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    before_hold: Callable[[], None] | None = None,
) -> None:
    """Carry out a decided requeue; Fallback when only a resubmission can recover the job, NotYet too soon.

    A requeue decided at the job's end hook (``plan.while_running``) holds
    the job while Slurm still shows it running, so it never reaches a final
    state; its release waits out ``SETTLE_S`` after that hold.  ``before_hold``
    runs right before ``scontrol requeuehold`` (not when the attempt was
    decided, seconds earlier) and raises ``Stop`` when the requeue must not
    happen after all (a workflow manager retried the task meanwhile).
    """
    chain, number = attempt.chain, attempt.number
    jid = str(attempt.job_id)
    before = int(plan.restarts_before or 0)
    sub = store.get_submission(chain)
    if sub is None:
        raise Stop(f"job {chain}'s registration is gone from the store")
    info = _show(backend, jid)
    if info is not None:
        # asked again at every attempt and every try: the job must still be the chain owner's
        why = why_not_vouched(info, int(sub.uid))
        if why is not None:
            raise Stop(f"{why}; harp leaves job {jid} alone")
    if info is None:
        _ran_again_after_purge(backend, jid, sub, before)
        _commit(store, watch, chain, number, jid)
        return
    held_at: float | None = None  # when harp held the job while it ran (its end hook's requeue)
    if info.restarts <= before:
        plan, held_at = _hold(store, backend, attempt, plan, info, clock, before_hold)
        info = backend.show_job(jid)
    info = _past_completing(backend, info, clock, sleep)
    if info.held:
        _update_and_release(backend, jid, info, plan, held_at, clock, sleep)
    _commit(store, watch, chain, number, jid)


def _ran_again_after_purge(backend: SlurmBackend, jid: str, sub: Submission, before: int) -> None:
    """A job purged from slurmctld: returns when accounting shows it requeued (by a crashed harpd), else raises.

    Accounting tells whose the job is (Stop when not the registration's
    owner's) and whether it ran again; a job gone before its requeue can only
    be resubmitted (Fallback).
    """
    runs = [r for r in backend.sacct_jobs([jid], None, None, True) if r.job_id == jid]
    for r in runs[:1]:
        why = why_not_vouched_in_accounting(jid, r.user, None, sub.user or "")
        if why is not None:
            raise Stop(f"{why}; harp leaves job {jid} alone")
    if len(runs) <= before + 1:
        raise Fallback(f"job {jid} left slurmctld (MinJobAge) before harp could requeue it")


def _hold(
    store: Store,
    backend: SlurmBackend,
    attempt: Attempt,
    plan: Plan,
    info: JobInfo,
    clock: Callable[[], float],
    before_hold: Callable[[], None] | None,
) -> tuple[Plan, float | None]:
    """``scontrol requeuehold`` of a job not requeued yet: (the plan, when it was held if it was running).

    A job still running is held only from its end hook (``plan.while_running``);
    one that ended is held once ``SETTLE_S`` have passed.
    """
    chain, number = attempt.chain, attempt.number
    jid = str(attempt.job_id)
    before = int(plan.restarts_before or 0)
    if not info.finished and not plan.while_running:
        raise SlurmError(f"job {jid} is {info.state or 'in an unknown state'}, not finished: requeue later")
    ago = None if info.end_time is None else clock() - info.end_time
    if ago is not None and ago < SETTLE_S:
        raise NotYet(f"job {jid} ended {max(ago, 0.0):.1f} s ago: requeued once {SETTLE_S:.0f} s have passed")
    if before_hold is not None:
        before_hold()
    try:
        backend.requeue_hold(jid)
    except SlurmError as exc:
        if backend.show_job(jid).restarts <= before:
            if _permanent(exc):
                raise Fallback(f"scontrol requeuehold {jid} refused ({exc})") from None
            raise
    crash_point("held")
    held_at = clock()
    if info.finished:
        return plan, None
    # requeued from the job's end hook: the run ends now
    plan = plan.but(held_running=True)  # what harp status shows: the manager saw no final state of this run
    store.update_attempt(chain, number, limits=plan.to_json())
    return plan, held_at


def _update_and_release(
    backend: SlurmBackend,
    jid: str,
    info: JobInfo,
    plan: Plan,
    held_at: float | None,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> None:
    """The held job's new limits, checked as Slurm applied them, then its release (Stop when refused)."""
    try:
        backend.update_job(jid, **pending_changes(info, plan))
    except SlurmError as exc:
        if _permanent(exc):
            raise Stop(
                f"Slurm refused the new limits ({exc}); job {jid} is left held: "
                f"`scontrol release {jid}` runs it unchanged, `scancel {jid}` drops it"
            ) from None
        raise
    crash_point("updated")
    left: JobChanges = pending_changes(backend.show_job(jid), plan)
    left.pop("start_now", None)
    left.pop("comment", None)
    if left:
        # named as scontrol shows them: what an admin compares and sets by hand
        fields = update_fields(left)
        raise Stop(
            f"Slurm did not apply {', '.join(f'{k}={v}' for k, v in fields.items())} (not an operator?); "
            f"job {jid} is left held: `scontrol release {jid}` runs it unchanged, `scancel {jid}` drops it"
        )
    if held_at is not None:
        # the run was killed by the requeue just now: past slurmd's revocation second first
        sleep(max(0.0, SETTLE_S - (clock() - held_at)))
    backend.release(jid)
    crash_point("released")


def _past_completing(
    backend: SlurmBackend, info: JobInfo, clock: Callable[[], float], sleep: Callable[[float], None]
) -> JobInfo:
    """The job once slurmctld has it held, not COMPLETING.

    A job held while it ran is COMPLETING until slurmd has killed its
    processes; only then is it PENDING and held, the state the limits are
    updated and the job released in.  Taken for done while COMPLETING, the
    requeue was committed unreleased and the job stayed held for good.
    """
    deadline = clock() + COMPLETING_WAIT_S
    while info.completing:
        if clock() >= deadline:
            # nobody's fault (a slow node kills its processes): not a failed try, the next tick goes on
            raise NotYet(
                f"job {info.job_id} is still COMPLETING {COMPLETING_WAIT_S:.0f} s after its requeue: "
                "harpd releases it with the new limits once slurmd has ended its run"
            )
        sleep(0.5)
        info = backend.show_job(info.job_id)
    return info


def _commit(store: Store, watch: Watch | None, chain: str, number: int, jid: str) -> None:
    if watch is None:
        raise SlurmError("recovery is not attached to the ingest poller yet")
    with store.transaction():
        store.update_attempt(chain, number, step=REQUEUED, job_id=jid)
        watch(jid, number)
    log.info("job %s: attempt %d requeued as job %s", chain, number, jid)
    metrics.recovery("requeued")
    crash_point("committed")
