import json
import math

import numpy as np
import pytest
from report_helpers import DAY, NOW, bench_module, job

from harpd.records import AttemptRecord, Outcome
from harpd.report.aggregate import (
    METRIC_NAMES,
    Bookkeeping,
    GroupRow,
    ReportJson,
    build_report,
    derive,
    group_metrics,
)
from harpd.report.columns import columns_for, factorize, from_records, normalise
from harpd.report.window import Window

ALL = Window(None, None)


def report(recs, by="user", **kw):
    cols = list(dict.fromkeys(columns_for(by) + ["account", "partition", "signature"]))
    return build_report(from_records(recs, cols), by=by, window=kw.pop("window", ALL), now=NOW, **kw)


def row(rep, key):
    return next(r for r in rep.groups if r["key"] == key)


def test_hand_computed_sums_and_ratios():
    recs = [
        # 4 cores x 1 h = 4 core-h allocated, 2 used; limit 2 h -> 8 reserved; 4 GiB x 1 h = 4 GB-h, 1 used
        job("1"),
        # 1 core x 0.5 h, fully used; 2 GiB for 0.5 h, all used; a 1 GPU job
        job(
            "2",
            user="bob",
            req_cpus=1,
            alloc_cpus=1,
            used_time_s=1800,
            used_cpu_s=1800,
            req_time_s=3600,
            req_mem_mb=2048,
            used_mem_mb=2048,
            req_gpus=1,
            alloc_gpus=1,
        ),
    ]
    r = report(recs)
    a, b = row(r, "alice"), row(r, "bob")
    assert (a["core_h_req"], a["core_h_alloc"], a["core_h_used"], a["core_h_waste"]) == (8, 4, 2, 2)
    assert (a["mem_gbh_req"], a["mem_gbh_alloc"], a["mem_gbh_used"]) == (8, 4, 1)
    assert (a["cpu_eff"], a["mem_eff"], a["time_eff"]) == (0.5, 0.25, 0.5)
    assert b["cpu_eff"] == 1.0 and b["gpu_h_alloc"] == 0.5 and b["gpu_h_req"] == 1.0
    assert r.total["core_h_alloc"] == 4.5 and r.total["jobs"] == 2
    assert r.groups[0]["key"] == "alice"  # biggest allocation first


def test_group_efficiency_is_resource_weighted_not_a_mean_of_jobs():
    # a 100 h job at 10% and a 1 h job at 100%: the machine was mostly wasted
    recs = [
        job("1", alloc_cpus=1, used_time_s=100 * 3600, used_cpu_s=10 * 3600, req_time_s=None),
        job("2", alloc_cpus=1, used_time_s=3600, used_cpu_s=3600, req_time_s=None),
    ]
    assert report(recs).total["cpu_eff"] == pytest.approx(11 / 101)


@pytest.mark.parametrize("by", ["user", "account", "partition", "signature"])
def test_groups_add_up_to_the_total(by):
    recs, _s, _a = bench_module().synthetic(3000, seed=3)
    r = report(recs, by=by)
    assert sum(g["jobs"] for g in r.groups) == r.total["jobs"] == len(recs)
    for m in ("core_h_alloc", "core_h_used", "mem_gbh_alloc", "timeout", "oom", "failed_other", "resubmitted"):
        assert sum(g[m] for g in r.groups) == pytest.approx(r.total[m])
    keys = {getattr(x, by) or "(none)" for x in recs}
    # rows by signature are labelled by their program's job name and keep the signature beside it
    assert {g.get("signature", g["key"]) if by == "signature" else g["key"] for g in r.groups} == keys
    # the TOTAL row (built from group sums) equals one group of everything
    cols = list(dict.fromkeys(columns_for(by) + ["account", "partition", "signature"]))
    d = derive(from_records(recs, cols))
    direct = group_metrics(d, np.zeros(d.n, dtype=np.int64), 1)
    for m in METRIC_NAMES:
        assert r.total[m] == pytest.approx(float(direct[m][0]), rel=1e-9, nan_ok=True), m


def test_failures_by_cause_and_cancelled_are_not_failures():
    recs = [
        job("1", outcome=Outcome.TIMEOUT),
        job("2", outcome=Outcome.OOM),
        job("3", outcome=Outcome.OOM),
        job("4", outcome=Outcome.FAILED),
        job("5", outcome=Outcome.NODE_FAIL),
        job("6", outcome=Outcome.CANCELLED),
        job("7"),
    ]
    r = report(recs)
    assert {k: v["jobs"] for k, v in r.failures.items()} == {"timeout": 1, "oom": 2, "other": 2}
    assert r.failures["oom"]["core_h"] == pytest.approx(8.0)
    assert r.total["cancelled"] == 1 and r.total["completed"] == 1
    assert r.total["failed_core_h"] == pytest.approx(5 * 4.0)


def test_resubmissions_count_later_attempts_and_chains():
    recs = [job("1", outcome=Outcome.TIMEOUT), job("1", attempt=2), job("9", attempt=3, outcome=Outcome.OOM)]
    chains = [
        AttemptRecord(
            chain_id=c,
            attempt=n,
            job_id=j,
            limits={},
            reason="",
            step=step,
            outcome=out,
            created_at=0.0,
            updated_at=0.0,
        )
        for c, n, j, step, out in (
            ("1", 1, "1", "done", "timeout"),
            ("1", 2, "1", "done", "completed"),
            ("8", 2, "9", "submitted", None),
        )
    ]
    r = report(recs, bookkeeping=Bookkeeping(chains=chains))
    rs = r.resubmissions
    assert (rs["runs"], rs["completed"], rs["core_h"]) == (2, 1, 8.0)
    assert (rs["chains"], rs["chains_recovered"], rs["chains_pending"], rs["attempts"]) == (2, 1, 1, 3)


def test_harp_savings_and_the_failures_harp_caused():
    n_cols = ["time_s", "cpus", "mem_mb"]
    recs = [
        # harp cut 8 GiB to 4 GiB and 4 h to 2 h; ran fine: saves 4 GiB x 1 h of allocation
        job("1", harp_sized=True),
        # harp cut the time and the job timed out: harp's fault
        job("2", harp_sized=True, outcome=Outcome.TIMEOUT, used_time_s=7260),
        # OOM, but harp did not touch memory: not harp's fault
        job("3", harp_sized=True, outcome=Outcome.OOM),
        job("4"),  # not harp-sized: ignored by the harp section
    ]
    n = len(recs)
    orig = {k: np.full(n, np.nan) for k in n_cols}
    orig["time_s"][:3] = 4 * 3600
    orig["mem_mb"][:3] = [8192, 8192, 4096]
    orig["cpus"][:3] = 4
    orig["time_changed"] = np.array([True, True, True, False])
    orig["mem_changed"] = np.array([True, True, False, False])
    recovered = np.array([False, True, False, False])
    h = report(recs, bookkeeping=Bookkeeping(originals=orig, recovered=recovered)).harp
    assert h["jobs"] == 3 and h["with_original"] == 3
    assert h["asked"]["core_h_reserved"] == pytest.approx(3 * 16.0)
    assert h["allocated"]["core_h_reserved"] == pytest.approx(3 * 8.0)
    assert h["saved"]["mem_gbh_alloc"] == pytest.approx(4 * 1.0 + 4 * 7260 / 3600)
    assert h["saved"]["core_h_alloc"] == 0
    fc = h["failures_caused"]
    assert (fc["jobs"], fc["timeout"], fc["oom"], fc["recovered"]) == (1, 1, 0, 1)
    assert fc["cost"]["core_h_alloc"] == pytest.approx(4 * 7260 / 3600)
    assert h["net_saved"]["core_h_alloc"] == pytest.approx(-4 * 7260 / 3600)


def test_harp_failure_with_unknown_original_counts_against_harp():
    recs = [job("1", harp_sized=True, outcome=Outcome.TIMEOUT)]
    h = report(recs).harp  # no submission record at all
    assert h["failures_caused"]["jobs"] == 1 and h["with_original"] == 0
    assert h["saved"]["core_h_reserved"] == 0  # nothing claimed without the original


def test_timeline_bins_add_up_and_follow_the_data():
    recs = [job(str(i), end_time=NOW - i * DAY) for i in range(40)]
    t = report(recs).timeline
    assert t["bin_s"] == DAY  # at most 60 bins: 39 days in 6 h bins would be 156
    assert sum(t["jobs"]) == 40 and sum(t["core_h_alloc"]) == pytest.approx(160.0)
    assert t["starts"][-1] <= NOW < t["starts"][-1] + DAY
    assert t["starts"][0] <= NOW - 39 * DAY
    # a given window keeps its empty days
    t2 = report(recs[:10], window=Window(NOW - 50 * DAY, NOW + 1)).timeline
    assert len(t2["starts"]) == 51 and sum(t2["jobs"]) == 10 and t2["jobs"][:40] == [0] * 40
    # a short span gets finer bins
    assert report(recs[:3]).timeline["bin_s"] == 3600


def test_calibration_coverage_counts_run_outs_as_misses():
    recs = [job(str(i)) for i in range(8)] + [
        job("t", outcome=Outcome.TIMEOUT, used_time_s=7300),
        job("c", outcome=Outcome.CANCELLED),
    ]
    c = report(recs).calibration
    assert c["time"]["user"]["n"] == 9  # cancelled left out
    assert c["time"]["user"]["coverage"] == pytest.approx(8 / 9)
    assert c["mem"]["user"]["coverage"] == 1.0
    assert c["time"]["harp"]["n"] == 0


def test_empty_input_gives_an_empty_report():
    r = report([])
    assert r.total["jobs"] == 0 and r.groups == [] and r.timeline["starts"] == []


def test_to_dict_is_strict_json_with_every_metric():
    recs, _s, _a = bench_module().synthetic(500, seed=1)
    d = report(recs).to_dict()
    text = json.dumps(d, allow_nan=False)  # NaN would raise
    assert set(METRIC_NAMES) <= set(d["total"])
    assert "points" not in json.loads(text)["calibration"]["time"]["user"]


def test_normalise_turns_store_style_columns_into_typed_arrays():
    raw = {
        "req_cpus": np.array([1, None], dtype=object),
        "attempt": np.array([1.0, np.nan]),
        "harp_sized": np.array([1, 0]),
        "user": np.array(["a", None], dtype=object),
    }
    j = normalise(raw)
    assert j["req_cpus"].dtype == np.float64 and math.isnan(j["req_cpus"][1])
    assert j["attempt"].tolist() == [1, 1] and j["harp_sized"].tolist() == [True, False]
    codes, labels = factorize(np.array(["a", None, "", "a"], dtype=object))
    assert labels == ["a", "(none)"] and codes.tolist() == [0, 1, 1, 0]


def test_unmeasured_usage_is_unknown_not_zero():
    # an imported sacct export without TotalCPU/MaxRSS next to a fully measured job
    recs = [job("1", user="imported", used_cpu_s=None, used_mem_mb=None), job("2", user="measured")]
    r = report(recs)
    imp, mea = row(r, "imported"), row(r, "measured")
    assert math.isnan(imp["core_h_used"]) and math.isnan(imp["cpu_eff"]) and math.isnan(imp["mem_gbh_waste"])
    assert imp["core_h_alloc"] == 4.0 and imp["failed_core_h"] == 0.0  # no failures is a real zero
    assert mea["core_h_used"] == 2.0
    assert r.total["core_h_used"] == 2.0 and r.total["cpu_eff"] == 0.5  # only jobs with both sides count
    groups = json.loads(json.dumps(r.to_dict(), allow_nan=False))["groups"]
    assert next(g for g in groups if g["key"] == "imported")["core_h_used"] is None


def test_group_rows_carry_exactly_the_keys_group_row_names():
    """GroupRow is the rows' type for every reader: a metric added to METRICS without it would go untyped."""
    # (the module's annotations are strings, so NotRequired is read by mypy, not at run time)
    required, optional = {"key", *METRIC_NAMES}, {"source", "signature"}
    assert set(GroupRow.__annotations__) == required | optional
    recs, _s, _a = bench_module().synthetic(200, seed=2)
    r = report(recs)
    for g in [*r.groups, r.total]:
        assert required <= set(g) <= required | optional


def test_report_json_names_every_key_to_dict_writes():
    """ReportJson is what --format json readers are typed against: it cannot miss or invent a key."""
    recs, _s, _a = bench_module().synthetic(100, seed=3)
    assert set(report(recs).to_dict()) == set(ReportJson.__annotations__)
