"""``python -m harpd.cli.main`` answers a bad command line as ``harp`` does: one line, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_module_entry_prints_a_cli_error_as_one_line(tmp_path: Path) -> None:
    trace = tmp_path / "t.swf"
    trace.write_text("1 0 0 60 1 -1 -1 1 120 -1 1 1 1 -1 1 -1 -1 -1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "harpd.cli.main", "replay", str(trace), "--procs", "4"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines == ["harp: --procs sizes the simulated machine of --schedule; add --schedule or drop --procs"]
