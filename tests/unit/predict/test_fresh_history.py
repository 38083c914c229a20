"""An outcome harpd has ingested is in the very next decision.

A history refreshed on a request, in the background, after the answer, would
let a dry run right after two OOM kills still cut the memory below what had
failed.  So the ingest poller hands each poll's new outcomes to the predictor
as it stores them, and that is the one way they reach it: the predictor reads
the store only when it loads.
"""

from __future__ import annotations

import time

import pytest

from harpd.config import HarpSettings
from harpd.ingest.poller import Ingestor
from harpd.predict.live import ModelPredictor
from harpd.protocol import JobRequest
from harpd.records import JobRecord, Outcome
from harpd.store import Store


class Accounting:
    """sacct as the poller sees it: every run in ``runs``."""

    def __init__(self) -> None:
        self.runs: list[JobRecord] = []

    def sacct_jobs(self, job_ids, since, until, all_users):
        return [r for r in self.runs if job_ids is None or r.job_id in job_ids]


def _run(i: int, outcome: Outcome, used_mb: float, req_mb: float = 200.0) -> JobRecord:
    end = time.time() - 3600 + 60 * i
    return JobRecord(
        job_id=str(100 + i),
        source="slurm",
        user="alice",
        account="a",
        partition="short",
        signature="sig-prog",
        submit_time=end - 40,
        start_time=end - 30,
        end_time=end,
        used_time_s=30.0,
        req_time_s=600.0,
        req_cpus=1,
        alloc_cpus=1,
        req_mem_mb=req_mb,
        used_mem_mb=used_mb,
        outcome=outcome,
        state=outcome.value.upper(),
        censored_mem=outcome is Outcome.OOM,
    )


@pytest.fixture
def site(tmp_path):
    settings = HarpSettings(store={"path": str(tmp_path / "harp.db")}, ingest={"learn_all_jobs": True})
    store = Store.open(settings.store.path)
    slurm = Accounting()
    live = ModelPredictor(settings, store=store)
    ing = Ingestor(store, slurm, settings, learners=[live.learn])
    yield settings, store, slurm, ing, live
    store.close()


def _mem_change(live: ModelPredictor):
    job = JobRequest(partition="short", signature="sig-prog", request={"time_s": 600, "mem_mb": 200})
    d = live.decide(job, "alice", 1000)
    return {c.option: c for c in d.changes}.get("mem"), d


def test_a_dry_run_right_after_an_oom_outcome_does_not_cut_below_what_failed(site):
    _, store, slurm, ing, live = site
    slurm.runs = [_run(i, Outcome.COMPLETED, 20.0) for i in range(6)]
    assert ing.poll_once() == 6
    cut, d = _mem_change(live)
    assert cut is not None and cut.value == "100M", d.explain  # six small runs: 200M -> 100M
    # the program now needs more: killed at its 100M limit
    slurm.runs.append(_run(7, Outcome.OOM, 100.0, req_mb=100.0))
    assert ing.poll_once() == 1
    cut, d = _mem_change(live)  # the very next decision, no refresh in between
    assert cut is None, (cut, d.explain)
    assert "hit its limit" in d.explain["mem"]["reason"]


def test_runs_handed_over_again_or_reloaded_are_counted_once(site):
    _, store, slurm, ing, live = site
    slurm.runs = [_run(i, Outcome.COMPLETED, 20.0) for i in range(3)]
    ing.poll_once()
    job = JobRequest(partition="short", signature="sig-prog", request={"time_s": 600, "mem_mb": 200})
    assert live.decide(job, "alice", 1000).explain["mem"]["n_history"] == 3
    live.learn(slurm.runs)  # handed over again (a repeated poll): learnt once
    assert live.decide(job, "alice", 1000).explain["mem"]["n_history"] == 3
    live.reload()  # the history afresh from the store: the stored runs once
    assert live.decide(job, "alice", 1000).explain["mem"]["n_history"] == 3
    # a cold start is counted with what was just ingested, not one load late
    slurm.runs += [_run(i, Outcome.COMPLETED, 20.0) for i in range(3, 5)]
    ing.poll_once()
    assert live.decide(job, "alice", 1000).explain["mem"]["n_history"] == 5


def test_the_request_path_never_reads_the_stored_outcomes(site, monkeypatch):
    """One way in: what reaches the store other than through the poller waits for the next load."""
    _, store, slurm, ing, live = site
    slurm.runs = [_run(i, Outcome.COMPLETED, 20.0) for i in range(3)]
    ing.poll_once()
    reads: list[str] = []
    real = store.iter_jobs

    def counted(*a, **kw):
        reads.append("iter_jobs")
        return real(*a, **kw)

    monkeypatch.setattr(store, "iter_jobs", counted)
    store.insert_jobs([_run(i, Outcome.COMPLETED, 20.0) for i in range(3, 6)])  # written by someone else
    job = JobRequest(partition="short", signature="sig-prog", request={"time_s": 600, "mem_mb": 200})
    for _ in range(3):
        assert live.decide(job, "alice", 1000).explain["mem"]["n_history"] == 3
    assert reads == []
    live.reload()
    assert reads and live.decide(job, "alice", 1000).explain["mem"]["n_history"] == 6
