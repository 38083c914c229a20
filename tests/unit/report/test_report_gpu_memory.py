"""`harp report`'s DNN section: harp's GPU memory estimate against the observed peak, per setup (#47)."""

from __future__ import annotations

import json

import pytest
from report_helpers import job

from harpd.cli import report_cmd
from harpd.cli.main import main
from harpd.config import DnnSettings, GpuType
from harpd.dnn.plan import plan_dnn_job
from harpd.protocol import Decision, Resources
from harpd.records import Outcome
from harpd.report.gpu_memory import gpu_memory_rows, render_gpu_memory
from harpd.report.source import Filters
from harpd.report.window import parse_window
from harpd.store import Store

LINE = "#HARP dnn params=1.5e9 layers=48 hidden=1600 heads=25 seq_len=1024 micro_batch=8 attention=flash"
SITE = DnnSettings(
    gpu_types=[GpuType(name="a100", memory_gb=80, gpus_per_node=8, billing_weight=1.0, partition="gpu-a100")]
)


def _plan(line):
    p = plan_dnn_job([line], {}, None, SITE)
    assert p.error is None
    return p


def _run(store, jid, plan, *, user="alice", uid=1001, outcome=Outcome.COMPLETED, peak_gib=None, gpus=None):
    decision = {"changes": [c.model_dump() for c in plan.changes], "explain": plan.explain, "model": "zero-dnn"}
    store.add_submission(
        jid,
        uid,
        user,
        {"harp_lines": [LINE]},
        Resources(),
        Resources(),
        (None if decision is None else Decision.model_validate(decision)),
    )
    n = plan.explain["dnn"]["chosen"]["n_gpus"] if gpus is None else gpus
    peak = None if peak_gib is None else peak_gib * 1024
    store.insert_jobs([job(jid, user=user, outcome=outcome, harp_sized=True, alloc_gpus=n, used_gpumem_mb=peak)])


@pytest.fixture
def store(tmp_path):
    s = Store.open(tmp_path / "harp.db")
    yield s
    s.close()


def test_rows_per_setup_and_configuration(store):
    one = _plan(LINE)
    auto = _plan(LINE.replace("micro_batch=8", "micro_batch=4") + " zero=auto")
    est = one.explain["dnn"]["chosen"]["need_gib"]
    cap = one.explain["dnn"]["chosen"]["capacity_gib"]
    _run(store, "1", one, peak_gib=est * 0.8)
    _run(store, "2", one, peak_gib=est * 0.9)
    _run(store, "3", one, outcome=Outcome.FAILED, peak_gib=cap * 0.95)  # out of GPU memory
    _run(store, "4", one)  # no gres/gpumem gathered
    _run(store, "5", auto, peak_gib=10.0)
    store.insert_jobs([job("6", alloc_gpus=2)])  # a GPU job harp did not plan: not a row
    rows = gpu_memory_rows(store, parse_window("all", None, 30), Filters())
    assert sorted(r.runs for r in rows) == [1, 4]
    (r,) = [r for r in rows if r.runs == 4]
    assert (r.gpu_type, r.n_gpus, r.zero) == ("a100", 1, 0) and r.jobs == ("1", "2", "3", "4")
    assert r.runs_with_peak == 3 and r.out_of_gpu_memory == 1
    assert r.estimate_gib == est and r.peak_gib == pytest.approx(cap * 0.95, abs=0.01)
    assert r.ratio == pytest.approx(cap * 0.95 / est, abs=0.01) and r.ratio > 1  # the OOM's peak above the estimate
    assert "1.5B s1024 b8 attention=flash" in r.setup
    text = "\n".join(render_gpu_memory([x.to_dict() for x in rows]))
    assert "1xa100 zero=0" in text and "1 run(s) without a gres/gpumem peak" in text
    assert "OOM: runs that failed" in text


def test_scope_and_window_are_the_reports(store):
    p = _plan(LINE)
    _run(store, "1", p, peak_gib=5.0)
    _run(store, "2", p, user="bob", uid=1002, peak_gib=50.0)
    rows = gpu_memory_rows(store, parse_window("all", None, 30), Filters(users=("alice",)))
    assert len(rows) == 1 and rows[0].jobs == ("1",) and rows[0].peak_gib == 5.0
    assert gpu_memory_rows(store, parse_window("1d", None, 30), Filters()) == []  # ended before the window
    assert render_gpu_memory([]) == []


def test_harp_report_shows_the_section(tmp_path, monkeypatch, capsys):
    db = tmp_path / "harp.db"
    with Store.open(db) as s:
        p = _plan(LINE)
        _run(s, "1", p, peak_gib=20.0)
        s.insert_jobs([job("2", user="alice")])  # a CPU job: the report has no DNN row for it
    conf = tmp_path / "harpd.toml"
    conf.write_text(f'[store]\npath = "{db}"\n[report]\ndefault_window_days = 36500\n')
    monkeypatch.delenv("HARP_CONFIG", raising=False)
    monkeypatch.setattr(report_cmd.os, "getuid", lambda: 0)
    monkeypatch.setattr(report_cmd, "user_name", lambda uid: "root")
    assert main(["--config", str(conf), "report", "--since", "all"]) == 0
    out = capsys.readouterr().out
    assert "GPU memory per GPU: harp's estimate vs the peak Slurm recorded" in out
    (line,) = [x for x in out.splitlines() if "zero=0" in x]
    est = p.explain["dnn"]["chosen"]["need_gib"]
    assert f"{est:.2f}G" in line and "20.00G" in line and f"{20.0 / est:.2f}" in line
    assert main(["--config", str(conf), "report", "--since", "all", "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["gpu_memory"]
    assert row["jobs"] == ["1"] and row["peak_gib"] == 20.0 and row["peak_over_estimate"] == round(20.0 / est, 3)
