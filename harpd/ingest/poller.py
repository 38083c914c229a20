"""Outcomes flow back: poll sacct, classify, store, tell whoever listens.

What is polled: the jobs harp submitted and has not closed yet
(``store.pending_submissions()``), the job ids someone asked to ``watch`` (a
job requeued in place by recovery: same id, a new run), and, with
``ingest.learn_all_jobs``, every job of the cluster since a cursor kept in the
store's meta table.

Durability: one poll writes its records, the new cursor and the list of
outcomes still to announce in ONE transaction; the cursor therefore only moves
after the records it covers are committed, and a poll killed at any point
(SIGKILL included) is simply done again by the next one: the upsert by
(source, job_id, attempt) never duplicates a job.  Listeners in ``on_outcome``
are called after that commit; the list of outcomes to announce is cleared only
after they ran, so a crash between the two announces them again at restart
(at least once: make listeners idempotent, as recovery's attempt table is).

A run is stored only once slurmdbd has finished writing it (``_settled``):
until then it counts as still running, and the window of the next poll
(overlapping the last by at least 300 s) sees it again.  Runs are numbered
per job id (``attempt``): a run already stored keeps its number, a new run
of the same id (a requeue) gets the next, and a resubmission under a new id
starts at the attempt recovery gave it in its chain.

When sacct or slurmdbd fails, the poll raises ``SlurmError`` and nothing is
written; the scheduled ``tick`` then waits ``poll_interval_s`` doubled per
consecutive failure, up to ``ingest.max_backoff_s``, so a slurmdbd outage is
not hammered and nothing is lost: pending submissions stay pending.

One module (a little over 500 lines) because the poll, the attempt numbering
and the announcement share one transaction: split apart, the exactly-once
argument above would span files.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from harpd.config import HarpSettings
from harpd.metrics import record as metrics
from harpd.records import JobRecord, Outcome, Submission
from harpd.slurm.base import SlurmBackend
from harpd.slurm.job_ids import submitted_id
from harpd.store import LIVE_SOURCES_KEY

log = logging.getLogger("harpd.ingest")

__all__ = ["Ingestor", "watch_job"]

CURSOR_KEY = "ingest.cursor"
UNANNOUNCED_KEY = "ingest.unannounced"
WATCH_KEY = "ingest.watch"
JOB_ID = "harp-ingest"

# how long after a job's end slurmdbd may still be completing its record
SETTLE_S = 60.0
RSS_SETTLE_S = 10.0
# runs of one job id whose start times differ by less than this are the same run
_SAME_RUN_S = 2.0
# the outcome a submission is closed with when its array tasks disagree: the
# one that most needs attention first
_WORST_FIRST = [
    Outcome.OOM,
    Outcome.TIMEOUT,
    Outcome.FAILED,
    Outcome.NODE_FAIL,
    Outcome.PREEMPTED,
    Outcome.CANCELLED,
    Outcome.COMPLETED,
    Outcome.UNKNOWN,
]
_CHUNK = 500  # job ids per IN (...) query
_JOB_ID_RE = re.compile(r"^\d+(?:_\d+)?$")


def _settled(r: JobRecord, now: float) -> bool:
    """Whether slurmdbd has finished writing this run.

    slurmdbd shows a fast job's end state a second or two before its
    partition, limits and the steps' MaxRSS arrive (a requeued job's new run
    even shows up as "allocation" without a partition); a run stored then
    would stay wrong, since a stored outcome is not written again.  A run
    that never gets them (a job shorter than one accounting sample has no
    MaxRSS at all) is taken as it is once its end is old enough.
    """
    age = now - r.end_time if r.end_time is not None else math.inf
    if r.partition is None:
        return age >= SETTLE_S
    if r.start_time is not None and r.used_mem_mb is None:
        # MaxRSS comes seconds late, or never for a job shorter than one sample
        return age >= RSS_SETTLE_S
    return True


def _key(r: JobRecord) -> tuple[str, str, int]:
    return (r.source, r.job_id, int(r.attempt))


@dataclass(slots=True)
class PollResult:
    new: int = 0  # outcomes written (new runs or changed outcomes)
    seen: int = 0  # finished runs sacct returned
    closed: int = 0  # submissions marked done


class Ingestor:
    """Polls Slurm accounting into the store.  Thread-safe: one poll at a time."""

    def __init__(
        self,
        store: Any,
        backend: SlurmBackend,
        settings: HarpSettings | None = None,
        *,
        listeners: Iterable[Callable[[JobRecord], None]] = (),
        learners: Iterable[Callable[[list[JobRecord]], Any]] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``listeners`` hear each stored outcome from the first poll on, which may
        announce outcomes a killed predecessor left unannounced; ``learners``
        (the live predictor's history) get each poll's new outcomes as they are stored.
        """
        self.store = store
        self.backend = backend
        self.settings = settings or HarpSettings()
        self.cfg = self.settings.ingest
        self.clock = clock
        self.on_outcome: list[Callable[[JobRecord], None]] = list(listeners)
        # given each poll's new outcomes just before they are committed (the live
        # predictor's history), so the very next decision has them
        self.learners: list[Callable[[list[JobRecord]], Any]] = list(learners)
        self.failures = 0
        self.last_error: str | None = None
        self.last_poll: PollResult | None = None
        # polls completed (sacct read, outcomes stored and announced to every listener): ``health``
        # shows it, so a test or an admin can wait until harpd has looked again instead of sleeping
        self.polls = 0
        self._not_before = 0.0  # time.monotonic() before which tick() skips
        self._lock = threading.Lock()

    # ------------------------------------------------------------ public API

    def watch(self, job_id: str, min_attempt: int = 2) -> None:
        """Poll ``job_id`` until a finished run numbered ``min_attempt`` or later is stored.

        For recovery's requeue-in-place: the job keeps its id and its
        submission is already closed, but its next run must be learnt too.
        """
        watch_job(self.store, job_id, min_attempt)

    def poll_once(self) -> int:
        """One poll: returns how many outcomes were newly recorded.

        Raises SlurmError (sacct/slurmdbd down) or StoreError with nothing
        written.
        """
        with self._lock:
            self._announce_leftovers()
            res = self._poll()
            self.last_poll = res
            self.polls += 1
            return res.new

    def tick(self) -> None:
        """The scheduled job: poll unless backing off after failures; never raises."""
        if time.monotonic() < self._not_before:
            return
        try:
            n = self.poll_once()
        except Exception as exc:  # noqa: BLE001 - a scheduler job must not die
            self.failures += 1
            delay = min(self.cfg.poll_interval_s * (2**self.failures), self.cfg.max_backoff_s)
            self._not_before = time.monotonic() + delay
            self.last_error = str(exc)
            log.warning("ingest failed (%d in a row): %s; next try in %.0f s", self.failures, exc, delay)
            metrics.poll(ok=False)
            return
        metrics.poll(ok=True)
        if self.failures:
            log.info("ingest recovered after %d failed polls", self.failures)
        self.failures = 0
        self.last_error = None
        self._not_before = 0.0
        if n:
            log.info("ingest: %d new outcome(s)", n)

    def schedule(self, scheduler: Any) -> Any:
        """Add the polling job to the daemon's APScheduler scheduler (first poll at once)."""
        log.info(
            "ingest: polling sacct every %.0f s (learn_all_jobs=%s)", self.cfg.poll_interval_s, self.cfg.learn_all_jobs
        )
        return scheduler.every(self.tick, self.cfg.poll_interval_s, id=JOB_ID, name="harp ingest (sacct poll)")

    # -------------------------------------------------------------- the poll

    def _poll(self) -> PollResult:
        now = self.clock()
        pending: dict[str, Submission] = {}
        for sub in self.store.pending_submissions():
            jid = str(sub.job_id)
            if _JOB_ID_RE.match(jid):
                pending[jid] = sub
            else:  # never a Slurm job: would fail every sacct call
                log.warning("submission %r is not a Slurm job id; closing it as unknown", jid)
                self.store.mark_submission_done(jid, Outcome.UNKNOWN.value)
        watch: dict[str, int] = {
            str(k): int(v) for k, v in (self.store.get_meta(WATCH_KEY, {}) or {}).items() if _JOB_ID_RE.match(str(k))
        }
        ids = sorted(set(pending) | set(watch), key=lambda x: (len(x), x))
        records: list[JobRecord] = []
        if ids:
            records += self.backend.sacct_jobs(ids, None, None, True)
        new_cursor = None
        if self.cfg.learn_all_jobs:
            cursor = self.store.get_meta(CURSOR_KEY)
            since = float(cursor) if cursor is not None else now - self.cfg.lookback_s
            # overlap: slurmdbd may learn of a job end a little after it happened
            overlap = max(2 * self.cfg.poll_interval_s, 300.0)
            seen = {r.job_id for r in records}
            for r in self.backend.sacct_jobs(None, since - overlap, now, True):
                if r.job_id not in seen:
                    records.append(r)
            new_cursor = now

        for r in records:
            if r.outcome.finished and not _settled(r, now):
                r.outcome = Outcome.RUNNING  # slurmdbd is still filling it in: next poll
        finished = [r for r in records if r.outcome.finished]
        stored = self._assign_attempts(finished, set(pending) | set(watch))
        known = dict(pending)
        for jid in watch:  # closed submissions of jobs requeued in place
            if jid not in known:
                sub = self.store.get_submission(jid)
                if sub is not None:
                    known[jid] = sub
        self._apply_submissions(finished, known, watch)
        new = self._select_new(finished, stored)
        self._teach(new)

        with self.store.transaction():
            if new:
                self.store.insert_jobs(new, batch_size=max(1, len(new)))
                left = list(self.store.get_meta(UNANNOUNCED_KEY, []) or [])
                left += [list(_key(r)) for r in new]
                self.store.set_meta(UNANNOUNCED_KEY, left)
                # the cluster's own sources, so `harp status` never mistakes an imported job for a live one
                live = set(self.store.get_meta(LIVE_SOURCES_KEY, []) or [])
                if not {r.source for r in new} <= live:
                    self.store.set_meta(LIVE_SOURCES_KEY, sorted(live | {r.source for r in new}))
            if new_cursor is not None:
                self.store.set_meta(CURSOR_KEY, new_cursor)
        self._announce(new)

        closed = self._close_submissions(records, pending, now)
        self._update_watch(finished, watch)
        return PollResult(new=len(new), seen=len(finished), closed=closed)

    @staticmethod
    def _apply_submissions(records: list[JobRecord], subs: dict[str, Submission], watch: dict[str, int]) -> None:
        """Carry what harp-submit knew (signature, array size, whether harp resized) into the records.

        A watched job's later runs were requeued by recovery with new limits:
        harp sized them.
        """
        for r in records:
            sub = subs.get(r.job_id) or subs.get(submitted_id(r.job_id))
            if sub is None:
                continue
            job = sub.job
            # harp-sized only where slurmctld vouched for harp's limits (a verified registration,
            # or harpd's own resubmission): a client's word never makes training data
            trusted = bool(sub.verified or sub.chain_id)
            r.harp_sized = trusted and sub.decision is not None and bool(sub.decision.changes)
            if r.job_id in watch and r.attempt >= watch[r.job_id]:
                r.harp_sized = True
            if r.signature is None:
                # harp-submit sends the commands, not a signature: the one
                # decide computes from them at predict time, or history never matches
                from harpd.features.workflow import registered_signature

                r.signature = registered_signature(job)
            if r.input_bytes is None:
                from harpd.features.workflow import registered_input_bytes

                r.input_bytes = registered_input_bytes(job)  # harp-submit's stat of the inputs, where they are
            if r.array_size is None and job.get("array_size"):
                r.array_size = int(job["array_size"])
            if r.job_name is None and job.get("job_name"):
                r.job_name = str(job["job_name"])

    def _stored_runs(self, records: list[JobRecord]) -> dict[tuple[str, str], list[tuple[int, float | None, str]]]:
        """(source, job_id) -> [(attempt, start_time, outcome)] already in the store."""
        out: dict[tuple[str, str], list[tuple[int, float | None, str]]] = {}
        by_source: dict[str, set[str]] = {}
        for r in records:
            by_source.setdefault(r.source, set()).add(r.job_id)
        for source, idset in by_source.items():
            ids = sorted(idset)
            for i in range(0, len(ids), _CHUNK):
                chunk = ids[i : i + _CHUNK]
                marks = ",".join("?" for _ in chunk)
                cols = self.store.job_columns(
                    ["job_id", "attempt", "start_time", "outcome"],
                    where=f"source = ? AND job_id IN ({marks})",
                    params=[source, *chunk],
                )
                for jid, att, st, oc in zip(cols["job_id"], cols["attempt"], cols["start_time"], cols["outcome"]):
                    start = None if math.isnan(st) else float(st)
                    out.setdefault((source, str(jid)), []).append((int(att), start, str(oc)))
        return out

    def _chain_base(self, job_id: str) -> int:
        """Attempt number recovery gave this job id in its chain (1 if none)."""
        chain_of = getattr(self.store, "chain_of", None)
        if chain_of is None:
            return 1
        chain = chain_of(job_id)
        if not chain or chain == job_id:
            return 1
        for a in self.store.attempts(chain):
            if str(a.job_id) == job_id:
                return int(a.attempt)
        return 1

    def _assign_attempts(
        self, records: list[JobRecord], harp_ids: set[str]
    ) -> dict[tuple[str, str], list[tuple[int, float | None, str]]]:
        """Number runs consistently across polls: same run (start time) keeps its attempt.

        sacct numbers the runs of a requeued job 1..n in what it printed; a
        window query may not show the earlier runs, so the store decides:
        a run already stored keeps its number, a new run gets the next one.
        A harp resubmission under a new job id starts at recovery's attempt.
        """
        stored = self._stored_runs(records)
        taken: dict[tuple[str, str], set[int]] = {}
        for r in sorted(records, key=lambda x: (x.source, x.job_id, x.attempt)):
            k = (r.source, r.job_id)
            runs = stored.get(k, [])
            used = taken.setdefault(k, {a for a, _, _ in runs})
            match = None
            for att, start, _ in runs:
                if (start is None and r.start_time is None) or (
                    start is not None and r.start_time is not None and abs(start - r.start_time) < _SAME_RUN_S
                ):
                    match = att
                    break
            if match is not None:
                r.attempt = match
                continue
            base = self._chain_base(r.job_id) if submitted_id(r.job_id) in harp_ids else 1
            want = base + r.attempt - 1
            if want in used:
                want = max(used) + 1
            r.attempt = want
            used.add(want)
        return stored

    @staticmethod
    def _select_new(
        records: list[JobRecord], stored: dict[tuple[str, str], list[tuple[int, float | None, str]]]
    ) -> list[JobRecord]:
        """The runs whose outcome the store does not have yet (the ones to write).

        A run already stored with the same outcome is left alone: writing it
        again would only lose what its submission added (signature,
        harp_sized) once the submission is closed.  A REQUEUED row is an
        earlier run whose real end state slurmdbd has overwritten (22.05;
        25.11 and 26.05 keep it, so it is the stored outcome again); when that
        run is stored, the outcome seen before the requeue is kept.
        """
        new: list[JobRecord] = []
        for r in records:
            prev = {att: oc for att, _, oc in stored.get((r.source, r.job_id), [])}
            if r.attempt in prev and (r.state == "REQUEUED" or prev[r.attempt] == r.outcome.value):
                continue
            new.append(r)
        return new

    # ----------------------------------------------------------- announcing

    def _teach(self, records: list[JobRecord]) -> None:
        if not records:
            return
        for learn in list(self.learners):
            try:
                learn(records)
            except Exception:  # noqa: BLE001 - stored anyway: the predictor's next load reads them
                log.exception("learner %r failed on %d new outcome(s)", learn, len(records))

    def _announce(self, records: Iterable[JobRecord]) -> None:
        records = list(records)
        if not records:
            return
        for r in records:
            for cb in list(self.on_outcome):
                try:
                    cb(r)
                except Exception:  # noqa: BLE001 - one listener must not stop the others
                    log.exception("on_outcome listener %r failed for job %s", cb, r.job_id)
        done = {_key(r) for r in records}
        with self.store.transaction():
            left = [k for k in (self.store.get_meta(UNANNOUNCED_KEY, []) or []) if tuple(k) not in done]
            self.store.set_meta(UNANNOUNCED_KEY, left)

    def _announce_leftovers(self) -> None:
        """Announce what a killed predecessor committed but did not announce."""
        left = self.store.get_meta(UNANNOUNCED_KEY, []) or []
        if not left:
            return
        records = [r for r in (self._load(*k) for k in left) if r is not None]
        log.info("announcing %d outcome(s) left over by an interrupted poll", len(records))
        if records:
            self._announce(records)
        else:
            self.store.set_meta(UNANNOUNCED_KEY, [])

    def _load(self, source: str, job_id: str, attempt: int) -> JobRecord | None:
        """One stored run, exactly (source, job_id, attempt)."""
        from dataclasses import fields

        names = [f.name for f in fields(JobRecord)]
        cols = self.store.job_columns(
            names, where="source = ? AND job_id = ? AND attempt = ?", params=[source, str(job_id), int(attempt)]
        )
        if not len(cols["job_id"]):
            return None
        d: dict[str, Any] = {}
        for f in fields(JobRecord):
            v = cols[f.name][0]
            if isinstance(v, float) and math.isnan(v):
                v = None
            elif f.type in ("int", "int | None") and v is not None:
                v = int(v)
            elif hasattr(v, "item"):
                v = v.item()
            d[f.name] = v
        return JobRecord.from_dict(d)

    # ------------------------------------------------------------ closing

    def _close_submissions(self, records: list[JobRecord], pending: dict[str, Submission], now: float) -> int:
        """Mark a submission done once every run of it seen is finished and its last run was not requeued.

        A job that requeues itself (submitit's checkpoint: ``scontrol requeue
        $SLURM_JOB_ID``) ends a run REQUEUED and runs again under its id: its
        submission stays open so the later runs are stored and learnt (#51),
        where closing it at the first run left only a "preempted" record.

        A submission sacct has never heard of after ``ingest.lookback_s``
        (sbatch failed after harp-submit registered it, or accounting lost
        it) is closed as unknown so it is not polled forever.
        """
        if not pending:
            return 0
        latest: dict[str, dict[str, JobRecord]] = {}
        # a run not finished yet (the pending run after a requeue, with no start time) keeps the job open
        going_on: set[str] = set()
        for r in records:
            sub_id = r.job_id if r.job_id in pending else submitted_id(r.job_id)
            if sub_id not in pending:
                continue
            if not r.outcome.finished:
                going_on.add(sub_id)
            cur = latest.setdefault(sub_id, {}).get(r.job_id)
            if cur is None or (r.attempt, r.start_time or 0) >= (cur.attempt, cur.start_time or 0):
                latest[sub_id][r.job_id] = r
        closed = 0
        for sub_id, runs in latest.items():
            outs = [r.outcome for r in runs.values()]
            if not outs or not all(o.finished for o in outs) or sub_id in going_on:
                continue
            if any(r.state == "REQUEUED" and now - (r.end_time or now) < self.cfg.lookback_s for r in runs.values()):
                continue  # requeued (by itself, a preemption, harp): it runs again under its id
            outcome = next((o for o in _WORST_FIRST if o in outs), outs[0])
            if self.store.mark_submission_done(sub_id, outcome.value):
                closed += 1
        for sub_id, sub in pending.items():
            if sub_id in latest:
                continue
            if float(sub.submitted_at or now) < now - self.cfg.lookback_s:
                log.warning(
                    "job %s unknown to sacct %.0f s after submission; closing it as unknown",
                    sub_id,
                    now - float(sub.submitted_at),
                )
                if self.store.mark_submission_done(sub_id, Outcome.UNKNOWN.value):
                    closed += 1
        return closed

    def _update_watch(self, records: list[JobRecord], watch: dict[str, int]) -> None:
        if not watch:
            return
        seen: dict[str, int] = {}
        for r in records:
            if r.state == "REQUEUED":
                continue  # requeued again (by itself, a preemption, harp): its next run is the one watched for
            if r.job_id in watch and r.attempt >= watch[r.job_id]:
                seen[r.job_id] = max(seen.get(r.job_id, 0), int(r.attempt))
        if not seen:
            return
        with self.store.transaction():
            cur = dict(self.store.get_meta(WATCH_KEY, {}) or {})
            for jid, att in seen.items():
                # a listener may have asked for a later run meanwhile (recovery's next requeue)
                if int(cur.get(jid, 0)) <= att:
                    cur.pop(jid, None)
            self.store.set_meta(WATCH_KEY, cur)


def watch_job(store: Any, job_id: str, min_attempt: int = 2) -> None:
    """Have the poller poll ``job_id`` until a finished run numbered ``min_attempt`` or later is stored.

    The list is kept in the store, so recovery is given this (over the
    store) rather than the poller whose listener it is.
    """
    with store.transaction():
        watch = dict(store.get_meta(WATCH_KEY, {}) or {})
        watch[str(job_id)] = max(int(min_attempt), int(watch.get(str(job_id), 0)))
        store.set_meta(WATCH_KEY, watch)
