"""Gauges read when Prometheus scrapes: the poller's lag, the store's size, the models' age and score.

They are a look at something harpd already keeps (a file's size, a row of
the models table, the time of the last good poll), so they are read at the
scrape, never kept up to date on the request path.  ``Sources`` is what
harpd.daemon.main hands over at start; before that (or in a process that is
not harpd) the families are shown without samples, so the names always exist.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from harpd.metrics.registry import REGISTRY
from harpd.records import ModelRow

log = logging.getLogger("harpd.metrics")

__all__ = ["Sources", "install", "polled", "STATE_NAMES"]

#: the models harpd trains (harpd.training): one series each
MODEL_RESOURCES = ("time", "mem", "cpus")
#: a scrape reads the models table at most this often (they change at a retrain; a scraper polling every
#: second must not query the store every second)
MODELS_CACHE_S = 300.0

POLL_LAG = "harp_poller_lag_seconds"
STORE_SIZE = "harp_store_size_bytes"
MODEL_AGE = "harp_model_age_seconds"
MODEL_SCORE = "harp_model_heldout_score"
MODEL_UNDER = "harp_model_heldout_under_rate"
STATE_NAMES = (POLL_LAG, STORE_SIZE, MODEL_AGE, MODEL_SCORE, MODEL_UNDER)


@dataclass
class Sources:
    """Where the scrape-time gauges come from (set by harpd.daemon.main once the store is open)."""

    store_path: str | None = None
    #: the champion of a resource (Store.champion), or None before any training
    champion: Callable[[str], ModelRow | None] | None = None
    #: whether the poller runs (no Slurm: no lag to show)
    polling: bool = False


def install(sources: Sources) -> None:
    """harpd's store and models, for the gauges (replaces what an earlier call set)."""
    COLLECTOR.install(sources)


def polled(now: float | None = None) -> None:
    """A sacct poll succeeded: the lag starts again from here."""
    COLLECTOR.last_poll = time.time() if now is None else now


def _store_bytes(path: str) -> float | None:
    """The database and its write-ahead log: what the store takes on disk."""
    total, seen = 0, False
    for name in (path, path + "-wal"):
        try:
            total += os.stat(name).st_size
            seen = True
        except OSError:
            continue
    return float(total) if seen else None


def _score(row: ModelRow, key: str) -> float | None:
    value = row.score.get(key) if row.score else None
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


class StateCollector(Collector):
    """Yields the scrape-time gauges; always every family, with samples where there is something to show."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sources = Sources()
        self.started = time.time()
        self.last_poll: float | None = None  # wall time of the last sacct poll that succeeded
        self._models: tuple[float, list[tuple[str, ModelRow]]] = (-math.inf, [])

    def install(self, sources: Sources) -> None:
        with self._lock:
            self.sources = sources
            self._models = (-math.inf, [])

    def _champions(self, now: float) -> list[tuple[str, ModelRow]]:
        """The champions per resource, read at most every MODELS_CACHE_S."""
        with self._lock:
            at, rows = self._models
            source = self.sources.champion
            if source is None or now - at < MODELS_CACHE_S:
                return rows
            fresh: list[tuple[str, ModelRow]] = []
            try:
                for res in MODEL_RESOURCES:
                    row = source(res)
                    if row is not None:
                        fresh.append((res, row))
            except Exception as exc:  # noqa: BLE001 - a scrape shows what it can; health names the store's problem
                log.debug("metrics: models not read (%s)", exc)
                return rows
            self._models = (now, fresh)
            return fresh

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = time.time()
        src = self.sources
        lag = GaugeMetricFamily(POLL_LAG, "Seconds since the sacct poller last polled successfully (its lag)")
        if src.polling:
            lag.add_metric([], now - (self.last_poll if self.last_poll is not None else self.started))
        size = GaugeMetricFamily(STORE_SIZE, "Size of harp's SQLite store on disk, write-ahead log included")
        if src.store_path is not None and (n := _store_bytes(src.store_path)) is not None:
            size.add_metric([], n)
        age = GaugeMetricFamily(MODEL_AGE, "Seconds since the champion model was trained", labels=["resource"])
        score = GaugeMetricFamily(
            MODEL_SCORE, "The champion's harp score on held-out jobs (lower is better)", labels=["resource"]
        )
        under = GaugeMetricFamily(
            MODEL_UNDER, "Share of held-out jobs the champion's bound was too low for", labels=["resource"]
        )
        for res, row in self._champions(now):
            age.add_metric([res], max(0.0, now - float(row.trained_at)))
            for family, key in ((score, "score"), (under, "under_rate")):
                if (v := _score(row, key)) is not None:
                    family.add_metric([res], v)
        yield from (lag, size, age, score, under)

    def describe(self) -> Sequence[GaugeMetricFamily]:
        return list(self.collect())


COLLECTOR = StateCollector()
REGISTRY.register(COLLECTOR)
