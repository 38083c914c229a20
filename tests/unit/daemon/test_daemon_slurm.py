"""harpd against the real local Slurm: owners verified by scontrol, limits from partitions."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from daemon_helpers import as_nobody, call

from tests.helpers.harpd_process import stop_harpd, wait_for_health

pytestmark = pytest.mark.slurm


@pytest.fixture
def harpd(slurm_cluster, short_dir):
    cfg = short_dir / "harpd.toml"
    cfg.write_text(
        f'[server]\nsocket = "{short_dir}/harpd.sock"\n[store]\npath = "{short_dir}/lib/harp.db"\n'
        "[ingest]\npoll_interval_s = 3600\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARP_")}
    env["SLURM_CONF"] = str(slurm_cluster.conf)
    proc = subprocess.Popen(
        [sys.executable, "-m", "harpd.daemon.main", "--config", str(cfg)], stderr=subprocess.PIPE, text=True, env=env
    )
    sock = f"{short_dir}/harpd.sock"
    wait_for_health(sock, proc)
    yield sock
    assert stop_harpd(proc) == 0


def test_register_checks_the_owner_with_slurm(slurm_cluster, harpd):
    roots = slurm_cluster.sbatch("--hold", "--wrap=true", "-t", "1")
    theirs = slurm_cluster.sbatch("--hold", "--wrap=true", "-t", "1", user="nobody")
    try:
        reg = lambda jid: {"op": "register", "job_id": jid, "job": {}, "original": {}, "submitted": {}}  # noqa: E731
        out = as_nobody(
            lambda: {
                "root_job": call(harpd, reg(roots)),
                "own_job": call(harpd, reg(theirs)),
                "status": call(harpd, {"op": "status", "job_id": theirs}),
            }
        )
        assert out["root_job"]["ok"] is False and "not yours" in out["root_job"]["error"]
        assert out["own_job"] == {"ok": True}
        assert out["status"]["job"]["uid"] == 65534
        # root registering a user's job records the owner Slurm reports, not root
        assert call(harpd, reg(theirs)) == {"ok": True}
        assert call(harpd, {"op": "status", "job_id": theirs})["job"]["user"] == "nobody"
    finally:
        slurm_cluster.run(["scancel", roots, theirs], check=False)


def test_predict_reports_the_real_partition_limits(slurm_cluster, harpd):
    ans = call(harpd, {"op": "predict", "job": {"partition": "short", "request": {"time_s": 600}}})
    limits = ans["decision"]["limits"]
    assert limits["partition"] == "short"
    assert limits["max_time_s"] == slurm_cluster.partitions["short"] * 60
    default = call(harpd, {"op": "predict", "job": {}})["decision"]["limits"]
    assert default["partition"] == slurm_cluster.default_partition
