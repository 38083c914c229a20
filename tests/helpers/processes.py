"""Short temporary directories and running harp-submit as a process, for the Slurm tests.

Unix socket paths are limited to about 100 bytes, so socket-holding test
directories live directly under /tmp with a short prefix; harp-submit runs as
its own process with a clean HARP_*/SBATCH_* environment, as a user's shell would.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUN_MAIN = "import sys; from harp_submit.cli import main; sys.exit(main())"


@contextlib.contextmanager
def short_tmpdir(prefix: str) -> Iterator[Path]:
    """A world-readable directory under /tmp, removed afterwards."""
    d = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    os.chmod(d, 0o755)
    try:
        yield Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def run_harp_submit(
    cluster, *args: str, socket_path: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """harp-submit ARGS against ``cluster`` asking the harpd on ``socket_path``."""
    e = {k: v for k, v in cluster.env.items() if not k.startswith(("HARP_", "SBATCH_"))}
    e.update(
        {
            "SLURM_CONF": str(cluster.conf),
            "HARP_SOCKET": socket_path,
            "PYTHONPATH": str(REPO),
            "HARP_CONFIG": "/nonexistent/harpd.toml",
        }
    )
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", RUN_MAIN, *args],
        capture_output=True,
        text=True,
        cwd=str(cwd or cluster.workdir),
        env=e,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
