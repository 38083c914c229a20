"""Parameter counts (and the other shape numbers harp needs) from a Hugging Face config.

Users know their model by its ``config.json``, not by its parameter count, and
the count decides everything downstream (model states are bytes-per-parameter
times the count), so the count must be exact for the common families: GPT-2,
LLaMA-style decoders (LLaMA, Mistral, Qwen2, Mixtral) and BERT-style encoders
(BERT, RoBERTa).  Counts follow the ``architectures`` entry: a ``*ForCausalLM``
has an output head unless ``tie_word_embeddings`` shares it with the input
embedding (a tied weight is counted once, as ``model.num_parameters()`` does).

``largest_layer`` is DeepSpeed's ``largest_layer_params``: the biggest single
module's own parameters (an embedding or one linear layer).  ZeRO-3 gathers one
such module at a time, so it sets the stage-3 working set on the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from harpd.dnn.activation_terms import LLAMA_BLOCK, Block
from harpd.dnn.errors import DnnError

GPT2_TYPES = frozenset({"gpt2"})
LLAMA_TYPES = frozenset({"llama", "mistral", "qwen2", "mixtral"})
BERT_TYPES = frozenset({"bert", "roberta"})
SUPPORTED_TYPES = GPT2_TYPES | LLAMA_TYPES | BERT_TYPES


@dataclass(frozen=True)
class ModelShape:
    """What the memory model needs to know about a network."""

    family: str  # "gpt2" | "llama" | "bert"
    model_type: str
    params: int
    layers: int
    hidden: int
    heads: int
    vocab: int
    max_positions: int | None
    largest_layer: int
    block: Block = field(default_factory=Block)  # what the activation terms need (harpd.dnn.activation_terms)


# HF ACT2FN names whose activation is one fused op (saves its input only) vs a Python
# formula of several ops (transformers activations.py: NewGELUActivation, FastGELUActivation,
# QuickGELUActivation), counted as gelu_new.
_FUSED_ACTS = frozenset({"gelu", "gelu_pytorch_tanh", "relu", "silu", "swish", "gelu_python_tanh"})


def _prob(cfg: dict[str, Any], key: str, default: float) -> float:
    v = cfg.get(key, default)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def _int(cfg: dict[str, Any], key: str, model_type: str, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if value is None:
        raise DnnError(
            f"config.json: '{key}' is missing for a {model_type} model; "
            "add it or describe the model with params= layers= hidden= heads="
        )
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise DnnError(f"config.json: '{key}' must be a positive integer, not {value!r}")
    return value


def _architecture(cfg: dict[str, Any]) -> str:
    arch = cfg.get("architectures")
    if isinstance(arch, list) and arch and isinstance(arch[0], str):
        return arch[0]
    return ""


def _num_labels(cfg: dict[str, Any]) -> int:
    id2label = cfg.get("id2label")
    if isinstance(id2label, dict) and id2label:
        return len(id2label)
    n = cfg.get("num_labels", 2)
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 2


def _gpt2(cfg: dict[str, Any], mt: str) -> ModelShape:
    h = _int(cfg, "n_embd", mt)
    n_layer = _int(cfg, "n_layer", mt)
    heads = _int(cfg, "n_head", mt)
    vocab = _int(cfg, "vocab_size", mt)
    positions = _int(cfg, "n_positions", mt)
    inner = cfg.get("n_inner") or 4 * h
    if not isinstance(inner, int) or inner <= 0:
        raise DnnError(f"config.json: 'n_inner' must be a positive integer, not {inner!r}")
    # GPT-2's Conv1D layers all carry a bias; its two LayerNorms per block too.
    attn = (h * 3 * h + 3 * h) + (h * h + h)
    mlp = (h * inner + inner) + (inner * h + h)
    per_layer = attn + mlp + 2 * (2 * h)
    params = vocab * h + positions * h + n_layer * per_layer + 2 * h
    arch = _architecture(cfg)
    if arch.endswith("ForSequenceClassification"):
        params += h * _num_labels(cfg)  # score head, no bias
    # GPT2LMHeadModel's lm_head is tied to wte: counted once.
    largest = max(vocab * h, positions * h, h * 3 * h + 3 * h, h * inner + inner)
    act = str(cfg.get("activation_function", "gelu_new"))
    drop = max(_prob(cfg, "attn_pdrop", 0.1), _prob(cfg, "resid_pdrop", 0.1)) > 0
    kind = "gelu" if act in _FUSED_ACTS else "gelu_new"
    block = Block(kv_heads=heads, ffn=inner, mlp=kind, dropout=drop)
    return ModelShape("gpt2", mt, params, n_layer, h, heads, vocab, positions, largest, block)


def _llama(cfg: dict[str, Any], mt: str) -> ModelShape:
    h = _int(cfg, "hidden_size", mt)
    n_layer = _int(cfg, "num_hidden_layers", mt)
    heads = _int(cfg, "num_attention_heads", mt)
    kv = _int(cfg, "num_key_value_heads", mt, default=heads)
    inter = _int(cfg, "intermediate_size", mt)
    vocab = _int(cfg, "vocab_size", mt)
    head_dim = cfg.get("head_dim") or h // heads
    if not isinstance(head_dim, int) or head_dim <= 0:
        raise DnnError(f"config.json: 'head_dim' must be a positive integer, not {head_dim!r}")
    positions = cfg.get("max_position_embeddings")
    positions = positions if isinstance(positions, int) and positions > 0 else None
    # Biases: LLaMA/Mistral have none unless attention_bias/mlp_bias say so;
    # Qwen2 always has q/k/v biases and no o_proj bias.
    attn_bias = bool(cfg.get("attention_bias", False))
    qkv_bias = attn_bias or mt == "qwen2"
    o_bias = attn_bias and mt != "qwen2"
    mlp_bias = bool(cfg.get("mlp_bias", False))
    q = h * heads * head_dim + (heads * head_dim if qkv_bias else 0)
    k = h * kv * head_dim + (kv * head_dim if qkv_bias else 0)
    o = heads * head_dim * h + (h if o_bias else 0)
    expert = 3 * h * inter + ((2 * inter + h) if mlp_bias else 0)
    if mt == "mixtral":
        n_experts = _int(cfg, "num_local_experts", mt)
        mlp = n_experts * expert + h * n_experts  # experts + router (no bias)
    else:
        mlp = expert
    per_layer = q + 2 * k + o + mlp + 2 * h  # two RMSNorms
    embed = vocab * h
    arch = _architecture(cfg)
    has_head = arch.endswith("ForCausalLM") or not arch
    tied = bool(cfg.get("tie_word_embeddings", False))
    head = vocab * h if has_head and not tied else 0
    if arch.endswith("ForSequenceClassification"):
        head = h * _num_labels(cfg)
    params = embed + n_layer * per_layer + h + head
    largest = max(embed, q, o, h * inter + (inter if mlp_bias else 0))
    # Mixtral routes each token through num_experts_per_tok experts: their inner tensors are kept
    active = _int(cfg, "num_experts_per_tok", mt, default=2) if mt == "mixtral" else 1
    drop = _prob(cfg, "attention_dropout", 0.0) > 0
    block = replace(LLAMA_BLOCK, kv_heads=kv, ffn=inter * active, dropout=drop)
    return ModelShape("llama", mt, params, n_layer, h, heads, vocab, positions, largest, block)


def _bert(cfg: dict[str, Any], mt: str) -> ModelShape:
    h = _int(cfg, "hidden_size", mt)
    n_layer = _int(cfg, "num_hidden_layers", mt)
    heads = _int(cfg, "num_attention_heads", mt)
    inter = _int(cfg, "intermediate_size", mt)
    vocab = _int(cfg, "vocab_size", mt)
    positions = _int(cfg, "max_position_embeddings", mt)
    type_vocab = cfg.get("type_vocab_size", 2)
    if not isinstance(type_vocab, int) or type_vocab < 0:
        raise DnnError(f"config.json: 'type_vocab_size' must be an integer, not {type_vocab!r}")
    embeddings = vocab * h + positions * h + type_vocab * h + 2 * h
    per_layer = 4 * (h * h + h) + 2 * h + (h * inter + inter) + (inter * h + h) + 2 * h
    pooler = h * h + h
    lm_head = (h * h + h) + 2 * h + vocab  # transform + LayerNorm + decoder bias (weight tied)
    arch = _architecture(cfg)
    if arch.endswith("ForMaskedLM"):
        heads_params = lm_head  # no pooler
    elif arch.endswith("ForPreTraining"):
        heads_params = pooler + lm_head + (2 * h + 2)  # + next-sentence head
    elif arch.endswith("ForSequenceClassification"):
        n = _num_labels(cfg)
        if mt == "roberta":  # RobertaClassificationHead: dense + out_proj, no pooler
            heads_params = (h * h + h) + (h * n + n)
        else:
            heads_params = pooler + (h * n + n)
    else:  # BertModel / RobertaModel
        heads_params = pooler
    params = embeddings + n_layer * per_layer + heads_params
    largest = max(vocab * h, positions * h, h * inter + inter, inter * h + h)
    act = str(cfg.get("hidden_act", "gelu"))
    drop = max(_prob(cfg, "hidden_dropout_prob", 0.1), _prob(cfg, "attention_probs_dropout_prob", 0.1)) > 0
    kind = "gelu" if act in _FUSED_ACTS else "gelu_new"
    block = Block(kv_heads=heads, ffn=inter, mlp=kind, qkv_linears=3, dropout=drop)
    return ModelShape("bert", mt, params, n_layer, h, heads, vocab, positions, largest, block)


def shape_from_config(cfg: dict[str, Any]) -> ModelShape:
    """Count a Hugging Face config; raise DnnError naming what is missing or unsupported."""
    mt = cfg.get("model_type")
    if not isinstance(mt, str) or not mt:
        raise DnnError("config.json has no 'model_type'; is it a Hugging Face model config?")
    mt = mt.lower()
    if mt in GPT2_TYPES:
        return _gpt2(cfg, mt)
    if mt in LLAMA_TYPES:
        return _llama(cfg, mt)
    if mt in BERT_TYPES:
        return _bert(cfg, mt)
    raise DnnError(
        f"config.json: model_type '{mt}' is not one harp can count "
        f"({', '.join(sorted(SUPPORTED_TYPES))}); "
        "describe the model with params= layers= hidden= heads= instead"
    )


def count_params(cfg: dict[str, Any]) -> int:
    return shape_from_config(cfg).params
