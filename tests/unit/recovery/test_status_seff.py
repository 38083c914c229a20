"""`harp status JOBID` shows what seff shows, in seff's words, for the job and each attempt."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from harpd.cli.main import main as harp
from harpd.records import JobRecord, Outcome
from harpd.store import LIVE_SOURCES_KEY, Store


def _rec(job_id: str, **kw) -> JobRecord:
    base = dict(job_id=job_id, source="live", user="me", submit_time=1.7e9, start_time=1.7e9, end_time=1.7e9 + 600)
    return JobRecord(**{**base, **kw})


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "harp.db"
    store = Store.open(path)
    store.set_meta(LIVE_SOURCES_KEY, ["live"])
    # the first run ran out of time after 10 minutes on 4 cores; the attempt finished in 2 h 5 s
    store.insert_jobs(
        [
            _rec(
                "100",
                state="TIMEOUT",
                outcome=Outcome.TIMEOUT,
                exit_code=0,
                alloc_cpus=4,
                used_time_s=600.0,
                used_cpu_s=1200.0,
                req_time_s=600.0,
                used_mem_mb=1536.0,
                req_mem_mb=4096.0,
                censored_time=True,
            ),
            _rec(
                "101",
                state="COMPLETED",
                outcome=Outcome.COMPLETED,
                exit_code=0,
                alloc_cpus=4,
                used_time_s=7205.0,
                used_cpu_s=4 * 7205.0,
                req_time_s=86400.0 + 3600,
                used_mem_mb=1.5 * 1024 * 1024,
                req_mem_mb=None,
                attempt=2,
            ),
            _rec("555", user="someone", state="COMPLETED", outcome=Outcome.COMPLETED),
        ]
    )
    store.add_attempt("100", 1, "101", {"mode": "resubmit", "time_s": 1200}, "ran out of time", "done")
    store.close()
    return path


def _status(db, *argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert harp(["status", *argv, "--direct", "--db", str(db)]) == 0
    return out.getvalue()


def _block(text: str, job_id: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith(f"  run of job {job_id}"))
    block = [lines[start]]
    for x in lines[start + 1 :]:
        if not x.startswith("    "):
            break
        block.append(x.strip())
    return block


def test_each_run_in_seffs_words(db):
    out = _status(db, "100")
    first = _block(out, "100")
    assert first[1:] == [
        "State: TIMEOUT (exit code 0)",
        "Cores: 4",
        "CPU Utilized: 00:20:00",
        "CPU Efficiency: 50.00% of 00:40:00 core-walltime",
        "Job Wall-clock time: 00:10:00",
        "Time Limit: 00:10:00 (100.00% used)",
        "Memory Utilized: 1.50 GB",
        "Memory Efficiency: 37.50% of 4.00 GB",
    ]
    second = _block(out, "101")
    assert second[0] == "  run of job 101 (harp attempt 2):"
    assert "CPU Efficiency: 100.00% of 08:00:20 core-walltime" in second
    assert "Job Wall-clock time: 02:00:05" in second and "Time Limit: 1-01:00:00 (8.01% used)" in second
    # no memory request: seff's "---", never a made-up efficiency
    assert "Memory Utilized: 1.50 TB" in second and "Memory Efficiency: --- of ---" in second


def test_an_attempts_own_id_shows_the_whole_chain(db):
    out = _status(db, "101")
    assert _block(out, "100") and _block(out, "101")


def test_json_carries_the_same_figures(db):
    job = json.loads(_status(db, "100", "--format", "json"))
    runs = {r["job_id"]: r for r in job["runs"]}
    assert set(runs) == {"100", "101"}
    assert runs["100"]["efficiency"]["cpu_eff"] == pytest.approx(0.5)
    assert runs["100"]["efficiency"]["mem_eff"] == pytest.approx(0.375)
    assert runs["101"]["efficiency"]["mem_eff"] is None
    assert runs["100"]["record"]["used_cpu_s"] == 1200.0


def test_a_job_that_never_ran_shows_dashes_not_zeros(tmp_path):
    path = tmp_path / "harp.db"
    store = Store.open(path)
    store.set_meta(LIVE_SOURCES_KEY, ["live"])
    store.insert_jobs([_rec("7", state="CANCELLED", outcome=Outcome.CANCELLED, start_time=None, used_time_s=None)])
    store.close()
    block = _block(_status(path, "7"), "7")
    assert "State: CANCELLED" in block and "Cores: ---" in block
    assert "CPU Efficiency: --- of --- core-walltime" in block and "Memory Utilized: ---" in block


def test_a_user_never_sees_another_users_run_under_an_attempts_id(tmp_path):
    """An attempt's job id whose record is someone else's (a collision, a forged attempt row) is left out."""
    from harpd.report.job_status import job_status

    path = tmp_path / "harp.db"
    store = Store.open(path)
    store.set_meta(LIVE_SOURCES_KEY, ["live"])
    store.insert_jobs(
        [
            _rec("100", state="TIMEOUT", outcome=Outcome.TIMEOUT, alloc_cpus=1, used_time_s=60.0),
            _rec("101", user="mallory", state="COMPLETED", outcome=Outcome.COMPLETED, alloc_cpus=1),
        ]
    )
    store.add_attempt("100", 1, "101", {"mode": "resubmit"}, "ran out of time", "done")
    job = job_status(store, "100", admin=False, uid=1000, user="me").to_json()
    assert [r["job_id"] for r in job["runs"]] == ["100"]
    assert [r["job_id"] for r in job_status(store, "100", admin=True, uid=0, user="").to_json()["runs"]] == [
        "100",
        "101",
    ]
    store.close()
