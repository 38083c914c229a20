"""SWF reader: field conversions, status mapping, censoring, gzip, bad lines."""

from __future__ import annotations

import gzip

import pytest

from harpd.records import Outcome
from harpd.traces.swf import TraceFormatError, read_swf, source_name

HEADER = "; Version: 2.2\n; UnixStartTime: 1000000\n;\n"
#        job submit wait run procs cpu  mem  reqp reqt reqmem st user grp exe q part prev think
LINES = [
    "1 0 10 100 4 90.5 2048 4 3600 4096 1 7 3 12 1 2 -1 -1",  # completed
    "2 5 0 3600 2 -1 -1 2 3600 -1 0 7 3 -1 -1 -1 -1 -1",  # run == request → TIMEOUT
    "3 9 1 50 -1 -1 1024 8 600 -1 5 8 -1 -1 2 -1 -1 -1",  # cancelled, alloc unknown
    "4 12 1 3700 1 -1 -1 1 3600 -1 1 9 -1 -1 -1 -1 -1 -1",  # past the request: TIMEOUT
    "5 13 1 10 1 -1 -1 1 -1 -1 3 9 -1 -1 -1 -1 -1 -1",  # unknown request, odd status
]


def _write(tmp_path, text, gz=False, name="t.swf"):
    p = tmp_path / (name + (".gz" if gz else ""))
    if gz:
        with gzip.open(p, "wt") as fh:
            fh.write(text)
    else:
        p.write_text(text)
    return p


@pytest.mark.parametrize("gz", [False, True])
def test_fields(tmp_path, gz):
    p = _write(tmp_path, HEADER + "\n".join(LINES) + "\n", gz=gz, name="CTC.swf")
    recs = list(read_swf(p))
    assert [r.job_id for r in recs] == ["1", "2", "3", "4", "5"]
    r = recs[0]
    assert r.source == "CTC"
    assert r.submit_time == 1000000 and r.start_time == 1000010 and r.end_time == 1000110
    assert r.used_time_s == 100 and r.req_time_s == 3600
    assert r.req_cpus == 4 and r.alloc_cpus == 4
    assert r.used_mem_mb == pytest.approx(2048 * 4 / 1024)  # KB per proc × procs
    assert r.req_mem_mb == pytest.approx(4096 * 4 / 1024)
    assert r.used_cpu_s == pytest.approx(90.5 * 4)
    assert r.user == "7" and r.group == "3" and r.signature == "exe12" and r.partition == "2"
    assert r.outcome == Outcome.COMPLETED and not r.censored_time


def test_status_and_censoring(tmp_path):
    recs = list(read_swf(_write(tmp_path, "\n".join(LINES))))
    assert recs[1].outcome == Outcome.TIMEOUT and recs[1].censored_time
    assert recs[2].outcome == Outcome.CANCELLED and recs[2].partition == "q2"
    assert recs[2].alloc_cpus is None and recs[2].req_cpus == 8
    assert recs[2].used_mem_mb == pytest.approx(1024 * 8 / 1024)  # falls back to requested procs
    assert recs[3].outcome == Outcome.TIMEOUT and recs[3].censored_time
    assert recs[4].outcome == Outcome.UNKNOWN and recs[4].req_time_s is None
    assert recs[4].user == "9" and recs[4].group is None and recs[4].partition is None
    assert recs[1].used_mem_mb is None  # -1 → unknown


def test_failed_status(tmp_path):
    recs = list(read_swf(_write(tmp_path, "1 0 0 10 1 -1 -1 1 100 -1 0 1 1 -1 -1 -1 -1 -1\n")))
    assert recs[0].outcome == Outcome.FAILED and not recs[0].censored_time


def test_short_line_is_an_error_naming_the_line(tmp_path):
    p = _write(tmp_path, HEADER + LINES[0] + "\n1 2 3\n")
    with pytest.raises(TraceFormatError, match=r":5: expected 18 SWF fields, found 3"):
        list(read_swf(p))


def test_non_numeric_field(tmp_path):
    p = _write(tmp_path, LINES[0].replace("4096", "abc") + "\n")
    with pytest.raises(TraceFormatError, match="non-numeric"):
        list(read_swf(p))


def test_missing_file(tmp_path):
    with pytest.raises(TraceFormatError, match="no such file"):
        list(read_swf(tmp_path / "nope.swf"))


def test_source_name():
    assert source_name("/x/KTH-SP2-1996-2.1-cln.swf.gz") == "KTH-SP2-1996-2.1-cln"
