"""The demo's history ships with the repository: a fresh clone runs the demo without ../shared.

The slice must stay small enough for git, parse as the SWF the demo imports
(with the header lines the queue simulation and the dates need), say where it
comes from and how it was cut, and be what the demo uses unless told otherwise.
"""

from __future__ import annotations

import gzip
import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

from harpd.traces.swf import machine_size, read_swf

REPO = Path(__file__).resolve().parents[3]
SLICE = REPO / "demo" / "traces" / "CTC-SP2-1996-3.1-cln.first4000.swf.gz"
README = SLICE.parent / "README.md"
JOBS = 4000


def load_demo(monkeypatch: pytest.MonkeyPatch, trace: str | None = None):
    """demo/run_demo.py as a module (it is a script, not a package), with HARP_DEMO_TRACE as given."""
    if trace is None:
        monkeypatch.delenv("HARP_DEMO_TRACE", raising=False)
    else:
        monkeypatch.setenv("HARP_DEMO_TRACE", trace)
    monkeypatch.delenv("HARP_DEMO_TRACE_JOBS", raising=False)
    spec = importlib.util.spec_from_file_location("harp_demo_driver", REPO / "demo" / "run_demo.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_slice_is_small_and_holds_the_stated_jobs_with_requests() -> None:
    assert SLICE.is_file(), f"{SLICE} is missing"
    assert SLICE.stat().st_size < 1_000_000
    jobs = list(read_swf(SLICE))
    assert len(jobs) == JOBS
    with_requests = [j for j in jobs if j.req_time_s and j.used_time_s is not None]
    assert len(with_requests) >= 0.95 * JOBS  # the demo trains on requested vs used time
    assert machine_size(SLICE) == 338  # MaxProcs of the CTC SP2's batch partition


def test_the_slice_keeps_the_logs_header() -> None:
    with gzip.open(SLICE, "rt") as fh:
        header = [line for line in fh if line.startswith(";")]
    keys = {line[1:].partition(":")[0].strip() for line in header}
    assert {"UnixStartTime", "MaxProcs", "MaxNodes", "Acknowledge", "Installation"} <= keys
    assert any("Dan Dwyer and Steve Hotovy" in line for line in header)
    # times are dates, not seconds since 0
    first = next(iter(read_swf(SLICE)))
    assert first.submit_time is not None and first.submit_time >= 835823160


def test_the_slice_is_compressed_without_a_name_or_time_stamp() -> None:
    head = SLICE.read_bytes()[:10]
    flags, mtime = head[3], int.from_bytes(head[4:8], "little")
    assert flags & 0x08 == 0, "gzip stored a file name: cut it with gzip -n"
    assert mtime == 0, "gzip stored a time stamp: cut it with gzip -n"


def test_the_readme_names_source_citation_and_the_command() -> None:
    text = README.read_text()
    assert "https://www.cs.huji.ac.il/labs/parallel/workload/l_ctc_sp2/index.html" in text
    assert "Parallel Workloads Archive" in text
    assert "Feitelson" in text and "Tsafrir" in text and "Krakov" in text and "74(10)" in text
    assert "Dan Dwyer and Steve Hotovy" in text
    assert "gzip -n" in text and "awk" in text and SLICE.name in text


def test_git_does_not_ignore_the_slice() -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    proc = subprocess.run(["git", "check-ignore", "-q", str(SLICE.relative_to(REPO))], cwd=REPO)
    assert proc.returncode == 1, "the demo's trace is ignored by .gitignore: a clone would not get it"


def test_the_demo_uses_the_shipped_slice_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    demo = load_demo(monkeypatch)
    assert demo.TRACE == SLICE
    assert demo.TRACE.resolve().is_relative_to(REPO)


def test_harp_demo_trace_still_overrides(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    other = tmp_path / "other.swf"
    demo = load_demo(monkeypatch, str(other))
    assert demo.TRACE == other


def test_nothing_in_the_demo_reads_the_development_traces() -> None:
    for path in [REPO / "scripts" / "demo", *sorted((REPO / "demo").glob("*.py"))]:
        text = path.read_text()
        assert "../shared" not in text and '"shared"' not in text, f"{path} depends on ../shared"


def test_a_given_trace_is_cut_to_its_header_and_first_jobs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    demo = load_demo(monkeypatch)
    swf = tmp_path / "SITE-2020.swf.gz"
    lines = ["; UnixStartTime: 1600000000\n", "; MaxProcs: 64\n"]
    lines += [f"{i} {i * 10} 5 100 1 -1 -1 1 600 -1 1 1 1 1 1 -1 -1 -1\n" for i in range(1, 11)]
    with gzip.open(swf, "wt") as fh:
        fh.writelines(lines)
    out = demo.cut_trace(swf, 3, tmp_path)
    assert out.name == "SITE-2020.first3.swf"
    assert out.read_text().splitlines(keepends=True) == lines[:5]
    assert [j.job_id for j in read_swf(out)] == ["1", "2", "3"]

    psv = tmp_path / "site.sacct.psv"
    rows = ["JobID|Timelimit|Elapsed\n"] + [f"{i}|00:10:00|00:01:00\n" for i in range(1, 6)]
    psv.write_text("".join(rows))
    (tmp_path / "cut").mkdir()
    assert demo.cut_trace(psv, 2, tmp_path / "cut").read_text().splitlines(keepends=True) == rows[:3]

    js = tmp_path / "site.json"
    js.write_text('{"jobs": []}')
    assert demo.cut_trace(js, 2, tmp_path / "cut") == js  # one document: imported whole
