"""Each activation term against the arithmetic of the source line it comes from.

Bytes per token (``per="token"``) or per eager attention score; h hidden, a heads,
f the MLP's inner width, V the vocabulary.  The sources are named in each term's
docstring (harpd/dnn/activation_terms.py) and the table in docs/dnn.md.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from dnn_helpers import HF

from harpd.dnn.activation_terms import (
    LLAMA_BLOCK,
    Block,
    Layout,
    attention_inputs,
    attention_logsumexp,
    attention_output,
    attention_scores,
    cached_loss_block,
    checkpoint_input,
    final_norm_and_head_input,
    layer_bytes,
    layer_terms,
    linear_inputs,
    loss_logits,
    mlp_saved,
    norm_saved,
    output_terms,
    residual_dropout_masks,
)
from harpd.dnn.errors import DnnError
from harpd.dnn.params import shape_from_config
from harpd.dnn.spec import build_spec
from harpd.dnn.zero import StateLayout, activation_bytes, estimate, layout_of, model_states

H, A, F, V, S = 768, 12, 3072, 50257, 1024
GPT2 = Layout(hidden=H, heads=A, vocab=V, seq_len=S, block=Block(mlp="gelu_new"))
LLAMA = Layout(
    hidden=2048,
    heads=32,
    vocab=32000,
    seq_len=2048,
    block=dataclasses.replace(LLAMA_BLOCK, kv_heads=4, ffn=5632),
    attention="flash",
)


def _w(x: Layout, **kw) -> Layout:
    """The layout with some fields changed; block fields (mlp=, dropout=, ...) go to its block."""
    block_keys = {k: kw.pop(k) for k in list(kw) if k in {f.name for f in dataclasses.fields(Block)}}
    return dataclasses.replace(x, block=dataclasses.replace(x.block, **block_keys), **kw)


# ---------------------------------------------------------------- one term each


def test_norm_saved_layernorm_keeps_its_input_in_the_stream_dtype():
    # native_layer_norm saves input: fp32 stream under autocast, bf16 with 16-bit weights
    assert norm_saved(GPT2) == 2 * 4 * H
    assert norm_saved(_w(GPT2, mixed="weights")) == 2 * 2 * H
    assert norm_saved(_w(GPT2, precision="fp32")) == 2 * 4 * H


def test_norm_saved_rmsnorm_keeps_the_fp32_input_and_the_normalised_tensor():
    # LlamaRMSNorm: hidden.to(float32) saved by pow/mul (4), weight * hidden.to(input_dtype) saves the stream dtype
    assert norm_saved(LLAMA) == 2 * (4 + 4) * 2048
    assert norm_saved(_w(LLAMA, mixed="weights")) == 2 * (4 + 2) * 2048


def test_linear_inputs_autocast_casts_once_per_reading_linear():
    assert linear_inputs(GPT2) == (1 + 1) * 2 * H  # c_attn, c_fc
    assert linear_inputs(LLAMA) == (3 + 2) * 2 * 2048  # q, k, v, gate, up
    # 16-bit weights: the norm's output is one tensor all readers share
    assert linear_inputs(_w(LLAMA, mixed="weights")) == 2 * 2 * 2048
    assert linear_inputs(_w(GPT2, precision="fp32")) == 2 * 4 * H


def test_attention_inputs_follow_grouped_query_heads_only_in_the_kernel():
    assert attention_inputs(_w(GPT2, attention="flash")) == 2 * H * 3  # q, k, v views of c_attn's output
    assert attention_inputs(LLAMA) == 2 * 2048 * (1 + 2 * 4 / 32)  # enable_gqa: k, v with 4 of 32 heads
    assert attention_inputs(_w(LLAMA, attention="eager")) == 2 * 2048 * 3  # repeat_kv before matmul


def test_attention_output_and_logsumexp():
    assert attention_output(_w(GPT2, attention="flash")) == 2 * H + 2 * H  # SDPA's output + contiguous copy
    assert attention_output(GPT2) == 2 * H
    assert attention_logsumexp(LLAMA) == 4 * 32
    assert attention_logsumexp(GPT2) == 0


def test_residual_dropout_masks_are_one_byte_and_absent_at_p_zero():
    assert residual_dropout_masks(GPT2) == 2 * H
    assert residual_dropout_masks(LLAMA) == 0


def test_mlp_saved_by_activation():
    # gelu_new under autocast: pow's fp32 input, tanh result, 1+tanh (fp32), 0.5*x and c_proj's input (bf16)
    assert mlp_saved(GPT2) == (3 * 4 + 2 * 2) * F
    assert mlp_saved(_w(GPT2, mixed="weights")) == 5 * 2 * F
    assert mlp_saved(_w(GPT2, precision="fp32")) == 5 * 4 * F
    assert mlp_saved(_w(GPT2, mlp="gelu")) == 2 * 2 * F  # fused F.gelu: input + down's input
    assert mlp_saved(LLAMA) == 4 * 2 * 5632  # gate out, silu out, up out, product


def test_attention_scores_per_score():
    assert attention_scores(GPT2) == 4 + 2 + 1  # fp32 softmax (autocast), bf16 dropout output, bool mask
    assert attention_scores(_w(GPT2, mixed="weights")) == 2 + 2 + 1  # Korthikanti's 5
    assert attention_scores(_w(LLAMA, attention="eager")) == 4 + 2  # softmax(dtype=float32), .to() copy, p=0
    assert attention_scores(_w(LLAMA, attention="eager", mixed="weights")) == 4 + 2
    assert attention_scores(_w(LLAMA, attention="eager", precision="fp32")) == 4  # one tensor, no dropout
    assert attention_scores(_w(GPT2, attention="flash")) == 0


def test_output_terms():
    assert checkpoint_input(GPT2) == 4 * H and checkpoint_input(_w(GPT2, mixed="weights")) == 2 * H
    assert final_norm_and_head_input(GPT2) == 4 * H + 2 * H + H  # ln_f input, lm_head input, embedding mask
    # ForCausalLMLoss: logits.float(); log_softmax result + nll grad + log_softmax grad, all fp32
    assert loss_logits(GPT2) == 12 * V
    assert loss_logits(_w(GPT2, precision="fp32")) == 12 * V
    assert cached_loss_block(GPT2) == 4 * V  # one more fp32 logits-sized block cached at step 2


# ---------------------------------------------------------------- the terms together


def test_sixteen_bit_gpt_block_is_korthikantis_count():
    """Fused GELU, 16-bit weights, dropout: the terms add up to 34·s·b·h + 5·a·s²·b (Korthikanti Table 2)."""
    x = _w(GPT2, mlp="gelu", mixed="weights")
    b = 2
    assert layer_bytes(x, b) == S * b * H * (34 + 5 * A * S / H)


def test_gpt2_autocast_block_with_sdpa():
    x = _w(GPT2, attention="flash")
    per_token = sum(t.bytes for t in layer_terms(x))
    assert per_token == 88 * H + 4 * A  # 8 norms + 4 casts + 6 qkv + 4 output + 2 masks + 64 gelu_new


def test_every_term_names_its_source():
    for t in layer_terms(GPT2) + output_terms(GPT2):
        assert t.source and t.per in ("token", "score")


def test_recomputation_keeps_block_inputs_and_one_block():
    full = activation_bytes(GPT2, layers=12, micro_batch=2, recompute="full")
    assert full.per_layer == 4 * H * S * 2 and full.recompute_working == layer_bytes(GPT2, 2)
    sel = activation_bytes(GPT2, layers=12, micro_batch=2, recompute="selective")
    assert sel.per_layer == layer_bytes(_w(GPT2, attention="flash"), 2)
    with pytest.raises(DnnError, match="recompute must be"):
        activation_bytes(GPT2, layers=1, micro_batch=1, recompute="some")


def test_bad_layout_values_are_refused():
    with pytest.raises(DnnError, match="mixed must be"):
        _w(GPT2, mixed="fp8")
    with pytest.raises(DnnError, match="mlp must be"):
        Block(mlp="relu2")
    with pytest.raises(DnnError, match="norm must be"):
        Block(norm="batchnorm")


# ---------------------------------------------------------------- model states by layout


def test_autocast_states_fp32_weights_grads_adam_and_16bit_copies():
    psi = 1_000_000
    s = model_states(psi, 0, 1, StateLayout(precision="bf16", mixed="autocast"))
    assert (s.params, s.grads, s.optimizer, s.cast_copies) == (4 * psi, 4 * psi, 8 * psi, 2 * psi)
    # full recomputation: autograd keeps no cast copy; the cache ends with the autocast region
    assert model_states(psi, 0, 1, StateLayout(mixed="autocast", recompute="full")).cast_copies == 0
    s2 = model_states(psi, 2, 4, StateLayout(mixed="autocast"))
    assert (s2.params, s2.grads, s2.optimizer) == (4 * psi, psi, 2 * psi)


def test_weights_states_add_fp32_gradients_at_every_stage():
    psi = 1_000_000
    s = model_states(psi, 0, 1, StateLayout(precision="bf16", mixed="weights"))
    assert (s.params, s.grads, s.optimizer, s.cast_copies) == (2 * psi, 2 * psi, 16 * psi, 0)
    with pytest.raises(DnnError, match="mixed must be"):
        model_states(psi, 0, 1, StateLayout(mixed="half"))


# ---------------------------------------------------------------- from a config and a spec


def test_config_blocks():
    gpt2 = shape_from_config(json.loads((HF / "gpt2.json").read_text())).block
    assert gpt2 == Block(kv_heads=12, ffn=3072, mlp="gelu_new", dropout=True)
    mistral = shape_from_config(json.loads((HF / "mistral-7b-v0.1.json").read_text())).block
    assert mistral == dataclasses.replace(LLAMA_BLOCK, kv_heads=8, ffn=14336)
    assert mistral.softmax_fp32 and not mistral.dropout and mistral.mlp_in_linears == 2
    bert = shape_from_config(json.loads((HF / "bert-base-uncased.json").read_text())).block
    assert (bert.mlp, bert.qkv_linears, bert.dropout) == ("gelu", 3, True)


def test_spec_layout_follows_the_stage_unless_mixed_is_written():
    spec = build_spec({"config": str(HF / "llama-2-7b.json"), "seq_len": "2048"})
    assert spec.mixed is None
    assert layout_of(spec, 0).mixed == "autocast" and layout_of(spec, 2).mixed == "weights"
    fixed = build_spec({"config": str(HF / "llama-2-7b.json"), "seq_len": "2048", "mixed": "weights"})
    assert layout_of(fixed, 0).mixed == "weights"
    e0, e2 = estimate(spec, 1, 0), estimate(fixed, 1, 0)
    assert e0.states.cast_copies == 2 * spec.params and e2.states.cast_copies == 0
