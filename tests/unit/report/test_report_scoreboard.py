import numpy as np
import pytest
from report_helpers import job

from harpd.records import ModelRow, Outcome
from harpd.report.columns import columns_for, from_records
from harpd.report.scoreboard import build, from_models_table, live_table


def test_models_table_keeps_the_latest_model_per_name_and_resource():
    models = [
        ModelRow(1, "gbm", "time", 1.0, 10, {"pinball": 0.5, "note": "x"}, False, "/m/1"),
        ModelRow(2, "gbm", "time", 2.0, 20, {"pinball": 0.3}, True, "/m/2"),
        ModelRow(3, "tsafrir", "mem", 3.0, 20, {"pinball": 0.9, "cov": 0.9}, True, "/m/3"),
    ]
    t = from_models_table(models)
    assert [(r["name"], r["resource"], r["n_train"]) for r in t["rows"]] == [
        ("tsafrir", "mem", 20),
        ("gbm", "time", 20),
    ]
    assert t["columns"] == ["n_train", "pinball", "cov"]  # numeric score keys, most common first
    assert t["rows"][1]["pinball"] == 0.3 and "note" not in t["rows"][1]
    assert from_models_table([])["note"] == "no models trained yet"


def test_live_rows_are_harpd_metrics_on_first_runs_per_model():
    metrics = pytest.importorskip("harpd.replay.metric")
    recs = [job(str(i), harp_sized=True, req_time_s=3600 + 60 * i, used_time_s=1800 + 30 * i) for i in range(8)]
    recs += [
        job("t", harp_sized=True, req_time_s=600, used_time_s=660, outcome=Outcome.TIMEOUT),
        job("t", harp_sized=True, attempt=2, req_time_s=1200, used_time_s=900),  # escalation, not the model
        job("u"),
    ]  # not harp-sized
    jobs = from_records(recs, columns_for("user"))
    n = len(recs)
    models = np.array(["harp"] * 4 + ["gbm"] * 4 + ["harp", "harp", None], dtype=object)
    orig = {"time_s": np.full(n, 14400.0), "mem_mb": np.full(n, 8192.0), "cpus": np.full(n, 4.0)}
    t = live_table(jobs, models, orig, alpha_time=0.05, alpha_mem=0.05, max_attempts=3)
    rows = {(r["name"], r["resource"]): r for r in t["rows"]}
    assert set(rows) == {("gbm", "time"), ("harp", "time"), ("gbm", "mem"), ("harp", "mem")}
    assert rows[("harp", "time")]["jobs"] == 5 and rows[("gbm", "time")]["jobs"] == 4
    assert rows[("harp", "time")]["ran_out"] == pytest.approx(1 / 5)
    # same numbers as calling the predictors' metric directly
    sel = np.array([True] * 4 + [False] * 4 + [True, False, False])
    j = {k: v[sel] for k, v in jobs.items()}
    judged = metrics.Jobs(j["used_time_s"], orig["time_s"][sel], j["outcome"] == "timeout", j["alloc_cpus"])
    base = metrics.evaluate("request", orig["time_s"][sel], judged, resource="time", alpha=0.05)
    want = metrics.evaluate(
        "harp",
        j["req_time_s"],
        judged,
        resource="time",
        alpha=0.05,
        baseline=base,
    )
    assert rows[("harp", "time")]["score"] == pytest.approx(want.score)
    assert rows[("harp", "time")]["over_vs_request"] == pytest.approx(want.over_vs_request)


def test_no_harp_jobs_no_live_table():
    jobs = from_records([job("1")], columns_for("user"))
    assert live_table(jobs, None, None, alpha_time=0.05, alpha_mem=0.05, max_attempts=3) is None


def test_build_survives_a_broken_store():
    class Broken:
        def models(self):
            raise RuntimeError("disk on fire")

    sb = build(Broken())
    assert sb["tables"] == [] and "disk on fire" in sb["notes"][0]
