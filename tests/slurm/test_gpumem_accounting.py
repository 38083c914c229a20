"""GPU memory accounting on the real local Slurm: a recorded gres/gpumem peak into the next plan (#47).

What is real here: the job (sbatch into partition ``gpu``, ``--gres=gpu:a100:2``
on the cluster's fake GPUs), slurmctld, slurmdbd and its MariaDB, ``sacct
--json`` and ``sacct -P`` (TRESUsageInMax) as harpd's backend runs them,
harpd's ingest poll (classification, the store), the plan of the job's next
run and ``harp status``'s answer.

What is recorded: the peak itself.  The fake GPUs are links to /dev/null and
Slurm has no NVML to ask, so it measures no GPU usage; the value from the
``fx-gpumem`` fixture (tests/fixtures/sacct/26.05-gpumem.json: 14486 MiB per
GPU on two GPUs, NVML's memory in use for GPT-2 s1024 b8 SDPA measured on an
H200) is placed in the job's batch step in slurmdbd's database by
tests/fixtures/sacct/place-gpumem.sh, where slurmstepd would have put it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from harpd.config import DnnSettings, GpuType, HarpSettings
from harpd.dnn.observed import observations_from_store
from harpd.dnn.plan import plan_dnn_job
from harpd.ingest.poller import Ingestor
from harpd.protocol import Decision, Resources
from harpd.report.job_status import job_status
from harpd.slurm.cli_backend import CliBackend
from harpd.store import Store

pytestmark = pytest.mark.slurm

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sacct"
HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"
# the measured setup, data-parallel on two GPUs: each rank holds what the one-GPU run held
LINE = "#HARP dnn config=gpt2.json seq_len=1024 micro_batch=8 attention=sdpa gpus=2 zero=0"


def _recorded_peak_bytes() -> int:
    doc = json.loads((FIXTURES / "26.05-gpumem.json").read_text())
    job = next(j for j in doc["jobs"] if j["name"] == "fx-gpumem")
    step = next(s for s in job["steps"] if str(s["step"]["id"]).endswith("batch"))
    return int(next(t["count"] for t in step["tres"]["requested"]["max"] if t.get("name") == "gpumem"))


def _settings() -> HarpSettings:
    a100 = GpuType(name="a100", memory_gb=80, gpus_per_node=4, billing_weight=1.0, partition="gpu")
    return HarpSettings(dnn=DnnSettings(gpu_types=[a100]))


def test_recorded_gpumem_through_real_sacct_into_the_next_plan(slurm_cluster, tmp_path):
    c = slurm_cluster
    settings = _settings()
    first = plan_dnn_job([LINE], {}, str(HF), settings)
    assert first.error is None and first.explain["dnn"]["chosen"]["n_gpus"] == 2
    assert first.explain["dnn"]["chosen"]["need_source"] == "formula"
    jid = c.sbatch(
        "-p", "gpu", "--gres=gpu:a100:2", "--time=2", "--mem=100M", "--job-name=gpumem-real", script="sleep 2\n"
    )
    store = Store.open(tmp_path / "harp.db")
    decision = Decision(changes=list(first.changes), explain=first.explain, model="zero-dnn")
    store.add_submission(jid, 0, "root", {"harp_lines": [LINE]}, Resources(), Resources(gres="gpu:a100:2"), decision)
    assert c.wait_job(jid, timeout=240) == "COMPLETED"

    peak = _recorded_peak_bytes()
    env = dict(os.environ, HARP_SLURM_DIR=str(c.dir))
    placed = subprocess.run(
        ["bash", str(FIXTURES / "place-gpumem.sh"), jid, str(peak), "97"], env=env, capture_output=True, text=True
    )
    assert placed.returncode == 0, placed.stderr
    per_gpu_mb = peak / 2 / 2**20
    assert per_gpu_mb == 14486

    # both of harpd's readers of the real sacct: JSON, and -P where sacct has no JSON
    (json_rec,) = [r for r in CliBackend(settings).sacct_jobs([jid], None, None, True) if r.job_id == jid]
    text_backend = CliBackend(settings)
    text_backend._json_ok = False  # as after a sacct without JSON
    (text_rec,) = [r for r in text_backend.sacct_jobs([jid], None, None, True) if r.job_id == jid]
    assert json_rec.used_gpumem_mb == text_rec.used_gpumem_mb == per_gpu_mb

    # harpd's ingest stores it; the next job of the same setup is planned from it
    assert Ingestor(store, CliBackend(settings), settings).poll_once() >= 1
    assert store.get_job(jid).used_gpumem_mb == per_gpu_mb
    again = plan_dnn_job([LINE], {}, str(HF), settings, observed=lambda sig: observations_from_store(store, 0, sig))
    chosen = again.explain["dnn"]["chosen"]
    estimate, observed = first.explain["dnn"]["chosen"]["need_gib"], per_gpu_mb / 1024 * 1.1  # the 10% margin
    # the larger of the two; harp's corrected model is above this measurement, so the formula's need stays
    assert chosen["need_gib"] == pytest.approx(max(estimate, observed), abs=0.01)
    assert chosen["need_source"] == (
        "observed peak of 1 run(s)" if observed >= estimate else "formula, above the observed peak of 1 run(s)"
    )

    view = job_status(store, jid, admin=True, uid=0, user="", cluster=settings.slurm.cluster).gpu_memory
    assert view["observed_gib"] == 14.15 and view["estimate_gib"] == first.explain["dnn"]["chosen"]["need_gib"]
    store.close()
