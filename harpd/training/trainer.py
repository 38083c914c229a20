"""One training at a time, its champions handed to the live predictor.

Admin ``retrain``, the daemon's start and the retrain schedule all call
``Trainer.retrain``.  A caller that finds a training running waits for it
and takes its result (it read the same store) instead of training twice in
a row on a busy daemon host.  The predictor only reloads what was saved:
it never imports the training code, so the live path stays free of it.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from harpd.config import HarpSettings
from harpd.store import Store
from harpd.training import champions
from harpd.training.champions import Retrained


class Reloads(Protocol):
    """The live predictor's side: load the champions a training saved."""

    def reload(self) -> Any: ...


class Trainer:
    """Trains on ``store`` with ``settings``, then has ``predictor`` load the new champions."""

    def __init__(self, predictor: Reloads, store: Store | None, settings: HarpSettings) -> None:
        self.predictor = predictor
        self.store = store
        self.settings = settings
        self._lock = threading.Lock()
        self._finished = 0  # trainings finished, so a waiting caller can join the one it waited for
        self._last: Retrained | None = None

    def retrain(self) -> Retrained:
        """Train every resource's candidates, save the champions, reload them; the training's summary."""
        seen = self._finished
        with self._lock:
            if self._finished != seen and self._last is not None:
                return {**self._last, "joined": "a training already running"}
            out = champions.retrain_all(self.store, self.settings)
            out["loaded"] = self.predictor.reload()
            self._last = out
            self._finished += 1
            return out
