"""The billing weight of a GPU in each partition: ``TRESBillingWeights`` of ``scontrol show partition``.

Slurm bills a job the sum (or, with ``PriorityFlags=MAX_TRES``, the largest)
of its TRES times the partition's weights: ``TRESBillingWeights=CPU=1.0,
Mem=0.25G,GRES/gpu=2.0,GRES/gpu:a100=3.0``.  For the GPU part of a bill a
typed weight (``GRES/gpu:a100``) wins over the untyped one (``GRES/gpu``).
A partition without the option bills CPUs only (weight 1 each), so its GPUs
have no weight of their own; the caller falls back on the site's config then.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harpd.slurm.scontrol import parse_kv_line
from harpd.slurm.ttl_cache import ttl_cached


def parse_billing_weights(text: str | None) -> dict[str, float]:
    """``CPU=1.0,Mem=0.25G,GRES/gpu:a100=3`` -> {"cpu": 1.0, "mem": 0.25, "gres/gpu:a100": 3.0}.

    Keys lower-cased; a memory weight's unit suffix (per G/T of memory) is
    dropped; an entry that is not NAME=NUMBER is skipped.
    """
    out: dict[str, float] = {}
    if not text or text in ("(null)", "N/A"):
        return out
    for item in text.split(","):
        name, sep, value = item.partition("=")
        if not sep:
            continue
        v = value.strip().rstrip("KMGTkmgt")
        try:
            out[name.strip().lower()] = float(v)
        except ValueError:
            continue
    return out


def gpu_weight(weights: dict[str, float], gpu_type: str) -> float | None:
    """The billing weight of one GPU of ``gpu_type``: typed entry, else untyped, else None."""
    for key in (f"gres/gpu:{gpu_type.lower()}", "gres/gpu"):
        if key in weights:
            return weights[key]
    return None


def partition_billing(show_partition_oneliner: str) -> dict[str, dict[str, float]]:
    """Per partition, its TRES billing weights, from ``scontrol show partition --oneliner`` text."""
    out: dict[str, dict[str, float]] = {}
    for line in show_partition_oneliner.splitlines():
        if not line.strip():
            continue
        kv = parse_kv_line(line)
        name = kv.get("PartitionName")
        if name:
            out[name] = parse_billing_weights(kv.get("TRESBillingWeights"))
    return out


def billing_weights(backend: Any) -> dict[str, dict[str, float]]:
    """The live cluster's weights per partition (one ``scontrol show partition`` call)."""
    return partition_billing(backend._run("scontrol", ["show", "partition", "--oneliner"]))


def cached_billing(backend: Any, ttl_s: float = 300.0) -> Callable[[], dict[str, dict[str, float]]]:
    """``billing_weights(backend)``, fetched again once it is ``ttl_s`` old (weights change rarely);
    a failure is retried after 10 s, with the last good answer served meanwhile (``ttl_cache``)."""
    return ttl_cached(lambda: billing_weights(backend), "billing weights (scontrol show partition)", ttl_s)
