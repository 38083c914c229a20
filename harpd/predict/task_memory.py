"""Memory of workflow task types, live: what wins the replay is what harpd runs.

A workflow task type (a Snakemake rule, a Nextflow process: a ``wf:``
signature, ``harpd.features.workflow``) is sized by its own model once one
of its runs has finished (``workflow_harp.HarpTaskModel``: usage against
input size, the multiplier priced by harp's escalation on the type's own
runs), and before that by a calibrated share of **its own request**, learnt
across the other types (``workflow_prior.TypePrior``: split conformal with
the type as the unit).  Never from another type's absolute usage: memory
does not carry from one tool to another, the share of a request does.

A failed, killed or limit-filling run's usage is only a lower bound
(``harpd.features.usage``): never learnt as a need.  A cut that turns out
too low is recovered by escalation (``harpd.recovery.escalation``: the first
retry doubles, the last attempt runs at the request), so a task that fits
its request is never lost; that is why this rule may accept failures priced
by their cost instead of keeping a walk-back floor.

Units: MiB for memory (as the store's records), seconds, bytes of input.
Not thread-safe: the live predictor holds its lock around every call.
"""

from __future__ import annotations

from harpd.features.usage import usage_of
from harpd.predict.workflow_harp import HarpTaskModel
from harpd.predict.workflow_prior import ALPHA, TypePrior
from harpd.records import JobRecord

OWN = "this workflow task's own {n} runs (usage against input size, cost-chosen margin)"
PRIOR = "no run of this task type yet: {share:.0%} of its request, the share that covered {cover:.0%} of other types"


class TaskMemory:
    """Per task type (signature) its model, one prior over the types; ``size`` is a first allocation in MiB."""

    def __init__(self, alpha: float = ALPHA) -> None:
        self.prior = TypePrior(alpha)
        self._types: dict[str, HarpTaskModel] = {}

    def learn(self, rec: JobRecord) -> bool:
        """One finished run of a task type (a ``JobRecord``); False when it says nothing of its need."""
        sig = rec.signature
        u = usage_of(rec, "mem")
        if not sig or u is None or u.censored or not (rec.used_time_s and rec.used_time_s > 0):
            return False
        model = self._types.get(sig)
        if model is None:
            model = self._types[sig] = HarpTaskModel(self.prior, sig)
        model.learn(float(rec.input_bytes or 0.0), u.used, float(rec.used_time_s), u.request, rec.end_time)
        return True

    def runs(self, sig: str | None) -> int:
        model = self._types.get(sig or "")
        return len(model.y) if model is not None else 0

    def size(self, sig: str | None, input_bytes: float | None, request_mb: float | None) -> tuple[float | None, str]:
        """(MiB for a task of ``sig``, why), or (None, why) where the request stands."""
        if not request_mb or request_mb <= 0:
            return None, "no memory request to size"
        model = self._types.get(sig or "")
        if model is not None and model.y:
            want = model.first(float(input_bytes or 0.0), float(request_mb))
            return want, OWN.format(n=len(model.y))
        share = self.prior.share
        if share is None:
            return None, (f"no run of this task type yet and {len(self.prior.shares)} other types seen: request kept")
        if share >= 1.0:
            return None, "no run of this task type yet; other types needed their whole request: kept"
        return share * float(request_mb), PRIOR.format(share=share, cover=1.0 - self.prior.alpha)
