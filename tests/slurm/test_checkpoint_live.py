"""Checkpoint signal and resume on requeue (docs/dnn.md, COCI) against the real Slurm, end to end.

A root harpd under hard limits (``[watch] soft_limits = false``: harp's limit
is the kill time; the watcher only signals) with a listing every 2 s.  The
job declares ``#HARP checkpoint signal=USR1 lead=40s``; harp gave it 2 of the
10 minutes it asked for; its work is 150 one-second steps.  harpd signals its
batch shell about 40 s before harp's 2 minutes: the trap writes a checkpoint
(the step reached) and the job keeps running into its limit (TIMEOUT).
Recovery requeues it in place (same id, same files) with the same 2 minutes,
not doubled, charged only the time since the signal; the second run reads the
checkpoint, does the remaining steps and completes.  The output file is
opened in append mode, so it shows both runs.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_recovery import REPO, Daemon
from test_soft_limits_live import register

from tests.helpers.wait import wait_for

pytestmark = pytest.mark.slurm

DEADLINE_S = 12 * 60
LEAD_S = 40
STEPS = 150
SCRIPT = f"""#!/bin/bash
#HARP checkpoint cost=1s signal=USR1 lead={LEAD_S}s
ck="$PWD/ckpt-$SLURM_JOB_ID"
i=0
if [ -f "$ck" ]; then i=$(cat "$ck"); echo "resumed from checkpoint $i"; fi
trap 'echo "$i" > "$ck"; echo "checkpoint at $i"' USR1
while [ "$i" -lt {STEPS} ]; do sleep 1 & wait $!; i=$((i + 1)); done
echo "finished at $i"
"""


@dataclass
class HardDaemon(Daemon):
    def write_config(self) -> None:
        super().write_config()
        with open(self.dir / "harpd.toml", "a") as fh:
            fh.write("[watch]\nsoft_limits = false\ninterval_s = 2.0\nmargin_s = 12.0\n")


@pytest.fixture(scope="module")
def ckpt(slurm_cluster):
    c = slurm_cluster
    base = Path(tempfile.mkdtemp(prefix="hck-", dir="/tmp"))
    base.chmod(0o755)
    wd = base / "work"
    wd.mkdir()
    (wd / "train.sh").write_text(SCRIPT)
    d = HardDaemon("ckpt", base / "d", None, sys.executable, str(REPO), str(c.conf))
    d.dir.mkdir()
    d.write_config()
    jobs: list[str] = []
    try:
        d.start()
        out = c.run(
            [
                "sbatch",
                "--parsable",
                "--time=2",
                "--mem=100M",
                "-p",
                "short",
                "--open-mode=append",
                "-o",
                str(wd / "train-%j.out"),
                str(wd / "train.sh"),
            ],
            cwd=wd,
        ).stdout
        jid = out.strip().split(";")[0]
        assert jid.isdigit(), out
        jobs.append(jid)
        # what harp-submit sends: the script's #HARP lines, with harp's decision (2 of the 10 minutes)
        register(
            d,
            jid,
            wd,
            signature="ckpt-test",
            asked_min=10,
            given_min=2,
            harp_lines=[ln for ln in SCRIPT.splitlines() if ln.startswith("#HARP")],
        )
        yield c, d, wd, jid
    finally:
        d.stop()
        live = c.run(["squeue", "-h", "-o", "%i"], check=False).stdout.split()
        left = [j for j in live if j in jobs]
        if left:
            c.run(["scancel", *left], check=False)
        shutil.rmtree(base, ignore_errors=True)


def test_signalled_before_harps_limit_requeued_and_resumed_from_its_checkpoint(ckpt):
    c, d, wd, jid = ckpt
    out = wd / f"train-{jid}.out"

    def text() -> str:
        return out.read_text() if out.exists() else ""

    # the trap fired in the first run, before harp's 2 minutes ran out
    wait_for("the checkpoint trap", lambda: "checkpoint at" in text(), DEADLINE_S, interval=2, log=d.log_tail)
    first = d.status(jid)
    sig = [ch for ch in first.get("limit_changes") or [] if ch["kind"] == "checkpoint-signal"]
    assert len(sig) == 1 and sig[0]["step"] == "done", sig
    assert 120 - LEAD_S - 15 <= sig[0]["new_time_s"] <= 120, sig  # lead before the limit (a tick is 2 s)
    assert "SIGUSR1" in sig[0]["reason"]

    # it runs out, is requeued in place with the same 2 minutes, resumes and completes
    def completed() -> dict[str, Any] | None:
        job = d.status(jid)
        att = job.get("attempts") or []
        return job if att and att[-1]["step"] == "done" and att[-1]["outcome"] == "completed" else None

    job = wait_for("the resumed run completing", completed, DEADLINE_S, interval=2, log=d.log_tail)
    att = job["attempts"]
    assert [(a["attempt"], a["outcome"]) for a in att] == [(1, "timeout"), (2, "completed")], att
    assert att[1]["job_id"] == jid  # requeued in place: the same job, the same files
    assert att[1]["limits"]["time_s"] == 120, att[1]  # not doubled
    assert "resumes from its checkpoint" in att[1]["reason"] and "not doubled" in att[1]["reason"], att[1]
    # only the time since the signal: the lead and Slurm's slack in killing at the limit (its checks are
    # some 30 s apart), never the whole run
    assert 0 <= att[1]["limits"]["charged_s"] <= LEAD_S + 60, att[1]
    assert "since the signal, not the whole" in att[1]["reason"], att[1]
    log = text()
    step = int(log.split("checkpoint at ")[1].split()[0])
    assert f"resumed from checkpoint {step}" in log, log
    assert f"finished at {STEPS}" in log, log
    assert log.index("checkpoint at") < log.index("resumed from checkpoint") < log.index("finished at"), log
