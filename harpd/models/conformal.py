"""One-sided split-conformal calibration, per group, with adaptive (ACI) levels.

A quantile model's nominal τ is not a guarantee: trees overfit, users change
habits.  Split conformal (Romano et al. 2019) fixes the miss rate on
exchangeable data: with residuals s_i = y_i − q̂(x_i) of jobs the model did
not train on, adding the k-th smallest, k = ⌈(n+1)(1−α)⌉, gives
P(y ≤ q̂ + s_(k)) ≥ 1−α.  One-sided because only under-prediction kills jobs.

Per group (partition) where a group has ``min_group`` residuals, else over
all jobs: partitions differ in how predictable they are, and a single offset
would over-pad the easy ones to cover the hard ones.

Real traces drift, which breaks exchangeability; adaptive conformal inference
(Gibbs & Candès 2021) keeps the *realised* miss rate on target anyway by
moving each group's level after every finished job: α ← α + γ(α* − err).
The residual windows slide too, so old behaviour ages out.  ``observe`` is
how finished jobs feed back (replay calls it as jobs end; the daemon may call
it from ingest, and every retrain re-seeds it from a fresh hold-out).
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from harpd.models.base import BasePredictor, check_xy
from harpd.models.gbm import GbmQuantile

_ALL = "\x00all"


class OnlineConformal:
    """Per-group sliding residual windows and ACI miss-rate levels."""

    def __init__(self, alpha: float = 0.05, window: int = 3000, min_group: int = 300,
                 gamma: float = 0.005, alpha_max: float = 0.5):
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {alpha}")
        self.alpha = alpha
        self.window = window
        self.min_group = min_group
        self.gamma = gamma
        self.alpha_max = alpha_max
        self.res: dict[str, deque[float]] = {}
        self.level: dict[str, float] = {}
        self._cache: dict[str, float] = {}

    def reset(self, groups: np.ndarray | None, residuals: np.ndarray) -> None:
        self.res, self.level, self._cache = {}, {}, {}
        residuals = np.asarray(residuals, dtype=float)
        g = np.full(len(residuals), _ALL, dtype=object) if groups is None else np.asarray(groups, dtype=object)
        for gi, r in zip(g, residuals):
            self._push(str(gi), float(r))

    def _push(self, g: str, r: float) -> None:
        for key in (g, _ALL) if g != _ALL else (_ALL,):
            d = self.res.get(key)
            if d is None:
                d = self.res[key] = deque(maxlen=self.window)
            d.append(r)
            self._cache.pop(key, None)

    def _key(self, g: str) -> str:
        d = self.res.get(g)
        return g if d is not None and len(d) >= self.min_group else _ALL

    def offset(self, group: str | None) -> float:
        """The conformal offset for a job of ``group`` (inf: cannot bound it)."""
        key = self._key(str(group)) if group is not None else _ALL
        off = self._cache.get(key)
        if off is None:
            off = self._cache[key] = self._quantile(key)
        return off

    def _quantile(self, key: str) -> float:
        d = self.res.get(key)
        if not d:
            return math.inf
        n = len(d)
        a = self.level.get(key, self.alpha)
        k = math.ceil((n + 1) * (1.0 - a))
        if k > n:
            return math.inf
        if k < 1:
            return -math.inf
        arr = np.fromiter(d, dtype=float, count=n)
        return float(np.partition(arr, k - 1)[k - 1])

    def offsets(self, groups: np.ndarray | None, n: int) -> np.ndarray:
        if groups is None:
            return np.full(n, self.offset(None))
        out = np.empty(n)
        memo: dict[str, float] = {}
        for i, g in enumerate(groups):
            v = memo.get(g)
            if v is None:
                v = memo[g] = self.offset(g)
            out[i] = v
        return out

    def update(self, group: str | None, residual: float, err: bool | None = None) -> None:
        """One finished job: slide its group's window, move its ACI level.

        ``err`` is whether the job actually ran out under harp's allocation
        (False for a request harp left alone); without it the residual is
        compared with the current offset.
        """
        g = _ALL if group is None else str(group)
        key = self._key(g)
        if err is None:
            err = residual > self.offset(g)
        if math.isfinite(residual):
            self._push(g, residual)
        if self.gamma > 0:
            for k in {key, _ALL}:
                a = self.level.get(k, self.alpha) + self.gamma * (self.alpha - float(err))
                self.level[k] = min(max(a, 0.0), self.alpha_max)
                self._cache.pop(k, None)


class ConformalQuantile(BasePredictor):
    """A base model (default: GBM quantile) plus per-group one-sided conformal offsets.

    ``fit`` trains the base on the older part of the rows and calibrates on
    the most recent ``cal_fraction`` (chronological split, uncensored rows
    only: a lower bound is no residual).  ``predict`` returns the base
    prediction plus the group's offset; ``observe`` feeds finished jobs back.
    """

    name = "gbm-conformal"
    needs_training = True

    def __init__(self, alpha: float = 0.05, base: BasePredictor | None = None, cal_fraction: float = 0.25,
                 window: int = 3000, min_group: int = 300, gamma: float = 0.005, max_cal: int = 20000):
        self.alpha = alpha
        self.base = base if base is not None else GbmQuantile()
        self.cal_fraction = cal_fraction
        self.window = window
        self.min_group = min_group
        self.gamma = gamma
        self.max_cal = max_cal
        self.conformal_: OnlineConformal | None = None

    def fit(self, X, y, *, censored=None, groups=None):
        X, y = check_xy(X, y)
        n = X.shape[0]
        cens = np.zeros(n, bool) if censored is None else np.asarray(censored, bool)
        n_cal = min(max(int(n * self.cal_fraction), 1), self.max_cal) if n > 1 else 0
        cut = n - n_cal
        self.base.fit(X[:cut], y[:cut], censored=cens[:cut], groups=None if groups is None else groups[:cut])
        self.conformal_ = OnlineConformal(self.alpha, self.window, self.min_group, self.gamma)
        if n_cal:
            keep = ~cens[cut:]
            pred = self.base.predict(X[cut:][keep])
            g = None if groups is None else np.asarray(groups, dtype=object)[cut:][keep]
            self.conformal_.reset(g, y[cut:][keep] - pred)
        return self

    def predict_base(self, X):
        return self.base.predict(X)

    def predict(self, X, groups=None):
        X, _ = check_xy(X)
        if self.conformal_ is None:
            raise RuntimeError(f"{self.name}.predict called before fit")
        return self.base.predict(X) + self.conformal_.offsets(groups, X.shape[0])

    def observe(self, groups, residuals, errors=None):
        if self.conformal_ is None:
            return
        for i, r in enumerate(np.asarray(residuals, dtype=float)):
            g = None if groups is None else groups[i]
            e = None if errors is None else bool(errors[i])
            self.conformal_.update(g, float(r), e)


class HarpModel(ConformalQuantile):
    """harp's default: GBM quantile + per-partition conformal + ACI on the realised miss rate."""

    name = "harp"
