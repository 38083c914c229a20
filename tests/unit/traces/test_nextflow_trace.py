"""Nextflow trace files (harpd.traces.nextflow): both separators and unit styles, and bad input in one line."""

from __future__ import annotations

import gzip

import pytest

from harpd.cli.main import main as harp
from harpd.records import Outcome
from harpd.traces import TraceFormatError, detect_format, read_trace
from harpd.traces.nextflow import parse_duration, parse_size

HEAD = [
    "task_id",
    "hash",
    "process",
    "tag",
    "name",
    "status",
    "exit",
    "attempt",
    "cpus",
    "memory",
    "time",
    "realtime",
    "%cpu",
    "peak_rss",
    "rss",
    "rchar",
    "submit",
    "start",
    "complete",
]


def _human_row(i: int, status: str = "COMPLETED", exit_code: str = "0") -> list[str]:
    return [
        str(i),
        f"ab/{i:06x}",
        "NFCORE_X:ALIGN",
        f"s{i}",
        f"NFCORE_X:ALIGN (s{i})",
        status,
        exit_code,
        "1",
        "4",
        "6 GB",
        "4h",
        f"{i}m 30s",
        "380.5%",
        f"{1 + i / 10:.1f} GB",
        "900 MB",
        f"{i * 100} MB",
        f"2023-04-07 19:0{i}:00.000",
        f"2023-04-07 19:0{i}:05.000",
        f"2023-04-07 19:{10 + i}:00.000",
    ]


def _write(path, rows: list[list[str]], sep: str = "\t", head: list[str] = HEAD, gz: bool = False):
    text = "\n".join(sep.join(r) for r in [head, *rows]) + "\n"
    if gz:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def test_human_units_tab_separated(tmp_path):
    p = _write(tmp_path / "trace.txt", [_human_row(i) for i in range(1, 4)])
    assert detect_format(p) == "nextflow"
    recs = list(read_trace(p))
    assert [r.job_id for r in recs] == ["1", "2", "3"]
    r = recs[1]
    assert r.signature == "NFCORE_X:ALIGN" and r.job_name == "NFCORE_X:ALIGN (s2)"
    assert r.req_mem_mb == 6 * 1024 and r.req_time_s == 4 * 3600 and r.req_cpus == 4
    assert r.used_time_s == 150 and r.used_mem_mb == pytest.approx(1.2 * 1024)
    assert r.input_bytes == 200 * 1024**2
    assert r.used_cpu_s == pytest.approx(3.805 * 150)
    assert r.end_time - r.start_time == pytest.approx((12 * 60) - (2 * 60 + 5))
    assert r.outcome is Outcome.COMPLETED and r.source == "trace"


def test_raw_units_comma_separated_gzip(tmp_path):
    raw = [
        [
            "7",
            "cd/1",
            "P",
            "t",
            "P (t)",
            "COMPLETED",
            "0",
            "2",
            "1",
            "1073741824",
            "14400000",
            "2500",
            "99.0",
            "52428800",
            "40000000",
            "3147403395",
            "1674490103249",
            "1674490105000",
            "1674490108000",
        ]
    ]
    p = _write(tmp_path / "wf.trace.csv.gz", raw, sep=",", gz=True)
    (r,) = list(read_trace(p))
    assert r.req_mem_mb == 1024 and r.used_mem_mb == 50 and r.used_time_s == 2.5
    assert r.input_bytes == 3147403395 and r.attempt == 2 and r.submit_time == pytest.approx(1674490103.249)
    assert r.source == "wf"


def test_oom_exit_and_unfinished_rows(tmp_path):
    rows = [_human_row(1), _human_row(2, "FAILED", "137"), _human_row(3, "RUNNING", "-")]
    reader = read_trace(_write(tmp_path / "t.tsv", rows))
    recs = list(reader)
    assert [r.outcome for r in recs] == [Outcome.COMPLETED, Outcome.OOM]
    assert recs[1].censored_mem and reader.skipped == 1 and "RUNNING" in reader.errors[0]


@pytest.mark.parametrize(
    "text,seconds", [("1h 2m 3s", 3723), ("45.5s", 45.5), ("300ms", 0.3), ("1d 1h", 90000), ("12345", 12.345)]
)
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text,size", [("1.5 GB", 1.5 * 1024**3), ("512 KB", 512 * 1024), ("123", 123), ("-", None), ("2 TB", 2 * 1024**4)]
)
def test_sizes(text, size):
    assert parse_size(text) == size


def test_missing_columns_one_line(tmp_path):
    head = [c for c in HEAD if c not in ("peak_rss", "memory")]
    p = _write(tmp_path / "t.tsv", [], head=head)
    with pytest.raises(TraceFormatError) as ei:
        list(read_trace(p))
    msg = str(ei.value)
    assert "\n" not in msg and "memory, peak_rss" in msg and "trace.fields" in msg


def test_unparseable_size_names_the_line(tmp_path):
    bad = _human_row(2)
    bad[HEAD.index("peak_rss")] = "lots"
    p = _write(tmp_path / "t.tsv", [_human_row(1), bad])
    with pytest.raises(TraceFormatError) as ei:
        list(read_trace(p))
    assert f"{p}:3:" in str(ei.value) and "'lots'" in str(ei.value) and "\n" not in str(ei.value)


def test_unparseable_duration(tmp_path):
    bad = _human_row(1)
    bad[HEAD.index("realtime")] = "soon"
    with pytest.raises(TraceFormatError, match="duration 'soon'"):
        list(read_trace(_write(tmp_path / "t.tsv", [bad])))


def test_truncated_gzip_keeps_rows_then_one_line(tmp_path):
    data = gzip.compress(
        ("\n".join("\t".join(r) for r in [HEAD, *(_human_row(i % 9 + 1) for i in range(4000))]) + "\n").encode()
    )
    p = tmp_path / "cut.trace.txt.gz"
    p.write_bytes(data[: len(data) // 2])
    got = []
    with pytest.raises(TraceFormatError) as ei:
        for r in read_trace(p):
            got.append(r)
    assert 0 < len(got) < 4000 and "gzip -t" in str(ei.value) and "\n" not in str(ei.value)


def test_import_cli_stores_input_size(tmp_path, capsys):
    p = _write(tmp_path / "wf.trace.txt", [_human_row(i) for i in range(1, 4)])
    db = tmp_path / "h.db"
    assert harp(["import", str(p), "--db", str(db)]) == 0
    from harpd.store import Store

    with Store.open(db) as s:
        recs = list(s.iter_jobs())
    assert len(recs) == 3 and sorted(r.input_bytes for r in recs) == [100 * 1024**2, 200 * 1024**2, 300 * 1024**2]


def test_import_cli_bad_trace_is_one_line(tmp_path, capsys):
    head = [c for c in HEAD if c != "process"] + ["process_name"]
    p = _write(tmp_path / "t.tsv", [], head=head)
    assert harp(["import", str(p), "--db", str(tmp_path / "h.db")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
