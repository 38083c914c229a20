"""sacct output -> SacctJob: both JSON layouts and --parsable2, on recorded output."""

from __future__ import annotations

import json

import pytest
from ingest_helpers import by_name, load_json

from harp_submit import units
from harpd.slurm import job_ids, sacct_json, sacct_records, sacct_text

# ---------------------------------------------------------------- scalars


@pytest.mark.parametrize(
    "text, bare, expected",
    [
        ("100M", "M", (100.0, None)),
        ("100Mn", "M", (100.0, "n")),
        ("4Gc", "M", (4096.0, "c")),
        ("1.50G", "M", (1536.0, None)),
        ("341380K", "M", (341380 / 1024, None)),
        ("2T", "M", (2 * 1024 * 1024.0, None)),
        ("512", "M", (512.0, None)),
        ("1048576", "", (1.0, None)),  # MaxRSS without unit: bytes
        ("0", "", (0.0, None)),
        ("", "M", (None, None)),
        ("junk", "M", (None, None)),
    ],
)
def test_size_mb_per(text, bare, expected):
    value, per = units.parse_size_mb_per(text, bare_unit=bare)
    if expected[0] is None:
        assert value is None
    else:
        assert value == pytest.approx(expected[0])
    assert per == expected[1]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1-00:00:01", 86401.0),
        ("19:35:20", 19 * 3600 + 35 * 60 + 20.0),
        ("00:00.124", 0.124),
        ("05:30", 330.0),
        ("2-01:00:00", 2 * 86400 + 3600.0),
        ("UNLIMITED", None),
        ("Partition_Limit", None),
        ("", None),
        ("1:2:3:4", None),
    ],
)
def test_duration(text, expected):
    got = units.parse_duration_s(text)
    assert got == (pytest.approx(expected) if expected is not None else None)


def test_timestamps_iso_is_utc_and_epoch_digits():
    assert sacct_text.timestamp("2021-05-01T00:06:13") == 1619827573.0
    assert sacct_text.timestamp("1795317215") == 1795317215.0
    assert sacct_text.timestamp("2021-05-01T00:06:13+02:00") == 1619827573.0 - 7200
    for unknown in ("Unknown", "None", "", "0", "N/A", "2021-13-40T00:00:00"):
        assert sacct_text.timestamp(unknown) is None


def test_job_ids():
    assert job_ids.job_of_step("12_3.batch") == "12_3" and job_ids.job_of_step("12.0") == "12"
    assert job_ids.submitted_id("12_3") == "12" and job_ids.submitted_id("12+1") == "12"
    assert job_ids.submitted_id("12") == "12"


def test_states_normalised():
    assert sacct_records.normalize_state("CANCELLED by 0") == "CANCELLED"
    assert sacct_records.normalize_state(["OUT_OF_MEMORY"]) == "OUT_OF_MEMORY"
    assert sacct_records.normalize_state(["REQUEUED", "COMPLETED"]) == "REQUEUED"
    assert sacct_records.normalize_state("CANCELLED+") == "CANCELLED"
    assert sacct_records.normalize_state([]) is None


# ------------------------------------------------------- 22.05 JSON layout


def test_2205_json_layout_detected(json_2205):
    assert sacct_json.json_layout(json.loads(json_2205)) == "22.05"


def test_2205_json_jobs(json_2205):
    jobs = by_name(sacct_json.parse_json(json_2205))
    assert set(jobs) == {
        "fx-completed",
        "fx-timeout",
        "fx-oom",
        "fx-failed",
        "fx-cancelled",
        "fx-array",
        "fx-percpu",
        "fx-steps",
        "fx-stepoom",
        "fx-gpu",
    }
    done = jobs["fx-completed"][0]
    assert done.state == "COMPLETED" and done.exit_code == 0 and done.exit_signal == 0
    assert done.limit_s == 120.0  # time.limit is minutes
    assert done.elapsed_s == 4.0
    assert done.req_mem_mb == 100.0 and done.req_cpus == 1 and done.req_nodes == 1
    assert [s.step_id for s in done.steps] == ["batch"]
    # tres.requested.max mem is bytes: 46923776 B
    assert done.steps[0].max_rss_mb == pytest.approx(46923776 / 2**20)
    # job-level CPU time is 0 in 22.05's JSON; the steps carry it
    assert done.cpu_s == pytest.approx(0.12483)
    assert done.submit_time == 1795317215.0 and done.end_time == 1795317219.0


def test_2205_json_memory_per_cpu_comes_from_tres(json_2205):
    """required.memory says 150 for --mem-per-cpu=150M -c 2; the TRES says 300."""
    doc = json.loads(json_2205)
    raw = next(j for j in doc["jobs"] if j["name"] == "fx-percpu")
    assert raw["required"]["memory"] == 150  # the 22.05 ambiguity, as recorded
    job = by_name(sacct_json.parse_json(json_2205))["fx-percpu"][0]
    assert job.req_mem_mb == 300.0 and job.req_cpus == 2


def test_2205_json_exit_codes(json_2205):
    jobs = by_name(sacct_json.parse_json(json_2205))
    oom = jobs["fx-oom"][0]
    assert (oom.exit_code, oom.exit_signal) == (0, 9)
    # 22.05 says SUCCESS/0 for `exit 1`: recorded as unknown, not as 0
    failed = jobs["fx-failed"][0]
    assert failed.state == "FAILED" and failed.exit_code is None


def test_2205_json_array_ids(json_2205):
    ids = sorted(j.job_id for j in by_name(sacct_json.parse_json(json_2205))["fx-array"])
    assert ids == ["12_1", "12_2", "12_3"]


def test_2205_json_steps_folded(json_2205):
    steps = by_name(sacct_json.parse_json(json_2205))["fx-steps"][0].steps
    assert [s.step_id for s in steps] == ["batch", "0", "1"]
    two_tasks = steps[1]
    assert two_tasks.ntasks == 2 and two_tasks.nnodes == 1
    assert two_tasks.tot_rss_mb == pytest.approx(90619904 / 2**20)


def test_2205_json_gpu(json_2205):
    gpu = by_name(sacct_json.parse_json(json_2205))["fx-gpu"][0]
    assert gpu.req_gpus == 1 and gpu.alloc_gpus == 1


# ------------------------------------------------------- 23.11 JSON layout


def test_2311_layout_detected(json_2311):
    assert sacct_json.json_layout(json.loads(json_2311)) == "23.11+"


def test_2311_jobs(json_2311):
    jobs = by_name(sacct_json.parse_json(json_2311))
    done = jobs["fx-completed"][0]
    assert done.state == "COMPLETED" and done.limit_s == 120.0 and done.req_mem_mb == 100.0
    assert done.steps[0].step_id == "batch"  # from "101.batch"
    assert jobs["fx-failed"][0].exit_code == 1  # 23.11 keeps the return code
    oom = jobs["fx-oom"][0]
    assert oom.state == "OUT_OF_MEMORY" and oom.exit_signal == 125
    assert jobs["fx-percpu"][0].req_mem_mb == 300.0
    assert jobs["fx-unlimited"][0].limit_s is None  # {"infinite": true}
    assert sorted(j.job_id for j in jobs["fx-array"]) == ["106_1", "106_2"]
    assert jobs["fx-gpu"][0].req_gpus == 1
    steps = jobs["fx-steps"][0].steps
    assert [s.step_id for s in steps] == ["batch", "0"] and steps[1].ntasks == 2


def test_2311_duplicates_numbered_as_runs(json_2311):
    runs = by_name(sacct_json.parse_json(json_2311))["fx-requeued"]
    assert [(r.state, r.run) for r in runs] == [("REQUEUED", 1), ("COMPLETED", 2)]


def test_2311_memory_fields_without_tres():
    """No TRES: memory_per_cpu x CPUs, or memory_per_node x nodes."""
    doc = load_json("23.11-constructed.json")
    for j in doc["jobs"]:
        j["tres"]["requested"] = []
    jobs = by_name(sacct_json.parse_json(doc))
    assert jobs["fx-percpu"][0].req_mem_mb == 150 * 2
    assert jobs["fx-completed"][0].req_mem_mb == 100


# ----------------------------------------------------------- parsable2


def test_parsable2_matches_json(json_2205, psv_2205, psv_2205_epoch):
    """The same 22.05 jobs read three ways agree on everything both carry."""
    from_json = {j.job_id: j for j in sacct_json.parse_json(json_2205)}
    for text in (psv_2205, psv_2205_epoch):
        from_p = {j.job_id: j for j in sacct_text.parse_parsable2(text)}
        assert set(from_p) == set(from_json)
        for jid, pj in from_p.items():
            jj = from_json[jid]
            assert (pj.state, pj.limit_s, pj.req_mem_mb, pj.req_cpus, pj.req_gpus) == (
                jj.state,
                jj.limit_s,
                jj.req_mem_mb,
                jj.req_cpus,
                jj.req_gpus,
            )
            assert (pj.submit_time, pj.start_time, pj.end_time, pj.elapsed_s) == (
                jj.submit_time,
                jj.start_time,
                jj.end_time,
                jj.elapsed_s,
            )
            assert [s.step_id for s in pj.steps] == [s.step_id for s in jj.steps]
            for ps, js in zip(pj.steps, jj.steps):
                # -P prints KiB: within 1 KiB of the JSON's bytes
                assert ps.max_rss_mb == pytest.approx(js.max_rss_mb, abs=1 / 1024)


def test_parsable2_keeps_real_exit_code(psv_2205):
    failed = by_name(sacct_text.parse_parsable2(psv_2205))["fx-failed"][0]
    assert (failed.exit_code, failed.exit_signal) == (1, 0)


def test_parsable2_step_folding(psv_2205):
    jobs = by_name(sacct_text.parse_parsable2(psv_2205))
    assert [s.step_id for s in jobs["fx-steps"][0].steps] == ["batch", "0", "1"]
    stepoom = jobs["fx-stepoom"][0]
    assert [(s.step_id, s.state, s.exit_signal) for s in stepoom.steps] == [
        ("batch", "COMPLETED", 0),
        ("0", "CANCELLED", 9),
    ]
    assert stepoom.steps[1].max_rss_mb == pytest.approx(105628 / 1024)


def test_parsable2_old_reqmem_suffixes():
    text = (
        "JobID|State|ReqMem|ReqCPUS|ReqNodes|NNodes|Timelimit|Elapsed\n"
        "1|COMPLETED|4Gc|8|1|1|01:00:00|00:10:00\n"
        "2|COMPLETED|1000Mn|4|3|3|UNLIMITED|00:10:00\n"
        "3|COMPLETED|0n|4|1|1|Partition_Limit|00:10:00\n"
    )
    j1, j2, j3 = sacct_text.parse_parsable2(text)
    assert j1.req_mem_mb == 4096 * 8 and j1.limit_s == 3600 and j1.elapsed_s == 600
    assert j2.req_mem_mb == 3000 and j2.limit_s is None
    assert j3.req_mem_mb is None and j3.limit_s is None  # --mem=0 is not a size


def test_parsable2_cedar_like_header_subset():
    text = (
        "JobID|Account|Partition|ReqCPUS|ReqMem|ReqTRES|NNodes|Timelimit|Elapsed|State|Submit|Eligible|Start|End\n"
        "57979981|acct1|part25|528|2112000M|billing=528,cpu=528,node=11|11|1-00:00:00|1-00:00:01|TIMEOUT|"
        "2021-05-01T00:16:46|2021-05-01T00:16:46|2021-05-03T17:07:03|2021-05-04T17:07:04\n"
    )
    (j,) = sacct_text.parse_parsable2(text)
    assert j.req_mem_mb == 2112000 and j.req_nodes == 11 and j.alloc_nodes == 11
    assert j.limit_s == 86400 and j.elapsed_s == 86401 and j.user is None and j.alloc_cpus is None


def test_parsable2_bad_rows_skipped_and_counted():
    text = (
        "JobID|State|Elapsed|Comment\n"
        "1|COMPLETED|00:01:00|\n"
        "garbage\n"
        "2.batch|COMPLETED|00:01:00|\n"  # step without its job
        "3|COMPLETED|00:01:00|a|b|c\n"  # '|' inside the last (Comment) column
        "|COMPLETED|00:01:00|\n"
    )
    stats = sacct_text.Parsable2Stats()
    jobs = list(sacct_text.iter_parsable2(text.splitlines(), where="f.psv", stats=stats))
    assert [j.job_id for j in jobs] == ["1", "3"]
    assert jobs[1].comment == "a|b|c"
    assert stats.skipped == 3
    assert stats.first_errors[0] == "f.psv:3: 1 fields, header has 4"
    assert "f.psv:4: step 2.batch without its job row" in stats.first_errors


def test_parsable2_without_jobid_header_is_refused():
    with pytest.raises(sacct_records.SacctParseError, match="no JobID column"):
        sacct_text.parse_parsable2("State|Elapsed\nCOMPLETED|00:01:00\n", where="x.psv")


@pytest.mark.parametrize(
    "doc, match",
    [
        ("not json", "not JSON"),
        ('{"meta": {}}', "no 'jobs' list"),
        ('{"jobs": [], "errors": [{"description": "Unable to connect to database"}]}', "Unable to connect"),
        ('{"jobs": [42]}', r"jobs\[0\] is not an object"),
        ('{"jobs": [{"state": {"current": "COMPLETED"}}]}', "without job_id"),
    ],
)
def test_json_bad_input(doc, match):
    with pytest.raises(sacct_records.SacctParseError, match=match):
        sacct_json.parse_json(doc)
