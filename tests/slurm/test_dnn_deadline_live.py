"""A ``#HARP dnn ... deadline=`` job through harp-submit and the real harpd, on the local Slurm.

The local cluster has one node with four fake ``a100`` GPUs in partition
``gpu``.  The site config gives them 80 GiB, so GPT-2 medium fits on one; the
deadline is set (from harp's own scaling model) between the predicted times
on two and three GPUs, so the cheapest configuration that meets it is three
GPUs, and harpd must rewrite the job to ``gpu:a100:3`` and say the plan in
``--harp-explain``.  A deadline no configuration meets leaves the job as
submitted, with one line saying why.  Slurm has no ``TRESBillingWeights`` here,
so the live weights read are empty and the config's weight is used.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harpd.config import HarpSettings
from harpd.dnn.scaling import ScalingModel
from harpd.slurm import get_backend
from harpd.slurm.billing import billing_weights
from tests.helpers.harpd_process import running_harpd
from tests.helpers.processes import run_harp_submit, short_tmpdir

pytestmark = pytest.mark.slurm

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"
TOKENS = 2e9

SCRIPT = """#!/bin/bash
#SBATCH --time=2
#SBATCH --partition=short
#SBATCH --gres=gpu:1
#SBATCH --job-name=harp-dnn-deadline
#HARP dnn config=config.json seq_len=256 micro_batch=1 attention=flash zero=auto tokens={tokens} deadline={deadline}
echo "partition=$SLURM_JOB_PARTITION gpus=$CUDA_VISIBLE_DEVICES"
"""

GPU_TOML = """
[dnn]
[[dnn.gpu_types]]
name = "a100"
memory_gb = 80
gpus_per_node = 4
billing_weight = 1.0
partition = "gpu"
"""


def _deadline_between_two_and_three_gpus() -> int:
    import json

    from harpd.dnn.params import shape_from_config

    shape = shape_from_config(json.loads((HF / "gpt2-medium.json").read_text()))
    m = ScalingModel(params=shape.params, seq_len=256, micro_batch=1, tokens=TOKENS)
    t2, t3 = (m.run_time("a100", n, 1, 0) for n in (2, 3))
    assert t3 < t2
    return int((t2 + t3) / 2)


@pytest.fixture(scope="module")
def job_dir(slurm_cluster):
    d = slurm_cluster.workdir / "dnn-deadline"
    d.mkdir(exist_ok=True)
    d.chmod(0o1777)
    shutil.copy(HF / "gpt2-medium.json", d / "config.json")
    return d


def test_live_billing_weights_are_read(slurm_cluster):
    weights = billing_weights(get_backend(HarpSettings()))
    assert set(weights) >= {"gpu", "short"} and weights["gpu"] == {}


def test_deadline_job_gets_the_cheapest_count_that_meets_it(slurm_cluster, job_dir):
    deadline = _deadline_between_two_and_three_gpus()
    (job_dir / "deadline.sh").write_text(SCRIPT.format(tokens=f"{TOKENS:g}", deadline=f"{deadline}s"))
    with short_tmpdir("hdl-") as d, running_harpd(d, slurm_conf=slurm_cluster.conf, extra_toml=GPU_TOML) as sock:
        proc = run_harp_submit(
            slurm_cluster, "--parsable", "--harp-explain", "deadline.sh", socket_path=sock, cwd=job_dir
        )
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip().split(";")[0]
    assert job_id.isdigit(), proc.stdout
    plan_lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("harp: explain: dnn_plan:")]
    assert len(plan_lines) == 1 and "deadline plan: 3 x a100" in plan_lines[0], proc.stderr
    assert "billed GPU-hours" in plan_lines[0]
    assert slurm_cluster.wait_job(job_id, timeout=120) == "COMPLETED"
    job = slurm_cluster.scontrol("show", "job", "-o", job_id)
    assert slurm_cluster.tres_per_node("gpu:a100:3") in job.split() and "Partition=gpu" in job.split()
    out = (job_dir / f"slurm-{job_id}.out").read_text().strip()
    assert out == "partition=gpu gpus=0,1,2"


def test_infeasible_deadline_leaves_the_job_as_submitted(slurm_cluster, job_dir):
    (job_dir / "late.sh").write_text(SCRIPT.format(tokens="2e12", deadline="1h"))
    with short_tmpdir("hdl-") as d, running_harpd(d, slurm_conf=slurm_cluster.conf, extra_toml=GPU_TOML) as sock:
        proc = run_harp_submit(slurm_cluster, "-H", "late.sh", socket_path=sock, cwd=job_dir)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.split()[-1]
    try:
        lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("harp:")]
        assert len(lines) == 1 and "DNN job left unchanged: deadline 1.00h cannot be met" in lines[0], proc.stderr
        job = slurm_cluster.scontrol("show", "job", "-o", job_id)
        assert "Partition=short" in job and slurm_cluster.tres_per_node("gpu:1") in job.split()
    finally:
        slurm_cluster.run(["scancel", job_id], check=False)


SEARCH = """#!/bin/bash
#SBATCH --time=2
#SBATCH --partition=short
#SBATCH --gres=gpu:1
#SBATCH --array=0-0
#SBATCH --job-name=harp-dnn-sha
#HARP dnn config=config.json seq_len=256 micro_batch=1 attention=flash zero=auto tokens=2e9 trials=9 eta=3 stage=2 deadline={deadline}
echo "task=$SLURM_ARRAY_TASK_ID partition=$SLURM_JOB_PARTITION gpus=$CUDA_VISIBLE_DEVICES"
"""


def test_search_stage_array_gets_its_stage_plan(slurm_cluster, job_dir, tmp_path, monkeypatch, capsys):
    """The last stage of a 9-trial, eta-3 search (one trial, an array of one) runs with that stage's GPUs.

    The deadline is tighter than the cheapest plan's time, so the plan gives
    the last (longest) stage more GPUs than the first: per-stage plans differ.
    """
    from harpd.cli.main import main
    from harpd.dnn.plan import plan_dnn_job
    from harpd.slurm.billing import billing_weights as live_billing

    settings = HarpSettings.model_validate(
        {
            "dnn": {
                "gpu_types": [
                    {"name": "a100", "memory_gb": 80, "gpus_per_node": 4, "billing_weight": 1.0, "partition": "gpu"}
                ]
            }
        }
    )
    backend = get_backend(HarpSettings())
    loose = plan_dnn_job(
        [SEARCH.splitlines()[6].replace("deadline={deadline}", "")],
        {},
        str(job_dir),
        settings,
        partitions=backend.partitions(),
        billing=live_billing(backend),
    )
    assert loose.error is None, loose.error
    fastest = loose.explain["dnn"]["goals"]["predicted_time_h"] * 3600
    deadline = int(fastest * 0.8)  # tighter than the cheapest plan: later stages need more GPUs per trial
    script = SEARCH.format(deadline=f"{deadline}s")
    line = script.splitlines()[6]
    expected = plan_dnn_job(
        [line], {}, str(job_dir), settings, partitions=backend.partitions(), billing=live_billing(backend)
    )
    assert expected.error is None, expected.error
    stages = expected.explain["dnn"]["goals"]["stages"]
    stage2 = stages[2]
    assert stage2["trials"] == 1 and stage2["n_gpus"] > stages[0]["n_gpus"], stages
    # harp dnn plan --slurm prints the same plan from the live partitions
    conf = tmp_path / "harpd.toml"
    conf.write_text(GPU_TOML)
    monkeypatch.setenv("HARP_CONFIG", str(conf))
    assert main(["dnn", "plan", "--slurm", "--cwd", str(job_dir), *line.split()[2:]]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"harp dnn plan: search plan, stage 2 of 3: 1 trial(s) of {stage2['n_gpus']} x a100"), out
    (job_dir / "search.sh").write_text(script)
    with short_tmpdir("hdl-") as d, running_harpd(d, slurm_conf=slurm_cluster.conf, extra_toml=GPU_TOML) as sock:
        proc = run_harp_submit(slurm_cluster, "--parsable", "search.sh", socket_path=sock, cwd=job_dir)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip().split(";")[0]
    assert job_id.isdigit(), proc.stdout
    assert slurm_cluster.wait_job(job_id, timeout=180) == "COMPLETED"
    job = slurm_cluster.scontrol("show", "job", "-o", job_id)
    assert slurm_cluster.tres_per_node(f"gpu:a100:{stage2['gpus_per_node']}") in job.split(), job
