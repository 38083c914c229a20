"""The real harpd process with ``[metrics] enabled``: serves the endpoint, counts a predict, fails clearly."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from harp_submit import client
from tests.helpers.harpd_process import running_harpd


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=30) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_harpd_serves_metrics_that_move_with_a_predict(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    toml = f'[metrics]\nenabled = true\nlisten = "127.0.0.1:{port}"\n'
    with running_harpd(tmp_path, extra_toml=toml) as sock:
        before = scrape(url)
        job = {"job_name": "x", "request": {"time_s": 3600, "mem_mb": 1000}}
        answer = client.call(sock, {"op": "predict", "job": job}, 30)
        assert answer["ok"], answer
        after = scrape(url)
    count = ("harp_predict_latency_seconds_count", ())
    assert after[count] == before.get(count, 0) + 1
    # no history in a new store: memory waits for its first runs
    kept = ("harp_decisions_total", (("outcome", "kept"), ("reason", "cold_start"), ("resource", "mem")))
    assert after[kept] == before.get(kept, 0) + 1
    assert after[("harp_store_size_bytes", ())] > 0


def test_a_metrics_address_in_use_stops_harpd_with_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = tmp_path / "harpd.toml"
        cfg.write_text(
            f'[server]\nsocket = "{tmp_path}/harpd.sock"\n[store]\npath = "{tmp_path}/lib/harp.db"\n'
            f'[metrics]\nenabled = true\nlisten = "127.0.0.1:{port}"\n'
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("HARP_")}
        out = subprocess.run(
            [sys.executable, "-m", "harpd.daemon.main", "--config", str(cfg), "--log-level", "error"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
    assert out.returncode == 1, out
    lines = [ln for ln in out.stderr.strip().splitlines() if ln.startswith("harpd: ")]
    assert len(lines) == 1 and "metrics.listen" in lines[0] and str(port) in lines[0], out.stderr
    assert "Traceback" not in out.stderr
    assert not Path(tmp_path / "harpd.sock").exists()
