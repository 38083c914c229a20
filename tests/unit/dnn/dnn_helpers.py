"""Helpers for the DNN tests: site configs and recorded ``scontrol`` output.

A uniquely named module (not conftest) so ``import dnn_helpers`` cannot pick up
another directory's conftest.
"""

from __future__ import annotations

import re
from pathlib import Path

from harpd.config import DnnSettings, GpuType
from harpd.slurm.base import PartitionInfo

DATA = Path(__file__).resolve().parent / "data"
HF = Path(__file__).resolve().parents[2] / "fixtures" / "hf_configs"


def _fields(line: str) -> dict[str, str]:
    # scontrol -o prints Key=Value words; values we need contain no spaces
    return {m.group(1): m.group(2) for m in re.finditer(r"(\w+)=(\S*)", line)}


def partitions_from_recording(stem: str) -> dict[str, PartitionInfo]:
    """PartitionInfo per partition from recorded `scontrol show partition/node -o`.

    A stand-in for the Slurm backend's partitions(): one GRES string per
    partition (that of its first node), node count capped by nothing else.
    """
    nodes = [_fields(l) for l in (DATA / f"{stem}_show_node.txt").read_text().splitlines() if l.strip()]
    out = {}
    for line in (DATA / f"{stem}_show_partition.txt").read_text().splitlines():
        if not line.strip():
            continue
        f = _fields(line)
        name = f["PartitionName"]
        members = [n for n in nodes if name in n.get("Partitions", "").split(",")]
        gres = members[0].get("Gres") if members else None
        max_nodes = None if f.get("MaxNodes") in (None, "UNLIMITED") else int(f["MaxNodes"])
        out[name] = PartitionInfo(
            name=name,
            max_time_s=None,
            max_mem_mb_per_node=None,
            max_cpus_per_node=None,
            nodes=int(f["TotalNodes"]),
            gres=None if gres == "(null)" else gres,
            max_nodes=max_nodes,
        )
    return out


def site_settings(**kw) -> DnnSettings:
    """A site with a cheap 40 GiB A100 partition, an 80 GiB A100 one and a pricier H100 one."""
    types = (
        kw.pop("gpu_types")
        if "gpu_types" in kw
        else [
            GpuType(name="a100", memory_gb=80, gpus_per_node=8, billing_weight=1.0, partition="gpu-a100"),
            GpuType(name="h100", memory_gb=80, gpus_per_node=4, billing_weight=2.5, partition="gpu-h100"),
        ]
    )
    return DnnSettings(gpu_types=types, **kw)
