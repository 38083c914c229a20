"""Which predictors exist: harp's own plus any a site installs.

Predictors are found through the ``harp.predictors`` entry-point group, so a
site adds a model by shipping a package with, in its pyproject::

    [project.entry-points."harp.predictors"]
    mymodel = "mysite.models:MyPredictor"

The class must implement ``harpd.models.base.Predictor`` (fit/predict on the
feature matrix).  harp's built-ins are listed in harp's own pyproject; the
table below is the same list, used when the package metadata is missing
(running from a source tree without ``pip install``).
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

GROUP = "harp.predictors"

BUILTIN: dict[str, str] = {
    "request": "harpd.models.baselines:UserRequest",
    "tsafrir": "harpd.models.baselines:Tsafrir",
    "alea": "harpd.models.baselines:Alea",
    "gbm": "harpd.models.gbm:GbmQuantile",
    "harp": "harpd.models.conformal:HarpModel",
}


class UnknownPredictor(LookupError):
    """A predictor name that is neither built in nor registered."""


def available() -> dict[str, str]:
    """name → "module:Class" for every predictor, entry points over built-ins."""
    out = dict(BUILTIN)
    for ep in entry_points(group=GROUP):
        out[ep.name] = ep.value
    return out


def load_class(name: str) -> type:
    """The predictor class registered as ``name``; UnknownPredictor names the choices."""
    target = available().get(name)
    if target is None:
        raise UnknownPredictor(f"unknown predictor {name!r}; available: {', '.join(sorted(available()))}")
    mod, _, attr = target.partition(":")
    try:
        obj = importlib.import_module(mod)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise UnknownPredictor(f"predictor {name!r} ({target}) cannot be loaded: {exc}") from None
    return obj  # type: ignore[return-value]


def create(name: str, **params) -> object:
    """A fresh, unfitted instance of predictor ``name``."""
    return load_class(name)(**params)
