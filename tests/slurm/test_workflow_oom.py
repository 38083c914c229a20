"""A rule outgrows the memory harp learnt, with an unmodified Snakemake and no manager retries.

Snakemake's Slurm executor polls sacct and stops the workflow at the first
task it sees FAILED or OUT_OF_MEMORY.  harp sizes the rule ``big`` from its
history (runs that used 100 of 1600 MB); this run allocates 600 MB, so its
job step is killed for memory.  harpd must requeue the job with more memory
before Snakemake can see it fail: Slurm's TaskEpilog of the batch step
(``harp-task-epilog``, configured by ``scripts/localslurm``) asks harpd
while the job is still RUNNING, and harpd, on accounting's evidence of the
killed step, holds and requeues it there.  Snakemake, without ``--retries``,
finishes the workflow and reports no failure; the task ran under one job id,
twice: the run harp sized (REQUEUED: held while it ran, it has no end of its
own, on 22.05 and 26.05 alike) and the escalated one (COMPLETED).

With ``--retries 1`` the same happens: harp decided while the job was still
running, so the manager never saw a failure to retry: exactly one of them
retried the task.
"""

from __future__ import annotations

import time

import pytest

from harp_submit import client
from tests.helpers.wait import wait_for
from tests.slurm.test_snakemake_workflow import _mb, _run
from tests.slurm.test_workflow_cpus import RETRY_SNAKEFILE, _workflow

pytestmark = pytest.mark.slurm


@pytest.fixture
def oom_workflow(slurm_cluster):
    yield from _workflow(slurm_cluster, RETRY_SNAKEFILE, "big", poll_interval_s=2)


def _runs(c, start: float) -> dict[str, list[list[str]]]:
    """Every run (requeues too) of the rule's jobs since ``start``: job id -> [[state, ReqMem], ...]."""
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start - 1))
    out = c.run(["sacct", "-X", "-D", "-P", "-n", "-S", since, "-o", "JobID,State,ReqMem,Comment"]).stdout
    runs: dict[str, list[list[str]]] = {}
    for line in out.splitlines():
        jid, state, mem, comment = line.split("|", 3)
        if comment.startswith("rule_big"):
            runs.setdefault(jid, []).append([state.split()[0], mem])
    return runs


@pytest.mark.parametrize("retries", [0, 1])
def test_a_task_that_outgrows_harps_size_is_requeued_before_snakemake_sees_it_fail(oom_workflow, retries) -> None:
    wf = oom_workflow
    c = wf["cluster"]
    log: list[str] = []
    start, wall = _run(wf, harp=True, retries=retries, log=log)  # asserts Snakemake exits 0
    stderr = log[0]
    assert "Error in rule" not in stderr and "failed" not in stderr.lower(), stderr[-3000:]
    assert (wf["dir"] / "out" / "big.txt").read_text().strip() == "ok"
    runs = _runs(c, start)
    # one job id: no Snakemake-level retry (it would be a second job), harp's requeue ran it again
    assert len(runs) == 1, runs
    ((job, got),) = runs.items()
    # the run harp sized: REQUEUED, held before it ended (a run requeued after its end keeps that end on
    # 25.11 and 26.05, FAILED: what a manager would have seen)
    assert len(got) == 2 and got[0][0] == "REQUEUED" and got[1][0] == "COMPLETED", got
    (_, mem1), (_, mem2) = got
    assert _mb(mem1) < 600 <= _mb(mem2), got  # harp's size was too small; the escalated one fits

    # harpd says why: attempt 2, decided at the job's end hook and held while it still ran
    def both_attempts() -> list | None:
        attempts = client.call(wf["socket"], {"op": "status", "job_id": job}, 10.0)["job"].get("attempts") or []
        return attempts if len(attempts) == 2 and attempts[1].get("outcome") else None

    attempts = wait_for("harpd's second attempt with its outcome", both_attempts, 60, interval=1)
    assert len(attempts) == 2 and attempts[0]["outcome"] == "oom", attempts
    assert attempts[1]["limits"].get("while_running") and attempts[1]["outcome"] == "completed", attempts
    # held before Slurm ended the run, not requeued from the poll after a final state a manager could see
    assert attempts[1]["limits"].get("held_running"), attempts
    print(f"\n--retries {retries}: job {job} runs {got}; Snakemake {wall:.0f} s, no failure reported")
