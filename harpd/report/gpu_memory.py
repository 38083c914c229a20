"""The report's DNN section: harp's GPU memory estimate against the peaks Slurm recorded, per setup.

For every finished DNN job of the report's window and scope that harp planned
(its stored decision's ``explain.dnn``: the ``#HARP dnn`` setup's signature,
the configuration, the estimate per GPU) the job's Slurm record gives the
observed peak per GPU (``gres/gpumem``, ``JobRecord.used_gpumem_mb``) and
whether it ran out of GPU memory (``harpd.dnn.observed``).  Rows are one per
setup and configuration, so a setup that ran out on one GPU and fitted on two
shows both; ``peak/estimate`` above 1 is a setup the model under-counts (the
next job already gets the larger of the two, ``refine.refined_need``), well
below 1 one it over-counts.  Runs without a peak are counted, not guessed: a
site that does not gather ``gres/gpumem`` shows only estimates.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from harpd.dnn.observed import DnnDecided, ran_out_of_gpu_memory
from harpd.records import JobRecord, Outcome
from harpd.report.source import Filters, window_where
from harpd.report.window import Window

__all__ = ["GpuMemoryRow", "GpuMemoryRowJson", "gpu_memory_rows", "render_gpu_memory"]

_COLUMNS = ["job_id", "user", "outcome", "used_gpumem_mb", "alloc_gpus", "end_time"]
MIB_PER_GIB = 1024.0


class GpuMemoryRowJson(TypedDict):
    """``GpuMemoryRow`` in the report's JSON (and what its renderers read): the fields, ``peak_over_estimate``."""

    signature: str
    setup: str
    gpu_type: str | None
    n_gpus: int
    zero: int
    runs: int
    runs_with_peak: int
    out_of_gpu_memory: int
    estimate_gib: float | None
    peak_gib: float | None
    capacity_gib: float | None
    jobs: list[str]
    peak_over_estimate: float | None


@dataclass(frozen=True, slots=True)
class GpuMemoryRow:
    """One DNN setup in one GPU configuration, over the window's runs of it."""

    signature: str
    setup: str  # the setup in words (model size, sequence, batch, attention, recomputation)
    gpu_type: str | None
    n_gpus: int
    zero: int
    runs: int
    runs_with_peak: int
    out_of_gpu_memory: int
    estimate_gib: float | None  # harp's need per GPU at the latest run (margin included)
    peak_gib: float | None  # the largest observed peak per GPU
    capacity_gib: float | None
    jobs: tuple[str, ...]  # the runs' job ids, latest last

    @property
    def ratio(self) -> float | None:
        """Largest peak over the estimate: above 1, the run used more than harp planned."""
        if self.peak_gib is None or not self.estimate_gib:
            return None
        return self.peak_gib / self.estimate_gib

    def to_dict(self) -> GpuMemoryRowJson:
        return GpuMemoryRowJson(
            signature=self.signature,
            setup=self.setup,
            gpu_type=self.gpu_type,
            n_gpus=self.n_gpus,
            zero=self.zero,
            runs=self.runs,
            runs_with_peak=self.runs_with_peak,
            out_of_gpu_memory=self.out_of_gpu_memory,
            estimate_gib=self.estimate_gib,
            peak_gib=self.peak_gib,
            capacity_gib=self.capacity_gib,
            jobs=list(self.jobs),
            peak_over_estimate=None if self.ratio is None else round(self.ratio, 3),
        )


def _setup(spec: Any) -> str:
    if not isinstance(spec, Mapping):
        return "?"
    parts = []
    params = spec.get("params")
    if isinstance(params, (int, float)) and params > 0:
        parts.append(f"{params / 1e9:.3g}B" if params >= 1e9 else f"{params / 1e6:.3g}M")
    for key, short in (("seq_len", "s"), ("micro_batch", "b")):
        if spec.get(key):
            parts.append(f"{short}{spec[key]}")
    for key in ("attention", "recompute", "mixed"):
        if spec.get(key) and spec[key] != "none":
            parts.append(f"{key}={spec[key]}")
    return " ".join(parts) or "?"


def _dnn(explain: Any) -> Mapping[str, Any] | None:
    if isinstance(explain, str):
        try:
            explain = json.loads(explain)
        except ValueError:
            return None
    dnn = explain.get("dnn") if isinstance(explain, Mapping) else None
    return dnn if isinstance(dnn, Mapping) else None


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def gpu_memory_rows(store: Any, window: Window, filters: Filters | None = None) -> list[GpuMemoryRow]:
    """The DNN section of a report over ``window`` and ``filters`` (the same jobs as the report's)."""
    where, params = window_where(window, filters, use_index=False)
    # only jobs that can be DNN jobs harp planned: it changed their request (the GPUs), or they had GPUs
    where = f"({where}) AND (harp_sized = 1 OR alloc_gpus > 0)"
    cols = store.job_columns(_COLUMNS, where, params, order="end_time")
    ids = [str(j) for j in cols["job_id"].tolist()]
    if not ids:
        return []
    explains = store.submission_values(ids, ["decision.explain"])["decision.explain"]
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for i, jid in enumerate(ids):
        dnn = _dnn(explains[i])
        decided = None if dnn is None else DnnDecided.from_decision({"explain": {"dnn": dnn}})
        if decided is None or dnn is None:
            continue
        peak = _num(cols["used_gpumem_mb"][i])
        try:
            outcome = Outcome(cols["outcome"][i])
        except ValueError:
            outcome = Outcome.UNKNOWN
        oom = ran_out_of_gpu_memory(JobRecord(job_id=jid, outcome=outcome, used_gpumem_mb=peak), decided.capacity_gib)
        key = (decided.signature, decided.gpu_type, decided.n_gpus, decided.zero)
        g = groups.setdefault(
            key,
            {"setup": _setup(dnn.get("spec")), "runs": 0, "peaks": [], "oom": 0, "jobs": [], "est": None, "cap": None},
        )
        g["runs"] += 1
        g["jobs"].append(jid)
        g["est"], g["cap"] = decided.need_gib or g["est"], decided.capacity_gib or g["cap"]
        if peak is not None:
            g["peaks"].append(peak / MIB_PER_GIB)
        g["oom"] += oom
    rows = [
        GpuMemoryRow(
            signature=sig,
            setup=g["setup"],
            gpu_type=gpu_type,
            n_gpus=n,
            zero=zero,
            runs=g["runs"],
            runs_with_peak=len(g["peaks"]),
            out_of_gpu_memory=g["oom"],
            estimate_gib=g["est"],
            peak_gib=round(max(g["peaks"]), 2) if g["peaks"] else None,
            capacity_gib=g["cap"],
            jobs=tuple(g["jobs"]),
        )
        for (sig, gpu_type, n, zero), g in groups.items()
    ]
    return sorted(rows, key=lambda r: (r.signature, r.n_gpus, r.zero, r.gpu_type or ""))


def render_gpu_memory(rows: Sequence[GpuMemoryRowJson]) -> list[str]:
    """The section as table lines, from ``GpuMemoryRow.to_dict``s (none when the window has no planned DNN job)."""
    if not rows:
        return []
    head = f"{'setup':<34} {'config':<18} {'runs':>4} {'OOM':>3} {'estimate':>9} {'peak':>8} {'peak/est':>8}"
    out = ["GPU memory per GPU: harp's estimate vs the peak Slurm recorded (gres/gpumem), per #HARP dnn setup", head]
    for r in rows:
        config = f"{r['n_gpus']}x{r['gpu_type'] or 'GPU'} zero={r['zero']}"
        est = "---" if r["estimate_gib"] is None else f"{r['estimate_gib']:.2f}G"
        peak = "---" if r["peak_gib"] is None else f"{r['peak_gib']:.2f}G"
        ratio = "---" if r["peak_over_estimate"] is None else f"{r['peak_over_estimate']:.2f}"
        setup = r["setup"] if len(r["setup"]) <= 34 else r["setup"][:33] + "~"
        out.append(f"{setup:<34} {config:<18} {r['runs']:>4} {r['out_of_gpu_memory']:>3} {est:>9} {peak:>8} {ratio:>8}")
    missing = sum(r["runs"] - r["runs_with_peak"] for r in rows)
    if missing:
        out.append(f"  {missing} run(s) without a gres/gpumem peak (the site's accounting gathers none for them)")
    if any(r["out_of_gpu_memory"] for r in rows):
        out.append("  OOM: runs that failed with GPU memory at 90% of the GPU or more (a CUDA out-of-memory)")
    return out
