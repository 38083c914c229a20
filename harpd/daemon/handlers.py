"""The operations behind the socket: predict, register, status, health, admin.

Handlers know who is calling (a ``Peer`` built from SO_PEERCRED by the server)
and what was asked (a validated ``protocol`` request); they never see bytes or
sockets, so the authorisation rules are tested without a daemon.

Everything the daemon plugs in is injected by harpd.daemon.main: the
``Predictor`` (harpd.predict.live behind the DNN router), the job-owner
lookup (the Slurm backend), and the admin actions (retrain, reload, import).
A missing piece degrades to a clear error answer or to "no change", never to
a crash: harp-submit fails open.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ValidationError

from harp_submit import __version__
from harpd import access
from harpd import protocol as p
from harpd.config import HarpSettings
from harpd.daemon.fair_turns import FairTurns
from harpd.daemon.refusals import RefusalLog
from harpd.daemon.registration import Refused, Registrar
from harpd.daemon.trial_progress import ProgressRefused, record_progress
from harpd.ingest.poller import Ingestor
from harpd.metrics import record as metrics
from harpd.predict.soft_state import SoftState
from harpd.protocol import Decision, JobRequest
from harpd.recovery.machine import Recovery
from harpd.report import build
from harpd.report.job_status import JobStatusError, job_status
from harpd.slurm.partitions import LimitsLookup, limits_for
from harpd.store import QuotaExceeded, Store, StoreError
from harpd.watch.service import Watch

log = logging.getLogger("harpd.handlers")


@runtime_checkable
class Predictor(Protocol):
    """What predict delegates to.  Must be thread-safe: requests run concurrently."""

    def decide(self, job: JobRequest, user: str, uid: int) -> Decision: ...

    # a predictor that keeps state per submission also takes ``dry_run=True``: decide, count nothing


AdminAction = Callable[[], Any]
ImportAction = Callable[[str, Store], Any]


@dataclass(frozen=True, slots=True)
class AdminActions:
    """What the admin operations run (``retrain``, ``reload``, ``import``); None: that operation is not available."""

    retrain: AdminAction | None = None
    reload: AdminAction | None = None
    importer: ImportAction | None = None


@dataclass(frozen=True, slots=True)
class OutcomeServices:
    """What follows the jobs (``harpd.daemon.main.build_services``); None where it is off.

    ``health`` reports on each; the jobs' end hook (op ``ending``) asks recovery directly.
    """

    ingestor: Ingestor | None = None  # the sacct poller (None: no Slurm)
    recovery: Recovery | None = None
    watch: Watch | None = None


@dataclass(frozen=True, slots=True)
class HealthSources:
    """How harpd limits jobs at this site, as ``health`` (and ``harp status``) show it; None: not known.

    ``limits_mode``: soft or hard time limits and why, decided at start
    (``harpd.watch.privilege``); ``soft_state``: what the live predictor's
    soft policy has learnt (``harpd.predict.soft_state``; None under hard
    limits); ``accounting``: what the site's Slurm accounting keeps for
    recovery (``harpd.recovery.site_accounting``).
    """

    limits_mode: p.LimitsHealth | None = None
    soft_state: SoftState | None = None
    accounting: p.AccountingHealth | None = None


class NoChangePredictor:
    """``Handlers``' predictor when none is injected: keep the request, report limits.

    ``limits(partition)`` (usually the Slurm backend's partition limits) fills
    ``Decision.limits`` so harp-submit still gets the caps; without it the
    limits are just the partition name.
    """

    name = "none"

    def __init__(self, limits: LimitsLookup | None = None) -> None:
        self._limits = limits

    def decide(self, job: JobRequest, user: str, uid: int) -> Decision:
        return Decision(
            changes=[],
            limits=limits_for(self._limits, job.partition or job.request.partition),
            model=None,
            explain={"reason": "no predictor installed: request kept as submitted"},
        )


@dataclass(frozen=True)
class Peer:
    """The caller, as the kernel (Unix socket) or munged (TCP) reports it, never as the message claims."""

    pid: int  # 0 over TCP
    uid: int
    gid: int
    user: str
    groups: frozenset[int]
    host: str | None = None  # "ADDR:PORT" of a TCP peer; None on the Unix socket

    @classmethod
    def from_ids(cls, pid: int, uid: int, gid: int, host: str | None = None) -> Peer:
        """Resolve name and groups (primary gid + supplementary from this host's group database)."""
        name = access.user_of(uid)
        return cls(
            pid=pid,
            uid=uid,
            gid=gid,
            user=str(uid) if name is None else name,
            groups=access.groups_of(name, gid),
            host=host,
        )

    def describe(self) -> str:
        """For log lines: the uid and where the request came from."""
        return f"uid={self.uid} pid={self.pid}" if self.host is None else f"uid={self.uid} from {self.host}"


def _as_result(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, int | float):
        return {"count": value}
    return {"result": str(value)}


class Handlers:
    """The API operations.  ``handle(peer, request)`` never raises."""

    def __init__(
        self,
        store: Store,
        settings: HarpSettings | None = None,
        predictor: Predictor | None = None,
        *,
        admin_gid: int | None = None,
        slurm: Any = None,
        partition_limits: LimitsLookup | None = None,
        actions: AdminActions | None = None,
        outcomes: OutcomeServices | None = None,
        health: HealthSources | None = None,
    ) -> None:
        self.store = store
        health = health or HealthSources()
        self.limits_mode = health.limits_mode
        self.accounting = health.accounting  # shown by health, and by status for a registered job
        self.soft_state = health.soft_state
        self.settings = settings
        self.predictor: Predictor = predictor or NoChangePredictor(partition_limits)
        # defaults come from the validated model too (a test's Handlers without settings), never written twice
        cfg = settings if settings is not None else HarpSettings()
        self._cfg = cfg
        if admin_gid is None and settings is not None:
            admin_gid = access.resolve_group(cfg.server.admin_group)
        self.admin_gid = admin_gid
        # registrations are checked against slurmctld through this backend (None: no Slurm, none accepted)
        quota = (
            None
            if settings is None
            else (int(cfg.store.max_pending_decisions_per_user), int(cfg.store.max_pending_decision_bytes_per_user))
        )
        self.registrar = Registrar(store, slurm, quota)
        # refusals of a request's content (a user's quota), logged and summed up with the doors' (the server's loop
        # flushes this one log)
        self.refusals = RefusalLog(logging.getLogger("harpd.server"), float(cfg.server.refusal_log_interval_s))
        outcomes = outcomes or OutcomeServices()
        # recovery's state machine (harpd.recovery.machine): the jobs' end hook asks it directly; None: off
        self.recovery = outcomes.recovery
        # the sacct poller (harpd.ingest.poller): health counts its polls; None: no Slurm
        self.ingestor = outcomes.ingestor
        # the watcher (harpd.watch.service): health shows its last tick; None: off
        self.watch = outcomes.watch
        self.slurm = slurm  # progress reports are checked against slurmctld's owner of the job
        actions = actions or AdminActions()
        self.retrain_action = actions.retrain
        self.reload_action = actions.reload
        self.importer = actions.importer
        self.started = time.monotonic()
        self._admin_lock = threading.Lock()  # one retrain/reload/import at a time
        # one predict at a time, in turns by uid: see op_predict
        self._deciding = FairTurns()
        # a report over a big store takes seconds of CPU: a few at once, never a queue of them
        self.max_reports = int(cfg.report.max_concurrent)
        self._reports = threading.BoundedSemaphore(self.max_reports)

    # ------------------------------------------------------------- dispatch

    def is_admin(self, peer: Peer) -> bool:
        """harp's admin rule, and whoever harpd itself runs as (they own its store anyway)."""
        return peer.uid == os.geteuid() or access.is_admin(peer.uid, peer.groups, self.admin_gid)

    def handle(self, peer: Peer, req: BaseModel) -> BaseModel:
        op = getattr(req, "op", None)
        if op in p.ADMIN_OPS and not self.is_admin(peer):
            log.warning("refused %s from uid %d (%s): not an admin", op, peer.uid, peer.user)
            metrics.refused("not admin")
            name = self._admin_group_name()
            group = f" or group {name}" if name else ""
            return p.error(f"{op} is an admin operation: run it as root{group}")
        method = getattr(self, "op_" + str(op), None)
        if method is None:
            return p.error(f"unknown op {op!r}")
        try:
            return method(peer, req)
        except StoreError as exc:
            log.error("%s for uid %d: %s", op, peer.uid, exc)
            return p.error(f"store unavailable: {exc}")
        except Exception as exc:  # a bug in one op must not take the daemon down
            log.exception("%s for uid %d failed", op, peer.uid)
            return p.error(f"internal error in {op}: {type(exc).__name__}: {exc}")

    def _admin_group_name(self) -> str | None:
        return self._cfg.server.admin_group if self.settings is not None else None

    # ------------------------------------------------------------------ ops

    def op_predict(self, peer: Peer, req: p.PredictRequest) -> BaseModel:
        """Decide and record, one request at a time.

        A decision is pure Python: threads cannot run two at once, only
        interleave, each waiting out the others' GIL turns, so a burst of
        sbatch calls was answered all late together (p99 over a second with
        50 clients flat out, against ~0.2 s in turn).  In turn, each answer
        goes out as soon as its own work is done.  Reading the request and
        sending the answer stay outside the turn, and so does ``register``,
        which waits on slurmctld.  The turns go round the users waiting
        (``FairTurns``), so one user's queue of requests never holds up
        another's.
        """
        with metrics.predict_timer(), self._deciding.turn(peer.uid):
            return self._predict(peer, req)

    def _predict(self, peer: Peer, req: p.PredictRequest) -> BaseModel:
        try:
            # only a dry run passes the keyword: predictors without per-submission state need not know it
            extra = {"dry_run": True} if req.dry_run else {}
            got = self.predictor.decide(req.job, peer.user, peer.uid, **extra)
        except Exception as exc:
            log.exception("predictor failed for uid %d", peer.uid)
            metrics.decision_refused("predictor failed")
            return p.error(f"predict failed: {type(exc).__name__}: {exc}")
        try:
            decision = (
                got
                if isinstance(got, Decision)
                else Decision.model_validate(got.model_dump() if isinstance(got, BaseModel) else got)
            )
        except ValidationError as exc:
            log.error("predictor returned an invalid decision: %s", exc)
            metrics.decision_refused("invalid decision")
            return p.error("predictor returned an invalid decision; request kept as submitted")
        try:
            token = self.registrar.record_decision(peer.uid, peer.user, req.job, decision)
        except QuotaExceeded as exc:
            # one user past what harpd keeps for them: their answer says so, nobody else is slowed or logged for
            self.refusals.refused("quota", f"uid {peer.uid}", str(exc))
            return p.error(f"harpd keeps no more decisions for you now: {exc}; the job goes in unchanged")
        except StoreError as exc:
            # a change harpd cannot record is one it could never verify nor extend: keep the request
            log.error("predict for uid %d: decision not recorded (%s); request kept", peer.uid, exc)
            metrics.decision_refused("store unavailable")
            kept = decision.model_copy(
                update={
                    "changes": [],
                    "explain": {**decision.explain, "reason": f"store unavailable, request kept: {exc}"},
                }
            )
            return p.PredictAnswer(decision=kept)
        if not req.dry_run:
            metrics.decision(req.job, decision)
        return p.PredictAnswer(decision=decision, token=token)

    def op_register(self, peer: Peer, req: p.RegisterRequest) -> BaseModel:
        try:
            claims = req.decision is not None and bool(req.decision.changes)
            v = self.registrar.register(req.job_id, peer.uid, req.token, req.job, claims)
        except Refused as exc:
            log.warning("registration of job %s by %s refused: %s", req.job_id, peer.describe(), exc)
            metrics.request_refused(str(exc))
            return p.error(str(exc))
        log.info(
            "registered job %s for %s (uid %d)%s",
            req.job_id,
            v.user,
            v.uid,
            "" if v.decision is None else " with harp's decision",
        )
        return p.RegisterAnswer()

    def op_status(self, peer: Peer, req: p.StatusRequest) -> BaseModel:
        try:
            job = job_status(
                self.store,
                req.job_id,
                admin=self.is_admin(peer),
                uid=peer.uid,
                user=peer.user,
                cluster=self._cfg.slurm.cluster if self.settings is not None else None,
            )
        except JobStatusError as exc:
            return p.error(str(exc))
        job = dataclasses.replace(
            job,
            limits_mode=self.limits_mode,
            accounting=self.accounting if job.registered else None,
        )
        return p.StatusAnswer(job=dict(job.to_json()))

    def op_ending(self, peer: Peer, req: p.EndingRequest) -> BaseModel:
        """The job's end hook (``harp-task-epilog``): recover it now if a step ran out of memory."""
        if self.recovery is None:
            return p.EndingAnswer(action="left", why="recovery is off")
        action, why = self.recovery.run_ending(req.job_id, peer.uid)
        log.log(
            logging.INFO if action == "requeued" else logging.DEBUG,
            "job %s ending (hook from uid %d): %s, %s",
            req.job_id,
            peer.uid,
            action,
            why,
        )
        return p.EndingAnswer(action=action, why=why[:400])

    def op_health(self, peer: Peer, req: p.HealthRequest) -> BaseModel:
        store = self.store.check()
        models: dict[str, Any] = {}
        if store == "ok":
            try:
                for m in self.store.models():
                    if m.champion:
                        models[m.resource] = {"name": m.name, "trained_at": m.trained_at, "n_train": m.n_train}
            except StoreError as exc:
                store = str(exc)
        name = getattr(self.predictor, "name", None) or type(self.predictor).__name__
        limits: dict[str, Any] | None = None if self.limits_mode is None else {**self.limits_mode}
        if limits is not None and self.soft_state is not None:  # what the extension budget taught the soft policy
            limits.update(self.soft_state.explain())
        return p.HealthAnswer(
            version=__version__,
            store=store,
            models=models,
            predictor=str(name),
            uptime_s=round(time.monotonic() - self.started, 3),
            limits=limits,
            accounting=self.accounting,
            ingest=None if self.ingestor is None else self._ingest_health(self.ingestor),
            recovery=None if self.recovery is None else self._recovery_health(self.recovery),
            watch=None if self.watch is None else self._watch_health(self.watch),
        )

    @staticmethod
    def _recovery_health(recovery: Recovery) -> p.RecoveryHealth:
        waits = sorted(recovery.waiting_on_slurm(), key=lambda w: w.since)
        oldest = waits[0] if waits else None
        return p.RecoveryHealth(
            waiting_on_slurm=len(waits),
            waiting_since=None if oldest is None else oldest.since,
            last_error=None if oldest is None else oldest.error,
        )

    @staticmethod
    def _watch_health(watch: Watch) -> p.WatchHealth:
        return p.WatchHealth(
            last_tick_s=None if watch.last_tick_s is None else round(watch.last_tick_s, 3),
            jobs=watch.last_tick_jobs,
            lead_s=watch.lead_s,
            at=watch.last_tick_at,
        )

    @staticmethod
    def _ingest_health(ingestor: Ingestor) -> p.IngestHealth:
        return p.IngestHealth(polls=ingestor.polls, failures=ingestor.failures, last_error=ingestor.last_error)

    def op_report(self, peer: Peer, req: p.ReportRequest) -> BaseModel:
        """``harp report`` for callers who cannot read the store themselves.

        Runs the CLI's own report code on the daemon's store; the scope comes
        from the kernel's idea of the caller, never from the request.
        """
        settings = self.settings if self.settings is not None else HarpSettings()
        try:
            user = build.resolve_scope(self.is_admin(peer), peer.user, req.user, self._admin_group_name())
            window = build.window_of(settings, req.since, req.until)
        except ValueError as exc:
            return p.error(str(exc))
        if not self._reports.acquire(blocking=False):
            return p.error(f"harpd is already building {self.max_reports} report(s); retry in a minute")
        try:
            started = time.monotonic()
            filters = build.Filters(
                accounts=build.names_of(req.account),
                partitions=build.names_of(req.partition),
                sources=build.names_of(req.source),
            )
            report = build.build(
                self.store,
                settings,
                by=req.by,
                window=window,
                user=user,
                source=f"harpd ({self.store.path})",
                filters=filters,
                personal=not self.is_admin(peer),
            )
            text = build.render(report, req.format, req.top)
        finally:
            self._reports.release()
        log.info(
            "report by %s (%s) for %s (uid %d) in %.1fs",
            req.by,
            req.format,
            report.scope,
            peer.uid,
            time.monotonic() - started,
        )
        return p.ReportAnswer(scope=report.scope, text=text)

    def op_progress(self, peer: Peer, req: p.ProgressRequest) -> BaseModel:
        """A running trial's metric (harpd.dnn.trials), from Slurm's owner of the job only."""
        try:
            study, elapsed = record_progress(
                self.store, self.slurm, peer.uid, req.job_id, req.metric, req.value, req.study
            )
        except ProgressRefused as exc:
            log.info("progress for job %s from %s refused: %s", req.job_id, peer.describe(), exc)
            metrics.request_refused(str(exc))
            return p.error(str(exc))
        return p.ProgressAnswer(study=study, elapsed_s=round(elapsed, 3))

    def op_retrain(self, peer: Peer, req: p.RetrainRequest) -> BaseModel:
        if self.retrain_action is None:
            return p.error("retrain not available in this harpd")
        with self._admin_lock:
            log.info("retrain requested by %s (uid %d)", peer.user, peer.uid)
            result = self.retrain_action()
        return p.AdminAnswer(message="retrain done", result=_as_result(result))

    def op_reload(self, peer: Peer, req: p.ReloadRequest) -> BaseModel:
        action = self.reload_action
        if action is None:
            return p.error("reload not available in this harpd")
        with self._admin_lock:
            log.info("reload requested by %s (uid %d)", peer.user, peer.uid)
            result = action()
        return p.AdminAnswer(message="reloaded", result=_as_result(result))

    def op_import(self, peer: Peer, req: p.ImportRequest) -> BaseModel:
        importer = self.importer
        if importer is None:
            return p.error("import not available in this harpd")
        if not os.path.isabs(req.path):
            return p.error(f"import path {req.path!r} must be absolute (harpd does not share your working directory)")
        if not os.path.isfile(req.path):
            return p.error(f"import path {req.path} is not a readable file on the harpd host")
        with self._admin_lock:
            log.info("import of %s requested by %s (uid %d)", req.path, peer.user, peer.uid)
            try:
                result = importer(req.path, self.store)
            except (ValueError, OSError) as exc:
                return p.error(f"import of {req.path} failed: {exc}")
        return p.AdminAnswer(message=f"imported {req.path}", result=_as_result(result))
