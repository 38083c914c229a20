"""harp-filter leaves the CPUs alone when sbatch's options count them in --tres-per-task."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from submit_fakes import FakeHarpd, change, decision

from harp_submit import filter as hf

REPO = Path(__file__).resolve().parents[3]
LIMITS = dict(partition="short", max_time_s=3600, max_mem_mb=8000, max_cpus=8)


def predict(home: Path, options: dict, sock: str) -> list[tuple[str, ...]]:
    (home / "job.sh").write_text("#!/bin/bash\nsrun ./a.out\n")
    msg = {
        "v": 1,
        "command": "sbatch",
        "offset": 0,
        "options": {**options, "argv": [str(home / "job.sh")]},
        "cmdline": ["sbatch", str(home / "job.sh")],
    }
    (home / "req.json").write_text(json.dumps(msg))
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO), "HARP_SOCKET": sock}
    proc = subprocess.run(
        [sys.executable, "-m", "harp_submit.filter", "--request", str(home / "req.json")],
        capture_output=True,
        text=True,
        env=env,
        cwd=home,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[0] == hf.PROTOCOL and lines[-1] == "ok"
    return [tuple(x.split("\t")) for x in lines[1:]]


def test_no_cpus_per_task_beside_a_tres_per_task_cpu_count(short_dir) -> None:
    with FakeHarpd(
        short_dir / "h.sock", decision(change("cpus-per-task", "1"), change("time", "00:05:00"), **LIMITS)
    ) as fake:
        lines = predict(short_dir, {"time": "00:50:00", "tres-per-task": "cpu=4"}, fake.path)
        assert [x for x in lines if x[0] == "set"] == []
        assert any(x[0] == "say" and "--tres-per-task=cpu=4" in x[1] for x in lines)
        lines = predict(short_dir, {"time": "00:50:00", "tres-per-task": "gres/gpu=1"}, fake.path)
        assert [x[1:] for x in lines if x[0] == "set"] == [("cpus-per-task", "1"), ("time", "00:05:00")]
