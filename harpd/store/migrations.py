"""The store's schema, as append-only migrations: index i brings version i to i+1.

``meta.schema_version`` counts the migrations applied; ``Store.open`` applies
the missing ones in one transaction, so a crash during a migration leaves the
previous version intact.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlite_utils

from harpd.store.columns import _JOB_TYPES, _PK


def _m001_initial(db: sqlite_utils.Database) -> None:
    db.table("jobs").create(
        dict(_JOB_TYPES),
        pk=_PK,
        not_null=["job_id", "source", "attempt", "outcome", "censored_time", "censored_mem", "harp_sized"],
        if_not_exists=True,
    )
    db.table("jobs").create_index(["submit_time"], if_not_exists=True)
    db.table("jobs").create_index(["end_time"], if_not_exists=True)
    db.table("submissions").create(
        {
            "job_id": str,
            "uid": int,
            "user": str,
            "submitted_at": float,
            "job": str,
            "original": str,
            "submitted": str,
            "decision": str,
            "state": str,
            "chain_id": str,
            "outcome": str,
            "done_at": float,
        },
        pk="job_id",
        not_null=["uid", "state", "submitted_at"],
        if_not_exists=True,
    )
    db.table("submissions").create_index(["state"], if_not_exists=True)
    db.table("submissions").create_index(["chain_id"], if_not_exists=True)
    db.table("attempts").create(
        {
            "chain_id": str,
            "attempt": int,
            "job_id": str,
            "limits": str,
            "reason": str,
            "step": str,
            "outcome": str,
            "created_at": float,
            "updated_at": float,
        },
        pk=("chain_id", "attempt"),
        not_null=["chain_id", "attempt", "step", "created_at"],
        if_not_exists=True,
    )
    db.table("attempts").create_index(["job_id"], if_not_exists=True)
    db.table("models").create(
        {
            "id": int,
            "name": str,
            "resource": str,
            "trained_at": float,
            "n_train": int,
            "score": str,
            "champion": int,
            "path": str,
        },
        pk="id",
        not_null=["name", "resource", "trained_at", "champion"],
        if_not_exists=True,
    )
    db.table("models").create_index(["resource", "champion"], if_not_exists=True)


def _m002_limit_changes(db: sqlite_utils.Database) -> None:
    # harpd's own changes to a live job's time limit: "extend" (running, before
    # its limit) and "resize" (pending, re-decided).  The unique (job, kind,
    # old limit) key is the exactly-once rule: one change per crossing.
    db.table("limit_changes").create(
        {
            "job_id": str,
            "kind": str,
            "old_time_s": int,
            "new_time_s": int,
            "old_mem_mb": int,
            "new_mem_mb": int,
            "step": str,
            "reason": str,
            "created_at": float,
            "updated_at": float,
        },
        pk=("job_id", "kind", "old_time_s"),
        not_null=["job_id", "kind", "old_time_s", "step", "created_at"],
        if_not_exists=True,
    )
    db.table("limit_changes").create_index(["step"], if_not_exists=True)


def _m003_decisions(db: sqlite_utils.Database) -> None:
    # what harpd decided for a predict call, bound to the token harp-submit echoes at
    # registration (and leaves in the job's comment): the request and limits
    # harpd extends up to and checks against Slurm come from here, never from
    # the registering client.  ``job_id`` is set once, when a job claims it.
    db.table("decisions").create(
        {
            "token": str,
            "uid": int,
            "user": str,
            "decided_at": float,
            "job": str,
            "decided": str,
            "decision": str,
            "job_id": str,
            "used_at": float,
        },
        pk="token",
        not_null=["token", "uid", "decided_at"],
        if_not_exists=True,
    )
    db.table("decisions").create_index(["job_id"], if_not_exists=True)
    db.table("decisions").create_index(["decided_at"], if_not_exists=True)
    # a registration's decision token, and whether slurmctld vouched for it
    # (owner, limits, submit time): only verified rows are harp's to change or learn from
    db.table("submissions").add_column("token", str)
    db.table("submissions").add_column("verified", int)


def _m004_cpu_changes(db: sqlite_utils.Database) -> None:
    # a pending job's CPUs re-sized at start (kind "resize-cpus"): CPUs per task before and after
    db.table("limit_changes").add_column("old_cpus", int)
    db.table("limit_changes").add_column("new_cpus", int)


def _m005_trials(db: sqlite_utils.Database) -> None:
    # convergence-aware trials (harpd.dnn.trials): what running trials report
    # (``harp progress``; uid is Slurm's owner of the job, checked at the report),
    # each owner's study policy, and what harpd last did to a trial (nice, stop)
    db.table("trial_reports").create(
        {
            "id": int,
            "job_id": str,
            "uid": int,
            "study": str,
            "metric": str,
            "value": float,
            "elapsed_s": float,
            "reported_at": float,
        },
        pk="id",
        not_null=["job_id", "uid", "study", "metric", "value", "elapsed_s", "reported_at"],
        if_not_exists=True,
    )
    db.table("trial_reports").create_index(["job_id"], if_not_exists=True)
    db.table("trial_reports").create_index(["uid", "study"], if_not_exists=True)
    db.table("trial_studies").create(
        {"uid": int, "study": str, "policy": str, "updated_at": float},
        pk=("uid", "study"),
        not_null=["uid", "study", "updated_at"],
        if_not_exists=True,
    )
    db.table("trial_actions").create(
        {"job_id": str, "uid": int, "study": str, "nice": int, "stopped": int, "reason": str, "at": float},
        pk="job_id",
        not_null=["job_id", "uid", "study", "at"],
        if_not_exists=True,
    )


def _m006_decisions_by_user(db: sqlite_utils.Database) -> None:
    """A user's unclaimed decisions, counted on every predict against the per-user quota (#44)."""
    db.execute("CREATE INDEX IF NOT EXISTS idx_decisions_unclaimed_uid ON decisions (uid) WHERE job_id IS NULL")


def _m007_gpu_memory(db: sqlite_utils.Database) -> None:
    """Each run's GPU memory peak per GPU (sacct's gres/gpumem), for the DNN planner's observed peaks (#47).

    A store created at this version already has the column (``_m001`` creates
    ``jobs`` from ``JobRecord``'s fields), an older one gets it here.
    """
    if "used_gpumem_mb" not in db.table("jobs").columns_dict:
        db.table("jobs").add_column("used_gpumem_mb", float)


def _m008_limits_ledger(db: sqlite_utils.Database) -> None:
    """One ledger of each job's limits (#45): the attempt each change of a live job's limit was made in.

    ``limit_changes`` rows, the submission, recovery's ``attempts`` and the
    runs in ``jobs`` are the ledger (``harpd.limits.ledger``), one record of
    each setting, not a second copy.  A change's attempt says which run it
    sized (a requeued job keeps its id); the index finds a task's siblings'
    runs by signature, which the floor of a failure reads on every re-size.
    """
    if "attempt" not in db.table("limit_changes").columns_dict:
        db.table("limit_changes").add_column("attempt", int)
    db.table("jobs").create_index(["signature", "end_time"], if_not_exists=True)


MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = [
    _m001_initial,
    _m002_limit_changes,
    _m003_decisions,
    _m004_cpu_changes,
    _m005_trials,
    _m006_decisions_by_user,
    _m007_gpu_memory,
    _m008_limits_ledger,
]
SCHEMA_VERSION = len(MIGRATIONS)
