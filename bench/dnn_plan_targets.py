"""RubberBand-style per-stage plans against one static allocation, on a successive-halving search.

RubberBand (Misra et al., EuroSys 2021) claims "a cost reduction of up to 2x
in comparison to static allocation baselines" for hyper-parameter searches
run as successive halving under a deadline.  The workload here is of that
kind, stated so it can be checked: a 355M-parameter GPT-2-medium-sized model
(24 layers, hidden 1024, 16 heads, seq_len 1024, micro_batch 8, bf16 AdamW,
flash attention), 64 trials, eta 4 (stages of 64, 16, 4 and 1 trials), each
surviving trial trained to 2e9 tokens in all; a site of 8 nodes x 8 A100
(billing weight 1) and 8 nodes x 4 H100 (weight 2.5).  Times come from
harp's default scaling model (``harpd/dnn/scaling.py``: FLOPs at 40% MFU,
ring all-reduce at 150 GB/s in a node and 12 GB/s across nodes).

At deadlines from just above the fastest feasible to ten times it, the
script prints harp's per-stage plan (``harpd.dnn.deadline.plan_stages``)
and the cheapest static pool (one allocation of P GPUs of one type for the
whole search, trials of each stage sharing it) and their billed GPU-hours.
Figures: the largest cost ratio static/plan (the paper's "up to 2x"), and
the smallest (the plan must never cost more than static: >= 1).  Planning
time per deadline is printed too (bounded: the Pareto front is capped).

    python bench/dnn_plan_targets.py
"""
# bench: timeout=300

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PAPER_RATIO = 2.0
FACTORS = (1.05, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0)


def main() -> int:
    from harpd.config import DnnSettings, GpuType
    from harpd.dnn.deadline import hours, layouts_from_candidates, plan_stages, sha_stages, static_plan
    from harpd.dnn.goal_plan import model_for
    from harpd.dnn.goals import DnnGoals
    from harpd.dnn.gpu_choice import choose_config
    from harpd.dnn.spec import build_spec

    dnn = DnnSettings(
        gpu_types=[
            GpuType(name="a100", memory_gb=80, gpus_per_node=8, billing_weight=1.0, partition="gpu-a100"),
            GpuType(name="h100", memory_gb=80, gpus_per_node=4, billing_weight=2.5, partition="gpu-h100"),
        ]
    )
    spec = build_spec(
        {
            "params": "355e6",
            "layers": "24",
            "hidden": "1024",
            "heads": "16",
            "seq_len": "1024",
            "micro_batch": "8",
            "attention": "flash",
            "zero": "auto",
            "vocab": "50257",
        }
    )
    goals = DnnGoals(tokens=2e9, trials=64, eta=4)
    choice = choose_config(
        spec,
        dnn.gpu_types,
        margin=dnn.safety_margin,
        cuda_context_gb=dnn.cuda_context_gb,
        distributed_overhead_gb=dnn.distributed_overhead_gb,
        max_nodes=dnn.max_nodes,
    )
    capacity = {t.name: dnn.max_nodes * t.gpus_per_node for t in dnn.gpu_types}
    layouts = layouts_from_candidates(choice.fitting, {t.name: t.billing_weight for t in dnn.gpu_types}, capacity)
    model = model_for(spec, goals, "a100")
    stages = sha_stages(goals.trials, goals.eta, goals.tokens)
    print(
        "workload: 64 trials, eta 4, stages (trials, tokens added per trial): "
        + ", ".join(f"({n}, {t:.3g})" for n, t in stages)
    )
    loose = plan_stages(model, layouts, stages, float("inf"))
    fastest = loose.fastest_s or 0.0
    print(f"fastest feasible {hours(fastest)}; with no deadline the plan costs {loose.cost:.1f} billed GPU-hours")
    ratios = []
    print(
        f"{'deadline':>9} {'plan GPU-h':>11} {'plan time':>10} {'static GPU-h':>13} {'static pool':>14} "
        f"{'ratio':>6} {'plan ms':>8}  per-stage GPUs per trial (plan)"
    )
    for f in FACTORS:
        d = fastest * f
        t0 = time.perf_counter()
        plan = plan_stages(model, layouts, stages, d)
        ms = (time.perf_counter() - t0) * 1000
        static = static_plan(model, layouts, stages, d)
        if plan.error:
            print(f"{hours(d):>9} plan: {plan.error}")
            continue
        if static is None:
            print(
                f"{hours(d):>9} {plan.cost:>11.1f} {hours(plan.time_s):>10} {'no static pool meets this deadline':>36}"
            )
            continue
        r = static.cost / plan.cost
        ratios.append(r)
        per = " ".join(f"{s.layout.n_gpus}{s.layout.gpu_type[0]}" for s in plan.stages)
        print(
            f"{hours(d):>9} {plan.cost:>11.1f} {hours(plan.time_s):>10} {static.cost:>13.1f} "
            f"{str(static.pool) + ' x ' + static.gpu_type:>14} {r:>6.2f} {ms:>8.1f}  {per}"
        )
    finite = [r for r in ratios if r != float("inf")]
    best = max(finite) if finite else float("nan")
    worst = min(finite) if finite else float("nan")
    print(
        f"FIGURE dnn_plan_cost_ratio_max: {best:.2f} x (target >= {PAPER_RATIO}) "
        f"{'PASS' if best >= PAPER_RATIO else 'FAIL'} static/plan billed GPU-hours, best deadline; "
        f"RubberBand claims up to {PAPER_RATIO}x"
    )
    print(
        f"FIGURE dnn_plan_cost_ratio_min: {worst:.2f} x (target >= 1.0) {'PASS' if worst >= 1.0 - 1e-9 else 'FAIL'} "
        "the plan never costs more than static"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
