"""What the daemon asks Slurm on a user's request path: partition limits (cached) and job owners.

scontrol takes tens of milliseconds to seconds on a busy controller, too slow
to run for every sbatch, so one cache of ``partitions()`` serves every reader
in the daemon (the limits sent with each decision, the DNN planner, the live
predictor) and scontrol runs at most once per ``ttl_s`` (and, while it
fails, once per retry interval: ``ttl_cache``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from harpd.protocol import Limits
from harpd.slurm.base import PartitionInfo, SlurmBackend
from harpd.slurm.ttl_cache import ttl_cached

__all__ = [
    "LimitsLookup",
    "cached_partitions",
    "limits_for",
    "limits_of",
    "limits_from_partitions",
    "limits_from_backend",
]

log = logging.getLogger("harpd.slurm")

#: partition name (None: the default) -> its limits, as ``limits_from_partitions`` gives them
LimitsLookup = Callable[[str | None], "Limits | dict[str, Any] | None"]


def cached_partitions(backend: SlurmBackend, ttl_s: float = 60.0) -> Callable[[], dict[str, PartitionInfo]]:
    """``backend.partitions()``, fetched again once it is ``ttl_s`` old; a failure is retried
    after 10 s, with the last good answer served meanwhile (``ttl_cache``)."""

    def fetch() -> dict[str, PartitionInfo]:
        return backend.partitions()  # looked up when first asked: a backend may never be

    return ttl_cached(fetch, "partition limits (scontrol show partition)", ttl_s)


def partition_of(parts: dict[str, PartitionInfo], name: str | None) -> PartitionInfo | None:
    """The partition a job runs in: ``name`` when Slurm has it, else the default partition.

    Recovery and the extender cap a job's next limit by it; an unnamed or
    unknown partition falls back to the default, so a cap is still found.
    """
    if name and name in parts:
        return parts[name]
    return next((p for p in parts.values() if p.default), None)


def limits_of(info: PartitionInfo) -> Limits:
    """The caps harp-submit checks a decision against, from one PartitionInfo."""
    return Limits(
        partition=info.name,
        max_time_s=info.max_time_s,
        max_mem_mb=info.max_mem_mb_per_node,
        max_cpus=info.max_cpus_per_node,
    )


def limits_from_partitions(partitions: Callable[[], dict[str, PartitionInfo]]) -> Callable[[str | None], Limits | None]:
    """Partition limits by name (None: the default partition)."""

    def lookup(partition: str | None) -> Limits | None:
        parts = partitions()
        # an unknown named partition has no limits (harp-submit then checks none); no name: the default
        info = parts.get(partition) if partition else partition_of(parts, None)
        return None if info is None else limits_of(info)

    return lookup


def limits_for(lookup: LimitsLookup | None, partition: str | None) -> Limits:
    """The caps sent with a decision for ``partition``: ``lookup``'s, else the partition's name alone.

    Limits are a cap, not a prerequisite: a lookup that fails (the cache has
    logged why, once) or answers nothing leaves the decision without caps.
    """
    if lookup is not None:
        try:
            got = lookup(partition)
            if got is not None:
                return got if isinstance(got, Limits) else Limits.model_validate(got)
        except Exception as exc:
            log.debug("partition limits unavailable for %s: %s", partition, exc)
    return Limits(partition=partition)


def limits_from_backend(backend: SlurmBackend, ttl_s: float = 60.0) -> Callable[[str | None], Limits | None]:
    """Partition limits via a cached ``backend.partitions()``."""
    return limits_from_partitions(cached_partitions(backend, ttl_s))
