"""Cores lowered for real: a 4-CPU job whose program used one core gets fewer CPUs and runs;
its input size (part 2) reaches --harp-explain."""

from __future__ import annotations

import pytest

from tests.helpers.harpd_process import running_harpd
from tests.helpers.processes import run_harp_submit, short_tmpdir
from tests.helpers.seed_history import script_signature, seed_runs
from tests.helpers.slurm_jobs import scontrol_fields, wait_finished

pytestmark = pytest.mark.slurm

SCRIPT = "#!/bin/bash\n#SBATCH -p short -t 5 -c 4 {extra}\nwc -c input.bin\npython3 -c 'print(20)'\n"


def _seed(store_path, signature: str | None) -> None:
    """25 earlier runs that held 4 CPUs and kept one busy (TotalCPU = Elapsed), using 380 of 400 MiB."""
    seed_runs(
        store_path,
        signature,
        25,
        used_time_s=60.0,
        job_name="cores.sh",
        used_cpu_s=60.0,
        req_time_s=300.0,
        req_cpus=4,
        alloc_cpus=4,
        req_mem_mb=400.0,
        used_mem_mb=380.0,
    )


@pytest.fixture
def harpd_with_history(slurm_cluster):
    with short_tmpdir("hcl-") as d:
        (d / "lib").mkdir()
        _seed(d / "lib" / "harp.db", script_signature(SCRIPT.format(extra="--mem-per-cpu=100M"), "cores.sh"))
        with running_harpd(
            d, slurm_conf=slurm_cluster.conf, extra_toml="[watch]\nsoft_limits = false\n", timeout_s=90
        ) as sock:
            yield sock


def _submit(cluster, sock: str, name: str, extra: str) -> tuple[str, str]:
    (cluster.workdir / name).write_text(SCRIPT.format(extra=extra))
    (cluster.workdir / "input.bin").write_bytes(b"\0" * 4096)  # the input harp-submit sizes
    # a generous answer time: the first decision on a busy machine loads the history
    proc = run_harp_submit(
        cluster,
        "--parsable",
        "--harp-explain",
        "-o",
        f"{name}-%j.out",
        name,
        socket_path=sock,
        env={"HARP_TIMEOUT": "30"},
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0], proc.stderr


def test_cpus_per_task_lowered_memory_kept_as_a_total_and_the_job_runs(slurm_cluster, harpd_with_history) -> None:
    sock = harpd_with_history
    job, err = _submit(slurm_cluster, sock, "cores.sh", "--mem-per-cpu=100M")
    try:
        info = scontrol_fields(slurm_cluster, job)
        assert info["CPUs/Task"] == "1" and info["NumCPUs"] == "1", (err, info)
        assert info.get("MinMemoryNode") == "400M" and "MinMemoryCPU" not in info, (err, info)
        # --harp-explain says why: the program's own runs, and the memory turned into a total
        assert "'option': 'cpus-per-task', 'value': '1'" in err.replace('"', "'") or "cpus-per-task" in err, err
        assert "harp: explain: cores:" in err and "n_history" in err, err
        assert "harp: explain: input_bytes: 4096" in err, err
        assert wait_finished(slurm_cluster, job) == "COMPLETED"
        assert (slurm_cluster.workdir / f"cores.sh-{job}.out").read_text().strip().endswith("20")
    finally:
        slurm_cluster.run(["scancel", job], check=False)


def test_several_tasks_keep_their_cpus(slurm_cluster, harpd_with_history) -> None:
    job, err = _submit(slurm_cluster, harpd_with_history, "mpi.sh", "--mem-per-cpu=100M --ntasks=2")
    try:
        info = scontrol_fields(slurm_cluster, job)
        assert info["CPUs/Task"] == "4", (err, info)
        assert "MinMemoryCPU" in info, (err, info)  # memory stays per CPU (the memory rule may size it)
        assert "MPI ranks keep their cores" in err, err  # the same program: kept because of --ntasks
    finally:
        slurm_cluster.run(["scancel", job], check=False)
