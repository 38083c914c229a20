"""Builders shared by the report tests: records, a filled store, synthetic data."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from harpd.records import JobRecord, Outcome

REPO = Path(__file__).resolve().parents[3]
DAY = 86400.0
NOW = 1_780_000_000.0  # fixed "now" so windows are deterministic


def job(job_id: str, **kw: Any) -> JobRecord:
    """A finished job with round numbers; override any field."""
    base: dict[str, Any] = dict(
        user="alice",
        account="physics",
        partition="cpu",
        signature="sim.sh",
        submit_time=NOW - DAY - 600,
        start_time=NOW - DAY - 3600,
        end_time=NOW - DAY,
        outcome=Outcome.COMPLETED,
        req_time_s=7200.0,
        req_mem_mb=4096.0,
        req_cpus=4,
        alloc_cpus=4,
        used_time_s=3600.0,
        used_mem_mb=1024.0,
        used_cpu_s=3600.0 * 2,
    )
    base.update(kw)
    return JobRecord(job_id=job_id, **base)


def resources(time_s: int | None = None, mem_mb: int | None = None, cpus: int | None = None) -> dict[str, Any]:
    """A protocol ``Resources`` dict (what harp-submit registers)."""
    return {
        "time_s": time_s,
        "mem_mb": mem_mb,
        "mem_per_cpu_mb": None,
        "mem_per_gpu_mb": None,
        "cpus_per_task": cpus,
        "ntasks": None,
        "nodes": None,
        "gres": None,
        "gpus": None,
        "partition": None,
    }


def bench_module() -> Any:
    """bench/report_speed.py as a module: its ``synthetic()`` is the one data generator."""
    path = REPO / "bench" / "report_speed.py"
    spec = importlib.util.spec_from_file_location("harp_bench_report_speed", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
