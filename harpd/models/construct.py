"""A configured predictor by name, and fitting it.

Replay, training and the daemon's retrain must build the same model for a
name, or a replay figure would describe a model the daemon never runs: here
harp's own models get harp's tuning (the base quantile of each resource, the
calibrator's budgets), every other name, site models included, the
registry's defaults.
"""

from __future__ import annotations

import numpy as np

from harpd.models import registry
from harpd.models.conformal import HarpModel
from harpd.models.gbm import GbmQuantile

#: the base model's quantile: memory traces are burstier, their tails heavier
DEFAULT_QUANTILE = {"time": 0.8, "mem": 0.95}


def make_model(
    name: str,
    *,
    resource: str,
    relative: bool,
    alpha: float,
    max_attempts: int,
    waste_budget: float,
    min_fraction: float,
    gbm: dict | None = None,
    conformal: dict | None = None,
):
    """A fresh, unfitted predictor ``name``.

    ``relative``: the trace has requests (targets are log(need / request));
    ``min_fraction``: the guard's lowest cut, so the calibrator never counts
    on a cut the guard rails would refuse; ``gbm`` / ``conformal`` override
    the base model's and the calibrator's parameters.
    """
    if name == "request":
        return registry.create("request")
    base = {"quantile": DEFAULT_QUANTILE[resource], **(gbm or {})}
    if name == "harp":
        cal = {"budget": waste_budget, "min_fraction": min_fraction, **(conformal or {})}
        return HarpModel(
            alpha=alpha,
            base=GbmQuantile(**base),
            relative=relative,
            resource=resource,
            calibrator=cal,
            max_attempts=max_attempts,
        )
    if name == "gbm":
        return GbmQuantile(**base)
    return registry.create(name)


def fit(model, X: np.ndarray, y: np.ndarray, *, censored: np.ndarray, groups: np.ndarray, sample_weight: np.ndarray):
    """``model`` fitted; a site model whose ``fit`` takes no ``sample_weight`` is fitted without it."""
    try:
        return model.fit(X, y, sample_weight=sample_weight, censored=censored, groups=groups)
    except TypeError:
        return model.fit(X, y, censored=censored, groups=groups)
