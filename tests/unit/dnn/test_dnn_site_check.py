"""The [dnn] gpu_types config against what Slurm says (recorded scontrol output)."""

from __future__ import annotations

from dnn_helpers import partitions_from_recording, site_settings

from harpd.config import GpuType
from harpd.dnn.site_check import check_gpu_types, parse_gres


def test_parse_gres_forms():
    assert parse_gres("gpu:a100:8(S:0-1)") == [("gpu", "a100", 8)]
    assert parse_gres("gpu:a100:4(S:0,1),gpu:v100:2,shard:8") == [
        ("gpu", "a100", 4),
        ("gpu", "v100", 2),
        ("shard", None, 8),
    ]
    assert parse_gres("gpu:4") == [("gpu", None, 4)]
    assert parse_gres("gpu:a100") == [("gpu", "a100", 1)]
    assert parse_gres("(null)") == [] and parse_gres(None) == []


def test_matching_site_has_no_problems():
    parts = partitions_from_recording("site")
    check = check_gpu_types(site_settings().gpu_types, parts)
    assert check.problems == []
    assert check.max_nodes == {"a100": 4, "h100": 4}  # gpu-a100 has 16 nodes but MaxNodes=4
    assert check.gpus_per_node == {"a100": 8, "h100": 4}


def test_local_test_cluster_matches_its_config():
    parts = partitions_from_recording("localslurm")
    types = [GpuType(name="a100", memory_gb=80, gpus_per_node=4, partition="gpu")]
    check = check_gpu_types(types, parts)
    assert check.ok and check.max_nodes == {"a100": 1}


def test_mismatches_are_named():
    parts = partitions_from_recording("site")
    types = [
        GpuType(name="a100", memory_gb=80, gpus_per_node=4, partition="gpu-a100"),  # nodes have 8
        GpuType(name="h100", memory_gb=80, gpus_per_node=4, partition="gpu-a100"),  # wrong partition
        GpuType(name="v100", memory_gb=32, gpus_per_node=4, partition="gpu-old"),  # untyped gres
        GpuType(name="l40", memory_gb=48, gpus_per_node=4, partition="gpu-l40"),  # no such partition
    ]
    check = check_gpu_types(types, parts)
    text = "\n".join(check.problems)
    assert len(check.problems) == 4
    assert "a100: config says gpus_per_node=4 but partition 'gpu-a100' nodes have gpu:a100:8" in text
    assert "h100: partition 'gpu-a100' has no gpu:h100 GRES (its GPU types: a100)" in text
    assert "v100: partition 'gpu-old' has GPUs without a type" in text
    assert "l40: partition 'gpu-l40' does not exist" in text
    # the a100 type stays usable with the GPUs the config allows; the others are not
    assert check.max_nodes == {"a100": 4, "h100": 0, "v100": 0, "l40": 0}
    assert check.gpus_per_node == {"a100": 4}
