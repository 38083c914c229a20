"""The #HARP dnn line: keys, values, defaults, and safe reading of config files."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from dnn_helpers import HF

from harpd.dnn.errors import DnnError
from harpd.dnn.spec import (
    ASSUMED_VOCAB,
    MAX_CONFIG_BYTES,
    build_spec,
    dnn_tokens,
    parse_count,
    read_config_json,
    spec_from_lines,
)

ISSUE_LINE = (
    "#HARP dnn params=7e9 optimizer=adamw precision=bf16 zero=2 micro_batch=4 "
    "seq_len=4096 layers=32 hidden=4096 heads=32"
)


def test_the_issue_example_line():
    spec = spec_from_lines([ISSUE_LINE])
    assert (spec.params, spec.optimizer, spec.precision, spec.zero) == (7_000_000_000, "adamw", "bf16", 2)
    assert (spec.micro_batch, spec.seq_len, spec.layers, spec.hidden, spec.heads) == (4, 4096, 32, 4096, 32)
    assert spec.vocab == ASSUMED_VOCAB and any("vocab not given" in n for n in spec.notes)
    # largest layer without a config: the bigger of embedding and a 4h MLP matrix
    assert spec.largest_layer == max(ASSUMED_VOCAB * 4096, 4 * 4096 * 4096 + 4 * 4096)


def test_no_dnn_line_is_none():
    assert spec_from_lines(["#HARP off", "#HARP something else"]) is None
    assert dnn_tokens([]) is None


def test_lines_merge_and_conflicts_are_refused():
    t = dnn_tokens(["#HARP dnn params=7e9 layers=32", "#HARP dnn hidden=4096 layers=32"])
    assert t == {"params": "7e9", "layers": "32", "hidden": "4096"}
    with pytest.raises(DnnError, match="layers given twice"):
        dnn_tokens(["#HARP dnn layers=32", "#HARP dnn layers=24"])


@pytest.mark.parametrize(
    "text, n",
    [
        ("7e9", 7_000_000_000),
        ("6.7B", 6_700_000_000),
        ("124M", 124_000_000),
        ("4096", 4096),
        ("1_000", 1000),
        ("1.5k", 1500),
        ("2T", 2 * 10**12),
    ],
)
def test_counts(text, n):
    assert parse_count("params", text) == n


@pytest.mark.parametrize(
    "line, message",
    [
        ("#HARP dnn params=7e9 layers=32 hidden=4096 heads=32 seq_len=1 batchsize=4", "unknown key 'batchsize'"),
        ("#HARP dnn params=seven layers=32 hidden=4096 heads=32 seq_len=1", "params=seven is not a number"),
        ("#HARP dnn params=0 layers=32 hidden=4096 heads=32 seq_len=1", "params=0 is out of range"),
        ("#HARP dnn params=7e9 layers=32 hidden=4096 heads=32 seq_len=1 zero=4", "zero=4 is not one of"),
        ("#HARP dnn params=7e9 layers=32 hidden=4096 heads=32 seq_len=1 optimizer=lamb", "optimizer=lamb"),
        ("#HARP dnn params=7e9 layers=32 hidden=4096 heads=32 seq_len=1 precision=int8", "precision=int8"),
        ("#HARP dnn params=7e9 layers=32 hidden=4096 heads=32", "give seq_len="),
        ("#HARP dnn params=7e9 seq_len=128", "activations need layers= hidden= heads="),
        ("#HARP dnn layers=32 hidden=4096 heads=32 seq_len=128", "give params="),
        (
            "#HARP dnn params=7e9 layers=32 hidden=4096 heads=32 seq_len=1 zero=2 offload=param",
            "offload=param needs zero=3",
        ),
        (
            "#HARP dnn params=7e9 layers=32 hidden=4096 heads=32 seq_len=1 zero=0 offload=optimizer",
            "offload needs zero=1",
        ),
        (
            "#HARP dnn params=7e9 layers=32 hidden=4096 heads=32 seq_len=1 momentum=no",
            "momentum= applies to optimizer=sgd",
        ),
        ("#HARP dnn params=7e9 layers", "'layers' is not KEY=VALUE"),
        ("#HARP dnn config='unterminated", "cannot be split"),
    ],
)
def test_bad_lines_give_one_line_errors(line, message):
    with pytest.raises(DnnError, match=message) as err:
        spec_from_lines([line])
    assert "\n" not in str(err.value)


def test_values_and_aliases():
    spec = spec_from_lines(
        [
            "#HARP dnn params=1e9 layers=24 hidden=2048 heads=16 seq_len=2048 "
            "optimizer=sgd momentum=0 precision=fp32 zero=auto offload=optimizer "
            "recompute=selective attention=sdpa gpus=8 gpu_type=a100 launcher=torchrun"
        ]
    )
    assert spec.optimizer == "sgd" and spec.momentum is False and spec.precision == "fp32"
    assert spec.zero is None and spec.offload_optimizer and not spec.offload_param
    assert (spec.recompute, spec.attention, spec.gpus, spec.gpu_type) == ("selective", "flash", 8, "a100")
    assert spec.one_task_per_node
    assert spec.micro_batch == 1 and any("micro_batch not given" in n for n in spec.notes)


def test_config_relative_to_cwd_and_explicit_keys_win(tmp_path):
    shutil.copy(HF / "gpt2.json", tmp_path / "config.json")
    spec = spec_from_lines(["#HARP dnn config=config.json micro_batch=8"], cwd=str(tmp_path))
    assert (spec.params, spec.layers, spec.hidden, spec.heads, spec.vocab) == (124_439_808, 12, 768, 12, 50257)
    assert spec.seq_len == 1024 and any("config's maximum" in n for n in spec.notes)
    assert spec.largest_layer == 50257 * 768 and spec.model == "gpt2"
    spec = spec_from_lines(["#HARP dnn config=config.json seq_len=256 layers=6"], cwd=str(tmp_path))
    assert spec.seq_len == 256 and spec.layers == 6


def test_config_path_with_spaces_quoted(tmp_path):
    d = tmp_path / "my model"
    d.mkdir()
    shutil.copy(HF / "gpt2.json", d / "config.json")
    spec = spec_from_lines(['#HARP dnn config="my model/config.json" seq_len=128'], cwd=str(tmp_path))
    assert spec.params == 124_439_808


def test_config_reading_guards(tmp_path):
    with pytest.raises(DnnError, match="relative path but the job's directory is unknown"):
        read_config_json("config.json", None)
    with pytest.raises(DnnError, match="no such file"):
        read_config_json("missing.json", str(tmp_path))
    with pytest.raises(DnnError, match="'~' is not expanded"):
        read_config_json("~/config.json", str(tmp_path))
    with pytest.raises(DnnError, match="not a regular file"):
        read_config_json(str(tmp_path), None)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(DnnError, match="not a regular file"):  # must not block
        read_config_json("fifo", str(tmp_path))
    big = tmp_path / "big.json"
    big.write_text('{"a": "' + "x" * MAX_CONFIG_BYTES + '"}')
    with pytest.raises(DnnError, match="too big"):
        read_config_json("big.json", str(tmp_path))
    (tmp_path / "yaml.json").write_text("model_type: gpt2\n")
    with pytest.raises(DnnError, match=r"not valid JSON \(line 1"):
        read_config_json("yaml.json", str(tmp_path))
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(DnnError, match="expected a JSON object, found list"):
        read_config_json("list.json", str(tmp_path))
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe{}")
    with pytest.raises(DnnError, match="not UTF-8"):
        read_config_json("bin.json", str(tmp_path))


def test_config_symlink_is_followed(tmp_path):
    # the Hugging Face cache keeps config.json as a symlink into blobs/
    shutil.copy(HF / "gpt2-medium.json", tmp_path / "blob")
    (tmp_path / "config.json").symlink_to(tmp_path / "blob")
    assert read_config_json("config.json", str(tmp_path))["n_layer"] == 24


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to play another user")
def test_config_the_submitter_cannot_read_is_refused():
    # pytest's tmp_path lives under a 0700 directory; use one "nobody" can reach
    tmp_path = Path(tempfile.mkdtemp(prefix="harp-dnn-", dir="/tmp"))
    tmp_path.chmod(0o755)
    cfg = tmp_path / "secret.json"
    cfg.write_text(json.dumps({"model_type": "gpt2"}))
    cfg.chmod(0o600)  # root's file
    nobody = 65534
    with pytest.raises(DnnError, match="you may not read that file"):
        read_config_json(str(cfg), None, uid=nobody)
    cfg.chmod(0o644)
    tmp_path.chmod(0o700)  # readable file in a directory nobody cannot enter
    try:
        with pytest.raises(DnnError, match="you may not read that file"):
            read_config_json(str(cfg), None, uid=nobody)
        tmp_path.chmod(0o755)
        assert read_config_json(str(cfg), None, uid=nobody) == {"model_type": "gpt2"}
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_bad_config_content_surfaces_as_dnn_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 12}))
    with pytest.raises(DnnError, match="'n_embd' is missing"):
        build_spec({"config": "config.json", "seq_len": "128"}, cwd=str(tmp_path))


# ---------------------------------------------------------------- precision layout and block keys

SHAPE = "params=1e9 layers=16 hidden=2048 heads=16 seq_len=2048"


@pytest.mark.parametrize("value, layout", [("autocast", "autocast"), ("AMP", "autocast"), ("weights", "weights")])
def test_mixed_key(value, layout):
    assert spec_from_lines([f"#HARP dnn {SHAPE} mixed={value}"]).mixed == layout


def test_mixed_unset_is_left_to_the_stage():
    assert spec_from_lines([f"#HARP dnn {SHAPE}"]).mixed is None


@pytest.mark.parametrize(
    "extra, message",
    [
        ("mixed=fp8", "mixed=fp8 is not one of autocast | weights"),
        ("mixed=", "is not KEY=VALUE"),
        ("precision=fp32 mixed=weights", "mixed= applies to precision=bf16 or fp16"),
        ("mlp=relu2", "mlp=relu2 is not one of gelu | gelu_new | swiglu"),
        ("kv_heads=3", "kv_heads=3 must divide heads=16"),
        ("kv_heads=32", "kv_heads=32 must divide heads=16"),
        ("kv_heads=four", "kv_heads=four is not a number"),
        ("ffn=0", "ffn=0 is out of range"),
        ("dropout=maybe", "dropout=maybe should be yes or no"),
    ],
)
def test_bad_layout_and_block_values_are_one_line(extra, message):
    with pytest.raises(DnnError) as exc:
        spec_from_lines([f"#HARP dnn {SHAPE} {extra}"])
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_swiglu_describes_a_llama_block_by_hand():
    b = spec_from_lines([f"#HARP dnn {SHAPE} mlp=swiglu kv_heads=4 ffn=5632"]).block
    assert (b.mlp, b.norm, b.qkv_linears, b.mlp_in_linears) == ("swiglu", "rmsnorm", 3, 2)
    assert (b.kv_heads, b.ffn, b.dropout, b.softmax_fp32) == (4, 5632, False, True)
    assert spec_from_lines([f"#HARP dnn {SHAPE} mlp=swiglu dropout=yes"]).block.dropout


def test_config_block_can_be_overridden():
    b = build_spec({"config": str(HF / "gpt2.json"), "seq_len": "1024", "dropout": "no", "mlp": "gelu"}).block
    assert (b.mlp, b.dropout, b.norm, b.ffn, b.kv_heads) == ("gelu", False, "layernorm", 3072, 12)
