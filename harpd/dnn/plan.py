"""From a job's ``#HARP dnn`` lines to sbatch changes in the Decision format.

``plan_dnn_job`` is what the predictor path calls for a job that carries a DNN
description.  It never raises for bad input: a description harp cannot use, a
config file it cannot read, or a model that fits nowhere gives ``error`` (one
line, shown to the user) and no changes, so the job is submitted as written.

The changes are those of design.md's Decision (``{option, value, old, reason}``):
``partition``, ``gres`` (or ``gpus`` when the user asked with ``--gpus``),
``nodes``, ``ntasks-per-node`` and, for ZeRO-Offload, the host ``mem`` per node.
An option already at the chosen value is left out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harpd.config import DnnSettings, HarpSettings
from harpd.dnn.errors import DnnError
from harpd.dnn.goal_plan import GoalResult, plan_goals
from harpd.dnn.goals import DnnGoals, RunTime, goals_from_tokens
from harpd.dnn.gpu_choice import Candidate, choose_config
from harpd.dnn.refine import PeakObservation, spec_signature
from harpd.dnn.site_check import check_gpu_types, parse_gres
from harpd.dnn.spec import DnnSpec, dnn_tokens, spec_from_lines
from harpd.dnn.zero import GIB, ceil_gib, estimate, mixed_layout
from harpd.records import Change, Resources

COST_MODEL = (
    "billed GPU-hours = GPUs x billing_weight x elapsed; elapsed is taken to depend on the "
    "configuration only through the GPU count and to scale at best as 1/GPUs, so harp "
    "picks the fewest weighted GPUs that fit, then fewest nodes, then lowest ZeRO stage"
)


@dataclass
class DnnPlan:
    changes: list[Change] = field(default_factory=list)  # the submission's change type (harpd.records)
    explain: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def _dnn_settings(settings: HarpSettings | DnnSettings) -> DnnSettings:
    """The ``[dnn]`` section, given the whole settings or the section itself."""
    return settings.dnn if isinstance(settings, HarpSettings) else settings


def _resources(request: Resources | Mapping[str, Any] | None) -> Resources:
    """The request as ``Resources``: as it comes from the socket, or a mapping (the CLI, tests)."""
    return request if isinstance(request, Resources) else Resources.from_json(request)


def gres_value(old: str | None, gpu_type: str, per_node: int) -> str:
    """The new --gres: our GPU entry first, any non-GPU GRES the user asked for kept."""
    new = f"gpu:{gpu_type}:{per_node}"
    if not old:
        return new
    keep = []
    depth, start = 0, 0
    items = []
    for i, ch in enumerate(old):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            items.append(old[start:i])
            start = i + 1
    items.append(old[start:])
    for item in items:
        item = item.strip()
        if item and item.split(":", 1)[0].split("(", 1)[0] != "gpu":
            keep.append(item)
    return ",".join([new, *keep])


def has_gpu_gres(gres: str | None) -> bool:
    return any(name == "gpu" for name, _, _ in parse_gres(gres))


def _change(changes: list[Change], option: str, value: str, old: Any, reason: str) -> None:
    old_s = None if old is None else str(old)
    if old_s == value:
        return
    changes.append(Change(option=option, value=value, old=old_s, reason=reason))


def _changes_for(
    c: Candidate, spec: DnnSpec, req: Resources, margin: float, why: str | None = None
) -> tuple[list[Change], list[str]]:
    changes: list[Change] = []
    warnings: list[str] = []
    gt = c.gpu_type
    fit = (
        f"{c.need / GIB:.1f} GiB/GPU needed ({c.need_source}, zero={c.stage}, "
        f"{margin:.0%} margin) of {c.capacity / GIB:.0f} GiB"
    )
    _change(changes, "partition", gt.partition, req.partition, f"{gt.name} GPUs are in partition {gt.partition}")
    use_gpus = bool(req.gpus)
    use_gres = has_gpu_gres(req.gres) or not use_gpus
    cheapest = why or f"least billed GPU-hours ({c.n_gpus} GPU x weight {gt.billing_weight:g})"
    if use_gres:
        _change(
            changes,
            "gres",
            gres_value(req.gres, gt.name, c.gpus_per_node),
            req.gres,
            f"{c.gpus_per_node} x {gt.name} per node: {fit}; {cheapest}",
        )
    if use_gpus:
        _change(changes, "gpus", f"{gt.name}:{c.n_gpus}", req.gpus, f"{c.n_gpus} x {gt.name}: {fit}; {cheapest}")
    _change(
        changes,
        "nodes",
        str(c.nodes),
        req.nodes,
        f"{c.n_gpus} GPUs as {c.nodes} node(s) x {c.gpus_per_node} {gt.name}",
    )
    per_node_tasks = 1 if spec.one_task_per_node else c.gpus_per_node
    _change(
        changes,
        "ntasks-per-node",
        str(per_node_tasks),
        None,
        f"one launcher per node (launcher={spec.launcher})"
        if spec.one_task_per_node
        else "one rank per GPU (launcher=srun)",
    )
    host = c.estimate.host_per_node
    if host > 0:
        need_mb = ceil_gib(host) * 1024
        old_mb = req.mem_mb
        if req.mem_per_cpu_mb:
            warnings.append(
                f"ZeRO-Offload needs {ceil_gib(host)} GiB host memory per node; "
                "--mem-per-cpu is set, so harp left host memory alone"
            )
        elif old_mb is None or old_mb < need_mb:
            _change(
                changes,
                "mem",
                f"{ceil_gib(host)}G",
                None if old_mb is None else f"{old_mb}M",
                f"host memory for ZeRO-Offload: {host / GIB:.1f} GiB per node "
                "(offloaded states or start-up fp32 copies, x1.5 buffer)",
            )
    ntasks = req.ntasks
    if ntasks and ntasks != c.nodes * per_node_tasks:
        warnings.append(
            f"--ntasks={ntasks} overrides --ntasks-per-node={per_node_tasks}; "
            f"remove it or set it to {c.nodes * per_node_tasks}"
        )
    return changes, warnings


def _round_gib(d: dict[str, float]) -> dict[str, float]:
    return {k: round(v / GIB, 3) for k, v in d.items()}


def _goal_candidate(res: GoalResult, spec: DnnSpec, dnn: Any, fitting: list[Candidate]) -> Candidate:
    """The Candidate for the configuration the goals chose (re-estimated at a new micro-batch)."""
    for c in fitting:
        if (c.gpu_type.name, c.nodes, c.gpus_per_node, c.stage) == (
            res.gpu_type,
            res.nodes,
            res.gpus_per_node,
            res.zero,
        ) and res.micro_batch is None:
            return c
    gt = next(t for t in dnn.gpu_types if t.name == res.gpu_type)
    s = dataclasses.replace(spec, micro_batch=res.micro_batch or spec.micro_batch)
    n = res.nodes * res.gpus_per_node
    est = estimate(
        s,
        n,
        res.zero,
        cuda_context_gb=dnn.cuda_context_gb,
        distributed_overhead_gb=dnn.distributed_overhead_gb,
        margin=dnn.safety_margin,
        gpus_per_node=res.gpus_per_node,
    )
    return Candidate(gt, res.nodes, res.gpus_per_node, res.zero, est, est.need)


def _goal_notes(goals: DnnGoals, result: GoalResult, array_size: int | None, from_history: int) -> list[str]:
    """What a goal plan tells the user: an array that is not the search's stage, a curve from history."""
    notes: list[str] = []
    stages = result.explain.get("stages") or []
    if goals.trials and array_size and goals.stage < len(stages) and stages[goals.stage]["trials"] != array_size:
        notes.append(
            f"the array has {array_size} task(s) but stage {goals.stage} of trials="
            f"{goals.trials} eta={goals.eta} runs {stages[goals.stage]['trials']}: "
            "the plan assumes the stage's count"
        )
    elif array_size and array_size > 1 and not goals.trials and goals.deadline_s is not None:
        notes.append(
            f"an array of {array_size} without trials=: each task is planned as one job "
            "that must meet the deadline by itself"
        )
    if from_history:
        notes.append(
            f"scaling curve fitted to {from_history} completed earlier run(s) of this job from harpd's history"
        )
    return notes + result.notes


def plan_dnn_job(
    harp_lines: list[str],
    request: Resources | Mapping[str, Any] | None,
    cwd: str | None,
    settings: HarpSettings | DnnSettings,
    *,
    partitions: Mapping[str, Any] | None = None,
    observed: Callable[[str], Iterable[PeakObservation]] | None = None,
    uid: int | None = None,
    billing: Mapping[str, Mapping[str, float]] | None = None,
    history: Callable[[dict[str, str]], tuple[RunTime, ...]] | None = None,
    array_size: int | None = None,
) -> DnnPlan:
    """Plan a DNN job's GPU request; see the module doc.

    ``settings``: HarpSettings (or its ``dnn`` section).  ``partitions``: the
    Slurm backend's ``partitions()`` when available, to keep to what exists.
    ``observed``: the recorded peaks of a ``spec_signature`` (``harpd.dnn.observed``): this job's are taken.
    ``uid``: the submitter, so a config file is only read if they may read it.
    ``billing``: TRESBillingWeights per partition (``harpd.slurm.billing``), for goal plans.
    ``history``: the job's earlier runs by its tokens (``harpd.dnn.history``), when the line gives no runs=.
    """
    try:
        spec = spec_from_lines(list(harp_lines or []), cwd, uid)
        tokens = dnn_tokens(list(harp_lines or []))
        goals = goals_from_tokens(tokens or {})
    except DnnError as exc:
        return DnnPlan([], {"dnn": {"error": str(exc)}}, str(exc))
    if spec is None:
        return DnnPlan()
    dnn = _dnn_settings(settings)
    req = _resources(request)
    observations = list(observed(spec_signature(spec))) if observed is not None else []
    warnings: list[str] = []
    site_nodes = site_gpn = None
    if partitions is not None:
        check = check_gpu_types(dnn.gpu_types, partitions)
        warnings.extend(check.problems)
        site_nodes, site_gpn = check.max_nodes, check.gpus_per_node
    try:
        choice = choose_config(
            spec,
            dnn.gpu_types,
            margin=dnn.safety_margin,
            cuda_context_gb=dnn.cuda_context_gb,
            distributed_overhead_gb=dnn.distributed_overhead_gb,
            max_nodes=dnn.max_nodes,
            site_max_nodes=site_nodes,
            site_gpus_per_node=site_gpn,
            observations=observations,
        )
    except DnnError as exc:
        return DnnPlan([], {"dnn": {"error": str(exc)}}, str(exc))
    goals_result = None
    from_history = 0
    if goals.any and choice.best is not None and not goals.runs and history is not None:
        runs = history(tokens or {})
        if runs:
            goals, from_history = dataclasses.replace(goals, runs=runs), len(runs)
    if goals.any and choice.best is not None:
        goals_result = plan_goals(
            spec, goals, dnn, choice.fitting, site_max_nodes=site_nodes, site_gpus_per_node=site_gpn, billing=billing
        )
    explain: dict[str, Any] = {
        "spec": {k: v for k, v in spec.to_dict().items() if k != "notes"},
        "signature": spec_signature(spec),
        "cost_model": COST_MODEL,
        "notes": list(spec.notes),
    }
    if choice.best is None:
        if choice.closest is not None:
            explain["closest"] = choice.closest.summary()
            explain["breakdown_gib"] = _round_gib(choice.closest.estimate.breakdown())
        explain["error"] = choice.error
        explain["notes"] += warnings
        return DnnPlan([], {"dnn": explain}, choice.error)
    best = choice.best
    if goals_result is not None:
        explain["goals"] = goals_result.explain
        explain["notes"] += _goal_notes(goals, goals_result, array_size, from_history)
        if goals_result.error:
            explain["error"] = goals_result.error
            explain["notes"] += warnings
            return DnnPlan([], {"dnn": explain}, goals_result.error)
        best = _goal_candidate(goals_result, spec, dnn, choice.fitting)
    why = goals_result.explain.get("why") if goals_result is not None else None
    changes, more = _changes_for(best, spec, req, dnn.safety_margin, why)
    warnings += more
    explain.update(
        {
            "chosen": best.summary(),
            "zero": best.stage,
            "mixed": mixed_layout(spec, best.stage),
            "breakdown_gib": _round_gib(best.estimate.breakdown()),
            "alternatives": [c.summary() for c in choice.fitting[1:6]],
        }
    )
    if spec.zero is None:
        warnings.append(f"zero=auto chose ZeRO stage {best.stage}: run the job with that stage")
    if spec.mixed is None and spec.precision != "fp32" and spec.accounting == "harp":
        warnings.append(
            f"sized for mixed={mixed_layout(spec, best.stage)} (fp32 weights under autocast at ZeRO 0, DeepSpeed's "
            "16-bit weights at 1-3); add mixed= to the #HARP dnn line if the job keeps its weights otherwise"
        )
    explain["notes"] += warnings
    out = {"dnn": explain}
    if goals_result is not None and goals_result.explain.get("summary"):
        out["dnn_plan"] = goals_result.explain["summary"]  # one line in --harp-explain
    return DnnPlan(changes, out, None)
