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

A run that ran out of memory at X says the type now needs more than X, at
once: where the model would give a task of the type no more than the largest
such X, it gets the escalation of X (``harpd.recovery.escalation``: what the
failed task's own retry gets, ``min(2X, request)``), at most ``RAISE`` x X,
until a later run of the type completes in less than X (X was that run's
own excess, not the type's) or ``RAN_OUT_RUNS`` more runs are learnt.  The model follows grown runs by its
recency weights (``workflow_harp.HALF_LIFE``); the floor covers the runs in
between, which would otherwise fail at the old size one by one.

Units: MiB for memory (as the store's records), seconds, bytes of input.
Not thread-safe: the live predictor holds its lock around every call.
"""

from __future__ import annotations

from collections import deque

from harpd.features.history import KEEP
from harpd.features.usage import says_nothing, usage_of
from harpd.predict.workflow_harp import HarpTaskModel
from harpd.predict.workflow_prior import ALPHA, TypePrior
from harpd.records import JobRecord, Outcome
from harpd.recovery.escalation import next_allocation

#: after a run ran out at X, a task its type's model sizes at X or less gets the escalation of X, at most
#: RAISE x X (the escalation doubles: where memory follows the input, 2X of a large input's failure given
#: to the small ones cost more than the failures it saved: nf-core chipseq's BWA_MEM, Sizey seed 2), until
#: a later run completes in less than X or RAN_OUT_RUNS more runs are learnt (the history rule keeps a
#: request as long for a run that hit its limit: ``harpd.features.history.KEEP``)
RAISE = 1.5
RAN_OUT_RUNS = KEEP
OWN = "this workflow task's own {n} runs (usage against input size, cost-chosen margin)"
PRIOR = "no run of this task type yet: {share:.0%} of its request, the share that covered {cover:.0%} of other types"


class TaskMemory:
    """Per task type (signature) its model, one prior over the types; ``size`` is a first allocation in MiB."""

    def __init__(self, alpha: float = ALPHA) -> None:
        self.prior = TypePrior(alpha)
        self._types: dict[str, HarpTaskModel] = {}
        self._seen: dict[str, int] = {}  # per type, runs learnt (samples and failures)
        self._ran_out: dict[str, deque[tuple[int, float]]] = {}  # per type, (run number, MiB it ran out at)

    def learn(self, rec: JobRecord) -> bool:
        """One finished run of a task type (a ``JobRecord``); False when it says nothing of its need."""
        sig = rec.signature
        u = usage_of(rec, "mem")
        if not sig or u is None or says_nothing(rec, u):
            return False
        if u.censored:
            self._seen[sig] = seen = self._seen.get(sig, 0) + 1
            at = u.request if u.request else u.used
            if u.ran_out and rec.outcome is Outcome.OOM and at > 0:
                self._ran_out.setdefault(sig, deque(maxlen=RAN_OUT_RUNS)).append((seen, float(at)))
            return False
        if not (rec.used_time_s and rec.used_time_s > 0):
            return False
        self._seen[sig] = self._seen.get(sig, 0) + 1
        failed = self._ran_out.get(sig)
        if failed:  # a run that completed in less than X: the type no longer needs more than X
            kept = [(at, x) for at, x in failed if x <= u.used]
            failed.clear()
            failed.extend(kept)
        model = self._types.get(sig)
        if model is None:
            model = self._types[sig] = HarpTaskModel(self.prior, sig)
        model.learn(float(rec.input_bytes or 0.0), u.used, float(rec.used_time_s), u.request, rec.end_time)
        return True

    def runs(self, sig: str | None) -> int:
        model = self._types.get(sig or "")
        return len(model.y) if model is not None else 0

    def ran_out_floor(self, sig: str | None, request_mb: float) -> tuple[float | None, float | None]:
        """(the least a task of ``sig`` gets after a recent out-of-memory run, the MiB it ran out at), or Nones.

        Recent: among the type's last ``RAN_OUT_RUNS`` runs learnt, and no run
        since completed in less.  The floor is that run's escalation
        (``next_allocation``), at most ``RAISE`` times it: above what it ran out at.
        """
        seen = self._seen.get(sig or "", 0)
        recent = [x for at, x in self._ran_out.get(sig or "", ()) if seen - at < RAN_OUT_RUNS]
        if not recent:
            return None, None
        worst = max(recent)
        step = next_allocation(Outcome.OOM, worst, request_mb, None, 1)
        return min(step.value if step.value is not None else worst, RAISE * worst), worst

    def size(self, sig: str | None, input_bytes: float | None, request_mb: float | None) -> tuple[float | None, str]:
        """(MiB for a task of ``sig``, why), or (None, why) where the request stands."""
        if not request_mb or request_mb <= 0:
            return None, "no memory request to size"
        want, why = self._size(sig, input_bytes, float(request_mb))
        floor, worst = self.ran_out_floor(sig, float(request_mb))
        if want is not None and floor is not None and worst is not None and want <= worst:
            if floor >= request_mb:
                return None, f"a recent run of this task type ran out at {worst:.0f} MiB: request kept"
            return floor, f"{why}; raised to {floor:.0f} MiB, above a recent run that ran out at {worst:.0f}"
        return want, why

    def _size(self, sig: str | None, input_bytes: float | None, request_mb: float) -> tuple[float | None, str]:
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
