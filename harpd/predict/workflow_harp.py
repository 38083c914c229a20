"""harp's memory model for workflow tasks: per task type, input size as the feature, cost-chosen offset.

A workflow task type (a Nextflow process) runs the same tool on many inputs,
so its memory follows its input size more than anything a user wrote.  For
each type harp fits usage against input size (least squares, never a
negative slope; a constant when the sizes do not vary), and then chooses the
multiplier on that fit that would have cost least on the type's own history
under harp's escalation rule (a failure doubles towards, then past, the
user's request: ``harpd.recovery.escalation``).  The same asymmetric idea as
the rest of harp: an under-sized task costs its whole run again, so the
offset is set by the cost of both errors, not by a fixed percentile.

Never above the user's request, as every allocation harp makes.  A type
with no finished run gets a share of its request from the types seen before
it (``workflow_prior``).

Recency: programs change (a new version, larger inputs), so a type's runs
count by how recent they are: a run's weight halves every ``HALF_LIFE``
newer runs of its type, in the fit (weighted least squares, weighted median)
and in the cost that chooses the multiplier, and only the last ``WINDOW``
runs are kept.  After a step in usage the newest runs dominate the cost at
once (the multiplier rises to cover them within a few runs) and the fit
within ``HALF_LIFE`` runs; a type that does not change loses little, its
old runs say what the new ones say.

Everything is refitted when a run is learnt, so a prediction is a multiply.
Units: bytes, seconds.
"""

from __future__ import annotations

import numpy as np

from harpd.predict.workflow_prior import TypePrior

MIN_RUNS = 3  # below this, the largest usage seen, doubled (at most the request)
MARGINS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5)  # above the chosen ratio, priced like the ratio itself
MAX_ATTEMPTS = 3  # harpd's default ``recovery.max_attempts``: the last runs at the request
#: recency: a run's weight halves every HALF_LIFE newer runs of its type, and only the last WINDOW count
#: (chosen on the nf-core traces in their own order, where programs do not change: 8 and 16 cost 15-20 %
#: more wastage there, 32 nothing measurable; docs/metrics.md, "Recency")
HALF_LIFE = 32
WINDOW = 4 * HALF_LIFE
_ROUNDS = 12  # escalation steps simulated when choosing the multiplier (2**12: far past any miss)


def escalated_cost(
    first: np.ndarray, y: np.ndarray, t: np.ndarray, request: np.ndarray, max_attempts: int = MAX_ATTEMPTS
) -> np.ndarray:
    """Bytes·seconds wasted per task when ``first`` escalates by harp's rule until it fits ``y``.

    The vectorised twin of ``harpd.recovery.escalation.next_allocation`` for
    OOM (while below the request: ``min(2a, request)``, the last of
    ``max_attempts`` the request itself, else ``2a``), no cap; past harpd's
    attempts, doubling (the user's own retries).
    """
    cur = first.astype(float).copy()
    y, t = np.broadcast_to(y, cur.shape), np.broadcast_to(t, cur.shape)
    waste = np.zeros_like(cur)
    req = np.where(np.isfinite(request) & (request > 0), request, np.inf)
    for r in range(_ROUNDS):
        miss = cur < y
        if not miss.any():
            break
        waste += np.where(miss, cur * t, 0.0)
        nxt = np.where(cur < req, np.minimum(2.0 * cur, req), 2.0 * cur)
        if r + 2 == max_attempts:  # attempt r + 1 failed: the next is harpd's last, at the request
            nxt = np.where(cur < req, np.where(np.isfinite(req), req, nxt), nxt)
        cur = np.where(miss, nxt, cur)
    return waste + np.maximum(cur - y, 0.0) * t


def recency_weights(n: int, half_life: float = HALF_LIFE) -> np.ndarray:
    """Weights of ``n`` runs, oldest first: the newest 1, halving every ``half_life`` runs back."""
    return np.power(0.5, np.arange(n - 1, -1, -1, dtype=float) / half_life)


def _weighted_median(y: np.ndarray, w: np.ndarray) -> float:
    order = np.argsort(y, kind="stable")
    cum = np.cumsum(w[order])
    return float(y[order][int(np.searchsorted(cum, 0.5 * cum[-1]))])


def _choose_multiplier(
    ratio: np.ndarray, base: np.ndarray, y: np.ndarray, t: np.ndarray, req: np.ndarray, w: np.ndarray | None = None
) -> tuple[float, float]:
    """The multiplier on ``base`` with the least leave-one-out cost, and that cost.

    A candidate is an order statistic of the usage/fit ratios (from the median
    up to the largest) times a margin.  Each run is priced with the candidate
    computed *without* it, so the largest ratio is not free: the run that set
    it would have failed under the others' maximum, as a new run above every
    earlier one will.  That is what makes a margin above the maximum worth
    its price when failures are dear (long runs) and not when they are cheap.
    ``w``: each run's weight in the cost (recency).
    """
    n = len(ratio)
    order = np.argsort(ratio, kind="stable")
    rs = ratio[order]
    rank = np.empty(n, dtype=int)
    rank[order] = np.arange(n)
    ks = np.unique(np.round(np.linspace((n - 1) // 2, n - 2, 17)).astype(int))
    # every (k, margin) candidate at once, k-major as the choice reads them: one row of firsts per candidate
    loo = np.where(ks[:, None] < rank[None, :], rs[ks][:, None], rs[np.minimum(ks + 1, n - 1)][:, None])
    grow = 1.0 + np.asarray(MARGINS)
    firsts = (loo[:, None, :] * grow[None, :, None]).reshape(-1, n) * base[None, :]
    per_run = escalated_cost(firsts, y[None, :], t[None, :], req[None, :])
    costs = (per_run if w is None else per_run * w[None, :]).sum(axis=1)
    i = int(np.argmin(costs))  # the first least, in (k, margin) order
    if not np.isfinite(costs[i]):
        return float(rs[-1]), float("inf")
    k, margin = ks[i // len(MARGINS)], MARGINS[i % len(MARGINS)]
    full = rs[int(round(k * (n - 1) / max(n - 2, 1)))]
    return float(full * (1 + margin)), float(costs[i])


class HarpTaskModel:
    """One task type's model: ``first(x, request)`` is harp's first allocation, never above the request.

    ``prior``: shared by the types of one history (one user's, one replay's);
    this type's runs feed it under ``kind``, and it sizes this type's first
    tasks, before any run of its own has finished.
    """

    name = "harp"

    def __init__(self, prior: TypePrior | None = None, kind: str = "") -> None:
        self.prior, self.kind = prior, kind
        self.x: list[float] = []
        self.y: list[float] = []
        self.t: list[float] = []
        self.req: list[float] = []
        self._fit: tuple[float, float, float] | None = None  # intercept, slope, multiplier

    def fit(self, x: np.ndarray, y: np.ndarray, t: np.ndarray, req: np.ndarray | None = None) -> None:
        self.x, self.y, self.t = list(map(float, x)), list(map(float, y)), list(map(float, t))
        self.req = list(map(float, req)) if req is not None else [np.nan] * len(self.y)
        self._refit()

    def learn(self, x: float, y: float, t: float, request: float | None = None, end: float | None = None) -> None:
        """One finished run (``end``: when it ended, so the prior can answer as of an earlier time)."""
        self.x.append(float(x))
        self.y.append(float(y))
        self.t.append(float(t))
        self.req.append(float(request) if request else np.nan)
        if self.prior is not None and request:
            self.prior.learn(self.kind, float(y), float(request), end)
        self._refit()

    def _refit(self) -> None:
        if len(self.y) > WINDOW:  # older runs weigh under 1/16 of the newest: left out
            del self.x[:-WINDOW], self.y[:-WINDOW], self.t[:-WINDOW], self.req[:-WINDOW]
        n = len(self.y)
        if n < MIN_RUNS:
            self._fit = None
            return
        x, y = np.asarray(self.x), np.asarray(self.y)
        t = np.maximum(np.asarray(self.t), 1e-3)
        req = np.asarray(self.req)
        w = recency_weights(n)
        fits = [(_weighted_median(y, w), 0.0)]
        if np.ptp(x) > 0:
            b, a = np.polyfit(x, y, 1, w=np.sqrt(w))
            if b > 0:
                fits.append((float(a), float(b)))
        best: tuple[float, float, float, float] | None = None
        floor = 0.05 * float(y.max())
        for a, b in fits:
            base = np.maximum(a + b * x, floor)
            ratio = y / base
            m, cost = _choose_multiplier(ratio, base, y, t, req, w)
            if best is None or cost < best[3]:
                best = (a, b, m, cost)
        assert best is not None
        self._fit = best[:3]

    def first(self, x: float, request: float, submitted: float | None = None) -> float | None:
        """The first allocation; with no run of its own, the prior as it stood at ``submitted`` (None: now)."""
        if not self.y:
            return None if self.prior is None else self.prior.first(request, submitted)
        if self._fit is None:
            want = 2.0 * max(self.y)
        else:
            a, b, m = self._fit
            want = m * max(a + b * float(x), 0.05 * max(self.y))
        # the user's request is the ceiling, as for every job harp sizes: a
        # type's first runs doubled can ask for more than the user did
        return min(want, request) if request > 0 else want
