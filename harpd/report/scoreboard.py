"""The model scoreboard: how each predictor does on recent outcomes.

Preferred source is ``harpd.metrics`` (the predictors' own metric table,
computed on recent outcomes); when that is not available the scores the store
kept at training time are shown instead, and the report says so, because a
training-time holdout score can flatter a model that has since drifted.
"""

from __future__ import annotations

import math
from typing import Any

MAX_COLUMNS = 6


def _numeric(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


def from_models_table(models: list[dict[str, Any]]) -> dict[str, Any]:
    """Latest saved model per (name, resource) with its stored score dict."""
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for m in models:  # oldest first: later rows replace earlier ones
        latest[(str(m.get("name")), str(m.get("resource")))] = m
    rows = []
    counts: dict[str, int] = {}
    for (name, resource), m in sorted(latest.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        score = m.get("score") if isinstance(m.get("score"), dict) else {}
        row: dict[str, Any] = {
            "name": name,
            "resource": resource,
            "champion": bool(m.get("champion")),
            "n_train": m.get("n_train"),
            "trained_at": m.get("trained_at"),
        }
        for k, v in score.items():
            if _numeric(v):
                row[k] = float(v)
                counts[k] = counts.get(k, 0) + 1
        rows.append(row)
    cols = ["n_train"] + [k for k, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))][: MAX_COLUMNS - 1]
    note = "scores stored at training time; harpd.metrics not available" if rows else "no models trained yet"
    return {"source": "store.models", "columns": cols, "rows": rows, "note": note}


def build(store: Any) -> dict[str, Any]:
    """The scoreboard for ``store``; never raises (a report without it is still a report)."""
    try:
        models = store.models()
    except Exception as exc:  # the scoreboard must not sink the whole report
        return {"source": "none", "columns": [], "rows": [], "note": f"models table unreadable ({exc})"}
    return from_models_table(models)
