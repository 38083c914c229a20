"""The operations behind the socket: predict, register, status, health, admin.

Handlers know who is calling (a ``Peer`` built from SO_PEERCRED by the server)
and what was asked (a validated ``protocol`` request); they never see bytes or
sockets, so the authorisation rules are tested without a daemon.

Everything the daemon plugs in is injected: the ``Predictor`` (the predictors
engineer's decide layer), the job-owner lookup (the Slurm backend), and the
admin actions (retrain, reload, import).  A missing piece degrades to a clear
error answer or to "no change", never to a crash: harp-submit fails open.
"""

from __future__ import annotations

import dataclasses
import grp
import logging
import os
import pwd
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ValidationError

from harp_submit import __version__
from harpd import protocol as p
from harpd.protocol import Decision, JobRequest, Limits
from harpd.store import Store, StoreError

log = logging.getLogger("harpd.daemon.handlers")


@runtime_checkable
class Predictor(Protocol):
    """What predict delegates to.  Must be thread-safe: requests run concurrently."""

    def decide(self, job: JobRequest, user: str, uid: int) -> Decision: ...


LimitsLookup = Callable[[str | None], "Limits | dict[str, Any] | None"]
OwnerLookup = Callable[[str], "int | None"]
AdminAction = Callable[[], Any]
ImportAction = Callable[[str, Store], Any]


class NoChangePredictor:
    """The predictor when none is installed: keep the request, report limits.

    ``limits(partition)`` (usually the Slurm backend's partition limits) fills
    ``Decision.limits`` so harp-submit still gets the caps; without it the
    limits are just the partition name.
    """

    name = "none"

    def __init__(self, limits: LimitsLookup | None = None) -> None:
        self._limits = limits

    def decide(self, job: JobRequest, user: str, uid: int) -> Decision:
        partition = job.partition or job.request.partition
        limits = Limits(partition=partition)
        if self._limits is not None:
            try:
                got = self._limits(partition)
            except Exception as exc:  # the backend is optional here: no change either way
                log.warning("partition limits unavailable for %s: %s", partition, exc)
                got = None
            if got is not None:
                limits = got if isinstance(got, Limits) else Limits.model_validate(got)
        return Decision(
            changes=[],
            limits=limits,
            model=None,
            explain={"reason": "no predictor installed: request kept as submitted"},
        )


@dataclass(frozen=True)
class Peer:
    """The caller, as the kernel reports it (never as the message claims)."""

    pid: int
    uid: int
    gid: int
    user: str
    groups: frozenset[int]

    @classmethod
    def from_ids(cls, pid: int, uid: int, gid: int) -> "Peer":
        """Resolve name and groups (primary gid + supplementary from the group database)."""
        groups = {gid}
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            name = str(uid)
        else:
            try:
                groups.update(os.getgrouplist(name, gid))
            except OSError:
                pass
        return cls(pid=pid, uid=uid, gid=gid, user=name, groups=frozenset(groups))


def resolve_group(name: str | None) -> int | None:
    """gid of ``server.admin_group`` (name or number); ValueError if unknown."""
    if name is None or name == "":
        return None
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        if name.isdigit():
            return int(name)
        raise ValueError(f"no such group {name!r}") from None


def owner_from_backend(backend: Any) -> OwnerLookup:
    """Job owner uid via ``backend.show_job`` (scontrol's ``UserId=alice(1000)``).

    None when Slurm does not know the job (already purged, or a made-up id):
    the caller's own uid is then recorded, which gives nobody else's job away.
    """

    def lookup(job_id: str) -> int | None:
        info = backend.show_job(job_id)
        raw = str(info.get("UserId", "")) if info else ""
        if "(" in raw and raw.endswith(")"):
            raw = raw[raw.rindex("(") + 1 : -1]
        return int(raw) if raw.isdigit() else None

    return lookup


def cached_partitions(backend: Any, ttl_s: float = 60.0) -> Callable[[], dict[str, Any]]:
    """``backend.partitions()``, cached: scontrol is too slow to run per sbatch.

    One cache serves every reader of partition data in the daemon (the limits
    sent with each decision, the DNN planner), so scontrol runs once per ``ttl_s``.
    """
    lock = threading.Lock()
    cache: dict[str, Any] = {"at": -1e18, "parts": {}}

    def partitions() -> dict[str, Any]:
        with lock:
            if time.monotonic() - cache["at"] > ttl_s:
                cache["parts"] = backend.partitions()
                cache["at"] = time.monotonic()
            return cache["parts"]

    return partitions


def limits_of(info: Any) -> Limits:
    """The caps harp-submit checks a decision against, from one PartitionInfo."""
    return Limits(
        partition=info.name,
        max_time_s=info.max_time_s,
        max_mem_mb=info.max_mem_mb_per_node,
        max_cpus=info.max_cpus_per_node,
    )


def limits_from_partitions(partitions: Callable[[], dict[str, Any]]) -> LimitsLookup:
    """Partition limits by name (None: the default partition)."""

    def lookup(partition: str | None) -> Limits | None:
        parts = partitions()
        info = parts.get(partition) if partition else next((i for i in parts.values() if i.default), None)
        return None if info is None else limits_of(info)

    return lookup


def limits_from_backend(backend: Any, ttl_s: float = 60.0) -> LimitsLookup:
    """Partition limits via a cached ``backend.partitions()``."""
    return limits_from_partitions(cached_partitions(backend, ttl_s))


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
        settings: Any = None,
        predictor: Predictor | None = None,
        *,
        admin_gid: int | None = None,
        job_owner: OwnerLookup | None = None,
        partition_limits: LimitsLookup | None = None,
        retrain: AdminAction | None = None,
        reload: AdminAction | None = None,
        importer: ImportAction | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.predictor: Predictor = predictor or NoChangePredictor(partition_limits)
        if admin_gid is None and settings is not None:
            admin_gid = resolve_group(getattr(settings.server, "admin_group", None))
        self.admin_gid = admin_gid
        self.job_owner = job_owner
        self.retrain_action = retrain
        self.reload_action = reload
        self.importer = importer
        self.started = time.monotonic()
        self._admin_lock = threading.Lock()  # one retrain/reload/import at a time
        # a report over a big store takes seconds of CPU: a few at once, never a queue of them
        self.max_reports = int(getattr(getattr(settings, "report", None), "max_concurrent", 2))
        self._reports = threading.BoundedSemaphore(self.max_reports)

    # ------------------------------------------------------------- dispatch

    def is_admin(self, peer: Peer) -> bool:
        if peer.uid == 0 or peer.uid == os.geteuid():
            return True
        return self.admin_gid is not None and self.admin_gid in peer.groups

    def handle(self, peer: Peer, req: BaseModel) -> BaseModel:
        op = getattr(req, "op", None)
        if op in p.ADMIN_OPS and not self.is_admin(peer):
            log.warning("refused %s from uid %d (%s): not an admin", op, peer.uid, peer.user)
            group = f" or group {self.settings.server.admin_group}" if self._admin_group_name() else ""
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
        return getattr(getattr(self.settings, "server", None), "admin_group", None)

    # ------------------------------------------------------------------ ops

    def op_predict(self, peer: Peer, req: p.PredictRequest) -> BaseModel:
        try:
            got = self.predictor.decide(req.job, peer.user, peer.uid)
        except Exception as exc:
            log.exception("predictor failed for uid %d", peer.uid)
            return p.error(f"predict failed: {type(exc).__name__}: {exc}")
        try:
            decision = got if isinstance(got, Decision) else Decision.model_validate(
                got.model_dump() if isinstance(got, BaseModel) else got
            )
        except ValidationError as exc:
            log.error("predictor returned an invalid decision: %s", exc)
            return p.error("predictor returned an invalid decision; request kept as submitted")
        return p.PredictAnswer(decision=decision)

    def op_register(self, peer: Peer, req: p.RegisterRequest) -> BaseModel:
        uid, user = peer.uid, peer.user
        owner = self._owner(req.job_id)
        existing = self.store.get_submission(req.job_id)
        if existing is not None and existing["uid"] != peer.uid and peer.uid != 0:
            if owner != peer.uid:
                return p.error(f"job {req.job_id} is registered by another user")
            # Slurm says it is the caller's: an earlier unverified claim by someone else loses
            log.warning("job %s: uid %d's registration replaces uid %d's (Slurm owner)", req.job_id, peer.uid, existing["uid"])
        if owner is not None and owner != peer.uid:
            if peer.uid != 0:
                log.warning("uid %d tried to register job %s owned by uid %d", peer.uid, req.job_id, owner)
                return p.error(f"job {req.job_id} is not yours; register only jobs you submitted")
            uid = owner  # root registering on a user's behalf: record the owner
            try:
                user = pwd.getpwuid(owner).pw_name
            except KeyError:
                user = str(owner)
        self.store.add_submission(
            req.job_id,
            uid,
            user,
            req.job.model_dump(),
            req.original.model_dump(),
            req.submitted.model_dump(),
            None if req.decision is None else req.decision.model_dump(),
        )
        log.info("registered job %s for %s (uid %d)%s", req.job_id, user, uid,
                 "" if owner is not None else " (owner not verified with Slurm)")
        return p.RegisterAnswer()

    def _owner(self, job_id: str) -> int | None:
        if self.job_owner is None:
            return None
        try:
            return self.job_owner(job_id)
        except Exception as exc:  # Slurm down: fall back to the peer uid
            log.warning("cannot ask Slurm who owns job %s: %s", job_id, exc)
            return None

    def op_status(self, peer: Peer, req: p.StatusRequest) -> BaseModel:
        job_id = req.job_id
        sub = self.store.get_submission(job_id)
        chain = self.store.chain_of(job_id)
        if sub is None and chain is not None:
            sub = self.store.get_submission(chain)
        record = self.store.get_job(job_id)
        if sub is None and record is None:
            return p.error(f"harp knows no job {job_id}")
        if not self.is_admin(peer):
            # Slurm's record names the owner; a registration only where there is none
            # yet: a job id claimed by someone else before it existed (when Slurm could
            # not vouch for the owner) reveals nothing of the owner's run to the claimant
            if record is not None and record.user is not None:
                if record.user != peer.user:
                    return p.error(f"job {job_id} is not yours")
            elif sub is not None and sub["uid"] != peer.uid:
                return p.error(f"job {job_id} is not yours")
            if sub is not None and sub["uid"] != peer.uid:
                sub = None  # the claimant's registration is not the owner's business either
        job: dict[str, Any] = {
            "job_id": job_id,
            "registered": sub is not None,
            "chain_id": chain or (sub or {}).get("chain_id"),
            "record": None if record is None else record.to_dict(),
            "attempts": self.store.attempts(chain) if chain else [],
        }
        if sub is not None:
            for k in ("uid", "user", "state", "outcome", "submitted_at", "done_at", "original", "submitted", "decision"):
                job[k] = sub.get(k)
            job["registered_job_id"] = sub["job_id"]
        else:
            job["user"] = record.user if record else None
            job["outcome"] = record.outcome.value if record else None
        return p.StatusAnswer(job=job)

    def op_health(self, peer: Peer, req: p.HealthRequest) -> BaseModel:
        store = self.store.check()
        models: dict[str, Any] = {}
        if store == "ok":
            try:
                for m in self.store.models():
                    if m["champion"]:
                        models[m["resource"]] = {"name": m["name"], "trained_at": m["trained_at"], "n_train": m["n_train"]}
            except StoreError as exc:
                store = str(exc)
        name = getattr(self.predictor, "name", None) or type(self.predictor).__name__
        return p.HealthAnswer(
            version=__version__,
            store=store,
            models=models,
            predictor=str(name),
            uptime_s=round(time.monotonic() - self.started, 3),
        )

    def op_report(self, peer: Peer, req: p.ReportRequest) -> BaseModel:
        """``harp report`` for callers who cannot read the store themselves.

        Runs the CLI's own report code on the daemon's store; the scope comes
        from the kernel's idea of the caller, never from the request.
        """
        from harpd.report import build

        settings = self.settings
        if settings is None:
            from harpd.config import HarpSettings

            settings = HarpSettings()
        try:
            user = build.resolve_scope(self.is_admin(peer), peer.user, req.user, self._admin_group_name())
            window = build.window_of(settings, req.since, req.until)
        except ValueError as exc:
            return p.error(str(exc))
        if not self._reports.acquire(blocking=False):
            return p.error(f"harpd is already building {self.max_reports} report(s); retry in a minute")
        try:
            started = time.monotonic()
            report = build.build(self.store, settings, by=req.by, window=window, user=user,
                                 source=f"harpd ({self.store.path})")
            text = build.render(report, req.format, req.top)
        finally:
            self._reports.release()
        log.info("report by %s (%s) for %s (uid %d) in %.1fs", req.by, req.format, report.scope, peer.uid,
                 time.monotonic() - started)
        return p.ReportAnswer(scope=report.scope, text=text)

    def op_retrain(self, peer: Peer, req: p.RetrainRequest) -> BaseModel:
        if self.retrain_action is None:
            return p.error("retrain not available in this harpd")
        with self._admin_lock:
            log.info("retrain requested by %s (uid %d)", peer.user, peer.uid)
            result = self.retrain_action()
        return p.AdminAnswer(message="retrain done", result=_as_result(result))

    def op_reload(self, peer: Peer, req: p.ReloadRequest) -> BaseModel:
        action = self.reload_action or getattr(self.predictor, "reload", None)
        if action is None:
            return p.error("reload not available in this harpd")
        with self._admin_lock:
            log.info("reload requested by %s (uid %d)", peer.user, peer.uid)
            result = action()
        return p.AdminAnswer(message="reloaded", result=_as_result(result))

    def op_import(self, peer: Peer, req: p.ImportRequest) -> BaseModel:
        importer = self.importer
        if importer is None:
            try:
                from harpd.ingest.importer import import_file  # written by the ingest engineer
            except ImportError:
                return p.error("import not available in this harpd")
            importer = import_file
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
