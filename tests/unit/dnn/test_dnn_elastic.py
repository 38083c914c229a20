"""Batch range -> GPU count and micro-batch (elastic scaling), and `harp dnn plan`."""

from __future__ import annotations

import time

import pytest

from harpd.cli.main import main
from harpd.dnn.deadline import Layout
from harpd.dnn.elastic import choose_batch, fixed_choice, max_micro_batch, memory_fits
from harpd.dnn.plan import plan_dnn_job
from harpd.dnn.scaling import ScalingModel
from harpd.dnn.spec import build_spec
from harpd.dnn.zero import GIB, estimate

SEVEN_B = (
    "#HARP dnn params=6.74e9 layers=32 hidden=4096 heads=32 seq_len=4096 vocab=32000 "
    "attention=flash recompute=full zero=auto "
)


def test_max_micro_batch_is_the_memory_edge():
    assert max_micro_batch(lambda b: b <= 37, 1000) == 37
    assert max_micro_batch(lambda b: b <= 37, 20) == 20
    assert max_micro_batch(lambda b: False, 1000) == 0
    calls = []
    max_micro_batch(lambda b: calls.append(b) or True, 10**7)
    assert len(calls) < 40  # bounded by MAX_MICRO_BATCH, binary search


def _setup():
    spec = build_spec(
        {
            "params": "6.74e9",
            "layers": "32",
            "hidden": "4096",
            "heads": "32",
            "seq_len": "4096",
            "vocab": "32000",
            "attention": "flash",
            "recompute": "full",
        }
    )
    model = ScalingModel(params=spec.params, seq_len=spec.seq_len, micro_batch=1, recompute="full")
    lays = [Layout("a100", n, g, z, 1.0, 64) for n in (1, 2, 4) for g in (1, 2, 4, 8) for z in (1, 2, 3)]
    est = lambda s, n, z, gpn: estimate(s, n, z, gpus_per_node=gpn)  # noqa: E731
    fits = memory_fits(spec, est, lambda lay: 80 * GIB)
    return spec, model, lays, fits, est


def test_choice_is_within_range_fits_and_beats_every_evaluated_one():
    spec, model, lays, fits, est = _setup()
    best, evaluated = choose_batch(model, lays, (256, 2048), fits)
    assert best is not None and 256 <= best.global_batch <= 2048
    s = build_spec(
        {
            "params": "6.74e9",
            "layers": "32",
            "hidden": "4096",
            "heads": "32",
            "seq_len": "4096",
            "vocab": "32000",
            "attention": "flash",
            "recompute": "full",
            "micro_batch": str(best.micro_batch),
        }
    )
    assert est(s, best.layout.n_gpus, best.layout.zero, best.layout.gpus_per_node).need <= 80 * GIB
    assert all(best.per_cost >= c.per_cost - 1e-9 for c in evaluated)
    assert all(256 <= c.global_batch <= 2048 for c in evaluated)
    base = fixed_choice(model, Layout("a100", 1, 8, 3, 1.0, 64), 256, fits)
    assert base is not None and best.per_cost >= base.per_cost


def test_deadline_restricts_the_batch_choice():
    spec, model, lays, fits, _ = _setup()
    free, _ = choose_batch(model, lays, (256, 2048), fits, tokens=5e9)
    tight, _ = choose_batch(model, lays, (256, 2048), fits, tokens=5e9, deadline_s=free.time_s / 3)
    assert tight is not None and tight.time_s <= free.time_s / 3 and tight.layout.n_gpus > free.layout.n_gpus


def test_hostile_ranges_plan_in_bounded_time(site):
    t0 = time.monotonic()
    plan = plan_dnn_job([SEVEN_B + "batch=1..10000000"], {}, None, site)
    assert time.monotonic() - t0 < 60  # generous for a busy machine; about a second when idle
    assert plan.error is None and plan.explain["dnn"]["goals"]["chosen"]["global_batch"] <= 10**7
    for bad in ("batch=0..5", "batch=lots", "batch=9..3", "batch=1..1e30"):
        p = plan_dnn_job([SEVEN_B + bad], {}, None, site)
        assert p.changes == [] and p.error.startswith("#HARP dnn: batch=") and "\n" not in p.error


def test_plan_dnn_job_batch_range_sets_gpus_and_says_the_micro_batch(site):
    plan = plan_dnn_job([SEVEN_B + "batch=256..2048"], {}, None, site)
    assert plan.error is None
    chosen = plan.explain["dnn"]["goals"]["chosen"]
    gres = next(c for c in plan.changes if c.option == "gres").value
    assert gres == f"gpu:{chosen['gpu_type']}:{chosen['gpus_per_node']}"
    assert any(f"micro_batch={chosen['micro_batch']}" in n for n in plan.explain["dnn"]["notes"])


SITE = """
[dnn]
[[dnn.gpu_types]]
name = "a100"
memory_gb = 80
gpus_per_node = 8
partition = "gpu"
"""


@pytest.fixture
def config(tmp_path, monkeypatch):
    for name in list(__import__("os").environ):
        if name.startswith("HARP_"):
            monkeypatch.delenv(name)
    path = tmp_path / "harpd.toml"
    path.write_text(SITE)
    monkeypatch.setenv("HARP_CONFIG", str(path))
    return path


def test_cli_plan_prints_plan_stages_and_static(config, capsys):
    rc = main(["dnn", "plan", *SEVEN_B.split()[2:], "tokens=2e9", "trials=9", "eta=3", "deadline=3d"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.startswith("harp dnn plan: search plan, stage 0 of 3: 9 trial(s)")
    assert "static alternative: one pool of" in out and "--gres=gpu:a100:" in out


def test_cli_plan_infeasible_is_one_line(config, capsys):
    rc = main(["dnn", "plan", *SEVEN_B.split()[2:], "tokens=2e12", "deadline=1h", "--run", "8:100h"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "cannot be met" in err
