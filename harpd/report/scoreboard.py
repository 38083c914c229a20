"""The model scoreboard: how each predictor does on recent outcomes.

Two tables.  "Live" runs ``harpd.replay.metric.evaluate`` (the predictors' own
metric, the one ``harp replay`` ranks models by) on the harp-sized jobs of
the report window, per model that made the decision: harp's first
allocation against what the job then used, with the user's original request
as the baseline.  Models that served no job in the window have no live row;
for them (and as a fallback when ``harpd.replay.metric`` is missing) the scores
the store kept at training time are shown, labelled as such, because a
training-time holdout score can flatter a model that has since drifted.
"""

from __future__ import annotations

import math
from typing import Any, TypedDict

import numpy as np

from harpd.records import ModelRow
from harpd.report.columns import Jobs

MAX_COLUMNS = 6
LIVE_COLUMNS = ("jobs", "ran_out", "under_rate", "over_vs_request", "consumed_vs_request", "lost", "score")
# what picks the champion (harpd.training.champions.pick_champion: the lowest
# score among models within their miss budget, the under-prediction rate),
# then what an admin asks next: how much less than the users' requests
CHAMPION_KEYS = ("score", "under_rate")
PREFERRED = (*CHAMPION_KEYS, "over_vs_request", "consumed_vs_request", "changed", "lost")
# short headers so the table fits 100 columns (renderers wrap, never cut them)
LABELS = {
    "ran_out": "ran out",
    "under_rate": "under rate",
    "over_vs_request": "over/req",
    "consumed_vs_request": "used/req",
    "n_train": "trained on",
}
FORMATS = {
    "jobs": "count",
    "n_train": "count",
    "lost": "count",
    "under_rate": "percent",
    "ran_out": "percent",
    "changed": "percent",
    "over_vs_request": "ratio",
    "consumed_vs_request": "ratio",
    "score": "number",
}


# one model's row: name, resource, champion, then a number (or None) per column
ScoreRow = dict[str, str | float | bool | None]


class ScoreTable(TypedDict):
    """One scoreboard table: its rows, which columns to show, each column's format and header."""

    title: str
    columns: list[str]
    formats: dict[str, str]  # column -> count, percent, ratio or number (harpd.report.fmt.metric)
    labels: dict[str, str]  # column -> its short header
    rows: list[ScoreRow]
    note: str


class Scoreboard(TypedDict, total=False):
    """The tables (live first, then training-time scores) and what went wrong; empty in a personal report."""

    tables: list[ScoreTable]
    notes: list[str]


def _numeric(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


def from_models_table(models: list[ModelRow]) -> ScoreTable:
    """Latest saved model per (name, resource) with its stored score dict."""
    latest: dict[tuple[str, str], ModelRow] = {}
    for m in models:  # oldest first: later rows replace earlier ones
        latest[(m.name, m.resource)] = m
    rows = []
    counts: dict[str, int] = {}
    for (name, resource), m in sorted(latest.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        row: ScoreRow = {
            "name": name,
            "resource": resource,
            "champion": m.champion,
            "n_train": m.n_train,
            "trained_at": m.trained_at,
        }
        for k, v in m.score.items():
            if _numeric(v):
                row[k] = float(v)
                counts[k] = counts.get(k, 0) + 1
        rows.append(row)
    # the champion's keys first, then the preferred ones, then the most common
    ranked = sorted(
        counts.items(), key=lambda kv: (PREFERRED.index(kv[0]) if kv[0] in PREFERRED else len(PREFERRED), -kv[1], kv[0])
    )
    cols = ["n_train"] + [k for k, _ in ranked][: MAX_COLUMNS - 1]
    return {
        "title": "trained models (scores stored at training time)",
        "columns": cols,
        "formats": {c: FORMATS.get(c, "number") for c in cols},
        "labels": {c: LABELS.get(c, c.replace("_", " ")) for c in cols},
        "rows": rows,
        "note": "" if rows else "no models trained yet",
    }


def live_table(
    jobs: Jobs,
    models: np.ndarray | None,
    originals: dict[str, np.ndarray] | None,
    *,
    alpha_time: float,
    alpha_mem: float,
    max_attempts: int,
) -> ScoreTable | None:
    """``harpd.replay.metric`` rows per (model, resource) on the window's harp-sized
    first runs; None when there is nothing to score or no metrics module."""
    try:
        from harpd.replay.metric import Jobs as Judged
        from harpd.replay.metric import evaluate
    except ImportError:
        return None
    if models is None or originals is None or "harp_sized" not in jobs:
        return None
    first = jobs["harp_sized"] & (jobs["attempt"] == 1)
    if not first.any():
        return None
    out = jobs["outcome"]
    cpus = jobs["alloc_cpus"]
    cpus = np.where(np.isfinite(cpus), cpus, jobs["req_cpus"])
    cpus = np.where(np.isfinite(cpus), cpus, 1.0)
    spec = (
        ("time", jobs["req_time_s"], jobs["used_time_s"], originals["time_s"], out == "timeout", cpus, alpha_time),
        (
            "mem",
            jobs["req_mem_mb"],
            jobs["used_mem_mb"],
            originals["mem_mb"],
            out == "oom",
            np.ones(len(cpus)),
            alpha_mem,
        ),
    )
    rows: list[ScoreRow] = []
    names = sorted({str(m) for m in models[first].tolist()})
    for resource, alloc, used, request, cens, weight, alpha in spec:
        for name in names:
            sel = first & (models == name) & np.isfinite(used) & np.isfinite(alloc)
            if not sel.any():
                continue
            judged = Judged(used[sel], request[sel], cens[sel], weight[sel])
            base = evaluate("request", request[sel], judged, resource=resource, alpha=alpha, max_attempts=max_attempts)
            m = evaluate(
                name, alloc[sel], judged, resource=resource, alpha=alpha, max_attempts=max_attempts, baseline=base
            )
            d = m.to_dict()
            # live, a job that needed more than harp gave was killed at harp's
            # limit: it is censored, which the metric's under_rate leaves out
            d["ran_out"] = float(cens[sel].mean())
            row: ScoreRow = {"name": name, "resource": resource, "champion": False}
            row.update({c: d.get(c) for c in LIVE_COLUMNS})
            rows.append(row)
    if not rows:
        return None
    return {
        "title": "live: harp-sized jobs of this window (harpd.replay.metric; lower score is better)",
        "columns": list(LIVE_COLUMNS),
        "formats": {c: FORMATS.get(c, "number") for c in LIVE_COLUMNS},
        "rows": rows,
        "labels": {c: LABELS.get(c, c.replace("_", " ")) for c in LIVE_COLUMNS},
        "note": (
            "under rate: the metric's under-prediction rate (with the score, what picks a champion); "
            "ran out: share of first runs killed at harp's limit (TIMEOUT/OOM; on live outcomes these are the "
            "misses, the metric's under_rate sees only uncensored jobs); over/req and used/req: harp's "
            "over-reservation and consumption (killed attempts included) relative to the users' own requests"
        ),
    }


def build(
    store: Any,
    jobs: Jobs | None = None,
    models: np.ndarray | None = None,
    originals: dict[str, np.ndarray] | None = None,
    *,
    alpha_time: float = 0.05,
    alpha_mem: float = 0.05,
    max_attempts: int = 3,
) -> Scoreboard:
    """The scoreboard; never raises (a report without it is still a report)."""
    tables: list[ScoreTable] = []
    notes: list[str] = []
    if jobs is not None:
        try:
            live = live_table(
                jobs, models, originals, alpha_time=alpha_time, alpha_mem=alpha_mem, max_attempts=max_attempts
            )
        except Exception as exc:  # a metric bug must not sink the accounting report
            live = None
            notes.append(f"live metrics failed ({type(exc).__name__}: {exc})")
        if live is not None:
            tables.append(live)
    try:
        tables.append(from_models_table(store.models()))
    except Exception as exc:
        notes.append(f"models table unreadable ({exc})")
    return {"tables": tables, "notes": notes}
