"""Reading trace text: gzip cut short, progress through the file, SWF start times."""

from __future__ import annotations

import gzip
import random
import zlib

import pytest

from harpd.cli.main import main as harp
from harpd.traces import TraceFormatError, read_trace
from harpd.traces._open import CHUNK, TraceText

N_JOBS = 40_000


def _swf_lines(n: int, header: bool = True) -> list[str]:
    rnd = random.Random(7)
    head = ["; UnixStartTime: 1000000000"] if header else []
    # job submit wait run procs cpu mem reqp reqt reqmem status user group exe queue part prev think
    return head + [
        f"{i} {i * 10} 5 {rnd.randint(10, 900)} 4 -1 -1 4 1000 -1 1 {i % 7} 1 {i % 13} 1 -1 -1 -1"
        for i in range(1, n + 1)
    ]


def _gz(lines: list[str]) -> bytes:
    return gzip.compress(("\n".join(lines) + "\n").encode())


@pytest.fixture
def cut_swf(tmp_path):
    data = _gz(_swf_lines(N_JOBS))
    p = tmp_path / "kth.swf.gz"
    p.write_bytes(data[: len(data) * 6 // 10])
    return p


def test_truncated_swf_gz_keeps_the_complete_jobs_then_one_line(cut_swf):
    expected = {ln.split()[0]: ln.split() for ln in _swf_lines(N_JOBS)[1:]}
    reader = read_trace(cut_swf)
    got = []
    with pytest.raises(TraceFormatError) as ei:
        for rec in reader:
            got.append(rec)
    msg = str(ei.value)
    assert "\n" not in msg and str(cut_swf) in msg and "gzip -t" in msg and "download it again" in msg
    assert 1000 < len(got) < N_JOBS
    assert [r.job_id for r in got] == [str(i) for i in range(1, len(got) + 1)]
    last = got[-1]  # the line cut by the break is never read as a job
    assert last.used_time_s == float(expected[last.job_id][3]) and last.partition == "q1"


def test_replay_of_a_truncated_swf_gz_is_one_line_exit_2(cut_swf, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HARP_CONFIG", str(tmp_path / "empty.toml"))
    (tmp_path / "empty.toml").write_text("")
    assert harp(["replay", str(cut_swf), "--models", "request", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("harp: ") and str(cut_swf) in err
    assert "Traceback" not in err and "EOFError" not in err


def test_corrupt_gzip_is_one_line(tmp_path):
    data = bytearray(_gz(_swf_lines(2000)))
    data[-8] ^= 0xFF  # the CRC of the data: zlib finds it wrong at the end
    p = tmp_path / "bad.swf.gz"
    p.write_bytes(bytes(data))
    with pytest.raises(TraceFormatError, match=r"bad.swf.gz:\d+: gzip data ends or breaks here"):
        list(read_trace(p))


def test_several_gzip_members_and_padding_read_whole(tmp_path):
    lines = _swf_lines(3000)
    p = tmp_path / "two.swf.gz"
    p.write_bytes(_gz(lines[:1500]) + _gz(lines[1500:]) + bytes(100))
    assert [r.job_id for r in read_trace(p)] == [str(i) for i in range(1, 3001)]


def _fractions(path) -> list[float]:
    reader = read_trace(path)
    out = [reader.fraction()]
    for _ in reader:
        out.append(reader.fraction())
    out.append(reader.fraction())
    return out


@pytest.mark.parametrize("gz", [True, False])
def test_progress_moves_forward_in_small_steps_to_the_end(tmp_path, gz):
    lines = _swf_lines(N_JOBS)
    p = tmp_path / ("t.swf.gz" if gz else "t.swf")
    p.write_bytes(_gz(lines) if gz else ("\n".join(lines) + "\n").encode())
    size = p.stat().st_size
    fr = _fractions(p)
    assert all(b >= a for a, b in zip(fr, fr[1:]))  # never backwards
    assert fr[-1] == 1.0
    biggest = max(b - a for a, b in zip(fr, fr[1:]))
    assert biggest <= 2 * CHUNK / size + 1e-9  # no sticking then jumping
    assert len(set(fr)) >= size // (2 * CHUNK)


def test_sacct_export_progress_moves_forward(tmp_path):
    head = "JobID|Partition|ReqCPUS|ReqMem|Timelimit|Elapsed|State|Submit|Start|End\n"
    rows = "".join(
        f"{1000 + i}|p|1|100M|01:00:00|00:10:00|COMPLETED|2021-05-01T00:00:00|2021-05-01T00:01:00|2021-05-01T00:11:00\n"
        for i in range(30000)
    )
    p = tmp_path / "x.psv.gz"
    p.write_bytes(gzip.compress((head + rows).encode()))
    fr = _fractions(p)
    assert all(b >= a for a, b in zip(fr, fr[1:])) and fr[-1] == 1.0
    assert max(b - a for a, b in zip(fr, fr[1:])) <= 2 * CHUNK / p.stat().st_size + 1e-9


def test_trace_text_reads_plain_and_gzip_alike(tmp_path):
    text = "a\nb\r\nc"
    (tmp_path / "p").write_text(text, newline="")
    (tmp_path / "g").write_bytes(gzip.compress(text.encode()))
    for name in ("p", "g"):
        t = TraceText(tmp_path / name)
        assert list(t.lines()) == ["a\n", "b\r\n", "c"] and t.error is None


def test_zlib_error_on_a_bad_header_is_caught(tmp_path):
    p = tmp_path / "h.gz"
    p.write_bytes(b"\x1f\x8b" + b"\xff" * 50)
    t = TraceText(p)
    assert list(t.lines()) == [] and t.error is not None
    assert isinstance(zlib.error("x"), Exception)


# ---------------------------------------------------------------- SWF start time


def test_swf_without_unix_start_time_warns_once(tmp_path):
    p = tmp_path / "metacentrum.swf"
    p.write_text("\n".join(_swf_lines(50, header=False)) + "\n")
    reader = read_trace(p)
    recs = list(reader)
    assert recs[0].submit_time == 10.0  # 1970: what the file gives
    assert len(reader.warnings) == 1 and "UnixStartTime" in reader.warnings[0] and "--start" in reader.warnings[0]


def test_start_places_the_jobs_and_wins_over_the_header(tmp_path):
    p = tmp_path / "m.swf"
    p.write_text("\n".join(_swf_lines(5, header=False)) + "\n")
    reader = read_trace(p, start=1325376000.0)
    recs = list(reader)
    assert recs[0].submit_time == 1325376000.0 + 10 and reader.warnings == []
    q = tmp_path / "h.swf"
    q.write_text("\n".join(_swf_lines(5)) + "\n")
    assert list(read_trace(q, start=2e9))[0].submit_time == 2e9 + 10
    assert list(read_trace(q))[0].submit_time == 1e9 + 10


def test_start_is_refused_for_formats_with_dates(tmp_path):
    p = tmp_path / "x.psv"
    p.write_text("JobID|State\n1|COMPLETED\n")
    with pytest.raises(TraceFormatError, match="drop --start"):
        read_trace(p, start=0.0)
