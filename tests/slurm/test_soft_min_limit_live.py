"""The smallest soft limit leaves the watcher room: a short job is not extended at harpd's first look.

Seen on a real cluster before: under soft limits harp gave 1-minute limits
while its watcher extends a job when 120 s are left and looks every 30 s,
so nearly every such job was extended at the first look, whatever it did:
a plan the scheduler got wrong every time.  Here harpd (root, so soft
limits) looks every 40 s and extends 150 s before a limit: the smallest limit
it may set is lead + interval in whole minutes.  A program whose
25 earlier runs took 50 s is given 4 minutes, not 1, runs its 50 s through
the watcher's looks and completes on its first run, never extended.
"""

from __future__ import annotations

import pytest

from harp_submit import client
from tests.helpers.harpd_process import running_harpd
from tests.helpers.processes import run_harp_submit, short_tmpdir
from tests.helpers.seed_history import script_signature, seed_runs
from tests.helpers.slurm_jobs import scontrol_fields, wait_finished

pytestmark = pytest.mark.slurm

INTERVAL_S, LEAD_S = 40, 150  # not the defaults (30 s, 120 s), whose smallest limit is 3 minutes
MIN_LIMIT = "00:04:00"  # ceil((150 + 40) / 60) minutes
SCRIPT = "#!/bin/bash\n#SBATCH -p short -t 30 --mem=100M\nsleep 50\necho done\n"
WATCH = f"[watch]\nsoft_limits = true\ninterval_s = {INTERVAL_S}\nmargin_s = {LEAD_S}\n"


def test_the_smallest_soft_limit_leaves_the_watcher_its_lead_and_interval(slurm_cluster) -> None:
    with short_tmpdir("hsm-") as d:
        (d / "lib").mkdir()
        # 25 earlier runs of the program: 50 s of a 30-minute request each, 80 of 100 MB
        seed_runs(
            d / "lib" / "harp.db",
            script_signature(SCRIPT, "short.sh"),
            25,
            used_time_s=50.0,
            gap_s=120.0,
            job_name="short.sh",
            used_cpu_s=50.0,
            req_time_s=1800.0,
            req_cpus=1,
            alloc_cpus=1,
            req_mem_mb=100.0,
            used_mem_mb=80.0,
        )
        with running_harpd(d, slurm_conf=slurm_cluster.conf, extra_toml=WATCH, timeout_s=90) as sock:
            health = client.call(sock, {"op": "health"}, 30.0)
            assert health["limits"]["mode"] == "soft", health  # root: the watcher extends, Slurm never kills
            assert health["limits"]["min_limit_s"] == 240, health
            (slurm_cluster.workdir / "short.sh").write_text(SCRIPT)
            proc = run_harp_submit(
                slurm_cluster,
                "--parsable",
                "--harp-explain",
                "-o",
                "short-%j.out",
                "short.sh",
                socket_path=sock,
                env={"HARP_TIMEOUT": "30"},
            )
            assert proc.returncode == 0, proc.stderr
            job = proc.stdout.strip().split(";")[0]
            try:
                info = scontrol_fields(slurm_cluster, job)
                # shortened from the 30 minutes asked, but to no less than the watcher can honour
                assert info["TimeLimit"] == MIN_LIMIT, (proc.stderr, info)
                assert wait_finished(slurm_cluster, job) == "COMPLETED"
                status = client.call(sock, {"op": "status", "job_id": job}, 30.0)["job"]
                extended = [c for c in status.get("limit_changes") or [] if c.get("kind") == "extend"]
                assert extended == [], status  # 50 s: every look came 150+ s before the limit: left alone
                assert scontrol_fields(slurm_cluster, job)["TimeLimit"] == MIN_LIMIT
                assert (slurm_cluster.workdir / f"short-{job}.out").read_text().strip() == "done"
            finally:
                slurm_cluster.run(["scancel", job], check=False)
