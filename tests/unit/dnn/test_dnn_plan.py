"""plan_dnn_job: #HARP dnn lines + the user's request -> Decision changes, or a one-line error."""

from __future__ import annotations

import shutil

import pytest
from dnn_helpers import HF, partitions_from_recording, site_settings

from harpd.config import GpuType, HarpSettings
from harpd.dnn.plan import DnnPlan, plan_dnn_job
from harpd.dnn.refine import PeakObservation
from harpd.protocol import Change

LLAMA = "#HARP dnn config=llama-2-7b.json seq_len=4096 micro_batch=1 attention=flash zero=3"


def plan(lines, request=None, **kw):
    settings = HarpSettings(dnn=site_settings())
    return plan_dnn_job(lines, request or {}, str(HF), settings, **kw)


def by_option(p: DnnPlan) -> dict[str, dict]:
    return {c.option: c.model_dump() for c in p.changes}


def test_no_dnn_line_no_changes():
    p = plan(["#HARP off"])
    assert p == DnnPlan([], {}, None)


def test_changes_are_valid_decision_changes():
    p = plan([LLAMA], {"partition": "cpu", "gres": "gpu:1", "nodes": 1})
    assert p.error is None
    for ch in p.changes:
        assert Change.model_validate(ch.model_dump()) == ch  # the protocol's own model, valid as it is
        assert "\n" not in ch.reason and ch.reason
    c = by_option(p)
    chosen = p.explain["dnn"]["chosen"]
    assert c["partition"] == {
        "option": "partition",
        "value": "gpu-a100",
        "old": "cpu",
        "reason": "a100 GPUs are in partition gpu-a100",
    }
    assert c["gres"]["value"] == f"gpu:a100:{chosen['gpus_per_node']}" and c["gres"]["old"] == "gpu:1"
    assert c["ntasks-per-node"]["value"] == str(chosen["gpus_per_node"])
    assert ("nodes" in c) == (chosen["nodes"] != 1)
    assert "GiB/GPU needed (formula, zero=3, 10% margin) of 80 GiB" in c["gres"]["reason"]
    assert p.explain["dnn"]["zero"] == 3 and p.explain["dnn"]["breakdown_gib"]["total"] > 0
    assert "mem" not in c  # no offload: host memory is not harp's business here


def test_unchanged_options_are_left_out():
    first = plan([LLAMA])
    ch = by_option(first)
    request = {
        "partition": ch["partition"]["value"],
        "gres": ch["gres"]["value"],
        "nodes": int(ch.get("nodes", {"value": "1"})["value"]),
    }
    again = by_option(plan([LLAMA], request))
    assert set(again) == {"ntasks-per-node"}  # not part of Resources, so always stated


def test_other_gres_are_kept_and_gpus_option_is_respected():
    c = by_option(plan([LLAMA], {"gres": "gpu:v100:2,nvme:100"}))
    assert c["gres"]["value"].endswith(",nvme:100") and c["gres"]["value"].startswith("gpu:a100:")
    c = by_option(plan([LLAMA], {"gpus": "4"}))
    assert "gres" not in c and c["gpus"]["old"] == "4" and c["gpus"]["value"].startswith("a100:")


def test_torchrun_gets_one_task_per_node():
    c = by_option(plan([LLAMA + " launcher=torchrun gpus=16"]))
    assert c["ntasks-per-node"]["value"] == "1" and c["nodes"]["value"] == "2"
    assert c["gres"]["value"] == "gpu:a100:8"


def test_offload_sets_host_memory():
    line = LLAMA.replace("zero=3", "zero=2") + " offload=optimizer"
    p = plan([line])
    c = by_option(p)
    host_gib = p.explain["dnn"]["breakdown_gib"]["host_per_node"]
    assert host_gib > 0 and c["mem"]["value"] == f"{int(-(-host_gib // 1))}G"
    assert c["mem"]["old"] is None
    assert "mem" not in by_option(plan([line], {"mem_mb": 4 * 1024 * 1024}))  # user asked for more already
    p = plan([line], {"mem_per_cpu_mb": 4000})
    assert "mem" not in by_option(p) and any("--mem-per-cpu" in n for n in p.explain["dnn"]["notes"])


def test_errors_submit_unchanged_with_one_line():
    p = plan(["#HARP dnn config=missing.json seq_len=128"])
    assert p.changes == [] and p.error.startswith("config=missing.json: no such file")
    p = plan(["#HARP dnn params=175e9 layers=96 hidden=12288 heads=96 seq_len=2048 zero=2"])
    assert p.changes == [] and p.error.startswith("no configured GPU fits")
    assert p.explain["dnn"]["closest"]["fits"] is False
    p = plan_dnn_job([LLAMA], {}, str(HF), HarpSettings())  # no gpu_types configured
    assert p.changes == [] and "no GPU types are configured" in p.error
    for bad in (p.error,):
        assert "\n" not in bad


def test_partitions_from_slurm_limit_the_choice():
    parts = partitions_from_recording("site")
    p = plan([LLAMA + " gpus=32"], partitions=parts)
    # gpu-a100 allows 4 nodes (32 GPUs); fine
    assert p.error is None and by_option(p)["nodes"]["value"] == "4"
    p = plan([LLAMA + " gpus=40"], partitions=parts)
    assert p.error is not None and "gpus=40 cannot be placed" in p.error


def test_site_problems_become_notes():
    parts = partitions_from_recording("site")
    settings = HarpSettings(
        dnn=site_settings(
            gpu_types=[
                GpuType(name="a100", memory_gb=80, gpus_per_node=8, partition="gpu-a100"),
                GpuType(name="l40", memory_gb=48, gpus_per_node=4, partition="gpu-l40"),
            ]
        )
    )
    p = plan_dnn_job([LLAMA], {}, str(HF), settings, partitions=parts)
    assert p.error is None and p.explain["dnn"]["chosen"]["gpu_type"] == "a100"
    assert any("partition 'gpu-l40' does not exist" in n for n in p.explain["dnn"]["notes"])


def test_ntasks_conflict_is_noted():
    p = plan([LLAMA + " gpus=8"], {"ntasks": 1})
    assert any("--ntasks=1 overrides" in n for n in p.explain["dnn"]["notes"])


def test_observations_feed_the_plan():
    base = plan([LLAMA]).explain["dnn"]["chosen"]
    gib = 1 << 30
    # a run of the chosen configuration peaked higher than the formula, still fitting with the margin
    near = base["capacity_gib"] / 1.1 - 1
    p = plan([LLAMA], observed=lambda _sig: [PeakObservation(near * gib, n_gpus=base["n_gpus"], zero=3)])
    assert p.explain["dnn"]["chosen"]["n_gpus"] == base["n_gpus"]
    assert p.explain["dnn"]["chosen"]["need_gib"] == pytest.approx(near * 1.1, abs=0.01)
    assert "observed peak of 1 run(s)" in by_option(p)["gres"]["reason"]
    # ... or above it: the next job moves to a larger configuration
    over = [PeakObservation(base["capacity_gib"] * gib, n_gpus=base["n_gpus"], zero=3)]
    assert plan([LLAMA], observed=lambda _sig: over).explain["dnn"]["chosen"]["n_gpus"] > base["n_gpus"]
    # a lower peak never lowers the need: the larger of the formula and the peak plus margin (#47)
    low = [PeakObservation(20 * gib, n_gpus=base["n_gpus"], zero=3)]
    assert plan([LLAMA], observed=lambda _sig: low).explain["dnn"]["chosen"]["need_gib"] == base["need_gib"]


def test_config_relative_to_job_cwd(tmp_path):
    shutil.copy(HF / "gpt2.json", tmp_path / "config.json")
    settings = HarpSettings(dnn=site_settings())
    p = plan_dnn_job(["#HARP dnn config=config.json seq_len=1024 micro_batch=8"], {}, str(tmp_path), settings)
    assert p.error is None and by_option(p)["gres"]["value"] == "gpu:a100:1"
    p = plan_dnn_job(["#HARP dnn config=config.json seq_len=1024"], {}, None, settings)
    assert "job's directory is unknown" in p.error


def test_zero_auto_is_reported():
    p = plan([LLAMA.replace("zero=3", "zero=auto")])
    z = p.explain["dnn"]["zero"]
    assert any(f"zero=auto chose ZeRO stage {z}" in n for n in p.explain["dnn"]["notes"])
    assert f"zero={z}" in by_option(p)["gres"]["reason"]


def test_trailing_comment_on_the_line_is_ignored():
    p = plan([LLAMA + "  # the 7B run"])
    assert p.error is None and p.changes


def test_dnn_package_stays_off_numpy_and_sklearn():
    import subprocess
    import sys

    code = (
        "import sys, harpd.dnn.plan, harpd.dnn.gpu_choice, harpd.dnn.refine, harpd.dnn.site_check; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'sklearn', 'scipy')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_precision_layout_it_was_sized_for_is_said():
    auto = plan([LLAMA])
    assert auto.explain["dnn"]["mixed"] == "weights"  # zero=3: DeepSpeed's 16-bit weights
    assert any("sized for mixed=weights" in n for n in auto.explain["dnn"]["notes"])
    fixed = plan([LLAMA + " mixed=autocast"])
    assert fixed.explain["dnn"]["mixed"] == "autocast"
    assert not any("sized for mixed=" in n for n in fixed.explain["dnn"]["notes"])
