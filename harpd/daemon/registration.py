"""Registrations harpd accepts only when slurmctld vouches for them.

harpd runs as root and changes the jobs it knows, so what it knows must come
from Slurm, not from a client.  A registration (harp-submit's ``register``,
or harpd finding a job that carries a decision's token in its comment,
``harpd.daemon.adopt``) is checked against ``scontrol show job``:

* the job exists (an id Slurm does not know yet is refused: claiming future
  ids would hand someone else's job to the claimant);
* its owner uid is the caller's (root may register on a user's behalf: the
  owner is then Slurm's) and the decision's;
* with a decision token: the decision was made for that uid, is used once,
  the job was submitted at or after it, and the job's current limits are
  the decided ones (harp's decision applied) or the user's own request as
  recorded at predict time (harp changed nothing, e.g. sbatch refused the
  changed request and the original went in);
* without a token: the job is recorded as sized by its user (no decision),
  with the limits Slurm shows, so harp never moves them.

The request and limits stored are harpd's record of the decision, never the
registering message's: the request a user stated at predict time is the
one harp extends up to, and only on a job whose limit harp chose.
"""

from __future__ import annotations

import logging
import math
import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harp_submit.registration import TOKEN_WORD
from harp_submit.units import parse_mem, parse_time
from harpd import access
from harpd.protocol import TOKEN_PATTERN, Decision, JobRequest, Resources
from harpd.records import kept_as_stored
from harpd.slurm.base import JobInfo, SlurmBackend, SlurmError, waiting_on_slurm, whole_minutes
from harpd.slurm.job_ids import submitted_id
from harpd.store import OwnerChanged, Store

log = logging.getLogger("harpd.registration")

__all__ = ["Refused", "NotAnswered", "Registrar", "decided_resources", "new_token", "TOKEN_WORD", "token_in_comment"]

_TOKEN_RE = re.compile(TOKEN_PATTERN)  # the wire contract's spelling of a token, the one definition

# scontrol's answers for a job id it has never had (or has purged)
_UNKNOWN_JOB = ("invalid job id", "job does not exist", "no such job")


class Refused(Exception):
    """A registration harpd will not store; the message is the one-line answer."""


class NotAnswered(Refused):
    """slurmctld did not answer the check (slow, stopped): nothing is known yet, so the caller asks again.

    Its message ends in "try again", which harp-submit's registration retries
    on; the adopter waits for Slurm and looks again (never forgets the token).
    """


def new_token() -> str:
    """A fresh, unguessable decision token (128 random bits, URL-safe, 22 characters)."""
    return secrets.token_urlsafe(16)


def is_token(text: str | None) -> bool:
    return bool(text) and _TOKEN_RE.fullmatch(str(text)) is not None


def token_in_comment(comment: str | None) -> str | None:
    """The decision token harp-submit left in a job's comment (``...; harp decision TOKEN``), if any."""
    for part in (comment or "").split(";"):
        words = part.split()
        if len(words) == 3 and " ".join(words[:2]) == TOKEN_WORD and is_token(words[2]):
            return words[2]
    return None


def decided_resources(request: Resources, decision: Decision) -> Resources:
    """The limits a job gets when ``decision``'s changes are applied to ``request``."""
    got: dict[str, int | str | None] = {}
    for change in decision.changes:
        try:
            if change.option == "time":
                got["time_s"] = parse_time(change.value)
            elif change.option == "mem":
                got["mem_mb"], got["mem_per_cpu_mb"] = parse_mem(change.value), None
            elif change.option == "mem-per-cpu":
                got["mem_per_cpu_mb"], got["mem_mb"] = parse_mem(change.value), None
            elif change.option == "cpus-per-task":
                got["cpus_per_task"] = int(change.value)
            elif change.option == "partition":
                got["partition"] = change.value
        except ValueError:
            continue  # harp-submit refuses a decision it cannot read: the job then has the request
    return request.model_copy(update=got)


def _mismatch(limits: Resources, job: JobInfo) -> str | None:
    """Why ``job``'s current limits are not ``limits`` (None: they are), in a few words."""
    t = limits.time_s
    if t and job.time_limit_s != whole_minutes(int(t)) * 60:
        return f"time limit {job.time_limit_s} s, not {whole_minutes(int(t)) * 60} s"
    if limits.mem_mb and job.mem_mb != int(limits.mem_mb):
        return f"memory {job.mem_mb} MB, not {limits.mem_mb} MB"
    if limits.mem_per_cpu_mb and job.mem_per_cpu_mb != int(limits.mem_per_cpu_mb):
        return f"memory per CPU {job.mem_per_cpu_mb} MB, not {limits.mem_per_cpu_mb} MB"
    if limits.cpus_per_task and job.cpus_per_task is not None and job.cpus_per_task != int(limits.cpus_per_task):
        return f"{job.cpus_per_task} CPUs per task, not {limits.cpus_per_task}"
    return None


def _stored_decision(d: Mapping[str, Any] | None) -> Decision | None:
    """A decision as the decisions table holds it; one this harpd would refuse (an older one wrote it) is kept."""
    return None if d is None else kept_as_stored(Decision, d)


def _as_slurm_shows(job: JobInfo) -> Resources:
    """A job's limits as slurmctld holds them (a registration without a decision)."""
    return Resources(
        time_s=job.time_limit_s, mem_mb=job.mem_mb, mem_per_cpu_mb=job.mem_per_cpu_mb, cpus_per_task=job.cpus_per_task
    )


@dataclass(frozen=True)
class Verified:
    """A registration slurmctld vouched for: what harpd stores for the job."""

    job_id: str
    uid: int
    user: str
    job: Mapping[str, Any]  # the JobRequest JSON harp-submit sent (as the decisions table holds it)
    original: Resources  # the user's own request (recorded at predict time)
    submitted: Resources  # the limits the job has now, as Slurm confirmed
    decision: Decision | None  # harp's decision, when its limits are the job's
    token: str | None


class Registrar:
    """Checks registrations with slurmctld and records the verified ones."""

    def __init__(self, store: Store, backend: SlurmBackend | None, quota: tuple[int, int] | None = None) -> None:
        self.store = store
        self.backend = backend
        self.quota = quota  # (decisions, bytes) a uid may have stored unclaimed; None: no bound

    def record_decision(self, uid: int, user: str, job: JobRequest, decision: Decision) -> str:
        """Store what harpd decided for this predict call; returns the token harp-submit echoes."""
        token = new_token()
        decided = decided_resources(job.request, decision)
        quota = None if uid in (0, os.geteuid()) else self.quota  # root and harpd's own user: the admin's
        self.store.add_decision(token, uid, user, job, decided, decision, quota=quota)
        return token

    def show(self, job_id: str) -> JobInfo:
        """slurmctld's view of the job; Refused when it does not know it or cannot be asked."""
        if self.backend is None:
            raise Refused(f"harpd cannot ask Slurm about job {job_id} (no Slurm on the harpd host); not registered")
        try:
            return self.backend.show_job(submitted_id(job_id))
        except SlurmError as exc:
            if any(s in str(exc).lower() for s in _UNKNOWN_JOB):
                raise Refused(
                    f"Slurm does not know job {job_id} yet; register a job after sbatch has printed its id"
                ) from None
            kind = NotAnswered if waiting_on_slurm(exc) else Refused
            raise kind(f"cannot ask Slurm about job {job_id} ({exc}); try again") from None

    def verify(
        self,
        job_id: str,
        caller_uid: int,
        token: str | None,
        job: JobRequest | None = None,
        claims_changes: bool = False,
    ) -> Verified:
        """The registration of ``job_id`` by ``caller_uid`` as harpd would store it; Refused otherwise.

        ``claims_changes``: the message says harp changed the job; without a
        token no decision of harpd's backs that, so it is refused.
        """
        if token is None and claims_changes:
            raise Refused(
                f"job {job_id}: a registration of a job harp changed needs the token harpd gave with "
                "its decision; not registered"
            )
        info = self.show(job_id)
        owner = info.uid
        if owner is None:
            raise Refused(f"Slurm has not filled in the owner of job {job_id} yet; try again")
        if caller_uid != 0 and owner != caller_uid:
            log.warning("uid %d tried to register job %s owned by uid %d", caller_uid, job_id, owner)
            raise Refused(f"job {job_id} is not yours; register only jobs you submitted")
        user = info.user or access.user_of(owner) or str(owner)
        if token is None:
            shown = _as_slurm_shows(info)
            return Verified(job_id, owner, user, {} if job is None else job.model_dump(), shown, shown, None, None)
        row = self.store.get_decision(token)
        if row is None:
            raise Refused(f"job {job_id}: harpd made no decision with that token; not registered")
        if row.uid != owner:
            log.warning("job %s (uid %d): decision token of uid %d refused", job_id, owner, row.uid)
            raise Refused(f"job {job_id}: the decision token was not issued to the job's owner; not registered")
        if row.job_id is not None and str(row.job_id) != str(job_id):
            raise Refused(f"job {job_id}: that decision was already used by job {row.job_id}; a decision binds one job")
        if info.submit_time is None or info.submit_time < math.floor(row.decided_at):
            raise Refused(f"job {job_id} was submitted before harpd's decision; not registered")
        original = Resources.from_json(row.job.get("request"))
        decided = Resources.from_json(row.decided)
        decision = _stored_decision(row.decision)
        if _mismatch(decided, info) is None:
            submitted = decided
        elif _mismatch(original, info) is None:
            submitted, decision = original, None  # harp's change did not go in: the job is as the user wrote it
        else:
            why = _mismatch(decided, info)
            log.warning(
                "job %s of uid %d: limits are not harp's decision (%s); registration refused", job_id, owner, why
            )
            raise Refused(f"job {job_id} has a {why}: neither harp's decision nor your request; not registered")
        recorded = dict(row.job)
        if job is not None:  # how sbatch ran it: what recovery resubmits with, the owner's own
            recorded.update((k, v) for k, v in (("argv", job.argv), ("sbatch_env", job.sbatch_env)) if v is not None)
        return Verified(job_id, owner, user, recorded, original, submitted, decision, token)

    def register(
        self,
        job_id: str,
        caller_uid: int,
        token: str | None,
        job: JobRequest | None = None,
        claims_changes: bool = False,
    ) -> Verified:
        """Verify and store; Refused (nothing stored) when Slurm does not vouch for it."""
        v = self.verify(job_id, caller_uid, token, job, claims_changes)
        try:
            self._store(v)
        except OwnerChanged as exc:
            log.warning("registration refused: %s", exc)
            raise Refused(f"job {job_id} is registered to another user; not registered") from None
        return v

    def _store(self, v: Verified) -> None:
        if v.token is None:
            self.store.add_submission(v.job_id, v.uid, v.user, v.job, v.original, v.submitted, None, verified=True)
        elif not self.store.register_decided(
            v.token, v.job_id, v.uid, v.user, v.job, v.original, v.submitted, v.decision
        ):
            row = self.store.get_decision(v.token)
            if row is None or str(row.job_id) != str(v.job_id):
                raise Refused(
                    f"job {v.job_id}: that decision was already used by another job; a decision binds one job"
                )
            # the same job again (a retry, or harpd found it first): refresh what the message adds
            self.store.add_submission(
                v.job_id, v.uid, v.user, v.job, v.original, v.submitted, v.decision, token=v.token, verified=True
            )
