"""harpd's memory rule for a workflow task: its own type's ``HarpTaskModel``, through the guard rails.

A workflow task (a Snakemake rule, a Nextflow process: ``harpd.features.workflow``)
runs one tool on many inputs, so its memory follows its input size
(``workflow_harp``).  harpd sizes a task's memory by the model of its own
signature's finished runs, and ``harp replay``'s workflow table scores the
same rule (``workflow_replay``): ``workflow_bound`` is the one piece of code
that turns the model into a bound, and ``allocation.allocate`` the one that
applies the guard rails, for both, so the replay's harp row is the product's.

No cross-type prior: a rule harp has not seen is never sized from other
rules (issue 21); the replay keeps the prior as an information row only.

Why runs killed at their limit are skipped: their usage is a lower bound,
and the completed re-run carries the peak.  Why a window: a task type run
for years keeps a refit cheap and follows its tool's current version.

Threads: the background refresh learns into its own models and refits the
signatures it touched once per batch; the request path reads refitted
copies swapped in under the predictor's lock, so a request never refits.
Units are the caller's (MB live, bytes in the replay).
"""

from __future__ import annotations

import math

from harpd.predict.allocation import Guard, allocate
from harpd.predict.cores import WINDOW
from harpd.predict.workflow_harp import HarpTaskModel

RULE = "workflow-model"  # the rule name decisions and --harp-explain carry


def new_model() -> HarpTaskModel:
    """One task type's model as harpd keeps it: no prior, the last ``WINDOW`` runs."""
    return HarpTaskModel(None, "", WINDOW)


def workflow_bound(model: HarpTaskModel | None, input_bytes: float | None,
                   request: float | None) -> tuple[float | None, str]:
    """The model's bound as ``allocate`` reads it (log(need / request), log(need) without one), and why.

    None (the request stands) when the type has no finished, uncensored run.
    """
    req = request if request is not None and request > 0 else 0.0
    want = None if model is None else model.first(float(input_bytes or 0.0), req)
    if want is None or not want > 0:
        return None, "no finished run of this task type that was not killed at its limit: request kept"
    up = math.log(want / req) if req > 0 else math.log(want)
    return up, model.describe()


def first_allocation(model: HarpTaskModel | None, input_bytes: float | None, request: float | None,
                     n_history: int, limit: float | None, guard: Guard) -> tuple[float | None, str]:
    """harp's first allocation of a workflow task (None: the request stands), and why: the live rule."""
    if n_history < guard.min_history:  # before the model: a cold type is not fitted for nothing
        return allocate(request, math.nan, n_history, limit, guard)
    up, why = workflow_bound(model, input_bytes, request)
    if up is None:
        return None, why
    return allocate(request, up, n_history, limit, guard)


class TaskModels:
    """Per workflow signature, the model of its finished runs: learnt by the refresh, read by requests.

    ``learn`` and ``publish`` run on the refresh thread only (the predictor's
    refresh lock serialises them); ``get`` is called under the predictor's
    lock and returns a refitted copy nothing writes to.
    """

    def __init__(self) -> None:
        self._learning: dict[str, HarpTaskModel] = {}
        self._dirty: set[str] = set()
        self._ready: dict[str, HarpTaskModel] = {}

    def learn(self, sig: str, input_bytes: float | None, used_mem: float | None, used_time_s: float | None,
              request: float | None, censored: bool) -> bool:
        """Record one finished run of ``sig`` (no refit); False when it says nothing of the peak."""
        if censored or used_mem is None or not used_mem > 0:
            return False
        model = self._learning.setdefault(sig, new_model())
        model.learn(float(input_bytes or 0.0), float(used_mem), float(used_time_s or 0.0), request)
        self._dirty.add(sig)
        return True

    def refitted(self) -> dict[str, HarpTaskModel]:
        """A refitted copy of each signature learnt since the last call: one refit each, off the request path."""
        out = {sig: self._learning[sig].snapshot() for sig in self._dirty}
        self._dirty.clear()
        return out

    def publish(self, fresh: dict[str, HarpTaskModel]) -> None:
        """Swap refitted copies in (the caller holds the predictor's lock)."""
        self._ready.update(fresh)

    def get(self, sig: str | None) -> HarpTaskModel | None:
        return None if sig is None else self._ready.get(sig)

    def __len__(self) -> int:
        return len(self._ready)
