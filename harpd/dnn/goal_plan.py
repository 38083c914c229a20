"""A ``#HARP dnn`` line's goals applied: deadline plan, per-stage search plan, batch choice.

``plan.py`` sizes memory and, without goals, takes the cheapest configuration
that fits.  With ``deadline=``, ``trials=`` or ``batch=`` this module decides
instead, from the same memory-fitting configurations and the scaling curve
(``scaling.py``, fitted to ``runs=`` when given), and says in ``explain`` what
it chose, its predicted time and billed GPU-hours, and the static alternative.

Billing weights: the partition's ``TRESBillingWeights`` GPU entry when the
caller read them from Slurm (``harpd.slurm.billing``), else ``[dnn]
gpu_types.billing_weight``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harpd.dnn.deadline import (
    DeadlinePlan,
    Layout,
    hours,
    layouts_from_candidates,
    plan_stages,
    sha_stages,
    static_plan,
)
from harpd.dnn.elastic import choose_batch, memory_fits
from harpd.dnn.goals import DnnGoals
from harpd.dnn.gpu_choice import layouts as layout_pairs
from harpd.dnn.gpu_choice import stages_for
from harpd.dnn.scaling import ScalingModel, peak_tflops
from harpd.dnn.zero import GIB, estimate


@dataclass
class GoalResult:
    """The configuration the goals chose (type, nodes, GPUs per node, ZeRO, micro-batch) and why."""

    gpu_type: str | None = None
    nodes: int = 0
    gpus_per_node: int = 0
    zero: int = 0
    micro_batch: int | None = None  # set by a batch range
    explain: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    notes: list[str] = field(default_factory=list)


def billing_for(
    gpu_types: Sequence[Any], billing: Mapping[str, Mapping[str, float]] | None
) -> tuple[dict[str, float], dict[str, str]]:
    """Per GPU type, its weight and where it comes from (Slurm's TRESBillingWeights or the config)."""
    from harpd.slurm.billing import gpu_weight

    weights: dict[str, float] = {}
    source: dict[str, str] = {}
    for gt in gpu_types:
        w = gpu_weight(dict(billing.get(gt.partition, {})), gt.name) if billing else None
        if w is not None and w > 0:
            weights[gt.name], source[gt.name] = w, f"TRESBillingWeights of {gt.partition}"
        else:
            weights[gt.name], source[gt.name] = float(gt.billing_weight), "[dnn] gpu_types billing_weight"
    return weights, source


def model_for(spec: Any, goals: DnnGoals, default_type: str) -> ScalingModel:
    model = ScalingModel(
        params=spec.params,
        seq_len=spec.seq_len,
        micro_batch=spec.micro_batch,
        precision=spec.precision,
        recompute=spec.recompute,
        mfu=goals.mfu,
        tokens=goals.tokens,
    )
    return model.fitted(goals.runs, default_type) if goals.runs else model


def _model_notes(model: ScalingModel, types: Sequence[str], goals: DnnGoals) -> list[str]:
    notes = [f"time model: {model.fit.source}"]
    unknown = [t for t in types if not peak_tflops(t)[1]]
    if unknown:
        notes.append(f"no peak TFLOPs known for {', '.join(unknown)}: taken as an A100's (312)")
    if goals.tokens is None and goals.runs:
        notes.append("tokens= not given: times are for the same work as the runs= given")
    return notes


def plan_goals(
    spec: Any,
    goals: DnnGoals,
    dnn: Any,
    fitting: Sequence[Any],
    *,
    site_max_nodes: Mapping[str, int] | None = None,
    site_gpus_per_node: Mapping[str, int] | None = None,
    billing: Mapping[str, Mapping[str, float]] | None = None,
) -> GoalResult:
    """Decide the configuration for a job with goals; ``fitting``: choose_config's fitting candidates."""
    types = [t for t in dnn.gpu_types if spec.gpu_type is None or t.name == spec.gpu_type]
    weights, wsource = billing_for(types, billing)
    capacity = {}
    for t in types:
        nodes = (site_max_nodes or {}).get(t.name, dnn.max_nodes)
        gpn = min(t.gpus_per_node, (site_gpus_per_node or {}).get(t.name, t.gpus_per_node))
        capacity[t.name] = max(0, nodes) * gpn
    default_type = types[0].name if types else "a100"
    model = model_for(spec, goals, default_type)
    notes = _model_notes(model, [t.name for t in types], goals)
    base = {
        "billing": {n: {"weight": weights[n], "from": wsource[n]} for n in weights},
        "scaling": {
            "source": model.fit.source,
            "alpha": round(model.fit.alpha, 4),
            "beta": round(model.fit.beta, 4),
            "gamma_s": round(model.fit.gamma_s, 1),
        },
    }
    if goals.batch is not None:
        return _batch(spec, goals, dnn, types, weights, capacity, model, base, notes)
    layouts = layouts_from_candidates(fitting, weights, capacity)
    stages = sha_stages(goals.trials, goals.eta, model.tokens) if goals.trials else [(1, model.tokens)]
    if goals.stage >= len(stages):
        return GoalResult(
            error=f"stage={goals.stage}: trials={goals.trials} eta={goals.eta} has only "
            f"{len(stages)} stages (0 to {len(stages) - 1})"
        )
    deadline = goals.deadline_s if goals.deadline_s is not None else float("inf")
    plan: DeadlinePlan = plan_stages(model, layouts, stages, deadline)
    if plan.error:
        what = "search" if goals.trials else "job"
        return GoalResult(
            error=f"{plan.error} for this {what}; allow more time, or give fewer tokens/trials",
            explain={**base, "fastest_h": round((plan.fastest_s or 0) / 3600, 3)},
            notes=notes,
        )
    chosen = plan.stages[goals.stage]
    static = static_plan(model, layouts, stages, deadline) if goals.trials else None
    explain = {
        **base,
        "deadline_h": None if goals.deadline_s is None else round(deadline / 3600, 3),
        "predicted_time_h": round(plan.time_s / 3600, 3),
        "predicted_billed_gpu_hours": round(plan.cost, 3),
        "stages": [s.summary() for s in plan.stages],
    }
    if static is not None:
        explain["static"] = {
            "gpu_type": static.gpu_type,
            "pool_gpus": static.pool,
            "time_h": round(static.time_s / 3600, 3),
            "billed_gpu_hours": round(static.cost, 3),
            "cost_ratio_static_over_plan": round(static.cost / plan.cost, 3) if plan.cost else None,
        }
    line = (
        f"deadline plan: {chosen.layout.label()} ZeRO {chosen.layout.zero}, predicted "
        f"{hours(chosen.time_s)} and {chosen.cost:.1f} billed GPU-hours"
        + (f" (deadline {hours(deadline)})" if goals.deadline_s is not None else "")
    )
    if goals.trials:
        line = (
            f"search plan, stage {goals.stage} of {len(stages)}: {chosen.trials} trial(s) of "
            f"{chosen.layout.label()}; whole search predicted {hours(plan.time_s)} and "
            f"{plan.cost:.1f} billed GPU-hours"
            + (f" (deadline {hours(deadline)})" if goals.deadline_s else "")
            + (f", static pool {static.pool} x {static.gpu_type}: {static.cost:.1f}" if static else "")
        )
    explain["summary"] = line
    explain["why"] = (
        f"least predicted billed GPU-hours meeting the deadline ({hours(chosen.time_s)}, {chosen.cost:.1f} GPU-h)"
        if goals.deadline_s is not None
        else f"least predicted billed GPU-hours for this stage ({chosen.cost:.1f} GPU-h)"
    )
    return GoalResult(
        chosen.layout.gpu_type,
        chosen.layout.nodes,
        chosen.layout.gpus_per_node,
        chosen.layout.zero,
        None,
        explain,
        None,
        notes + [line],
    )


def _batch(
    spec: Any,
    goals: DnnGoals,
    dnn: Any,
    types: Sequence[Any],
    weights: Mapping[str, float],
    capacity: Mapping[str, int],
    model: ScalingModel,
    base: dict[str, Any],
    notes: list[str],
) -> GoalResult:
    mem = {t.name: float(t.memory_gb) * GIB for t in types}
    lays = []
    for t in types:
        gpn = min(t.gpus_per_node, capacity[t.name] or t.gpus_per_node)
        mn = max(1, capacity[t.name] // max(1, gpn)) if capacity[t.name] else dnn.max_nodes
        for nodes, g in layout_pairs(gpn, min(mn, dnn.max_nodes), spec.gpus):
            for z in stages_for(spec):
                lays.append(Layout(t.name, nodes, g, z, weights[t.name], capacity[t.name]))

    def est(s: Any, n: int, z: int, gpn: int) -> Any:
        return estimate(
            s,
            n,
            z,
            cuda_context_gb=dnn.cuda_context_gb,
            distributed_overhead_gb=dnn.distributed_overhead_gb,
            margin=dnn.safety_margin,
            gpus_per_node=gpn,
        )

    notes = [n for n in notes + list(spec.notes) if not n.startswith("micro_batch not given")]
    spec.notes[:] = []  # the batch plan chooses micro_batch: the default's note would mislead
    fits = memory_fits(spec, est, lambda lay: mem[lay.gpu_type])
    assert goals.batch is not None, "the batch plan runs only for a job that asked batch="
    best, evaluated = choose_batch(model, lays, goals.batch, fits, tokens=goals.tokens, deadline_s=goals.deadline_s)
    lo, hi = goals.batch
    if best is None:
        if evaluated:
            timed = [(c.time_s, k, c) for k, c in enumerate(evaluated) if c.time_s is not None]
            fastest_s, _k, fastest = min(timed, default=(None, 0, None))
            if fastest is not None and fastest_s is not None and goals.deadline_s is not None:
                return GoalResult(
                    error=f"deadline {hours(goals.deadline_s)} cannot be met with batch={lo}..{hi}: "
                    f"the fastest choice is predicted to take {hours(fastest_s)}",
                    explain=base,
                    notes=notes,
                )
        return GoalResult(
            error=f"batch={lo}..{hi}: no GPU count and micro-batch fit in memory within the range "
            "(try a wider batch range, recompute=full or zero=auto)",
            explain=base,
            notes=notes,
        )
    lay = best.layout
    line = (
        f"batch plan: {lay.label()} ZeRO {lay.zero}, micro_batch={best.micro_batch} x grad_accum="
        f"{best.accum} = global batch {best.global_batch}; {best.throughput:.1f} sequences/s, "
        f"{best.per_cost:.0f} per billed GPU-hour"
        + (f", predicted {hours(best.time_s)}" if best.time_s is not None and goals.tokens else "")
    )
    top = sorted(evaluated, key=lambda c: -c.per_cost)[:5]
    explain = {
        **base,
        "batch_range": [lo, hi],
        "chosen": best.summary(),
        "alternatives": [c.summary() for c in top if c is not best][:4],
        "summary": line,
        "why": f"most sequences per billed GPU-hour for batch={lo}..{hi} ({best.per_cost:.0f})",
    }
    return GoalResult(
        lay.gpu_type,
        lay.nodes,
        lay.gpus_per_node,
        lay.zero,
        best.micro_batch,
        explain,
        None,
        notes
        + [
            line,
            f"run the job with micro_batch={best.micro_batch} and gradient accumulation "
            f"{best.accum} (global batch {best.global_batch}): harp changes only "
            "sbatch options",
        ],
    )
