"""Deadline plans: the cheapest GPU configuration whose predicted time meets a deadline (RubberBand).

Slurm bills GPUs x billing weight x elapsed time, and elapsed time depends on
the configuration through the scaling curve (``scaling.py``): more GPUs finish
sooner but, scaling sub-linearly, bill more GPU-hours.  So the cheapest
configuration is the smallest that fits in memory, and a deadline forces a
larger one; harp takes, among the configurations that fit in memory (one per
GPU type x nodes x GPUs per node, at its lowest fitting ZeRO stage), the one
of least predicted billed GPU-hours whose predicted time meets the deadline.

A hyper-parameter search run as successive halving (``trials=N eta=E``) has
stages of falling parallelism: stage i runs N/E^i trials at once, each
continuing its training from the last stage (so each stage adds
tokens x E^(i-S+1) minus what the trial already had).  As RubberBand argues,
one allocation for the whole search either idles GPUs in the late stages or
misses the deadline; a plan per stage picks each stage's per-trial
configuration so that the stages together meet the deadline at least cost:
an exact Pareto merge of (time, cost) over the stages.  Trials beyond the
type's capacity in the site run in waves.

The static baseline (``static_plan``): one pool of P GPUs of one type held
for the whole search (one big allocation running a tuner inside it), the
trials of each stage sharing it evenly; the cheapest P meeting the deadline.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from harpd.dnn.scaling import ScalingModel

MAX_FRONT = 1000  # Pareto points kept between stages (planning time stays bounded)


@dataclass(frozen=True)
class Layout:
    """A memory-fitting way to run one trial: type, nodes, GPUs per node, ZeRO stage."""

    gpu_type: str
    nodes: int
    gpus_per_node: int
    zero: int
    weight: float  # billing weight of one GPU
    capacity: int  # GPUs of this type the site has (waves beyond it)

    @property
    def n_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def label(self) -> str:
        return f"{self.n_gpus} x {self.gpu_type} ({self.nodes} node(s) x {self.gpus_per_node})"


class StageSummary(TypedDict):
    """One stage of a deadline plan as ``--harp-explain`` and ``harp dnn`` print it."""

    stage: int
    trials: int
    tokens_per_trial: float
    gpu_type: str
    nodes: int
    gpus_per_node: int
    n_gpus: int
    zero: int
    waves: int
    time_h: float
    billed_gpu_hours: float


@dataclass(frozen=True)
class StagePlan:
    stage: int
    trials: int
    tokens_per_trial: float
    layout: Layout
    waves: int
    time_s: float
    cost: float  # billed GPU-hours (GPUs x weight x hours)

    def summary(self) -> StageSummary:
        return {
            "stage": self.stage,
            "trials": self.trials,
            "tokens_per_trial": self.tokens_per_trial,
            "gpu_type": self.layout.gpu_type,
            "nodes": self.layout.nodes,
            "gpus_per_node": self.layout.gpus_per_node,
            "n_gpus": self.layout.n_gpus,
            "zero": self.layout.zero,
            "waves": self.waves,
            "time_h": round(self.time_s / 3600, 3),
            "billed_gpu_hours": round(self.cost, 3),
        }


@dataclass
class DeadlinePlan:
    stages: list[StagePlan] = field(default_factory=list)
    error: str | None = None
    fastest_s: float | None = None

    @property
    def time_s(self) -> float:
        return sum(s.time_s for s in self.stages)

    @property
    def cost(self) -> float:
        return sum(s.cost for s in self.stages)


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f}h" if seconds >= 360 else f"{seconds / 60:.1f}min"


def sha_stages(trials: int, eta: int, tokens: float) -> list[tuple[int, float]]:
    """(trials running, tokens each trial adds) per successive-halving stage, down to one trial."""
    counts = []
    n = trials
    while True:
        counts.append(n)
        if n <= 1:
            break
        n = max(1, n // eta)
    s = len(counts)
    out = []
    done = 0.0
    for i, n in enumerate(counts):
        total = tokens * float(eta) ** (i - (s - 1))
        out.append((n, total - done))
        done = total
    return out


def _option(model: ScalingModel, lay: Layout, trials: int, tokens: float, stage: int) -> StagePlan:
    t = model.run_time(lay.gpu_type, lay.n_gpus, lay.nodes, lay.zero, tokens=tokens)
    per_wave = max(1, lay.capacity // lay.n_gpus) if lay.capacity else trials
    waves = math.ceil(trials / per_wave)
    return StagePlan(stage, trials, tokens, lay, waves, waves * t, trials * lay.n_gpus * lay.weight * t / 3600)


def _pareto(points: list[tuple[float, float, tuple]]) -> list[tuple[float, float, tuple]]:
    """Keep (time, cost, plan) points no other point beats on both; at most MAX_FRONT."""
    points.sort(key=lambda p: (p[0], p[1]))
    out: list[tuple[float, float, tuple]] = []
    best_cost = math.inf
    for p in points:
        if p[1] < best_cost - 1e-12:
            out.append(p)
            best_cost = p[1]
    if len(out) > MAX_FRONT:
        step = len(out) / MAX_FRONT
        out = [out[int(i * step)] for i in range(MAX_FRONT)] + [out[-1]]
    return out


def plan_stages(
    model: ScalingModel, layouts: Sequence[Layout], stages: Sequence[tuple[int, float]], deadline_s: float
) -> DeadlinePlan:
    """The per-stage layouts of least total billed GPU-hours whose times sum to at most the deadline."""
    if not layouts:
        return DeadlinePlan(error="no GPU configuration fits the model in memory")
    front: list[tuple[float, float, tuple]] = [(0.0, 0.0, ())]
    for i, (trials, tokens) in enumerate(stages):
        options = [
            p[2][0]
            for p in _pareto(
                [(o.time_s, o.cost, (o,)) for o in (_option(model, lay, trials, tokens, i) for lay in layouts)]
            )
        ]
        merged = [
            (t + o.time_s, c + o.cost, plan + (o,))
            for (t, c, plan) in front
            for o in options
            if t + o.time_s <= deadline_s * (1 + 1e-9)
        ]
        front = _pareto(merged)
        if not front:
            break
    fastest = fastest_total(model, layouts, stages)
    if not front:
        return DeadlinePlan(
            error=f"deadline {hours(deadline_s)} cannot be met: the fastest configuration is "
            f"predicted to take {hours(fastest)}",
            fastest_s=fastest,
        )
    best = min(front, key=lambda p: (round(p[1], 9), p[0]))
    return DeadlinePlan(list(best[2]), None, fastest)


def fastest_total(model: ScalingModel, layouts: Sequence[Layout], stages: Sequence[tuple[int, float]]) -> float:
    return sum(min(_option(model, lay, n, tok, i).time_s for lay in layouts) for i, (n, tok) in enumerate(stages))


def fastest_layout(model: ScalingModel, layouts: Sequence[Layout], trials: int, tokens: float) -> StagePlan:
    return min((_option(model, lay, trials, tokens, 0) for lay in layouts), key=lambda o: (o.time_s, o.cost))


@dataclass(frozen=True)
class StaticPlan:
    gpu_type: str
    pool: int
    time_s: float
    cost: float
    per_stage: tuple[tuple[int, int, float], ...]  # (GPUs per trial, waves, seconds)


def static_plan(
    model: ScalingModel, layouts: Sequence[Layout], stages: Sequence[tuple[int, float]], deadline_s: float
) -> StaticPlan | None:
    """One pool of P GPUs of one type for the whole search, billed throughout; the cheapest meeting the deadline."""
    by_type: dict[str, list[Layout]] = {}
    for lay in layouts:
        by_type.setdefault(lay.gpu_type, []).append(lay)
    best: StaticPlan | None = None
    for gtype, lays in by_type.items():
        cap = max(lay.capacity for lay in lays) or max(lay.n_gpus for lay in lays) * stages[0][0]
        weight = lays[0].weight
        counts = sorted({lay.n_gpus for lay in lays})
        # pool sizes: multiples of a trial's GPU count up to the first stage's need, never above the site's
        pools = sorted({min(cap, n * k) for n in counts for k in range(1, min(stages[0][0], cap // n + 1) + 1)})
        for pool in pools:
            total = 0.0
            parts = []
            for trials, tokens in stages:
                options = []
                for lay in lays:
                    if lay.n_gpus > pool:
                        continue
                    per_wave = pool // lay.n_gpus
                    waves = math.ceil(trials / per_wave)
                    t = waves * model.run_time(gtype, lay.n_gpus, lay.nodes, lay.zero, tokens=tokens)
                    options.append((t, lay.n_gpus, waves))
                if not options:
                    total = math.inf
                    break
                t, g, w = min(options)
                total += t
                parts.append((g, w, t))
            if total > deadline_s:
                continue
            cost = pool * weight * total / 3600
            if best is None or cost < best.cost - 1e-9:
                best = StaticPlan(gtype, pool, total, cost, tuple(parts))
    return best


def layouts_from_candidates(
    candidates: Iterable[Any], weights: Mapping[str, float], capacity: Mapping[str, int]
) -> list[Layout]:
    """One Layout per (type, nodes, GPUs per node): the lowest fitting ZeRO stage (least traffic)."""
    seen: dict[tuple[str, int, int], Layout] = {}
    for c in candidates:
        key = (c.gpu_type.name, c.nodes, c.gpus_per_node)
        if key in seen and seen[key].zero <= c.stage:
            continue
        seen[key] = Layout(
            c.gpu_type.name,
            c.nodes,
            c.gpus_per_node,
            c.stage,
            float(weights.get(c.gpu_type.name, c.gpu_type.billing_weight)),
            int(capacity.get(c.gpu_type.name, 0)),
        )
    return sorted(seen.values(), key=lambda lay: (lay.gpu_type, lay.n_gpus, lay.nodes))
