"""Saving and loading fitted predictors.

A pickle alone would load a model trained on a different feature layout and
predict nonsense; the envelope records the feature names, the versions and
what the model predicts, and ``load_model`` refuses a mismatch with a line
that says to retrain.  Files are written atomically (temp + rename) because
the daemon may reload while training writes.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path
from types import MappingProxyType
from typing import Any

import sklearn

from harpd.features.history import FEATURE_NAMES
from harpd.models.envelope import ModelEnvelope

FORMAT = "harp-model/1"


class ModelFileError(Exception):
    """A model file that cannot be used; the message says what to do."""


def save_model(
    path: str | os.PathLike[str],
    model: Any,
    *,
    name: str,
    resource: str,
    relative: bool,
    meta: dict[str, Any] | None = None,
) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    env = {
        "format": FORMAT,
        "sklearn": sklearn.__version__,
        "features": list(FEATURE_NAMES),
        "name": name,
        "resource": resource,
        "relative": relative,
        "meta": dict(meta or {}),
        "model": model,
    }
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(env, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return p


def load_model(path: str | os.PathLike[str]) -> ModelEnvelope:
    """The file's envelope, refused with a line that says to retrain when it cannot serve this harp."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            env = pickle.load(fh)
    except FileNotFoundError:
        raise ModelFileError(f"{p}: model file missing; run `harp retrain`") from None
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, ValueError) as exc:
        raise ModelFileError(f"{p}: not a readable harp model ({exc}); run `harp retrain`") from None
    if not isinstance(env, dict) or env.get("format") != FORMAT:
        raise ModelFileError(f"{p}: not a {FORMAT} file; run `harp retrain`")
    if env.get("features") != list(FEATURE_NAMES):
        raise ModelFileError(f"{p}: trained on another feature layout (older harp); run `harp retrain`")
    return ModelEnvelope(
        model=env["model"],
        name=env["name"],
        resource=env["resource"],
        relative=bool(env["relative"]),
        features=tuple(env["features"]),
        sklearn=env.get("sklearn"),
        meta=MappingProxyType(dict(env.get("meta") or {})),
    )
