"""Read what a report needs from the store, in a few bulk queries.

The store is read through its column API (one numpy array per column) so a
million jobs never become a million Python objects; harp's own bookkeeping
(submissions: what users asked; attempts: resubmission chains) is looked up
only for the few rows that need it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harpd.report.columns import Jobs, columns_for, normalise, size
from harpd.report.window import Window

_UNFINISHED = ("running", "unknown")
_GPU_COUNT = re.compile(r"(?:^|[,\s])(?:gpu)(?::[^:,]+)?:(\d+)")


@dataclass
class Loaded:
    """The report's inputs: job arrays plus harp's bookkeeping for them."""

    jobs: Jobs
    originals: dict[str, np.ndarray] | None = None
    recovered: np.ndarray | None = None
    chains: list[dict[str, Any]] | None = None
    notes: list[str] = field(default_factory=list)


def window_where(window: Window, user: str | None) -> tuple[str, list[Any]]:
    """SQL condition (written here, values bound) for finished jobs ending in the window."""
    where = ["outcome NOT IN (?, ?)"]
    params: list[Any] = list(_UNFINISHED)
    if window.since is not None:
        where.append("end_time >= ?")
        params.append(window.since)
    if window.until is not None:
        where.append("end_time < ?")
        params.append(window.until)
    if user is not None:
        where.append('"user" = ?')
        params.append(user)
    return " AND ".join(where), params


# --------------------------------------------------------------- Resources


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if np.isfinite(f) else None


def _gpus(res: dict[str, Any]) -> float | None:
    g = res.get("gpus")
    if g is not None:
        tail = str(g).rsplit(":", 1)[-1]
        return _num(tail)
    gres = res.get("gres")
    if gres:
        m = _GPU_COUNT.search(str(gres))
        if m:
            return float(m.group(1))
    return None


def resource_totals(res: dict[str, Any] | None) -> tuple[float | None, float | None, float | None]:
    """(time_s, cpus, mem_mb for the whole job) of a protocol ``Resources`` dict.

    ``None`` where the request left it to Slurm's defaults: the report then
    treats that resource as unchanged rather than guess a partition default.
    """
    if not res:
        return None, None, None
    time_s = _num(res.get("time_s"))
    cpt, ntasks = _num(res.get("cpus_per_task")), _num(res.get("ntasks"))
    cpus = None if cpt is None and ntasks is None else (cpt or 1.0) * (ntasks or 1.0)
    mem = None
    if _num(res.get("mem_mb")) is not None:
        mem = _num(res.get("mem_mb")) * (_num(res.get("nodes")) or 1.0)  # type: ignore[operator]
    elif _num(res.get("mem_per_cpu_mb")) is not None:
        mem = _num(res.get("mem_per_cpu_mb")) * (cpus or 1.0)  # type: ignore[operator]
    elif _num(res.get("mem_per_gpu_mb")) is not None and _gpus(res) is not None:
        mem = _num(res.get("mem_per_gpu_mb")) * _gpus(res)  # type: ignore[operator]
    return time_s, cpus, mem


def originals_from_submissions(
    job_ids: np.ndarray, rows: np.ndarray, subs: dict[str, dict[str, Any]], n: int
) -> dict[str, np.ndarray]:
    """Per-row original request and which resources harp changed.

    ``time_changed``/``mem_changed`` compare the original with what was
    submitted; rows without a submission record stay "unknown" (NaN original,
    changed) so a failure there is never excused.
    """
    out = {k: np.full(n, np.nan) for k in ("time_s", "cpus", "mem_mb")}
    time_changed = np.zeros(n, dtype=bool)
    mem_changed = np.zeros(n, dtype=bool)
    for i in rows.tolist():
        sub = subs.get(str(job_ids[i]))
        if sub is None:
            time_changed[i] = mem_changed[i] = True
            continue
        ot, oc, om = resource_totals(sub.get("original"))
        st, _sc, sm = resource_totals(sub.get("submitted"))
        if ot is not None:
            out["time_s"][i] = ot
        if oc is not None:
            out["cpus"][i] = oc
        if om is not None:
            out["mem_mb"][i] = om
        time_changed[i] = ot != st
        mem_changed[i] = om != sm
    out["time_changed"] = time_changed
    out["mem_changed"] = mem_changed
    return out


# --------------------------------------------------------------- chains


def _chains_for(all_attempts: list[dict[str, Any]], job_ids: set[str]) -> list[dict[str, Any]]:
    """Attempt rows of the chains that touch the reported jobs (keeps user scoping)."""
    keep = {str(r["chain_id"]) for r in all_attempts if str(r["chain_id"]) in job_ids or str(r.get("job_id")) in job_ids}
    return [r for r in all_attempts if str(r["chain_id"]) in keep]


def _recovered(
    store: Any, jobs: Jobs, rows: np.ndarray, all_attempts: list[dict[str, Any]]
) -> np.ndarray:
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
        c, a = str(r["chain_id"]), int(r["attempt"])
        if r.get("job_id") is not None:
            where_is[str(r["job_id"])] = (c, a)
        if (r.get("outcome") or "") == "completed":
            chain_done.setdefault(c, []).append(a)
    # requeues keep the job id: a later completed attempt in the jobs table
    later: dict[str, int] = {}
    uniq = sorted(set(ids))
    for i in range(0, len(uniq), 500):
        chunk = uniq[i : i + 500]
        marks = ", ".join("?" for _ in chunk)
        got = store.job_columns(
            ["job_id", "attempt"], f"job_id IN ({marks}) AND outcome = ?", [*chunk, "completed"]
        )
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


def load(store: Any, by: str, window: Window, user: str | None) -> Loaded:
    """Jobs of the window (and user), with harp's originals and chains."""
    where, params = window_where(window, user)
    raw = store.job_columns(columns_for(by), where, params)
    jobs = normalise(raw)
    n = size(jobs)
    loaded = Loaded(jobs=jobs)
    if n == 0:
        return loaded
    harp_rows = np.flatnonzero(jobs["harp_sized"])
    all_attempts = store.all_attempts()
    if len(harp_rows):
        ids = jobs["job_id"]
        subs = store.submissions_for(str(ids[i]) for i in harp_rows.tolist())
        loaded.originals = originals_from_submissions(ids, harp_rows, subs, n)
        missing = len(harp_rows) - sum(1 for i in harp_rows.tolist() if str(ids[i]) in subs)
        if missing:
            loaded.notes.append(
                f"{missing} harp-sized job(s) have no submission record (imported?): "
                "their original request is unknown, so no saving is counted for them"
            )
        out = jobs["outcome"]
        failed = harp_rows[np.isin(out[harp_rows], ["timeout", "oom"])]
        loaded.recovered = _recovered(store, jobs, failed, all_attempts)
    if all_attempts:
        loaded.chains = _chains_for(all_attempts, set(jobs["job_id"].tolist()))
    else:
        loaded.chains = []
    return loaded


def store_span(store: Any, user: str | None) -> tuple[int, float | None, float | None]:
    """How many finished jobs the store holds and their end-time range: for the
    hint shown when a window catches nothing."""
    where, params = window_where(Window(None, None), user)
    cols = store.job_columns(["end_time"], where, params)
    end = np.asarray(cols["end_time"], dtype=np.float64)
    ok = end[np.isfinite(end)]
    if not len(ok):
        return len(end), None, None
    return len(end), float(ok.min()), float(ok.max())


