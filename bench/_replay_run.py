"""``harp replay`` as a process with a throw-away store: the benches that time the real command share it.

The command saves its queue figures beside the store (for ``harp report``);
a bench must not leave them in the user's store, so each run gets a
temporary configuration whose store lives in a folder removed afterwards.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def replay_timed(argv: list[str]) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run ``argv`` (a ``harp replay`` command line) in the repository; its process and wall seconds."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:  # the figures saved for `harp report` land here
        cfg = Path(tmp) / "harp.toml"
        cfg.write_text(f'[store]\npath = "{Path(tmp) / "harp.db"}"\n')
        proc = subprocess.run(
            argv, cwd=str(REPO), stdout=subprocess.PIPE, text=True, env=dict(os.environ, HARP_CONFIG=str(cfg))
        )
    return proc, time.perf_counter() - t0
