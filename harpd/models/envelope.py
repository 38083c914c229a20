"""The record a model file loads into: the estimator and what it was fitted as."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class ModelEnvelope:
    """A fitted predictor with what it was fitted as: the record ``load_model`` returns.

    ``model`` is the estimator (``predict(X, groups=None)``), None where no
    model is trained yet (the daemon's history rule keeps an envelope all the
    same, so every resource is served through one shape).  ``relative``: it
    predicts the ratio used/requested (log), not an absolute amount.  The
    file keeps a plain dict (``harp-model/1``, ``harpd.models.persistence``)
    so that files written before this record existed still load.  Kept apart
    from persistence so that the daemon's request path can name it without
    importing scikit-learn.
    """

    model: Any
    name: str
    resource: str
    relative: bool
    features: tuple[str, ...] = ()  # the feature layout it was fitted on; empty without a model
    sklearn: str | None = None
    meta: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def trained_on(self) -> int | None:
        """How many jobs the model was refitted on (training's ``n_train``); None when not recorded."""
        n = self.meta.get("n_train")
        return None if n is None else int(n)

    @property
    def trained_at(self) -> float | None:
        """When it was trained (epoch seconds); None when not recorded."""
        t = self.meta.get("trained_at")
        return None if t is None else float(t)
