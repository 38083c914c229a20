"""Read what a report needs from the store, in a few bulk queries.

The store is read through its column API (one numpy array per column) so a
million jobs never become a million Python objects; harp's own bookkeeping
(submissions: what users asked; attempts: resubmission chains) is looked up
only for the few rows that need it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harpd.features.resources import gpu_count
from harpd.records import AttemptRecord
from harpd.report.columns import Jobs, columns_for, normalise, size
from harpd.report.window import Window

_UNFINISHED = ("running", "unknown")


@dataclass
class Loaded:
    """The report's inputs: job arrays plus harp's bookkeeping for them."""

    jobs: Jobs
    originals: dict[str, np.ndarray] | None = None
    recovered: np.ndarray | None = None
    models: np.ndarray | None = None  # per row: the model that sized a harp job
    chains: list[AttemptRecord] | None = None
    # harpd's changes of live jobs' limits (harpd.watch) for the window's jobs
    extensions: dict[str, int] | None = None
    notes: list[str] = field(default_factory=list)


# a window holding more than this share of the table is read by a plain scan
INDEX_MAX_SHARE = 0.1


@dataclass(frozen=True)
class Filters:
    """Which jobs a report covers besides the window: sacct's ``-u``, ``-A``,
    ``-r`` and harp's ``--source``, each a list of names (empty: any)."""

    users: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()

    def describe(self, *, users: bool = True) -> str:
        """'of alice in account physics from ctc' (empty without filters)."""
        parts = []
        for on, label, names in (
            (users, "of", self.users),
            (True, "in account", self.accounts),
            (True, "in partition", self.partitions),
            (True, "from", self.sources),
        ):
            if on and names:
                parts.append(f"{label} {', '.join(names)}")
        return " ".join(parts)


def _in(column: str, names: tuple[str, ...]) -> tuple[str, list[Any]]:
    if len(names) == 1:
        return f'"{column}" = ?', list(names)
    return f'"{column}" IN ({", ".join("?" for _ in names)})', list(names)


def window_where(window: Window, filters: Filters | None = None, *, use_index: bool = True) -> tuple[str, list[Any]]:
    """SQL condition (written here, values bound) for finished jobs ending in the window.

    ``use_index=False`` writes ``+end_time`` so SQLite scans the table instead
    of walking the end_time index: reading most of a big table through the
    index visits its pages in random order, about twice as slow as a scan.
    """
    filters = filters or Filters()
    col = "end_time" if use_index else "+end_time"
    where = ["outcome NOT IN (?, ?)"]
    params: list[Any] = list(_UNFINISHED)
    if window.since is not None:
        where.append(f"{col} >= ?")
        params.append(window.since)
    if window.until is not None:
        where.append(f"{col} < ?")
        params.append(window.until)
    for column, names in (
        ("user", filters.users),
        ("account", filters.accounts),
        ("partition", filters.partitions),
        ("source", filters.sources),
    ):
        if names:
            cond, values = _in(column, names)
            where.append(cond)
            params.extend(values)
    return " AND ".join(where), params


# --------------------------------------------------------------- Resources

RESOURCE_KEYS = (
    "time_s",
    "mem_mb",
    "mem_per_cpu_mb",
    "mem_per_gpu_mb",
    "cpus_per_task",
    "ntasks",
    "nodes",
    "gpus",
    "gres",
)
SUBMISSION_PATHS = (
    "job_id",
    "decision.model",
    *(f"original.{k}" for k in RESOURCE_KEYS),
    *(f"submitted.{k}" for k in RESOURCE_KEYS),
)


def _num(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return np.nan
    return f if np.isfinite(f) else np.nan


def _floats(values: list[Any]) -> np.ndarray:
    """None -> NaN; anything unreadable (a malformed record) -> NaN too."""
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        return np.array([_num(v) for v in values], dtype=np.float64)


def resource_totals(values: dict[str, list[Any]], prefix: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(time_s, cpus, mem_mb for the whole job) of protocol ``Resources``, vectorised.

    ``values[f"{prefix}.{key}"]`` holds one list per Resources key.  NaN where
    the request left it to Slurm's defaults: the report then treats that
    resource as unchanged rather than guess a partition default.
    """
    f = {k: _floats(values[f"{prefix}.{k}"]) for k in RESOURCE_KEYS if k not in ("gpus", "gres")}

    def or1(x: np.ndarray) -> np.ndarray:
        return np.where(np.isnan(x), 1.0, x)

    cpt, ntasks = f["cpus_per_task"], f["ntasks"]
    cpus = np.where(np.isnan(cpt) & np.isnan(ntasks), np.nan, or1(cpt) * or1(ntasks))
    gpus = np.full(len(cpt), np.nan)
    for i in np.flatnonzero(np.isfinite(f["mem_per_gpu_mb"])).tolist():  # rare: parse only these
        n_gpus = gpu_count(values[f"{prefix}.gpus"][i], values[f"{prefix}.gres"][i])
        gpus[i] = np.nan if n_gpus is None else n_gpus
    mem = np.where(
        np.isfinite(f["mem_mb"]),
        f["mem_mb"] * or1(f["nodes"]),
        np.where(np.isfinite(f["mem_per_cpu_mb"]), f["mem_per_cpu_mb"] * or1(cpus), f["mem_per_gpu_mb"] * gpus),
    )
    return f["time_s"], cpus, mem


def originals_from_submissions(
    rows: np.ndarray, values: dict[str, list[Any]], n: int
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Per-row original request, which resources harp changed, and the model
    named in harp's decision ("unknown" without one).

    ``values`` are ``Store.submission_values(ids of rows, SUBMISSION_PATHS)``.
    ``time_changed``/``mem_changed`` compare the original with what was
    submitted; rows without a submission record stay "unknown" (NaN original,
    changed) so a failure there is never excused.
    """
    found = np.array([j is not None for j in values["job_id"]], dtype=bool)
    ot, oc, om = resource_totals(values, "original")
    st, _sc, sm = resource_totals(values, "submitted")

    def differs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return ~((a == b) | (np.isnan(a) & np.isnan(b)))

    out = {k: np.full(n, np.nan) for k in ("time_s", "cpus", "mem_mb")}
    out["time_s"][rows], out["cpus"][rows], out["mem_mb"][rows] = ot, oc, om
    out["time_changed"] = np.zeros(n, dtype=bool)
    out["mem_changed"] = np.zeros(n, dtype=bool)
    out["time_changed"][rows] = ~found | differs(ot, st)
    out["mem_changed"][rows] = ~found | differs(om, sm)
    models = np.full(n, None, dtype=object)
    models[rows] = [str(m) if m else "unknown" for m in values["decision.model"]]
    return out, models


# --------------------------------------------------------------- chains


def _chains_for(all_attempts: list[AttemptRecord], job_ids: set[str]) -> list[AttemptRecord]:
    """Attempt rows of the chains that touch the reported jobs (keeps user scoping)."""
    keep = {str(r.chain_id) for r in all_attempts if str(r.chain_id) in job_ids or str(r.job_id) in job_ids}
    return [r for r in all_attempts if str(r.chain_id) in keep]


def _recovered(store: Any, jobs: Jobs, rows: np.ndarray, all_attempts: list[AttemptRecord]) -> np.ndarray:
    """Rows (failed runs) whose job later completed: requeued (same id, later
    attempt in ``jobs``) or resubmitted (a later attempt of its chain)."""
    n = size(jobs)
    rec = np.zeros(n, dtype=bool)
    if not len(rows):
        return rec
    ids = [str(jobs["job_id"][i]) for i in rows.tolist()]
    attempt = jobs["attempt"]
    # resubmission chains: chain_id -> attempts, and job id -> (chain, attempt)
    chain_done: dict[str, list[int]] = {}
    where_is: dict[str, tuple[str, int]] = {}
    for r in all_attempts:
        c, a = str(r.chain_id), int(r.attempt)
        if r.job_id is not None:
            where_is[str(r.job_id)] = (c, a)
        if (r.outcome or "") == "completed":
            chain_done.setdefault(c, []).append(a)
    # requeues keep the job id: a later completed attempt in the jobs table
    later: dict[str, int] = {}
    uniq = sorted(set(ids))
    for i in range(0, len(uniq), 500):
        chunk = uniq[i : i + 500]
        marks = ", ".join("?" for _ in chunk)
        got = store.job_columns(["job_id", "attempt"], f"job_id IN ({marks}) AND outcome = ?", [*chunk, "completed"])
        for j, a in zip(got["job_id"].tolist(), got["attempt"].tolist()):
            later[str(j)] = max(later.get(str(j), 0), int(a))
    for i, jid in zip(rows.tolist(), ids):
        a = int(attempt[i])
        if later.get(jid, 0) > a:
            rec[i] = True
            continue
        chain, ca = where_is.get(jid, (jid, a))
        if any(x > ca for x in chain_done.get(chain, ())):
            rec[i] = True
    return rec


# --------------------------------------------------------------- entry


def _index_pays(store: Any, window: Window) -> bool:
    """Whether the window is narrow enough for the end_time index (two
    index-only counts, a few milliseconds)."""
    if window.since is None and window.until is None:
        return False
    inside = store.count_jobs(since=window.since, until=window.until, finished_only=False, time_field="end_time")
    total = store.count_jobs(finished_only=False)
    return inside <= INDEX_MAX_SHARE * total


def load(store: Any, by: str, window: Window, filters: Filters | None) -> Loaded:
    """Jobs of the window (and filters), with harp's originals and chains."""
    where, params = window_where(window, filters, use_index=_index_pays(store, window))
    raw = store.job_columns(columns_for(by) + ["source"], where, params)
    jobs = normalise(raw)
    n = size(jobs)
    loaded = Loaded(jobs=jobs)
    if n == 0:
        return loaded
    harp_rows = np.flatnonzero(jobs["harp_sized"])
    all_attempts = store.all_attempts()
    if len(harp_rows):
        ids = jobs["job_id"]
        values = store.submission_values([str(j) for j in ids[harp_rows].tolist()], SUBMISSION_PATHS)
        loaded.originals, loaded.models = originals_from_submissions(harp_rows, values, n)
        # resubmitted runs may carry no submission of their own; first runs should
        first = jobs["attempt"][harp_rows] == 1
        missing = sum(1 for j, f in zip(values["job_id"], first.tolist()) if j is None and f)
        if missing:
            loaded.notes.append(
                f"{missing} harp-sized job(s) have no submission record (imported?): "
                "their original request is unknown, so no saving is counted for them"
            )
        out = jobs["outcome"]
        failed = harp_rows[np.isin(out[harp_rows], ["timeout", "oom"])]
        loaded.recovered = _recovered(store, jobs, failed, all_attempts)
    loaded.extensions = _limit_changes(store, jobs)
    if all_attempts:
        # only runs that ran out or were resubmitted can belong to a chain
        cand = (jobs["attempt"] > 1) | np.isin(jobs["outcome"], ["timeout", "oom"])
        loaded.chains = _chains_for(all_attempts, set(jobs["job_id"][cand].tolist()))
    else:
        loaded.chains = []
    return loaded


def _limit_changes(store: Any, jobs: Jobs) -> dict[str, int]:
    """Extensions (running) and re-sizes (pending) harpd made to the window's jobs.

    The table holds one row per change made, far fewer than jobs, so it is
    read whole and matched against the window's job ids.
    """
    changes = [
        c
        for c in store.limit_changes(step="done")
        if c.kind in ("extend", "resize", "resize-mem", "resize-mem-per-cpu")
    ]
    out = {"extensions": 0, "jobs_extended": 0, "resized": 0}
    if not changes:
        return out
    ids = set(str(j) for j in jobs["job_id"].tolist())
    extended: set[str] = set()
    for c in changes:
        jid = str(c.job_id)
        if jid not in ids:
            continue
        if c.kind == "extend":
            out["extensions"] += 1
            extended.add(jid)
        else:
            out["resized"] += 1
    out["jobs_extended"] = len(extended)
    return out


def store_span(store: Any, filters: Filters | None) -> tuple[int, float | None, float | None]:
    """How many finished jobs the store holds and their end-time range: for the
    hint shown when a window catches nothing."""
    where, params = window_where(Window(None, None), filters)
    cols = store.job_columns(["end_time"], where, params)
    end = np.asarray(cols["end_time"], dtype=np.float64)
    ok = end[np.isfinite(end)]
    if not len(ok):
        return len(end), None, None
    return len(end), float(ok.min()), float(ok.max())
