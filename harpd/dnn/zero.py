"""Bytes per GPU of a data-parallel training job: ZeRO model states, activations, overheads.

Model states (Rajbhandari et al. 2020, ZeRO §3.1, §5): with Ψ parameters, P bytes
per parameter, G per gradient and K of optimizer state, one GPU of N_d holds

    stage 0: (P+G+K)Ψ      stage 1: (P+G)Ψ + KΨ/N_d
    stage 2: PΨ + (G+K)Ψ/N_d      stage 3: (P+G+K)Ψ/N_d

K depends on the optimizer and precision (``optimizer_state_bytes``).  That is
``accounting="paper"``: the paper's own arithmetic, kept for its worked example.

``accounting="harp"`` (the default) adds what DeepSpeed really allocates, as its
estimators in ``deepspeed/runtime/zero/stage_1_and_2.py`` and ``stage3.py`` say:
under mixed precision, ZeRO 1-3 keep the rank's gradient partition in fp32
(+4Ψ/N_d), and ZeRO-3 gathers one whole layer at a time (params and grads of the
largest layer, (P+G)·L).  With Adam and bf16 that gives stage 2 = 2Ψ + 18Ψ/N_d
exactly as DeepSpeed; stage 1 = 4Ψ + 16Ψ/N_d (DeepSpeed's estimator reuses the
stage-2 figure, which leaves out stage 1's full gradient copy); stage 3 =
20Ψ/N_d + 4L (DeepSpeed says 18Ψ/N_d + 4L: it leaves out the 16-bit gradient
partition).  Model states alone are far from a job's peak (DeepSpeed issue #4527:
0.49 GB estimated, 14.7-21 GiB measured), which is why activations, the CUDA
context and the distributed buffers are added on top.

The precision layout (``mixed``) decides the model states under mixed
precision.  ``mixed=weights`` is the layout above (16-bit weights and gradients,
an fp32 master copy in K: DeepSpeed, Megatron, FSDP MixedPrecision); harp adds
the fp32 gradients the master copy steps from at every stage (DeepSpeed's
BF16_Optimizer ``fp32_groups_gradients``, Megatron's ``main_grad``).
``mixed=autocast`` (torch.autocast over fp32 weights: HF Trainer ``bf16=True``,
Lightning ``bf16-mixed``) keeps fp32 weights (P = 4) and gradients (G = 4), the
optimizer's own state with no master copy (Adam K = 8), and the 16-bit copies
autocast makes of each weight (``cached_cast`` in ``autocast_mode.cpp``), which
the matmuls save for backward (2Ψ; with full recomputation autograd keeps none
and the cache ends with the autocast region, before the gradients exist).

Activations are the tensors torch and transformers keep for backward, term by
term (``harpd.dnn.activation_terms``); ``accounting="paper"`` keeps Korthikanti
et al. 2022's 16-bit count (s·b·h·(34 + 5·a·s/h) per layer) for comparison.

The whole GPU at the peak of a step after the first (the optimizer's states
exist): model states + cast copies + every stored activation + the loss's
peak.  The gradients are counted on top of the activations although backward
frees activations as gradients appear: PyTorch's caching allocator keeps the
freed blocks reserved and the gradients rarely fit them (measured on an H200,
tests/fixtures/gpu_memory: reserved exceeds allocated by up to 19 GiB), and what
decides an out-of-memory is the reserved memory.

The ``deepspeed_zero*`` functions replicate DeepSpeed's estimators line for
line (integer truncation included) so the tests can hold harp to DeepSpeed's
published outputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from harpd.dnn.activation_terms import Layout, checkpoint_input, layer_bytes, output_bytes
from harpd.dnn.errors import DnnError

GIB = 1 << 30
HOST_BUFFER_FACTOR = 1.5  # DeepSpeed's additional_buffer_factor for host memory


# ---------------------------------------------------------------- bytes per parameter


def param_bytes(precision: str) -> int:
    """P and G: 16-bit weights/gradients under mixed precision, 4 bytes in fp32."""
    return 4 if precision == "fp32" else 2


def optimizer_state_bytes(optimizer: str, precision: str, momentum: bool = True) -> int:
    """K: optimizer-state bytes per parameter.

    Mixed precision keeps an fp32 master copy (4) next to the optimizer's own
    fp32 state: Adam/AdamW momentum + variance (8) -> K = 12 (the ZeRO paper's
    K); SGD with momentum (4) -> 8; plain SGD -> 4.  Pure fp32 training has no
    separate master copy: Adam 8, SGD with momentum 4, plain SGD 0.
    """
    if optimizer in ("adam", "adamw"):
        state = 8
    elif optimizer == "sgd":
        state = 4 if momentum else 0
    else:
        raise DnnError(f"optimizer '{optimizer}' unknown (adamw, adam, sgd)")
    master = 0 if precision == "fp32" else 4
    return master + state


# ---------------------------------------------------------------- model states


@dataclass(frozen=True)
class ModelStates:
    """Model-state bytes on one GPU, and what offload puts in host memory per rank."""

    params: float
    grads: float
    optimizer: float  # optimizer states incl. fp32 master (and fp32 grad partition in harp accounting)
    gathered: float  # ZeRO-3: params+grads of the largest layer, gathered whole
    host_per_rank: float  # bytes this rank keeps in host memory (offload)
    cast_copies: float = 0.0  # mixed=autocast: the 16-bit weight copies autograd keeps during the step

    @property
    def gpu(self) -> float:
        return self.params + self.grads + self.optimizer + self.gathered + self.cast_copies


@dataclass(frozen=True, slots=True)
class StateLayout:
    """How a model's states are kept, beside its size and ZeRO stage: what ``model_states`` counts.

    ``mixed`` (ignored in fp32 and by ``accounting="paper"``): ``weights`` is the
    ZeRO/DeepSpeed layout of the module doc, ``autocast`` fp32 weights and
    gradients with 16-bit copies made during the step.  ``recompute`` says
    whether autograd keeps those copies (not with full recomputation).
    ``largest_layer``: parameters of the largest layer (ZeRO-3 gathers it whole).
    """

    optimizer: str = "adamw"
    precision: str = "bf16"
    momentum: bool = True
    offload_optimizer: bool = False
    offload_param: bool = False
    largest_layer: int = 0
    accounting: str = "harp"
    mixed: str = "weights"
    recompute: str = "none"


def model_states(params: int, stage: int, n_dp: int, layout: StateLayout | None = None) -> ModelStates:
    """Per-GPU model-state bytes for ZeRO ``stage`` over ``n_dp`` data-parallel ranks, kept as ``layout`` says."""
    lay = layout or StateLayout()
    optimizer, precision, momentum, accounting = lay.optimizer, lay.precision, lay.momentum, lay.accounting
    offload_optimizer, offload_param, largest_layer = lay.offload_optimizer, lay.offload_param, lay.largest_layer
    mixed, recompute = lay.mixed, lay.recompute
    if stage not in (0, 1, 2, 3):
        raise DnnError(f"ZeRO stage must be 0-3, not {stage}")
    if n_dp < 1:
        raise DnnError(f"data-parallel GPUs must be at least 1, not {n_dp}")
    if offload_param and stage != 3:
        raise DnnError("parameter offload needs ZeRO stage 3")
    if offload_optimizer and stage == 0:
        raise DnnError("optimizer offload needs ZeRO stage 1, 2 or 3")
    if mixed not in ("autocast", "weights"):
        raise DnnError(f"mixed must be autocast or weights, not {mixed}")
    psi = float(params)
    harp = accounting == "harp"
    if accounting not in ("harp", "paper"):
        raise DnnError(f"accounting must be harp or paper, not {accounting}")
    autocast = harp and precision != "fp32" and mixed == "autocast"
    if autocast:
        # fp32 weights are the optimizer's own: no master copy, no separate fp32 gradients
        p = g = 4
        k = optimizer_state_bytes(optimizer, "fp32", momentum)
    else:
        p = param_bytes(precision)
        g = p
        k = optimizer_state_bytes(optimizer, precision, momentum)
    if harp and precision != "fp32" and not autocast:
        k += 4  # fp32 gradients the master copy steps from (ZeRO 1-3: the rank's partition)
    cast = 2.0 * psi if autocast and recompute != "full" else 0.0
    n = n_dp
    if stage == 0:
        par, gra, opt = p * psi, g * psi, k * psi
    elif stage == 1:
        par, gra, opt = p * psi, g * psi, k * psi / n
    elif stage == 2:
        par, gra, opt = p * psi, g * psi / n, k * psi / n
    else:
        par, gra, opt = p * psi / n, g * psi / n, k * psi / n
    gathered = (p + g) * float(largest_layer) if harp and stage == 3 else 0.0
    host = 0.0
    if offload_optimizer:
        # ZeRO-Offload streams gradients to the host (into the fp32 partition
        # counted in ``opt``) and steps there: the GPU keeps its 16-bit
        # parameters (stage 1/2: all of them) and transient gradient buckets.
        host += opt
        opt = 0.0
        gra = 0.0
    if offload_param:
        host += par
        par = 0.0
    return ModelStates(params=par, grads=gra, optimizer=opt, gathered=gathered, host_per_rank=host, cast_copies=cast)


def host_bytes_per_node(states: ModelStates, params: int, stage: int, ranks_per_node: int) -> float:
    """Host memory an offloading job needs on each node.

    The larger of what its ranks offload and the fp32 copy of the model every
    rank builds before DeepSpeed partitions it (4Ψ per rank; ZeRO-3 builds it
    already partitioned with zero.Init), times DeepSpeed's 1.5 buffer factor.
    """
    init = 0.0 if stage == 3 else 4.0 * params * ranks_per_node
    offloaded = states.host_per_rank * ranks_per_node
    return HOST_BUFFER_FACTOR * max(init, offloaded)


# ---------------------------------------------------------------- activations


@dataclass(frozen=True)
class Activations:
    per_layer: float
    layers: int
    recompute_working: float  # one layer rebuilt during backward (full recomputation)
    output: float  # output layer, logits and loss

    @property
    def total(self) -> float:
        return self.per_layer * self.layers + self.recompute_working + self.output


def korthikanti_activation_bytes(
    *,
    layers: int,
    hidden: int,
    heads: int,
    seq_len: int,
    micro_batch: int,
    vocab: int = 0,
    recompute: str = "none",
    attention: str = "eager",
    precision: str = "bf16",
    tp: int = 1,
) -> Activations:
    """Korthikanti et al. 2022's count (``accounting="paper"``), kept to compare with.

    Per layer in 16 bits: s·b·h·(34 + 5·a·s/h) without recomputation (flash drops
    5·a·s/h), 34·s·b·h/t selective, 2·s·b·h full plus one layer rebuilt; output
    layer 4·s·b·h + 4·s·b·V and 6·s·b·V for the logits' copies; fp32 doubles it.
    """
    s, b, h, a, t = float(seq_len), float(micro_batch), float(hidden), float(heads), float(tp)
    sbh = s * b * h
    attn_scores = 0.0 if attention == "flash" else 5.0 * a * s / (h * t)
    full_layer = sbh * (10.0 + 24.0 / t + attn_scores) if t > 1 else sbh * (34.0 + attn_scores)
    if recompute == "none":
        per_layer, working = full_layer, 0.0
    elif recompute == "selective":
        per_layer, working = 34.0 * sbh / t, 0.0
    elif recompute == "full":
        per_layer, working = 2.0 * sbh, full_layer
    else:
        raise DnnError(f"recompute must be none, selective or full, not {recompute}")
    output = (4.0 * sbh + 4.0 * s * b * vocab) / t + 6.0 * s * b * vocab
    scale = 2.0 if precision == "fp32" else 1.0
    return Activations(
        per_layer=per_layer * scale, layers=layers, recompute_working=working * scale, output=output * scale
    )


def activation_bytes(layout: Layout, *, layers: int, micro_batch: int, recompute: str = "none") -> Activations:
    """Activation memory of one GPU, from the terms of ``harpd.dnn.activation_terms``.

    ``none``: every block's terms.  ``selective`` (Megatron: the attention core is
    recomputed): every block as with a flash kernel (no s×s scores).  ``full``: each
    block keeps its input only (``checkpoint_input``) and one block is rebuilt,
    with all its terms, during backward.  The output layer and the loss's peak
    (``output_terms``) are added once.
    """
    tokens = float(layout.seq_len) * micro_batch
    whole = layer_bytes(layout, micro_batch)
    if recompute == "none":
        per_layer, working = whole, 0.0
    elif recompute == "selective":
        per_layer, working = layer_bytes(replace(layout, attention="flash"), micro_batch), 0.0
    elif recompute == "full":
        per_layer, working = checkpoint_input(layout) * tokens, whole
    else:
        raise DnnError(f"recompute must be none, selective or full, not {recompute}")
    return Activations(
        per_layer=per_layer, layers=layers, recompute_working=working, output=output_bytes(layout, micro_batch)
    )


def layout_of(spec, stage: int) -> Layout:
    """The activation ``Layout`` of a DnnSpec at ZeRO ``stage``."""
    return Layout(
        hidden=spec.hidden,
        heads=spec.heads,
        vocab=spec.vocab,
        seq_len=spec.seq_len,
        block=spec.block,
        attention=spec.attention,
        precision=spec.precision,
        mixed=mixed_layout(spec, stage),
    )


# ---------------------------------------------------------------- the whole GPU


@dataclass(frozen=True)
class Estimate:
    """One GPU's memory for one configuration, part by part (bytes)."""

    states: ModelStates
    activations: Activations
    cuda_context: float
    distributed: float
    margin: float
    host_per_node: float  # 0 unless offloading
    n_gpus: int
    stage: int
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> float:
        return self.states.gpu + self.activations.total + self.cuda_context + self.distributed

    @property
    def need(self) -> float:
        """What must fit: the total with the safety margin on top."""
        return self.total * (1.0 + self.margin)

    def breakdown(self) -> dict[str, float]:
        return {
            "parameters": self.states.params,
            "gradients": self.states.grads,
            "optimizer_states": self.states.optimizer,
            "gathered_layer": self.states.gathered,
            "weight_copies_16bit": self.states.cast_copies,
            "activations": self.activations.total,
            "activations_per_layer": self.activations.per_layer,
            "activations_output_layer": self.activations.output,
            "activations_recompute_working": self.activations.recompute_working,
            "cuda_context": self.cuda_context,
            "distributed": self.distributed,
            "total": self.total,
            "need_with_margin": self.need,
            "host_per_node": self.host_per_node,
        }


def mixed_layout(spec, stage: int) -> str:
    """The precision layout of ``spec`` at ``stage``: the one written, else by stage.

    Without ``mixed=``: ``autocast`` at stage 0 (what most users run: HF Trainer
    ``bf16=True``, Lightning ``bf16-mixed``), ``weights`` at stages 1-3, which are
    DeepSpeed's ZeRO: its engine casts the model to 16 bits when ``bf16``/``fp16``
    is enabled and keeps the fp32 master copy in the optimizer.
    """
    if spec.mixed:
        return str(spec.mixed)
    return "autocast" if stage == 0 else "weights"


def states_of(spec, n_gpus: int, stage: int) -> ModelStates:
    """``model_states`` for a DnnSpec (its optimizer, precision layout, offload, recomputation)."""
    return model_states(
        spec.params,
        stage,
        n_gpus,
        StateLayout(
            optimizer=spec.optimizer,
            precision=spec.precision,
            momentum=spec.momentum,
            offload_optimizer=spec.offload_optimizer,
            offload_param=spec.offload_param,
            largest_layer=spec.largest_layer,
            accounting=spec.accounting,
            mixed=mixed_layout(spec, stage),
            recompute=spec.recompute,
        ),
    )


def estimate(
    spec,
    n_gpus: int,
    stage: int,
    *,
    cuda_context_gb: float = 0.5,
    distributed_overhead_gb: float = 1.0,
    margin: float = 0.10,
    gpus_per_node: int | None = None,
) -> Estimate:
    """Per-GPU memory of ``spec`` (a DnnSpec) on ``n_gpus`` data-parallel GPUs at ZeRO ``stage``."""
    states = states_of(spec, n_gpus, stage)
    if spec.accounting == "paper":
        acts = korthikanti_activation_bytes(
            layers=spec.layers,
            hidden=spec.hidden,
            heads=spec.heads,
            seq_len=spec.seq_len,
            micro_batch=spec.micro_batch,
            vocab=spec.vocab,
            recompute=spec.recompute,
            attention=spec.attention,
            precision=spec.precision,
        )
    else:
        acts = activation_bytes(
            layout_of(spec, stage), layers=spec.layers, micro_batch=spec.micro_batch, recompute=spec.recompute
        )
    context = cuda_context_gb * GIB
    dist = 0.0 if n_gpus == 1 else distributed_overhead_gb * GIB
    host = 0.0
    if spec.offload_optimizer or spec.offload_param:
        per_node = min(n_gpus, gpus_per_node or n_gpus)
        host = host_bytes_per_node(states, spec.params, stage, per_node)
    return Estimate(
        states=states,
        activations=acts,
        cuda_context=context,
        distributed=dist,
        margin=margin,
        host_per_node=host,
        n_gpus=n_gpus,
        stage=stage,
    )


# ---------------------------------------------------------------- DeepSpeed's estimators


def deepspeed_zero2_estimate(
    total_params: float,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    cpu_offload: bool = True,
    additional_buffer_factor: float = 1.5,
) -> tuple[int, int]:
    """(cpu_bytes, gpu_bytes) exactly as DeepSpeed's ``estimate_zero2_model_states_mem_needs``.

    Stage 1 and 2 share it.  ``cpu`` is per node and includes every rank's fp32
    model copy at start-up.
    """
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        gpu_mem = 2 * total_params
        cpu_mem = total_params * max(4 * total_gpus, 16) * additional_buffer_factor
    else:
        gpu_mem = 2 * total_params + int(18 * total_params / total_gpus)
        cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem)


def deepspeed_zero3_estimate(
    total_params: float,
    largest_layer_params: float,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    cpu_offload: bool = True,
    cpu_offload_params: bool = True,
    zero_init: bool = True,
    additional_buffer_factor: float = 1.5,
) -> tuple[int, int, float]:
    """(cpu_bytes, gpu_bytes, largest_layer_bytes) as DeepSpeed's ``estimate_zero3_model_states_mem_needs``."""
    total_gpus = num_nodes * num_gpus_per_node
    gpus_factor = 1 / num_nodes
    largest_layer_memory = 4 * largest_layer_params
    if cpu_offload:
        if cpu_offload_params:
            gpu_mem = largest_layer_memory
            if zero_init:
                cpu_mem = total_params * 18 * gpus_factor * additional_buffer_factor
            else:
                cpu_mem = total_params * max(4 * num_gpus_per_node, 18 * gpus_factor) * additional_buffer_factor
        else:
            gpu_mem = largest_layer_memory + int(2 * total_params / total_gpus)
            if zero_init:
                cpu_mem = total_params * 16 * gpus_factor * additional_buffer_factor
            else:
                cpu_mem = total_params * max(4 * num_gpus_per_node, 16 * gpus_factor) * additional_buffer_factor
    else:
        gpu_mem = largest_layer_memory + int(18 * total_params / total_gpus)
        if zero_init:
            cpu_mem = largest_layer_params * 4 * num_gpus_per_node * additional_buffer_factor
        else:
            cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem), largest_layer_memory


def ceil_gib(n: float) -> int:
    return max(1, math.ceil(n / GIB))
