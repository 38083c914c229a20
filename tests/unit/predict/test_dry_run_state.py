"""A dry run (``predict`` with ``dry_run``) gets the answer a submission would, and changes nothing.

The user's pending jobs and submission burst are features of the next
decision; a predict counted them, so each `harp-submit --harp-dry-run` of the
same script, with no new history, moved the next answer.
"""

from __future__ import annotations

import time

from harpd.config import HarpSettings
from harpd.daemon.handlers import Handlers
from harpd.predict.live import ModelPredictor
from harpd.protocol import JobRequest
from harpd.records import JobRecord, Outcome
from harpd.store import Store


def _run(i: int) -> JobRecord:
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
        req_mem_mb=200.0,
        used_mem_mb=20.0,
        outcome=Outcome.COMPLETED,
        state="COMPLETED",
    )


JOB = JobRequest(partition="short", signature="sig-prog", request={"time_s": 600, "mem_mb": 200})


def _state(live: ModelPredictor) -> list:
    return [
        (dict(ld.history.pending), dict(ld.history.last_submit), dict(ld.history.burst)) for ld in live._loaded.values()
    ]


def test_dry_runs_leave_the_predictors_state_and_answer_alone(tmp_path):
    settings = HarpSettings(store={"path": str(tmp_path / "harp.db")}, ingest={"learn_all_jobs": True})
    store = Store.open(settings.store.path)
    store.insert_jobs([_run(i) for i in range(6)])
    live = ModelPredictor(settings, store=store)  # its history loaded from the store
    before = _state(live)
    first = live.decide(JOB, "alice", 1000, dry_run=True)
    for _ in range(5):
        again = live.decide(JOB, "alice", 1000, dry_run=True)
        assert [c.model_dump() for c in again.changes] == [c.model_dump() for c in first.changes]
    assert _state(live) == before
    live.decide(JOB, "alice", 1000)  # a submission is counted (so the check above could fail)
    assert _state(live) != before
    store.close()


def test_the_daemon_passes_dry_run_only_when_asked(tmp_path):
    import json

    from harpd import protocol as p
    from harpd.daemon.handlers import Peer

    seen = []

    class Plain:
        def decide(self, job, user, uid):  # a predictor that knows nothing of dry runs
            seen.append("plain")
            return {"changes": [], "limits": {"partition": None}, "model": None, "explain": {}}

    class Stateful(Plain):
        def decide(self, job, user, uid, *, dry_run=False):
            seen.append(dry_run)
            return super().decide(job, user, uid)

    store = Store.open(tmp_path / "harp.db")
    alice = Peer(pid=10, uid=1000, gid=1000, user="alice", groups=frozenset({1000}))
    ask = {"op": "predict", "job": {"request": {"time_s": 600}}}
    assert p.parse_request(json.dumps({**ask, "dry_run": True})).dry_run is True
    assert p.parse_request(json.dumps(ask)).dry_run is False
    for predictor, dry in ((Plain(), False), (Stateful(), True), (Stateful(), False)):
        answer = Handlers(store, predictor=predictor).handle(
            alice, p.parse_request(json.dumps({**ask, "dry_run": dry}))
        )
        assert isinstance(answer, p.PredictAnswer)
    assert seen == ["plain", True, "plain", False, "plain"]
    store.close()
