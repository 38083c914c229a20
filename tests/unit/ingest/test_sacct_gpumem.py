"""GPU memory peaks (``gres/gpumem`` of TRESUsageInMax) through sacct's JSON and -P readers to JobRecord.

The fixtures ``VER-gpumem.json``/``.psv`` are real sacct output of the local
cluster (22.05, 26.05) whose two jobs' batch steps got their GPU memory peak
placed in slurmdbd's database (tests/fixtures/sacct/place-gpumem.sh, README):
``fx-gpumem`` ran one task on two GPUs at 14486 MiB each (an H200 measurement),
``fx-gpuoom`` exited 1 with 141312 MiB on one GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ingest_helpers import by_name

from harpd.records import Outcome
from harpd.slurm import sacct_json, sacct_text
from harpd.slurm.classify import gpu_peak_mb, to_record
from harpd.slurm.sacct_records import SacctJob, SacctStep

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sacct"
VERSIONS = sorted(p.name[: -len("-gpumem.json")] for p in FIXTURES.glob("*-gpumem.json"))


def test_recorded_for_the_oldest_and_newest_release():
    assert {"22.05", "26.05"} <= set(VERSIONS)
    assert all((FIXTURES / f"{v}-gpumem.psv").exists() for v in VERSIONS)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("fmt", ["json", "psv"])
def test_gpumem_reaches_the_record_per_gpu(version, fmt):
    text = (FIXTURES / f"{version}-gpumem.{fmt}").read_text()
    jobs = sacct_json.parse_json(text) if fmt == "json" else sacct_text.parse_parsable2(text)
    recs = by_name(jobs)
    (run,), (oom,) = recs["fx-gpumem"], recs["fx-gpuoom"]
    batch = next(s for s in run.steps if s.step_id == "batch")
    assert batch.max_gpumem_mb == pytest.approx(2 * 14486)  # the task's sum over its two GPUs
    r = to_record(run)
    assert r.outcome is Outcome.COMPLETED and r.alloc_gpus == 2
    assert r.used_gpumem_mb == pytest.approx(14486)  # per GPU
    o = to_record(oom)
    assert o.outcome is Outcome.FAILED and o.used_gpumem_mb == pytest.approx(141312)
    assert not o.censored_mem  # host memory was not what ran out


@pytest.mark.parametrize("version", ["22.05", "25.11", "26.05"])
def test_releases_without_gpu_accounting_read_none(version):
    """The general fixtures come from the same cluster before any peak was placed: no figure is made up."""
    jobs = sacct_json.parse_json((FIXTURES / f"{version}-jobs.json").read_text())
    assert jobs and all(to_record(j).used_gpumem_mb is None for j in jobs)


def _job(gpus, nodes, steps):
    return SacctJob(job_id="1", alloc_gpus=gpus, alloc_nodes=nodes, steps=steps)


def test_per_gpu_division_follows_tasks_per_node():
    # torchrun: one task per node holding its 4 GPUs -> the task's figure over 4
    assert gpu_peak_mb(_job(8, 2, [SacctStep("0", ntasks=2, nnodes=2, max_gpumem_mb=4000.0)])) == 1000.0
    # srun one task per GPU: the largest task's figure is one GPU's
    assert gpu_peak_mb(_job(8, 2, [SacctStep("0", ntasks=8, nnodes=2, max_gpumem_mb=1000.0)])) == 1000.0
    # GPU count unknown: divided by 1, an over-statement rather than an under-statement
    assert gpu_peak_mb(_job(None, 1, [SacctStep("batch", ntasks=1, nnodes=1, max_gpumem_mb=900.0)])) == 900.0
    # the largest step wins; steps without a figure are left out
    steps = [SacctStep("batch", max_gpumem_mb=None), SacctStep("0", ntasks=1, nnodes=1, max_gpumem_mb=300.0)]
    assert gpu_peak_mb(_job(1, 1, steps)) == 300.0
    assert gpu_peak_mb(_job(1, 1, [SacctStep("batch")])) is None


def test_text_reads_bare_bytes_and_units_and_ignores_a_missing_column():
    head = "JobID|State|AllocTRES|NTasks|NNodes|TRESUsageInMax\n"
    text = (
        head
        + "7|COMPLETED|gres/gpu=1,node=1|||\n"
        + "7.batch|COMPLETED||1|1|cpu=00:00:00,gres/gpumem=12345678,mem=3068K\n"
        + "8|COMPLETED|gres/gpu=1,node=1|||\n"
        + "8.batch|COMPLETED||1|1|gres/gpumem=1.50G,gres/gpuutil=3\n"
        + "9|COMPLETED|gres/gpu=1,node=1|||\n"
        + "9.batch|COMPLETED||1|1|cpu=00:00:00,mem=3068K\n"
    )
    jobs = {j.job_id: to_record(j) for j in sacct_text.parse_parsable2(text)}
    assert jobs["7"].used_gpumem_mb == pytest.approx(12345678 / 2**20)
    assert jobs["8"].used_gpumem_mb == pytest.approx(1536.0)
    assert jobs["9"].used_gpumem_mb is None
    old = sacct_text.parse_parsable2("JobID|State\n10|COMPLETED\n10.batch|COMPLETED\n")
    assert to_record(old[0]).used_gpumem_mb is None


def test_json_gpumem_item_and_bad_values():
    doc = {
        "jobs": [
            {
                "job_id": 5,
                "state": {"current": ["COMPLETED"]},
                "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": 1}]},
                "steps": [
                    {
                        "step": {"id": "5.batch"},
                        "tres": {"requested": {"max": [{"type": "gres", "name": "gpumem", "count": 2 * 2**30}]}},
                    },
                    {
                        "step": {"id": "5.0"},
                        "tres": {"requested": {"max": [{"type": "gres", "name": "gpumem", "count": "bad"}]}},
                    },
                ],
            }
        ]
    }
    (job,) = sacct_json.parse_json(doc)
    assert to_record(job).used_gpumem_mb == 2048.0
    assert job.steps[1].max_gpumem_mb is None


def test_a_store_of_the_previous_schema_gets_the_column(tmp_path):
    """A store written before #47 (no used_gpumem_mb) opens, gains the column and keeps its jobs."""
    from harpd.records import JobRecord
    from harpd.store import SCHEMA_VERSION, Store

    p = tmp_path / "h.db"
    with Store.open(p) as s:
        s.insert_jobs([JobRecord(job_id="1", outcome=Outcome.COMPLETED, used_mem_mb=10.0)])
        s.db.execute("ALTER TABLE jobs DROP COLUMN used_gpumem_mb")
        s.set_meta("schema_version", SCHEMA_VERSION - 1)
    with Store.open(p) as s:
        assert s.get_meta("schema_version") == SCHEMA_VERSION and "used_gpumem_mb" in s.db["jobs"].columns_dict
        assert s.get_job("1").used_mem_mb == 10.0 and s.get_job("1").used_gpumem_mb is None
        s.insert_jobs([JobRecord(job_id="2", outcome=Outcome.COMPLETED, used_gpumem_mb=14486.0)])
        assert s.get_job("2").used_gpumem_mb == 14486.0
