"""Batch size and GPU count: the most throughput per billed GPU-hour within a batch range (elastic scaling).

Saxena, Jayaram et al. (MASCOTS 2020) observe that a DL job can train with any
global batch in a range without losing accuracy, and that the batch decides
how well it scales: a bigger batch per GPU keeps the GPU busy and spreads the
all-reduce over more samples.  harp applies that to one submission: for a job
that states ``batch=LO..HI`` it tries every GPU type x nodes x GPUs per node
the site offers, every ZeRO stage the spec allows, and micro-batches up to the
largest that fits in memory (the ZeRO model, binary search: memory grows with
the micro-batch), with gradient accumulation to reach the range, and picks the
(GPUs, micro-batch, accumulation) of the most sequences per billed GPU-hour
(throughput / (GPUs x billing weight)), ties to the faster.  With a deadline,
only choices that finish in time count.

The search is bounded whatever the input: micro-batches are tried at powers of
two, the largest fitting and those that hit the range's ends (about 40 per
layout), so a range of 1..10^7 plans as fast as 256..2048.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from harpd.dnn.deadline import Layout
from harpd.dnn.scaling import ScalingModel

MAX_MICRO_BATCH = 1 << 16


class BatchSummary(TypedDict):
    """A batch choice as ``--harp-explain`` and ``harp dnn`` print it."""

    gpu_type: str
    nodes: int
    gpus_per_node: int
    n_gpus: int
    zero: int
    micro_batch: int
    grad_accum: int
    global_batch: int
    seq_per_s: float
    seq_per_billed_gpu_hour: float
    time_h: float | None


@dataclass(frozen=True)
class BatchChoice:
    layout: Layout
    micro_batch: int
    accum: int
    throughput: float  # sequences per second
    per_cost: float  # sequences per billed GPU-hour
    time_s: float | None  # for the job's tokens, when known

    @property
    def global_batch(self) -> int:
        return self.layout.n_gpus * self.micro_batch * self.accum

    def summary(self) -> BatchSummary:
        return {
            "gpu_type": self.layout.gpu_type,
            "nodes": self.layout.nodes,
            "gpus_per_node": self.layout.gpus_per_node,
            "n_gpus": self.layout.n_gpus,
            "zero": self.layout.zero,
            "micro_batch": self.micro_batch,
            "grad_accum": self.accum,
            "global_batch": self.global_batch,
            "seq_per_s": round(self.throughput, 2),
            "seq_per_billed_gpu_hour": round(self.per_cost, 1),
            "time_h": None if self.time_s is None else round(self.time_s / 3600, 3),
        }


def max_micro_batch(fits: Callable[[int], bool], hi: int) -> int:
    """The largest b in 1..hi with fits(b) (memory grows with b); 0 when even 1 does not fit."""
    hi = max(1, min(hi, MAX_MICRO_BATCH))
    if not fits(1):
        return 0
    lo = 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _micro_batches(b_max: int, n: int, lo: int, hi: int) -> list[int]:
    cands = {b_max}
    p = 1
    while p <= b_max:
        cands.add(p)
        p *= 2
    for target in (lo, hi):
        q = target // n
        for b in (q, -(-target // n)):
            if 1 <= b <= b_max:
                cands.add(b)
    return sorted(cands)


def choose_batch(
    model: ScalingModel,
    layouts: Sequence[Layout],
    batch: tuple[int, int],
    fits: Callable[[Layout, int], bool],
    *,
    tokens: float | None = None,
    deadline_s: float | None = None,
) -> tuple[BatchChoice | None, list[BatchChoice]]:
    """The best choice and every evaluated one (for explain and the bench)."""
    lo, hi = batch
    evaluated: list[BatchChoice] = []
    for lay in layouts:
        n = lay.n_gpus
        if n > hi:
            continue
        b_max = max_micro_batch(functools.partial(fits, lay), hi // n)
        if b_max == 0:
            continue
        for b in _micro_batches(b_max, n, lo, hi):
            k_lo = max(1, -(-lo // (n * b)))
            k_hi = hi // (n * b)
            if k_lo > k_hi:
                continue
            for k in {k_lo, k_hi}:
                thr = model.throughput(lay.gpu_type, n, lay.nodes, b, k, lay.zero)
                per_cost = thr * 3600 / (n * lay.weight)
                t = tokens / (thr * model.seq_len) if tokens else None
                evaluated.append(BatchChoice(lay, b, k, thr, per_cost, t))
    ok = [c for c in evaluated if deadline_s is None or c.time_s is None or c.time_s <= deadline_s]
    if not ok:
        return None, evaluated
    best = max(ok, key=lambda c: (round(c.per_cost, 6), c.throughput, -c.layout.nodes))
    return best, evaluated


def fixed_choice(
    model: ScalingModel,
    lay: Layout,
    global_batch: int,
    fits: Callable[[Layout, int], bool],
    tokens: float | None = None,
) -> BatchChoice | None:
    """A fixed configuration: ``lay`` at ``global_batch``, the biggest micro-batch that fits, accumulation the rest."""
    n = lay.n_gpus
    per_gpu = max(1, global_batch // n)
    b_max = max_micro_batch(lambda b: fits(lay, b), per_gpu)
    if b_max == 0:
        return None
    b = max(d for d in range(1, b_max + 1) if per_gpu % d == 0) if per_gpu <= 4096 else b_max
    k = max(1, per_gpu // b)
    thr = model.throughput(lay.gpu_type, n, lay.nodes, b, k, lay.zero)
    return BatchChoice(
        lay, b, k, thr, thr * 3600 / (n * lay.weight), tokens / (thr * model.seq_len) if tokens else None
    )


def memory_fits(
    spec: Any, estimate_fn: Callable[..., Any], margin_capacity: Callable[[Layout], float]
) -> Callable[[Layout, int], bool]:
    """fits(layout, micro_batch) from the ZeRO estimate, cached."""
    cache: dict[tuple[str, int, int, int, int], bool] = {}

    def fits(lay: Layout, b: int) -> bool:
        key = (lay.gpu_type, lay.n_gpus, lay.gpus_per_node, lay.zero, b)
        if key not in cache:
            est = estimate_fn(dataclasses.replace(spec, micro_batch=b), lay.n_gpus, lay.zero, lay.gpus_per_node)
            cache[key] = est.need <= margin_capacity(lay)
        return cache[key]

    return fits


def gain(best: BatchChoice, base: BatchChoice) -> tuple[float, float]:
    """(throughput ratio, throughput-per-cost ratio) of ``best`` over ``base``."""
    return best.throughput / base.throughput, best.per_cost / base.per_cost if base.per_cost else math.inf
