"""Parameter counts from real Hugging Face configs match the published model sizes.

The fixtures under tests/fixtures/hf_configs/ are the models' config.json files
with their real field values.  The exact counts are what
``model.num_parameters()`` reports for these architectures (tied weights once);
the rounded ones are the sizes the model cards publish.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harpd.dnn.errors import DnnError
from harpd.dnn.params import count_params, shape_from_config

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "hf_configs"


def load(name: str) -> dict:
    return json.loads((FIX / f"{name}.json").read_text())


@pytest.mark.parametrize(
    "name, exact, published, unit",
    [
        ("gpt2", 124_439_808, 124, 1e6),
        ("gpt2-medium", 354_823_168, 355, 1e6),
        ("bert-base-uncased", 109_514_298, 110, 1e6),  # BertForMaskedLM: MLM head, no pooler
        ("llama-2-7b", 6_738_415_616, 6.74, 1e9),
        ("mistral-7b-v0.1", 7_241_732_096, 7.24, 1e9),
    ],
)
def test_counts_match_published_sizes(name, exact, published, unit):
    n = count_params(load(name))
    assert n == exact
    assert round(n / unit, 2 if unit == 1e9 else 0) == published


def test_bert_backbone_is_the_110m_of_the_paper():
    cfg = load("bert-base-uncased")
    cfg["architectures"] = ["BertModel"]  # encoder + pooler, the BERT paper's 110M
    assert count_params(cfg) == 109_482_240


def test_shape_numbers_come_from_the_config():
    s = shape_from_config(load("llama-2-7b"))
    assert (s.family, s.layers, s.hidden, s.heads, s.vocab, s.max_positions) == ("llama", 32, 4096, 32, 32000, 4096)
    # DeepSpeed's largest_layer_params: the 32000 x 4096 embedding (and lm_head)
    assert s.largest_layer == 32000 * 4096
    g = shape_from_config(load("gpt2"))
    assert g.largest_layer == 50257 * 768 and g.max_positions == 1024


def test_grouped_query_attention_shrinks_k_and_v():
    mistral = load("mistral-7b-v0.1")
    full = dict(mistral, num_key_value_heads=32)
    # 32 layers x (k + v) x 4096 x (4096 - 1024)
    assert count_params(full) - count_params(mistral) == 32 * 2 * 4096 * (4096 - 1024)


def test_tied_embeddings_are_counted_once():
    llama = load("llama-2-7b")
    tied = dict(llama, tie_word_embeddings=True)
    assert count_params(llama) - count_params(tied) == 32000 * 4096


def test_qwen2_has_qkv_biases_and_mixtral_multiplies_the_mlp():
    llama = load("llama-2-7b")
    qwen = dict(llama, model_type="qwen2")
    assert count_params(qwen) - count_params(llama) == 32 * (4096 * 3)  # q, k, v biases (32 heads x 128)
    mixtral = dict(load("mistral-7b-v0.1"), model_type="mixtral", num_local_experts=8)
    dense = count_params(load("mistral-7b-v0.1"))
    per_layer_mlp = 3 * 4096 * 14336
    assert count_params(mixtral) - dense == 32 * (7 * per_layer_mlp + 4096 * 8)
    # Mixtral-8x7B's published total is 46.7B
    assert round(count_params(mixtral) / 1e9, 1) == 46.7


def test_roberta_base():
    cfg = dict(
        load("bert-base-uncased"),
        model_type="roberta",
        vocab_size=50265,
        max_position_embeddings=514,
        type_vocab_size=1,
        architectures=["RobertaModel"],
    )
    assert count_params(cfg) == 124_645_632  # roberta-base, as published


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c: c.pop("model_type"), "no 'model_type'"),
        (lambda c: c.update(model_type="t5"), "model_type 't5' is not one harp can count"),
        (lambda c: c.pop("n_embd"), "'n_embd' is missing"),
        (lambda c: c.update(n_layer=-1), "'n_layer' must be a positive integer"),
        (lambda c: c.update(n_head="12"), "'n_head' must be a positive integer"),
    ],
)
def test_bad_configs_name_the_field(mutate, message):
    cfg = load("gpt2")
    mutate(cfg)
    with pytest.raises(DnnError, match=message):
        count_params(cfg)
