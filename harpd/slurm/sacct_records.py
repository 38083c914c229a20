"""What every sacct parser produces: ``SacctJob``s, one per job run, steps folded in.

``sacct`` prints the same facts in three shapes (``--json`` in the 22.05
layout, ``--json`` in the 23.11+ layout, ``--parsable2`` text), read by
``harpd.slurm.sacct_json`` and ``harpd.slurm.sacct_text``.  Both produce the
types below, so classification (``harpd.slurm.classify``) and the history
importer never care where a job came from.  Also here: the value readers both
formats share (job states, TRES strings).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harp_submit.units import parse_size_mb

__all__ = [
    "BASE_STATES",
    "SacctJob",
    "SacctStep",
    "SacctParseError",
    "gpumem_mb",
    "normalize_state",
    "parse_tres",
]

# base job states (flags like REQUEUED in a 23.11 state list come after these)
BASE_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "REVOKED",
        "SPECIAL_EXIT",
        "STOPPED",
        "SIGNALING",
        "STAGE_OUT",
        "COMPLETING",
        "CONFIGURING",
    }
)


class SacctParseError(ValueError):
    """sacct output harp cannot read; the message names what and where."""


@dataclass(slots=True)
class SacctStep:
    """One job step as accounting saw it.  ``max_rss_mb`` is the largest task's.

    ``max_gpumem_mb``: the largest task's GPU memory peak (``gres/gpumem`` of
    TRESUsageInMax), only where the site's Slurm gathers GPU usage (NVML
    autodetect and ``AccountingStorageTRES=gres/gpumem``); None elsewhere.
    NVML's figure is the memory in use on the task's GPUs (CUDA context and
    allocator cache included), summed over the GPUs the task sees.
    """

    step_id: str  # "batch", "extern", "0", ...
    state: str | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    max_rss_mb: float | None = None
    tot_rss_mb: float | None = None  # sum over tasks (JSON only)
    ntasks: int | None = None
    nnodes: int | None = None
    elapsed_s: float | None = None
    cpu_s: float | None = None
    max_gpumem_mb: float | None = None


@dataclass(slots=True)
class SacctJob:
    """One run of one job, as parsed; ``harpd.slurm.classify`` turns it into a JobRecord."""

    job_id: str  # "12", "12_3" (array task), "12+0" (het component)
    cluster: str | None = None
    user: str | None = None
    group: str | None = None
    account: str | None = None
    partition: str | None = None
    job_name: str | None = None
    state: str | None = None  # normalised base state: "CANCELLED", not "CANCELLED by 0"
    exit_code: int | None = None
    exit_signal: int | None = None
    submit_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    elapsed_s: float | None = None
    limit_s: float | None = None  # None: unlimited or unknown
    req_mem_mb: float | None = None  # whole job
    req_cpus: int | None = None
    req_nodes: int | None = None
    req_gpus: int | None = None
    alloc_cpus: int | None = None
    alloc_nodes: int | None = None
    alloc_gpus: int | None = None
    cpu_s: float | None = None
    comment: str | None = None
    steps: list[SacctStep] = field(default_factory=list)
    run: int = 1  # 1 + earlier runs of the same job id (requeues), in this output


def parse_tres(text: str | None) -> dict[str, str]:
    """``billing=1,cpu=2,gres/gpu=1,mem=3800M,node=1`` -> ``{"cpu": "2", ...}``."""
    if not text:
        return {}
    out: dict[str, str] = {}
    for item in text.split(","):
        k, sep, v = item.partition("=")
        if sep:
            out[k] = v
    return out


def gpumem_mb(usage: str | None) -> float | None:
    """MiB of ``gres/gpumem`` in a TRES usage string (``...,gres/gpumem=28972M,...``; a bare number is bytes)."""
    if not usage or "gres/gpumem=" not in usage:
        return None
    return parse_size_mb(parse_tres(usage).get("gres/gpumem"), bare_unit="")


def normalize_state(state: Any) -> str | None:
    """``"CANCELLED by 0"`` / ``["CANCELLED"]`` / ``"CANCELLED+"`` -> ``"CANCELLED"``."""
    if state is None:
        return None
    if isinstance(state, list):
        words = [str(s) for s in state if s]
        for w in words:
            if w in BASE_STATES:
                return w
        return words[0] if words else None
    s = str(state).strip()
    if not s:
        return None
    s = s.split(" ", 1)[0].rstrip("+")
    return s.upper()
