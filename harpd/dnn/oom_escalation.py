"""The next GPU configuration for a DNN job that ran out of GPU memory, for recovery.

Recovery (``harpd.recovery.gpu_escalation``) may not import the planner, so
the daemon hands it an ``OomPlanner``.  After a run that ran out of GPU
memory (``observed.ran_out_of_gpu_memory``: FAILED with ``gres/gpumem`` at
90% of the GPU), the job's own ``#HARP dnn`` lines are planned again exactly
as at its submission, with the user's observed peaks, which now hold this
run: its configuration no longer fits and every other configuration's need is
scaled by what the formula under-counted (``refine.refined_need``).  What the
planner may change is what it changes at submission: GPU type, count and
nodes (Slurm's resources, which harp sets), and the ZeRO stage only where the
line says ``zero=auto``, since the stage lives in the job's program.  The
resubmission carries the stage in ``HARP_DNN_ZERO`` and the GPU count in
``HARP_DNN_GPUS`` for the program to read; recomputation is never switched
on by harp (the program's own setting, and it costs compute): where nothing
fits, the plan's reason names it.

Every sbatch option of the configuration is set on the resubmission, not
only those that differ from the user's request: the resubmitted command line
is the first run's, which may carry harp's first configuration.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from harpd.dnn.observed import DnnDecided, observations_from_store, ran_out_of_gpu_memory
from harpd.dnn.plan import gres_value, has_gpu_gres, plan_dnn_job
from harpd.protocol import JobRequest
from harpd.records import JobRecord, Submission
from harpd.recovery.gpu_escalation import GpuConfig, GpuProposal

log = logging.getLogger("harpd.recovery")

__all__ = ["OomPlanner", "ZERO_ENV", "GPUS_ENV"]

#: the variables a resubmission in a larger configuration adds to the job's environment
ZERO_ENV = "HARP_DNN_ZERO"
GPUS_ENV = "HARP_DNN_GPUS"


def _config(chosen: Mapping[str, Any]) -> GpuConfig:
    return GpuConfig(
        gpu_type=str(chosen.get("gpu_type")),
        n_gpus=int(chosen.get("n_gpus") or 0),
        zero=int(chosen.get("zero") or 0),
        capacity_gib=float(chosen["capacity_gib"]) if chosen.get("capacity_gib") else None,
        nodes=int(chosen["nodes"]) if chosen.get("nodes") else None,
    )


class OomPlanner:
    """``harpd.recovery.gpu_escalation.GpuPlanner`` over harpd's store and settings."""

    def __init__(self, store: Any, settings: Any, partitions: Callable[[], Mapping[str, Any]] | None = None) -> None:
        self.store = store
        self.settings = settings
        self._partitions_fn = partitions

    def _partitions(self) -> Mapping[str, Any] | None:
        if self._partitions_fn is None:
            return None
        try:
            return self._partitions_fn()
        except Exception as exc:  # noqa: BLE001 - a check, not a prerequisite (as the predictor's)
            log.warning("partitions unavailable for GPU planning: %s", exc)
            return None

    def ran_out(self, record: JobRecord, submission: Submission) -> bool:
        decided = DnnDecided.from_decision(submission.stored.get("decision"))
        return decided is not None and ran_out_of_gpu_memory(record, decided.capacity_gib)

    def propose(self, record: JobRecord, submission: Submission) -> GpuProposal | None:
        decided = DnnDecided.from_decision(submission.stored.get("decision"))
        if decided is None or not ran_out_of_gpu_memory(record, decided.capacity_gib):
            return None
        failed = GpuConfig(decided.gpu_type, decided.n_gpus, decided.zero, decided.capacity_gib, record.alloc_nodes)
        try:
            job = JobRequest.model_validate(dict(submission.job))
        except ValidationError:
            return GpuProposal(failed, None, "its registration cannot be read again")
        uid = int(submission.uid)
        plan = plan_dnn_job(
            list(job.harp_lines),
            job.request,
            job.cwd,
            self.settings,
            partitions=self._partitions(),
            uid=uid,
            observed=lambda signature: observations_from_store(self.store, uid, signature),
        )
        dnn = plan.explain.get("dnn") or {}
        chosen = dnn.get("chosen")
        if plan.error or not isinstance(chosen, Mapping):
            return GpuProposal(failed, None, plan.error or "the planner chose nothing")
        nxt = _config(chosen)
        per_node = next((c.value for c in plan.changes if c.option == "ntasks-per-node"), None)
        options = {"partition": str(chosen["partition"]), "nodes": str(nxt.nodes or 1)}
        if job.request.gpus:
            options["gpus"] = f"{nxt.gpu_type}:{nxt.n_gpus}"
        if has_gpu_gres(job.request.gres) or not job.request.gpus:  # as plan_dnn_job chooses
            options["gres"] = gres_value(job.request.gres, str(nxt.gpu_type), int(chosen["gpus_per_node"]))
        if per_node is not None:
            options["ntasks-per-node"] = str(per_node)
        need, cap, source = chosen.get("need_gib"), chosen.get("capacity_gib"), chosen.get("need_source")
        why = f"{need} of {cap} GiB per GPU needed ({source})"
        return GpuProposal(
            failed,
            nxt,
            why,
            options=options,
            env={ZERO_ENV: str(nxt.zero), GPUS_ENV: str(nxt.n_gpus)},
            dnn={"signature": dnn.get("signature"), "chosen": dict(chosen), "zero": nxt.zero},
        )
