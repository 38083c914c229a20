"""``squeue --json`` in both layouts (recorded on 22.05 and 26.05): users' text is data, never Slurm's fields.

The fixtures hold a job whose name and comment carry line breaks, '|', ';',
'=', '\\r' and a made-up ``JobId=... UserId=root(0)`` record (#44); the
property test puts any text there and reads exactly it back.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harpd.slurm.base import SlurmError
from harpd.slurm.squeue_json import (
    SqueueParseError,
    expand_path,
    find,
    job_info,
    parse_squeue_json,
    queued_jobs,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "squeue"
EVIL_COMMENT = "x\nJobId=2 UserId=root(0)|harp retry 2 of 1"


def _doc(release: str) -> list[dict]:
    return parse_squeue_json((FIXTURES / f"{release}-jobs.json").read_text())


def test_22_05_layout() -> None:
    jobs = _doc("22.05")
    q = {j.job_id: j for j in queued_jobs(jobs, now=1795895000.0)}
    assert q["3"].uid == 1001 and q["3"].running and q["3"].time_limit_s == 300 and q["3"].mem_mb == 100
    assert q["3"].comment == "x\nJobId=2 UserId=root(0) TimeLimit=UNLIMITED|harp retry 2 of 1"
    assert q["4_3"].array_job_id == "4" and q["4_3"].array_task == "3" and q["4_3"].mem_per_cpu_mb == 50
    assert q["8"].array_task is None and q["8"].pending  # the array's pending rest, one record
    info = job_info(find(jobs, "7"))
    assert info.cpus_per_task == 2 and info.held and info.std_out == "/tmp/o_7_nm.out"


def test_26_05_layout() -> None:
    jobs = _doc("26.05")
    q = {j.job_id: j for j in queued_jobs(jobs, now=1795895981.0)}
    assert q["1"].comment == EVIL_COMMENT and q["1"].uid == 0 and q["1"].pending
    assert q["1"].time_limit_s == 3600 and q["1"].mem_per_cpu_mb == 500 and q["1"].mem_mb is None
    assert q["2"].array_job_id == "2" and q["2"].array_task is None and q["2"].cpus_per_task == 2
    assert q["3"].running and q["3"].time_limit_s == 180 and q["3"].mem_mb == 100 and q["3"].time_used_s == 10
    info = job_info(find(jobs, "1"))
    assert info.name == "evil|n;=\rJobId=1" and info.comment == EVIL_COMMENT and info.end_time is None


def test_not_json_and_errors_are_one_line() -> None:
    with pytest.raises(SqueueParseError, match="did not print JSON"):
        parse_squeue_json("JobId=1 UserId=root(0)\n")
    with pytest.raises(SqueueParseError, match="without a 'jobs' list"):
        parse_squeue_json('{"meta": {}}')
    with pytest.raises(SlurmError, match="Unable to contact slurm controller"):
        parse_squeue_json('{"jobs": [], "errors": [{"description": "Unable to contact slurm controller"}]}')


def test_output_patterns() -> None:
    job = {"job_id": 12, "array_job_id": 10, "array_task_id": 2, "user_name": "al", "name": "n", "batch_host": "h1"}
    assert expand_path("/o/%x_%j_%A_%a_%u_%N_%%.out", job) == "/o/n_12_10_2_al_h1_%.out"
    assert expand_path("/o/%Q.out", job) == "/o/%Q.out"  # not sbatch's: left as it is
    assert expand_path(None, job) is None


_TEXT = st.one_of(
    st.text(min_size=0, max_size=200).filter(lambda s: "\x00" not in s),
    st.sampled_from(["\n", "\r", "|", ";", "=", "JobId=1", "UserId=root(0)", "x\nJobId=9 UserId=root(0)", "é漢字🙂"]),
    st.just("y" * 65536),
)


@settings(max_examples=200, deadline=None)
@given(release=st.sampled_from(["22.05", "26.05"]), name=_TEXT, comment=_TEXT, victim=st.integers(1, 10**6))
def test_any_text_in_a_name_or_comment_is_read_back_exactly(release, name, comment, victim) -> None:
    doc = json.loads((FIXTURES / f"{release}-jobs.json").read_text())
    evil = copy.deepcopy(doc["jobs"][0])
    evil.update(job_id=victim + 10, name=name, comment=comment)
    other = copy.deepcopy(doc["jobs"][0])
    other.update(job_id=victim, comment="mine")
    jobs = parse_squeue_json(json.dumps({**doc, "jobs": [evil, other]}))
    q = {j.job_id: j for j in queued_jobs(jobs)}
    assert set(q) == {str(victim + 10), str(victim)}
    assert (q[str(victim + 10)].comment or "") == comment and q[str(victim)].comment == "mine"
    assert q[str(victim)].uid == q[str(victim + 10)].uid  # the owner is the JSON field, whatever the text says
    info = job_info(find(jobs, str(victim + 10)))
    assert (info.name or "") == name and (info.comment or "") == comment


@settings(max_examples=100, deadline=None)
@given(release=st.sampled_from(["22.05", "26.05"]), name=_TEXT, comment=_TEXT)
def test_sacct_json_reads_any_name_and_comment_back_exactly(release, name, comment) -> None:
    """The other reader of users' text, accounting's (``harpd.slurm.sacct_json``), on both recorded layouts."""
    from harpd.slurm.sacct_json import parse_json

    sacct = Path(__file__).resolve().parents[2] / "fixtures" / "sacct" / f"{release}-jobs.json"
    doc = json.loads(sacct.read_text())
    first = doc["jobs"][0]
    first["name"] = name
    first["comment"] = {**(first.get("comment") or {}), "job": comment}
    runs = parse_json(json.dumps(doc))
    mine = [r for r in runs if str(r.job_id) == str(first["job_id"])]
    assert (mine[0].job_name or "") == name and (mine[0].comment or "") == comment
    assert len(runs) == len(parse_json(sacct.read_text()))  # no run made up, none lost


def test_sacct_json_nothing_found_is_no_run_not_a_failure() -> None:
    """26.05 answers a job accounting has not recorded with an error entry "Nothing found" and no jobs: that is
    an empty answer; read as a failure, it switched harpd to the text reader for good (seen in #50's tests)."""
    from harpd.slurm.sacct_json import parse_json
    from harpd.slurm.sacct_records import SacctParseError

    doc = {"jobs": [], "errors": [{"description": "Nothing found", "error_number": 9003}]}
    assert parse_json(json.dumps(doc)) == []
    with pytest.raises(SacctParseError, match="sacct reported an error: Unable to connect"):
        parse_json(json.dumps({"jobs": [], "errors": [{"description": "Unable to connect to database"}]}))


def test_output_paths_as_scontrol_prints_them() -> None:
    """sbatch's default and relative paths come back absolute, as StdOut (harp status says where a run wrote)."""
    from harpd.slurm.squeue_json import output_path

    plain = {
        "job_id": 892,
        "array_job_id": 0,
        "standard_output": "",
        "standard_error": "",
        "current_working_directory": "/tmp",
    }
    assert output_path(plain, "standard_output") == "/tmp/slurm-892.out"
    assert output_path(plain, "standard_error") is None  # the same file as stdout: the caller says so
    array = {
        "job_id": 12,
        "array_job_id": 10,
        "array_task_id": 2,
        "standard_output": "slurm-%A_%a.out",
        "current_working_directory": "/w/",
    }
    assert output_path(array, "standard_output") == "/w/slurm-10_2.out"
    assert output_path({**plain, "standard_output": "/abs/%j.log"}, "standard_output") == "/abs/892.log"
    assert job_info(plain).std_out == job_info(plain).std_err == "/tmp/slurm-892.out"
