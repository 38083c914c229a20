"""A failed or killed run's usage is a lower bound, never a sample (harpd.features.usage), for every learner;
a run that failed after harp cut a resource restores it (harpd.predict.restore)."""

from __future__ import annotations

import pytest

from harpd.config import HarpSettings
from harpd.features.usage import usage_of
from harpd.predict.cores import run_cores
from harpd.predict.live import ModelPredictor
from harpd.predict.restore import cut_resources, restored_by
from harpd.protocol import Decision, JobRequest, Resources
from harpd.records import JobRecord, Outcome
from harpd.replay.dataset import prepare
from harpd.store import Store
from tests.helpers.submissions import stored_submission

T0 = 1_700_000_000.0
NOT_COMPLETED = [Outcome.FAILED, Outcome.CANCELLED, Outcome.OOM, Outcome.TIMEOUT, Outcome.NODE_FAIL, Outcome.PREEMPTED]


def _run(
    i: int,
    rss: float,
    outcome: Outcome = Outcome.COMPLETED,
    req_mem: float = 2000.0,
    used_s: float = 60.0,
    req_s: float = 1800.0,
    cpus: int = 1,
    cpu_s: float | None = None,
    sig: str = "sig-prog",
    harp_sized: bool = False,
) -> JobRecord:
    t = T0 + 100.0 * i
    return JobRecord(
        job_id=str(i),
        source="slurm",
        user="alice",
        account="a",
        partition="cpu",
        signature=sig,
        submit_time=t,
        start_time=t,
        end_time=t + used_s,
        used_time_s=used_s,
        req_time_s=req_s,
        req_cpus=cpus,
        req_mem_mb=req_mem,
        used_mem_mb=rss,
        used_cpu_s=cpu_s,
        outcome=outcome,
        censored_time=outcome is Outcome.TIMEOUT,
        censored_mem=outcome is Outcome.OOM,
        harp_sized=harp_sized,
    )


@pytest.fixture
def predictor(tmp_path):
    opened: list[Store] = []

    def make(records: list[JobRecord], subs: dict[str, tuple[dict, dict]] | None = None) -> ModelPredictor:
        s = HarpSettings(store={"path": str(tmp_path / f"h{len(opened)}.db")})
        st = Store.open(s.store.path)
        st.insert_jobs(records)
        for job_id, (original, submitted) in (subs or {}).items():
            st.add_submission(
                job_id,
                1000,
                "alice",
                {"signature": "sig-prog"},
                Resources.model_validate(original),
                Resources.model_validate(submitted),
                Decision.model_validate({"changes": [{"option": "cpus-per-task", "value": "1"}]}),
            )
        opened.append(st)
        return ModelPredictor(s, store=st)

    yield make
    for st in opened:
        st.close()


def _mem_of(p: ModelPredictor, req_mem: int = 2000, cpus: int | None = None) -> int:
    """The memory (MiB) harp gives the program's next job, the request when it keeps it."""
    d = p.decide(
        JobRequest(
            partition="cpu", signature="sig-prog", request={"time_s": 1800, "mem_mb": req_mem, "cpus_per_task": cpus}
        ),
        "alice",
        1000,
    )
    ch = [c for c in d.changes if c.option == "mem"]
    if not ch:
        return req_mem
    v = ch[0].value
    return int(v[:-1]) * (1024 if v.endswith("G") else 1)


# -- the one rule ----------------------------------------------------------------------


@pytest.mark.parametrize("outcome", NOT_COMPLETED)
def test_a_run_that_did_not_complete_is_a_lower_bound(outcome):
    u = usage_of(_run(1, 123.0, outcome), "mem")
    assert u is not None and u.used == 123.0 and u.censored
    assert u.ran_out == (outcome is Outcome.OOM)  # only a memory kill says it needed its whole request
    assert usage_of(_run(1, 123.0, outcome), "time").ran_out == (outcome is Outcome.TIMEOUT)
    assert not usage_of(_run(1, 123.0), "mem").censored  # a completed run below its request is a sample


def test_a_completed_run_that_used_its_whole_request_is_censored():
    """Held at its limit (cgroup reclaim, a time limit about to kill it): what it would have used is unknown."""
    u = usage_of(_run(1, 2000.0, req_mem=2000.0), "mem")
    assert u.censored and u.ran_out
    assert usage_of(_run(1, 100.0, used_s=1800.0), "time").ran_out
    assert usage_of(_run(1, 100.0, Outcome.RUNNING), "mem") is None


def test_the_replay_reads_runs_through_the_same_rule():
    recs = [_run(i, 500.0) for i in range(4)] + [_run(4, 123.0, Outcome.FAILED), _run(5, 2000.0)]
    prep = prepare(recs, "mem")
    # the metric's "ran out": only the run that filled its request; the failed one consumed what it used
    assert list(prep.censored) == [False] * 5 + [True]


# -- never lowering a later size ------------------------------------------------------------


@pytest.mark.parametrize("outcome", NOT_COMPLETED)
def test_runs_that_did_not_complete_never_lower_the_next_size(predictor, outcome):
    good = [_run(i, 529.0) for i in range(6)]
    before = _mem_of(predictor(good))
    assert 529 < before < 2000  # the program's own runs size it
    after = _mem_of(predictor(good + [_run(6 + i, 123.0, outcome) for i in range(6)]))
    assert after >= before, (outcome, before, after)


def test_a_completed_run_at_its_whole_request_never_lowers_the_next_size(predictor):
    good = [_run(i, 529.0) for i in range(6)]
    before = _mem_of(predictor(good))
    # a run that harp gave 600 MiB and that filled them: a lower bound, not a need of 600
    assert _mem_of(predictor(good + [_run(6, 600.0, req_mem=600.0)])) >= before


def test_failed_runs_cores_are_not_samples():
    assert run_cores(_run(1, 100.0, Outcome.FAILED, cpu_s=1.0)) is None
    assert run_cores(_run(1, 100.0, cpu_s=120.0)) == pytest.approx(2.0)


# -- restoring what a failed run had cut ------------------------------------------------------


def test_what_harp_cut_is_read_from_the_registered_submission():
    sub = {
        "original": {"cpus_per_task": 4, "mem_per_cpu_mb": 100, "time_s": 600},
        "submitted": {"cpus_per_task": 1, "mem_mb": 400, "time_s": 300},
    }
    assert cut_resources(stored_submission(sub)) == {"cpus", "time"}  # 4 x 100 MiB per CPU kept as a 400 MiB total
    assert cut_resources(stored_submission(original={"mem_mb": 800}, submitted={"mem_mb": 500})) == {"mem"}
    assert cut_resources(None) == set() and cut_resources(stored_submission(original="x")) == set()
    assert restored_by(Outcome.FAILED, {"cpus", "mem"}) == {"cpus", "mem"}
    assert restored_by(Outcome.TIMEOUT, {"cpus", "time"}) == {"cpus"}  # its time is recovery's
    assert restored_by(Outcome.OOM, {"mem"}) == set() and restored_by(Outcome.CANCELLED, {"cpus"}) == set()


def _cores_of(p: ModelPredictor) -> int:
    d = p.decide(
        JobRequest(partition="cpu", signature="sig-prog", request={"time_s": 1800, "cpus_per_task": 2}), "alice", 1000
    )
    ch = [c for c in d.changes if c.option == "cpus-per-task"]
    return int(ch[0].value) if ch else 2


def test_a_run_that_failed_after_harp_cut_its_cpus_restores_them_for_good(predictor):
    # 25 runs that kept 0.35 cores busy of 2: harp would give one
    base = [_run(i, 100.0, cpus=2, cpu_s=21.0) for i in range(25)]
    assert _cores_of(predictor(base)) == 1
    failed = _run(25, 50.0, Outcome.FAILED, cpus=1, cpu_s=0.0, harp_sized=True)
    cut = {"25": ({"cpus_per_task": 2, "time_s": 1800}, {"cpus_per_task": 1, "time_s": 1800})}
    p = predictor(base + [failed] + [_run(26 + i, 100.0, cpus=2, cpu_s=21.0) for i in range(25)], cut)
    d = p.decide(
        JobRequest(partition="cpu", signature="sig-prog", request={"time_s": 1800, "cpus_per_task": 2}), "alice", 1000
    )
    assert not [c for c in d.changes if c.option == "cpus-per-task"], d.explain
    assert "failed after harp lowered its CPUs" in d.explain["cores"]["reason"]
    # a failure harp did not cause (nothing cut) restores nothing
    other = _run(25, 50.0, Outcome.FAILED, cpus=2, cpu_s=0.0, harp_sized=True)
    same = {"25": ({"cpus_per_task": 2, "time_s": 1800}, {"cpus_per_task": 2, "time_s": 1800})}
    assert _cores_of(predictor(base + [other], same)) == 1


def test_a_run_that_failed_after_harp_cut_its_memory_gets_the_request_back(predictor):
    good = [_run(i, 529.0) for i in range(20)]
    failed = _run(20, 500.0, Outcome.FAILED, req_mem=583.0, harp_sized=True)
    later = [_run(21 + i, 529.0) for i in range(10)]  # the failed run left the history rule's window
    assert _mem_of(predictor(good + later)) < 2000
    p = predictor(good + [failed] + later, {"20": ({"mem_mb": 2000}, {"mem_mb": 583})})
    assert _mem_of(p) == 2000
    d = p.decide(
        JobRequest(partition="cpu", signature="sig-prog", request={"time_s": 1800, "mem_mb": 2000}), "alice", 1
    )
    assert "failed after harp lowered its memory" in d.explain["mem"]["reason"]
