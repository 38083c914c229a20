"""Reading a report's inputs from a real store (temporary SQLite file)."""

import numpy as np
import pytest
from report_helpers import DAY, NOW, job, resources

from harpd.protocol import Decision, Resources
from harpd.records import Outcome
from harpd.report.source import SUBMISSION_PATHS, Filters, load, originals_from_submissions, resource_totals, store_span
from harpd.report.window import Window

ALL = Window(None, None)


def values_of(*res_pairs, models=None):
    """submission_values-shaped dict for (original, submitted) pairs."""
    out = {p: [] for p in SUBMISSION_PATHS}
    for i, pair in enumerate(res_pairs):
        for p in SUBMISSION_PATHS:
            col, _, key = p.partition(".")
            if pair is None:
                out[p].append(None)
            elif p == "job_id":
                out[p].append(str(i))
            elif col == "decision":
                out[p].append(None if models is None else models[i])
            else:
                out[p].append((pair[0] if col == "original" else pair[1]).get(key))
    return out


def test_resource_totals_follow_sbatch_semantics():
    rs = [
        {"time_s": 3600, "mem_mb": 1000, "nodes": 2, "cpus_per_task": 4, "ntasks": 2},  # --mem is per node
        {"mem_per_cpu_mb": 500, "cpus_per_task": 4},  # per CPU x CPUs
        {"mem_per_gpu_mb": 8000, "gres": "gpu:a100:2"},  # per GPU x GPUs from gres
        {"mem_per_gpu_mb": 8000, "gpus": "3"},
        {},  # nothing given: Slurm defaults, unknown here
        {"time_s": "garbage", "ntasks": 3},
    ]
    vals = values_of(*[(r, {}) for r in rs])
    t, c, m = resource_totals(vals, "original")
    assert t[0] == 3600 and c[0] == 8 and m[0] == 2000
    assert c[1] == 4 and m[1] == 2000
    assert m[2] == 16000 and m[3] == 24000
    assert np.isnan([t[4], c[4], m[4]]).all()
    assert np.isnan(t[5]) and c[5] == 3


def test_originals_mark_what_harp_changed_and_unknown_submissions():
    vals = values_of(
        (resources(7200, 8000, 4), resources(3600, 8000, 4)),  # time changed
        (resources(None, 8000, 4), resources(None, 2000, 4)),  # mem changed
        None,  # no submission on record
        models=["harp", "gbm", None],
    )
    o, models = originals_from_submissions(np.array([0, 2, 3]), vals, 4)
    assert o["time_s"][0] == 7200 and np.isnan(o["time_s"][1])
    assert o["time_changed"].tolist() == [True, False, False, True]
    assert o["mem_changed"].tolist() == [False, False, True, True]
    assert models.tolist() == ["harp", None, "gbm", "unknown"]


def test_load_filters_window_unfinished_and_user(store):
    store.insert_jobs(
        [
            job("1", end_time=NOW - 2 * DAY),
            job("2", end_time=NOW - 20 * DAY),
            job("3", end_time=NOW - 2 * DAY, user="bob"),
            job("4", end_time=None, outcome=Outcome.RUNNING),
        ]
    )
    got = load(store, "user", Window(NOW - 7 * DAY, NOW), None)
    assert sorted(got.jobs["job_id"].tolist()) == ["1", "3"]
    mine = load(store, "user", ALL, Filters(users=("alice",)))
    assert sorted(mine.jobs["job_id"].tolist()) == ["1", "2"]
    assert store_span(store, Filters(users=("bob",))) == (1, NOW - 2 * DAY, NOW - 2 * DAY)


def test_load_joins_submissions_and_finds_recoveries(store):
    store.insert_jobs(
        [
            # requeued in place: same id, attempt 2 completed
            job("10", harp_sized=True, outcome=Outcome.TIMEOUT),
            job("10", harp_sized=True, attempt=2),
            # resubmitted as a new job of chain 20: recovered via the attempts table
            job("20", harp_sized=True, outcome=Outcome.OOM, req_mem_mb=1000, used_mem_mb=1020),
            job("21", harp_sized=True, attempt=2, req_mem_mb=2000),
            # ran out and nothing came after it
            job("30", harp_sized=True, outcome=Outcome.TIMEOUT),
            job("40"),
        ]
    )
    for jid, orig, sub in (
        ("10", resources(14400, 4096, 4), resources(7200, 4096, 4)),
        ("20", resources(7200, 8000, 4), resources(7200, 1000, 4)),
        ("30", resources(14400, 4096, 4), resources(7200, 4096, 4)),
    ):
        store.add_submission(
            jid,
            1000,
            "alice",
            {},
            Resources.model_validate(orig),
            Resources.model_validate(sub),
            Decision.model_validate({"model": "harp", "changes": []}),
            chain_id=jid,
        )
    store.add_attempt("20", 1, "20", {}, "first", "done")
    store.update_attempt("20", 1, outcome="oom")
    store.add_attempt("20", 2, "21", {"mem_mb": 2000}, "OOM: doubled memory", "done")
    store.add_attempt("20", 2 + 0, "21", {}, "dup", "done")  # exactly-once: ignored
    store.update_attempt("20", 2, outcome="completed")
    got = load(store, "user", ALL, None)
    ids = got.jobs["job_id"].tolist()
    att = got.jobs["attempt"].tolist()

    def at(j, a=1):
        return next(i for i, (x, y) in enumerate(zip(ids, att)) if x == j and y == a)

    assert got.recovered[at("10")] and got.recovered[at("20")] and not got.recovered[at("30")]
    assert got.originals["time_s"][at("10")] == 14400 and got.originals["mem_mb"][at("20")] == 8000
    assert got.models[at("10")] == "harp" and got.models[at("40")] is None
    assert {r.chain_id for r in got.chains} == {"20"} and len(got.chains) == 2
    # resubmitted runs without a submission of their own are expected, not a problem
    assert not any("no submission record" in n for n in got.notes)
    store.insert_jobs([job("50", harp_sized=True)])
    assert any(n.startswith("1 harp-sized job(s) have no submission") for n in load(store, "user", ALL, None).notes)


def test_chains_of_other_users_are_not_shown(store):
    store.insert_jobs([job("1", user="alice", outcome=Outcome.TIMEOUT), job("2", user="bob", attempt=2)])
    store.add_attempt("1", 1, "1", {}, "first", "done")
    store.add_attempt("1", 2, "2", {}, "retry", "done")
    store.add_attempt("7", 2, "8", {}, "someone else", "submitted")
    alice = load(store, "user", ALL, Filters(users=("alice",)))
    assert {r.chain_id for r in alice.chains} == {"1"}


def test_empty_store_loads_nothing(store):
    got = load(store, "signature", ALL, None)
    assert got.jobs["job_id"].size == 0 and got.originals is None
    assert store_span(store, None) == (0, None, None)


def test_submission_values_rejects_unknown_fields(store):
    with pytest.raises(ValueError, match="unknown submission field"):
        store.submission_values(["1"], ["original.time_s); DROP TABLE jobs; --"])


def test_wide_windows_scan_narrow_windows_use_the_index(store):
    from harpd.report.source import _index_pays, window_where

    store.insert_jobs([job(str(i), end_time=NOW - i * DAY) for i in range(100)])
    assert _index_pays(store, Window(NOW - 5 * DAY, NOW + 1))  # 6 of 100 jobs
    assert not _index_pays(store, Window(NOW - 50 * DAY, NOW + 1))
    assert not _index_pays(store, ALL)
    scan, params = window_where(Window(NOW - 50 * DAY, None), None, use_index=False)
    assert "+end_time >= ?" in scan
    # both plans read the same rows
    a = store.job_columns(["job_id"], *window_where(Window(NOW - 50 * DAY, None), None))
    b = store.job_columns(["job_id"], scan, params)
    assert sorted(a["job_id"].tolist()) == sorted(b["job_id"].tolist()) and len(a["job_id"]) == 51
