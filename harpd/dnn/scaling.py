"""How long a training run takes on a given GPU configuration: the scaling curve.

Deadline plans (RubberBand) and batch choices (elastic scaling) both need the
run's time as a function of the GPU type, the GPU count, the node count and
the micro-batch.  Two sources, in order:

1. **The job's own runs** (``runs=`` on the ``#HARP dnn`` line, or what the
   caller found in history): the curve's three terms are fitted to them,
   non-negative least squares over
       T(n) = gamma + alpha * compute(n) + beta * comm(n)
   where compute(n) is the default model's compute time (falls as 1/n) and
   comm(n) its exposed all-reduce time (rises with n, steeply across nodes).
   One run fixes one common factor (alpha = beta), two fix alpha and beta, three
   or more add the fixed cost gamma (start-up, data loading, evaluation: the
   Amdahl serial part).  A fitted curve is an Amdahl-plus-communication model
   calibrated on the job itself.
2. **The default model** (stated, so a user can check it): per micro-step the
   GPU does k * params * tokens FLOPs (k = 6, forward and backward; 8 with full
   recomputation) at ``peak x mfu x tokens/(tokens + 512)`` (utilisation falls
   for small micro-batches); per optimizer step a ring all-reduce moves
   2(n-1)/n x the gradient bytes (2 per parameter in 16-bit, 4 in fp32; x1.5 at
   ZeRO-3) at 150 GB/s within a node and 12 GB/s across nodes, not overlapped
   with compute (conservative).  Peaks are dense bf16 tensor TFLOPs of the
   GPU named by the GRES type; an unknown name is taken as an A100 (noted).

The figures are assumptions, not measurements of this site: the fitted curve
replaces them as soon as the job has run at two GPU counts.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from harpd.dnn.goals import RunTime

# dense 16-bit tensor TFLOPs per GPU (vendor data sheets, without sparsity)
PEAK_TFLOPS: dict[str, float] = {
    "a100": 312.0,
    "h100": 989.0,
    "h200": 989.0,
    "gh200": 989.0,
    "b200": 2250.0,
    "v100": 125.0,
    "a40": 150.0,
    "a30": 165.0,
    "a10": 125.0,
    "l40": 181.0,
    "l40s": 362.0,
    "l4": 121.0,
    "t4": 65.0,
    "rtx6000": 130.0,
    "mi250": 383.0,
    "mi250x": 383.0,
    "mi300x": 1307.0,
}
DEFAULT_PEAK = "a100"
INTRA_NODE_GBPS = 150.0  # all-reduce bus bandwidth within a node (NVLink class)
INTER_NODE_GBPS = 12.0  # across nodes (one 100 Gb/s link per node)
HALF_TOKENS = 512.0  # tokens per micro-step at which utilisation is half of mfu's
NOMINAL_TOKENS = 1e9  # the work unit when only runs= are known (the fit absorbs it)


def peak_tflops(gpu_type: str) -> tuple[float, bool]:
    """(peak, known): the GRES type's peak, or an A100's when the name is not in the table."""
    key = gpu_type.lower().split("_")[0].split("-")[0]
    for name in (gpu_type.lower(), key):
        if name in PEAK_TFLOPS:
            return PEAK_TFLOPS[name], True
    return PEAK_TFLOPS[DEFAULT_PEAK], False


@dataclass(frozen=True)
class StepParts:
    """Seconds of one optimizer step: compute (all micro-steps) and exposed communication."""

    compute: float
    comm: float

    @property
    def total(self) -> float:
        return self.compute + self.comm


@dataclass(frozen=True)
class Fit:
    """The curve's multipliers: 1, 1, 0 is the default model; else fitted to runs."""

    alpha: float = 1.0  # compute
    beta: float = 1.0  # communication
    gamma_s: float = 0.0  # fixed seconds per run
    source: str = "default model"
    residual: float = 0.0  # root-mean-square relative error on the runs


class ScalingModel:
    """Run and step times for one job description (params, seq_len, precision, recompute)."""

    def __init__(
        self,
        *,
        params: int,
        seq_len: int,
        micro_batch: int,
        precision: str = "bf16",
        recompute: str = "none",
        mfu: float = 0.4,
        tokens: float | None = None,
        fit: Fit | None = None,
    ) -> None:
        self.params = params
        self.seq_len = max(1, seq_len)
        self.micro_batch = max(1, micro_batch)
        self.grad_bytes = 4 if precision == "fp32" else 2
        self.flops_per_token = (8.0 if recompute == "full" else 6.0) * params
        self.mfu = mfu
        self.tokens = tokens if tokens else NOMINAL_TOKENS
        self.fit = fit or Fit()

    # ------------------------------------------------------------ the default model
    def step_parts(
        self, gpu_type: str, n: int, nodes: int, micro_batch: int, stage: int = 0, accum: int = 1
    ) -> StepParts:
        """Default-model seconds of one optimizer step, before the fit's multipliers."""
        peak, _ = peak_tflops(gpu_type)
        tok = self.seq_len * micro_batch
        util = self.mfu * tok / (tok + HALF_TOKENS)
        compute = accum * self.flops_per_token * tok / (peak * 1e12 * util)
        if n <= 1:
            return StepParts(compute, 0.0)
        volume = 2.0 * (n - 1) / n * self.grad_bytes * self.params * (1.5 if stage == 3 else 1.0)
        bw = INTRA_NODE_GBPS if nodes <= 1 else INTER_NODE_GBPS
        return StepParts(compute, volume / (bw * 1e9))

    def _terms(
        self,
        gpu_type: str,
        n: int,
        nodes: int,
        stage: int,
        tokens: float,
        micro_batch: int | None = None,
        accum: int = 1,
    ) -> tuple[float, float]:
        b = micro_batch or self.micro_batch
        steps = tokens / (n * b * accum * self.seq_len)
        parts = self.step_parts(gpu_type, n, nodes, b, stage, accum)
        return steps * parts.compute, steps * parts.comm

    # ------------------------------------------------------------ predictions
    def run_time(
        self,
        gpu_type: str,
        n: int,
        nodes: int,
        stage: int = 0,
        tokens: float | None = None,
        micro_batch: int | None = None,
        accum: int = 1,
    ) -> float:
        """Seconds to train ``tokens`` (default: the job's) on n GPUs over ``nodes`` nodes."""
        tok = self.tokens if tokens is None else tokens
        compute, comm = self._terms(gpu_type, n, nodes, stage, tok, micro_batch, accum)
        gamma = self.fit.gamma_s * (tok / self.tokens)
        return gamma + self.fit.alpha * compute + self.fit.beta * comm

    def throughput(self, gpu_type: str, n: int, nodes: int, micro_batch: int, accum: int = 1, stage: int = 0) -> float:
        """Sequences per second at a global batch of n x micro_batch x accum."""
        parts = self.step_parts(gpu_type, n, nodes, micro_batch, stage, accum)
        step = self.fit.alpha * parts.compute + self.fit.beta * parts.comm
        return n * micro_batch * accum / step

    # ------------------------------------------------------------ fitting
    def fitted(self, runs: Iterable[RunTime], default_type: str, stage: int = 0) -> ScalingModel:
        """A copy whose multipliers are fitted to ``runs`` (same job, same work, same micro_batch)."""
        runs = [r for r in runs if r.elapsed_s > 0]
        if not runs:
            return self
        rows = []
        for r in runs:
            c, m = self._terms(r.gpu_type or default_type, r.n_gpus, r.nodes, stage, self.tokens)
            rows.append((c, m, r.elapsed_s))
        out = copy.copy(self)
        out.fit = fit_terms(rows)
        return out


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; None when singular."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) < 1e-12:
            return None
        m[col], m[piv] = m[piv], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                for k in range(col, n + 1):
                    m[r][k] -= f * m[col][k]
    return [m[i][n] / m[i][i] for i in range(n)]


def fit_terms(rows: Sequence[tuple[float, float, float]]) -> Fit:
    """Non-negative least squares of elapsed ~ gamma + alpha*compute + beta*comm, in relative error.

    Each row is weighted by 1/elapsed so that a long run at one GPU does not
    drown the short ones.  With fewer runs than terms the extra terms are not
    free: one run fits a common factor, two fit alpha and beta.
    """
    n = len(rows)
    if n == 1:
        c, m, t = rows[0]
        k = t / (c + m) if c + m > 0 else 1.0
        return Fit(k, k, 0.0, "fitted to 1 run (one factor on the default model)", 0.0)
    cols_all = [0, 1, 2] if n >= 3 else [0, 1]
    best: tuple[float, list[float], list[int]] | None = None
    # every subset of terms, least squares on it; keep the best non-negative solution
    for mask in range(1, 1 << len(cols_all)):
        if not mask & 1:  # the compute term stays: without it the curve would not fall with GPUs at all
            continue
        cols = [cols_all[i] for i in range(len(cols_all)) if mask >> i & 1]
        x_rows = [[(r[0], r[1], 1.0)[j] / r[2] for j in cols] for r in rows]
        y = [1.0] * n
        ata = [[sum(xr[i] * xr[j] for xr in x_rows) for j in range(len(cols))] for i in range(len(cols))]
        aty = [sum(xr[i] * y[k] for k, xr in enumerate(x_rows)) for i in range(len(cols))]
        sol = _solve(ata, aty)
        if sol is None or any(v < 0 for v in sol) or sol[0] <= 0:
            continue
        res = sum((sum(v * xr[i] for i, v in enumerate(sol)) - 1.0) ** 2 for xr in x_rows)
        if best is None or res < best[0] - 1e-12:
            best = (res, sol, cols)
    if best is None:
        c, m, t = rows[0]
        return Fit(source="default model (the runs did not give a usable fit)")
    res, sol, cols = best
    coef = {j: v for j, v in zip(cols, sol)}
    alpha = coef[0]
    beta = coef.get(1, alpha)  # comm not fitted: keep the default model's comm-to-compute ratio
    rms = math.sqrt(res / n)
    return Fit(alpha, beta, coef.get(2, 0.0), f"fitted to {n} runs (rms error {rms:.0%})", rms)
