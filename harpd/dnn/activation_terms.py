"""Activation bytes of one training step, term by term, as torch and transformers store them.

What autograd keeps for the backward pass is decided by each operation's
backward formula (``tools/autograd/derivatives.yaml`` in pytorch/pytorch: an op
saves ``self``, ``other`` or ``result``) and by the dtype autocast gives its
output (``aten/src/ATen/autocast_mode.cpp``: matmuls and scaled_dot_product_attention
run in 16 bits; ``pow``, ``rsqrt``, ``softmax``, ``log_softmax``, ``layer_norm``,
``nll_loss`` run in fp32, each casting its input).  The model code is Hugging
Face transformers' (``models/gpt2/modeling_gpt2.py``, ``models/llama/modeling_llama.py``,
``integrations/sdpa_attention.py``, ``activations.py``, ``loss/loss_utils.py``).

Every term below is bytes per token (per sequence position of the micro-batch)
or, for the eager attention matrix, bytes per (token, head, key position).  A
``Layout`` holds what decides them; ``layer_terms`` and ``output_terms`` list the
named terms so the table in docs/dnn.md and the tests read the same numbers.

Dtype sizes of a layout:

- ``act``: a matmul's output (16 bits under mixed precision, 4 bytes in fp32);
- ``resid``: the residual stream.  Under ``mixed=autocast`` the embeddings are
  fp32 weights looked up outside autocast's op list, so the stream stays fp32
  (fp32 + bf16 promotes to fp32 at every residual add); with ``mixed=weights``
  it is 16-bit;
- ``up``: what an op on autocast's fp32 list stores: 4 bytes under autocast, the
  16-bit dtype with 16-bit weights (no autocast: the op runs in its input dtype).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harpd.dnn.errors import DnnError

MIXED_LAYOUTS = ("autocast", "weights")
MLP_KINDS = ("gelu", "gelu_new", "swiglu")
NORM_KINDS = ("layernorm", "rmsnorm")


@dataclass(frozen=True)
class Block:
    """How a transformer block is built, as far as what it stores depends on it.

    The defaults are a GPT-style block with one fused GELU; ``LLAMA_BLOCK`` is
    LLaMA's (Mistral, Qwen2, Mixtral).  0 for ``kv_heads``/``ffn``: heads, 4·hidden.
    """

    kv_heads: int = 0
    ffn: int = 0  # MLP inner width (GPT-2 4h, LLaMA intermediate_size)
    mlp: str = "gelu"  # gelu (one fused op) | gelu_new (HF's tanh formula in Python) | swiglu
    norm: str = "layernorm"  # layernorm | rmsnorm (HF's LlamaRMSNorm in Python)
    qkv_linears: int = 1  # linears reading the first norm's output (GPT-2 c_attn: 1; LLaMA/BERT q,k,v: 3)
    mlp_in_linears: int = 1  # linears reading the second norm's output (GPT-2 c_fc: 1; SwiGLU gate+up: 2)
    dropout: bool = True  # attention-probability and residual dropout active (GPT-2/BERT 0.1; LLaMA 0)
    softmax_fp32: bool = False  # the model asks softmax for fp32 (LLaMA eager: dtype=torch.float32)

    def __post_init__(self) -> None:
        if self.mlp not in MLP_KINDS:
            raise DnnError(f"mlp must be one of {' | '.join(MLP_KINDS)}, not {self.mlp}")
        if self.norm not in NORM_KINDS:
            raise DnnError(f"norm must be one of {' | '.join(NORM_KINDS)}, not {self.norm}")


LLAMA_BLOCK = Block(mlp="swiglu", norm="rmsnorm", qkv_linears=3, mlp_in_linears=2, dropout=False, softmax_fp32=True)


@dataclass(frozen=True)
class Layout:
    """What decides the bytes of the stored tensors: the shape, the block, attention and precision."""

    hidden: int
    heads: int
    vocab: int
    seq_len: int
    block: Block = Block()
    attention: str = "eager"  # eager | flash (SDPA / FlashAttention)
    precision: str = "bf16"  # bf16 | fp16 | fp32
    mixed: str = "autocast"  # autocast | weights (ignored in fp32)

    def __post_init__(self) -> None:
        if self.mixed not in MIXED_LAYOUTS:
            raise DnnError(f"mixed must be one of {' | '.join(MIXED_LAYOUTS)}, not {self.mixed}")

    @property
    def kv_heads(self) -> int:
        return self.block.kv_heads or self.heads

    @property
    def ffn(self) -> int:
        return self.block.ffn or 4 * self.hidden

    @property
    def fp32(self) -> bool:
        return self.precision == "fp32"

    @property
    def autocast(self) -> bool:
        return not self.fp32 and self.mixed == "autocast"

    @property
    def act(self) -> int:
        return 4 if self.fp32 else 2

    @property
    def resid(self) -> int:
        return 2 if (not self.fp32 and self.mixed == "weights") else 4

    @property
    def up(self) -> int:
        return 4 if (self.fp32 or self.autocast) else 2


@dataclass(frozen=True)
class Term:
    """One named tensor (or group) autograd keeps; ``per`` says what it is counted per."""

    name: str
    per: str  # "token" (x s*b) or "score" (x s*b*heads*s: the eager attention matrix)
    bytes: float
    source: str


# ---------------------------------------------------------------- terms of one block


def norm_saved(x: Layout) -> float:
    """Both norms of a block keep their input for the backward pass.

    LayerNorm (``native_layer_norm`` saves ``input``, mean and rstd): ``resid``·h.
    LLaMA's RMSNorm is Python (``modeling_llama.py`` LlamaRMSNorm.forward):
    ``hidden.to(float32)`` (a 4-byte copy unless already fp32), ``pow(2)`` and
    ``hidden * rsqrt(...)`` save that fp32 input, and ``weight * hidden.to(input_dtype)``
    saves the normalised tensor in the stream's dtype: (4 + ``resid``)·h.
    """
    return 2.0 * _per_norm(x)


def _per_norm(x: Layout) -> float:
    return float((x.resid if x.block.norm == "layernorm" else 4 + x.resid) * x.hidden)


def linear_inputs(x: Layout) -> float:
    """The 16-bit input each linear keeps (``mm``/``addmm`` save ``self`` for the weight gradient).

    Under autocast a norm's fp32 output is cast once per linear that reads it
    (autocast caches casts of leaf weights only, never of activations): GPT-2
    casts for c_attn and c_fc (2 copies), LLaMA for q, k, v, gate and up (5).
    Without autocast the linears share the norm's output tensor (one per norm).
    """
    readers = (x.block.qkv_linears + x.block.mlp_in_linears) if x.autocast else 2
    return float(readers * x.act * x.hidden)


def attention_inputs(x: Layout) -> float:
    """q, k, v as the attention kernel keeps them.

    SDPA/flash saves its q, k, v (``_scaled_dot_product_flash_attention`` backward);
    transformers passes k, v with their own ``num_key_value_heads`` (``enable_gqa``,
    ``integrations/sdpa_attention.py`` ``use_gqa_in_sdpa``: torch >= 2.5, no mask).
    Eager attention repeats k, v to all heads (``repeat_kv``) before ``matmul``
    saves them.  Under autocast RoPE makes q, k fp32 (``q * cos`` with fp32 cos) and
    the 16-bit cast for the kernel is what is kept: ``act``·h·(1 + 2·kv/heads).
    """
    kv = x.kv_heads / x.heads if x.attention == "flash" else 1.0
    return x.act * x.hidden * (1.0 + 2.0 * kv)


def attention_output(x: Layout) -> float:
    """The attention result: SDPA keeps its output (``act``·h) for its backward, and
    ``transpose(1, 2).contiguous()`` makes the copy the output projection keeps (``act``·h)."""
    kept_by_kernel = x.act * x.hidden if x.attention == "flash" else 0.0
    return kept_by_kernel + x.act * x.hidden


def attention_logsumexp(x: Layout) -> float:
    """Flash/SDPA keeps one fp32 log-sum-exp per head and token (``logsumexp``, 4 bytes)."""
    return 4.0 * x.heads if x.attention == "flash" else 0.0


def residual_dropout_masks(x: Layout) -> float:
    """``native_dropout`` keeps a 1-byte bool mask; GPT-2/BERT drop after attention and after
    the MLP (``resid_pdrop``/``hidden_dropout_prob`` 0.1).  p = 0 returns the input: no mask."""
    return 2.0 * x.hidden if x.block.dropout else 0.0


def mlp_saved(x: Layout) -> float:
    """The MLP's inner tensors, per inner unit (``ffn``).

    - ``gelu``: one fused ``F.gelu`` saves its input; the down projection saves its output: 2·``act``.
    - ``gelu_new`` (GPT-2's ``NewGELUActivation``, ``activations.py``):
      ``0.5*x*(1+tanh(c*(x+0.044715*pow(x,3))))`` in Python.  ``pow`` is on autocast's
      fp32 list and saves its (cast) input, ``tanh`` saves its result, the last ``mul``
      saves both factors (0.5·x in 16 bits, 1+tanh at ``up``), and c_proj keeps its
      16-bit input: 3·``up`` + 2·``act``.
    - ``swiglu`` (LLaMA ``down(act(gate(x)) * up(x))``): silu saves gate's output, the
      product saves silu's output and up's output, down saves the product: 4·``act``.
    """
    if x.block.mlp == "gelu":
        per_unit = 2.0 * x.act
    elif x.block.mlp == "gelu_new":
        per_unit = 3.0 * x.up + 2.0 * x.act
    else:
        per_unit = 4.0 * x.act
    return per_unit * x.ffn


def attention_scores(x: Layout) -> float:
    """Eager attention's s×s matrix, bytes per score (flash/SDPA keeps none).

    ``softmax`` saves its result: fp32 under autocast (fp32 list) or when the model
    asks for it (LLaMA ``softmax(..., dtype=torch.float32)``), else the 16-bit dtype.
    The probabilities the second ``matmul`` saves are a separate 16-bit tensor when
    the dtype changes (GPT-2 ``.type(value.dtype)``, LLaMA ``.to(query.dtype)`` or
    autocast's cast) or dropout makes a new one; dropout adds its 1-byte mask.
    Autocast GPT-2: 4 + 2 + 1 = 7 (Korthikanti's 16-bit count is 2 + 2 + 1 = 5).
    """
    if x.attention == "flash":
        return 0.0
    softmax = 4.0 if (x.up == 4 or x.block.softmax_fp32) else float(x.act)
    probs = float(x.act) if (softmax != x.act or x.block.dropout) else 0.0
    mask = 1.0 if x.block.dropout else 0.0
    return softmax + probs + mask


LAYER_TERMS: tuple[tuple[str, str, Callable[[Layout], float]], ...] = (
    ("norm_saved", "token", norm_saved),
    ("linear_inputs", "token", linear_inputs),
    ("attention_inputs", "token", attention_inputs),
    ("attention_output", "token", attention_output),
    ("attention_logsumexp", "token", attention_logsumexp),
    ("residual_dropout_masks", "token", residual_dropout_masks),
    ("mlp_saved", "token", mlp_saved),
    ("attention_scores", "score", attention_scores),
)


def layer_terms(x: Layout) -> list[Term]:
    """The named terms of one block, bytes per token (``per="score"``: per s×s score and head)."""
    return [Term(name, per, fn(x), (fn.__doc__ or "").strip().splitlines()[0]) for name, per, fn in LAYER_TERMS]


def layer_bytes(x: Layout, micro_batch: int) -> float:
    """One block's stored activations for a micro-batch."""
    tokens = float(x.seq_len) * micro_batch
    total = 0.0
    for t in layer_terms(x):
        total += t.bytes * tokens * (x.heads * x.seq_len if t.per == "score" else 1)
    return total


# ---------------------------------------------------------------- once per model


def checkpoint_input(x: Layout) -> float:
    """Full recomputation (HF ``gradient_checkpointing_enable``, ``torch.utils.checkpoint``)
    keeps each block's input hidden state only: ``resid``·h per block."""
    return float(x.resid * x.hidden)


def final_norm_and_head_input(x: Layout) -> float:
    """The final norm keeps its input (as ``norm_saved``, one norm) and the LM head its
    16-bit input (``act``·h); GPT-2 also keeps the embedding dropout's 1-byte mask."""
    return _per_norm(x) + x.act * x.hidden + (x.hidden if x.block.dropout else 0.0)


def loss_logits(x: Layout) -> float:
    """The logits and the loss, at their peak: 12·V bytes per token.

    transformers' ``ForCausalLMLoss`` (``loss/loss_utils.py``) upcasts the logits
    (``logits.float()``) before ``cross_entropy``; ``log_softmax`` saves its fp32
    result.  Forward holds the 16-bit logits, the fp32 copy and the log-probabilities
    (``act`` + 4 + 4); the backward of ``nll_loss`` makes a dense fp32 gradient and
    ``_log_softmax_backward_data`` another while the saved result is still alive:
    3 × 4.  The larger is the peak.
    """
    return max(float(x.act) + 8.0, 12.0) * x.vocab


def cached_loss_block(x: Layout) -> float:
    """One more fp32 logits-sized block (4·V) that the caching allocator holds at step 2.

    PyTorch's caching allocator (``c10/cuda/CUDACachingAllocator.cpp``) keeps freed
    blocks for reuse and gives a request a cached block only if it is large enough
    (a block is split, never merged with a neighbour in another segment).  The
    loss's fp32 tensors are the step's largest; once the optimizer's states have
    taken memory between them, step 2 does not find its freed loss blocks in one
    piece and reserves one more.  Measured: reserved exceeds allocated by one fp32
    logits tensor (within 0.06 GiB) in the GPT-2 cases whose activations the loss
    dominates.
    """
    return 4.0 * x.vocab


OUTPUT_TERMS: tuple[tuple[str, Callable[[Layout], float]], ...] = (
    ("final_norm_and_head_input", final_norm_and_head_input),
    ("loss_logits", loss_logits),
    ("cached_loss_block", cached_loss_block),
)


def output_terms(x: Layout) -> list[Term]:
    """The named once-per-model terms (bytes per token)."""
    return [Term(name, "token", fn(x), (fn.__doc__ or "").strip().splitlines()[0]) for name, fn in OUTPUT_TERMS]


def output_bytes(x: Layout, micro_batch: int) -> float:
    tokens = float(x.seq_len) * micro_batch
    return sum(t.bytes for t in output_terms(x)) * tokens
