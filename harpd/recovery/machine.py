"""Automatic recovery: give a job that ran out of time or memory another attempt.

Driven by the ingest poller: ``Recovery.on_outcome`` is one of its
``on_outcome`` listeners.  When a recoverable job (``policy.eligible``) ends
TIMEOUT or OOM, the resource that ran out is doubled (``policy.next_limits``
around ``escalation.next_allocation``) and the job runs again, in one of two
ways (``mode.resolve_mode``):

* ``requeue`` (``requeue.py``): the same job id and user: ``scontrol
  requeuehold``, update the time limit, memory, comment and start time,
  ``release``; the ingest poller is told to ``watch`` the id for its next run;
* ``resubmit`` (``resubmit.py``): a new job, as the owner, with the
  registered sbatch arguments and the script Slurm stored (``sbatch_argv``),
  registered as a submission of its own with ``chain_id`` = the first job, so
  the poller follows it too.

Exactly once.  Every attempt is a row of the store's ``attempts`` table
(unique ``(chain_id, attempt)``, typed in ``attempts.py``), moved through
persisted steps::

    decided --(requeue: scontrol)--> requeued --(outcome)--> done
    decided --(resubmit: sbatch)---> submitted --(outcome)--> done

``decided`` is committed BEFORE the side effect, with everything the side
effect needs (limits, mode, the marker comment ``harp retry N of CHAIN``,
for requeue the job's restart count); ``submitted``/``requeued`` AFTER it.
Whatever is left ``decided`` by a crash is finished at restart (and on every
tick) by asking Slurm what already happened, never by repeating blindly:

* requeue: ``scontrol show job`` tells whether the requeue happened (its
  restart count grew past the recorded one), whether the job is still held
  (then the limits are updated again, idempotently, and it is released) or
  already released;
* resubmit: a job carrying the marker comment (``squeue --states=all`` and
  ``sacct``) is the resubmission made before the crash: it is adopted, not
  submitted again.  A search that fails submits nothing.

The ingest poller announces each outcome at least once (again after a
crash), and deciding attempt N+1 is an ``INSERT ... ON CONFLICT DO NOTHING``,
so a repeated announcement can neither decide twice nor skip a decision.

Tests kill the process between the steps: ``HARP_TEST_CRASH_AT=<point>``
(one of ``crash.CRASH_POINTS``) SIGKILLs harpd right there.

Every attempt's Slurm record is stored by the poller like any job's (a
TIMEOUT at limit L is censored: the job needs more than L); records of later
attempts get the chain's signature and ``harp_sized`` so the models learn
from them as from the first.  Why each step happened is the ``reason`` of
its row; why a chain stopped is ``limits.stop`` of its last row (``harp
status JOBID`` shows both).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

from harp_submit.units import fmt_mem, fmt_time
from harpd.config import HarpSettings
from harpd.metrics import record as metrics
from harpd.protocol import Resources
from harpd.records import JobRecord, Outcome, Submission
from harpd.recovery.attempts import (
    DECIDED,
    DONE,
    NOT_SUBMITTED,
    REQUEUED,
    SUBMITTED,
    Attempt,
    AttemptLimits,
    Fallback,
    NotYet,
    Plan,
    Stop,
    as_ran,
    marker,
)
from harpd.recovery.crash import crash_point
from harpd.recovery.ending import ran_out_of_memory
from harpd.recovery.escalation import RESOURCE_OF
from harpd.recovery.gpu_escalation import GPU, GpuPlanner, next_gpu_step
from harpd.recovery.manager_retry import LEFT_TO_MANAGER, LEFT_TO_NEXTFLOW, NO_RESUBMIT, manager_retry, task_of
from harpd.recovery.mode import REQUEUE, RESUBMIT, resolve_mode
from harpd.recovery.policy import Caps, eligible, first_limits, next_limits
from harpd.recovery.requeue import requeue
from harpd.recovery.resubmit import resubmit
from harpd.recovery.resume import last_signal, resumed_time, signal_declared, slurm_signal_at
from harpd.recovery.waiting import Wait, Waits
from harpd.slurm.base import NotRecordedYet, PartitionInfo, SlurmError, waiting_on_slurm
from harpd.slurm.partitions import cached_partitions, partition_of
from harpd.store import Store

log = logging.getLogger("harpd.recovery")

__all__ = ["Recovery", "make", "MAX_FAILURES"]

#: a decided attempt whose side effect Slurm keeps refusing is given up after this many refusals
#: (a Slurm that does not answer, or has no record of the job yet, is waited for instead: ``_wait``)
MAX_FAILURES = 20

#: store meta key: runs that ran out before Slurm named their owner {job id: first seen}
AWAITING_OWNER_KEY = "recovery.awaiting_owner"
#: how long to wait for that owner (slurmdbd lags minutes on a loaded host) before giving up
OWNER_WAIT_S = 1800


def _original(sub: Submission | None) -> Resources:
    """The user's own request as harp-submit registered it (``Resources``, validated at registration)."""
    return Resources() if sub is None else sub.original


def _brief(limits: AttemptLimits) -> str:
    parts = [f"time {fmt_time(limits.time_s)}"]
    if limits.mem_per_cpu_mb:
        parts.append(f"mem-per-cpu {fmt_mem(limits.mem_per_cpu_mb)}")
    elif limits.mem_mb:
        parts.append(f"mem {fmt_mem(limits.mem_mb)}")
    return ", ".join(parts)


class Recovery:
    """The recovery state machine over the store's ``attempts`` table.  Thread-safe."""

    def __init__(
        self,
        store: Store,
        backend: Any,
        settings: HarpSettings | None = None,
        *,
        watch: Callable[[str, int], None],
        clock: Callable[[], float] = time.time,
        partitions: Callable[[], dict[str, PartitionInfo]] | None = None,
        gpu_planner: GpuPlanner | None = None,
    ) -> None:
        self.store = store
        # the DNN planner (injected by the daemon: harpd.dnn sits above recovery): a GPU out-of-memory's next try
        self._gpu = gpu_planner
        self.backend = backend
        self.settings = settings or HarpSettings()
        self.cfg = self.settings.recovery
        self.clock = clock
        # the poller's watch list (``harpd.ingest.poller.watch_job``): a job requeued in place is polled again
        self._watch = watch
        self._lock = threading.RLock()
        self._mode: str | None = None
        self._mode_certain = False
        self._open: set[str] | None = None  # chains that may need work; None: not scanned yet
        self._while_running = False  # deciding from the job's end hook (``run_ending``), under the lock
        # the daemon's one cache of scontrol's partitions (refreshed once a minute)
        self._partitions = partitions or cached_partitions(backend)
        # attempts waiting on a Slurm that does not answer (harpd.recovery.waiting), by chain
        self._waits = Waits(clock, float(self.settings.ingest.poll_interval_s), log)

    # ------------------------------------------------------------ wiring

    def schedule(self, scheduler: Any) -> Recovery:
        """Run ``tick`` on the daemon's scheduler, every poll interval."""
        scheduler.every(
            self.tick,
            self.settings.ingest.poll_interval_s,
            id="harp-recovery",
            name="harp recovery (finish interrupted attempts)",
        )
        log.info("recovery: on (mode %s, at most %d attempts)", self.cfg.mode, self.cfg.max_attempts)
        return self

    def mode(self) -> str:
        if self._mode is None or not self._mode_certain:
            mode, why, certain = resolve_mode(self.cfg.mode, self.backend)
            if mode != self._mode:
                log.info("recovery mode: %s (%s)", mode, why)
            self._mode, self._mode_certain = mode, certain
        return self._mode

    # ------------------------------------------------------------ entry points

    def on_outcome(self, rec: JobRecord) -> None:
        """Ingest listener: a run's outcome was stored (at least once per run)."""
        if not self.cfg.enabled or not rec.outcome.finished:
            return
        if rec.outcome == Outcome.PREEMPTED and rec.state == "REQUEUED":
            # requeued, by itself (submitit's checkpoint) or a preemption: the job runs again under its
            # id in the same attempt, and that run's end is the attempt's outcome (#51)
            return
        with self._lock:
            try:
                self._handle(rec)
            except SlurmError as exc:
                if not waiting_on_slurm(exc):
                    raise
                # the chain is open: the tick carries it on once Slurm answers
                chain = self.store.chain_of(rec.job_id) or rec.job_id
                self._waits.failed(chain, exc, f"job {chain}")

    def tick(self) -> None:
        """Scheduled: finish what a crash or a Slurm error left half done; never raises."""
        try:
            self.resume()
        except Exception:  # noqa: BLE001 - a scheduler job must not die
            log.exception("recovery tick failed")

    def resume(self) -> int:
        """Carry every open chain forward as far as Slurm allows; returns how many were looked at."""
        if not self.cfg.enabled:
            return 0
        with self._lock:
            if self._open is None:
                chains: dict[str, list[Attempt]] = {}
                for row in self.store.all_attempts():
                    a = Attempt.from_row(row)
                    chains.setdefault(a.chain, []).append(a)
                self._open = {c for c, attempts in chains.items() if self._is_open(attempts)}
            n = self._retry_owners()
            for chain in sorted(self._open):
                n += 1
                if not self._waits.due(chain):
                    continue  # waiting on Slurm: its back-off is not over
                wait = self._waits.get(chain)
                tries = 0 if wait is None else wait.tries
                try:
                    self._resume_chain(chain)
                    wait = self._waits.get(chain)
                    if wait is not None and (wait.tries == tries or chain not in self._open):
                        self._waits.answered(chain, f"job {chain}")  # Slurm answered this time
                except SlurmError as exc:
                    if waiting_on_slurm(exc):  # said once, asked again with back-off
                        self._waits.failed(chain, exc, f"job {chain}")
                    else:
                        log.warning("recovery of job %s: %s", chain, exc)
                except Exception as exc:  # noqa: BLE001 - one chain must not block the others
                    log.warning("recovery of job %s: %s", chain, exc)
            return n

    def run_ending(self, job_id: str, uid: int) -> tuple[Literal["requeued", "left"], str]:
        """The job's own end hook (``harpd.recovery.ending``): recover it now, while Slurm shows it running.

        Returns (``requeued`` or ``left``, why).  Only the job's owner (or
        root) may ask; harpd acts only on accounting's evidence that a step
        was killed for memory.  The chain is the one its outcome would have
        opened (the same decision, the same attempts table), so the poller's
        later announcement of this run finds the attempt already decided.
        """
        if not self.cfg.enabled:
            return "left", "recovery is off"
        sub = self.store.get_submission(job_id)
        if sub is None:
            return "left", "not submitted through harp-submit"
        if uid != 0 and sub.uid is not None and int(sub.uid) != int(uid):
            return "left", "not the job's owner"
        if self.mode() != REQUEUE:
            # a resubmission is a new job: never while this one still runs; after its end, from the poll
            return "left", "harpd recovers by resubmission here, once the job has ended"
        # a manager inside its job (Snakemake) runs the rule in a job step: wait for accounting to show it
        task = task_of(sub)
        rec = ran_out_of_memory(self.backend, job_id, expect_step=task is not None and task.manager_inside)
        if rec is None:
            return "left", "no step of it was killed for memory (Slurm's accounting)"
        with self._lock:
            rec.attempt = max(1, int(rec.attempt))
            before = {
                a.number for a in map(Attempt.from_row, self.store.attempts(self.store.chain_of(job_id) or job_id))
            }
            self._handle(rec, while_running=True)
            chain = self.store.chain_of(job_id) or job_id
            rows = self._rows(chain)
        new = [a for n, a in rows.items() if n not in before]
        if not new:
            last = rows[max(rows)] if rows else None
            why = (last.plan.stop if last is not None else None) or "not recovered (see harpd's log)"
            return "left", why
        row = new[-1]
        if row.step == REQUEUED:
            return "requeued", f"attempt {row.number} requeued with {_brief(row.plan.limits)}"
        return "left", row.plan.stop or f"attempt {row.number} {row.step}"

    # ------------------------------------------------------------ the machine

    def _rows(self, chain: str) -> dict[int, Attempt]:
        return {a.number: a for a in map(Attempt.from_row, self.store.attempts(chain))}

    @staticmethod
    def _is_open(attempts: list[Attempt]) -> bool:
        last = max(attempts, key=lambda a: a.number)
        if last.step != DONE:
            return True
        if last.plan.stop:
            return False
        # FAILED: undecided yet (a GPU out-of-memory is escalated, anything else stopped with its reason)
        return str(last.outcome or "") in {o.value for o in RESOURCE_OF} | {Outcome.FAILED.value}

    def _mark_open(self, chain: str) -> None:
        if self._open is not None:
            self._open.add(chain)

    def _resume_chain(self, chain: str) -> None:
        rows = self._rows(chain)
        if not rows:
            self._open.discard(chain)  # type: ignore[union-attr]
            return
        last = rows[max(rows)]
        if last.step == DECIDED:
            self._advance(last)
            last = self._rows(chain)[last.number]
        if last.step in (SUBMITTED, REQUEUED):
            self._catch_up(last)
        elif last.step == DONE:
            self._continue(chain, last.number)
        if not self._is_open(list(self._rows(chain).values())):
            self._open.discard(chain)  # type: ignore[union-attr]

    def _catch_up(self, row: Attempt) -> None:
        """An outcome the store has but recovery never heard of (lost announcement)."""
        if not row.job_id:
            return
        rec = self.store.get_job(row.job_id)
        if rec is None or not rec.outcome.finished or (rec.outcome == Outcome.PREEMPTED and rec.state == "REQUEUED"):
            return  # not ended, or requeued by itself: it runs again in this attempt
        if row.plan.mode == REQUEUE and rec.attempt - self.store.requeued_runs(rec.job_id, rec.attempt) < row.number:
            return  # the requeued run has not ended yet
        self._handle(rec)

    def _locate(self, rec: JobRecord) -> tuple[str, Attempt] | bool | None:
        """(chain, attempt row) of a run; None for a run of no chain; False for
        a run of a chain that matches none of its attempts (left alone)."""
        chain = self.store.chain_of(rec.job_id)
        if chain is None:
            return None
        rows = self._rows(chain)
        mine = sorted((a for a in rows.values() if a.job_id == rec.job_id), key=lambda a: a.number)
        if len(mine) == 1:
            return chain, mine[0]
        caused = self._caused_by(mine, rec)
        if caused is not None:
            return chain, caused
        exact = [a for a in mine if a.number == int(rec.attempt)]
        if exact:
            return chain, exact[0]
        live = [a for a in mine if a.step in (SUBMITTED, REQUEUED)]
        if live:
            return chain, live[0]
        log.info("job %s run %d matches no attempt of chain %s; left alone", rec.job_id, rec.attempt, chain)
        return False

    def _caused_by(self, mine: list[Attempt], rec: JobRecord) -> Attempt | None:
        """The attempt whose run ``rec`` is, among a job id's attempts (requeued in place), counting only
        the runs harp caused.

        A job that requeues itself (submitit's checkpoint) runs more often than
        harp requeued it, so its run numbers run ahead of the attempts' (#51:
        the run of attempt 1 that ran out of memory after the job's own requeue
        was taken for attempt 2, and a completed function was run again).  Its
        own requeues end runs REQUEUED, neither out of time nor memory: those
        are taken off the run's number.  None when no attempt has that number.
        """
        own = self.store.requeued_runs(rec.job_id, int(rec.attempt), rec.source)
        number = int(rec.attempt) - own
        exact = [a for a in mine if a.number == number]
        return exact[0] if own and exact else None

    def _handle(self, rec: JobRecord, while_running: bool = False) -> None:
        self._while_running = while_running
        try:
            self._handle_run(rec)
        finally:
            self._while_running = False

    def _handle_run(self, rec: JobRecord) -> None:
        found = self._locate(rec)
        if found is None:
            self._start_chain(rec)
            return
        if found is False:
            return
        chain, row = found  # type: ignore[misc]
        self._mark_open(chain)
        number = row.number
        if row.step == DECIDED:
            # its side effect happened before a crash and the run already ended
            self._advance(row)
            row = self._rows(chain)[number]
        if row.step in (SUBMITTED, REQUEUED):
            self._finish(row, rec)
        if self._rows(chain)[number].step == DONE:
            self._continue(chain, number)

    def _start_chain(self, rec: JobRecord) -> None:
        """A first run that ran out: open a chain if the job may be recovered."""
        gpu_candidate = self._gpu is not None and Outcome(rec.outcome) == Outcome.FAILED
        if Outcome(rec.outcome) not in RESOURCE_OF and not gpu_candidate:
            return
        sub = self.store.get_submission(rec.job_id)
        if gpu_candidate and not self._ran_out_of_gpu_memory(rec, sub):
            return
        if sub is not None and sub.chain_id not in (None, rec.job_id):
            return  # a resubmission: its chain follows it through the attempts table
        if sub is not None and rec.user is None:
            # slurmdbd fills in a run's owner a little after its end: unknown is
            # not a mismatch; wait for it (``_owner_known``) and compare then
            owned = self._with_owner(rec)
            if owned is None:
                return
            rec = owned
        if sub is not None and rec.user != sub.user:
            # a registration by someone other than the job's owner (a job id claimed
            # before it existed, when Slurm could not vouch for the owner) never
            # moves the owner's job, nor resubmits its script as the claimant
            log.warning(
                "job %s ran out but is not recovered: it ran as %s, registered by %s (uid %s)",
                rec.job_id,
                rec.user,
                sub.user,
                sub.uid,
            )
            return
        ok, why = eligible(rec.job_id, sub)
        if not ok:
            if sub is not None:
                log.info("job %s ran out (%s) but is not recovered: %s", rec.job_id, rec.outcome.value, why)
            return
        assert sub is not None
        chain = rec.job_id
        limits = first_limits(rec, sub)
        first = self._with_output(Plan(limits=limits), rec.job_id)
        with self.store.transaction():
            if self.store.add_attempt(
                chain, 1, rec.job_id, first.to_json(), f"first run; recovered because {why}", DONE
            ):
                self.store.update_attempt(chain, 1, outcome=rec.outcome.value)
        log.info(
            "job %s ran out of %s (limits %s): recovery starts",
            chain,
            RESOURCE_OF.get(Outcome(rec.outcome), "GPU memory"),
            _brief(limits),
        )
        self._mark_open(chain)
        crash_point("done")
        self._continue(chain, 1)

    # ------------------------------------------------------------ unknown owners

    def _awaiting(self) -> dict[str, float]:
        return dict(self.store.get_meta(AWAITING_OWNER_KEY, {}) or {})

    def _with_owner(self, rec: JobRecord) -> JobRecord | None:
        """``rec`` with its owner from Slurm; None (and remembered) while Slurm does not know it yet.

        The waiting list is in the store, so a restarted harpd still asks:
        the poller announced this outcome once and will not again.  Given up
        after ``OWNER_WAIT_S`` of answers without an owner; a Slurm that does
        not answer at all only delays the question.
        """
        user, answered = self._owner_from_slurm(rec.job_id)
        awaiting = self._awaiting()
        if user is not None:
            if rec.job_id in awaiting:
                awaiting.pop(rec.job_id)
                self.store.set_meta(AWAITING_OWNER_KEY, awaiting)
            rec.user = user
            return rec
        new = rec.job_id not in awaiting
        first = awaiting.setdefault(rec.job_id, self.clock())
        if answered and self.clock() - first > OWNER_WAIT_S:
            awaiting.pop(rec.job_id)
            self.store.set_meta(AWAITING_OWNER_KEY, awaiting)
            log.warning(
                "job %s ran out but is not recovered: Slurm did not name its owner within %d s",
                rec.job_id,
                OWNER_WAIT_S,
            )
            return None
        if new:
            self.store.set_meta(AWAITING_OWNER_KEY, awaiting)
            log.info("job %s ran out; its owner is not in Slurm's record yet: recovery waits for it", rec.job_id)
        return None

    def _owner_from_slurm(self, job_id: str) -> tuple[str | None, bool]:
        """(the job's owner as accounting, then slurmctld, reports it, or None; whether Slurm answered at all)."""
        answered = False
        try:
            for r in self.backend.sacct_jobs([job_id], None, None, True):
                if r.job_id == job_id and r.user:
                    return str(r.user), True
            answered = True
        except SlurmError as exc:
            answered = not waiting_on_slurm(exc)
            log.debug("owner of job %s: sacct failed (%s)", job_id, exc)
        try:
            return self.backend.show_job(job_id).user, True
        except SlurmError as exc:
            return None, answered or not waiting_on_slurm(exc)

    def _retry_owners(self) -> int:
        """Runs whose owner was unknown at their outcome: look again (every tick)."""
        n = 0
        for job_id in sorted(self._awaiting()):
            n += 1
            rec = self.store.get_job(job_id)
            if rec is None or not rec.outcome.finished:
                continue
            try:
                self._start_chain(rec)
            except Exception as exc:  # noqa: BLE001 - one job must not block the others
                log.warning("recovery of job %s: %s", job_id, exc)
        return n

    def _finish(self, row: Attempt, rec: JobRecord) -> None:
        """Record an attempt's outcome; later attempts' records get the chain's identity."""
        chain, number = row.chain, row.number
        enrich = number >= 2 and int(rec.attempt) == number
        if enrich:
            sub = self.store.get_submission(chain)
            job = {} if sub is None else sub.job
            rec.signature = rec.signature or job.get("signature")
            rec.job_name = rec.job_name or job.get("job_name")
            rec.harp_sized = True
        plan = self._with_output(row.plan, rec.job_id)
        with self.store.transaction():
            self.store.update_attempt(chain, number, outcome=rec.outcome.value, step=DONE, limits=plan.to_json())
            if enrich:
                self.store.insert_jobs([rec])
        log.info("job %s attempt %d (job %s) ended %s", chain, number, rec.job_id, rec.outcome.value)
        crash_point("done")

    def _with_output(self, plan: Plan, job_id: str) -> Plan:
        """``plan`` with where the run wrote its output, while slurmctld still knows (``harp status`` shows it).

        A requeued job writes every run to the same files (harp-submit asks
        for ``--open-mode=append`` so the earlier runs' messages stay there).
        """
        if plan.output:
            return plan
        try:
            info = self.backend.show_job(job_id)
        except (SlurmError, AttributeError):
            return plan
        if not info.std_out:
            return plan
        return plan.but(output=info.std_out, error=info.std_err if info.std_err != info.std_out else None)

    def _continue(self, chain: str, number: int) -> None:
        """After attempt ``number`` is done: decide the next one (once) and carry it out."""
        rows = self._rows(chain)
        nxt = rows.get(number + 1)
        if nxt is None:
            nxt = self._decide(chain, rows, number)
            if nxt is None:
                return
        if nxt.step == DECIDED:
            self._advance(nxt)

    def _stop(self, chain: str, number: int, reason: str) -> None:
        row = self._rows(chain)[number]
        if row.plan.stop:
            return
        self.store.update_attempt(chain, number, limits=row.plan.but(stop=reason).to_json())
        log.warning("job %s: no attempt %d: %s", chain, number + 1, reason)

    def _partition(self, name: str | None) -> PartitionInfo | None:
        return partition_of(self._partitions(), name)

    def _decide(self, chain: str, rows: dict[int, Attempt], number: int) -> Attempt | None:
        row = rows[number]
        if row.plan.stop:
            return None
        try:
            outcome = Outcome(row.outcome)
        except ValueError:
            return None
        if outcome == Outcome.COMPLETED:
            return None
        if outcome not in RESOURCE_OF:
            gpu = self._decide_gpu(chain, row, number)
            if gpu is not False:
                return gpu
            self._stop(chain, number, f"ended {outcome.value}: not caused by its limits, so not resubmitted")
            return None
        limits = row.plan.limits
        if row.job_id and number > 1:  # escalate from what the run really had (a floor lift, an extension)
            limits = as_ran(self.store.limit_changes(str(row.job_id), step="done"), row.created_at, limits)
        sub = self.store.get_submission(chain)
        task = task_of(sub)
        if task is not None and task.manager == "nextflow":
            self._stop(chain, number, LEFT_TO_NEXTFLOW)
            metrics.recovery("left_to_manager")
            return None
        retry = manager_retry(self.store, sub, task) if sub is not None and task is not None else None
        if retry is not None:
            self._stop(chain, number, LEFT_TO_MANAGER.format(job=retry))
            metrics.recovery("left_to_manager")
            return None
        part = self._partition(limits.partition)
        caps = Caps(
            max_attempts=self.cfg.max_attempts,
            partition_max_time_s=getattr(part, "max_time_s", None),
            node_mem_mb=getattr(part, "max_mem_mb_per_node", None),
            cfg_max_time_s=self.cfg.max_time_s,
            cfg_max_mem_mb=self.cfg.max_mem_mb,
            partition=getattr(part, "name", None) or limits.partition,
            request_factor=self.cfg.max_request_factor,
        )
        nxt = next_limits(outcome, number, limits, _original(sub), caps)
        if nxt.limits is None:
            self._stop(chain, number, nxt.reason)
            metrics.recovery("gave_up")
            return None
        failed_job = str(row.job_id)
        # a run in a larger GPU configuration (gpu_escalation) keeps it when its time or memory is raised
        plan = Plan(limits=nxt.limits, escalated=nxt.resource, comment=marker(chain, number + 1), gpu=row.plan.gpu)
        job_id: str | None = None
        requeue_on: bool | None = None
        slurm_limit: int | None = None
        mode = self.mode()
        if mode == REQUEUE:
            try:
                info = self.backend.show_job(failed_job)
            except SlurmError as exc:
                if "invalid job id" not in str(exc).lower():
                    raise
                mode = RESUBMIT
                plan = plan.but(
                    note=f"job {failed_job} had left slurmctld (MinJobAge): resubmitted instead of requeued"
                )
            else:
                plan = plan.but(restarts_before=info.restarts, while_running=True if self._while_running else None)
                job_id = failed_job
                requeue_on = info.requeue
                slurm_limit = info.time_limit_s
        if task is not None and mode == RESUBMIT:
            self._stop(chain, number, NO_RESUBMIT)
            metrics.recovery("left_to_manager")
            return None
        reason = nxt.reason
        if mode == REQUEUE and outcome == Outcome.TIMEOUT:
            resumed = self._resumed(failed_job, limits, sub, part, number, requeue_on, slurm_limit)
            if resumed is not None:  # it checkpointed: the same limit again, charged only the lost time
                plan = plan.but(limits=limits.but(time_s=resumed.time_s), charged_s=resumed.charged_s)
                reason = resumed.reason
        plan = plan.but(mode=mode)
        if self.store.add_attempt(chain, number + 1, job_id, plan.to_json(), reason, DECIDED):
            log.info("job %s: attempt %d decided (%s): %s", chain, number + 1, mode, reason)
        crash_point("decided")
        return self._rows(chain)[number + 1]

    def _ran_out_of_gpu_memory(self, rec: JobRecord, sub: Submission | None) -> bool:
        """Whether a FAILED run ran out of GPU memory (the injected planner's test; False without one)."""
        if self._gpu is None or sub is None or Outcome(rec.outcome) != Outcome.FAILED:
            return False
        try:
            return self._gpu.ran_out(rec, sub)
        except Exception as exc:  # noqa: BLE001 - a planner's fault must not stop the poller's listener
            log.warning("job %s: GPU out-of-memory check failed: %s", rec.job_id, exc)
            return False

    def _decide_gpu(self, chain: str, row: Attempt, number: int) -> Attempt | Literal[False] | None:
        """After a FAILED attempt: the next one in a larger GPU configuration (``gpu_escalation``).

        False when the run did not run out of GPU memory (the caller stops the
        chain as for any failure).  Always a resubmission, even where harpd
        requeues: the new configuration's environment (``HARP_DNN_ZERO``) is
        the new job's, and a requeued job keeps its own.
        """
        rec = self.store.get_job(str(row.job_id)) if row.job_id else None
        run_sub = self.store.get_submission(str(row.job_id)) if row.job_id else None
        if rec is None or run_sub is None or not self._ran_out_of_gpu_memory(rec, run_sub):
            return False
        assert self._gpu is not None
        try:
            proposal = self._gpu.propose(rec, run_sub)
        except Exception as exc:  # noqa: BLE001 - one line in the chain, never a loop
            log.warning("job %s: GPU planner failed: %s", rec.job_id, exc)
            self._stop(chain, number, f"ran out of GPU memory; the GPU planner failed: {exc}")
            return None
        step = next_gpu_step(proposal, number, self.cfg.max_attempts)
        if step is None:
            return False
        if step.stop or step.proposal is None or step.proposal.next is None:
            self._stop(chain, number, step.reason)
            metrics.recovery("gave_up")
            return None
        if task_of(self.store.get_submission(chain)) is not None:
            self._stop(chain, number, NO_RESUBMIT)
            metrics.recovery("left_to_manager")
            return None
        p = step.proposal
        limits = row.plan.limits.but(partition=p.options.get("partition") or row.plan.limits.partition)
        if p.next is not None and p.next.nodes:
            limits = limits.but(nodes=p.next.nodes)
        gpu = {
            "options": {k: v for k, v in p.options.items() if k != "partition"},
            "env": dict(p.env),
            "from": p.failed.to_json(),
            "to": p.next.to_json() if p.next is not None else None,
            "dnn": dict(p.dnn),
        }
        plan = Plan(limits=limits, escalated=GPU, comment=marker(chain, number + 1), mode=RESUBMIT, gpu=gpu)
        if self.mode() == REQUEUE:
            plan = plan.but(note="a larger GPU configuration is a new job with its own environment: resubmitted")
        if self.store.add_attempt(chain, number + 1, None, plan.to_json(), step.reason, DECIDED):
            log.info("job %s: attempt %d decided (%s): %s", chain, number + 1, RESUBMIT, step.reason)
        crash_point("decided")
        return self._rows(chain)[number + 1]

    def _resumed(
        self,
        job_id: str,
        limits: AttemptLimits,
        sub: Submission | None,
        part: PartitionInfo | None,
        number: int,
        requeue_on: bool | None = None,
        slurm_limit: int | None = None,
    ) -> Any:
        """The resume of a run signalled to checkpoint before it ran out (harpd.recovery.resume), or None.

        Signalled by harpd (a ``CHECKPOINT_SIGNAL`` row of that run), or by
        Slurm: the job's own ``--signal`` with ``--requeue``, which slurmctld
        confirms will requeue (``requeue_on``: ``Requeue=1``), sent
        ``signal_s`` before ``slurm_limit`` (the limit that ran out).
        """
        if not limits.time_s:
            return None
        rec = self.store.get_job(job_id)
        used = None if rec is None else rec.used_time_s
        signal = last_signal(self.store, job_id)
        if (
            signal is not None
            and rec is not None
            and rec.start_time
            and int(signal.old_time_s) < int(rec.start_time) - 5
        ):
            signal = None  # signalled in an earlier run, not in the one that ran out
        at: float | None = None if signal is None else float(signal.new_time_s)
        original = _original(sub)
        if at is None and requeue_on is True and signal_declared(original.signal_s, original.requeue):
            at = slurm_signal_at(slurm_limit or limits.time_s, original.signal_s, used)
        if at is None:
            return None
        caps = [c for c in (getattr(part, "max_time_s", None), self.cfg.max_time_s) if c]
        return resumed_time(
            float(limits.time_s),
            used,
            at,
            original.time_s,
            min(caps) if caps else None,
            number,
            self.cfg.max_attempts,
        )

    # ------------------------------------------------------------ side effects

    def _still_ours(self, chain: str) -> None:
        """Right before the requeue: Stop if the task's manager has submitted it again since the decision.

        Decided at the moment of acting: the decision may be seconds old
        (``requeue.SETTLE_S``), and a manager polling sacct retries within them.
        """
        sub = self.store.get_submission(chain)
        task = task_of(sub)
        retry = manager_retry(self.store, sub, task) if sub is not None and task is not None else None
        if retry is not None:
            raise Stop(LEFT_TO_MANAGER.format(job=retry))

    def _advance(self, row: Attempt) -> None:
        """Carry out a decided attempt, finding out first what a crash already did.

        A Slurm that does not answer, or whose accounting has no record of
        the job yet, is waited for (``_wait``), backing off; only a refusal
        counts towards ``MAX_FAILURES``.
        """
        chain, number = row.chain, row.number
        if not self._waits.due(chain):
            return
        try:
            self._carry_out(row)
        except Stop as stop:
            now = self._rows(chain)[number]  # as the side effect left it (a fallback to resubmit, a hold)
            self._end(now, now.plan, str(stop))
            log.warning("job %s: attempt %d not carried out: %s", chain, number, stop)
        except (SlurmError, OSError) as exc:
            if waiting_on_slurm(exc):
                self._wait(self._rows(chain)[number], exc)
                return
            self._waits.answered(chain, f"job {chain}: attempt {number}")
            self._failed(self._rows(chain)[number], exc)
        else:
            self._answered(chain, number)

    def _carry_out(self, row: Attempt) -> None:
        """The side effect of a decided attempt: requeue, else (or when requeue falls back) resubmit."""
        chain, number = row.chain, row.number
        plan = row.plan
        if plan.mode == REQUEUE:
            try:
                requeue(
                    self.store,
                    self.backend,
                    self._watch,
                    row,
                    plan,
                    self.clock,
                    before_hold=lambda: self._still_ours(chain),
                )
                return
            except NotYet as wait:
                log.info("job %s attempt %d: %s", chain, number, wait)
                return
            except Fallback as fb:
                plan = plan.but(mode=RESUBMIT, note=str(fb), restarts_before=None)
                self.store.update_attempt(chain, number, limits=plan.to_json(), job_id=None)
                log.warning("job %s attempt %d: %s; resubmitting instead", chain, number, fb)
                row = self._rows(chain)[number]
        resubmit(self.store, self.backend, row, plan, self._rows(chain).get(number - 1), self.clock)

    def _end(self, row: Attempt, plan: Plan, reason: str) -> None:
        """The decided attempt is not carried out, for good: its chain ends here, ``reason`` saying why."""
        with self.store.transaction():
            self.store.update_attempt(
                row.chain, row.number, limits=plan.but(stop=reason).to_json(), step=DONE, outcome=NOT_SUBMITTED
            )
        self._waits.forget(row.chain)
        metrics.recovery("gave_up")

    def _failed(self, row: Attempt, exc: BaseException) -> None:
        """Slurm refused the side effect (or it could not run): tried again, up to ``MAX_FAILURES`` times."""
        chain, number, plan = row.chain, row.number, row.plan
        failures = int(plan.failures or 0) + 1
        if failures >= MAX_FAILURES:
            reason = f"gave up after {failures} failed tries: {exc}"
            self._end(row, plan.but(failures=failures), reason)
            log.error("job %s: attempt %d %s", chain, number, reason)
        else:
            self.store.update_attempt(chain, number, limits=plan.but(failures=failures, last_error=str(exc)).to_json())
            log.warning(
                "job %s: attempt %d not carried out yet (try %d of %d): %s",
                chain,
                number,
                failures,
                MAX_FAILURES,
                exc,
            )

    def _wait(self, row: Attempt, exc: SlurmError) -> None:
        """Slurm did not answer, or has no record of the job yet: ask again later, for ``slurm_wait_h``.

        The row keeps since when (a restarted harpd goes on counting); it is
        written when the wait's state changes, not on every try.  Only
        accounting's "no record" for the whole ``slurm_wait_h`` ends the chain:
        a Slurm that answers nothing says nothing about the job.
        """
        chain, number, plan = row.chain, row.number, row.plan
        now = self.clock()
        what = f"job {chain}: attempt {number}"
        w, changed = self._waits.failed(chain, exc, what, since=plan.waiting_since)
        missing_since = plan.missing_since
        if isinstance(exc, NotRecordedYet):
            missing_since = missing_since if missing_since is not None else now
            window_s = float(self.cfg.slurm_wait_h) * 3600
            if now - missing_since >= window_s:
                reason = (
                    f"Slurm no longer knows the job: {exc}, for {self.cfg.slurm_wait_h:g} h "
                    "(recovery.slurm_wait_h), and harp resubmits only from Slurm's own copies: not run again"
                )
                self._end(row, plan.but(waiting=None), reason)
                log.error("job %s: attempt %d given up: %s", chain, number, reason)
                return
        if changed or plan.waiting is None or missing_since != plan.missing_since:
            since = plan.waiting_since if plan.waiting_since is not None else w.since
            self.store.update_attempt(
                chain,
                number,
                limits=plan.but(waiting=str(exc), waiting_since=since, missing_since=missing_since).to_json(),
            )

    def _answered(self, chain: str, number: int) -> None:
        """The side effect went through: a wait on Slurm before it ends, its length kept for ``harp status``."""
        self._waits.answered(chain, f"job {chain}: attempt {number}")
        row = self._rows(chain).get(number)
        if row is None or row.plan.waiting_since is None:
            return
        waited = max(0, int(self.clock() - float(row.plan.waiting_since)))
        plan = row.plan.but(waiting=None, waiting_since=None, missing_since=None, waited_s=waited)
        self.store.update_attempt(chain, number, limits=plan.to_json())

    def waiting_on_slurm(self) -> list[Wait]:
        """The attempts waiting on Slurm now (``harp health`` counts them); never waits for a tick to end."""
        return self._waits.all()


def make(
    *,
    settings: HarpSettings,
    store: Store,
    backend: Any,
    watch: Callable[[str, int], None],
    partitions: Callable[[], dict[str, PartitionInfo]] | None = None,
    gpu_planner: GpuPlanner | None = None,
) -> Recovery | None:
    """harpd's recovery (None when disabled or without Slurm), to be heard by the poller and scheduled.

    ``watch``: the poller's watch list over the store (``harpd.ingest.poller.watch_job``).
    """
    if not settings.recovery.enabled:
        log.info("recovery: off (recovery.enabled = false)")
        return None
    if backend is None:
        log.warning("recovery: off (no Slurm backend)")
        return None
    return Recovery(store, backend, settings, watch=watch, partitions=partitions, gpu_planner=gpu_planner)
