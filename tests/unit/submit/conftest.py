"""Fixtures of the harp-submit tests: a fake sbatch, a fake harpd, and a runner."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from submit_fakes import FakeHarpd, make_fake_sbatch, read_log

REPO = Path(__file__).resolve().parents[3]
# what bin/harp-submit runs: the entry point that picks the path (harp_submit/launch.py)
RUN_MAIN = "import sys; from harp_submit.launch import main; sys.exit(main())"


class Runner:
    """Runs harp-submit as a separate process, the way users do."""

    def __init__(self, home: Path, sbatch: Path, socket_path: str):
        self.home = home  # working directory of the runs
        self.sbatch = sbatch
        self.log = home / "sbatch.log"
        self.socket = socket_path
        self.env: dict[str, str] = {
            "PATH": f"{sbatch.parent}:{os.environ.get('PATH', '')}",
            "HARP_SBATCH": str(sbatch),
            "HARP_SOCKET": socket_path,
            "HARP_CONFIG": str(home / "no-such-harpd.toml"),
            "FAKE_SBATCH_LOG": str(self.log),
            "PYTHONPATH": str(REPO),
            "HOME": str(home),
        }

    def __call__(
        self,
        *args: str,
        stdin: bytes | None = None,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float = 300,
        no_dac_override: bool = False,
    ) -> subprocess.CompletedProcess[bytes]:
        e = dict(self.env)
        if env:
            for k, v in env.items():
                if v is None:
                    e.pop(k, None)
                else:
                    e[k] = v
        argv = [sys.executable, "-c", RUN_MAIN, *args]
        if no_dac_override:
            # root without CAP_DAC_OVERRIDE: file permissions apply to it too
            argv = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *argv]
        return subprocess.run(
            argv,
            input=stdin if stdin is not None else b"",
            capture_output=True,
            env=e,
            cwd=str(cwd or self.home),
            timeout=timeout,
        )

    def calls(self) -> list[dict[str, Any]]:
        """What the fake sbatch saw, one dict per run."""
        return read_log(self.log)

    def write(self, name: str, text: str | bytes, mode: int = 0o644) -> Path:
        path = self.home / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, str):
            text = text.encode("utf-8", "surrogateescape")
        path.write_bytes(text)
        path.chmod(mode)
        return path


@pytest.fixture
def short_dir():
    """A short temporary directory (Unix socket paths are limited to 107 bytes)."""
    d = tempfile.mkdtemp(prefix="hs-", dir="/tmp")
    os.chmod(d, 0o755)
    try:
        yield Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def run(short_dir: Path) -> Runner:
    bindir = short_dir / "bin"
    bindir.mkdir()
    home = short_dir / "work"
    home.mkdir()
    return Runner(home, make_fake_sbatch(bindir), str(short_dir / "harpd.sock"))


@pytest.fixture
def harpd(run: Runner):
    with FakeHarpd(run.socket) as server:
        yield server
