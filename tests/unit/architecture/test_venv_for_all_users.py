"""The .venv scripts/setup makes is usable by every user: their harp-submit must not fail with "bad interpreter".

A venv's programs run its base interpreter; built on root's private pyenv
Python, every other user's harp-submit failed before harp's first line.
This runs the checkout's own .venv as a second user (``harptest1``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.users import ensure_user

REPO = Path(__file__).resolve().parents[3]
VENV = REPO / ".venv"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as a second user"),
    pytest.mark.skipif(not (VENV / "bin" / "python").exists(), reason="no .venv: run scripts/setup"),
    pytest.mark.skipif(shutil.which("runuser") is None, reason="needs runuser"),
]


def _as(user: str, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/tmp",
        "HARP_SOCKET": "/nonexistent/harpd.sock",
        "HARP_CONFIG": "/nonexistent/harpd.toml",
        **(env or {}),
    }
    return subprocess.run(
        ["runuser", "-u", user, "--", "env", "-i", *(f"{k}={v}" for k, v in e.items()), *argv],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=120,
    )


def test_another_user_runs_harp_submit_from_the_checkouts_venv():
    ensure_user("harptest1")
    proc = _as("harptest1", str(VENV / "bin" / "harp-submit"), "--harp-dry-run", "--wrap", "true")
    assert proc.returncode == 0, (
        f"harptest1 cannot run {VENV}/bin/harp-submit ({proc.stderr.strip()[-300:]}); "
        "run scripts/setup again: it rebuilds a .venv made on an interpreter other users cannot run"
    )
    assert "harp: dry run, nothing submitted; would run: sbatch --wrap true" in proc.stderr


def test_another_user_runs_the_harp_cli_from_it():
    ensure_user("harptest1")
    proc = _as("harptest1", str(VENV / "bin" / "harp"), "--version")
    assert proc.returncode == 0 and proc.stdout.startswith("harp "), proc.stderr[-300:]


def test_setup_picks_an_interpreter_everyone_can_run():
    """scripts/setup's own check, on a private interpreter path and on the venv it made."""
    script = (REPO / "scripts" / "setup").read_text()
    start = script.index("world_runnable() {")
    end = script.index("\n}\n", start) + 3
    fn = script[start:end]
    private = Path("/tmp/harp-private-py")
    private.mkdir(mode=0o700, exist_ok=True)
    os.chmod(private, 0o700)
    (private / "python3").write_text("#!/bin/sh\n")
    os.chmod(private / "python3", 0o755)
    real = subprocess.run(
        [str(VENV / "bin" / "python"), "-c", "import os, sys; print(os.path.realpath(sys._base_executable))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    for path, want in ((str(private / "python3"), 1), (real, 0), ("/nonexistent/python3", 1), ("", 1)):
        rc = subprocess.run(["bash", "-c", fn + '\nworld_runnable "$1"', "x", path]).returncode
        assert rc == want, (path, rc)
    shutil.rmtree(private, ignore_errors=True)
