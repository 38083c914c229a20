"""The cheapest configuration that fits, by the stated cost model."""

from __future__ import annotations

import pytest
from dnn_helpers import HF, site_settings

from harpd.config import GpuType
from harpd.dnn.gpu_choice import choose_config, layouts
from harpd.dnn.refine import PeakObservation
from harpd.dnn.spec import spec_from_lines
from harpd.dnn.zero import GIB, estimate


def spec(line: str):
    return spec_from_lines(["#HARP dnn " + line], cwd=str(HF))


def choose(s, settings=None, **kw):
    d = settings or site_settings()
    return choose_config(
        s,
        d.gpu_types,
        margin=d.safety_margin,
        cuda_context_gb=d.cuda_context_gb,
        distributed_overhead_gb=d.distributed_overhead_gb,
        max_nodes=d.max_nodes,
        **kw,
    )


def need(s, n, stage):
    d = site_settings()
    return estimate(
        s, n, stage, margin=0.10, cuda_context_gb=d.cuda_context_gb, distributed_overhead_gb=d.distributed_overhead_gb
    ).need


LLAMA = "config=llama-2-7b.json seq_len=4096 micro_batch=1 attention=flash"


def test_small_model_gets_one_gpu_at_stage_0():
    c = choose(spec("config=gpt2.json seq_len=1024 micro_batch=8 zero=auto"))
    b = c.best
    assert (b.gpu_type.name, b.nodes, b.gpus_per_node, b.stage) == ("a100", 1, 1, 0)
    assert b.fits and b.need == pytest.approx(need(spec("config=gpt2.json seq_len=1024 micro_batch=8"), 1, 0))


def test_llama_7b_takes_the_fewest_gpus_that_fit():
    s = spec(LLAMA + " zero=auto")
    b = choose(s).best
    cap = 80 * GIB
    assert b.fits and b.gpu_type.name == "a100"
    # no smaller GPU count fits at any stage: this is the fewest
    for n in range(1, b.n_gpus):
        assert all(need(s, n, st) > cap for st in range(4)), n
    # and at that count no lower stage fits (least communication wins ties)
    assert all(need(s, b.n_gpus, st) > cap for st in range(b.stage))
    assert b.need == pytest.approx(need(s, b.n_gpus, b.stage))


def test_fixed_stage_needs_more_gpus_than_auto():
    auto = choose(spec(LLAMA + " zero=auto")).best
    z1 = choose(spec(LLAMA + " zero=1")).best
    assert z1.stage == 1 and z1.n_gpus >= auto.n_gpus
    z0 = choose(spec(LLAMA + " zero=0"))
    assert z0.best is None  # plain DDP keeps 16 bytes per parameter everywhere: never fits 80 GiB
    assert "zero=auto" in z0.error and "recompute=full" in z0.error


def test_billing_weight_decides_between_types():
    s = spec(LLAMA + " zero=3")
    cheap_h100 = site_settings(
        gpu_types=[
            GpuType(name="a100", memory_gb=80, gpus_per_node=8, billing_weight=1.0, partition="gpu-a100"),
            GpuType(name="h100", memory_gb=80, gpus_per_node=4, billing_weight=0.5, partition="gpu-h100"),
        ]
    )
    assert choose(s).best.gpu_type.name == "a100"
    assert choose(s, cheap_h100).best.gpu_type.name == "h100"


def test_bigger_memory_can_be_cheaper_despite_weight():
    s = spec(LLAMA + " zero=3")
    site = site_settings(
        gpu_types=[
            GpuType(name="a40", memory_gb=40, gpus_per_node=8, billing_weight=0.6, partition="gpu-a40"),
            GpuType(name="h200", memory_gb=141, gpus_per_node=8, billing_weight=1.0, partition="gpu-h200"),
        ]
    )
    best = choose(s, site).best
    a40 = choose(s, site_settings(gpu_types=[site.gpu_types[0]])).best
    h200 = choose(s, site_settings(gpu_types=[site.gpu_types[1]])).best
    assert best.cost == min(a40.cost, h200.cost)
    assert best.gpu_type.name == ("a40" if a40.cost < h200.cost else "h200")


def test_fixed_gpu_count_spans_nodes():
    b = choose(spec(LLAMA + " zero=3 gpus=16")).best
    assert (b.n_gpus, b.nodes, b.gpus_per_node, b.gpu_type.name) == (16, 2, 8, "a100")
    b = choose(spec(LLAMA + " zero=3 gpus=12")).best
    assert (b.nodes, b.gpus_per_node) == (2, 6)  # even split on the fewest nodes


def test_layouts_spread_evenly():
    assert layouts(4, 2, None) == [(1, 1), (1, 2), (1, 3), (1, 4), (2, 1), (2, 2), (2, 3), (2, 4)]
    assert layouts(8, 4, 12) == [(2, 6), (3, 4), (4, 3)]
    assert layouts(8, 1, 12) == []


def test_site_limits_and_unknown_type():
    s = spec(LLAMA + " zero=3 gpus=16")
    c = choose(s, site_max_nodes={"a100": 1, "h100": 0})
    assert c.best is None and "gpus=16 cannot be placed" in c.error
    c = choose(spec(LLAMA + " gpu_type=v100"))
    assert c.best is None and c.error == "gpu_type=v100 is not configured (configured: a100, h100)"
    c = choose(spec(LLAMA), site_settings(gpu_types=[]))
    assert "no GPU types are configured" in c.error


def test_nothing_fits_names_the_nearest():
    s = spec("params=175e9 layers=96 hidden=12288 heads=96 seq_len=2048 zero=2")
    c = choose(s)
    assert c.best is None and c.closest is not None
    assert c.error.startswith("no configured GPU fits: the nearest, 64 x a100 at zero=2, needs ")
    assert "of 80 GiB" in c.error and "try zero=auto" in c.error


def test_offload_restricts_stages():
    s = spec(LLAMA + " zero=auto offload=optimizer")
    stages = {c.stage for c in choose(s).fitting}
    assert stages <= {1, 2, 3} and stages
    s = spec(LLAMA + " zero=auto offload=all")
    assert {c.stage for c in choose(s).fitting} == {3}


def test_observed_peaks_override_the_formula():
    s = spec(LLAMA + " zero=3")
    formula = choose(s).best
    smaller = formula.n_gpus // 2
    # a recorded run on half the GPUs peaked at 60 GiB: the formula still says it does not fit, and the
    # larger of the two rules (#47), so the formula's choice stays
    obs = [PeakObservation(peak_bytes=60 * GIB, n_gpus=smaller, zero=3)]
    b = choose(s, observations=obs).best
    assert (b.n_gpus, b.need) == (formula.n_gpus, formula.need)
    # a completed run of the formula's choice that peaked above what fits with the margin moves harp on
    obs = [PeakObservation(peak_bytes=78 * GIB, n_gpus=formula.n_gpus, zero=3)]
    b = choose(s, observations=obs).best
    assert b.n_gpus > formula.n_gpus
    # a run killed for GPU memory at the formula's choice pushes harp past it
    oom = [PeakObservation(peak_bytes=79 * GIB, n_gpus=formula.n_gpus, zero=3, oom=True)]
    b = choose(s, observations=oom).best
    assert b.n_gpus > formula.n_gpus
