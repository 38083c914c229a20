"""A DNN job that ran out of GPU memory, resubmitted one configuration larger on the real local Slurm (#47).

What is real: the job (sbatch into partition ``gpu`` on the cluster's fake
GPUs, ``--gres=gpu:a100:1`` as harp planned it), its FAILED end (exit 1, as a
CUDA out-of-memory ends a PyTorch job), slurmctld, slurmdbd, ``sacct`` as
harpd's backend runs it, harpd's ingest poll with recovery listening and the
daemon's DNN planner injected, the resubmission (``scontrol write
batch_script``, ``sacct --env-vars``, ``sbatch``) and the second run, which
prints what it was given.  What is placed: the GPU memory peak, 95% of the
80 GiB GPU, in the failed job's batch step in slurmdbd's database
(tests/fixtures/sacct/place-gpumem.sh), since the fake GPUs measure nothing.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from harpd.config import DnnSettings, GpuType, HarpSettings
from harpd.dnn.oom_escalation import OomPlanner
from harpd.dnn.plan import plan_dnn_job
from harpd.ingest.poller import Ingestor
from harpd.protocol import Decision, Resources
from harpd.recovery.machine import Recovery
from harpd.slurm.cli_backend import CliBackend
from harpd.store import Store
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.slurm

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sacct"
LINE = "#HARP dnn params=1.5e9 layers=48 hidden=1600 heads=25 seq_len=1024 micro_batch=8 attention=flash zero=auto"
# the first run has no stage from harp and fails as a CUDA out-of-memory does (exit 1); the resubmission says
# what it was given and completes
SCRIPT = (
    f"#!/bin/bash\n{LINE}\n"
    'echo "zero=${HARP_DNN_ZERO:-none} gpus=${HARP_DNN_GPUS:-none} on_node=${SLURM_GPUS_ON_NODE:-none}"\n'
    '[ -n "$HARP_DNN_ZERO" ]\n'
)


def _settings() -> HarpSettings:
    a100 = GpuType(name="a100", memory_gb=80, gpus_per_node=4, billing_weight=1.0, partition="gpu")
    return HarpSettings(dnn=DnnSettings(gpu_types=[a100]), recovery={"mode": "resubmit"}, ingest={"poll_interval_s": 2})


def test_a_gpu_out_of_memory_is_resubmitted_on_more_gpus_with_a_higher_stage(slurm_cluster, tmp_path):
    c = slurm_cluster
    settings = _settings()
    backend = CliBackend(settings)
    first = plan_dnn_job([LINE], {}, str(tmp_path), settings, partitions=backend.partitions())
    chosen = first.explain["dnn"]["chosen"]
    assert first.error is None and (chosen["n_gpus"], chosen["zero"]) == (1, 0)
    argv = [
        "--partition=gpu",
        "--gres=gpu:a100:1",
        "--nodes=1",
        "--ntasks-per-node=1",
        "--time=2",
        "--mem=100M",
        "--job-name=gpu-oom-live",
        f"--output={tmp_path}/out-%j.txt",
    ]
    jid = c.sbatch(*argv, script=SCRIPT, cwd=tmp_path)
    store = Store.open(tmp_path / "harp.db")
    job = {"cwd": str(tmp_path), "job_name": "gpu-oom-live", "harp_lines": [LINE], "argv": argv, "sbatch_env": {}}
    decision = {
        "changes": [c.model_dump() for c in first.changes],
        "limits": {},
        "model": "zero-dnn",
        "explain": first.explain,
    }
    res = {"time_s": 120, "mem_mb": 100, "partition": "gpu", "gres": "gpu:a100:1"}
    store.add_submission(
        jid,
        0,
        "root",
        job,
        Resources(time_s=120, mem_mb=100),
        Resources.model_validate(res),
        (None if decision is None else Decision.model_validate(decision)),
    )
    assert c.wait_job(jid, timeout=240) == "FAILED"
    peak = int(0.95 * chosen["capacity_gib"] * 2**30)  # one GPU: the step's figure is the GPU's
    env = dict(os.environ, HARP_SLURM_DIR=str(c.dir))
    placed = subprocess.run(
        ["bash", str(FIXTURES / "place-gpumem.sh"), jid, str(peak), "99"], env=env, capture_output=True, text=True
    )
    assert placed.returncode == 0, placed.stderr

    ing = Ingestor(store, backend, settings)
    recovery = Recovery(
        store, backend, settings, watch=ing.watch, gpu_planner=OomPlanner(store, settings, backend.partitions)
    )
    ing.on_outcome.append(recovery.on_outcome)
    # a run shorter than one accounting sample has no MaxRSS: the poller stores it once its end is 10 s old
    wait_for("harpd's poll to store the failed run", lambda: ing.poll_once() or None, timeout=120, interval=1)
    rows = store.attempts(jid)
    assert [(r.attempt, r.step) for r in rows] == [(1, "done"), (2, "submitted")], [r.limits for r in rows]
    second = rows[1]
    assert second.reason.startswith("ran out of GPU memory on 1 x a100 (80 GiB), ZeRO 0; next: 2 x a100 (80 GiB)")
    new = str(second.job_id)
    assert new != jid and c.wait_job(new, timeout=240) == "COMPLETED"
    (top,) = [r for r in c.sacct(new, "JobID,AllocTRES,Comment", steps=False) if r["JobID"] == new]
    assert "gres/gpu=2" in top["AllocTRES"] and top["Comment"] == f"harp retry 2 of {jid}"
    out = wait_for("the second run's output", lambda: (tmp_path / f"out-{new}.txt").read_text().strip() or None)
    zero = second.limits["gpu"]["to"]["zero"]
    assert zero >= 1 and out == f"zero={zero} gpus=2 on_node=2"
    # the resubmission's own registration carries its configuration: its outcome is learnt in turn
    assert store.get_submission(new).stored["decision"]["explain"]["dnn"]["chosen"]["n_gpus"] == 2
    store.close()
