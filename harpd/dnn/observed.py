"""The GPU memory peaks of a user's earlier runs of the same DNN setup, from harpd's store.

Where the site's Slurm gathers GPU usage, sacct's ``gres/gpumem`` reaches the
store as ``JobRecord.used_gpumem_mb`` (per GPU, ``harpd.slurm.classify``).
The run's ``#HARP dnn`` setup is what harpd decided for it: the stored
decision's ``explain.dnn`` holds the spec's ``signature`` and the
configuration chosen (GPUs, ZeRO stage, GPU type, the estimate per GPU and the
GPU's memory).  Joining the two gives ``PeakObservation``s, which
``refine.refined_need`` weighs against the formula for the next job of the
same signature (``plan_dnn_job(observed=...)``).

Which runs count:
* only the submitter's own (``uid``): another user's run of the same setup
  that did nothing could otherwise lower someone else's need below the model;
* a COMPLETED run whose Slurm record has the configuration harp chose (its
  allocated GPUs equal the chosen count): its peak is a measurement;
* a run that ran out of GPU memory (``ran_out_of_gpu_memory``): counted as
  needing more than the whole GPU, so that configuration no longer fits, and
  the formula as under-counting the setup by at least that much, so every
  other configuration's need is scaled likewise (``refine.refined_need``): the
  planner takes the next configuration that fits then (more GPUs with a ZeRO
  stage that shards, a higher stage where the line says zero=auto, a larger
  GPU type), never the same one nor one that holds as much per GPU; when none
  fits, the job is left as submitted with the plan's one-line reason, which
  names what could help (zero=auto, recompute=full, a smaller micro_batch);
* nothing else: a failed or killed run is never learnt as usage.

How harp learns a CUDA out-of-memory, which Slurm never sees (the process
raises ``torch.OutOfMemoryError`` and exits 1; torchrun and DeepSpeed's
launcher exit 1 when a rank does): the run is FAILED (a non-zero exit, no
signal of Slurm's) and its ``gres/gpumem`` peak reached ``GPU_OOM_FRACTION``
of the GPU's memory.  The fraction is below 1 because the allocation that
fails is never made: the peak NVML saw is what was held when it failed.  A
job that failed for another reason with a GPU nearly full is taken as out of
memory too; the cost is a larger configuration next time, never a failure.
Without ``gres/gpumem`` in accounting harp cannot tell a CUDA OOM from any
other failure and learns nothing from it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from harpd.dnn.refine import PeakObservation
from harpd.dnn.zero import GIB
from harpd.records import JobRecord, Outcome

MIB = float(1 << 20)
LOOKBACK_S = 90 * 86400
MAX_SCAN = 2000  # submissions read per decision at most, as harpd.dnn.history
GPU_OOM_FRACTION = 0.9


@dataclass(frozen=True, slots=True)
class DnnDecided:
    """What harpd's stored decision says it planned for a DNN job (``explain.dnn``)."""

    signature: str
    n_gpus: int
    zero: int
    gpu_type: str | None
    need_gib: float | None  # the estimate per GPU, margin included
    formula_gib: float | None  # the formula's part of it (need_gib may already be raised by observed peaks)
    capacity_gib: float | None  # the GPU type's memory as configured
    need_source: str | None = None

    @classmethod
    def from_decision(cls, decision: Any) -> DnnDecided | None:
        """The stored decision JSON (``Submission.stored["decision"]``); None when it planned no DNN job."""
        explain = decision.get("explain") if isinstance(decision, Mapping) else None
        dnn = explain.get("dnn") if isinstance(explain, Mapping) else None
        chosen = dnn.get("chosen") if isinstance(dnn, Mapping) else None
        if not isinstance(dnn, Mapping) or not isinstance(chosen, Mapping):
            return None
        sig, n, zero = dnn.get("signature"), chosen.get("n_gpus"), chosen.get("zero")
        if not isinstance(sig, str) or not isinstance(n, int) or not isinstance(zero, int) or n < 1:
            return None
        return cls(
            signature=sig,
            n_gpus=n,
            zero=zero,
            gpu_type=chosen.get("gpu_type") if isinstance(chosen.get("gpu_type"), str) else None,
            need_gib=_float(chosen.get("need_gib")),
            formula_gib=_float(chosen.get("formula_need_gib")),
            capacity_gib=_float(chosen.get("capacity_gib")),
            need_source=chosen.get("need_source") if isinstance(chosen.get("need_source"), str) else None,
        )


def _float(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


def ran_out_of_gpu_memory(record: JobRecord, capacity_gib: float | None) -> bool:
    """Whether a run failed with its GPU memory at (nearly) the GPU's total: a CUDA out-of-memory."""
    if capacity_gib is None or record.used_gpumem_mb is None or record.outcome != Outcome.FAILED:
        return False
    return record.used_gpumem_mb * MIB >= GPU_OOM_FRACTION * capacity_gib * GIB


def observation(record: JobRecord, decided: DnnDecided) -> PeakObservation | None:
    """The run's peak as the planner weighs it, or None when it teaches nothing (see the module doc)."""
    if record.alloc_gpus is not None and record.alloc_gpus != decided.n_gpus:
        return None  # it ran in another configuration than the one harp planned
    planned = None if decided.formula_gib is None else decided.formula_gib * GIB
    if ran_out_of_gpu_memory(record, decided.capacity_gib):
        assert decided.capacity_gib is not None
        return PeakObservation(
            decided.capacity_gib * GIB, decided.n_gpus, decided.zero, decided.gpu_type, oom=True, planned_bytes=planned
        )
    if record.outcome != Outcome.COMPLETED or record.used_gpumem_mb is None:
        return None
    return PeakObservation(
        record.used_gpumem_mb * MIB, decided.n_gpus, decided.zero, decided.gpu_type, planned_bytes=planned
    )


def observations_from_store(
    store: Any, uid: int, signature: str, *, now: float | None = None
) -> tuple[PeakObservation, ...]:
    """Every observation of ``uid``'s earlier runs of the setup ``signature`` (newest submissions first)."""
    since = (time.time() if now is None else now) - LOOKBACK_S
    subs = store.submissions_since(int(uid), since)[-MAX_SCAN:]
    out: list[PeakObservation] = []
    for sub in reversed(subs):
        decided = DnnDecided.from_decision(sub.stored.get("decision"))
        if decided is None or decided.signature != signature:
            continue
        rec = store.get_job(str(sub.job_id))
        if rec is None:
            continue
        obs = observation(rec, decided)
        if obs is not None:
            out.append(obs)
    return tuple(out)


class GpuMemoryDict(TypedDict):
    """``GpuMemoryView`` as JSON (``harp status``'s ``gpu_memory``)."""

    gpu_type: str | None
    n_gpus: int
    zero: int
    estimate_gib: float | None
    estimate_source: str | None
    capacity_gib: float | None
    observed_gib: float | None
    out_of_gpu_memory: bool


@dataclass(frozen=True, slots=True)
class GpuMemoryView:
    """Estimate against observed peak for one job, as ``harp status`` and the report show it."""

    gpu_type: str | None
    n_gpus: int
    zero: int
    estimate_gib: float | None
    estimate_source: str | None
    capacity_gib: float | None
    observed_gib: float | None  # None: Slurm gathered no gres/gpumem for the run
    out_of_gpu_memory: bool

    def to_dict(self) -> GpuMemoryDict:
        return GpuMemoryDict(
            gpu_type=self.gpu_type,
            n_gpus=self.n_gpus,
            zero=self.zero,
            estimate_gib=self.estimate_gib,
            estimate_source=self.estimate_source,
            capacity_gib=self.capacity_gib,
            observed_gib=self.observed_gib,
            out_of_gpu_memory=self.out_of_gpu_memory,
        )


def gpu_memory_view(decision: Any, record: JobRecord | None) -> GpuMemoryView | None:
    """The job's per-GPU estimate (from its decision) and observed peak (from its Slurm record)."""
    decided = DnnDecided.from_decision(decision)
    if decided is None:
        return None
    observed = None
    oom = False
    if record is not None and record.used_gpumem_mb is not None:
        observed = round(record.used_gpumem_mb * MIB / GIB, 2)
        oom = ran_out_of_gpu_memory(record, decided.capacity_gib)
    return GpuMemoryView(
        decided.gpu_type,
        decided.n_gpus,
        decided.zero,
        decided.need_gib,
        decided.need_source,
        decided.capacity_gib,
        observed,
        oom,
    )
