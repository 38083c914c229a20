"""harpd's /metrics against the real Slurm, end to end (issue #49): each counter moves as its jobs do.

One root harpd (privileged: soft limits, the watcher every 2 s extending
with 12 s left; sacct polled every 2 s; recovery on) serving ``/metrics`` on
loopback, scraped while:

* ``harp-submit`` submits a ``#HARP retry`` job that needs 150 MB under
  ``--mem=100M``: its predict is a decision (``harp_decisions_total``), its
  out-of-memory end is requeued with 200M (``harp_recoveries_total{outcome="requeued"}``);
* a job harp shortened from 10 minutes to 1 (registered with the token of a
  decision written into the store, as tests/slurm/test_soft_limits_live.py
  does) is extended before its limit (``harp_extensions_total{outcome="made"}``);
* a plain user (harptest1) registers root's job: refused as not the owner
  (``harp_refusals_total{reason="not_owner"}``).

Lean on purpose: every job starts at once and is cancelled as soon as its
counter moved, so the module takes about the 1-minute limit's 48 s before
the extension, plus harpd's start.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_recovery import REPO, RUN_SUBMIT, USER, Daemon, ensure_user, user_python
from test_soft_limits_live import register

from tests.helpers.wait import wait_for

pytestmark = pytest.mark.slurm

OOM = "#!/bin/bash\n#HARP retry\npython3 -c \"s = b'x' * (150 << 20); import time; time.sleep(5)\"\n"
SOFT = "#!/bin/bash\nsleep 100\n"
REGISTER_AS_USER = (
    "import sys; from harp_submit import client; "
    "print(client.call(sys.argv[1], {'op': 'register', 'job_id': sys.argv[2], 'job': {}, "
    "'original': {}, 'submitted': {}}, 10))"
)
DEADLINE_S = 8 * 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class MetricsDaemon(Daemon):
    port: int = 0

    def write_config(self) -> None:
        super().write_config()
        with open(self.dir / "harpd.toml", "a") as fh:
            fh.write(
                "[watch]\ninterval_s = 2.0\nmargin_s = 12.0\n"
                f'[metrics]\nenabled = true\nlisten = "127.0.0.1:{self.port}"\n'
            )

    def scrape(self) -> tuple[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=30) as answer:
            text = answer.read().decode()
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }
        return text, samples


def total(samples: dict, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(v for (n, lab), v in samples.items() if n == name and set(labels.items()) <= set(lab))


def test_each_counter_moves_as_its_jobs_do(slurm_cluster):
    c = slurm_cluster
    ensure_user(USER)
    upy, upath = user_python(USER)
    base = Path(tempfile.mkdtemp(prefix="hmx-", dir="/tmp"))
    base.chmod(0o755)
    work = base / "work"
    work.mkdir()
    (work / "oom.sh").write_text(OOM)
    (work / "soft.sh").write_text(SOFT)
    d = MetricsDaemon("root", base / "d", None, sys.executable, str(REPO), str(c.conf), port=free_port())
    d.dir.mkdir()
    d.write_config()
    jobs: list[str] = []
    try:
        d.start()
        _, before = d.scrape()
        # a decision (harp-submit asks harpd) and, once it runs out of memory, a recovery
        env = [
            f"SLURM_CONF={c.conf}",
            f"HARP_SOCKET={d.socket}",
            f"PYTHONPATH={REPO}",
            "HARP_CONFIG=/nonexistent/harpd.toml",
            f"PATH={os.environ.get('PATH', '/usr/bin:/bin')}",
        ]
        argv = ["env", "-i", *env, sys.executable, "-c", RUN_SUBMIT, "--parsable", "--time=5", "--mem=100M", "oom.sh"]
        sub = subprocess.run(argv, capture_output=True, text=True, cwd=work, stdin=subprocess.DEVNULL, timeout=120)
        assert sub.returncode == 0, sub.stderr
        oom = sub.stdout.strip().split(";")[0]
        jobs.append(oom)
        # a job harp cut from 10 minutes to 1: extended before its limit
        out = c.run(["sbatch", "--parsable", "--time=1", "--mem=100M", "-p", "short", str(work / "soft.sh")], cwd=work)
        soft = out.stdout.strip().split(";")[0]
        jobs.append(soft)
        register(d, soft, work, signature="metrics-test")
        # a refused request: harptest1 registers root's job
        refused = c.run(
            ["env", f"PYTHONPATH={upath}", upy, "-c", REGISTER_AS_USER, d.socket, soft], user=USER, check=False
        )
        assert "not yours" in refused.stdout + refused.stderr, refused.stdout + refused.stderr

        moved: dict[str, float] = {}
        wanted = {
            "decision": ("harp_decisions_total", {}),
            "refused (not owner)": ("harp_refusals_total", {"reason": "not_owner"}),
            "extension made": ("harp_extensions_total", {"outcome": "made"}),
            "out-of-memory job requeued": ("harp_recoveries_total", {"outcome": "requeued"}),
        }

        def all_moved() -> bool:
            _, now = d.scrape()
            for what, (name, labels) in wanted.items():
                if total(now, name, **labels) > total(before, name, **labels):
                    moved[what] = total(now, name, **labels) - total(before, name, **labels)
            if "extension made" in moved and soft in jobs:
                c.run(["scancel", soft], check=False)  # its counter moved: no need to wait for its end
                jobs.remove(soft)
            return len(moved) == len(wanted)

        wait_for(
            "every counter to move",
            all_moved,
            DEADLINE_S,
            interval=2.0,
            log=lambda: f"moved so far: {moved}\n{d.log_tail()}",
        )
        text, after = d.scrape()
        print(f"\nmetrics moved: {moved}")
        assert total(after, "harp_decisions_total", resource="mem") >= 1
        assert total(after, "harp_watch_tick_seconds_count") > 0
        assert after[("harp_watch_lead_seconds", ())] == 12.0
        assert 0 <= after[("harp_poller_lag_seconds", ())] < 120
        assert after[("harp_store_size_bytes", ())] > 0
        # no label names a job, a user or a path (job ids are short numbers: compared as whole label values)
        for secret in (USER, "root", str(base)):
            assert secret not in text, f"/metrics shows {secret!r}"
        labels = {v for (_, lab) in after for _, v in lab}
        assert not labels & {oom, soft}, labels
    finally:
        d.stop()
        if jobs:
            c.run(["scancel", *jobs], check=False)
        shutil.rmtree(base, ignore_errors=True)
