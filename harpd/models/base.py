"""The interface every harp predictor implements, scikit-learn style.

Every model answers the same question in the same space: the log of an
*upper bound* of a job's need relative to its reference (the user's request
when there is one, else 1 unit, i.e. an absolute amount).  Working relative
to the request lets one model serve jobs of every size, makes "leave the
request alone" simply "predict ≥ 0", and lets the guard rails in
``harpd.predict.allocation`` treat every model alike.  ``NaN`` means "no prediction".

Training targets ``y`` are on the same scale; ``censored`` marks rows whose
``y`` is only a lower bound (TIMEOUT/OOM); ``sample_weight`` is each row's size (request × cores,
the weight the cost metric gives it).  Rows reach ``fit`` in time order
(oldest first) so models that hold out a calibration tail hold out the most
recent jobs, as a chronological split must.

A site adds its own model by exposing a class with this interface under the
``harp.predictors`` entry-point group (see ``harpd.models.registry``).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Predictor(Protocol):
    name: str
    #: False for models that only read history columns (no training needed)
    needs_training: bool

    def fit(
        self,
        X: np.ndarray,
        y: np.ndarray,
        *,
        censored: np.ndarray | None = None,
        groups: np.ndarray | None = None,
        sample_weight: np.ndarray | None = None,
    ) -> Predictor: ...

    def predict(self, X: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray: ...


class BasePredictor:
    """Convenience base: parameter introspection like scikit-learn's."""

    name = "base"
    needs_training = True

    def get_params(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not k.endswith("_") and not k.startswith("_")}

    def __repr__(self) -> str:
        ps = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items() if not hasattr(v, "fit"))
        return f"{type(self).__name__}({ps})"


def check_xy(X: np.ndarray, y: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    X = np.asarray(X, dtype=np.float32)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D, got shape {X.shape}")
    if y is not None:
        y = np.asarray(y, dtype=np.float64)
        if y.shape != (X.shape[0],):
            raise ValueError(f"y has shape {y.shape}, expected ({X.shape[0]},)")
        if not np.all(np.isfinite(y)):
            raise ValueError("y contains NaN or infinite values")
    return X, y


def float32_row(x: Sequence[float]) -> list[float]:
    """One feature row rounded to float32 as ``check_xy`` rounds it, as Python floats (no numpy)."""
    return array("f", x).tolist()


def predict_row(model: Any, row: Sequence[float], group: str | None) -> float:
    """One job's prediction: the model's own one-row path when it has one, else ``predict`` on a 1-row matrix.

    ``row`` comes from ``float32_row``.  A model from the ``harp.predictors``
    entry points needs only ``predict``; harp's own models also answer one
    row in plain Python (``predict_row``), which the live path prefers.
    """
    one = getattr(model, "predict_row", None)
    if one is not None:
        return float(one(row, group))
    groups = None if group is None else np.array([group], dtype=object)
    return float(model.predict(np.asarray([row], dtype=np.float32), groups=groups)[0])
