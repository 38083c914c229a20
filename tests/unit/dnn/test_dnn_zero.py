"""The memory model against published numbers.

Golden figures, not recomputed here: the ZeRO paper's worked example (§5,
Ψ = 7.5e9, N_d = 64: 120, 31.4, 16.6, 1.9 GB for stages 0-3) and the outputs
DeepSpeed prints in its own documentation (docs/code-docs/source/memory.rst:
t5-3b on 8 GPUs, t5-large on 4 GPUs) and a user's published run of t5-small.
"""

from __future__ import annotations

import pytest

from harpd.dnn.errors import DnnError
from harpd.dnn.spec import DnnSpec
from harpd.dnn.zero import (
    GIB,
    StateLayout,
    deepspeed_zero2_estimate,
    deepspeed_zero3_estimate,
    estimate,
    host_bytes_per_node,
    korthikanti_activation_bytes,
    model_states,
    optimizer_state_bytes,
)

# ---------------------------------------------------------------- ZeRO paper


@pytest.mark.parametrize("stage, gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_worked_example(stage, gb):
    s = model_states(int(7.5e9), stage, 64, StateLayout(optimizer="adam", precision="fp16", accounting="paper"))
    assert round(s.gpu / 1e9, 1) == gb


def test_paper_k_is_12_for_mixed_precision_adam():
    assert optimizer_state_bytes("adam", "bf16") == 12
    assert optimizer_state_bytes("adamw", "fp16") == 12


def test_other_optimizers_and_fp32_hold_less_state():
    assert optimizer_state_bytes("sgd", "bf16") == 8  # fp32 master + momentum
    assert optimizer_state_bytes("sgd", "bf16", momentum=False) == 4
    assert optimizer_state_bytes("adamw", "fp32") == 8  # no separate master copy
    assert optimizer_state_bytes("sgd", "fp32") == 4
    assert optimizer_state_bytes("sgd", "fp32", momentum=False) == 0
    psi = 1_000_000
    fp32 = model_states(psi, 0, 1, StateLayout(optimizer="adamw", precision="fp32"))
    assert (fp32.params, fp32.grads, fp32.optimizer) == (4 * psi, 4 * psi, 8 * psi)
    sgd = model_states(psi, 0, 1, StateLayout(optimizer="sgd", precision="bf16", accounting="paper"))
    assert sgd.gpu == (2 + 2 + 8) * psi
    # harp: + the fp32 gradients the master copy steps from (DeepSpeed BF16_Optimizer, Megatron main_grad)
    assert model_states(psi, 0, 1, StateLayout(optimizer="sgd", precision="bf16")).gpu == (2 + 2 + 8 + 4) * psi


# ---------------------------------------------------------------- DeepSpeed, published outputs


def _gb(b: float) -> float:
    return round(b / 2**30, 2)  # DeepSpeed prints GiB labelled "GB", two decimals


def test_deepspeed_zero3_cold_t5_3b_table():
    """memory.rst: estimate_zero3_model_states_mem_needs_all_cold(2851e6, 32e6, 8 GPUs, 1 node)."""
    rows = [  # (offload_param, offload_optimizer, zero_init) -> (per CPU, per GPU)
        ((True, True, True), (71.69, 0.12)),
        ((True, True, False), (127.45, 0.12)),
        ((False, True, True), (63.72, 0.78)),
        ((False, True, False), (127.45, 0.78)),
        ((False, False, True), (1.43, 6.09)),
        ((False, False, False), (127.45, 6.09)),
    ]
    for (off_p, off_o, zinit), (cpu, gpu) in rows:
        c, g, _ = deepspeed_zero3_estimate(
            2851e6, 32e6, num_gpus_per_node=8, num_nodes=1, cpu_offload=off_o, cpu_offload_params=off_p, zero_init=zinit
        )
        assert (_gb(c), _gb(g)) == (cpu, gpu), (off_p, off_o, zinit)


def test_deepspeed_zero3_t5_small_single_gpu():
    """A published run on t5-small (60,506,624 params, largest layer the 32128 x 512 embedding)."""
    total, largest = 60_506_624, 32128 * 512
    rows = [
        ((True, True, True), (1.52, 0.06)),
        ((False, True, True), (1.35, 0.17)),
        ((False, False, True), (0.09, 1.08)),
        ((False, False, False), (0.34, 1.08)),
    ]
    for (off_p, off_o, zinit), (cpu, gpu) in rows:
        c, g, _ = deepspeed_zero3_estimate(total, largest, 1, 1, off_o, off_p, zinit)
        assert (_gb(c), _gb(g)) == (cpu, gpu)


def test_deepspeed_zero3_t5_large_cases():
    """memory.rst's worked t5-large example on 4 GPUs, in MiB (>>20)."""
    total, largest = 737_668_096, 32128 * 1024  # "737.67M", "32.90M"
    _, case1, layer = deepspeed_zero3_estimate(total, largest, 4, 1, cpu_offload=False)
    _, case2, _ = deepspeed_zero3_estimate(total, largest, 4, 1, cpu_offload=True, cpu_offload_params=True)
    _, case3, _ = deepspeed_zero3_estimate(total, largest, 4, 1, cpu_offload=True, cpu_offload_params=False)
    assert (int(layer) >> 20, case1 >> 20, case2 >> 20, case3 >> 20) == (125, 3291, 125, 477)


def test_deepspeed_zero2_t5_3b():
    """memory.rst prints 127.45 GB per CPU and 5.31 GB per GPU with offload (cold, 2851e6 params)."""
    cpu, gpu = deepspeed_zero2_estimate(2851e6, 8, 1, cpu_offload=True)
    assert (_gb(cpu), _gb(gpu)) == (127.45, 5.31)
    cpu, gpu = deepspeed_zero2_estimate(2851e6, 8, 1, cpu_offload=False)
    assert _gb(cpu) == 127.45
    # The page's 15.93 GB is the older 4Ψ + 16Ψ/N; the current code is 2Ψ + 18Ψ/N.
    assert gpu == 2 * 2851e6 + int(18 * 2851e6 / 8)
    assert _gb(4 * 2851e6 + 16 * 2851e6 / 8) == 15.93


# ---------------------------------------------------------------- harp accounting vs DeepSpeed


@pytest.mark.parametrize("psi, n", [(2851e6, 8), (7e9, 64), (124_439_808, 1), (6_738_415_616, 16)])
def test_harp_stage2_is_deepspeeds_arithmetic(psi, n):
    ours = model_states(int(psi), 2, n, StateLayout(optimizer="adamw", precision="bf16"))
    _, theirs = deepspeed_zero2_estimate(int(psi), n, 1, cpu_offload=False)
    assert ours.gpu == pytest.approx(theirs, abs=1)
    off = model_states(int(psi), 2, n, StateLayout(offload_optimizer=True))
    _, theirs_off = deepspeed_zero2_estimate(int(psi), n, 1, cpu_offload=True)
    assert off.gpu == theirs_off


@pytest.mark.parametrize("psi, layer, n", [(2851e6, 32e6, 8), (6_738_415_616, 131_072_000, 32)])
def test_harp_stage3_keeps_the_16bit_grad_partition_deepspeed_leaves_out(psi, layer, n):
    psi, layer = int(psi), int(layer)
    ours = model_states(psi, 3, n, StateLayout(largest_layer=layer))
    _, theirs, _ = deepspeed_zero3_estimate(psi, layer, n, 1, cpu_offload=False)
    assert ours.gpu - theirs == pytest.approx(2 * psi / n, abs=1)
    # with offload the GPU side is identical to DeepSpeed's
    opt = model_states(psi, 3, n, StateLayout(largest_layer=layer, offload_optimizer=True))
    _, theirs, _ = deepspeed_zero3_estimate(psi, layer, n, 1, cpu_offload=True, cpu_offload_params=False)
    assert opt.gpu == pytest.approx(theirs, abs=1)
    both = model_states(psi, 3, n, StateLayout(largest_layer=layer, offload_optimizer=True, offload_param=True))
    _, theirs, _ = deepspeed_zero3_estimate(psi, layer, n, 1, cpu_offload=True, cpu_offload_params=True)
    assert both.gpu == theirs


def test_harp_host_memory_matches_deepspeed_on_one_node():
    psi, layer = 2_851_000_000, 32_000_000
    for off_p in (True, False):
        s = model_states(psi, 3, 8, StateLayout(largest_layer=layer, offload_optimizer=True, offload_param=off_p))
        cpu, _, _ = deepspeed_zero3_estimate(psi, layer, 8, 1, cpu_offload=True, cpu_offload_params=off_p)
        assert host_bytes_per_node(s, psi, 3, 8) == pytest.approx(cpu, abs=2)
    s = model_states(psi, 2, 8, StateLayout(offload_optimizer=True))
    cpu, _ = deepspeed_zero2_estimate(psi, 8, 1, cpu_offload=True)
    assert host_bytes_per_node(s, psi, 2, 8) == pytest.approx(cpu, abs=2)


def test_stage1_keeps_full_gradients():
    psi = 10**9
    s1 = model_states(psi, 1, 8)
    assert s1.gpu == 4 * psi + 16 * psi / 8


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(stage=4), "stage must be 0-3"),
        (dict(stage=2, layout=StateLayout(offload_param=True)), "parameter offload needs ZeRO stage 3"),
        (dict(stage=0, layout=StateLayout(offload_optimizer=True)), "optimizer offload needs"),
        (dict(stage=1, n_dp=0), "at least 1"),
    ],
)
def test_impossible_setups_are_refused(kw, message):
    args = dict(params=10**6, stage=1, n_dp=2)
    args.update(kw)
    with pytest.raises(DnnError, match=message):
        model_states(**args)


# ---------------------------------------------------------------- activations


def test_korthikanti_per_layer_terms():
    """accounting=paper keeps Korthikanti et al.'s count."""
    s, b, h, a = 2048, 4, 4096, 32
    kw = dict(layers=32, hidden=h, heads=a, seq_len=s, micro_batch=b, vocab=0)
    none = korthikanti_activation_bytes(**kw)
    assert none.per_layer == s * b * h * (34 + 5 * a * s / h)
    flash = korthikanti_activation_bytes(**kw, attention="flash")
    sel = korthikanti_activation_bytes(**kw, recompute="selective")
    assert flash.per_layer == sel.per_layer == 34 * s * b * h
    full = korthikanti_activation_bytes(**kw, recompute="full")
    assert full.per_layer == 2 * s * b * h
    assert full.recompute_working == none.per_layer  # one layer rebuilt at a time
    assert full.total < sel.total < none.total
    fp32 = korthikanti_activation_bytes(**kw, precision="fp32")
    assert fp32.total == 2 * none.total


def test_output_layer_grows_with_the_vocabulary():
    kw = dict(layers=12, hidden=768, heads=12, seq_len=1024, micro_batch=2)
    small = korthikanti_activation_bytes(**kw, vocab=1000)
    big = korthikanti_activation_bytes(**kw, vocab=51000)
    assert big.output - small.output == 50000 * 1024 * 2 * 10  # 4 (fp32 logits) + 6 (HF copies)


def _spec(**kw) -> DnnSpec:
    base = dict(
        params=124_439_808,
        layers=12,
        hidden=768,
        heads=12,
        vocab=50257,
        seq_len=1024,
        micro_batch=4,
        largest_layer=50257 * 768,
    )
    base.update(kw)
    return DnnSpec(**base)


def test_estimate_adds_context_distributed_and_margin():
    one = estimate(_spec(), 1, 0, cuda_context_gb=0.5, distributed_overhead_gb=1.0, margin=0.1)
    two = estimate(_spec(), 2, 0, cuda_context_gb=0.5, distributed_overhead_gb=1.0, margin=0.1)
    assert one.distributed == 0 and two.distributed == GIB
    assert two.total - one.total == pytest.approx(GIB)
    assert one.need == pytest.approx(one.total * 1.1)
    assert one.total == pytest.approx(one.states.gpu + one.activations.total + 0.5 * GIB)
    assert one.host_per_node == 0


def test_estimate_host_memory_only_when_offloading():
    e = estimate(_spec(offload_optimizer=True), 4, 2, gpus_per_node=4)
    psi = 124_439_808
    # the four ranks' start-up fp32 copies (4 x 4 bytes) beat the offloaded 16/4 bytes each
    assert e.host_per_node == pytest.approx(1.5 * 4 * psi * 4)
    assert e.states.gpu == 2 * psi
