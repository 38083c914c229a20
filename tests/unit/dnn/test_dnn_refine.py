"""Recorded peaks replace the formula for the same setup and configuration."""

from __future__ import annotations

import pytest
from dnn_helpers import HF

from harpd.dnn.refine import PeakObservation, gpumem_bytes, refined_need, spec_signature
from harpd.dnn.spec import spec_from_lines

GIB = 1 << 30


def test_formula_rules_until_there_are_observations():
    assert refined_need(50 * GIB, [], n_gpus=4, stage=2, margin=0.1) == (50 * GIB, "formula")
    other = [PeakObservation(30 * GIB, n_gpus=8, zero=2), PeakObservation(30 * GIB, n_gpus=4, zero=3)]
    assert refined_need(50 * GIB, other, n_gpus=4, stage=2, margin=0.1)[1] == "formula"


def test_max_observed_times_margin():
    obs = [PeakObservation(30 * GIB, 4, 2), PeakObservation(34 * GIB, 4, 2), PeakObservation(60 * GIB, 8, 2)]
    need, source = refined_need(30 * GIB, obs, n_gpus=4, stage=2, margin=0.1)
    assert need == pytest.approx(34 * GIB * 1.1)
    assert source == "observed peak of 2 run(s)"
    # the larger of the formula and the observed peak plus margin (#47): a lower peak never lowers the need
    need, source = refined_need(50 * GIB, obs, n_gpus=4, stage=2, margin=0.1)
    assert need == 50 * GIB and source == "formula, above the observed peak of 2 run(s)"


def test_out_of_memory_runs_only_raise_the_need():
    oom = [PeakObservation(20 * GIB, 4, 2, oom=True)]
    need, source = refined_need(50 * GIB, oom, n_gpus=4, stage=2, margin=0.1)
    assert need == 50 * GIB and "1 run(s) out of GPU memory" in source
    oom = [PeakObservation(79 * GIB, 4, 2, oom=True), PeakObservation(30 * GIB, 4, 2)]
    need, _ = refined_need(50 * GIB, oom, n_gpus=4, stage=2, margin=0.1)
    assert need == pytest.approx(79 * GIB * 1.1)


def test_gpumem_from_sacct_tres():
    tres = "cpu=00:00:11,energy=0,fs/disk=87613,gres/gpumem=2048M,gres/gpuutil=11,mem=1024K"
    assert gpumem_bytes(tres) == 2048 * (1 << 20)
    assert gpumem_bytes("cpu=1,gres/gpumem=1.5G") == 1.5 * GIB
    assert gpumem_bytes("cpu=1,mem=100M") is None and gpumem_bytes(None) is None


def test_signature_is_stable_and_ignores_placement():
    line = "#HARP dnn config=gpt2.json seq_len=1024 micro_batch=4 zero=2"
    a = spec_from_lines([line], cwd=str(HF))
    b = spec_from_lines([line.replace("zero=2", "zero=3") + " gpus=8"], cwd=str(HF))
    c = spec_from_lines([line.replace("micro_batch=4", "micro_batch=8")], cwd=str(HF))
    assert spec_signature(a) == spec_signature(b)  # stage and GPU count are part of each observation
    assert spec_signature(a) != spec_signature(c)
    assert spec_signature(a).startswith("dnn:") and len(spec_signature(a)) == 20


def test_out_of_memory_elsewhere_scales_the_formula():
    """A run killed at 40 GiB planned at 30 GiB (formula, margin in) under-counts by >= 40 x 1.1 / 30 everywhere."""
    oom = [PeakObservation(40 * GIB, n_gpus=1, zero=0, oom=True, planned_bytes=30 * GIB)]
    need, source = refined_need(20 * GIB, oom, n_gpus=2, stage=1, margin=0.1)
    assert need == pytest.approx(20 * GIB * 40 * 1.1 / 30)
    assert "1 run(s) out of GPU memory in another configuration" in source
    # the same configuration: the kill itself, which is the same figure there
    need, _ = refined_need(30 * GIB, oom, n_gpus=1, stage=0, margin=0.1)
    assert need == pytest.approx(40 * GIB * 1.1)
    # without what it was planned at, nothing carries over; completed runs never carry over
    bare = [PeakObservation(40 * GIB, n_gpus=1, zero=0, oom=True)]
    assert refined_need(20 * GIB, bare, n_gpus=2, stage=1, margin=0.1) == (20 * GIB, "formula")
    done = [PeakObservation(40 * GIB, n_gpus=1, zero=0, planned_bytes=30 * GIB)]
    assert refined_need(20 * GIB, done, n_gpus=2, stage=1, margin=0.1) == (20 * GIB, "formula")
