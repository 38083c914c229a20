"""The job's own earlier runs from harpd's store feed the deadline plan's scaling fit."""

from __future__ import annotations

import pytest

from harpd.dnn.goals import RunTime
from harpd.dnn.history import goal_signature, runs_from_store
from harpd.dnn.plan import plan_dnn_job
from harpd.protocol import Resources
from harpd.records import JobRecord, Outcome
from harpd.store import Store

LINE = (
    "#HARP dnn params=1.5e9 layers=48 hidden=1600 heads=25 seq_len=1024 micro_batch=8 "
    "attention=flash recompute=full tokens=20e9"
)


@pytest.fixture
def store(tmp_path):
    s = Store.open(tmp_path / "harp.db")
    yield s
    s.close()


def _run(store, job_id, uid, line, gres, nodes, elapsed, outcome=Outcome.COMPLETED):
    store.add_submission(
        job_id,
        uid,
        "u",
        {"harp_lines": [line]},
        Resources(),
        Resources.model_validate({"gres": gres, "nodes": nodes}),
        None,
    )
    store.insert_jobs([JobRecord(job_id=job_id, user="u", outcome=outcome, used_time_s=elapsed)])


def test_signature_ignores_where_and_goals():
    a = {"params": "1e9", "tokens": "2e9", "gpus": "4", "deadline": "8h", "zero": "2"}
    b = {"params": "1e9", "tokens": "2e9", "gpus": "8", "deadline": "2h", "zero": "3", "stage": "1"}
    assert goal_signature(a) == goal_signature(b) != goal_signature({**a, "tokens": "4e9"})


def test_completed_runs_of_the_same_job_and_user_only(store):
    _run(store, "101", 1000, LINE + " deadline=8h", "gpu:a100:8", 1, 40000)
    _run(store, "102", 1000, LINE + " gpus=16", "gpu:a100:8", 2, 23000)
    _run(store, "103", 1000, LINE, "gpu:a100:4", 1, 9000, Outcome.TIMEOUT)  # killed: not usage
    _run(store, "104", 2000, LINE, "gpu:a100:4", 1, 70000)  # another user's
    _run(store, "105", 1000, LINE.replace("tokens=20e9", "tokens=5e9"), "gpu:a100:4", 1, 20000)  # other work
    runs = runs_from_store(
        store,
        1000,
        {
            "params": "1.5e9",
            "layers": "48",
            "hidden": "1600",
            "heads": "25",
            "seq_len": "1024",
            "micro_batch": "8",
            "attention": "flash",
            "recompute": "full",
            "tokens": "20e9",
            "deadline": "12h",
        },
    )
    assert sorted(runs, key=lambda r: r.n_gpus) == [RunTime(8, 40000.0, "a100", 1), RunTime(16, 23000.0, "a100", 2)]


def test_plan_uses_history_when_the_line_has_no_runs(site, store):
    _run(store, "201", 1000, LINE, "gpu:a100:8", 1, 40000)
    _run(store, "202", 1000, LINE, "gpu:a100:8", 2, 23000)
    _run(store, "203", 1000, LINE, "gpu:a100:8", 4, 14000)
    plan = plan_dnn_job(
        [LINE + " deadline=30h"], {}, None, site, history=lambda tokens: runs_from_store(store, 1000, tokens)
    )
    assert plan.error is None
    assert plan.explain["dnn"]["goals"]["scaling"]["source"].startswith("fitted to 3 runs")
    assert any("3 completed earlier run(s)" in n for n in plan.explain["dnn"]["notes"])
    # runs= on the line win over history
    given = plan_dnn_job(
        [LINE + " deadline=30h runs=8xa100:40000s"],
        {},
        None,
        site,
        history=lambda tokens: pytest.fail("history read although runs= was given"),
    )
    assert given.explain["dnn"]["goals"]["scaling"]["source"].startswith("fitted to 1 run")
