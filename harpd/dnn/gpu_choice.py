"""Which GPU type, how many GPUs and nodes, and (for zero=auto) which ZeRO stage.

Cost model.  Slurm bills n_gpus x billing_weight x elapsed time.  harp does not
change the job's time limit and assumes elapsed time depends on the
configuration only through the GPU count: with perfect data-parallel scaling it
falls as 1/n_gpus and every fitting configuration would bill the same
GPU-hours; real scaling is sub-linear (gradient all-reduce, more so across nodes
and at ZeRO-3, which moves 1.5x the data of stages 0-2), so each extra GPU adds
billed GPU-hours.  Hence the order: least n_gpus x billing_weight, then fewest
nodes, then the lowest ZeRO stage (least communication), then the most memory
headroom, then the type name (a stable answer).

A configuration fits when the estimate with the safety margin is at most the
GPU's memory.  Where observed peaks exist for a configuration (``refine``),
they replace the formula for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from harpd.dnn.refine import PeakObservation, refined_need
from harpd.dnn.zero import GIB, Estimate, estimate

STAGES = (0, 1, 2, 3)


@dataclass(frozen=True)
class Candidate:
    gpu_type: Any  # harpd.config.GpuType
    nodes: int
    gpus_per_node: int  # GPUs used on each node
    stage: int
    estimate: Estimate
    need: float  # bytes per GPU that must fit (margin included)
    need_source: str = "formula"

    @property
    def n_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def capacity(self) -> float:
        return float(self.gpu_type.memory_gb) * GIB

    @property
    def fits(self) -> bool:
        return self.need <= self.capacity

    @property
    def cost(self) -> float:
        """Relative billed GPU-hours: GPUs x billing weight (see the module doc)."""
        return self.n_gpus * float(self.gpu_type.billing_weight)

    def sort_key(self) -> tuple:
        return (round(self.cost, 9), self.nodes, self.stage, self.need / self.capacity, self.gpu_type.name)

    def summary(self) -> CandidateSummary:
        return {
            "gpu_type": self.gpu_type.name,
            "partition": self.gpu_type.partition,
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "n_gpus": self.n_gpus,
            "zero": self.stage,
            "need_gib": round(self.need / GIB, 2),
            "formula_need_gib": round(self.estimate.need / GIB, 2),
            "capacity_gib": round(self.capacity / GIB, 2),
            "fits": self.fits,
            "cost_gpu_weight": round(self.cost, 3),
            "need_source": self.need_source,
        }


class CandidateSummary(TypedDict):
    """A GPU configuration as ``--harp-explain`` and ``harp dnn`` print it (the chosen one and alternatives)."""

    gpu_type: str
    partition: str | None
    nodes: int
    gpus_per_node: int
    n_gpus: int
    zero: int
    need_gib: float
    formula_need_gib: float
    capacity_gib: float
    fits: bool
    cost_gpu_weight: float
    need_source: str


@dataclass
class Choice:
    best: Candidate | None
    fitting: list[Candidate] = field(default_factory=list)
    closest: Candidate | None = None  # the non-fitting candidate nearest to fitting
    error: str | None = None


def stages_for(spec) -> list[int]:
    """The ZeRO stages to consider: the one written, or all that the offload allows."""
    if spec.zero is not None:
        return [spec.zero]
    if spec.offload_param:
        return [3]
    if spec.offload_optimizer:
        return [1, 2, 3]
    return list(STAGES)


def layouts(gpn: int, max_nodes: int, fixed_total: int | None) -> list[tuple[int, int]]:
    """(nodes, gpus per node) pairs, GPUs spread evenly, at most ``gpn`` per node."""
    out = []
    for nodes in range(1, max_nodes + 1):
        for g in range(1, gpn + 1):
            if fixed_total is not None and nodes * g != fixed_total:
                continue
            out.append((nodes, g))
    return out


def _suggestions(spec, closest: Candidate) -> str:
    tips = []
    if spec.zero is not None and spec.zero < 3:
        tips.append("zero=auto")
    if spec.recompute == "none":
        tips.append("recompute=full")
    if spec.attention == "eager":
        tips.append("attention=flash")
    if not spec.offload_optimizer:
        tips.append("offload=optimizer")
    if spec.micro_batch > 1:
        tips.append("a smaller micro_batch")
    if spec.gpus is not None:
        tips.append("no gpus=")
    return ("; try " + ", ".join(tips)) if tips else ""


def choose_config(
    spec,
    gpu_types: Iterable[Any],
    *,
    margin: float,
    cuda_context_gb: float,
    distributed_overhead_gb: float,
    max_nodes: int,
    site_max_nodes: Mapping[str, int] | None = None,
    site_gpus_per_node: Mapping[str, int] | None = None,
    observations: Iterable[PeakObservation] = (),
) -> Choice:
    """Every candidate configuration, evaluated; the cheapest that fits, or why none does."""
    types = list(gpu_types)
    if not types:
        return Choice(None, error="no GPU types are configured ([dnn] gpu_types in harpd.toml)")
    if spec.gpu_type is not None:
        types = [t for t in types if t.name == spec.gpu_type]
        if not types:
            names = ", ".join(t.name for t in gpu_types)
            return Choice(None, error=f"gpu_type={spec.gpu_type} is not configured (configured: {names})")
    obs = list(observations)
    cache: dict[tuple[int, int, int], Estimate] = {}
    candidates: list[Candidate] = []
    unusable: list[str] = []
    for gt in types:
        gpn = int(gt.gpus_per_node)
        if site_gpus_per_node and gt.name in site_gpus_per_node:
            gpn = min(gpn, site_gpus_per_node[gt.name])
        mn = max_nodes
        if site_max_nodes is not None and gt.name in site_max_nodes:
            mn = min(mn, site_max_nodes[gt.name])
        if mn <= 0 or gpn <= 0:
            unusable.append(gt.name)
            continue
        for nodes, g in layouts(gpn, mn, spec.gpus):
            n = nodes * g
            for stage in stages_for(spec):
                key = (n, stage, g)
                if key not in cache:
                    cache[key] = estimate(
                        spec,
                        n,
                        stage,
                        cuda_context_gb=cuda_context_gb,
                        distributed_overhead_gb=distributed_overhead_gb,
                        margin=margin,
                        gpus_per_node=g,
                    )
                est = cache[key]
                need, source = refined_need(est.need, obs, n_gpus=n, stage=stage, margin=margin)
                candidates.append(Candidate(gt, nodes, g, stage, est, need, source))
    if not candidates:
        if spec.gpus is not None:
            return Choice(
                None,
                error=f"gpus={spec.gpus} cannot be placed on the configured GPU types "
                f"(at most {max_nodes} nodes of evenly used GPUs)",
            )
        return Choice(
            None, error=f"no configured GPU type is usable in Slurm ({', '.join(unusable)}: see harp dnn check)"
        )
    fitting = sorted((c for c in candidates if c.fits), key=Candidate.sort_key)
    if fitting:
        return Choice(fitting[0], fitting)
    closest = min(candidates, key=lambda c: (c.need / c.capacity, c.sort_key()))
    msg = (
        f"no configured GPU fits: the nearest, {closest.n_gpus} x {closest.gpu_type.name} "
        f"at zero={closest.stage}, needs {closest.need / GIB:.1f} GiB per GPU "
        f"(with {margin:.0%} margin) of {closest.capacity / GIB:.0f} GiB" + _suggestions(spec, closest)
    )
    return Choice(None, [], closest, msg)
