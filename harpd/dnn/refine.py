"""Recorded peaks of GPU memory raise the formula's need, once the same setup has run.

The formula is an estimate; a peak recorded for the same DNN description on the
same number of GPUs and ZeRO stage is a measurement of one run, so the need
becomes the larger of the two: max(formula, max(observed peaks) x (1 + margin))
(#47).  A peak below the formula does not lower the need: a run's peak
depends on its data (the longest sequence it met, the step it ended on), and
the next run may meet more.  A run killed for lack of GPU memory shows only a
lower bound of what it needed, so it too can raise the need, never lower it.

Where observations come from (the caller looks them up by ``spec_signature``):
- ``sacct -o TRESUsageInMax`` with ``gres/gpumem=...``: recorded only where Slurm
  gathers GPU usage through NVML (``AutoDetect=nvml`` in gres.conf) and the site
  tracks the TRES (``AccountingStorageTRES=gres/gpu,gres/gpumem``), on recent
  Slurm releases; the local 22.05 test cluster, with fake GPUs, has none.  It is
  the memory the driver reports in use (CUDA context and allocator cache
  included), summed over the GPUs a task sees; sacct's readers parse it and
  ``harpd.slurm.classify`` makes it per GPU (``JobRecord.used_gpumem_mb``),
  ``harpd.dnn.observed`` joins it with the run's decision.
- a site prolog/epilog that records ``nvidia-smi --query-gpu=memory.used``
  maxima, or the job's own ``torch.cuda.max_memory_reserved()`` log, per GPU.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass

from harpd.slurm.sacct_records import gpumem_mb

_MIB = float(1 << 20)

# DnnSpec fields that change the memory a job needs (not where it runs).
_SIGNATURE_FIELDS = (
    "params",
    "layers",
    "hidden",
    "heads",
    "vocab",
    "seq_len",
    "micro_batch",
    "largest_layer",
    "optimizer",
    "momentum",
    "precision",
    "mixed",
    "block",
    "offload_optimizer",
    "offload_param",
    "recompute",
    "attention",
)


@dataclass(frozen=True)
class PeakObservation:
    """One finished run's peak GPU memory, per GPU, and the configuration it ran in."""

    peak_bytes: float
    n_gpus: int
    zero: int
    gpu_type: str | None = None
    oom: bool = False  # killed for GPU memory: peak_bytes is only a lower bound
    planned_bytes: float | None = None  # the formula's need (margin included) for the configuration it ran in


def spec_signature(spec) -> str:
    """A stable key for "the same DNN setup": what the store files observations under."""
    d = spec.to_dict() if hasattr(spec, "to_dict") else dict(spec)
    key = {k: d.get(k) for k in _SIGNATURE_FIELDS}
    blob = json.dumps(key, sort_keys=True, separators=(",", ":"))
    return "dnn:" + hashlib.sha256(blob.encode()).hexdigest()[:16]


def gpumem_bytes(tres_usage: str | None) -> float | None:
    """The ``gres/gpumem`` value of a sacct TRES string (``...,gres/gpumem=2048M,...``) in bytes.

    A bare number is bytes, as sacct prints it without a unit.
    """
    mb = gpumem_mb(tres_usage)
    return None if mb is None else mb * _MIB


def refined_need(
    formula_need: float, observations: Iterable[PeakObservation], *, n_gpus: int, stage: int, margin: float
) -> tuple[float, str]:
    """(bytes per GPU that must fit, where the figure comes from) for one configuration.

    A run out of GPU memory in another configuration (with its ``planned_bytes``)
    says the formula under-counts this setup by at least peak x (1 + margin) /
    planned: every configuration's formula need is scaled by that much.  Without
    it, a data-parallel job killed on one GPU at ZeRO 0 would be planned on two
    GPUs at ZeRO 0, which hold the same per GPU, and die again.
    """
    observations = list(observations)
    same = [o for o in observations if o.n_gpus == n_gpus and o.zero == stage]
    done = [o.peak_bytes for o in same if not o.oom]
    killed = [o.peak_bytes for o in same if o.oom]
    need, source = formula_need, "formula"
    if done:
        observed = max(done) * (1.0 + margin)
        need = max(formula_need, observed)
        if observed >= formula_need:
            source = f"observed peak of {len(done)} run(s)"
        else:
            source = f"formula, above the observed peak of {len(done)} run(s)"
    if killed:
        # The OOM run needed more than it got: never plan below the formula or that peak.
        need = max(need, formula_need, max(killed) * (1.0 + margin))
        source += f", {len(killed)} run(s) out of GPU memory"
    elsewhere = [
        o.peak_bytes * (1.0 + margin) / o.planned_bytes
        for o in observations
        if o.oom and o.planned_bytes and o.planned_bytes > 0 and not (o.n_gpus == n_gpus and o.zero == stage)
    ]
    if elsewhere and formula_need * max(elsewhere) > need:
        need = formula_need * max(elsewhere)
        source = (
            f"formula x {max(elsewhere):.2f} after {len(elsewhere)} run(s) out of GPU memory in another configuration"
        )
    return need, source
