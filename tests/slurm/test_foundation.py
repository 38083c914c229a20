"""The local cluster behaves the way harp's outcome logic assumes.

These are the facts in ../shared/notes/slurm-22.05.md, re-checked on every CI
run: if a Slurm or config change moves them (an OOM kill reported differently,
GPUs not accounted), harp's classifier and recovery would be wrong, and this is
where it shows first.  All jobs are submitted together in one module fixture
so the slow TIMEOUT job (about 1-2 min) overlaps with the others.
"""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.slurm

_MIB_PER_UNIT = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def mib(value: str) -> float:
    """sacct memory ('341380K', '100M', '1.50G', '100Mn') in MiB; bare numbers are bytes."""
    m = re.fullmatch(r"([0-9.]+)([KMGT]?)[nc]?", value.strip())
    assert m, f"not a sacct memory value: {value!r}"
    number, unit = float(m.group(1)), m.group(2)
    return number * _MIB_PER_UNIT[unit] if unit else number / (1 << 20)


@pytest.fixture(scope="module")
def jobs(slurm_cluster):
    c = slurm_cluster
    ids = {
        "timeout": c.sbatch("--time=1", "--job-name=harp-timeout", script="sleep 600\n"),
        "ok": c.sbatch("--job-name=harp-ok", "--time=2", script="echo hello from $SLURM_JOB_ID\n"),
        "oom": c.sbatch(
            "--mem=100M",
            "--time=2",
            "--job-name=harp-oom",
            # Fill 300 MiB for real (a zeroed bytearray would not be resident).
            script="python3 -c \"s = b'x' * (300 << 20); import time; time.sleep(15)\"\n",
        ),
        "gpu": c.sbatch(
            "-p",
            "gpu",
            "--gres=gpu:a100:2",
            "--time=2",
            "--job-name=harp-gpu",
            script="echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES\n",
        ),
        "nobody": c.sbatch("--time=2", "--job-name=harp-user", script="id -un\n", user="nobody"),
    }
    return ids


def test_job_completes_and_is_accounted(slurm_cluster, jobs):
    c = slurm_cluster
    job = jobs["ok"]
    assert c.wait_job(job, timeout=180) == "COMPLETED"
    row = c.sacct(job, "JobID,State,ExitCode,Partition,Cluster", steps=False)[0]
    assert row == {"JobID": job, "State": "COMPLETED", "ExitCode": "0:0", "Partition": "short", "Cluster": "harptest"}
    out = (c.workdir / f"slurm-{job}.out").read_text()
    assert out.strip() == f"hello from {job}"


def test_job_of_another_user_runs_as_that_user(slurm_cluster, jobs):
    c = slurm_cluster
    job = jobs["nobody"]
    assert c.wait_job(job, timeout=180) == "COMPLETED"
    assert c.sacct(job, "User", steps=False)[0]["User"] == "nobody"
    assert (c.workdir / f"slurm-{job}.out").read_text().strip() == "nobody"


def test_memory_hog_is_killed_and_shows_failed_0_9(slurm_cluster, jobs):
    c = slurm_cluster
    job = jobs["oom"]
    assert c.wait_job(job, timeout=180) == "FAILED"
    rows = c.sacct(job, "JobID,State,ExitCode,ReqMem,MaxRSS")
    top = rows[0]
    assert top["ExitCode"] == "0:9"
    assert mib(top["ReqMem"]) == 100
    batch = next(r for r in rows if r["JobID"] == f"{job}.batch")
    assert batch["State"].startswith("CANCELLED")
    # The step's peak exceeded what it asked for: that is how an OOM kill
    # without cgroups is recognised (and the peak is only a lower bound).
    assert mib(batch["MaxRSS"]) > 100, batch


def test_time_limit_ends_as_timeout(slurm_cluster, jobs):
    c = slurm_cluster
    job = jobs["timeout"]
    assert c.wait_job(job, timeout=300) == "TIMEOUT"
    row = c.sacct(job, "JobID,State,Timelimit,ElapsedRaw", steps=False)[0]
    assert row["Timelimit"] == "00:01:00"
    assert 60 <= int(row["ElapsedRaw"]) < 180


def test_gpu_job_gets_and_accounts_two_gpus(slurm_cluster, jobs):
    c = slurm_cluster
    job = jobs["gpu"]
    assert c.wait_job(job, timeout=180) == "COMPLETED"
    row = c.sacct(job, "JobID,Partition,AllocTRES", steps=False)[0]
    assert row["Partition"] == "gpu"
    tres = dict(item.split("=", 1) for item in row["AllocTRES"].split(","))
    assert tres.get("gres/gpu") == "2", row["AllocTRES"]
    out = (c.workdir / f"slurm-{job}.out").read_text().strip()
    assert out == "CUDA_VISIBLE_DEVICES=0,1"


def test_partitions_and_limits_are_as_documented(slurm_cluster):
    c = slurm_cluster
    out = c.run(["sinfo", "-h", "-o", "%R %l %a"]).stdout.split("\n")
    got = {line.split()[0].rstrip("*"): line.split()[1] for line in out if line}
    assert got == {"short": "1:00:00", "long": "1-00:00:00", "tiny": "3:00", "gpu": "1:00:00"}
    # A request over a partition's MaxTime is refused at submit, not left pending.
    proc = c.run(["sbatch", "-p", "tiny", "--time=4", "--wrap=true"], check=False)
    assert proc.returncode != 0
    assert "time limit" in proc.stderr.lower()
