"""bench/workflow_memory.py, cores_targets.py and growth_trace.py on a fresh clone: one line naming the workflow
traces and the Sizey repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("bench", ["workflow_memory.py", "cores_targets.py", "growth_trace.py"])
def test_workflow_bench_without_traces_names_them_and_their_source(tmp_path: Path, bench: str) -> None:
    root = tmp_path / "fresh" / "clone"
    shutil.copytree(REPO / "bench", root / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in ("HARP_TRACES", "PYTHONPATH")}
    env["HARP_TRACES"] = str(tmp_path)
    proc = subprocess.run(
        [sys.executable, str(root / "bench" / bench)], capture_output=True, text=True, cwd=root, env=env, timeout=120
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "FIGURE" not in proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "workflows/nf-core-rnaseq.trace.csv.gz" in lines[0] and "dos-group/sizey" in lines[0]
    assert str(tmp_path) in lines[0] and "parallel/workload" not in lines[0]
