"""The input size harp-submit sends reaches --harp-explain and the job's record."""

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
    from tests.helpers.submissions import stored_submission

    subs = {
        "7": stored_submission(job={"input_bytes": 4096, "commands": []}, decision={}),
        "8": stored_submission(job={}, decision={}),
    }
    Ingestor._apply_submissions(recs, subs, {})
    assert recs[0].input_bytes == 4096.0 and recs[1].input_bytes is None


def test_the_input_size_is_a_model_feature_at_training_and_at_submission():
    import math

    from harpd.features.history import COL, History, keys_of_record

    rec = JobRecord(
        job_id="1", user="alice", signature="sig", req_mem_mb=4000.0, req_time_s=600.0, req_cpus=1, input_bytes=1e9
    )
    h = History()
    for res in ("time", "mem"):  # training reads it from the record (JobRecord.input_bytes)
        x = h.features(keys_of_record(rec, res, True), None)
        assert x[COL["log_input"]] == math.log1p(1e9)
    unknown = h.features(keys_of_record(JobRecord(job_id="2", user="alice"), "mem", True), None)
    assert math.isnan(unknown[COL["log_input"]])
    # and the live predictor reads it from harp-submit's request
    s = HarpSettings()
    job = JobRequest(signature="sig", input_bytes=2048, request={"time_s": 600, "mem_mb": 4000})
    _, _, _, keys = ModelPredictor(s, models={})._keys(job, "alice", "mem", True, job.signature)
    assert h.features(keys, None)[COL["log_input"]] == math.log1p(2048)
