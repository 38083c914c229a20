"""The requeue race with a workflow manager, on the real cluster.

A Snakemake task that harp cut runs out of harp's limit (hard limits: soft
limits off, so nothing extends it) and ends TIMEOUT.  The manager, polling
sacct, sees it before harpd does and submits the task again itself (as
Snakemake's ``--retries`` does) through harp-submit.  When harpd then polls,
it must not requeue the old job: the work would run twice, once unseen.

The ordering is made certain, not left to timing: harpd polls sacct once at
its start and then only every 10 minutes, and is restarted after the
manager's retry is registered, so its first look at the TIMEOUT comes after it.  The
task is ``sleep`` behind a Snakemake-shaped command line (what the executor
plugin's ``--wrap`` looks like), so the test needs no Snakemake and waits
only for one TIMEOUT.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harp_submit import client
from harpd.features.workflow import job_signature
from harpd.records import JobRecord, Outcome
from harpd.store import Store
from tests.helpers.harpd_process import running_harpd
from tests.helpers.processes import run_harp_submit, short_tmpdir
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.slurm

HARD_LIMITS = "[watch]\nsoft_limits = false\n"


def _wrap(attempt: int) -> str:
    """A task of rule ``work`` (sample s1), as Snakemake's executor wraps it, that needs 90 s."""
    return (
        f"sleep 90; : python -m snakemake --snakefile Snakefile --target-jobs 'work:sample=s1' "
        f"--allowed-rules work --cores all --attempt {attempt} --mode remote"
    )


def _seed(store_path: Path, signature: str) -> None:
    """Five earlier runs of the rule that used 10 s of a 4-minute request: harp cuts the next to 1 minute."""
    now = time.time()
    with Store.open(store_path) as st:
        st.insert_jobs(
            [
                JobRecord(
                    job_id=f"seed{i}",
                    source="seed",
                    user="root",
                    account="harp",
                    partition="short",
                    signature=signature,
                    submit_time=now - 3600 + i * 60,
                    start_time=now - 3600 + i * 60,
                    end_time=now - 3590 + i * 60,
                    used_time_s=10.0,
                    req_time_s=240.0,
                    req_cpus=1,
                    req_mem_mb=200.0,
                    used_mem_mb=50.0,
                    outcome=Outcome.COMPLETED,
                )
                for i in range(5)
            ]
        )


def _submit(cluster, sock: str, attempt: int) -> str:
    proc = run_harp_submit(
        cluster,
        "--parsable",
        "-p",
        "short",
        "-t",
        "4",
        "--mem=200M",
        "-o",
        "race-%j.log",
        "--comment=rule_work_wildcards_s1",
        f"--wrap={_wrap(attempt)}",
        socket_path=sock,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0]


def _status(sock: str, job_id: str) -> dict:
    """harpd's status of a job; {} while harpd knows nothing of it yet."""
    try:
        return client.call(sock, {"op": "status", "job_id": job_id}, 10.0)["job"]
    except client.HarpdUnavailable as exc:
        if "knows no job" in str(exc):
            return {}
        raise


def test_the_managers_own_retry_is_left_to_it_and_the_work_runs_once(slurm_cluster) -> None:
    c = slurm_cluster
    with short_tmpdir("hwr-") as d:
        (d / "lib").mkdir()
        _seed(d / "lib" / "harp.db", job_signature([_wrap(1)], None, None, str(c.workdir)))
        with running_harpd(d, slurm_conf=c.conf, extra_toml=HARD_LIMITS, poll_interval_s=600) as sock:
            first = _submit(c, sock, 1)
            wait_for("registration", lambda: _status(sock, first).get("registered"), 30, interval=1)
            assert "TimeLimit=00:01:00" in c.scontrol("show", "job", first)  # harp cut 4 min to 1
            # harpd polled at its start, next in 10 minutes: the manager sees the TIMEOUT first ...
            assert c.wait_job(first, timeout=240) == "TIMEOUT"
            # ... and submits the task again through harp-submit, which registers it
            retry = _submit(c, sock, 2)
            wait_for("the retry's registration", lambda: _status(sock, retry).get("registered"), 30, interval=1)
            # harpd has not looked at the TIMEOUT yet
            assert not any(a.get("outcome") for a in _status(sock, first).get("attempts") or [])
        try:
            # harpd's first look at the TIMEOUT comes now, after the manager's retry
            with running_harpd(d, slurm_conf=c.conf, extra_toml=HARD_LIMITS, poll_interval_s=600) as sock:

                def stopped():
                    att = _status(sock, first).get("attempts") or []
                    return att and att[0]["outcome"] == "timeout" and att[-1]["limits"].get("stop")

                wait_for("harpd's decision on the TIMEOUT", stopped, 90, interval=1)
                att = _status(sock, first)["attempts"]
                assert len(att) == 1 and f"submitted it again itself (job {retry})" in att[0]["limits"]["stop"]
            # the work runs once: the old job was never requeued (the manager's retry is the only copy)
            runs = c.sacct(first, "JobID,State", steps=False, duplicates=True)
            assert [r["State"].split()[0] for r in runs if r["JobID"] == first] == ["TIMEOUT"]
            assert "Restarts=0" in c.scontrol("show", "job", first)
        finally:
            c.run(["scancel", retry], check=False)
