"""`harp ... | head` ends quietly: the reader leaving is not an error of harp's.

Before, `harp dnn estimate ... --format json | head -2` ended in a
BrokenPipeError traceback on the terminal.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_output_cut_short_by_the_reader_gives_no_traceback() -> None:
    # a pipe whose reader is gone before harp starts: every write fails, without a race
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "harpd.cli.main",
                "dnn",
                "estimate",
                "params=7.5e9",
                "zero=auto",
                "gpus=64",
                "--format",
                "json",
            ],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            timeout=120,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": "/tmp"},
        )
    finally:
        os.close(write_end)
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr
    assert proc.returncode == 141, proc.stderr
