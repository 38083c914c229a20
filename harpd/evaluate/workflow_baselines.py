"""The memory baselines Sizey is compared with, re-written for harp's replay.

Witt et al. (feedback-based percentile and linear regression with an offset)
and Tovar et al. (first allocation minimising expected waste, then the
maximum seen).  Each is one object per task type (process), sized from that
type's history only, and follows its own retry rule after a failure, as in
the paper's published code (github.com/dos-group/sizey): the percentile and
the regression double the failed allocation (a regression below zero starts
again from the largest usage seen), Tovar goes to the largest usage seen and
then to a whole node (128 GB).  Units: bytes, seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

NODE_BYTES = 128e9  # Tovar's last resort in the paper's code: a whole 128 GB node


class Baseline(Protocol):
    """What the replay asks of a baseline: its history (``fit``, ``learn``), a first allocation, a retry."""

    def fit(self, x: np.ndarray, y: np.ndarray, t: np.ndarray) -> None: ...

    def learn(self, x: float, y: float, t: float) -> None: ...

    def first(self, x: float, request: float) -> float | None: ...

    def retry(self, alloc: float) -> float: ...


class _History:
    """A task type's finished runs: input size, usage, runtime."""

    def __init__(self) -> None:
        self.x: list[float] = []
        self.y: list[float] = []
        self.t: list[float] = []

    def fit(self, x: np.ndarray, y: np.ndarray, t: np.ndarray) -> None:
        self.x, self.y, self.t = list(map(float, x)), list(map(float, y)), list(map(float, t))
        self._refit()

    def learn(self, x: float, y: float, t: float) -> None:
        self.x.append(float(x))
        self.y.append(float(y))
        self.t.append(float(t))
        self._refit()

    def _refit(self) -> None:
        """Recompute what ``first`` needs, once per new run (predictions stay look-ups)."""


class WittPercentile(_History):
    """95th percentile of the usage seen; a failure doubles."""

    name = "witt-percentile"

    def first(self, x: float, request: float) -> float | None:
        return float(np.percentile(self.y, 95)) if self.y else None

    def retry(self, alloc: float) -> float:
        return 2.0 * alloc


class WittRegression(_History):
    """Least squares of usage on input size, raised by an offset from the relative errors seen.

    ``under_only``: the offset is the standard deviation of the under-predictions'
    relative errors only (Witt's "std of under-predictions"), else of all of them.
    The errors are this task type's own (the paper's code pools them across types
    through a class attribute; harp does not copy that).
    """

    def __init__(self, under_only: bool = False) -> None:
        super().__init__()
        self.under_only = under_only
        self.name = "witt-lr-under" if under_only else "witt-lr"
        self.errors: list[float] = []
        self._coef = (0.0, 0.0)

    def _refit(self) -> None:
        x, y = np.asarray(self.x), np.asarray(self.y)
        if len(x) >= 2 and np.ptp(x) > 0:
            b, a = np.polyfit(x, y, 1)
            self._coef = (float(a), float(b))
        elif len(y):
            self._coef = (float(np.mean(y)), 0.0)

    def raw(self, x: float) -> float:
        return self._coef[0] + self._coef[1] * float(x)

    def first(self, x: float, request: float) -> float | None:
        if not self.y:
            return None
        p = self.raw(x)
        errs = [e for e in self.errors if e > 0] if self.under_only else self.errors
        off = float(np.std(errs)) if errs else 0.0
        return p + off * p

    def retry(self, alloc: float) -> float:
        return max(self.y) if alloc <= 0 else 2.0 * alloc

    def learn(self, x: float, y: float, t: float) -> None:
        if self.y and y > 0:
            self.errors.append((y - self.raw(x)) / y)
        super().learn(x, y, t)


class Tovar(_History):
    """First allocation among the usages seen that minimises the expected waste, then the maximum seen."""

    name = "tovar"

    def __init__(self) -> None:
        super().__init__()
        self._first: float | None = None

    def _refit(self) -> None:
        if not self.y:
            return
        y, t = np.asarray(self.y), np.asarray(self.t)
        top = float(y.max())
        cand = np.unique(y)
        if len(cand) > 256:
            cand = np.unique(np.quantile(y, np.linspace(0, 1, 257)))
        fits = y[None, :] <= cand[:, None]
        waste = np.where(fits, cand[:, None] - y[None, :], cand[:, None] + top - y[None, :]) * t[None, :]
        self._first = float(cand[int(np.argmin(waste.sum(axis=1)))])

    def first(self, x: float, request: float) -> float | None:
        return self._first

    def retry(self, alloc: float) -> float:
        top = max(self.y)
        return top if alloc < top else max(NODE_BYTES, 2.0 * alloc)


BASELINES: dict[str, Callable[[], Baseline]] = {
    "witt-percentile": WittPercentile,
    "witt-lr": WittRegression,
    "witt-lr-under": lambda: WittRegression(under_only=True),
    "tovar": Tovar,
}
