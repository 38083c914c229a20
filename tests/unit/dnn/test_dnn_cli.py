"""`harp dnn estimate` / `harp dnn choose`: the numbers, the formats, the one-line errors."""

from __future__ import annotations

import json

import pytest
from dnn_helpers import HF

from harpd.cli.main import main
from tests.helpers.fake_slurm import FakeSlurm

SITE = """
[dnn]
safety_margin = 0.2
[[dnn.gpu_types]]
name = "a100"
memory_gb = 80
gpus_per_node = 4
partition = "gpu"
"""


@pytest.fixture(autouse=True)
def config(tmp_path, monkeypatch):
    for name in list(__import__("os").environ):
        if name.startswith("HARP_"):
            monkeypatch.delenv(name)
    path = tmp_path / "harpd.toml"
    path.write_text(SITE)
    monkeypatch.setenv("HARP_CONFIG", str(path))
    return path


def test_estimate_table_shows_the_paper_example(capsys):
    rc = main(
        [
            "dnn",
            "estimate",
            "params=7.5e9",
            "layers=32",
            "hidden=4096",
            "heads=32",
            "seq_len=1024",
            "gpus=64",
            "zero=auto",
            "accounting=paper",
            "optimizer=adam",
            "precision=fp16",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    lines = {l[:26].strip(): l[26:].split() for l in out.splitlines() if l[:26].strip()}
    states = [sum(float(lines[k][i]) for k in ("parameters", "gradients", "optimizer states")) for i in range(4)]
    # 120, 31.4, 16.6, 1.9 GB (decimal) in GiB, as printed with two decimals
    assert [round(s * 2**30 / 1e9, 1) for s in states] == [120.0, 31.4, 16.6, 1.9]
    assert "margin 20%" in out and "note: vocab not given" in out


def test_estimate_json_is_bytes(capsys):
    rc = main(
        [
            "dnn",
            "estimate",
            f"config={HF / 'gpt2.json'}",
            "seq_len=1024",
            "micro_batch=4",
            "zero=1",
            "gpus=2",
            "--format",
            "json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and list(data["stages"]) == ["1"] and data["gpus"] == 2
    st = data["stages"]["1"]
    psi = 124_439_808
    assert st["parameters"] == 2 * psi and st["gradients"] == 2 * psi
    assert st["optimizer_states"] == 16 * psi // 2
    assert st["distributed"] == 1 << 30 and st["cuda_context"] == round(0.3 * (1 << 30))
    assert st["need_with_margin"] == pytest.approx(st["total"] * 1.2, abs=1)  # each rounded to a byte
    assert data["spec"]["params"] == psi and data["spec"]["model"] == "gpt2"


def test_config_relative_to_cwd_option(capsys):
    rc = main(["dnn", "estimate", "config=gpt2-medium.json", "seq_len=128", "--cwd", str(HF), "--format", "json"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["spec"]["params"] == 354_823_168


@pytest.mark.parametrize(
    "argv, message",
    [
        (["dnn", "estimate"], "needs KEY=VALUE words"),
        (["dnn", "estimate", "params=7e9", "nonsense=1"], "unknown key 'nonsense'"),
        (["dnn", "estimate", "params=7e9", "mixed=fp8"], "mixed=fp8 is not one of autocast | weights"),
        (["dnn", "estimate", "config=/nonexistent/config.json"], "no such file"),
        (
            ["dnn", "estimate", "params=7e9", "layers=2", "hidden=8", "heads=2", "seq_len=8", "--gpus-per-node", "0"],
            "--gpus-per-node must be at least 1",
        ),
        (["dnn"], "needs an action"),
        (
            ["dnn", "choose", "params=1e12", "layers=96", "hidden=12288", "heads=96", "seq_len=2048", "zero=2"],
            "no configured GPU fits",
        ),
    ],
)
def test_errors_are_one_line_exit_2(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("harp: ") and message in err and err.count("\n") == 1


def test_bad_config_file_is_one_line(capsys, config):
    config.write_text("[dnn]\nsafety_margin = 2\n")
    assert main(["dnn", "estimate", "params=1e9", "layers=2", "hidden=8", "heads=2", "seq_len=8"]) == 2
    assert "dnn.safety_margin" in capsys.readouterr().err


def test_choose_prints_the_changes(capsys):
    rc = main(
        [
            "dnn",
            "choose",
            f"config={HF / 'llama-2-7b.json'}",
            "seq_len=2048",
            "attention=flash",
            "recompute=selective",
            "zero=3",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "in partition gpu, ZeRO stage 3" in out
    assert "--partition=gpu " in out and "--gres=gpu:a100:" in out and "--ntasks-per-node=" in out
    rc = main(["dnn", "choose", f"config={HF / 'llama-2-7b.json'}", "seq_len=2048", "zero=3", "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["error"] is None and data["changes"][0]["option"] == "partition"


def test_duplicate_gpu_type_names_are_refused(capsys, config):
    config.write_text(SITE + SITE.replace("[dnn]\nsafety_margin = 0.2\n", ""))
    assert main(["dnn", "choose", "params=1e9", "layers=2", "hidden=8", "heads=2", "seq_len=8"]) == 2
    assert "GPU type 'a100' is listed twice" in capsys.readouterr().err


def test_check_reports_ok_and_problems(capsys, config, monkeypatch):
    from dnn_helpers import partitions_from_recording

    import harpd.slurm

    monkeypatch.setattr(harpd.slurm, "get_backend", lambda s: FakeSlurm(partitions=partitions_from_recording("site")))
    config.write_text(
        SITE.replace('partition = "gpu"', 'partition = "gpu-a100"').replace("gpus_per_node = 4", "gpus_per_node = 8")
    )
    assert main(["dnn", "check"]) == 0
    assert capsys.readouterr().out == (
        "a100: partition gpu-a100, up to 4 node(s) x 8 GPUs, 80 GiB each (from the config), billing weight 1\n"
    )
    config.write_text(SITE)  # partition "gpu" does not exist at that site
    assert main(["dnn", "check"]) == 1
    assert "problem: [dnn] gpu type a100: partition 'gpu' does not exist" in capsys.readouterr().out


def test_check_needs_gpu_types_and_slurm(capsys, config, monkeypatch):
    import harpd.slurm
    from harpd.slurm import SlurmError

    config.write_text("[dnn]\n")
    assert main(["dnn", "check"]) == 2
    assert "no GPU types are configured" in capsys.readouterr().err
    config.write_text(SITE)

    def broken(settings):
        raise SlurmError("scontrol: command not found")

    monkeypatch.setattr(harpd.slurm, "get_backend", broken)
    assert main(["dnn", "check"]) == 2
    assert capsys.readouterr().err == "harp: cannot read Slurm's partitions: scontrol: command not found\n"
