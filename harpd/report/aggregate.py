"""Turn job columns into the numbers of a report, vectorised over all jobs.

Everything is a numpy pass over whole columns (group sums via ``bincount``),
so a million stored jobs cost well under a second here; the store read is
the expensive part.  The renderers get plain dicts and lists (``Report``) and
never see arrays, so table, CSV, JSON and HTML cannot disagree on a number.
It is one module because every section of a report shares
the same group index and job masks, computed once at the top of ``aggregate``.

Rows are per (source, group): imported history and the cluster's own jobs,
or two imported traces, may share user names that are not the same people.

Definitions (per job, then summed):
- core-hours requested = CPUs x time limit (what the user reserved);
  allocated = AllocCPUS x elapsed (what the cluster held);
  used = TotalCPU.
- memory GB-hours requested = ReqMem x time limit; allocated = ReqMem x
  elapsed; used = MaxRSS x elapsed (peak, so an upper bound of real use).
- GPU-hours requested = GPUs x time limit; allocated = AllocGPUs x elapsed.
  Slurm accounting has no GPU utilisation, so there is no "used".
- waste = allocated - used, never negative per job.
- reserved, never held = CPUs x (time limit - elapsed): what a time limit
  blocked beyond the run; the one waste an export without TotalCPU and
  MaxRSS (sacct -o without them) still shows.
- group efficiencies are ratios of the sums (used/allocated core-hours,
  used/allocated GB-hours, allocated/requested core-hours for time), i.e.
  resource-weighted; per-job seff-style values feed the distributions.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, NotRequired, TypedDict, cast

import numpy as np

from harpd.records import AttemptRecord
from harpd.report.columns import Jobs, factorize, size
from harpd.report.efficiency import cpu_efficiency, memory_efficiency, time_efficiency
from harpd.report.gpu_memory import GpuMemoryRowJson
from harpd.report.queue_figures import QueueFigures
from harpd.report.scoreboard import Scoreboard
from harpd.report.window import Window

FAILURE_CAUSES = ("timeout", "oom", "other")
_OTHER_FAILURES = ("failed", "node_fail")
EFF_BINS = np.array([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, np.inf])

# the per-group metrics, in output order: (name, unit, meaning)
METRICS: tuple[tuple[str, str, str], ...] = (
    ("jobs", "count", "finished job runs"),
    ("core_h_req", "core-h", "CPUs x time limit"),
    ("core_h_alloc", "core-h", "AllocCPUS x elapsed"),
    ("core_h_used", "core-h", "TotalCPU"),
    ("core_h_waste", "core-h", "allocated - used"),
    ("cpu_eff", "ratio", "used / allocated core-hours"),
    ("mem_gbh_req", "GB-h", "ReqMem x time limit"),
    ("mem_gbh_alloc", "GB-h", "ReqMem x elapsed"),
    ("mem_gbh_used", "GB-h", "MaxRSS x elapsed"),
    ("mem_gbh_waste", "GB-h", "allocated - used"),
    ("mem_eff", "ratio", "used / allocated GB-hours"),
    ("time_eff", "ratio", "allocated / requested core-hours (elapsed / time limit)"),
    ("core_h_limit_unused", "core-h", "CPUs x (time limit - elapsed): reserved, never held"),
    ("gpu_h_req", "GPU-h", "GPUs x time limit"),
    ("gpu_h_alloc", "GPU-h", "AllocGPUs x elapsed"),
    ("completed", "count", "jobs that completed"),
    ("timeout", "count", "jobs ended at their time limit"),
    ("oom", "count", "jobs ended out of memory"),
    ("failed_other", "count", "other failures (failed, node_fail)"),
    ("cancelled", "count", "cancelled or preempted jobs"),
    ("failed_core_h", "core-h", "core-hours allocated to failed jobs"),
    ("resubmitted", "count", "runs with attempt > 1"),
    ("resubmit_core_h", "core-h", "core-hours allocated to runs with attempt > 1"),
    ("harp_sized", "count", "jobs whose request harp changed"),
)
METRIC_NAMES = tuple(m[0] for m in METRICS)


class GroupRow(TypedDict):
    """One row of the report's table (a group, or the total): its key, then each of ``METRICS``.

    ``source``: the row's jobs' source, where the report mixes sources;
    ``signature``: grouped by signature, the program's signature (``key`` is then its name).
    NaN where a metric is undefined (``Report.to_dict`` writes None).
    """

    key: str
    source: NotRequired[str]
    signature: NotRequired[str]
    jobs: int
    core_h_req: float
    core_h_alloc: float
    core_h_used: float
    core_h_waste: float
    cpu_eff: float
    mem_gbh_req: float
    mem_gbh_alloc: float
    mem_gbh_used: float
    mem_gbh_waste: float
    mem_eff: float
    time_eff: float
    core_h_limit_unused: float
    gpu_h_req: float
    gpu_h_alloc: float
    completed: int
    timeout: int
    oom: int
    failed_other: int
    cancelled: int
    failed_core_h: float
    resubmitted: int
    resubmit_core_h: float
    harp_sized: int


# the sacct fields (``sacct -o``) each job column comes from: when an export
# lacks one, the report says which field would fill its empty panels
SACCT_FIELDS = {
    "used_cpu_s": "TotalCPU",
    "used_mem_mb": "MaxRSS",
    "used_time_s": "Elapsed",
    "req_time_s": "Timelimit",
    "req_mem_mb": "ReqMem",
    "user": "User",
    "account": "Account",
    "partition": "Partition",
}


class WindowJson(TypedDict):
    """The report's window in its JSON: epoch seconds (None: open) and the window in words."""

    since: float | None
    until: float | None
    text: str


class MetricJson(TypedDict):
    """One of ``METRICS`` in the report's JSON: what a column of the groups means."""

    name: str
    unit: str
    meaning: str


class ReportJson(TypedDict):
    """``Report`` as ``harp report --format json`` prints it: the same fields, NaN written as None.

    ``total`` and ``groups`` hold ``GroupRow``s with None for NaN (JSON has no
    NaN); ``metrics`` says what each of their columns means.
    """

    by: str
    window: WindowJson
    generated_at: float
    scope: str
    total: dict[str, str | float | None]
    groups: list[dict[str, str | float | None]]
    outcomes: dict[str, int]
    failures: dict[str, dict[str, float | None]]
    resubmissions: dict[str, Any]
    harp: dict[str, Any]
    distributions: dict[str, Any]
    timeline: dict[str, Any]
    calibration: dict[str, Any]
    scoreboard: Scoreboard
    notes: list[str]
    source: str
    queue: QueueFigures
    sources: list[str]
    measured: dict[str, int]
    personal: bool
    gpu_memory: list[GpuMemoryRowJson]
    metrics: list[MetricJson]


@dataclass
class Report:
    """Everything a renderer shows; JSON-able via ``to_dict``."""

    by: str
    window: Window
    generated_at: float
    scope: str  # "all users" or "user alice"
    total: GroupRow
    groups: list[GroupRow]  # sorted by allocated core-hours, largest first
    outcomes: dict[str, int]
    failures: dict[str, dict[str, float]]
    resubmissions: dict[str, Any]
    harp: dict[str, Any]
    distributions: dict[str, Any]
    timeline: dict[str, Any]
    calibration: dict[str, Any]
    scoreboard: Scoreboard = field(default_factory=Scoreboard)
    notes: list[str] = field(default_factory=list)
    source: str = ""
    queue: QueueFigures = field(default_factory=QueueFigures)  # `harp replay --schedule`'s last figures, if any
    sources: list[str] = field(default_factory=list)  # the jobs' sources (cluster or trace), sorted
    # per job column (SACCT_FIELDS): how many of the report's jobs carry a value
    measured: dict[str, int] = field(default_factory=dict)
    # a user's own report (not an admin's): their jobs and what harp saved them, no model scoreboard
    personal: bool = False
    # DNN jobs harp planned: estimate vs observed GPU memory per setup (harpd.report.gpu_memory)
    gpu_memory: list[GpuMemoryRowJson] = field(default_factory=list)

    def missing(self, *columns: str) -> list[str]:
        """The sacct fields of ``columns`` that no job of the report carries."""
        return [SACCT_FIELDS.get(c, c) for c in columns if self.measured.get(c, 0) == 0]

    def to_dict(self) -> ReportJson:
        d = asdict(self)
        d["window"] = {
            "since": self.window.since,
            "until": self.window.until,
            "text": self.window.describe(),
        }
        d["metrics"] = [{"name": n, "unit": u, "meaning": m} for n, u, m in METRICS]
        for res in ("time", "mem"):  # chart samples, not data: keep exports small
            for cohort in ("harp", "user"):
                d["calibration"].get(res, {}).get(cohort, {}).pop("points", None)
        out: ReportJson = _clean(d)  # the dataclass's fields, JSON-safe, with window and metrics as above
        return out


def _clean(x: Any) -> Any:
    """JSON-safe copy: numpy scalars to Python, NaN/inf to None."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, np.ndarray):
        return [_clean(v) for v in x.tolist()]
    if isinstance(x, (np.bool_, bool)):
        return bool(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        f = float(x)
        return f if math.isfinite(f) else None
    return x


# ------------------------------------------------------------------ per job


@dataclass
class _Derived:
    """Per-job quantities every section needs, computed once."""

    n: int
    core_h_req: np.ndarray
    core_h_alloc: np.ndarray
    core_h_limit_unused: np.ndarray
    core_h_used: np.ndarray
    mem_gbh_req: np.ndarray
    mem_gbh_alloc: np.ndarray
    mem_gbh_used: np.ndarray
    gpu_h_req: np.ndarray
    gpu_h_alloc: np.ndarray
    outcome: dict[str, np.ndarray]  # boolean mask per outcome name
    failed: np.ndarray  # timeout | oom | other failures
    harp: np.ndarray
    resubmit: np.ndarray


def _col(jobs: Jobs, name: str, n: int) -> np.ndarray:
    v = jobs.get(name)
    return np.full(n, np.nan) if v is None else v


def _prefer(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a`` where known, else ``b`` (allocation, else request)."""
    return np.where(np.isfinite(a), a, b)


def derive(jobs: Jobs) -> _Derived:
    n = size(jobs)
    elapsed_h = _col(jobs, "used_time_s", n) / 3600.0
    limit_h = _col(jobs, "req_time_s", n) / 3600.0
    limit_h = np.where(limit_h > 0, limit_h, np.nan)  # 0/None = unlimited
    req_cpus = _col(jobs, "req_cpus", n)
    cpus = _prefer(_col(jobs, "alloc_cpus", n), req_cpus)
    req_cpus = _prefer(req_cpus, cpus)
    mem_gb = _col(jobs, "req_mem_mb", n) / 1024.0
    rss_gb = _col(jobs, "used_mem_mb", n) / 1024.0
    req_gpus = _col(jobs, "req_gpus", n)
    gpus = _prefer(_col(jobs, "alloc_gpus", n), req_gpus)
    req_gpus = _prefer(req_gpus, gpus)

    out = jobs.get("outcome")
    if out is None:
        out = np.full(n, "unknown", dtype=object)
    codes, labels = factorize(out, missing="unknown")
    masks: dict[str, np.ndarray] = {}
    for i, lab in enumerate(labels):
        masks[lab] = codes == i
    none = np.zeros(n, dtype=bool)
    timeout = masks.get("timeout", none)
    oom = masks.get("oom", none)
    other = none.copy()
    for name in _OTHER_FAILURES:
        other |= masks.get(name, none)
    masks["other"] = other
    harp = jobs["harp_sized"] if "harp_sized" in jobs else none
    attempt = jobs["attempt"] if "attempt" in jobs else np.ones(n, dtype=np.int64)
    return _Derived(
        n=n,
        core_h_req=req_cpus * limit_h,
        core_h_alloc=cpus * elapsed_h,
        core_h_limit_unused=np.maximum(req_cpus * limit_h - cpus * elapsed_h, 0.0),
        core_h_used=_col(jobs, "used_cpu_s", n) / 3600.0,
        mem_gbh_req=mem_gb * limit_h,
        mem_gbh_alloc=mem_gb * elapsed_h,
        mem_gbh_used=rss_gb * elapsed_h,
        gpu_h_req=req_gpus * limit_h,
        gpu_h_alloc=gpus * elapsed_h,
        outcome=masks,
        failed=timeout | oom | other,
        harp=harp,
        resubmit=attempt > 1,
    )


# ------------------------------------------------------------------ groups


def _gsum(codes: np.ndarray, k: int, x: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Per-group sums of the known values; NaN for a group whose (masked)
    jobs all lack the value, so "not measured" never reads as 0."""
    ok = np.isfinite(x) if x.dtype.kind == "f" else np.ones(len(x), dtype=bool)
    if mask is not None:
        ok &= mask
    w = np.where(ok, x, 0.0).astype(np.float64, copy=False)
    out = np.bincount(codes, weights=w, minlength=k).astype(np.float64, copy=False)
    known = np.bincount(codes[ok], minlength=k)
    present = np.bincount(codes, minlength=k) if mask is None else np.bincount(codes[mask], minlength=k)
    out[(known == 0) & (present > 0)] = np.nan
    return out


def _nsum(v: np.ndarray) -> Any:
    """Sum of group sums: NaN only if no group knew the value."""
    if v.dtype.kind == "f":
        return np.nan if v.size and np.isnan(v).all() else np.nansum(v)
    return v.sum()


def _gcount(codes: np.ndarray, k: int, mask: np.ndarray) -> np.ndarray:
    return np.bincount(codes[mask], minlength=k)


def _safe_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.full(len(a), np.nan)
    np.divide(a, b, out=out, where=b > 0)
    return out


def group_metrics(d: _Derived, codes: np.ndarray, k: int) -> dict[str, np.ndarray]:
    """Every METRICS column for ``k`` groups given each job's group code."""
    both_cpu = np.isfinite(d.core_h_used) & np.isfinite(d.core_h_alloc)
    both_mem = np.isfinite(d.mem_gbh_used) & np.isfinite(d.mem_gbh_alloc)
    both_time = np.isfinite(d.core_h_alloc) & np.isfinite(d.core_h_req)
    cpu_waste = np.where(both_cpu, np.maximum(d.core_h_alloc - d.core_h_used, 0.0), np.nan)
    mem_waste = np.where(both_mem, np.maximum(d.mem_gbh_alloc - d.mem_gbh_used, 0.0), np.nan)
    m = {
        "jobs": np.bincount(codes, minlength=k).astype(np.int64),
        "core_h_req": _gsum(codes, k, d.core_h_req),
        "core_h_alloc": _gsum(codes, k, d.core_h_alloc),
        "core_h_used": _gsum(codes, k, d.core_h_used),
        "core_h_waste": _gsum(codes, k, cpu_waste),
        # ratio parts: only jobs where both sides are known
        "_cpu_num": _gsum(codes, k, d.core_h_used, both_cpu),
        "_cpu_den": _gsum(codes, k, d.core_h_alloc, both_cpu),
        "mem_gbh_req": _gsum(codes, k, d.mem_gbh_req),
        "mem_gbh_alloc": _gsum(codes, k, d.mem_gbh_alloc),
        "mem_gbh_used": _gsum(codes, k, d.mem_gbh_used),
        "mem_gbh_waste": _gsum(codes, k, mem_waste),
        "_mem_num": _gsum(codes, k, d.mem_gbh_used, both_mem),
        "_mem_den": _gsum(codes, k, d.mem_gbh_alloc, both_mem),
        "_time_num": _gsum(codes, k, d.core_h_alloc, both_time),
        "_time_den": _gsum(codes, k, d.core_h_req, both_time),
        "core_h_limit_unused": _gsum(codes, k, d.core_h_limit_unused),
        "gpu_h_req": _gsum(codes, k, d.gpu_h_req),
        "gpu_h_alloc": _gsum(codes, k, d.gpu_h_alloc),
        "completed": _gcount(codes, k, d.outcome.get("completed", np.zeros(d.n, bool))),
        "timeout": _gcount(codes, k, d.outcome.get("timeout", np.zeros(d.n, bool))),
        "oom": _gcount(codes, k, d.outcome.get("oom", np.zeros(d.n, bool))),
        "failed_other": _gcount(codes, k, d.outcome["other"]),
        "cancelled": _gcount(
            codes,
            k,
            d.outcome.get("cancelled", np.zeros(d.n, bool)) | d.outcome.get("preempted", np.zeros(d.n, bool)),
        ),
        "failed_core_h": _gsum(codes, k, d.core_h_alloc, d.failed),
        "resubmitted": _gcount(codes, k, d.resubmit),
        "resubmit_core_h": _gsum(codes, k, d.core_h_alloc, d.resubmit),
        "harp_sized": _gcount(codes, k, d.harp),
    }
    return _with_ratios(m)


def _with_ratios(m: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    for eff, part in (("cpu_eff", "_cpu"), ("mem_eff", "_mem"), ("time_eff", "_time")):
        m[eff] = _safe_div(m[f"{part}_num"], m[f"{part}_den"])
    return m


def total_metrics(gm: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The all-jobs row from the group sums (sums of sums, ratios of sums)."""
    return _with_ratios({k: np.array([_nsum(v)], dtype=v.dtype) for k, v in gm.items() if not k.endswith("_eff")})


def _rows(labels: list[str], m: dict[str, np.ndarray], sources: list[str] | None = None) -> list[GroupRow]:
    rows: list[GroupRow] = []
    for i, lab in enumerate(labels):
        row: dict[str, Any] = {"key": lab}
        if sources is not None:
            row["source"] = sources[i]
        for name in METRIC_NAMES:
            v = m[name][i]
            row[name] = int(v) if m[name].dtype.kind in "iu" else float(v)
        rows.append(cast(GroupRow, row))  # every metric of METRIC_NAMES, as GroupRow names them
    return rows


# ------------------------------------------------------------------ sections


def _failures(d: _Derived) -> dict[str, dict[str, float]]:
    out = {}
    for cause in FAILURE_CAUSES:
        mask = d.outcome.get(cause, np.zeros(d.n, bool))
        out[cause] = {
            "jobs": int(mask.sum()),
            "core_h": float(np.nansum(d.core_h_alloc[mask])),
            "mem_gbh": float(np.nansum(d.mem_gbh_alloc[mask])),
        }
    return out


def _distribution(values: np.ndarray) -> dict[str, Any]:
    v = values[np.isfinite(values)]
    counts, _ = np.histogram(np.clip(v, 0.0, 1e9), bins=EFF_BINS)
    pct = np.percentile(v, [10, 25, 50, 75, 90]).tolist() if len(v) else [None] * 5
    return {
        "bins": [
            f"{int(a * 100)}-{int(b * 100)}%" if np.isfinite(b) else f">={int(a * 100)}%"
            for a, b in zip(EFF_BINS[:-1], EFF_BINS[1:])
        ],
        "counts": counts.tolist(),
        "n": int(len(v)),
        "p10": pct[0],
        "p25": pct[1],
        "median": pct[2],
        "p75": pct[3],
        "p90": pct[4],
    }


#: the timeline's calendar bins: nominal width in seconds -> months per bin
_CALENDAR_MONTHS = {30 * 86400.0: 1, 91 * 86400.0: 3, 365 * 86400.0: 12}


def _month_bins(t: np.ndarray, months: int) -> np.ndarray:
    """Per epoch time, its calendar bin (UTC): months since January 1970, divided by ``months``."""
    secs = np.floor(np.asarray(t, dtype=np.float64)).astype(np.int64).astype("datetime64[s]")
    return np.floor_divide(secs.astype("datetime64[M]").astype(np.int64), months)


def _month_start(month: int) -> float:
    """Epoch seconds of the first instant (UTC) of ``month`` months after January 1970."""
    return float(np.datetime64(int(month), "M").astype("datetime64[s]").astype(np.int64))


def _timeline(jobs: Jobs, d: _Derived, window: Window, now: float) -> dict[str, Any]:
    """Allocation and use per calendar bin of job end time (<= ~60 bins)."""
    end = _col(jobs, "end_time", d.n)
    ok = np.isfinite(end)
    if not ok.any():
        return {
            "bin_s": 0,
            "starts": [],
            "core_h_alloc": [],
            "core_h_used": [],
            "core_h_waste": [],
            "core_h_limit_unused": [],
            "mem_gbh_alloc": [],
            "mem_gbh_used": [],
            "jobs": [],
            "gaps": 0,
        }
    # an open end follows the data (imported history may be years old), a
    # given end is kept even if empty: "nothing ran then" is information
    lo = window.since if window.since is not None else float(end[ok].min())
    if window.until is not None:
        hi = window.until
    elif window.since is not None:
        hi = max(now, float(end[ok].max()) + 1.0)
    else:
        hi = float(end[ok].max()) + 1.0
    span = max(hi - lo, 1.0)
    bin_s = 86400.0
    for cand in (3600.0, 6 * 3600.0, 86400.0, 7 * 86400.0, 30 * 86400.0, 91 * 86400.0, 365 * 86400.0):
        bin_s = cand
        if span / cand <= 60:
            break
    months = _CALENDAR_MONTHS.get(bin_s)
    if months:
        # months, quarters and years are calendar ones (UTC): 365-day bins counted from 1970
        # drift a quarter day a year, so 1996's jobs fell in a bin starting in December 1995
        first = int(_month_bins(np.array([lo]), months)[0])
        nb = max(1, int(_month_bins(np.array([hi - 1.0]), months)[0]) - first + 1)
        idx = np.clip(_month_bins(np.where(ok, end, lo), months) - first, 0, nb - 1)
        bin_starts = [_month_start((first + i) * months) for i in range(nb)]
    else:
        start = math.floor(lo / bin_s) * bin_s
        nb = max(1, int(math.ceil((hi - start) / bin_s)))
        idx = np.clip(((end - start) // bin_s), 0, nb - 1)
        bin_starts = [start + i * bin_s for i in range(nb)]
    idx = np.where(ok, idx, 0).astype(np.int64)
    both = np.isfinite(d.core_h_used) & np.isfinite(d.core_h_alloc)
    waste = np.where(both, np.maximum(d.core_h_alloc - d.core_h_used, 0.0), np.nan)
    jobs_per_bin = np.bincount(idx[ok], minlength=nb)
    # an open start follows the data: two sources decades apart (an old trace
    # and this year's cluster) would stretch the chart over empty years, so
    # empty bins are left out there ("gaps" counts them); a window the admin
    # gave keeps its empty bins, as above
    keep = np.flatnonzero(jobs_per_bin > 0) if window.since is None else np.arange(nb)
    series = {
        "core_h_alloc": d.core_h_alloc,
        "core_h_used": d.core_h_used,
        "core_h_waste": waste,
        "core_h_limit_unused": d.core_h_limit_unused,
        "mem_gbh_alloc": d.mem_gbh_alloc,
        "mem_gbh_used": d.mem_gbh_used,
    }
    out: dict[str, Any] = {"bin_s": bin_s, "starts": [bin_starts[i] for i in keep.tolist()]}
    for name, values in series.items():
        out[name] = _gsum(idx, nb, values, ok)[keep].tolist()
    out["jobs"] = jobs_per_bin[keep].tolist()
    out["gaps"] = int(nb - len(keep))
    return out


def _sample(idx: np.ndarray, k: int) -> np.ndarray:
    """At most ``k`` indices spread evenly (deterministic: same data, same chart)."""
    if len(idx) <= k:
        return idx
    return idx[np.linspace(0, len(idx) - 1, k).astype(np.int64)]


def _calibration_one(
    req: np.ndarray, used: np.ndarray, miss: np.ndarray, usable: np.ndarray, cohort: np.ndarray, points: int
) -> dict[str, Any]:
    sel = usable & cohort & np.isfinite(req) & (req > 0) & np.isfinite(used) & (used >= 0)
    idx = np.flatnonzero(sel)
    n = len(idx)
    if n == 0:
        return {"n": 0, "coverage": None, "median_ratio": None, "deciles": [], "points": []}
    r, u, mi = req[idx], used[idx], miss[idx]
    covered = ~mi
    ratio = u / r
    # coverage per decile of the request (reliability of a quantile forecast)
    deciles = []
    if n >= 20:
        # bins at the request's deciles (searchsorted: no full sort of 1M values);
        # ties can leave a bin empty, which is then skipped
        edges = np.quantile(r, np.linspace(0.1, 0.9, 9))
        b = np.searchsorted(edges, r, side="right")
        counts = np.bincount(b, minlength=10)
        cov = np.bincount(b, weights=covered.astype(np.float64), minlength=10)
        bounds = [float(r.min()), *edges.tolist(), float(r.max())]
        for k in range(10):
            if counts[k]:
                deciles.append(
                    {
                        "req_lo": bounds[k],
                        "req_hi": bounds[k + 1],
                        "n": int(counts[k]),
                        "coverage": float(cov[k] / counts[k]),
                    }
                )
    pts = _sample(np.arange(n), points)
    return {
        "n": int(n),
        "coverage": float(covered.mean()),
        "median_ratio": float(np.median(ratio)),
        "deciles": deciles,
        "points": [[float(r[i]), float(u[i]), bool(mi[i])] for i in pts],
    }


def _calibration(jobs: Jobs, d: _Derived, targets: dict[str, float], points: int) -> dict[str, Any]:
    """Requests (harp's predictions or users' guesses) against what jobs used.

    A request "covers" a job unless the job ran out of that resource: a
    TIMEOUT is a miss for time, an OOM a miss for memory.  Cancelled jobs are
    left out (they stopped for another reason, their use is unknown).
    """
    n = d.n
    usable = ~(d.outcome.get("cancelled", np.zeros(n, bool)) | d.outcome.get("preempted", np.zeros(n, bool)))
    out: dict[str, Any] = {}
    for res, req_col, used_col, miss_name in (
        ("time", "req_time_s", "used_time_s", "timeout"),
        ("mem", "req_mem_mb", "used_mem_mb", "oom"),
    ):
        req = _col(jobs, req_col, n)
        used = _col(jobs, used_col, n)
        miss = d.outcome.get(miss_name, np.zeros(n, bool))
        out[res] = {
            "target": targets.get(res, 0.95),
            "harp": _calibration_one(req, used, miss, usable, d.harp, points),
            "user": _calibration_one(req, used, miss, usable, ~d.harp, points),
        }
    return out


def _resubmissions(
    d: _Derived, chains: list[AttemptRecord] | None, extensions: dict[str, int] | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "runs": int(d.resubmit.sum()),
        "core_h": float(np.nansum(d.core_h_alloc[d.resubmit])),
        "mem_gbh": float(np.nansum(d.mem_gbh_alloc[d.resubmit])),
        "completed": int((d.resubmit & d.outcome.get("completed", np.zeros(d.n, bool))).sum()),
    }
    if chains is not None:
        by_chain: dict[str, list[AttemptRecord]] = {}
        for row in chains:
            by_chain.setdefault(str(row.chain_id), []).append(row)
        recovered = 0
        pending = 0
        for rows in by_chain.values():
            outs = {str(r.outcome or "") for r in rows if int(r.attempt or 0) > 1}
            if "completed" in outs:
                recovered += 1
            elif any((r.step or "") != "done" for r in rows):
                pending += 1
        out["chains"] = len(by_chain)
        out["chains_recovered"] = recovered
        out["chains_pending"] = pending
        out["attempts"] = len(chains)
    if extensions:  # soft limits: what harpd raised or re-sized instead of letting it be killed
        out.update(extensions)
    return out


def _harp(
    jobs: Jobs, d: _Derived, originals: dict[str, np.ndarray] | None, recovered: np.ndarray | None
) -> dict[str, Any]:
    """What users asked against what harp gave, for jobs harp resized.

    Saved allocation counts only what the cluster really held less of
    (CPUs and memory over the elapsed time); a shorter time limit saves no
    compute by itself but frees the reservation for backfill, so it is
    reported apart as "reservation".  Failures harp caused are runs of
    harp-sized jobs that ran out of a resource harp had lowered; their
    compute is subtracted from the savings.
    """
    n = d.n
    h = d.harp
    res: dict[str, Any] = {"jobs": int(h.sum())}
    if not h.any():
        return res
    elapsed_h = _col(jobs, "used_time_s", n) / 3600.0
    limit_h = _col(jobs, "req_time_s", n) / 3600.0
    cpus = _prefer(_col(jobs, "req_cpus", n), _col(jobs, "alloc_cpus", n))
    mem_gb = _col(jobs, "req_mem_mb", n) / 1024.0
    o = originals or {}
    o_time_h = _prefer(o.get("time_s", np.full(n, np.nan)) / 3600.0, limit_h)
    o_cpus = _prefer(o.get("cpus", np.full(n, np.nan)), cpus)
    o_mem_gb = _prefer(o.get("mem_mb", np.full(n, np.nan)) / 1024.0, mem_gb)
    known = np.zeros(n, dtype=bool)
    for k in ("time_s", "cpus", "mem_mb"):
        if k in o:
            known |= np.isfinite(o[k])
    known &= h

    def s(x: np.ndarray, mask: np.ndarray = h) -> float:
        return float(np.nansum(np.where(mask, x, np.nan)))

    asked = {
        "core_h_reserved": s(o_cpus * o_time_h),
        "core_h_alloc": s(o_cpus * elapsed_h),
        "mem_gbh_alloc": s(o_mem_gb * elapsed_h),
    }
    given = {
        "core_h_reserved": s(cpus * limit_h),
        "core_h_alloc": s(cpus * elapsed_h),
        "mem_gbh_alloc": s(mem_gb * elapsed_h),
    }
    saved = {k: asked[k] - given[k] for k in asked}
    # a run-out counts against harp when harp set that resource: changed and
    # lower than asked, or changed from "not given" (unknown original)
    t_changed = o.get("time_changed", h)
    m_changed = o.get("mem_changed", h)
    t_known = np.isfinite(o.get("time_s", np.full(n, np.nan)))
    m_known = np.isfinite(o.get("mem_mb", np.full(n, np.nan)))
    lowered_time = h & t_changed & (~t_known | (limit_h < o_time_h - 1e-9))
    lowered_mem = h & m_changed & (~m_known | (mem_gb < o_mem_gb - 1e-9))
    timeout = d.outcome.get("timeout", np.zeros(n, bool))
    oom = d.outcome.get("oom", np.zeros(n, bool))
    caused = (timeout & lowered_time) | (oom & lowered_mem)
    cost = {
        "core_h_reserved": s(cpus * limit_h, caused),
        "core_h_alloc": s(d.core_h_alloc, caused),
        "mem_gbh_alloc": s(d.mem_gbh_alloc, caused),
    }
    res.update(
        {
            "with_original": int(known.sum()),
            "asked": asked,
            "allocated": given,
            "saved": saved,
            "failures_caused": {
                "jobs": int(caused.sum()),
                "timeout": int((caused & timeout).sum()),
                "oom": int((caused & oom).sum()),
                "cost": cost,
                "recovered": None if recovered is None else int((caused & recovered).sum()),
            },
            "net_saved": {k: saved[k] - cost[k] for k in cost},
            "completed": int((h & d.outcome.get("completed", np.zeros(n, bool))).sum()),
        }
    )
    return res


# ------------------------------------------------------------------ entry


@dataclass(frozen=True, slots=True)
class Bookkeeping:
    """harp's own records of a report's jobs, beside their accounting (``harpd.report.source.Loaded``'s).

    ``originals`` holds, per job row, what the user asked before harp changed
    it (``time_s``, ``cpus``, ``mem_mb``; NaN where unknown); ``recovered``
    marks rows whose resubmission chain later completed; ``chains`` the
    resubmission attempts, ``extensions`` harpd's changes of live jobs' limits.
    """

    originals: dict[str, np.ndarray] | None = None
    recovered: np.ndarray | None = None
    chains: list[AttemptRecord] | None = None
    extensions: dict[str, int] | None = None


def build_report(
    jobs: Jobs,
    *,
    by: str,
    window: Window,
    scope: str = "all users",
    bookkeeping: Bookkeeping | None = None,
    scoreboard: Scoreboard | None = None,
    targets: dict[str, float] | None = None,
    calibration_points: int = 1500,
    now: float | None = None,
) -> Report:
    """The report of ``jobs`` (already filtered to the window and the user).

    ``bookkeeping``: what harp did to them (none: jobs harp never saw).
    """
    kept = bookkeeping or Bookkeeping()
    now = time.time() if now is None else now
    d = derive(jobs)
    n = d.n
    if by not in jobs:
        raise ValueError(f"cannot group by {by!r}: column not loaded")
    codes, labels, group_sources = _groups(jobs, by, n)
    k = len(labels)
    gm = group_metrics(d, codes, k)
    rows = _rows(labels, gm, group_sources)
    if by == "signature" and "job_name" in jobs:
        for row, name in zip(rows, program_labels(labels, codes, jobs["job_name"])):
            row["signature"], row["key"] = row["key"], name
    rows.sort(key=lambda r: (-r["core_h_alloc"], -r["jobs"], r["key"]))
    tm = total_metrics(gm) if k else group_metrics(d, np.zeros(0, dtype=np.int64), 1)
    total = _rows(["(total)"], tm)[0]  # parenthesised: cannot clash with a user named TOTAL
    sources = sorted(set(group_sources or ()))
    outcome_counts = {name: int(mask.sum()) for name, mask in d.outcome.items() if name != "other"}
    cpus = _prefer(_col(jobs, "alloc_cpus", n), _col(jobs, "req_cpus", n))
    per_job = {
        "time_eff": time_efficiency(_col(jobs, "used_time_s", n), _col(jobs, "req_time_s", n)),
        "cpu_eff": cpu_efficiency(_col(jobs, "used_cpu_s", n), _col(jobs, "used_time_s", n), cpus),
        "mem_eff": memory_efficiency(_col(jobs, "used_mem_mb", n), _col(jobs, "req_mem_mb", n)),
    }
    return Report(
        by=by,
        window=window,
        generated_at=now,
        scope=scope,
        total=total,
        groups=rows,
        outcomes=dict(sorted(outcome_counts.items())),
        failures=_failures(d),
        resubmissions=_resubmissions(d, kept.chains, kept.extensions),
        harp=_harp(jobs, d, kept.originals, kept.recovered),
        distributions={k2: _distribution(v) for k2, v in per_job.items()},
        timeline=_timeline(jobs, d, window, now),
        calibration=_calibration(jobs, d, targets or {"time": 0.95, "mem": 0.95}, calibration_points),
        scoreboard=scoreboard or Scoreboard(),
        sources=sources,
        measured={
            c: int(np.isfinite(jobs[c]).sum()) if jobs[c].dtype.kind == "f" else sum(1 for v in jobs[c].tolist() if v)
            for c in SACCT_FIELDS
            if c in jobs
        },
    )


def program_labels(signatures: list[str], codes: np.ndarray, job_names: np.ndarray) -> list[str]:
    """Per signature group, the program as people know it: its most common job name, and the
    signature's first hex digits to tell two programs of one name apart (``bwa [1a2b3c4d]``).

    A signature is a hash of the normalised commands, meaningless to read;
    the job name (sbatch's default: the script's name) is what users recognise.
    A group whose jobs carry no name keeps its signature.
    """
    k = len(signatures)
    name_codes, names = factorize(np.asarray(job_names, dtype=object), missing="")
    out = list(signatures)
    if not k or not len(codes):
        return out
    pairs, counts = np.unique(codes.astype(np.int64) * len(names) + name_codes, return_counts=True)
    best: dict[int, tuple[int, str]] = {}
    for pair, cnt in zip(pairs.tolist(), counts.tolist()):
        g, name = divmod(pair, len(names))
        label = names[name]
        if label and (g not in best or cnt > best[g][0]):
            best[g] = (cnt, label)
    for g, (_cnt, name) in best.items():
        sig = str(signatures[g])
        short = "no command" if sig == "sig:empty" else sig.removeprefix("sig:")[:8]
        out[g] = f"{name} [{short}]"
    return out


def _groups(jobs: Jobs, by: str, n: int) -> tuple[np.ndarray, list[str], list[str] | None]:
    """Per job its group code; per group its label and source (None: no source column).

    A group is a (source, ``by``) pair, so two sources' users of one name stay
    apart; integer codes combine without another pass over Python strings.
    """
    if not n:
        return np.zeros(0, np.int64), [], ([] if "source" in jobs else None)
    codes, labels = factorize(jobs[by])
    if "source" not in jobs:
        return codes, labels, None
    src_codes, src_labels = factorize(jobs["source"], missing="(unknown)")
    pairs, codes = np.unique(src_codes * len(labels) + codes, return_inverse=True)
    pairs = pairs.tolist()
    return (
        codes.astype(np.int64),
        [labels[p % len(labels)] for p in pairs],
        [src_labels[p // len(labels)] for p in pairs],
    )
