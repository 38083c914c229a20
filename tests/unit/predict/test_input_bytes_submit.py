"""The input size harp-submit sends (issue 20 part 2) reaches --harp-explain and the job's record."""

from __future__ import annotations

from harpd.config import HarpSettings
from harpd.predict.live import ModelPredictor
from harpd.protocol import JobRequest
from harpd.records import JobRecord


def test_explain_shows_the_input_size(tmp_path):
    from harpd.store import Store

    s = HarpSettings(store={"path": str(tmp_path / "h.db")})
    with Store.open(s.store.path) as st:
        p = ModelPredictor(s, store=st)
        d = p.decide(JobRequest(signature="sig", input_bytes=12345, request={"time_s": 600}), "alice", 1000)
        assert d.explain["input_bytes"] == 12345
        d = p.decide(JobRequest(signature="sig", request={"time_s": 600}), "alice", 1000)
        assert "input_bytes" not in d.explain


def test_the_poller_carries_it_into_the_record():
    from harpd.ingest.poller import Ingestor

    recs = [JobRecord(job_id="7"), JobRecord(job_id="8")]
    subs = {"7": {"job": {"input_bytes": 4096, "commands": []}, "decision": {}}, "8": {"job": {}, "decision": {}}}
    Ingestor._apply_submissions(recs, subs, {})
    assert recs[0].input_bytes == 4096.0 and recs[1].input_bytes is None
