"""A workflow manager's retry of a task that just ran out gets at least the escalated size (predict.retry_floor)."""

from __future__ import annotations

import pytest

from harpd.config import HarpSettings
from harpd.features.workflow import identify
from harpd.predict.live import ModelPredictor
from harpd.predict.retry_floor import floor_after
from harpd.protocol import Decision, JobRequest, Resources
from harpd.records import JobRecord, Outcome
from harpd.store import Store
from tests.helpers.submissions import stored_submission

T0 = 1_700_000_000.0
WRAP = "python -m snakemake --snakefile /w/Snakefile --target-jobs 'work:sample=s1' --allowed-rules work --cores all"


def _job(mem_mb: int = 2000, wrap: str = WRAP) -> JobRequest:
    return JobRequest(partition="cpu", cwd="/w", commands=[wrap], request={"time_s": 1800, "mem_mb": mem_mb})


def _sig() -> str:
    return identify([WRAP], None, None, "/w").signature()


def _runs(n: int, rss: float) -> list[JobRecord]:
    return [
        JobRecord(
            job_id=f"h{i}",
            user="alice",
            account="a",
            partition="cpu",
            signature=_sig(),
            submit_time=T0 + 100 * i,
            start_time=T0 + 100 * i,
            end_time=T0 + 100 * i + 30,
            used_time_s=30.0,
            req_time_s=1800.0,
            req_cpus=1,
            req_mem_mb=2000.0,
            used_mem_mb=rss,
            outcome=Outcome.COMPLETED,
        )
        for i in range(n)
    ]


@pytest.fixture
def setup(tmp_path):
    s = HarpSettings(store={"path": str(tmp_path / "h.db")})
    st = Store.open(s.store.path)
    st.insert_jobs(_runs(6, 300.0))  # the rule's runs: harp gives it about 1.1 x 300 MiB
    yield s, st
    st.close()


def _mem(d) -> int:
    ch = [c for c in d.changes if c.option == "mem"]
    return int(ch[0].value.rstrip("M")) if ch else 2000


def _register(st: Store, job_id: str, given_mb: int, **done) -> None:
    st.add_submission(
        job_id,
        1000,
        "alice",
        _job().model_dump(),
        Resources(time_s=1800, mem_mb=2000),
        Resources.model_validate({"time_s": 1800, "mem_mb": given_mb}),
        Decision.model_validate({"changes": [{"option": "mem", "value": f"{given_mb}M"}]}),
    )
    if done:
        st.mark_submission_done(job_id, done["outcome"])


def test_a_retry_seconds_after_an_oom_gets_at_least_twice_what_failed(setup):
    s, st = setup
    p = ModelPredictor(s, store=st)
    first = _mem(p.decide(_job(), "alice", 1000))
    assert first < 600  # the rule's history cuts it
    _register(st, "101", first, outcome=Outcome.OOM)
    d = p.decide(_job(), "alice", 1000)
    assert _mem(d) >= min(2 * first, 2000), d.explain
    assert d.explain["retry"]["after_job"] == "101" and d.explain["retry"]["ended"] == "oom"


def test_a_retry_before_harpd_knows_how_the_attempt_ended_is_escalated_too(setup):
    s, st = setup
    p = ModelPredictor(s, store=st)
    first = _mem(p.decide(_job(), "alice", 1000))
    _register(st, "102", first)  # still "pending": harpd has not polled its end
    assert _mem(p.decide(_job(), "alice", 1000)) >= min(2 * first, 2000)


def test_a_rerun_after_a_completed_attempt_is_sized_as_usual(setup):
    s, st = setup
    p = ModelPredictor(s, store=st)
    first = _mem(p.decide(_job(), "alice", 1000))
    _register(st, "103", first, outcome=Outcome.COMPLETED)
    assert _mem(p.decide(_job(), "alice", 1000)) == first
    # another sample of the rule is another task: no floor from s1's attempt
    other = WRAP.replace("sample=s1", "sample=s2")
    _register(st, "104", first, outcome=Outcome.OOM)
    assert _mem(p.decide(_job(wrap=other), "alice", 1000)) == first


def test_the_floor_follows_the_escalation_rule_and_what_ended_the_attempt():
    sub = {
        "job_id": "9",
        "state": "done",
        "original": {"mem_mb": 2000, "time_s": 1800, "cpus_per_task": 4},
        "submitted": {"mem_mb": 500, "time_s": 600, "cpus_per_task": 1},
    }
    oom = floor_after(stored_submission(sub, **{"outcome": "oom"}), 3)
    assert oom.mem_mb == 1000 and oom.time_s is None and oom.keep_cpus is None
    timeout = floor_after(stored_submission(sub, **{"outcome": "timeout"}), 3)
    assert timeout.time_s == 1200 and timeout.mem_mb is None and timeout.keep_cpus
    failed = floor_after(stored_submission(sub, **{"outcome": "failed"}), 3)
    assert failed.mem_mb == 2000 and failed.time_s == 1800 and failed.keep_cpus  # what harp cut comes back
    assert floor_after(stored_submission(sub, **{"outcome": "completed"}), 3) is None
    assert floor_after(stored_submission(sub, **{"outcome": "cancelled"}), 3) is None
    unknown = floor_after(stored_submission(sub, **{"state": "pending", "outcome": None}), 3)
    assert unknown.mem_mb == 1000 and unknown.time_s == 1200 and unknown.keep_cpus
    # with one attempt allowed the escalation stops: the request
    assert floor_after(stored_submission(sub, **{"outcome": "oom"}), 1).mem_mb == 2000


def test_a_pending_task_decided_again_is_not_a_retry_of_itself(setup):
    from harpd.predict.retry_floor import redeciding

    s, st = setup
    p = ModelPredictor(s, store=st)
    first = _mem(p.decide(_job(), "alice", 1000))
    _register(st, "105", first)  # pending: the watcher re-sizes it while it waits
    with redeciding("105"):
        again = p.decide(_job(), "alice", 1000)
    assert _mem(again) == first and "retry" not in again.explain
    # the manager's retry after it ran out still gets its floor, also when re-decided while pending
    st.mark_submission_done("105", Outcome.OOM)
    retry = _mem(p.decide(_job(), "alice", 1000))
    assert retry >= min(2 * first, 2000)
    _register(st, "106", retry)
    with redeciding("106"):
        assert _mem(p.decide(_job(), "alice", 1000)) >= min(2 * first, 2000)
