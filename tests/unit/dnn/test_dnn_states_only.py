"""`harp dnn estimate params=N` without a model shape: the model states, checked against the ZeRO paper."""

from __future__ import annotations

import json
import os

import pytest

from harpd.cli.main import main


@pytest.fixture(autouse=True)
def no_site_config(tmp_path, monkeypatch):
    for name in list(os.environ):
        if name.startswith("HARP_"):
            monkeypatch.delenv(name)
    path = tmp_path / "harpd.toml"
    path.write_text("")
    monkeypatch.setenv("HARP_CONFIG", str(path))


def _rows(out: str) -> dict[str, list[float]]:
    rows = {}
    for line in out.splitlines():
        label, cells = line[:26].strip(), line[26:].split()
        if label and cells and all(c.replace(".", "", 1).isdigit() for c in cells):
            rows[label] = [float(c) for c in cells]
    return rows


def test_zero_paper_worked_example_without_a_shape(capsys):
    # Rajbhandari et al. 2020: psi = 7.5e9, N_d = 64, K = 12 -> 120, 31.4, 16.6, 1.9 GB per GPU
    rc = main(["dnn", "estimate", "params=7.5e9", "gpus=64", "zero=auto", "accounting=paper"])
    out = capsys.readouterr().out
    assert rc == 0
    gb = _rows(out)["model states (GB)"]
    assert [round(x, 1) for x in gb] == [120.0, 31.4, 16.6, 1.9]
    gib = _rows(out)["model states (GiB)"]
    assert [round(x * 2**30 / 1e9, 1) for x in gib] == [120.0, 31.4, 16.6, 1.9]
    assert "activations need layers= hidden= heads= seq_len=" in out and "config=" in out


def test_stage_one_alone_as_in_the_issue(capsys):
    rc = main(["dnn", "estimate", "params=7.5e9", "zero=1", "gpus=64", "accounting=paper"])
    rows = _rows(capsys.readouterr().out)
    assert rc == 0 and round(rows["model states (GB)"][0], 1) == 31.4
    parts = rows["parameters"][0] + rows["gradients"][0] + rows["optimizer states"][0]
    assert parts == pytest.approx(rows["model states (GiB)"][0], abs=0.02)


def test_readme_example_works(capsys):
    rc = main(["dnn", "estimate", "params=7e9", "zero=2", "gpus=8"])
    captured = capsys.readouterr()
    assert rc == 0 and captured.err == ""
    # harp accounting, bf16 Adam, ZeRO-2: 2 psi + 18 psi / N_d (DeepSpeed's own estimator)
    assert _rows(captured.out)["model states (GB)"][0] == pytest.approx((2 + 18 / 8) * 7, abs=0.01)


@pytest.mark.parametrize(
    "argv",
    [
        ["params=7.5e9", "zero=1", "gpus=64", "--format", "json"],
        ["params=7.5e9", "--format", "json", "zero=1", "gpus=64"],
        ["--format", "json", "params=7.5e9", "zero=1", "gpus=64"],
    ],
)
def test_options_before_between_and_after_the_keys(capsys, argv):
    assert main(["dnn", "estimate", *argv]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model_states_only"] is True and data["gpus"] == 64 and list(data["stages"]) == ["1"]
    st = data["stages"]["1"]
    assert st["model_states"] == st["parameters"] + st["gradients"] + st["optimizer_states"]


def test_options_between_keys_with_a_full_shape(capsys):
    argv = ["dnn", "estimate", "params=1e9", "layers=2", "--format", "json", "hidden=64", "heads=2", "seq_len=8"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["spec"]["layers"] == 2


def test_bad_values_are_still_refused_without_a_shape(capsys):
    assert main(["dnn", "estimate", "params=7e9", "zero=5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("harp: ") and "zero=5" in err and err.count("\n") == 1
