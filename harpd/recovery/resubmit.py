"""Automatic recovery: give a job that ran out of time or memory another attempt.

Driven by the ingest poller: ``Recovery.on_outcome`` is one of its
``on_outcome`` listeners.  When a recoverable job (``policy.eligible``) ends
TIMEOUT or OOM, the resource that ran out is doubled (``policy.next_limits``
around ``escalation.next_allocation``) and the job runs again, in one of two
ways (``mode.resolve_mode``):

* ``requeue``: the same job id and user: ``scontrol requeuehold``, update
  ``TimeLimit``/``MinMemoryNode``/``Comment``/``StartTime=now``, ``release``;
  the ingest poller is told to ``watch`` the id for its next run;
* ``resubmit``: a new job, as the owner, with the registered sbatch arguments
  and the script Slurm stored (``sbatch_argv``), registered as a submission of
  its own with ``chain_id`` = the first job, so the poller follows it too.

Exactly once.  Every attempt is a row of the store's ``attempts`` table
(unique ``(chain_id, attempt)``), moved through persisted steps::

    decided --(requeue: scontrol)--> requeued --(outcome)--> done
    decided --(resubmit: sbatch)---> submitted --(outcome)--> done

``decided`` is committed BEFORE the side effect, with everything the side
effect needs (limits, mode, the marker comment ``harp retry N of CHAIN``,
for requeue the job's restart count); ``submitted``/``requeued`` AFTER it.
Whatever is left ``decided`` by a crash is finished at restart (and on every
tick) by asking Slurm what already happened, never by repeating blindly:

* requeue: ``scontrol show job`` tells whether the requeue happened (its
  ``Restarts`` grew past the recorded count), whether the job is still held
  (then the limits are updated again, idempotently, and it is released) or
  already released;
* resubmit: a job carrying the marker comment (``squeue --states=all`` and
  ``sacct``) is the resubmission made before the crash: it is adopted, not
  submitted again.  A search that fails submits nothing.

The ingest poller announces each outcome at least once (again after a
crash), and deciding attempt N+1 is an ``INSERT ... ON CONFLICT DO NOTHING``,
so a repeated announcement can neither decide twice nor skip a decision.

Tests kill the process between the steps: ``HARP_TEST_CRASH_AT=<point>``
(one of ``CRASH_POINTS``) SIGKILLs harpd right there.

Every attempt's Slurm record is stored by the poller like any job's (a
TIMEOUT at limit L is censored: the job needs more than L); records of later
attempts get the chain's signature and ``harp_sized`` so the models learn
from them as from the first.  Why each step happened is the ``reason`` of
its row; why a chain stopped is ``limits.stop`` of its last row (``harp
status JOBID`` shows both).
"""

from __future__ import annotations

import logging
import os
import pwd
import signal
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from harpd.config import HarpSettings
from harpd.recovery.escalation import RESOURCE_OF
from harpd.recovery.mode import REQUEUE, RESUBMIT, resolve_mode
from harpd.recovery.policy import MEM_KEYS, eligible, first_limits, fmt_mem, fmt_time, next_limits
from harpd.recovery.sbatch_argv import ArgvError, resubmit_argv
from harpd.records import JobRecord, Outcome
from harpd.slurm.base import SlurmError

log = logging.getLogger("harpd.recovery")

__all__ = [
    "Recovery", "make", "marker", "CRASH_ENV", "CRASH_POINTS",
    "DECIDED", "SUBMITTED", "REQUEUED", "DONE", "NOT_SUBMITTED",
]

DECIDED = "decided"
SUBMITTED = "submitted"
REQUEUED = "requeued"
DONE = "done"
NOT_SUBMITTED = "not_submitted"  # outcome of a decided attempt that could not be carried out

CRASH_ENV = "HARP_TEST_CRASH_AT"
#: where HARP_TEST_CRASH_AT may kill harpd: after the decision's commit, after
#: each Slurm side effect (before its commit), after that commit, after an
#: attempt's outcome is committed (before the next decision)
CRASH_POINTS = ("decided", "held", "updated", "released", "submitted", "committed", "done")

#: a decided attempt whose side effect keeps failing is given up after this many tries
MAX_FAILURES = 20
#: how far before the decision the marker search looks in accounting (clock skew, slow sacct)
SEARCH_SLACK_S = 600.0
_FINISHED_STATES = frozenset(
    {"COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "CANCELLED", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE"}
)
_PERMANENT = ("access/permission denied", "permission denied", "invalid", "not supported", "disabled")


def marker(chain: str, attempt: int) -> str:
    """The Slurm comment of attempt ``attempt`` of ``chain``: visible to users, searchable after a crash."""
    return f"harp retry {attempt} of {chain}"


def crash_point(name: str) -> None:
    """Die like ``kill -9`` here when HARP_TEST_CRASH_AT names this point (tests only)."""
    if os.environ.get(CRASH_ENV) == name:
        log.critical("%s=%s: killing harpd (test crash point)", CRASH_ENV, name)
        logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)  # never returns


class _Stop(Exception):
    """The decided attempt cannot be carried out, now or later: the chain ends (reason)."""


class _Fallback(Exception):
    """Requeue is impossible and nothing was done: resubmit instead (reason)."""


def _mb(text: str | None) -> int | None:
    """scontrol's ``100M``/``2G``/``1.50T`` -> MiB."""
    if not text:
        return None
    t = text.strip().upper()
    mult = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}.get(t[-1:], None)
    num = t[:-1] if mult is not None else t
    try:
        return int(round(float(num) * (mult or 1)))
    except ValueError:
        return None


def _duration_s(text: str | None) -> int | None:
    from harpd.slurm.sacct_parse import duration_s

    v = duration_s(text) if text else None
    return None if v is None else int(round(v))


def _value(info: dict[str, str], key: str) -> str | None:
    v = (info.get(key) or "").strip()
    return None if v in ("", "(null)", "N/A", "None") else v


class Recovery:
    """The recovery state machine over the store's ``attempts`` table.  Thread-safe."""

    def __init__(
        self,
        store: Any,
        backend: Any,
        settings: HarpSettings | None = None,
        *,
        watch: Callable[[str, int], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.backend = backend
        self.settings = settings or HarpSettings()
        self.cfg = self.settings.recovery
        self.clock = clock
        self._watch = watch
        self._attached = threading.Event()
        if watch is not None:
            self._attached.set()
        self._lock = threading.RLock()
        self._mode: str | None = None
        self._mode_certain = False
        self._open: set[str] | None = None  # chains that may need work; None: not scanned yet
        self._partitions: tuple[float, dict[str, Any]] | None = None

    # ------------------------------------------------------------ wiring

    def attach(self, ingest_service: Any) -> "Recovery":
        """Bind to the running poller: its ``watch`` and a periodic ``tick``."""
        ingestor = ingest_service.ingestor
        self._watch = ingestor.watch
        self._attached.set()
        scheduler = getattr(ingest_service, "scheduler", None)
        if scheduler is not None:
            scheduler.add_job(
                self.tick,
                "interval",
                seconds=float(self.settings.ingest.poll_interval_s),
                id="harp-recovery",
                name="harp recovery (finish interrupted attempts)",
                replace_existing=True,
                max_instances=1,
                coalesce=True,
                next_run_time=datetime.now(),
            )
        log.info("recovery: on (mode %s, at most %d attempts)", self.cfg.mode, self.cfg.max_attempts)
        return self

    def shutdown(self) -> None:
        """Nothing to stop: the poller's scheduler runs the ticks."""

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
        if not self._attached.wait(60):
            log.error("recovery: not attached to the poller; outcome of job %s left for the next tick", rec.job_id)
            return
        with self._lock:
            self._handle(rec)

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
                chains: dict[str, list[dict[str, Any]]] = {}
                for row in self.store.all_attempts():
                    chains.setdefault(str(row["chain_id"]), []).append(row)
                self._open = {c for c, rows in chains.items() if self._is_open(rows)}
            n = 0
            for chain in sorted(self._open):
                n += 1
                try:
                    self._resume_chain(chain)
                except Exception as exc:  # noqa: BLE001 - one chain must not block the others
                    log.warning("recovery of job %s: %s", chain, exc)
            return n

    # ------------------------------------------------------------ the machine

    def _rows(self, chain: str) -> dict[int, dict[str, Any]]:
        return {int(r["attempt"]): r for r in self.store.attempts(chain)}

    @staticmethod
    def _is_open(rows: list[dict[str, Any]]) -> bool:
        last = max(rows, key=lambda r: int(r["attempt"]))
        if last["step"] != DONE:
            return True
        if (last.get("limits") or {}).get("stop"):
            return False
        return str(last.get("outcome") or "") in {o.value for o in RESOURCE_OF}

    def _mark_open(self, chain: str) -> None:
        if self._open is not None:
            self._open.add(chain)

    def _resume_chain(self, chain: str) -> None:
        rows = self._rows(chain)
        if not rows:
            self._open.discard(chain)  # type: ignore[union-attr]
            return
        last = rows[max(rows)]
        if last["step"] == DECIDED:
            self._advance(chain, last)
            last = self._rows(chain)[int(last["attempt"])]
        if last["step"] in (SUBMITTED, REQUEUED):
            self._catch_up(chain, last)
        elif last["step"] == DONE:
            self._continue(chain, int(last["attempt"]))
        if not self._is_open(list(self._rows(chain).values())):
            self._open.discard(chain)  # type: ignore[union-attr]

    def _catch_up(self, chain: str, row: dict[str, Any]) -> None:
        """An outcome the store has but recovery never heard of (lost announcement)."""
        jid = row.get("job_id")
        if not jid:
            return
        rec = self.store.get_job(str(jid))
        if rec is None or not rec.outcome.finished:
            return
        if row["limits"].get("mode") == REQUEUE and rec.attempt < int(row["attempt"]):
            return  # the requeued run has not ended yet
        self._handle(rec)

    def _locate(self, rec: JobRecord) -> tuple[str, dict[str, Any]] | None | bool:
        """(chain, attempt row) of a run; None for a run of no chain; False for
        a run of a chain that matches none of its attempts (left alone)."""
        chain = self.store.chain_of(rec.job_id)
        if chain is None:
            return None
        rows = self._rows(chain)
        mine = [r for r in rows.values() if str(r.get("job_id")) == rec.job_id]
        if len(mine) == 1:
            return chain, mine[0]
        exact = [r for r in mine if int(r["attempt"]) == int(rec.attempt)]
        if exact:
            return chain, exact[0]
        live = [r for r in mine if r["step"] in (SUBMITTED, REQUEUED)]
        if live:
            return chain, live[0]
        log.info("job %s run %d matches no attempt of chain %s; left alone", rec.job_id, rec.attempt, chain)
        return False

    def _handle(self, rec: JobRecord) -> None:
        found = self._locate(rec)
        if found is None:
            self._start_chain(rec)
            return
        if found is False:
            return
        chain, row = found  # type: ignore[misc]
        self._mark_open(chain)
        attempt = int(row["attempt"])
        if row["step"] == DECIDED:
            # its side effect happened before a crash and the run already ended
            self._advance(chain, row)
            row = self._rows(chain)[attempt]
        if row["step"] in (SUBMITTED, REQUEUED):
            self._finish(chain, row, rec)
        if self._rows(chain)[attempt]["step"] == DONE:
            self._continue(chain, attempt)

    def _start_chain(self, rec: JobRecord) -> None:
        """A first run that ran out: open a chain if the job may be recovered."""
        if Outcome(rec.outcome) not in RESOURCE_OF:
            return
        sub = self.store.get_submission(rec.job_id)
        if sub is not None and sub.get("chain_id") not in (None, rec.job_id):
            return  # a resubmission: its chain follows it through the attempts table
        if sub is not None and rec.user != sub.get("user"):
            # a registration by someone other than the job's owner (a job id claimed
            # before it existed, when Slurm could not vouch for the owner) never
            # moves the owner's job, nor resubmits its script as the claimant
            log.warning("job %s ran out but is not recovered: it ran as %s, registered by %s (uid %s)",
                        rec.job_id, rec.user, sub.get("user"), sub.get("uid"))
            return
        ok, why = eligible(rec.job_id, sub)
        if not ok:
            if sub is not None:
                log.info("job %s ran out (%s) but is not recovered: %s", rec.job_id, rec.outcome.value, why)
            return
        assert sub is not None
        chain = rec.job_id
        limits = first_limits(rec, sub)
        with self.store.transaction():
            if self.store.add_attempt(chain, 1, rec.job_id, limits, f"first run; recovered because {why}", DONE):
                self.store.update_attempt(chain, 1, outcome=rec.outcome.value)
        log.info("job %s ran out of %s (limits %s): recovery starts", chain, RESOURCE_OF[Outcome(rec.outcome)], _brief(limits))
        self._mark_open(chain)
        crash_point("done")
        self._continue(chain, 1)

    def _finish(self, chain: str, row: dict[str, Any], rec: JobRecord) -> None:
        """Record an attempt's outcome; later attempts' records get the chain's identity."""
        attempt = int(row["attempt"])
        enrich = attempt >= 2 and int(rec.attempt) == attempt
        if enrich:
            sub = self.store.get_submission(chain) or {}
            job = sub.get("job") or {}
            rec.signature = rec.signature or job.get("signature")
            rec.job_name = rec.job_name or job.get("job_name")
            rec.harp_sized = True
        with self.store.transaction():
            self.store.update_attempt(chain, attempt, outcome=rec.outcome.value, step=DONE)
            if enrich:
                self.store.insert_jobs([rec])
        log.info("job %s attempt %d (job %s) ended %s", chain, attempt, rec.job_id, rec.outcome.value)
        crash_point("done")

    def _continue(self, chain: str, attempt: int) -> None:
        """After attempt ``attempt`` is done: decide the next one (once) and carry it out."""
        rows = self._rows(chain)
        nxt = rows.get(attempt + 1)
        if nxt is None:
            nxt = self._decide(chain, rows, attempt)
            if nxt is None:
                return
        if nxt["step"] == DECIDED:
            self._advance(chain, nxt)

    def _stop(self, chain: str, attempt: int, reason: str) -> None:
        row = self._rows(chain)[attempt]
        limits = dict(row.get("limits") or {})
        if limits.get("stop"):
            return
        limits["stop"] = reason
        self.store.update_attempt(chain, attempt, limits=limits)
        log.warning("job %s: no attempt %d: %s", chain, attempt + 1, reason)

    def _partition(self, name: str | None) -> Any:
        now = time.monotonic()
        if self._partitions is None or now - self._partitions[0] > 60:
            self._partitions = (now, self.backend.partitions())
        parts = self._partitions[1]
        if name and name in parts:
            return parts[name]
        return next((p for p in parts.values() if getattr(p, "default", False)), None)

    def _decide(self, chain: str, rows: dict[int, dict[str, Any]], attempt: int) -> dict[str, Any] | None:
        row = rows[attempt]
        if (row.get("limits") or {}).get("stop"):
            return None
        try:
            outcome = Outcome(row.get("outcome"))
        except ValueError:
            return None
        if outcome == Outcome.COMPLETED:
            return None
        if outcome not in RESOURCE_OF:
            self._stop(chain, attempt, f"ended {outcome.value}: not caused by its limits, so not resubmitted")
            return None
        limits = dict(row["limits"] or {})
        limits.pop("stop", None)
        sub = self.store.get_submission(chain) or {}
        part = self._partition(limits.get("partition"))
        nxt = next_limits(
            outcome,
            attempt,
            {k: v for k, v in limits.items() if k in ("time_s", "partition", "nodes", "cpus_per_node", *MEM_KEYS)},
            sub.get("original"),
            max_attempts=self.cfg.max_attempts,
            partition_max_time_s=getattr(part, "max_time_s", None),
            node_mem_mb=getattr(part, "max_mem_mb_per_node", None),
            cfg_max_time_s=self.cfg.max_time_s,
            cfg_max_mem_mb=self.cfg.max_mem_mb,
            partition=getattr(part, "name", None) or limits.get("partition"),
        )
        if nxt.limits is None:
            self._stop(chain, attempt, nxt.reason)
            return None
        failed_job = str(row["job_id"])
        plan: dict[str, Any] = {**nxt.limits, "escalated": nxt.resource, "comment": marker(chain, attempt + 1)}
        job_id: str | None = None
        mode = self.mode()
        if mode == REQUEUE:
            try:
                info = self.backend.show_job(failed_job)
            except SlurmError as exc:
                if "invalid job id" not in str(exc).lower():
                    raise
                mode = RESUBMIT
                plan["note"] = f"job {failed_job} had left slurmctld (MinJobAge): resubmitted instead of requeued"
            else:
                plan["restarts_before"] = int(_value(info, "Restarts") or 0)
                job_id = failed_job
        plan["mode"] = mode
        if self.store.add_attempt(chain, attempt + 1, job_id, plan, nxt.reason, DECIDED):
            log.info("job %s: attempt %d decided (%s): %s", chain, attempt + 1, mode, nxt.reason)
        crash_point("decided")
        return self._rows(chain)[attempt + 1]

    # ------------------------------------------------------------ side effects

    def _advance(self, chain: str, row: dict[str, Any]) -> None:
        """Carry out a decided attempt, finding out first what a crash already did."""
        attempt = int(row["attempt"])
        plan = dict(row["limits"] or {})
        try:
            if plan.get("mode") == REQUEUE:
                try:
                    self._requeue(chain, row, plan)
                    return
                except _Fallback as fb:
                    plan = {**plan, "mode": RESUBMIT, "note": str(fb)}
                    plan.pop("restarts_before", None)
                    self.store.update_attempt(chain, attempt, limits=plan, job_id=None)
                    log.warning("job %s attempt %d: %s; resubmitting instead", chain, attempt, fb)
                    row = self._rows(chain)[attempt]
            self._resubmit(chain, row, plan)
        except _Stop as stop:
            reason = str(stop)
            with self.store.transaction():
                self.store.update_attempt(chain, attempt, limits={**plan, "stop": reason}, step=DONE, outcome=NOT_SUBMITTED)
            log.warning("job %s: attempt %d not carried out: %s", chain, attempt, reason)
        except (SlurmError, OSError) as exc:
            failures = int(plan.get("failures") or 0) + 1
            if failures >= MAX_FAILURES:
                reason = f"gave up after {failures} failed tries: {exc}"
                with self.store.transaction():
                    self.store.update_attempt(chain, attempt, limits={**plan, "failures": failures, "stop": reason},
                                              step=DONE, outcome=NOT_SUBMITTED)
                log.error("job %s: attempt %d %s", chain, attempt, reason)
            else:
                self.store.update_attempt(chain, attempt, limits={**plan, "failures": failures, "last_error": str(exc)})
                log.warning("job %s: attempt %d not carried out yet (try %d of %d): %s",
                            chain, attempt, failures, MAX_FAILURES, exc)

    # requeue in place ---------------------------------------------------

    def _requeue(self, chain: str, row: dict[str, Any], plan: dict[str, Any]) -> None:
        attempt = int(row["attempt"])
        jid = str(row["job_id"])
        before = int(plan.get("restarts_before") or 0)
        try:
            info = self.backend.show_job(jid)
        except SlurmError as exc:
            if "invalid job id" not in str(exc).lower():
                raise
            info = None
        if info is None:
            # purged from slurmctld: accounting tells whether it ran again
            runs = [r for r in self.backend.sacct_jobs([jid], None, None, True) if r.job_id == jid]
            if len(runs) > before + 1:
                self._commit_requeue(chain, attempt, jid)
                return
            raise _Fallback(f"job {jid} left slurmctld (MinJobAge) before harp could requeue it")
        restarts = int(_value(info, "Restarts") or 0)
        if restarts <= before:
            state = (_value(info, "JobState") or "").split()[0] if _value(info, "JobState") else ""
            if state not in _FINISHED_STATES:
                raise SlurmError(f"job {jid} is {state or 'in an unknown state'}, not finished: requeue later")
            try:
                self.backend.requeue_hold(jid)
            except SlurmError as exc:
                again = self.backend.show_job(jid)
                if int(_value(again, "Restarts") or 0) <= before:
                    if any(p in str(exc).lower() for p in _PERMANENT):
                        raise _Fallback(f"scontrol requeuehold {jid} refused ({exc})") from None
                    raise
            crash_point("held")
            info = self.backend.show_job(jid)
        if self._held(info):
            fields = self._updates(info, plan)
            try:
                self.backend.update_job(jid, **fields)
            except SlurmError as exc:
                if any(p in str(exc).lower() for p in _PERMANENT):
                    raise _Stop(
                        f"Slurm refused the new limits ({exc}); job {jid} is left held: "
                        f"`scontrol release {jid}` runs it unchanged, `scancel {jid}` drops it"
                    ) from None
                raise
            crash_point("updated")
            info = self.backend.show_job(jid)
            left = {k: v for k, v in self._updates(info, plan).items() if k not in ("StartTime", "Comment")}
            if left:
                raise _Stop(
                    f"Slurm did not apply {', '.join(f'{k}={v}' for k, v in left.items())} (not an operator?); "
                    f"job {jid} is left held: `scontrol release {jid}` runs it unchanged, `scancel {jid}` drops it"
                )
            self.backend.release(jid)
            crash_point("released")
        self._commit_requeue(chain, attempt, jid)

    @staticmethod
    def _held(info: dict[str, str]) -> bool:
        state = (_value(info, "JobState") or "").upper()
        reason = (_value(info, "Reason") or "").lower()
        return state.startswith("REQUEUE_HOLD") or (state.startswith("PENDING") and "held" in reason)

    @staticmethod
    def _updates(info: dict[str, str], plan: dict[str, Any]) -> dict[str, Any]:
        """The ``scontrol update`` fields that still differ from the plan."""
        fields: dict[str, Any] = {}
        t = plan.get("time_s")
        if t and _duration_s(_value(info, "TimeLimit")) != int(t):
            fields["TimeLimit"] = max(1, -(-int(t) // 60))
        if plan.get("mem_per_cpu_mb"):
            if _mb(_value(info, "MinMemoryCPU")) != int(plan["mem_per_cpu_mb"]):
                fields["MinMemoryCPU"] = int(plan["mem_per_cpu_mb"])
        elif plan.get("mem_mb"):
            if _mb(_value(info, "MinMemoryNode")) != int(plan["mem_mb"]):
                fields["MinMemoryNode"] = int(plan["mem_mb"])
        if plan.get("comment") and _value(info, "Comment") != plan["comment"]:
            fields["Comment"] = plan["comment"]
        fields["StartTime"] = "now"  # a requeued job otherwise waits ~2 min (BeginTime)
        return fields

    def _commit_requeue(self, chain: str, attempt: int, jid: str) -> None:
        if self._watch is None:
            raise SlurmError("recovery is not attached to the ingest poller yet")
        with self.store.transaction():
            self.store.update_attempt(chain, attempt, step=REQUEUED, job_id=jid)
            self._watch(jid, attempt)
        log.info("job %s: attempt %d requeued as job %s", chain, attempt, jid)
        crash_point("committed")

    # resubmit as a new job ---------------------------------------------

    def _resubmit(self, chain: str, row: dict[str, Any], plan: dict[str, Any]) -> None:
        attempt = int(row["attempt"])
        sub = self.store.get_submission(chain)
        if sub is None:
            raise _Stop(f"job {chain}'s registration is gone from the store")
        uid = int(sub["uid"])
        user = sub.get("user") or _user_name(uid)
        me = os.geteuid()
        as_uid: int | None = None
        if uid != me:
            if me != 0:
                raise _Stop(f"harpd runs as uid {me} and cannot submit for {user} (uid {uid})")
            as_uid = uid
        since = float(row.get("created_at") or self.clock()) - SEARCH_SLACK_S
        found = self.backend.jobs_with_comment(plan["comment"], user, since)
        if found:
            found = sorted(found, key=lambda j: (len(j), j))
            if len(found) > 1:
                log.error("job %s attempt %d: several jobs carry %r: %s; following %s",
                          chain, attempt, plan["comment"], ", ".join(found), found[0])
            new_id = found[0]
            log.info("job %s attempt %d: found its resubmission %s (made before a restart)", chain, attempt, new_id)
        else:
            new_id = self._submit(chain, attempt, sub, plan, as_uid)
            crash_point("submitted")
        with self.store.transaction():
            self.store.update_attempt(chain, attempt, step=SUBMITTED, job_id=new_id)
            self.store.add_submission(
                new_id, uid, user, sub.get("job") or {}, sub.get("original") or {},
                self._submitted(sub, plan), self._decision(chain, attempt, plan, row), chain_id=chain,
            )
        log.info("job %s: attempt %d submitted as job %s", chain, attempt, new_id)
        crash_point("committed")

    def _submit(self, chain: str, attempt: int, sub: dict[str, Any], plan: dict[str, Any], as_uid: int | None) -> str:
        job = sub.get("job") or {}
        argv = job.get("argv")
        if not isinstance(argv, list):
            raise _Stop("its registration lacks sbatch's arguments (harp-submit older than recovery): not resubmitted")
        prev = self._rows(chain).get(attempt - 1) or {}
        prev_id = str(prev.get("job_id") or chain)
        script = self.backend.batch_script(prev_id)
        try:
            info = self.backend.show_job(prev_id)
        except SlurmError:
            info = {}
        rec = self.store.get_job(prev_id)
        job_name = _value(info, "JobName") or (rec.job_name if rec else None) or job.get("job_name")
        workdir = _value(info, "WorkDir") or job.get("cwd")
        if not workdir:
            raise _Stop(f"the working directory of job {prev_id} is unknown: not resubmitted")
        account = _value(info, "Account") or (rec.account if rec else None)
        try:
            new_argv = resubmit_argv(argv, plan, job_name=job_name, workdir=workdir, comment=plan["comment"], account=account)
        except ArgvError as exc:
            raise _Stop(str(exc)) from None
        env = _submit_env(as_uid, job.get("sbatch_env"), sets_mem=bool(plan.get("mem_mb") or plan.get("mem_per_cpu_mb")))
        return self.backend.submit(new_argv, script, workdir, env, as_uid=as_uid)

    @staticmethod
    def _submitted(sub: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
        out = dict(sub.get("submitted") or {})
        if plan.get("time_s"):
            out["time_s"] = int(plan["time_s"])
        if plan.get("mem_per_cpu_mb"):
            out.update(mem_per_cpu_mb=int(plan["mem_per_cpu_mb"]), mem_mb=None)
        elif plan.get("mem_mb"):
            out.update(mem_mb=int(plan["mem_mb"]), mem_per_cpu_mb=None)
        if plan.get("partition"):
            out["partition"] = plan["partition"]
        return out

    def _decision(self, chain: str, attempt: int, plan: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
        prev = (self._rows(chain).get(attempt - 1) or {}).get("limits") or {}
        changes = []
        if plan.get("escalated") == "time":
            changes.append({"option": "time", "value": fmt_time(plan.get("time_s")), "old": fmt_time(prev.get("time_s")),
                            "reason": row.get("reason") or ""})
        elif plan.get("escalated") == "mem":
            key = "mem_per_cpu_mb" if plan.get("mem_per_cpu_mb") else "mem_mb"
            changes.append({"option": "mem-per-cpu" if key == "mem_per_cpu_mb" else "mem",
                            "value": fmt_mem(plan.get(key)), "old": fmt_mem(prev.get(key)), "reason": row.get("reason") or ""})
        return {"changes": changes, "limits": {"partition": plan.get("partition")}, "model": "recovery",
                "explain": {"chain": chain, "attempt": attempt}}


# --------------------------------------------------------------------------


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


_LOGIN_PATH = "/usr/local/bin:/usr/bin:/bin"
_MEM_ENV = frozenset({"SBATCH_MEM_PER_CPU", "SBATCH_MEM_PER_GPU", "SBATCH_MEM_PER_NODE"})


def _submit_env(as_uid: int | None, sbatch_env: Any, *, sets_mem: bool) -> dict[str, str]:
    """sbatch's environment for a resubmission (the job inherits it: ``--export=ALL``).

    The submit-time environment is not recorded (only its ``SBATCH_*``
    variables are, since they are options): a per-user harpd passes its own
    environment, a root harpd submitting for a user a login-like one.
    """
    if as_uid is None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SBATCH_", "SLURM_")) and k != CRASH_ENV}
    else:
        try:
            pw = pwd.getpwuid(as_uid)
            env = {"HOME": pw.pw_dir, "USER": pw.pw_name, "LOGNAME": pw.pw_name, "SHELL": pw.pw_shell or "/bin/sh"}
        except KeyError:
            env = {}
        env["PATH"] = _LOGIN_PATH
        for k in ("LANG", "LC_ALL", "TZ"):
            if k in os.environ:
                env[k] = os.environ[k]
    if "SLURM_CONF" in os.environ:
        env["SLURM_CONF"] = os.environ["SLURM_CONF"]
    if isinstance(sbatch_env, dict):
        for k, v in sbatch_env.items():
            if isinstance(k, str) and k.startswith("SBATCH_") and isinstance(v, str) and not (sets_mem and k in _MEM_ENV):
                env[k] = v
    return env


def _brief(limits: dict[str, Any]) -> str:
    parts = [f"time {fmt_time(limits.get('time_s'))}"]
    if limits.get("mem_per_cpu_mb"):
        parts.append(f"mem-per-cpu {fmt_mem(limits['mem_per_cpu_mb'])}")
    elif limits.get("mem_mb"):
        parts.append(f"mem {fmt_mem(limits['mem_mb'])}")
    return ", ".join(parts)


def make(*, settings: HarpSettings, store: Any, backend: Any) -> Recovery | None:
    """harpd's recovery (None when disabled or without Slurm); ``attach`` it to the poller."""
    if not settings.recovery.enabled:
        log.info("recovery: off (recovery.enabled = false)")
        return None
    if backend is None:
        log.warning("recovery: off (no Slurm backend)")
        return None
    return Recovery(store, backend, settings)
