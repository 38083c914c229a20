"""What harp knows about one job, as the asker may see it: the path `harp status` and harpd share.

harpd's ``status`` operation answers users over the socket; ``harp status
--direct`` reads the store as an admin.  Both call ``job_status`` so the
answer, and who may see it, cannot drift apart.

The store keeps jobs by (source, job id): the cluster's own records (the
sources harpd's sacct poller wrote, ``LIVE_SOURCES_KEY``, and the configured
``slurm.cluster``) sit beside imported traces, whose job ids are another
machine's and collide with live ones.  A live job is shown with the cluster's
records only; a job id known only from imported traces is shown as such,
naming the trace.  Where the store cannot tell (harpd never polled and no
cluster is configured) every record is shown with its source and no claim.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from harpd import access
from harpd.dnn.observed import gpu_memory_view
from harpd.limits.ledger import read_ledger
from harpd.records import AttemptRow, JobRecord, Submission
from harpd.report.efficiency import job_efficiencies
from harpd.report.status_view import JobStatus, RanWith, RunView
from harpd.store import LIVE_SOURCES_KEY, Store

CLUSTER, IMPORTED, UNKNOWN = "cluster", "imported", "unknown"


class JobStatusError(ValueError):
    """No job to show this asker; the text is the one-line answer."""


def live_sources(store: Store, cluster: str | None = None) -> set[str]:
    """The sources that are this cluster's own jobs (empty: the store cannot tell)."""
    known = {str(s) for s in (store.get_meta(LIVE_SOURCES_KEY, []) or [])}
    return known | ({cluster} if cluster else set())


def _records(store: Store, job_id: str) -> dict[str, JobRecord]:
    """Each source's record of ``job_id`` (its latest attempt), newest first."""
    sources = dict.fromkeys(str(s) for s in store.job_columns(["source"], "job_id = ?", [str(job_id)])["source"])
    recs = {s: r for s in sources if (r := store.get_job(job_id, s)) is not None}
    return dict(sorted(recs.items(), key=lambda kv: -(kv[1].end_time or kv[1].submit_time or 0.0)))


def job_status(store: Store, job_id: str, *, admin: bool, uid: int, user: str, cluster: str | None = None) -> JobStatus:
    """The job's registration, Slurm record, limit changes and recovery attempts (StoreError if the store fails).

    ``cluster``: the configured ``slurm.cluster``, the source name of the cluster's own records.
    """
    sub = store.get_submission(job_id)
    chain = store.chain_of(job_id)
    if sub is None and chain is not None:
        sub = store.get_submission(chain)
    recs = _records(store, job_id)
    live = live_sources(store, cluster)
    kinds = {s: (UNKNOWN if not live else CLUSTER if s in live else IMPORTED) for s in recs}
    own = {s: r for s, r in recs.items() if kinds[s] == CLUSTER}
    imported = {s: r for s, r in recs.items() if kinds[s] == IMPORTED}
    changes = store.limit_changes(job_id)  # harpd changed a live job's limit: running, maybe not stored yet
    trial = store.trial_status(job_id)  # a trial's progress and what harpd did to it (harpd.watch.trials)
    if trial is not None and not admin and trial.uid != uid:
        trial = None  # reports are taken from Slurm's owner only: anyone else sees none
    is_live = sub is not None or chain is not None or bool(own) or bool(changes) or trial is not None or not live
    shown = own if (own or (live and is_live)) else (recs if not live else imported)
    trusted = sub is not None and bool(sub.verified or sub.chain_id)
    if sub is not None and not trusted and not admin and sub.uid != uid:
        sub = None  # a claim Slurm never vouched for says nothing about whose job this is
    if trusted and not own and sub is not None:
        # the live registration, verified with Slurm, wins over another job's imported row with
        # the same id until the poller stores the live record
        shown = {s: r for s, r in shown.items() if r.user in (None, sub.user)}
    if sub is None and not shown and trial is None:
        raise JobStatusError(f"harp knows no job {job_id}")
    if not admin:
        shown = _visible(shown, sub, job_id, uid=uid, user=user)
        if sub is not None and sub.uid != uid:
            sub = None  # the claimant's registration is not the owner's business either
    record = next(iter(shown.values()), None)
    source = next(iter(shown), None)
    attempts = tuple(a.to_dict() for a in store.attempts(chain)) if chain else ()
    ledger: tuple[dict[str, Any], ...] | None = None
    ran_with: tuple[RanWith, ...] | None = None
    if sub is not None or chain is not None or changes:
        ledger, ran_with = _ledger(store, job_id, sub, shown_source=source)
    job = JobStatus(
        job_id=job_id,
        registered=sub is not None,
        chain_id=chain or (None if sub is None else sub.chain_id),
        record=None if record is None else record.to_dict(),
        source=source,
        source_kind=kinds.get(source) if source else (CLUSTER if sub is not None else None),
        also_imported=tuple(sorted(s for s in imported if s not in shown)) if admin else (),
        attempts=attempts,
        limit_changes=tuple(c.to_dict() for c in changes),
        # what seff shows, for the job and each attempt Slurm has a record of
        runs=_runs(store, job_id, chain, attempts, record, source, admin=admin, owner=job_owner(record, sub)),
        ledger=ledger,
        ran_with=ran_with,
        trial=None if trial is None else asdict(trial),  # its report and action as their rows' columns
        # no live record to prefer: every trace's job, each with its source
        other_records=tuple(r.to_dict() for r in list(shown.values())[1:]) if len(shown) > 1 else None,
    )
    if sub is None:
        return replace(
            job,
            user=record.user if record else (access.user_of(trial.uid) if trial else None),
            outcome=record.outcome.value if record else None,
        )
    # the registration's resources and decision as stored, whichever harp wrote them; a DNN job's GPU
    # memory: harp's estimate per GPU against the peak Slurm recorded (gres/gpumem)
    view = gpu_memory_view(sub.stored.get("decision"), record)
    return replace(
        job,
        uid=sub.uid,
        user=sub.user,
        state=sub.state,
        outcome=sub.outcome,
        submitted_at=sub.submitted_at,
        done_at=sub.done_at,
        original=sub.stored.get("original"),
        submitted=sub.stored.get("submitted"),
        decision=sub.stored.get("decision"),
        registered_job_id=sub.job_id,
        gpu_memory=None if view is None else view.to_dict(),
    )


def _ledger(
    store: Store, job_id: str, sub: Submission | None, *, shown_source: str | None
) -> tuple[tuple[dict[str, Any], ...], tuple[RanWith, ...]]:
    """The job's limits ledger (who set each limit of each attempt, when, why) and what each run of it
    really had, from Slurm's records (``harpd.limits.ledger``)."""
    ledger = read_ledger(store, job_id, sub if sub is not None and str(sub.job_id) == str(job_id) else None)
    ran = tuple(
        RanWith(
            attempt=int(r.attempt or 1),
            mem_mb=r.req_mem_mb,
            time_s=r.req_time_s,
            outcome=r.outcome.value,
            state=r.state,
        )
        for r in store.runs_of_job(job_id)
        if shown_source is None or r.source == shown_source
    )
    return tuple(asdict(e) for e in ledger.entries), ran


def job_owner(record: JobRecord | None, sub: Submission | None) -> str | None:
    """Whose job this is: Slurm's record names the owner, else the (verified) registration."""
    if record is not None and record.user is not None:
        return record.user
    return None if sub is None else sub.user


def _runs(
    store: Store,
    job_id: str,
    chain: str | None,
    attempts: tuple[AttemptRow, ...],
    record: JobRecord | None,
    source: str | None,
    *,
    admin: bool,
    owner: str | None,
) -> tuple[RunView, ...]:
    """Each run's Slurm record and its seff efficiencies: the chain's first job, then each attempt's job.

    Only records from the shown job's source (the cluster's own), and for a
    user only records of the same owner: an attempt's job id that another
    source reuses is a different job.
    """
    ids = [chain] if chain else [job_id]
    ids += [str(a["job_id"]) for a in attempts if a.get("job_id")]
    runs: list[RunView] = []
    for n, jid in enumerate(dict.fromkeys(ids)):
        rec = (
            record
            if (jid == job_id and record is not None)
            else (store.get_job(jid, source) if source is not None else None)
        )
        if rec is None or (not admin and owner is not None and rec.user not in (None, owner)):
            continue
        runs.append(RunView(job_id=jid, first=n == 0, record=rec.to_dict(), efficiency=job_efficiencies(rec)))
    return tuple(runs)


def _visible(
    shown: dict[str, JobRecord], sub: Submission | None, job_id: str, *, uid: int, user: str
) -> dict[str, JobRecord]:
    """The records a user may see, or JobStatusError("not yours").

    Slurm's record names the owner; a registration (verified with Slurm) only
    where there is no record yet.
    """
    named = {s: r for s, r in shown.items() if r.user is not None}
    if named:
        mine = {s: r for s, r in shown.items() if r.user == user}
        if not mine:
            raise JobStatusError(f"job {job_id} is not yours")
        return mine
    if sub is not None and sub.uid != uid:
        raise JobStatusError(f"job {job_id} is not yours")
    return shown
