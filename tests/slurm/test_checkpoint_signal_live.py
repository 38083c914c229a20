"""A job's own ``--signal`` with ``--requeue`` makes it resumable (docs/dnn.md, COCI), on the real Slurm.

A root harpd under hard limits (``[watch] soft_limits = false``) and a real
``harp-submit`` of a script with ``#SBATCH --signal=B:USR1@40`` and
``#SBATCH --requeue`` (and ``#HARP retry``: harp did not shorten it, so the
script opts in to recovery).  harp-submit carries ``--requeue`` to harpd;
Slurm itself signals the batch shell 40 s before the job's limit (harpd sends
no second signal and records none); the trap writes a checkpoint (the step
reached) and the job runs into its limit (TIMEOUT).  harpd checks with
slurmctld that it will requeue the job (``Requeue=1``), requeues it in place
with the same limit, charged only the time since Slurm's signal; the second
run reads the checkpoint and completes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from test_checkpoint_live import HardDaemon
from test_recovery import REPO, RUN_SUBMIT

from tests.helpers.wait import wait_for

pytestmark = pytest.mark.slurm

DEADLINE_S = 12 * 60
LEAD_S = 40
STEPS = 130  # more one-second steps than the 2 minutes: the first run cannot finish; a resumed one can
SCRIPT = f"""#!/bin/bash
#SBATCH --signal=B:USR1@{LEAD_S}
#SBATCH --requeue
#SBATCH --open-mode=append
#HARP retry
ck="$PWD/ckpt-$SLURM_JOB_ID"
i=0
if [ -f "$ck" ]; then i=$(cat "$ck"); echo "resumed from checkpoint $i"; fi
trap 'echo "$i" > "$ck"; echo "checkpoint at $i"' USR1
while [ "$i" -lt {STEPS} ]; do sleep 1 & wait $!; i=$((i + 1)); done
echo "finished at $i"
"""


@pytest.fixture(scope="module")
def own_signal(slurm_cluster):
    c = slurm_cluster
    base = Path(tempfile.mkdtemp(prefix="hsg-", dir="/tmp"))
    base.chmod(0o755)
    wd = base / "work"
    wd.mkdir()
    (wd / "train.sh").write_text(SCRIPT)
    d = HardDaemon("own-signal", base / "d", None, sys.executable, str(REPO), str(c.conf))
    d.dir.mkdir()
    d.write_config()
    jobs: list[str] = []
    try:
        d.start()
        env = [
            f"SLURM_CONF={c.conf}",
            f"HARP_SOCKET={d.socket}",
            f"PYTHONPATH={d.pythonpath}",
            "HARP_CONFIG=/nonexistent/harpd.toml",
            f"PATH={os.environ.get('PATH', '/usr/bin:/bin')}",
        ]
        argv = ["env", "-i", *env, d.python, "-c", RUN_SUBMIT, "--parsable", "--time=2", "--mem=100M", "-p", "short"]
        argv += ["-o", str(wd / "train-%j.out"), str(wd / "train.sh")]
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=str(wd), stdin=subprocess.DEVNULL, timeout=120)
        assert proc.returncode == 0, f"harp-submit: {proc.stderr}"
        jid = proc.stdout.strip().split(";")[0]
        assert jid.isdigit(), proc.stdout
        jobs.append(jid)
        yield c, d, wd, jid
    finally:
        d.stop()
        live = c.run(["squeue", "-h", "-o", "%i"], check=False).stdout.split()
        left = [j for j in live if j in jobs]
        if left:
            c.run(["scancel", *left], check=False)
        shutil.rmtree(base, ignore_errors=True)


def test_own_signal_and_requeue_time_out_and_resume_with_the_same_limit(own_signal):
    c, d, wd, jid = own_signal
    out = wd / f"train-{jid}.out"

    def text() -> str:
        return out.read_text() if out.exists() else ""

    # harp-submit registered the job with its --signal lead and --requeue
    job = wait_for("the registration", lambda: d.status(jid).get("original") and d.status(jid), 120, interval=1)
    assert job["original"].get("signal_s") == LEAD_S and job["original"].get("requeue") is True, job["original"]
    limit = int(
        next(w for w in c.scontrol("show", "job", jid).split() if w.startswith("TimeLimit="))
        .split("=")[1]
        .split(":")[1]
    )
    assert limit >= 1, limit

    # Slurm's own signal fired the trap in the first run; harpd sent none
    wait_for("the checkpoint trap", lambda: "checkpoint at" in text(), DEADLINE_S, interval=2, log=d.log_tail)

    def completed() -> dict[str, Any] | None:
        job = d.status(jid)
        att = job.get("attempts") or []
        return job if att and att[-1]["step"] == "done" and att[-1]["outcome"] == "completed" else None

    job = wait_for("the resumed run completing", completed, DEADLINE_S, interval=2, log=d.log_tail)
    assert not [ch for ch in job.get("limit_changes") or [] if ch["kind"] == "checkpoint-signal"], job
    att = job["attempts"]
    # a machine slow enough to stretch each step may need a second resume; each keeps the limit
    outcomes = [(a["attempt"], a["outcome"]) for a in att]
    assert outcomes in ([(1, "timeout"), (2, "completed")], [(1, "timeout"), (2, "timeout"), (3, "completed")]), att
    for a in att[1:]:
        assert a["job_id"] == jid  # requeued in place: the same job, the same files
        assert a["limits"]["time_s"] == limit * 60, (limit, a)  # the same limit, not doubled
        assert "resumes from its checkpoint" in a["reason"] and "not doubled" in a["reason"], a
        # only the time since Slurm's signal: the lead and Slurm's slack at the limit, never the whole run
        assert LEAD_S - 5 <= a["limits"]["charged_s"] <= LEAD_S + 60, a
    log = text()
    first = log.split("resumed from checkpoint")[0]
    assert first.count("checkpoint at") == 1, log  # one signal in the first run: Slurm's, not a second from harpd
    step = int(log.split("checkpoint at ")[1].split()[0])
    assert f"resumed from checkpoint {step}" in log, log
    assert f"finished at {STEPS}" in log, log
