"""Training: build the data set, pick a champion on a chronological hold-out, save it.

Model selection must look like deployment: every candidate is trained on the
jobs that had finished before the hold-out starts and then meets the
hold-out's jobs in submission order, with the same guard rails and online
calibration as the daemon (it is ``harpd.replay.engine`` run over the tail).  The
champion is the candidate with the lowest harp score (docs/metrics.md); the
others stay in the store as challengers with their scores.  Finally every
candidate is refitted on all the data and saved.

Retraining runs at start when the store has history but no model, on a
schedule, after N new outcomes, and soon after new outcomes while the models
are missing or young (``harpd.training.schedule``); ``harpd.training.trainer``
calls ``retrain_all`` when one is due.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from harpd.models import registry
from harpd.models.persistence import save_model
from harpd.predict.allocation import Guard
from harpd.records import JobRecord
from harpd.replay.dataset import Prepared, ReplayError, fit_rows, prepare
from harpd.replay.engine import ReplayConfig
from harpd.replay.engine import run as replay_run
from harpd.replay.metric import ModelMetrics

log = logging.getLogger("harpd.training")

RESOURCES = ("time", "mem")  # the resources a retrain trains: the keys of ``Retrained``
DEFAULT_CANDIDATES = ("tsafrir", "alea", "gbm", "harp")
MIN_JOBS = 1000  # below this a hold-out says nothing


def candidates() -> tuple[str, ...]:
    """harp's candidates plus every site predictor registered under harp.predictors."""
    extra = tuple(sorted(n for n in registry.available() if n not in DEFAULT_CANDIDATES and n != "request"))
    return DEFAULT_CANDIDATES + extra


def replay_config(settings, resource: str, models: Iterable[str], **kw: Any) -> ReplayConfig:
    pr = settings.predict
    return ReplayConfig(
        alpha=pr.alpha_time if resource == "time" else pr.alpha_mem,
        guard=Guard.from_settings(pr, resource, settings.recovery.max_attempts),
        max_attempts=settings.recovery.max_attempts,
        models=tuple(models),
        waste_budget=pr.waste_budget,
        **kw,
    )


def evaluate_candidates(
    prep: Prepared, settings, names: Iterable[str] | None = None, holdout_fraction: float | None = None
) -> list[ModelMetrics]:
    """Metrics of each candidate (and the users' requests) on the chronological hold-out."""
    names = tuple(names or candidates())
    frac = holdout_fraction if holdout_fraction is not None else settings.retrain.holdout_fraction
    cut = int(prep.n * (1.0 - frac))
    if prep.known_at[cut] < 100:
        raise ReplayError(f"only {int(prep.known_at[cut])} jobs finished before the hold-out; need more history")
    names = tuple(n for n in names if n != "request")
    cfg = replay_config(settings, prep.resource, ("request",) + names, points=[cut], evaluate_from=cut)
    return replay_run(prep, cfg).metrics


def pick_champion(metrics: list[ModelMetrics], alpha: float) -> str | None:
    """Lowest score; a model over its miss budget only wins when all are.

    The users' own requests compete too: where no model beats them, the
    champion is "request" and harp leaves every request alone.
    """
    cands = [m for m in metrics if math.isfinite(m.score)]
    if not cands:
        return None
    within = [m for m in cands if m.under_rate <= alpha]
    return min(within or cands, key=lambda m: m.score).model


class TrainedModel(TypedDict):
    """One candidate a training saved: its file, its replay score (``Metrics.to_dict``), whether it is champion."""

    name: str
    path: str
    score: dict[str, Any]
    champion: bool


class TrainSummary(TypedDict):
    """One resource's training as the retrain answer and the logs give it (``TrainResult.to_dict``)."""

    resource: str
    n_jobs: int
    champion: str | None
    models: list[TrainedModel]
    skipped: str | None
    seconds: float
    phases: dict[str, float]


class Retrained(TypedDict, total=False):
    """What a retrain answers: each resource's training, the models the predictor loaded, and whether it joined one."""

    time: TrainSummary
    mem: TrainSummary
    loaded: dict[str, Any]  # the live predictor's reload() report
    joined: str  # set when the caller waited for a training already running


@dataclass
class TrainResult:
    resource: str
    n_jobs: int = 0
    champion: str | None = None
    models: list[TrainedModel] = field(default_factory=list)
    skipped: str | None = None
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # seconds per step, for the logs

    def to_dict(self) -> TrainSummary:
        return {
            "resource": self.resource,
            "n_jobs": self.n_jobs,
            "champion": self.champion,
            "models": self.models,
            "skipped": self.skipped,
            "seconds": round(self.seconds, 2),
            "phases": {k: round(v, 2) for k, v in self.phases.items()},
        }


def train_prepared(
    prep: Prepared, settings, models_dir: str | Path, store=None, names: Iterable[str] | None = None
) -> TrainResult:
    """Evaluate, pick, refit on everything, save (and record in ``store`` if given)."""
    t0 = time.perf_counter()
    names = tuple(names or candidates())
    if prep.has_requests and "request" not in names:
        names = ("request",) + names
    res = TrainResult(prep.resource, prep.n)
    alpha = settings.predict.alpha_time if prep.resource == "time" else settings.predict.alpha_mem
    metrics = evaluate_candidates(prep, settings, names)
    res.phases["evaluate"] = time.perf_counter() - t0
    by_name = {m.model: m for m in metrics}
    res.champion = pick_champion(metrics, alpha)
    cfg = replay_config(settings, prep.resource, names)
    all_rows = prep.finish_seq[-cfg.train_window :]
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for name in names:
        m = by_name.get(name)
        model = cfg.make_model(name, prep)
        if getattr(model, "needs_training", True):
            model = fit_rows(model, prep, all_rows)
        path = Path(models_dir) / f"{prep.resource}-{name}-{stamp}.pkl"
        save_model(
            path,
            model,
            name=name,
            resource=prep.resource,
            relative=prep.has_requests,
            meta={"n_train": int(len(all_rows)), "trained_at": time.time()},
        )
        score = m.to_dict() if m is not None else {}
        if store is not None:
            store.save_model(name, prep.resource, int(len(all_rows)), score, str(path), name == res.champion)
        res.models.append({"name": name, "path": str(path), "score": score, "champion": name == res.champion})
    res.seconds = time.perf_counter() - t0
    res.phases["refit_save"] = res.seconds - res.phases["evaluate"]
    return res


def models_dir_of(settings) -> Path:
    return Path(settings.store.models_dir or Path(settings.store.path).parent / "models")


def records_from_store(store, max_jobs: int | None = None) -> Iterable[JobRecord]:
    """Finished jobs in submission order (the most recent ``max_jobs`` when given)."""
    if max_jobs:
        n = store.count_jobs()
        if n > max_jobs:
            # the newest jobs matter most under drift; skip the oldest
            it = store.iter_jobs(order="submit_time")
            for _ in range(n - max_jobs):
                next(it, None)
            return it
    return store.iter_jobs(order="submit_time")


def train(
    store, settings, resource: str, models_dir: str | Path | None = None, max_jobs: int | None = 1_000_000
) -> TrainResult:
    """Train and save the models of one resource from the store's history."""
    t0 = time.perf_counter()
    try:
        prep = prepare(records_from_store(store, max_jobs), resource)
    except ReplayError as exc:
        return TrainResult(resource, skipped=str(exc), seconds=time.perf_counter() - t0)
    if prep.n < MIN_JOBS:
        return TrainResult(
            resource, prep.n, skipped=f"only {prep.n} usable jobs; need {MIN_JOBS}", seconds=time.perf_counter() - t0
        )
    t_prep = time.perf_counter() - t0
    res = train_prepared(prep, settings, models_dir or models_dir_of(settings), store)
    res.phases = {"read_features": t_prep, **res.phases}
    res.seconds = time.perf_counter() - t0
    log.info("trained %s on %d jobs: champion %s (%.1fs)", resource, prep.n, res.champion, res.seconds)
    return res


def retrain_all(store, settings, threads: int = 1) -> Retrained:
    """What the daemon's retrain (schedule, N outcomes, admin op) runs."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(threads):
        time_trained, mem_trained = (train(store, settings, resource).to_dict() for resource in RESOURCES)
        return {"time": time_trained, "mem": mem_trained}
