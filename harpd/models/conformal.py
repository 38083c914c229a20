"""One-sided split-conformal calibration, per group, with adaptive (ACI) levels.

A quantile model's nominal τ is not a guarantee: trees overfit, users change
habits.  Split conformal (Romano et al. 2019) fixes the miss rate on
exchangeable data: with residuals s_i = y_i − q̂(x_i) of jobs the model did
not train on, adding the k-th smallest, k = ⌈(n+1)(1−α)⌉, gives
P(y ≤ q̂ + s_(k)) ≥ 1−α.  One-sided because only under-prediction kills jobs.

Groups are Mondrian: predicted-size bin | burst bin | partition, each
falling back to its coarser parent ("b1|p0|*", "b1|*|*", all jobs) until it
has ``min_group`` residuals.  Partitions differ in how predictable they are;
a model is most over-confident where it predicts a deep cut; jobs submitted
in a burst share one error.  One pooled offset would over-pad the easy jobs
to cover the hard ones and still miss the hard ones.

Real traces drift, which breaks exchangeability; adaptive conformal inference
(Gibbs & Candès 2021) keeps the *realised* miss rate on target anyway by
moving each group's level after every finished job: α ← α + γ(α* − err).
The residual windows slide too, so old behaviour ages out.
``Calibrator.feedback`` is how finished jobs feed back (replay calls it as
jobs end); every retrain re-seeds everything from a fresh hold-out, which is
how the daemon adapts between its scheduled retrains.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NotRequired, TypedDict

import numpy as np

from harpd.features.history import COL
from harpd.models.base import BasePredictor, Predictor, check_xy, predict_row
from harpd.models.cost import DISRUPTION, extra_consumption, extra_consumption_many
from harpd.models.gbm import GbmQuantile

_ALL = "\x00all"
#: conformal levels and leave-alone ratios the fit-time calibration tries
LEVELS = (0.01, 0.02, 0.03, 0.045, 0.07, 0.1, 0.15, 0.2, 0.25)
THETAS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def _is_burst(key: str) -> bool:
    return "p2" in key.split("|") or "p3" in key.split("|")


def bound_bucket(base: float, relative: bool = True) -> str:
    """Mondrian bin of the base prediction.

    harp acts on the jobs whose bound is low, and a model is most
    over-confident exactly there (the winner's curse of selecting on it);
    calibrating each bin on its own makes the coverage hold *given* the
    predicted size, which is the coverage the decision relies on.
    """
    if math.isnan(base):
        return "b?"
    if relative:
        r = math.exp(min(base, 5.0))
        return "b0" if r < 0.05 else "b1" if r < 0.15 else "b2" if r < 0.35 else "b3" if r < 0.7 else "b4"
    return f"a{min(max(int(base), 0), 15)}"  # e-folds of the absolute amount


class OnlineConformal:
    """Per-group sliding residual windows and ACI miss-rate levels."""

    def __init__(
        self,
        alpha: float = 0.05,
        window: int = 3000,
        min_group: int = 300,
        gamma: float = 0.005,
        alpha_max: float = 0.5,
    ):
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {alpha}")
        self.alpha = alpha
        self.window = window
        self.min_group = min_group
        self.gamma = gamma
        self.alpha_max = alpha_max
        self.alpha_start = alpha  # the level a group starts at (fit-time calibration may raise it)
        self.res: dict[str, deque[float]] = {}
        self.level: dict[str, float] = {}
        self._cache: dict[str, float] = {}

    def reset(self, groups: np.ndarray | None, residuals: np.ndarray) -> None:
        self.res, self.level, self._cache = {}, {}, {}
        residuals = np.asarray(residuals, dtype=float)
        g = np.full(len(residuals), _ALL, dtype=object) if groups is None else np.asarray(groups, dtype=object)
        for gi, r in zip(g, residuals):
            self._push(str(gi), float(r))

    @staticmethod
    def _chain(g: str) -> tuple[str, ...]:
        """The group and its coarser parents: "a|b|c" → "a|b|*" → "a|*|*" → all jobs."""
        if g == _ALL:
            return (_ALL,)
        parts = g.split("|")
        out = [g]
        for k in range(len(parts) - 1, 0, -1):
            out.append("|".join(parts[:k] + ["*"] * (len(parts) - k)))
        out.append(_ALL)
        return tuple(out)

    def _push(self, g: str, r: float) -> None:
        for key in self._chain(g):
            d = self.res.get(key)
            if d is None:
                d = self.res[key] = deque(maxlen=self.window)
            d.append(r)
            self._cache.pop(key, None)

    def _key(self, g: str) -> str:
        for key in self._chain(g):
            d = self.res.get(key)
            if d is not None and len(d) >= self.min_group:
                return key
        return _ALL

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
        a = self.level.get(key, self.alpha_start)
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

    def push(self, group: str | None, residual: float) -> None:
        """Add a residual without moving the ACI level (no decision was made)."""
        if math.isfinite(residual):
            self._push(_ALL if group is None else str(group), residual)

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
                a = self.level.get(k, self.alpha_start) + self.gamma * (self.alpha - float(err))
                # bursts get no head room: their errors arrive together, too late to correct
                top = max(self.alpha_start, self.alpha) if _is_burst(k) else self.alpha_max
                self.level[k] = min(max(a, 0.0), top)
                self._cache.pop(k, None)


@dataclass(frozen=True, slots=True)
class CalibratorTuning:
    """The calibrator's knobs (the site's ``conformal`` settings override them; ``Calibrator`` says what each does).

    ``window``, ``min_group``, ``gamma``, ``alpha_max``: the online conformal
    offsets' (``OnlineConformal``); ``min_fraction``: the guard's lowest cut
    (share of the request); ``soft``: a miss is an extension, not a killed run.
    """

    aim: float = 0.8
    budget: float = 0.04
    window: int = 3000
    min_group: int = 300
    gamma: float = 0.005
    eta: float = 0.02
    theta_max: float = 0.9
    theta_min: float = 0.05
    alpha_max: float = 0.15
    min_fraction: float = 0.0
    soft: bool = False


class Calibrator:
    """Turns a quantile model's raw bound into an allocation harp can stand behind.

    Two budgets, two controls, both set on the most recent jobs at fit time
    (split-conformal risk control) and both moved online as jobs finish:

    * the miss rate: per-group conformal offsets at level ``α_g``; ACI moves
      ``α_g`` so the *realised* share of fitting jobs that run out stays at
      ``aim × alpha`` (requests left alone cannot run out, so the level on the
      jobs harp does shrink may exceed alpha);
    * the extra consumption of killed attempts: the leave-alone ratio ``θ``
      (shrink only when the bound is below θ × request).  A small cut saves
      little and risks a whole attempt; the controller lowers θ after each
      costly kill and raises it slowly while the budget (``budget`` × what
      the users' requests consume) is unspent.
    """

    def __init__(
        self,
        alpha: float = 0.05,
        tuning: CalibratorTuning | None = None,
        relative: bool = True,
        resource: str = "time",
        max_attempts: int = 3,
    ):
        t = tuning or CalibratorTuning()
        self.alpha = alpha
        # soft limits: a miss is an extension, not a killed run, so
        # the level is the extension target itself and θ has no kills to steer on
        self.soft = t.soft
        self.aim = t.aim
        self.budget = t.budget
        self.gamma = t.gamma
        self.eta = t.eta
        self.theta_max = t.theta_max
        self.theta_min = t.theta_min
        self.relative = relative
        self.resource = resource
        self.max_attempts = max_attempts
        self.min_fraction = t.min_fraction  # the guard's lowest cut (share of the request)
        self.conf = OnlineConformal(alpha * t.aim, t.window, t.min_group, t.gamma, t.alpha_max)
        self.theta = t.theta_max
        self.size_ema: float | None = None

    # -- fit time ---------------------------------------------------------------
    def seed(
        self,
        groups: np.ndarray | None,
        base: np.ndarray,
        y: np.ndarray,
        censored: np.ndarray,
        size: np.ndarray,
        floor: np.ndarray | None = None,
    ) -> Calibration:
        """Calibrate on a recent hold-out: residual windows, starting α and θ.

        ``base`` are the base model's predictions on hold-out rows it did not
        train on; ``size`` is each row's reference × weight (e.g. requested
        core-seconds), so costs are weighed as the metric weighs them.
        """
        base = np.asarray(base, float)
        y = np.asarray(y, float)
        cens = np.asarray(censored, bool)
        size = np.asarray(size, float)
        g = self.keys(base, groups)
        res = y - base
        self.conf.reset(g[~cens], res[~cens])
        self.size_ema = float(np.mean(size * np.minimum(np.exp(y), 1.0))) if len(y) else None
        target = self.alpha * self.aim
        if self.soft or not self.relative or len(y) < 50 or (~cens).sum() < 30:
            self._set_level(target)
            return {"level": target, "theta": self.theta}
        need = np.exp(y)
        used = np.where(cens, 1.0, np.minimum(need, 1.0))
        tot_used = float(np.sum(size * used))
        n_fit = int((~cens).sum())
        # maximise the score's gain (over-reservation saved − killed attempts −
        # disruption) subject to both budgets, over levels and leave-alone ratios
        best = (0.0, target, self.theta_min, 0.0)
        for level in LEVELS:
            self._set_level(level)
            u = np.maximum(np.exp(base + self.conf.offsets(g, len(y))), self.min_fraction)
            if floor is not None:
                u = np.maximum(u, np.exp(np.minimum(floor, 5.0)))
            for theta in THETAS:
                if theta > self.theta_max:
                    continue
                shrink = u < theta
                miss = shrink & ~cens & (u < need)
                n_miss = int(miss.sum())
                if n_miss > target * n_fit:
                    continue
                bad = shrink & (cens | (u < need))
                final = np.where(shrink & ~bad, u, 1.0)
                extra = float(
                    np.sum(
                        size[bad]
                        * extra_consumption_many(u[bad], need[bad], 1.0, cens[bad], self.resource, self.max_attempts)
                    )
                )
                if extra > self.budget * tot_used:
                    continue
                saved = float(np.sum((size * (1.0 - final))[~cens]))
                gain = saved - extra - DISRUPTION * (n_miss / n_fit) * tot_used
                if gain > best[0]:
                    best = (gain, level, theta, n_miss / n_fit)
        _, level, theta, miss_rate = best
        self._set_level(level)
        self.theta = theta
        # ACI then holds the miss rate the budgets allowed (never above aim × alpha)
        self.conf.alpha = min(target, max(miss_rate, self.alpha / 10.0))
        return {"level": level, "theta": theta, "miss_target": round(self.conf.alpha, 4)}

    def _set_level(self, level: float) -> None:
        self.conf.level = {k: level for k in self.conf.res}
        self.conf.alpha_start = level
        self.conf._cache.clear()

    # -- prediction time ----------------------------------------------------------
    def key(self, base: float, group) -> str:
        return f"{bound_bucket(base, self.relative)}|{group if group is not None else '?'}"

    def keys(self, base: np.ndarray, groups) -> np.ndarray:
        if groups is None:
            return np.array([self.key(b, None) for b in base], dtype=object)
        return np.array([self.key(b, g) for b, g in zip(base, groups)], dtype=object)

    def offset(self, group, base: float) -> float:
        return self.conf.offset(self.key(base, group))

    def bound(self, group, base: float) -> float:
        """The calibrated upper bound (log scale) of a job with base prediction ``base``."""
        return base + self.offset(group, base)

    # -- as jobs finish -----------------------------------------------------------
    def feedback(
        self,
        group,
        base: float,
        y: float | None,
        first: float,
        need: float,
        request: float | None,
        censored: bool,
        weight: float = 1.0,
    ) -> None:
        """One finished job: ``base`` was its base prediction, ``y`` its target
        (None when censored), ``first`` harp's allocation (the request if left alone)."""
        key = self.key(base, group)
        if not censored and y is not None and math.isfinite(y):
            residual = y - base
            if self.relative or math.isfinite(first):
                self.conf.update(key, residual, first < need)
            else:  # no request and no prediction: nothing harp could have missed
                self.conf.push(key, residual)
        if self.soft or not self.relative or request is None or not request > 0:
            return
        used = weight * (request if censored else min(need, request))
        extra = weight * extra_consumption(first, need, request, censored, self.resource, self.max_attempts)
        ema = self.size_ema or used or 1.0
        self.size_ema = 0.999 * ema + 0.001 * used
        step = self.eta * (self.budget * used - extra) / max(self.size_ema, 1e-9)
        step = min(max(step, -0.2), 0.2)
        self.theta = min(max(self.theta * math.exp(step), self.theta_min), self.theta_max)


class Calibration(TypedDict):
    """What ``HarpModel.seed`` chose: the conformal level, the leave-alone ratio and (when searched) the miss target."""

    level: float
    theta: float
    miss_target: NotRequired[float]


class HarpModel(BasePredictor):
    """harp's default: GBM quantile on log(used/request) + ``Calibrator``.

    ``fit`` trains the base on the older rows and calibrates on the most
    recent ``cal_fraction`` (chronological split).  ``predict`` returns the
    calibrated bound (base + the group's conformal offset); ``theta`` is the
    leave-alone ratio the guard rails should apply with it.
    """

    name = "harp"
    needs_training = True

    def __init__(
        self,
        alpha: float = 0.05,
        base: Predictor | None = None,
        cal_fraction: float = 0.25,
        max_cal: int = 20000,
        relative: bool = True,
        resource: str = "time",
        calibrator: dict | None = None,
        max_attempts: int = 3,
        history_floor: str = "q90",
    ):
        self.alpha = alpha
        self.base: Predictor = base if base is not None else GbmQuantile()
        self.cal_fraction = cal_fraction
        self.max_cal = max_cal
        self.relative = relative
        self.resource = resource
        self.calibrator = dict(calibrator or {})
        self.max_attempts = max_attempts
        self.history_floor = history_floor
        self.cal_: Calibrator | None = None
        self.seeded_: Calibration | None = None  # what seed() chose (None: fitted without a hold-out)

    def fit(self, X, y, *, censored=None, groups=None, sample_weight=None):
        X, y = check_xy(X, y)
        n = X.shape[0]
        cens = np.zeros(n, bool) if censored is None else np.asarray(censored, bool)
        size = np.ones(n) if sample_weight is None else np.asarray(sample_weight, float)
        n_cal = min(max(int(n * self.cal_fraction), 1), self.max_cal) if n > 1 else 0
        cut = n - n_cal
        g = None if groups is None else np.asarray(groups, dtype=object)
        self.base.fit(
            X[:cut], y[:cut], censored=cens[:cut], groups=None if g is None else g[:cut], sample_weight=size[:cut]
        )
        self.cal_ = Calibrator(
            self.alpha,
            CalibratorTuning(**self.calibrator),
            relative=self.relative,
            resource=self.resource,
            max_attempts=self.max_attempts,
        )
        if n_cal:
            self.seeded_ = self.cal_.seed(
                None if g is None else g[cut:],
                self.base.predict(X[cut:]),
                y[cut:],
                cens[cut:],
                size[cut:],
                floor=self.floor_of(X[cut:]),
            )
        return self

    @property
    def theta(self) -> float:
        return self.cal_.theta if self.cal_ is not None else 1.0

    def floor_of(self, X) -> np.ndarray:
        """The history veto: never below what this template recently used.

        A template (same user and request, or same user and program) whose
        recent runs reached 90% of a request will reach it again: a pooled
        quantile model may still put it low when most of its pool is short
        (bimodal templates: quick failures and full runs).  The floor is the
        90th percentile of the template's last runs (its maximum while it has
        fewer than ten), relative to this job's request; -inf without history.
        """
        X = np.asarray(X, dtype=np.float32)
        if self.history_floor == "none":
            return np.full(X.shape[0], -np.inf)
        out = np.full(X.shape[0], -np.inf)
        for g in ("r", "s"):
            n = np.expm1(np.nan_to_num(X[:, COL[f"{g}_n"]], nan=0.0))
            q = X[:, COL[f"{g}_q90" if self.history_floor == "q90" else f"{g}_max"]].astype(float)
            mx = X[:, COL[f"{g}_max"]].astype(float)
            v = np.where(n >= 10, q, mx)
            out = np.fmax(out, np.where(np.isfinite(v), v, -np.inf))
        return out

    def _floor_row(self, row: Sequence[float]) -> float:
        """``floor_of`` for one float32-rounded row, in plain Python (see ``predict_row``)."""
        if self.history_floor == "none":
            return -math.inf
        out = -math.inf
        for g in ("r", "s"):
            n = row[COL[f"{g}_n"]]
            n = 0.0 if math.isnan(n) else math.expm1(n)
            v = row[COL[f"{g}_q90" if self.history_floor == "q90" else f"{g}_max"]] if n >= 10 else row[COL[f"{g}_max"]]
            if math.isfinite(v) and v > out:
                out = v
        return out

    def predict_row(self, row: Sequence[float], group: str | None) -> float:
        """``predict`` for one job, in plain Python: the live path's answer to one sbatch.

        ``row``: the job's features rounded to float32, as ``check_xy``
        rounds them (``harpd.models.base.float32_row``).  The same number as
        ``predict([row], groups=[group])[0]``, at a fraction of the cost
        once the CPU has gone cold between requests (tests/unit/models).
        """
        if self.cal_ is None:
            raise RuntimeError("harp.predict called before fit")
        base = predict_row(self.base, row, None)
        up = base + self.cal_.offset(group, base)
        floor = self._floor_row(row)
        return up if math.isnan(up) or up >= floor else floor

    def predict_base(self, X):
        return self.base.predict(X)

    def predict(self, X, groups=None):
        X, _ = check_xy(X)
        if self.cal_ is None:
            raise RuntimeError("harp.predict called before fit")
        base = self.base.predict(X)
        up = base + self.cal_.conf.offsets(self.cal_.keys(base, groups), X.shape[0])
        return np.maximum(up, self.floor_of(X))
