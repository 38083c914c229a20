"""History files: format detection, sacct exports, `harp import`, bad input."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest
from ingest_helpers import FIXTURES

from harpd.cli.main import main as harp
from harpd.ingest.importer import ImportFailed, import_file
from harpd.records import Outcome
from harpd.traces import TraceFormatError, detect_format, read_trace
from harpd.traces.sacct_export import read_sacct_export, source_name

CEDAR_HEAD = (
    "JobID|Account|Partition|ReqCPUS|ReqMem|ReqTRES|NNodes|Timelimit|Elapsed|State|Submit|Eligible|Start|End\n"
    "57979551|acct18337|part48|2|3800M|billing=1,cpu=2,gres/gpu=1,mem=3800M,node=1|1|20:00:00|19:35:20|"
    "OUT_OF_MEMORY|2021-05-01T00:06:13|2021-05-01T00:06:13|2021-05-02T17:06:26|2021-05-03T12:41:46\n"
    "57979981|acct18391|part25|528|2112000M|billing=528,cpu=528,node=11|11|1-00:00:00|1-00:00:01|TIMEOUT|"
    "2021-05-01T00:16:46|2021-05-01T00:16:46|2021-05-03T17:07:03|2021-05-04T17:07:04\n"
    "57981082|acct5295|part25|1|102400M|billing=25,cpu=1,mem=102400M,node=1|1|1-00:00:00|19:51:46|CANCELLED|"
    "2021-05-01T00:35:13|2021-05-01T00:35:13|2021-05-01T14:19:51|2021-05-02T10:11:37\n"
)
SWF = (
    "; UnixStartTime: 1000000000\n"
    "1 0 10 100 4 -1 -1 4 200 -1 1 1 1 -1 1 -1 -1 -1\n"
    "2 5 10 200 4 -1 -1 4 200 -1 1 1 1 -1 1 -1 -1 -1\n"
)


def write(path: Path, text: str, gz: bool = False) -> Path:
    if gz:
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return path


@pytest.fixture
def cedar_gz(tmp_path):
    return write(tmp_path / "cedar-2021.sacct.psv.gz", CEDAR_HEAD, gz=True)


# ------------------------------------------------------------ detection


def test_detect_formats(tmp_path, cedar_gz):
    assert detect_format(cedar_gz) == "sacct"
    assert detect_format(write(tmp_path / "t.swf", SWF)) == "swf"
    assert detect_format(write(tmp_path / "t.data", SWF, gz=True)) == "swf"  # by content, not name
    assert detect_format(FIXTURES / "22.05-jobs.json") == "sacct-json"
    assert detect_format(FIXTURES / "22.05-jobs.psv") == "sacct"


@pytest.mark.parametrize(
    "content, match",
    [
        ("", "empty file"),
        ("\n\n", "empty file"),
        ("root:x:0:0:root:/root:/bin/bash\n", r"t.bin:1: unknown trace format"),
        ("State|Elapsed\nCOMPLETED|1\n", "no JobID column"),
    ],
)
def test_unknown_formats_refused_in_one_line(tmp_path, content, match):
    with pytest.raises(TraceFormatError, match=match) as ei:
        read_trace(write(tmp_path / "t.bin", content))
    assert "\n" not in str(ei.value)


def test_missing_file(tmp_path):
    with pytest.raises(TraceFormatError, match="no such file"):
        read_trace(tmp_path / "nope.psv")


def test_source_names():
    assert source_name("/x/cedar-2021.sacct.psv.gz") == "cedar-2021"
    assert source_name("site.json") == "site"
    assert source_name(".gz") == ".gz"


# ------------------------------------------------------- sacct exports


def test_sacct_export_records(cedar_gz):
    recs = list(read_sacct_export(cedar_gz))
    assert [r.outcome for r in recs] == [Outcome.OOM, Outcome.TIMEOUT, Outcome.CANCELLED]
    oom, timeout, _ = recs
    assert oom.source == "cedar-2021" and oom.censored_mem and oom.req_gpus == 1 and oom.req_mem_mb == 3800
    assert oom.req_time_s == 20 * 3600 and oom.used_time_s == 19 * 3600 + 35 * 60 + 20
    assert timeout.censored_time and timeout.req_nodes == 11 and timeout.req_mem_mb == 2112000


def test_same_parser_as_live_polling():
    """An export of the recorded jobs reads exactly like the live -P output."""
    from harpd.slurm.classify import to_records
    from harpd.slurm.sacct_text import parse_parsable2

    live = {r.job_id: r.to_dict() for r in to_records(parse_parsable2((FIXTURES / "22.05-jobs.psv").read_text()), "x")}
    export = {r.job_id: r.to_dict() for r in read_sacct_export(FIXTURES / "22.05-jobs.psv", source="x")}
    assert live == export


def _cut_cedar_export(tmp_path):
    """A gzip sacct export of 20,000 jobs cut in half, as a crashed copy leaves it."""
    rows = [CEDAR_HEAD.splitlines()[0]] + [
        f"{1000 + i}|a|p|1|100M|cpu=1,mem=100M,node=1|1|01:00:00|00:10:00|COMPLETED|"
        "2021-05-01T00:00:00|2021-05-01T00:00:00|2021-05-01T00:01:00|2021-05-01T00:11:00"
        for i in range(20000)
    ]
    full = gzip.compress(("\n".join(rows) + "\n").encode())
    p = tmp_path / "cut.psv.gz"
    p.write_bytes(full[: len(full) // 2])
    return p


def test_truncated_gzip_names_the_line_and_keeps_what_was_read(tmp_path):
    p = _cut_cedar_export(tmp_path)
    reader = read_trace(p)
    got = []
    with pytest.raises(TraceFormatError, match=r"cut.psv.gz:\d+: gzip data ends or breaks here") as ei:
        for r in reader:
            got.append(r)
    assert "\n" not in str(ei.value)
    assert 1000 < len(got) < 20000
    assert all(r.req_mem_mb == 100 and r.used_time_s == 600 for r in got)  # no half-read row


def test_bad_rows_skipped_with_line_numbers(tmp_path):
    text = CEDAR_HEAD + "junk|row\n" + "57999999.batch|a|p|1|1M||1|01:00|00:01|COMPLETED|x|x|x|x\n"
    reader = read_trace(write(tmp_path / "bad.psv", text))
    assert len(list(reader)) == 3
    assert reader.skipped == 2
    assert reader.errors[0] == f"{tmp_path / 'bad.psv'}:5: 2 fields, header has 14"


def test_swf_goes_through_the_swf_reader(tmp_path):
    recs = list(read_trace(write(tmp_path / "kth.swf.gz", SWF, gz=True)))
    assert [r.job_id for r in recs] == ["1", "2"] and recs[0].source == "kth"
    assert recs[1].outcome is Outcome.TIMEOUT  # ran its full 200 s


def test_json_export(tmp_path):
    recs = list(read_trace(FIXTURES / "23.11-constructed.json", source="c"))
    assert len(recs) == 14 and {r.source for r in recs} == {"c"}


# --------------------------------------------------------------- import


def test_import_file_is_idempotent(store, cedar_gz):
    s = import_file(cedar_gz, store)
    assert (s.records, s.skipped, s.source, s.format) == (3, 0, "cedar-2021", "sacct")
    import_file(cedar_gz, store)
    assert store.count_jobs() == 3
    assert store.get_job("57979551", source="cedar-2021").outcome is Outcome.OOM


def test_import_streams_in_batches(store, tmp_path):
    rows = [CEDAR_HEAD.splitlines()[0]] + [
        f"{1000 + i}|a|p|1|100M|cpu=1,mem=100M,node=1|1|01:00:00|00:10:00|COMPLETED|"
        "2021-05-01T00:00:00|2021-05-01T00:00:00|2021-05-01T00:01:00|2021-05-01T00:11:00"
        for i in range(2500)
    ]
    p = write(tmp_path / "many.psv", "\n".join(rows) + "\n")
    seen = []
    real = store.insert_jobs

    def spy(records, batch_size):
        seen.append(batch_size)
        return real(records, batch_size=batch_size)

    store.insert_jobs = spy
    assert import_file(p, store, batch_size=1000).records == 2500
    assert seen == [1000] and store.count_jobs() == 2500


def test_import_of_a_truncated_file_commits_the_readable_part(store, tmp_path):
    p = _cut_cedar_export(tmp_path)
    with pytest.raises(ImportFailed) as ei:
        import_file(p, store)
    assert ei.value.summary.records == store.count_jobs() > 1000
    assert "records before it were imported" in str(ei.value)


def test_progress_only_on_a_terminal(store, cedar_gz):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    quiet = io.StringIO()
    import_file(cedar_gz, store, stream=quiet)
    assert quiet.getvalue() == ""
    tty = Tty()
    import_file(cedar_gz, store, stream=tty)
    assert "importing cedar-2021.sacct.psv.gz" in tty.getvalue() and "100%|" in tty.getvalue()


# ------------------------------------------------------------ the CLI


def test_cli_import(tmp_path, cedar_gz, capsys):
    db = tmp_path / "h.db"
    assert harp(["import", str(cedar_gz), "--db", str(db), "--source", "cedar"]) == 0
    out = capsys.readouterr().out
    assert "imported 3 records from cedar-2021.sacct.psv.gz as source 'cedar' (0 skipped)" in out
    from harpd.store import Store

    with Store.open(db) as s:
        assert s.count_jobs(source="cedar") == 3


def test_cli_import_uses_the_config_store(tmp_path, cedar_gz, monkeypatch, capsys):
    cfg = tmp_path / "harpd.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path / "cfg.db"}"\n')
    assert harp(["--config", str(cfg), "import", str(cedar_gz)]) == 0
    assert (tmp_path / "cfg.db").exists()


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda d: d / "missing.psv", "no such file"),
        (lambda d: d, "is a directory"),
        (lambda d: write(d / "x.txt", "hello world\n"), "unknown trace format"),
    ],
)
def test_cli_import_bad_input_is_one_line(tmp_path, capsys, make, match):
    rc = harp(["import", str(make(tmp_path)), "--db", str(tmp_path / "h.db")])
    err = capsys.readouterr().err
    assert rc == 2
    lines = [ln for ln in err.splitlines() if ln]
    assert len(lines) == 1 and lines[0].startswith("harp: ") and match in lines[0]
    assert "Traceback" not in err


def test_cli_import_bad_store(tmp_path, cedar_gz, capsys):
    bad = write(tmp_path / "notadb.db", "this is not sqlite" * 100)
    assert harp(["import", str(cedar_gz), "--db", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("harp: ") and "not a harp database" in err and err.count("\n") == 1


def test_cli_import_reports_skipped_rows(tmp_path, capsys):
    p = write(tmp_path / "bad.psv", CEDAR_HEAD + "junk\n")
    assert harp(["import", str(p), "--db", str(tmp_path / "h.db")]) == 0
    captured = capsys.readouterr()
    assert "(1 skipped)" in captured.out
    assert "1 bad rows skipped" in captured.err and "bad.psv:5" in captured.err


# ------------------------------------------------------------ wrong, missing and hostile columns


@pytest.mark.parametrize(
    "name, content, match",
    [
        ("wrong.psv", "JobID|Foo|Bar\n1|a|b\n", "none of the columns harp learns from"),
        ("ids.psv", "JobID|User|Partition\n1|bob|short\n", "none of the columns harp learns from"),
        ("garbage.bin", None, "unknown trace format"),
        ("empty.psv", "", "empty file"),
        ("blank.psv", "\n \n\t\n", "empty file"),
        ("comma.csv", "JobID,Elapsed,State,MaxRSS\n1,00:10:00,COMPLETED,100M\n", "comma-separated"),
        ("tab.tsv", "JobID\tElapsed\tState\n1\t00:01:00\tCOMPLETED\n", "tab-separated"),
        ("semi.txt", "JobID;Elapsed;State\n1;00:01:00;COMPLETED\n", "semicolon-separated"),
        ("pipes.psv", "a|b|c\n1|2|3\n", "no JobID column"),
    ],
)
def test_cli_import_refuses_files_it_cannot_learn_from(tmp_path, capsys, name, content, match):
    """One line naming the problem and what to do; exit 2; no store created, nothing stored."""
    path = tmp_path / name
    if content is None:
        import random

        path.write_bytes(bytes(random.Random(7).randrange(256) for _ in range(4096)))
    else:
        path.write_text(content)
    db = tmp_path / "h.db"
    rc = harp(["import", str(path), "--db", str(db), "--no-progress"])
    captured = capsys.readouterr()
    lines = [ln for ln in captured.err.splitlines() if ln]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("harp: ") and match in lines[0], captured.err
    assert "Traceback" not in captured.err and captured.out == ""
    assert not db.exists()
    if "learns from" in match or "separated" in match:
        assert "sacct -" in lines[0]  # says how to export a file harp can read


def test_cli_import_warns_about_missing_columns_with_counts(tmp_path, capsys):
    """No Timelimit: imported, with one warning naming the column and one counting the records without it."""
    head = CEDAR_HEAD.split("\n")
    drop = head[0].split("|").index("Timelimit")
    rows = ["|".join(c for i, c in enumerate(line.split("|")) if i != drop) for line in head if line]
    path = write(tmp_path / "notl.psv", "\n".join(rows) + "\n")
    db = tmp_path / "h.db"
    assert harp(["import", str(path), "--db", str(db), "--no-progress"]) == 0
    captured = capsys.readouterr()
    warnings = [ln for ln in captured.err.splitlines() if ln.startswith("harp: warning:")]
    assert any("no Timelimit/TimelimitRaw (time limit)" in w for w in warnings), warnings
    assert any("of 3 records imported, 3 no time limit" in w for w in warnings), warnings
    assert "imported 3 records" in captured.out
    from harpd.store import Store

    with Store.open(db) as s:
        assert s.count_jobs(source="notl") == 3


def test_cli_import_of_a_complete_export_warns_only_about_what_is_missing(tmp_path, capsys, cedar_gz):
    assert harp(["import", str(cedar_gz), "--db", str(tmp_path / "h.db"), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "Timelimit/TimelimitRaw (time limit)" not in err and "no time limit" not in err  # the cedar export has it
    assert "MaxRSS (peak memory)" in err and "3 no peak memory" in err  # and lacks MaxRSS


def test_cli_import_header_only_says_so(tmp_path, capsys):
    path = write(tmp_path / "quiet-day.psv", CEDAR_HEAD.split("\n")[0] + "\n")
    assert harp(["import", str(path), "--db", str(tmp_path / "h.db"), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "imported 0 records" in captured.out and "no job rows, nothing imported" in captured.err
