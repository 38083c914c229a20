"""A bench on a fresh clone (no ../shared/traces) says in one line which trace it needs and where to get it.

Each bench that replays real traces is run as a process from a copy of
bench/ in a directory with no ``shared`` folder beside it, so the default
``../shared/traces`` does not exist: it must exit 2 with one line on stderr
that names the file and its download page, and no traceback; the same with
``HARP_TRACES`` pointing to an empty folder.  Where the folder is given or
found, the benches read it (the figures themselves are not run here).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

# bench -> a file it needs (the one its line must name)
BENCHES = {
    "replay_targets": "CTC-SP2-1996-3.1-cln.swf.gz",
    "queue_targets": "KTH-SP2-1996-2.1-cln.swf.gz",
    "queue_bound": "KTH-SP2-1996-2.1-cln.swf.gz",
    "replay_speed": "HPC2N-2002-2.2-cln.swf.gz",
    "schedule_speed": "CTC-SP2-1996-3.1-cln.swf.gz",
    "train_speed": "HPC2N-2002-2.2-cln.swf.gz",
    "predict_latency": "KTH-SP2-1996-2.1-cln.swf.gz",
    "import_speed": "cedar-2021.sacct.psv.gz",
}
PWA = "https://www.cs.huji.ac.il/labs/parallel/workload/"


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bench/ copied into <tmp>/clone/bench: nothing named ``shared`` beside the copy."""
    root = tmp_path_factory.mktemp("fresh") / "clone"
    shutil.copytree(REPO / "bench", root / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    assert not (root.parent / "shared").exists()
    return root


def run_bench(clone: Path, name: str, *args: str, traces: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HARP_TRACES", "PYTHONPATH")}
    if traces is not None:
        env["HARP_TRACES"] = traces
    return subprocess.run(
        [sys.executable, str(clone / "bench" / f"{name}.py"), *args],
        capture_output=True,
        text=True,
        cwd=clone,
        env=env,
        timeout=120,
    )


def assert_one_line(proc: subprocess.CompletedProcess[str], name: str, needed: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "FIGURE" not in proc.stdout
    line = lines[0]
    assert line.startswith(f"{name}: ") and needed in line
    where = "slurm-queue-time-pred" if needed.startswith("cedar") else PWA
    assert where in line
    return line


@pytest.mark.parametrize("name", sorted(BENCHES))
def test_without_a_traces_folder_a_bench_says_what_it_needs_and_where(clone: Path, name: str) -> None:
    line = assert_one_line(run_bench(clone, name), name, BENCHES[name])
    assert "--traces" in line and "HARP_TRACES" in line


@pytest.mark.parametrize("name", sorted(BENCHES))
def test_an_empty_harp_traces_folder_is_named(clone: Path, name: str, tmp_path: Path) -> None:
    line = assert_one_line(run_bench(clone, name, traces=str(tmp_path)), name, BENCHES[name])
    assert str(tmp_path) in line


@pytest.mark.parametrize("name", ["replay_speed", "schedule_speed", "import_speed"])
def test_a_trace_file_that_is_not_there_is_named(clone: Path, name: str, tmp_path: Path) -> None:
    gone = tmp_path / "gone.swf.gz"
    line = assert_one_line(run_bench(clone, name, "--trace", str(gone)), name, BENCHES[name])
    assert str(gone) in line


def test_the_folder_comes_from_the_option_then_harp_traces_then_shared(monkeypatch, tmp_path: Path) -> None:
    from bench import _traces

    opt, env, shared = tmp_path / "opt", tmp_path / "env", tmp_path / "shared" / "traces"
    shared.mkdir(parents=True)
    monkeypatch.setattr(_traces, "SHARED", shared)
    monkeypatch.setenv("HARP_TRACES", str(env))
    assert _traces.traces_dir(str(opt)) == opt
    assert _traces.traces_dir(None) == env
    monkeypatch.delenv("HARP_TRACES")
    assert _traces.traces_dir(None) == shared
    monkeypatch.setattr(_traces, "SHARED", tmp_path / "nowhere")
    assert _traces.traces_dir(None) is None


def test_a_folder_holding_one_of_the_traces_is_taken(monkeypatch, tmp_path: Path) -> None:
    from bench import _traces

    (tmp_path / "KTH-SP2-1996-2.1-cln.swf.gz").write_bytes(b"")
    monkeypatch.setenv("HARP_TRACES", str(tmp_path))
    names = ["KTH-SP2-1996-2.1-cln.swf.gz", "CTC-SP2-1996-3.1-cln.swf.gz"]
    assert _traces.traces_folder("x", names) == tmp_path
    assert _traces.trace_file("x", names[0]) == tmp_path / names[0]
    with pytest.raises(SystemExit) as exc:
        _traces.trace_file("x", names[1])
    assert exc.value.code == 2
