"""THE rule for a job that ran out of GPU memory: the next attempt runs one configuration larger, never the same.

A CUDA out-of-memory is no limit of Slurm's (the job is FAILED, exit 1), so
the plain escalation (``escalation.next_allocation``: time and host memory)
does not see it.  What the next configuration is comes from the DNN planner
(``harpd.dnn.oom_escalation``), which recovery must not import (the planner
sits above it in the layers of pyproject.toml): the daemon injects it as a
``GpuPlanner``, and this module holds the typed proposal and the pure rule
that accepts or refuses it, so a planner's mistake can never resubmit the
same configuration in a loop:

* not a GPU out-of-memory (no planner, not a DNN job harp planned, no
  ``gres/gpumem`` near the GPU's total): ``None``, the caller goes on as before;
* at most ``max_attempts`` attempts in all (the first run counts);
* no configuration fits: stop with the planner's one-line reason;
* the proposal is the configuration that failed, or is no larger in any
  way that holds more per GPU (GPU memory, GPU count, total GPU memory,
  ZeRO stage): stop, with that reason;
* else the attempt runs with the proposal's sbatch options and environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict

from harpd.records import Change, JobRecord, Submission

__all__ = [
    "GPU",
    "GpuConfig",
    "GpuConfigJson",
    "GpuProposal",
    "GpuPlanner",
    "GpuStep",
    "next_gpu_step",
    "gpu_changes",
    "gpu_resources",
]

#: ``Plan.escalated`` of an attempt that got a larger GPU configuration
GPU = "gpu"


class GpuConfigJson(TypedDict):
    """``GpuConfig`` in an attempt's explanation (the configuration that ran out, and the next)."""

    gpu_type: str | None
    n_gpus: int
    zero: int
    capacity_gib: float | None
    nodes: int | None


@dataclass(frozen=True, slots=True)
class GpuConfig:
    """One GPU configuration of a DNN job: what ran, or what runs next."""

    gpu_type: str | None
    n_gpus: int
    zero: int
    capacity_gib: float | None  # one GPU's memory as the site configured it
    nodes: int | None = None

    def label(self) -> str:
        """``2 x a100 (80 GiB), ZeRO 1``"""
        cap = f" ({self.capacity_gib:g} GiB)" if self.capacity_gib else ""
        return f"{self.n_gpus} x {self.gpu_type or 'GPU'}{cap}, ZeRO {self.zero}"

    def key(self) -> tuple[Any, ...]:
        """What sets the memory per GPU: type, count, stage (the nodes they are spread over do not)."""
        return (self.gpu_type, self.n_gpus, self.zero)

    def to_json(self) -> GpuConfigJson:
        return GpuConfigJson(
            gpu_type=self.gpu_type,
            n_gpus=self.n_gpus,
            zero=self.zero,
            capacity_gib=self.capacity_gib,
            nodes=self.nodes,
        )


@dataclass(frozen=True, slots=True)
class GpuProposal:
    """What the DNN planner says after a run that ran out of GPU memory.

    ``failed``: the configuration that ran out; ``next``: the one proposed
    (None: none fits, ``why`` says so); ``options``: the sbatch options the
    resubmission sets (``gres`` or ``gpus``, ``nodes``, ``ntasks-per-node``,
    ``partition``); ``env``: the variables it adds for the job's program
    (``HARP_DNN_ZERO``, ``HARP_DNN_GPUS``); ``dnn``: what the new job's
    registered decision keeps as ``explain.dnn`` (its signature and chosen
    configuration), so its own peak or out-of-memory is learnt in turn.
    """

    failed: GpuConfig
    next: GpuConfig | None
    why: str
    options: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    dnn: Mapping[str, Any] = field(default_factory=dict)


class GpuPlanner(Protocol):
    """The daemon's DNN planner for recovery (``harpd.dnn.oom_escalation.OomPlanner``)."""

    def ran_out(self, record: JobRecord, submission: Submission) -> bool:
        """Whether the run (registered as ``submission``) ran out of GPU memory."""
        ...

    def propose(self, record: JobRecord, submission: Submission) -> GpuProposal | None:
        """The next configuration after that run; None when it did not run out of GPU memory."""
        ...


@dataclass(frozen=True, slots=True)
class GpuStep:
    """The decision after a GPU out-of-memory: the proposal to carry out, or why not (``stop``)."""

    proposal: GpuProposal | None
    reason: str
    stop: bool


def _larger(new: GpuConfig, old: GpuConfig) -> bool:
    """Whether ``new`` holds more per GPU in at least one way: GPU memory, GPU count (total), ZeRO stage."""
    cap_new, cap_old = new.capacity_gib or 0.0, old.capacity_gib or 0.0
    return (
        cap_new > cap_old
        or new.n_gpus > old.n_gpus
        or new.n_gpus * cap_new > old.n_gpus * cap_old
        or new.zero > old.zero
    )


def next_gpu_step(proposal: GpuProposal | None, attempt: int, max_attempts: int = 3) -> GpuStep | None:
    """The attempt after ``attempt`` (1-based) ran out of GPU memory; None when it did not (see the module doc)."""
    if proposal is None:
        return None
    failed = proposal.failed
    head = f"ran out of GPU memory on {failed.label()}"
    if attempt >= max_attempts:
        return GpuStep(None, f"attempt {attempt} of {max_attempts} {head}: no attempts left", True)
    nxt = proposal.next
    if nxt is None:
        return GpuStep(None, f"{head}; no larger configuration fits: {proposal.why}", True)
    if nxt.key() == failed.key():
        return GpuStep(None, f"{head}; the planner proposed the same configuration again: not resubmitted", True)
    if not _larger(nxt, failed):
        return GpuStep(None, f"{head}; the planner proposed {nxt.label()}, which is no larger: not resubmitted", True)
    return GpuStep(
        proposal, f"{head}; next: {nxt.label()} ({proposal.why}); attempt {attempt + 1} of {max_attempts}", False
    )


def gpu_changes(gpu: Mapping[str, Any], reason: str) -> list[Change]:
    """The registered decision's changes of a resubmission in a larger configuration (``harp status`` shows them)."""
    options = gpu.get("options") or {}
    return [Change.from_json({"option": k, "value": str(v), "old": None, "reason": reason}) for k, v in options.items()]


def gpu_resources(gpu: Mapping[str, Any] | None) -> dict[str, str | int]:
    """The ``Resources`` fields a larger configuration changes in the registered ``submitted`` (GPUs, nodes)."""
    options = (gpu or {}).get("options") or {}
    out: dict[str, str | int] = {}
    for key in ("gres", "gpus"):
        if key in options:
            out[key] = str(options[key])
    if "nodes" in options:
        out["nodes"] = int(options["nodes"])
    return out
