"""The ``#HARP dnn KEY=VALUE ...`` description of a training job, parsed and checked.

One parser serves the script line and ``harp dnn estimate KEY=VALUE ...`` so the
two always accept the same keys.  Everything a user can get wrong (an unknown
key, a typo in a value, a missing shape number, an unreadable config) becomes a
``DnnError`` with one line naming the problem and the fix; the planner turns
that into "submit unchanged", never a traceback.

``config=path`` names a Hugging Face ``config.json``, relative to the job's
working directory.  harpd may run as root while the path comes from a user, so
the file is read defensively: a regular file only (no FIFO or device that could
block or stream forever), at most ``MAX_CONFIG_BYTES``, parsed as JSON and
nothing else, and (when the caller's uid is known) only if that user could read
it themselves.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shlex
import stat
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from harpd.dnn.activation_terms import LLAMA_BLOCK, Block
from harpd.dnn.errors import DnnError
from harpd.dnn.harp_line import harp_line_words

MAX_CONFIG_BYTES = 1 << 20  # HF configs are a few KiB; anything bigger is not one
ASSUMED_VOCAB = 65536  # when neither vocab= nor a config gives one (said in the notes)
DEFAULT_MICRO_BATCH = 1

KEYS: dict[str, str] = {
    "params": "parameter count: 7e9, 6.7B, 124M",
    "config": "path to a Hugging Face config.json (relative to the job's directory)",
    "optimizer": "adamw | adam | sgd",
    "momentum": "sgd only: yes (default) | no",
    "precision": "bf16 | fp16 (mixed precision) | fp32",
    "mixed": "autocast (fp32 weights + torch.autocast; default at zero=0) | weights (16-bit weights + fp32 master "
    "copy: DeepSpeed/Megatron; default at zero=1-3)",
    "zero": "ZeRO stage 0 | 1 | 2 | 3 | auto",
    "offload": "none | optimizer | param | all (ZeRO-Offload to host memory)",
    "micro_batch": "sequences per GPU per step (default 1)",
    "seq_len": "tokens per sequence (default: the config's maximum)",
    "layers": "transformer layers",
    "hidden": "hidden size",
    "heads": "attention heads",
    "kv_heads": "key/value heads (grouped-query attention; default: heads)",
    "ffn": "MLP inner width (default 4 x hidden)",
    "mlp": "gelu | gelu_new (HF's Python tanh GELU) | swiglu (a LLaMA-style block)",
    "dropout": "yes | no: dropout active in the blocks (default: from the config, else yes)",
    "vocab": "vocabulary size",
    "largest_layer": "parameters of the largest single layer (ZeRO-3 gathers it)",
    "recompute": "activation recomputation: none | selective | full",
    "attention": "eager | flash (flash/SDPA keeps no s*s attention matrix)",
    "gpus": "total GPUs (fixes the count; default: harp chooses)",
    "gpu_type": "restrict the choice to this configured GPU type",
    "launcher": "srun (one task per GPU, default) | torchrun | accelerate | deepspeed (one task per node)",
    "accounting": "harp (default: what DeepSpeed allocates) | paper (ZeRO paper, model states only)",
    # goals (harpd.dnn.goals): time and cost planning, not memory
    "deadline": "finish within this time: 8h, 90m, 2d, 1:30:00 (harp picks the cheapest config that meets it)",
    "tokens": "training tokens of one run (one trial's full training in a search), for the time model",
    "mfu": "model FLOPs utilisation of the default time model (default 0.4)",
    "trials": "hyper-parameter search: trials in the first successive-halving stage",
    "eta": "successive halving: keep 1/eta of the trials per stage (default 3)",
    "stage": "which successive-halving stage this submission runs (default 0)",
    "batch": "global batch range the job accepts, e.g. 256..2048 (harp picks GPUs and micro_batch)",
    "runs": "this job's earlier runs for the scaling fit: GPUS[xTYPE]:ELAPSED,... e.g. 1:10h,4xa100:3h",
}
GOAL_KEYS = ("deadline", "tokens", "mfu", "trials", "eta", "stage", "batch", "runs")

_TRUE = {"1", "yes", "true", "on", "y"}
_FALSE = {"0", "no", "false", "off", "n", "none"}
_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
_NUMBER = re.compile(r"^([0-9]+(?:\.[0-9]*)?(?:e[+-]?[0-9]+)?)([kmbgt]?)$", re.IGNORECASE)


@dataclass
class DnnSpec:
    """A training setup, every field resolved (defaults applied, config read)."""

    params: int
    layers: int
    hidden: int
    heads: int
    vocab: int
    seq_len: int
    micro_batch: int
    largest_layer: int
    optimizer: str = "adamw"
    momentum: bool = True
    precision: str = "bf16"
    zero: int | None = 0  # None: auto
    offload_optimizer: bool = False
    offload_param: bool = False
    recompute: str = "none"
    attention: str = "eager"
    gpus: int | None = None
    gpu_type: str | None = None
    launcher: str = "srun"
    accounting: str = "harp"
    mixed: str | None = None  # autocast | weights; None: by stage (harpd.dnn.zero.mixed_layout)
    block: Block = field(default_factory=Block)  # what the activation terms need (harpd.dnn.activation_terms)
    model: str | None = None  # model_type when read from a config
    config_path: str | None = None
    notes: list[str] = field(default_factory=list)
    shape_known: bool = True  # False: params only (harp dnn estimate), no activations

    @property
    def one_task_per_node(self) -> bool:
        return self.launcher != "srun"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------- line parsing


def _is_dnn_line(raw: str) -> bool:
    """``#HARP dnn ...`` (any case), cheaply: only those lines are split, shlex costing microseconds a character."""
    text = raw.strip()
    if text[:5].upper() == "#HARP":
        text = text[5:].lstrip()
    return text[:3].lower() == "dnn" and (len(text) == 3 or not text[3].isalnum())


def dnn_tokens(harp_lines: list[str]) -> dict[str, str] | None:
    """KEY=VALUE pairs of every ``#HARP dnn`` line merged; None when there is none.

    A long description may be split over several lines; the same key with two
    different values is an error rather than a silent "last one wins".
    """
    found = False
    out: dict[str, str] = {}
    for raw in harp_lines:
        if not _is_dnn_line(raw):
            continue  # another #HARP line (retry, off, checkpoint): not split here
        try:
            words = harp_line_words(raw)
        except ValueError as exc:
            raise DnnError(f"#HARP dnn line cannot be split ({exc}): {raw.strip()[:80]}") from None
        if not words or words[0].lower() != "dnn":
            continue
        found = True
        for word in words[1:]:
            key, sep, value = word.partition("=")
            key = key.strip().lower().replace("-", "_")
            if not sep or not key or value == "":
                raise DnnError(f"#HARP dnn: '{word}' is not KEY=VALUE (e.g. params=7e9)")
            if key in out and out[key] != value:
                raise DnnError(f"#HARP dnn: {key} given twice ({out[key]} and {value}); keep one")
            out[key] = value
    return out if found else None


def tokens_from_args(args: list[str]) -> dict[str, str]:
    """KEY=VALUE words from a command line, checked like a #HARP dnn line."""
    tokens = dnn_tokens(["dnn " + " ".join(shlex.quote(a) for a in args)])
    return tokens or {}


# ---------------------------------------------------------------- values


def parse_count(key: str, value: str, *, lo: int = 1, hi: int = 10**15) -> int:
    """7e9, 6.7B, 124M, 4096 -> int; raises DnnError naming the key."""
    m = _NUMBER.match(value.strip().replace("_", ""))
    if not m:
        raise DnnError(f"#HARP dnn: {key}={value} is not a number (e.g. {key}=4096, params=7e9 or 6.7B)")
    x = float(m.group(1)) * _SUFFIX[m.group(2).lower()]
    if not lo <= x <= hi:  # a float first: 1e999 (or 500 digits) is infinite, which round() cannot take
        raise DnnError(f"#HARP dnn: {key}={value[:40]} is out of range ({lo} to {hi:g})")
    n = round(x)
    if not lo <= n <= hi:
        raise DnnError(f"#HARP dnn: {key}={value} is out of range ({lo} to {hi:g})")
    return n


def _choice(key: str, value: str, allowed: dict[str, str]) -> str:
    v = value.strip().lower()
    if v not in allowed:
        names = " | ".join(sorted(set(allowed.values())))
        raise DnnError(f"#HARP dnn: {key}={value} is not one of {names}")
    return allowed[v]


def _flag(key: str, value: str) -> bool:
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    try:
        return float(v) > 0  # momentum=0.9
    except ValueError:
        raise DnnError(f"#HARP dnn: {key}={value} should be yes or no") from None


# ---------------------------------------------------------------- config files


def _user_gids(uid: int) -> set[int]:
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        return set()
    try:
        return set(os.getgrouplist(pw.pw_name, pw.pw_gid))
    except (KeyError, OSError):
        return {pw.pw_gid}


def _allows(st: os.stat_result, uid: int, gids: set[int], bit_user: int, bit_group: int, bit_other: int) -> bool:
    if st.st_uid == uid:
        return bool(st.st_mode & bit_user)
    if st.st_gid in gids:
        return bool(st.st_mode & bit_group)
    return bool(st.st_mode & bit_other)


def _check_user_may_read(path: str, st: os.stat_result, uid: int) -> None:
    """Refuse a file its submitter could not read: harpd must not read for them."""
    if uid == 0:
        return
    gids = _user_gids(uid)
    if not _allows(st, uid, gids, stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH):
        raise DnnError(f"config={path}: you may not read that file")
    real = os.path.realpath(path)
    d = os.path.dirname(real)
    while True:
        try:
            dst = os.stat(d)
        except OSError:
            break
        if not _allows(dst, uid, gids, stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH):
            raise DnnError(f"config={path}: you may not read that file")
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent


def read_config_json(path: str, cwd: str | None, uid: int | None = None) -> dict[str, Any]:
    """The JSON object in ``path`` (relative to ``cwd``), read with every guard above."""
    if not path:
        raise DnnError("#HARP dnn: config= needs a path to a config.json")
    if path.startswith("~"):
        raise DnnError(f"config={path}: '~' is not expanded; use a path relative to the job's directory")
    if not os.path.isabs(path):
        if not cwd:
            raise DnnError(f"config={path}: relative path but the job's directory is unknown; use an absolute path")
        full = os.path.join(cwd, path)
    else:
        full = path
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(full, flags)
    except FileNotFoundError:
        raise DnnError(f"config={path}: no such file (looked in {os.path.dirname(full) or '.'})") from None
    except OSError as exc:
        raise DnnError(f"config={path}: cannot open ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise DnnError(f"config={path}: not a regular file")
        if uid is not None:
            _check_user_may_read(full, st, uid)
        if st.st_size > MAX_CONFIG_BYTES:
            raise DnnError(
                f"config={path}: {st.st_size} bytes is too big for a model config "
                f"(limit {MAX_CONFIG_BYTES}); point to the model's config.json"
            )
        chunks = []
        total = 0
        while total <= MAX_CONFIG_BYTES:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > MAX_CONFIG_BYTES:
            raise DnnError(f"config={path}: larger than {MAX_CONFIG_BYTES} bytes; point to the model's config.json")
    except OSError as exc:
        raise DnnError(f"config={path}: cannot read ({exc.strerror})") from None
    finally:
        os.close(fd)
    try:
        data = json.loads(b"".join(chunks).decode("utf-8"))
    except UnicodeDecodeError:
        raise DnnError(f"config={path}: not UTF-8 text; expected a JSON config") from None
    except json.JSONDecodeError as exc:
        raise DnnError(f"config={path}: not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise DnnError(f"config={path}: expected a JSON object, found {type(data).__name__}")
    return data


# ---------------------------------------------------------------- the spec


_OPTIMIZERS = {"adam": "adam", "adamw": "adamw", "sgd": "sgd"}
_PRECISIONS = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "fp32": "fp32",
    "float32": "fp32",
}
_RECOMPUTE = {
    "none": "none",
    "no": "none",
    "off": "none",
    "false": "none",
    "selective": "selective",
    "full": "full",
    "yes": "full",
    "on": "full",
    "true": "full",
}
_ATTENTION = {"eager": "eager", "flash": "flash", "sdpa": "flash", "flash_attention_2": "flash"}
_LAUNCHERS = {"srun": "srun", "torchrun": "torchrun", "accelerate": "accelerate", "deepspeed": "deepspeed"}
_ACCOUNTING = {"harp": "harp", "paper": "paper"}
_MIXED = {
    "autocast": "autocast",
    "amp": "autocast",
    "weights": "weights",
    "master": "weights",
}
_MLPS = {"gelu": "gelu", "gelu_new": "gelu_new", "swiglu": "swiglu"}


def _offload(value: str) -> tuple[bool, bool]:
    parts = {p.strip().lower() for p in value.split(",") if p.strip()}
    if not parts or parts <= {"none", "no", "off"}:
        return False, False
    if parts & {"all", "both"}:
        return True, True
    unknown = parts - {"optimizer", "param", "params", "cpu"}
    if unknown:
        raise DnnError(f"#HARP dnn: offload={value} is not one of none | optimizer | param | all")
    return bool(parts & {"optimizer", "cpu"}), bool(parts & {"param", "params"})


def build_spec(
    tokens: dict[str, str], cwd: str | None = None, uid: int | None = None, *, shape_required: bool = True
) -> DnnSpec:
    """Resolve KEY=VALUE tokens into a DnnSpec; DnnError on anything wrong.

    ``shape_required=False`` (``harp dnn estimate``) accepts params= alone: the
    model states need only the parameter count, so the spec comes back with
    ``shape_known=False`` and zeros for the shape instead of an error; the
    planner keeps the default, since it cannot size a GPU without activations.
    """
    unknown = sorted(set(tokens) - set(KEYS))
    if unknown:
        raise DnnError(f"#HARP dnn: unknown key '{unknown[0]}' (known: {', '.join(KEYS)})")
    notes: list[str] = []
    shape = None
    if "config" in tokens:
        from harpd.dnn.params import shape_from_config

        shape = shape_from_config(read_config_json(tokens["config"], cwd, uid))

    def count(key: str, from_shape: int | None, lo: int = 1, hi: int = 10**15) -> int | None:
        if key in tokens:
            return parse_count(key, tokens[key], lo=lo, hi=hi)
        return from_shape

    params = count("params", shape.params if shape else None, hi=10**14)
    layers = count("layers", shape.layers if shape else None, hi=100_000)
    hidden = count("hidden", shape.hidden if shape else None, hi=10**6)
    heads = count("heads", shape.heads if shape else None, hi=100_000)
    vocab = count("vocab", shape.vocab if shape else None, hi=10**8)
    if params is None:
        raise DnnError("#HARP dnn: give params= (e.g. params=7e9) or config=path/to/config.json")
    missing = [k for k, v in (("layers", layers), ("hidden", hidden), ("heads", heads)) if v is None]
    if missing and shape_required:
        raise DnnError(
            f"#HARP dnn: activations need {' '.join(m + '=' for m in missing)} (or config=path/to/config.json)"
        )
    if missing:
        return _apply_options(_states_only_spec(tokens, params, hidden, vocab), tokens)
    assert layers is not None and hidden is not None and heads is not None
    if vocab is None:
        vocab = ASSUMED_VOCAB
        notes.append(f"vocab not given: assumed {ASSUMED_VOCAB} for the output layer")
    seq_len = count("seq_len", None, hi=10**7)
    if seq_len is None:
        if shape and shape.max_positions:
            seq_len = shape.max_positions
            notes.append(f"seq_len not given: used the config's maximum {seq_len}")
        else:
            raise DnnError("#HARP dnn: give seq_len= (tokens per sequence, e.g. seq_len=2048)")
    micro_batch = count("micro_batch", None, hi=10**6)
    if micro_batch is None:
        micro_batch = DEFAULT_MICRO_BATCH
        notes.append(f"micro_batch not given: assumed {DEFAULT_MICRO_BATCH}")
    if "largest_layer" in tokens:
        largest = parse_count("largest_layer", tokens["largest_layer"], hi=10**14)
    elif shape and "params" not in tokens:
        largest = shape.largest_layer
    else:
        # Without the exact architecture: the bigger of the embedding and a 4h-wide MLP matrix.
        largest = max(vocab * hidden, 4 * hidden * hidden + 4 * hidden)
    largest = min(largest, params)

    spec = DnnSpec(
        params=params,
        layers=layers,
        hidden=hidden,
        heads=heads,
        vocab=vocab,
        seq_len=seq_len,
        micro_batch=micro_batch,
        largest_layer=largest,
        notes=notes,
    )
    if shape:
        spec.model = shape.model_type
        spec.config_path = tokens["config"]
        spec.block = shape.block
    return _apply_options(_apply_block(spec, tokens), tokens)


def _apply_block(spec: DnnSpec, tokens: dict[str, str]) -> DnnSpec:
    """kv_heads= ffn= mlp= dropout=: the block of a model described by hand (or a config overridden)."""
    block = spec.block
    if "mlp" in tokens:
        mlp = _choice("mlp", tokens["mlp"], _MLPS)
        # SwiGLU: LLaMA's block (RMSNorm, q/k/v and gate/up linears, no dropout); else a GPT-style one
        base = LLAMA_BLOCK if mlp == "swiglu" else Block()
        block = replace(base, kv_heads=block.kv_heads, ffn=block.ffn, mlp=mlp)
    if "dropout" in tokens:
        block = replace(block, dropout=_flag("dropout", tokens["dropout"]))
    if "kv_heads" in tokens:
        block = replace(block, kv_heads=parse_count("kv_heads", tokens["kv_heads"], hi=100_000))
    if "ffn" in tokens:
        block = replace(block, ffn=parse_count("ffn", tokens["ffn"], hi=10**7))
    kv = block.kv_heads or spec.heads
    if kv > spec.heads or spec.heads % kv:
        raise DnnError(f"#HARP dnn: kv_heads={kv} must divide heads={spec.heads} (grouped-query attention)")
    spec.block = block
    return spec


def _states_only_spec(tokens: dict[str, str], params: int, hidden: int | None, vocab: int | None) -> DnnSpec:
    """A spec without the model's shape: enough for the model states, not for activations."""
    if "largest_layer" in tokens:
        largest = parse_count("largest_layer", tokens["largest_layer"], hi=10**14)
    elif hidden is not None:
        largest = max((vocab or ASSUMED_VOCAB) * hidden, 4 * hidden * hidden + 4 * hidden)
    else:
        largest = 0  # unknown: the caller says ZeRO-3's gathered layer is not counted
    return DnnSpec(
        params=params,
        layers=0,
        hidden=hidden or 0,
        heads=0,
        vocab=vocab or 0,
        seq_len=0,
        micro_batch=0,
        largest_layer=min(largest, params),
        shape_known=False,
    )


def _apply_numerics(spec: DnnSpec, tokens: dict[str, str]) -> None:
    """The optimizer and the precision keys (optimizer, momentum, precision, mixed), checked together."""
    if "optimizer" in tokens:
        spec.optimizer = _choice("optimizer", tokens["optimizer"], _OPTIMIZERS)
    if "momentum" in tokens:
        if spec.optimizer != "sgd":
            raise DnnError("#HARP dnn: momentum= applies to optimizer=sgd only")
        spec.momentum = _flag("momentum", tokens["momentum"])
    if "precision" in tokens:
        spec.precision = _choice("precision", tokens["precision"], _PRECISIONS)
    if "mixed" in tokens:
        spec.mixed = _choice("mixed", tokens["mixed"], _MIXED)
        if spec.precision == "fp32":
            raise DnnError("#HARP dnn: mixed= applies to precision=bf16 or fp16, not fp32; drop one of them")


def _apply_options(spec: DnnSpec, tokens: dict[str, str]) -> DnnSpec:
    """The keys that are not the model's size (optimizer, precision, ZeRO, ...), checked."""
    _apply_numerics(spec, tokens)
    if "zero" in tokens:
        z = tokens["zero"].strip().lower()
        if z == "auto":
            spec.zero = None
        elif z in ("0", "1", "2", "3"):
            spec.zero = int(z)
        else:
            raise DnnError(f"#HARP dnn: zero={tokens['zero']} is not one of 0 | 1 | 2 | 3 | auto")
    if "offload" in tokens:
        spec.offload_optimizer, spec.offload_param = _offload(tokens["offload"])
    if "recompute" in tokens:
        spec.recompute = _choice("recompute", tokens["recompute"], _RECOMPUTE)
    if "attention" in tokens:
        spec.attention = _choice("attention", tokens["attention"], _ATTENTION)
    if "gpus" in tokens and tokens["gpus"].strip().lower() != "auto":
        spec.gpus = parse_count("gpus", tokens["gpus"], hi=100_000)
    if "gpu_type" in tokens:
        spec.gpu_type = tokens["gpu_type"].strip()
    if "launcher" in tokens:
        spec.launcher = _choice("launcher", tokens["launcher"], _LAUNCHERS)
    if "accounting" in tokens:
        spec.accounting = _choice("accounting", tokens["accounting"], _ACCOUNTING)
    # Offload is a ZeRO feature: refuse combinations DeepSpeed refuses.
    if spec.offload_param and spec.zero not in (None, 3):
        raise DnnError("#HARP dnn: offload=param needs zero=3 (or zero=auto)")
    if spec.offload_optimizer and spec.zero == 0:
        raise DnnError("#HARP dnn: offload needs zero=1, 2 or 3 (ZeRO-Offload); zero=0 cannot offload")
    return spec


def spec_from_lines(harp_lines: list[str], cwd: str | None = None, uid: int | None = None) -> DnnSpec | None:
    tokens = dnn_tokens(harp_lines)
    if tokens is None:
        return None
    return build_spec(tokens, cwd, uid)
