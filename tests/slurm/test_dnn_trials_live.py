"""Convergence-aware trials against the real Slurm: nice of pending array tasks, SHA cancels.

A root harpd (privileged, so its watch runs) lists the queue every 2 s.
Trials are array tasks that call ``harp progress`` from inside the job (the
real CLI, over harpd's socket, the job id from Slurm's environment):

* two arrays of one owner, one task running at a time (``%1``), the first
  converging fast (loss 1.0 then 0.3), the second slowly (1.0 then 0.99):
  the slow array's pending tasks get Nice=1000 in slurmctld, the fast one's
  stay at 0, and ``harp status`` of a pending task says why;
* a study with ``stop=sha eta=2 rung=2s`` and two running tasks (losses 0.2
  and 0.6 at the rung): the worse one is cancelled, the better runs on.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from test_recovery import REPO, Daemon

from harp_submit import client
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.slurm

DEADLINE_S = 240


def script(conf: Path) -> str:
    harp = f"env PYTHONPATH={REPO} {sys.executable} -m harpd.cli.main --config {conf} progress"
    return (
        "#!/bin/bash\n"
        "# $1: the task's second loss per array task (space separated); $2: the study words (optional)\n"
        'V=$(echo "$1" | cut -d" " -f$((SLURM_ARRAY_TASK_ID + 1)))\n'
        '[ -n "$2" ] && export HARP_STUDY="$2"\n'
        f"{harp} --metric loss=1.0\n"
        "sleep 3\n"
        # then it reports its loss every few seconds, as a training loop does each epoch: the
        # rungs a slow (busy) machine pushes past still see both trials' values
        f"for i in $(seq 60); do {harp} --metric loss=$V; sleep 5; done\n"
        "sleep 600\n"
    )


@pytest.fixture(scope="module")
def trials(slurm_cluster):
    c = slurm_cluster
    base = Path(tempfile.mkdtemp(prefix="htr-", dir="/tmp"))
    base.chmod(0o755)
    d = Daemon("trials", base / "d", None, sys.executable, str(REPO), str(c.conf))
    d.dir.mkdir()
    d.write_config()
    with open(d.dir / "harpd.toml", "a") as fh:
        fh.write("[watch]\ninterval_s = 2.0\n")
    (base / "trial.sh").write_text(script(d.dir / "harpd.toml"))
    jobs: list[str] = []

    def sbatch(*args: str) -> str:
        out = c.run(
            [
                "sbatch",
                "--parsable",
                "--time=10",
                "--mem=50M",
                "-c",
                "1",
                "-p",
                "short",
                f"--output={base}/%A_%a.out",
                *args,
            ],
            cwd=base,
        ).stdout
        jid = out.strip().split(";")[0]
        assert jid.isdigit(), out
        jobs.append(jid)
        return jid

    try:
        d.start()
        yield c, d, sbatch
    finally:
        d.stop()
        if jobs:
            c.run(["scancel", *jobs], check=False)
        shutil.rmtree(base, ignore_errors=True)


def _pending_nice(c, jid: str) -> set[str]:
    out = c.run(["squeue", "-h", "-j", jid, "-t", "PD", "-r", "-o", "%y"], check=False).stdout
    return {ln.strip() for ln in out.splitlines() if ln.strip()}


def test_pending_tasks_of_the_slower_study_get_a_higher_nice(trials):
    c, d, sbatch = trials
    fast = sbatch("--array=0-2%1", str(Path(d.dir).parent / "trial.sh"), "0.3 0.3 0.3")
    slow = sbatch("--array=0-2%1", str(Path(d.dir).parent / "trial.sh"), "0.99 0.99 0.99")
    wait_for(
        "Nice=1000 on the slow array's pending tasks",
        lambda: _pending_nice(c, slow) == {"1000"},
        DEADLINE_S,
        interval=1,
        log=lambda: d.log_tail(60),
    )
    assert _pending_nice(c, fast) == {"0"}
    status = client.call(d.socket, {"op": "status", "job_id": f"{slow}_2"}, 10.0)
    assert status.get("ok"), status
    trial = status["job"]["trial"]
    assert trial["study"] == f"array-{slow}" and "nice 1000" in trial["action"]["reason"]
    assert "rank 2 of 2" in trial["action"]["reason"]
    c.run(["scancel", fast, slow], check=False)


def test_successive_halving_cancels_the_worse_running_trial(trials):
    c, d, sbatch = trials
    jid = sbatch(
        "--array=0-1", str(Path(d.dir).parent / "trial.sh"), "0.2 0.6", "study=sha-live stop=sha eta=2 rung=2s"
    )

    def states() -> dict[str, str]:
        out = c.run(["squeue", "-h", "-j", jid, "-r", "-o", "%i %T"], check=False).stdout
        return dict(ln.split() for ln in out.splitlines() if ln.strip())

    wait_for(
        "both trials running",
        lambda: set(states().values()) == {"RUNNING"} and len(states()) == 2,
        DEADLINE_S,
        interval=1,
        log=lambda: d.log_tail(60),
    )
    wait_for(
        "the worse trial cancelled",
        lambda: f"{jid}_1" not in states(),
        DEADLINE_S,
        interval=1,
        log=lambda: d.log_tail(60),
    )
    assert states().get(f"{jid}_0") == "RUNNING"
    status = client.call(d.socket, {"op": "status", "job_id": f"{jid}_1"}, 10.0)
    assert "successive halving" in status["job"]["trial"]["action"]["reason"]
    c.run(["scancel", jid], check=False)
