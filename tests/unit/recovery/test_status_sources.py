"""`harp status JOBID` never confuses an imported trace's job with the cluster's own job of the same id."""

from __future__ import annotations

import json
import os

import pytest
from resubmit_fakes import FakeSlurm, submission

from harpd.cli.main import main as harp
from harpd.config import HarpSettings
from harpd.ingest.poller import Ingestor
from harpd.records import JobRecord, Outcome
from harpd.report.job_status import job_status
from harpd.store import Store

TRACE = "KTH-SP2-1996-2.1-cln"


def _imported(job_id: str, user: str = "tracer", source: str = TRACE) -> JobRecord:
    """A job of an old trace, as `harp import` stores it: another machine's job ids."""
    return JobRecord(
        job_id=job_id,
        source=source,
        user=user,
        submit_time=8.3e8,
        start_time=8.3e8,
        end_time=8.3e8 + 50,
        used_time_s=50.0,
        req_time_s=3600.0,
        req_cpus=4,
        outcome=Outcome.COMPLETED,
        state="swf:1",
    )


@pytest.fixture
def cluster(tmp_path, no_harpd):
    """A store with one finished live job (polled from Slurm), one pending live job, and a trace colliding with both."""
    db = tmp_path / "harp.db"
    store = Store.open(db)
    fake = FakeSlurm(tmp_path / "slurm.json")
    ing = Ingestor(store, fake, HarpSettings())
    done = fake.add_job(uid=os.geteuid(), user="me")
    submission(fake, store, done)
    fake.end_run(done, Outcome.COMPLETED)
    ing.poll_once()
    pending = fake.add_job(uid=os.geteuid(), user="me")
    submission(fake, store, pending)
    store.insert_jobs([_imported(done), _imported(pending), _imported("777"), _imported("777", "other", "CTC-SP2")])
    store.close()
    return db, done, pending


def _status(db, *argv: str) -> tuple[int, str, str]:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = harp(["status", *argv, "--direct", "--db", str(db)])
    return rc, out.getvalue(), err.getvalue()


def test_a_live_job_shows_only_the_clusters_record_and_its_source(cluster):
    db, done, _ = cluster
    rc, out, _ = _status(db, done)
    assert rc == 0
    assert f"job {done}: me" in out and "tracer" not in out
    assert "source:        this cluster (fake)" in out
    assert "last outcome:  completed" in out
    # the trace's job of the same id is named as a different job, never mixed in
    assert f"not shown:     job {done} of imported trace(s) {TRACE}" in out
    rc, out, _ = _status(db, done, "--format", "json")
    job = json.loads(out)
    assert job["source"] == "fake" and job["source_kind"] == "cluster"
    assert job["record"]["source"] == "fake" and job["record"]["user"] == "me"
    assert job["also_imported"] == [TRACE] and "other_records" not in job


def test_a_pending_live_job_is_not_given_the_traces_record(cluster):
    db, _, pending = cluster
    rc, out, _ = _status(db, pending, "--format", "json")
    job = json.loads(out)
    assert rc == 0 and job["registered"] is True and job["record"] is None
    assert job["source_kind"] == "cluster" and job["user"] == "me"
    rc, out, _ = _status(db, pending)
    assert "this cluster (registered by harp-submit; no Slurm record yet)" in out and "tracer" not in out


def test_a_job_only_in_imported_traces_says_so_and_names_each_trace(cluster):
    db, *_ = cluster
    rc, out, _ = _status(db, "777")
    assert rc == 0
    assert f"source:        imported trace {TRACE}" in out and "source:        imported trace CTC-SP2" in out
    assert "not a job of this cluster" in out and "recovery:" not in out
    job = json.loads(_status(db, "777", "--format", "json")[1])
    assert job["source_kind"] == "imported" and {job["source"], job["other_records"][0]["source"]} == {TRACE, "CTC-SP2"}


def test_without_a_poll_or_a_configured_cluster_every_record_shows_its_source_and_no_claim(tmp_path):
    store = Store.open(tmp_path / "h.db")
    store.insert_jobs(
        [
            _imported("5"),
            JobRecord(job_id="5", source="mycluster", user="me", end_time=1.7e9, outcome=Outcome.COMPLETED),
        ]
    )
    job = job_status(store, "5", admin=True, uid=0, user="").to_json()
    assert job["source_kind"] == "unknown" and job["source"] == "mycluster" and job["other_records"]
    # the configured cluster name settles it
    job = job_status(store, "5", admin=True, uid=0, user="", cluster="mycluster").to_json()
    assert job["source_kind"] == "cluster" and job["also_imported"] == [TRACE] and "other_records" not in job
    # a user asking harpd sees the cluster's record as theirs, and nothing of the trace
    job = job_status(store, "5", admin=False, uid=1000, user="me", cluster="mycluster").to_json()
    assert job["record"]["user"] == "me" and job["also_imported"] == []
    store.close()


def test_format_json_is_the_option_and_json_still_works(cluster):
    db, done, _ = cluster
    rc, out, err = _status(db, done, "--format", "json")
    assert rc == 0 and json.loads(out)["job_id"] == done and err == ""
    rc, out2, err = _status(db, done, "--json")
    assert rc == 0 and json.loads(out2) == json.loads(out) and "--format json" in err
