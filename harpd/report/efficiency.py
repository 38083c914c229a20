"""Per-job efficiencies, defined exactly as ``seff`` and ``reportseff`` do.

Sites compare harp's numbers with the tools their users already run, so the
definitions are theirs (reportseff ``job.py``):

- time efficiency   = Elapsed / Timelimit            (no value for unlimited jobs)
- CPU efficiency    = TotalCPU / (Elapsed x AllocCPUS) (no value for zero elapsed)
- memory efficiency = MaxRSS / ReqMem                 (ReqMem for the whole job)

Values are fractions (1.0 = 100 %); NaN where the tools print ``---``.  Memory
and CPU efficiency can exceed 1 (OOM kills, hyper-threads); nothing is clipped
here so the renderers decide how to show it.

Aggregated over many jobs the report uses resource-weighted ratios (used
core-hours over allocated core-hours and so on, see ``aggregate``): a one-minute
job must not weigh as much as a one-week job when an admin asks how much of the
machine was wasted.
"""

from __future__ import annotations

import numpy as np

from harpd.records import JobRecord


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    out = np.full(np.broadcast(num, den).shape, np.nan)
    ok = np.isfinite(num) & np.isfinite(den) & (den > 0)
    with np.errstate(over="ignore"):
        np.divide(num, den, out=out, where=ok)
    return out


def time_efficiency(elapsed_s: np.ndarray, timelimit_s: np.ndarray) -> np.ndarray:
    """Elapsed / Timelimit; NaN for unlimited (None/NaN/0) limits."""
    return _ratio(elapsed_s, timelimit_s)


def cpu_efficiency(total_cpu_s: np.ndarray, elapsed_s: np.ndarray, alloc_cpus: np.ndarray) -> np.ndarray:
    """TotalCPU / (Elapsed x AllocCPUS); NaN when the job did not run."""
    core_s = np.asarray(elapsed_s, dtype=np.float64) * np.asarray(alloc_cpus, dtype=np.float64)
    return _ratio(total_cpu_s, core_s)


def memory_efficiency(max_rss_mb: np.ndarray, req_mem_mb: np.ndarray) -> np.ndarray:
    """MaxRSS / ReqMem (both for the whole job); NaN without a memory request."""
    return _ratio(max_rss_mb, req_mem_mb)


def _f(x: float | int | None) -> float:
    return np.nan if x is None else float(x)


def job_efficiencies(rec: JobRecord) -> dict[str, float | None]:
    """The three efficiencies of one record, ``None`` where undefined.

    Uses the same vector code as the report so a single job and a million
    jobs can never disagree.
    """
    cpus = rec.alloc_cpus if rec.alloc_cpus is not None else rec.req_cpus
    vals = {
        "time_eff": time_efficiency(np.array([_f(rec.used_time_s)]), np.array([_f(rec.req_time_s)]))[0],
        "cpu_eff": cpu_efficiency(
            np.array([_f(rec.used_cpu_s)]), np.array([_f(rec.used_time_s)]), np.array([_f(cpus)])
        )[0],
        "mem_eff": memory_efficiency(np.array([_f(rec.used_mem_mb)]), np.array([_f(rec.req_mem_mb)]))[0],
    }
    return {k: (None if np.isnan(v) else float(v)) for k, v in vals.items()}
