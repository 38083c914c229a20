"""`harp import` on the first day: truncated files, the store it wrote, SWF start dates, progress."""

from __future__ import annotations

import gzip
import io
import re
from datetime import UTC, datetime

import pytest

from harpd.cli.main import main as harp
from harpd.ingest.importer import import_file
from harpd.store import Store

N_JOBS = 30_000


def _swf(n: int, header: bool = True) -> str:
    head = "; UnixStartTime: 1000000000\n" if header else ""
    return head + "".join(
        f"{i} {i * 10} 5 {100 + i % 500} 4 -1 -1 4 1000 -1 1 {i % 7} 1 {i % 13} 1 -1 -1 -1\n" for i in range(1, n + 1)
    )


@pytest.fixture(autouse=True)
def empty_config(tmp_path, monkeypatch):
    cfg = tmp_path / "harpd.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path / "cfg.db"}"\n')
    monkeypatch.setenv("HARP_CONFIG", str(cfg))


def test_truncated_swf_gz_is_one_line_exit_2_and_only_whole_jobs_stored(tmp_path, capsys):
    data = gzip.compress(_swf(N_JOBS).encode())
    cut = tmp_path / "kth.swf.gz"
    cut.write_bytes(data[: len(data) // 2])
    db = tmp_path / "h.db"
    assert harp(["import", str(cut), "--db", str(db)]) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert err.count("\n") == 1 and err.startswith("harp: ") and "Traceback" not in err
    assert str(cut) in err and "gzip -t" in err and str(db) in err
    n = int(re.search(r"the ([\d,]+) records before it were imported", err).group(1).replace(",", ""))
    with Store.open(db) as s:
        assert s.count_jobs() == n > 1000
        last = s.get_job(str(n), source="kth")
        assert last.used_time_s == 100 + n % 500 and last.partition == "q1"  # complete, not half-read
        assert s.get_job(str(n + 1), source="kth") is None


def test_import_says_which_store_it_wrote(tmp_path, capsys):
    p = tmp_path / "t.swf"
    p.write_text(_swf(3))
    assert harp(["import", str(p)]) == 0  # the config's store
    out = capsys.readouterr().out
    assert out.rstrip().endswith(f"into {tmp_path / 'cfg.db'}")
    assert harp(["import", str(p), "--db", str(tmp_path / "other.db")]) == 0
    assert f"into {tmp_path / 'other.db'}" in capsys.readouterr().out


def test_swf_without_unix_start_time_warns_once_and_start_places_it(tmp_path, capsys):
    p = tmp_path / "METACENTRUM.swf"
    p.write_text(_swf(20, header=False))
    db = tmp_path / "m.db"
    assert harp(["import", str(p), "--db", str(db)]) == 0
    err = _without_gaps(capsys.readouterr().err)
    assert err.count("\n") == 1 and "harp: warning:" in err and "UnixStartTime" in err and "--start" in err
    with Store.open(db) as s:
        assert s.get_job("1", source="METACENTRUM").submit_time == 10.0
    assert harp(["import", str(p), "--db", str(db), "--start", "2012-01-01"]) == 0
    assert _without_gaps(capsys.readouterr().err) == ""
    jan1 = datetime(2012, 1, 1, tzinfo=UTC).timestamp()
    with Store.open(db) as s:
        assert s.get_job("1", source="METACENTRUM").submit_time == jan1 + 10
    assert harp(["import", str(p), "--db", str(db), "--start", "1500000000"]) == 0
    with Store.open(db) as s:
        assert s.get_job("2", source="METACENTRUM").submit_time == 1500000000 + 20


def _without_gaps(err: str) -> str:
    """harp import's stderr less its count of records without a value (this SWF has no memory columns)."""
    return "".join(ln for ln in err.splitlines(keepends=True) if " records imported, " not in ln)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--start", "last tuesday"], "not a date"),
    ],
)
def test_bad_start_is_one_line(tmp_path, capsys, argv, needle):
    p = tmp_path / "t.swf"
    p.write_text(_swf(2, header=False))
    assert harp(["import", str(p), "--db", str(tmp_path / "x.db"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err


def test_start_with_a_sacct_export_is_refused(tmp_path, capsys):
    p = tmp_path / "x.psv"
    p.write_text("JobID|State\n1|COMPLETED\n")
    assert harp(["import", str(p), "--db", str(tmp_path / "x.db"), "--start", "2012-01-01"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "drop --start" in err


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_percentages_only_grow_to_100(tmp_path, monkeypatch):
    import harpd.progress as progress

    seen: list[float] = []
    real_to = progress.Bar.to

    def spy(self, done, total=None):
        seen.append(done / self._bar.total)
        real_to(self, done, total)

    monkeypatch.setattr(progress.Bar, "to", spy)
    p = tmp_path / "t.swf.gz"
    p.write_bytes(gzip.compress(_swf(N_JOBS).encode()))
    out = _Tty()
    with Store.open(tmp_path / "p.db") as s:
        import_file(p, s, stream=out)
    assert len(seen) > 50 and all(b >= a for a, b in zip(seen, seen[1:])) and seen[-1] == 1.0
    assert "100%|" in out.getvalue()


def test_no_progress_off_a_terminal(tmp_path):
    p = tmp_path / "t.swf.gz"
    p.write_bytes(gzip.compress(_swf(3000).encode()))
    quiet = io.StringIO()
    with Store.open(tmp_path / "q.db") as s:
        import_file(p, s, stream=quiet)
    assert quiet.getvalue() == ""
