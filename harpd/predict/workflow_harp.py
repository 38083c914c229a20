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

Everything is refitted when a run is learnt, so a prediction is a multiply.
Units: bytes, seconds.
"""

from __future__ import annotations

import numpy as np

MIN_RUNS = 3  # below this, the largest usage seen, doubled
_ROUNDS = 12  # escalation steps simulated when choosing the multiplier (2**12: far past any miss)


def escalated_cost(first: np.ndarray, y: np.ndarray, t: np.ndarray, request: np.ndarray) -> np.ndarray:
    """Bytes·seconds wasted per task when ``first`` escalates by harp's rule until it fits ``y``.

    The vectorised twin of ``harpd.recovery.escalation.next_allocation`` for
    OOM (while below the request: ``min(2a, request)``, else ``2a``), no cap.
    """
    cur = first.astype(float).copy()
    waste = np.zeros_like(cur)
    req = np.where(np.isfinite(request) & (request > 0), request, np.inf)
    for _ in range(_ROUNDS):
        miss = cur < y
        if not miss.any():
            break
        waste += np.where(miss, cur * t, 0.0)
        nxt = np.where(cur < req, np.minimum(2.0 * cur, req), 2.0 * cur)
        cur = np.where(miss, nxt, cur)
    return waste + np.maximum(cur - y, 0.0) * t


class HarpTaskModel:
    """One task type's model: ``first(x, request)`` is harp's first allocation."""

    name = "harp"

    def __init__(self) -> None:
        self.x: list[float] = []
        self.y: list[float] = []
        self.t: list[float] = []
        self.req: list[float] = []
        self._fit: tuple[float, float, float] | None = None  # intercept, slope, multiplier

    def fit(self, x: np.ndarray, y: np.ndarray, t: np.ndarray, req: np.ndarray | None = None) -> None:
        self.x, self.y, self.t = list(map(float, x)), list(map(float, y)), list(map(float, t))
        self.req = list(map(float, req)) if req is not None else [np.nan] * len(self.y)
        self._refit()

    def learn(self, x: float, y: float, t: float, request: float | None = None) -> None:
        self.x.append(float(x))
        self.y.append(float(y))
        self.t.append(float(t))
        self.req.append(float(request) if request else np.nan)
        self._refit()

    def _refit(self) -> None:
        n = len(self.y)
        if n < MIN_RUNS:
            self._fit = None
            return
        x, y = np.asarray(self.x), np.asarray(self.y)
        t = np.maximum(np.asarray(self.t), 1e-3)
        req = np.asarray(self.req)
        fits = [(float(np.median(y)), 0.0)]
        if np.ptp(x) > 0:
            b, a = np.polyfit(x, y, 1)
            if b > 0:
                fits.append((float(a), float(b)))
        best: tuple[float, float, float, float] | None = None
        floor = 0.05 * float(y.max())
        for a, b in fits:
            base = np.maximum(a + b * x, floor)
            ratio = np.sort(y / base)
            cand = np.unique(np.quantile(ratio, np.linspace(0.5, 1.0, 41)))
            cost = np.array([escalated_cost(m * base, y, t, req).sum() for m in cand])
            k = int(np.argmin(cost))
            if best is None or cost[k] < best[3]:
                best = (a, b, float(cand[k]), float(cost[k]))
        assert best is not None
        self._fit = best[:3]

    def first(self, x: float, request: float) -> float | None:
        if not self.y:
            return None
        if self._fit is None:
            return 2.0 * max(self.y)
        a, b, m = self._fit
        return m * max(a + b * float(x), 0.05 * max(self.y))
