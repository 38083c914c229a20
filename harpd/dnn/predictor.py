"""Route DNN training jobs through the ZeRO memory model, everything else through history.

For a job with a ``#HARP dnn`` line the GPU request follows from the model's
description (``plan_dnn_job``), not from history: the history predictor still
sizes what history knows (walltime), but the GPU type and count, nodes, tasks
per node, partition and host memory are the planner's.  When the planner finds
no configuration that fits, the job is left exactly as submitted and the
decision carries a one-line ``message`` saying why, which harp-submit prints.

Wrapping rather than editing the history predictor keeps one job per module:
the history predictor never needs to know about GPUs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from harpd.dnn.checkpoint import explain_checkpoint
from harpd.dnn.history import runs_from_store
from harpd.dnn.observed import observations_from_store
from harpd.dnn.plan import plan_dnn_job
from harpd.protocol import Decision, JobRequest
from harpd.slurm.partitions import limits_of

log = logging.getLogger(__name__)

# options the DNN plan owns; a history change to one of these is dropped
_DNN_OPTIONS = {"gres", "gpus", "partition", "nodes", "ntasks-per-node", "mem", "mem-per-cpu", "mem-per-gpu"}


def has_dnn_line(harp_lines: list[str] | None) -> bool:
    for line in harp_lines or []:
        words = line.split()
        # "#HARP dnn ..." as harp-submit sends it, or "dnn ..." without the prefix
        if words and words[0].upper() == "#HARP":
            words = words[1:]
        if words and words[0].lower() == "dnn":
            return True
    return False


class HistoryPredictor(Protocol):
    """What the router wraps (``harpd.predict.live.ModelPredictor``): the daemon's history predictor."""

    name: str

    def decide(self, job: Any, user: str, uid: int, now: float | None = None, *, dry_run: bool = False) -> Any: ...

    def template_of(self, job: Any, user: str) -> str | None: ...


class DnnRoutingPredictor:
    """A Predictor (``decide(job, user, uid)``) that adds GPU planning to ``inner``."""

    def __init__(
        self,
        inner: HistoryPredictor,
        settings: Any,
        partitions: Callable[[], dict[str, Any]] | None = None,
        billing: Callable[[], dict[str, dict[str, float]]] | None = None,
        store: Any = None,
    ) -> None:
        """``partitions``: the daemon's cached ``backend.partitions()`` (None: no Slurm);
        ``billing``: its cached TRESBillingWeights per partition (``harpd.slurm.billing``)."""
        self.inner = inner
        self.settings = settings
        self._partitions_fn = partitions
        self._billing_fn = billing
        self._store = store  # the job's earlier runs: deadline/batch plans (dnn.history), GPU peaks (dnn.observed)
        self.name = inner.name

    def template_of(self, job: Any, user: str) -> str | None:
        """How the watcher groups running jobs (``harpd.watch.feedback``): by history alone, GPUs play no part."""
        return self.inner.template_of(job, user)

    def _partitions(self) -> dict[str, Any] | None:
        if self._partitions_fn is None:
            return None
        try:
            return self._partitions_fn()
        except Exception as exc:  # a cap, not a prerequisite
            log.warning("partitions unavailable for GPU planning: %s", exc)
            return None

    def _billing(self) -> dict[str, dict[str, float]] | None:
        if self._billing_fn is None:
            return None
        try:
            return self._billing_fn()
        except Exception as exc:  # the config's weights serve then
            log.warning("TRESBillingWeights unavailable for GPU planning: %s", exc)
            return None

    def _history(self, uid: int) -> Callable[[dict[str, str]], tuple] | None:
        if self._store is None:
            return None
        store = self._store

        def runs(tokens: dict[str, str]) -> tuple:
            try:
                return runs_from_store(store, uid, tokens)
            except Exception as exc:  # history helps; its absence must not stop a decision
                log.warning("earlier runs unavailable for the scaling fit: %s", exc)
                return ()

        return runs

    def _observed(self, uid: int) -> Callable[[str], tuple] | None:
        if self._store is None:
            return None
        store = self._store

        def peaks(signature: str) -> tuple:
            try:
                return observations_from_store(store, uid, signature)
            except Exception as exc:  # observed peaks refine the plan; their absence must not stop a decision
                log.warning("observed GPU memory peaks unavailable: %s", exc)
                return ()

        return peaks

    def decide(self, job: JobRequest, user: str, uid: int, **kw: Any) -> Decision:
        base = self.inner.decide(job, user, uid, **kw)  # dry_run=True: the inner predictor counts nothing
        if not isinstance(base, Decision):
            base = Decision.model_validate(base)
        req = job.request
        ckpt = explain_checkpoint(list(job.harp_lines or []), req.time_s, req.signal_s, req.requeue)
        if ckpt is not None:
            base = base.model_copy(update={"explain": {**base.explain, "checkpoint": ckpt}})
        if not has_dnn_line(job.harp_lines):
            return base
        partitions = self._partitions()
        plan = plan_dnn_job(
            list(job.harp_lines),
            job.request,
            job.cwd,
            self.settings,
            partitions=partitions,
            uid=uid,
            billing=self._billing(),
            history=self._history(uid),
            observed=self._observed(uid),
            array_size=job.array_size,
        )
        explain = dict(base.explain)
        explain.update(plan.explain)
        if plan.error:
            # nothing fits (or the description is wrong): the whole job stays as submitted
            return Decision(
                changes=[],
                limits=base.limits,
                model=base.model,
                explain=explain,
                message=f"DNN job left unchanged: {plan.error}"[:300],
            )
        if not plan.changes:
            return base.model_copy(update={"explain": explain})
        changes = [c for c in base.changes if c.option not in _DNN_OPTIONS]
        changes += plan.changes
        limits = base.limits
        new_part = next((c.value for c in changes if c.option == "partition"), None)
        if new_part and partitions and new_part in partitions:
            info = partitions[new_part]
            limits = limits_of(info)
            # a history time change may not fit the new partition: keep the user's time then
            if info.max_time_s is not None:
                changes = [c for c in changes if not (c.option == "time" and _over(c.value, info.max_time_s))]
        models = ",".join(m for m in (base.model, "zero-dnn") if m)
        return Decision(changes=changes, limits=limits, model=models, explain=explain)


def _over(value: str, max_time_s: int) -> bool:
    from harp_submit.units import parse_time

    try:
        seconds = parse_time(value)
    except Exception:
        return True
    return seconds is not None and seconds > max_time_s
