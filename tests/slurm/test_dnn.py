"""A DNN job is rewritten to the chosen GPUs and runs there, on the real local Slurm.

The local cluster has one node with four fake ``a100`` GPUs in partition
``gpu`` (scripts/localslurm).  The site config here gives that type 6.2 GiB per
GPU so GPT-2 medium needs two of them (ZeRO-2), and lists a second, cheaper
``h100`` type in a partition that does not exist: the plan must take Slurm's
word (``scontrol show partition/node``) over the config and not pick it.

The route tested: the script's ``#HARP dnn`` line -> ``plan_dnn_job`` -> the
changes applied (a) as plain sbatch options, (b) by harp-submit's own decision
check and script rewrite -> ``sbatch`` -> the job runs in ``gpu`` with
``gpu:a100:2`` allocated.  The socket round trip (harp-submit -> harpd) is the
lead's to add once both ends exist.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harpd.config import DnnSettings, GpuType, HarpSettings
from harpd.dnn.plan import plan_dnn_job
from harpd.dnn.site_check import check_gpu_types
from harpd.slurm import PartitionInfo, get_backend
from tests.helpers.harpd_process import running_harpd
from tests.helpers.processes import run_harp_submit, short_tmpdir

pytestmark = pytest.mark.slurm

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"

SCRIPT = """#!/bin/bash
#SBATCH --time=2
#SBATCH --partition=short
#SBATCH --gres=gpu:1
#SBATCH --job-name=harp-dnn
#HARP dnn config=config.json seq_len=256 micro_batch=1 attention=flash zero=auto  # GPT-2 medium
echo "partition=$SLURM_JOB_PARTITION tasks_per_node=$SLURM_NTASKS_PER_NODE gpus=$CUDA_VISIBLE_DEVICES"
"""


def settings() -> HarpSettings:
    return HarpSettings(
        dnn=DnnSettings(
            gpu_types=[
                GpuType(name="a100", memory_gb=6.2, gpus_per_node=4, billing_weight=1.0, partition="gpu"),
                GpuType(name="h100", memory_gb=80, gpus_per_node=4, billing_weight=1.0, partition="gpu-h100"),
            ]
        )
    )


def partitions(cluster) -> dict[str, PartitionInfo]:
    """The Slurm backend's view of the live cluster (scontrol show partition/node)."""
    return get_backend(HarpSettings()).partitions()


@pytest.fixture(scope="module")
def job_dir(slurm_cluster):
    d = slurm_cluster.workdir / "dnn"
    d.mkdir(exist_ok=True)
    d.chmod(0o1777)
    shutil.copy(HF / "gpt2-medium.json", d / "config.json")
    (d / "job.sh").write_text(SCRIPT)
    return d


@pytest.fixture(scope="module")
def plan(slurm_cluster, job_dir):
    from harp_submit.harp_lines import find

    lines = find(SCRIPT)
    assert lines == [SCRIPT.splitlines()[5]]
    request = {"partition": "short", "gres": "gpu:1", "time_s": 120}
    return plan_dnn_job(lines, request, str(job_dir), settings(), partitions=partitions(slurm_cluster))


def test_site_check_on_the_live_cluster(slurm_cluster):
    check = check_gpu_types(settings().dnn.gpu_types, partitions(slurm_cluster))
    assert check.max_nodes == {"a100": 1, "h100": 0}
    assert check.problems == [
        "[dnn] gpu type h100: partition 'gpu-h100' does not exist (Slurm has: gpu, long, short, tiny)"
    ]


def test_plan_chooses_two_a100_in_gpu(plan):
    assert plan.error is None
    got = {c.option: (c.value, c.old) for c in plan.changes}
    assert got == {
        "partition": ("gpu", "short"),
        "gres": ("gpu:a100:2", "gpu:1"),
        "nodes": ("1", None),
        "ntasks-per-node": ("2", None),
    }
    assert plan.explain["dnn"]["zero"] == 2
    # without Slurm's partitions the config alone would pick the (non-existent) h100
    blind = plan_dnn_job(
        ["#HARP dnn config=gpt2-medium.json seq_len=256 micro_batch=1 attention=flash zero=auto"],
        {},
        str(HF),
        settings(),
    )
    assert blind.explain["dnn"]["chosen"]["gpu_type"] == "h100"


def _check_ran_on_two_a100(cluster, job_id: str, workdir: Path) -> None:
    assert cluster.wait_job(job_id, timeout=120) == "COMPLETED"
    row = cluster.sacct(job_id, "JobID,Partition,AllocTRES,State", steps=False)[0]
    assert row["Partition"] == "gpu"
    assert "gres/gpu=2" in row["AllocTRES"].split(",")
    # accounting tracks untyped gres/gpu here; the controller still holds the type
    job = cluster.scontrol("show", "job", "-o", job_id)
    assert cluster.tres_per_node("gpu:a100:2") in job.split()
    out = (workdir / f"slurm-{job_id}.out").read_text().strip()
    assert out == "partition=gpu tasks_per_node=2 gpus=0,1"


def test_changes_as_plain_sbatch_options_run_in_gpu(slurm_cluster, plan, job_dir):
    opts = [f"--{c.option}={c.value}" for c in plan.changes]
    job = slurm_cluster.sbatch(*opts, "job.sh", cwd=job_dir)
    _check_ran_on_two_a100(slurm_cluster, job, job_dir)


def test_changes_through_harp_submit_rewrite_run_in_gpu(slurm_cluster, plan, job_dir):
    """harp-submit's own checks and script rewrite accept and apply the plan."""
    from harp_submit import directives, harp_lines, rewrite
    from harp_submit.decision import validate
    from harp_submit.request import Request
    from harp_submit.sbatch_options import SBATCH_TABLE

    req = Request(
        SBATCH_TABLE.parse([]),
        {},
        directives.parse(SCRIPT),
        script_path="job.sh",
        script_text=SCRIPT,
        harp_lines=harp_lines.find(SCRIPT),
    )
    answer = {
        "ok": True,
        "decision": {
            "changes": [c.model_dump() for c in plan.changes],
            "limits": {"partition": "gpu"},
            "model": "dnn",
            "explain": plan.explain,
        },
    }
    _, changes = validate(answer, req.resources())
    out = rewrite.apply(req, [], changes)
    text = out.script_text
    assert "#SBATCH --partition=gpu\n" in text and "#SBATCH --gres=gpu:a100:2\n" in text
    assert "--partition=short" not in text and "#HARP dnn" in text
    (job_dir / "job-rewritten.sh").write_text(text)
    job = slurm_cluster.sbatch("job-rewritten.sh", cwd=job_dir)
    _check_ran_on_two_a100(slurm_cluster, job, job_dir)


def test_harp_dnn_check_against_the_live_cluster(slurm_cluster, tmp_path, monkeypatch, capsys):
    from harpd.cli.main import main

    conf = tmp_path / "harpd.toml"
    conf.write_text('[dnn]\n[[dnn.gpu_types]]\nname = "a100"\nmemory_gb = 80\ngpus_per_node = 4\npartition = "gpu"\n')
    monkeypatch.setenv("HARP_CONFIG", str(conf))
    assert main(["dnn", "check"]) == 0
    assert capsys.readouterr().out.startswith("a100: partition gpu, up to 1 node(s) x 4 GPUs")
    conf.write_text(conf.read_text().replace("gpus_per_node = 4", "gpus_per_node = 8"))
    assert main(["dnn", "check"]) == 1
    assert (
        "problem: [dnn] gpu type a100: config says gpus_per_node=8 but partition 'gpu' nodes have gpu:a100:4"
    ) in capsys.readouterr().out


GPU_TOML = """
[dnn]
safety_margin = 0.10
[[dnn.gpu_types]]
name = "a100"
memory_gb = 6.2
gpus_per_node = 4
billing_weight = 1.0
partition = "gpu"
"""


def test_through_harp_submit_and_the_real_harpd(slurm_cluster, job_dir):
    """The whole route: #HARP dnn line -> harp-submit -> harpd (ZeRO plan) -> rewritten GRES -> gpu partition."""
    with short_tmpdir("hdn-") as d, running_harpd(d, slurm_conf=slurm_cluster.conf, extra_toml=GPU_TOML) as sock:
        proc = run_harp_submit(slurm_cluster, "--parsable", "job.sh", socket_path=sock, cwd=job_dir)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip().split(";")[0]
    assert job_id.isdigit(), proc.stdout
    _check_ran_on_two_a100(slurm_cluster, job_id, job_dir)


def test_when_nothing_fits_the_job_is_submitted_unchanged_with_one_line(slurm_cluster, job_dir):
    big = SCRIPT.replace("config=config.json", "params=70e9 layers=80 hidden=8192 heads=64").replace(
        "zero=auto", "zero=0"
    )
    (job_dir / "big.sh").write_text(big)
    with short_tmpdir("hdn-") as d, running_harpd(d, slurm_conf=slurm_cluster.conf, extra_toml=GPU_TOML) as sock:
        proc = run_harp_submit(slurm_cluster, "-H", "big.sh", socket_path=sock, cwd=job_dir)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.split()[-1]
    try:
        lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("harp:")]
        assert len(lines) == 1 and "DNN job left unchanged" in lines[0], proc.stderr
        job = slurm_cluster.scontrol("show", "job", "-o", job_id)
        assert "Partition=short" in job and slurm_cluster.tres_per_node("gpu:1") in job.split()
    finally:
        slurm_cluster.run(["scancel", job_id], check=False)
