"""Shared by the ingest tests: recorded sacct output and job builders (the fake Slurm: tests/helpers)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harpd.records import JobRecord, Outcome
from harpd.slurm.sacct_records import SacctJob, SacctStep

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sacct"


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text()


def load_json(name: str) -> dict:
    return json.loads(fixture_text(name))


def by_name(jobs):
    """{job name: [runs]} of parsed jobs or records."""
    out: dict[str, list] = {}
    for j in jobs:
        out.setdefault(j.job_name, []).append(j)
    return out


def sjob(state: str, *steps: SacctStep, **kw: Any) -> SacctJob:
    """A parsed job with sensible defaults: 1 node, 1 CPU, 100 MiB, 10 min limit."""
    base: dict[str, Any] = dict(
        job_id="1",
        state=state,
        exit_code=0,
        exit_signal=0,
        elapsed_s=60.0,
        limit_s=600.0,
        req_mem_mb=100.0,
        req_cpus=1,
        req_nodes=1,
        alloc_cpus=1,
        alloc_nodes=1,
        submit_time=1000.0,
        start_time=1010.0,
        end_time=1070.0,
    )
    base.update(kw)
    return SacctJob(steps=list(steps), **base)


def step(
    step_id: str = "batch", state: str = "COMPLETED", rss: float | None = 10.0, signal: int = 0, **kw: Any
) -> SacctStep:
    return SacctStep(step_id=step_id, state=state, exit_code=0, exit_signal=signal, max_rss_mb=rss, **kw)


def rec(job_id: str, outcome: Outcome = Outcome.COMPLETED, **kw: Any) -> JobRecord:
    base: dict[str, Any] = dict(
        source="testcl",
        state=outcome.value.upper(),
        partition="short",
        submit_time=1000.0,
        start_time=1010.0,
        end_time=1070.0,
        req_time_s=600.0,
        req_mem_mb=100.0,
        used_time_s=60.0,
        used_mem_mb=50.0,
    )
    base.update(kw)
    return JobRecord(job_id=job_id, outcome=outcome, **base)
