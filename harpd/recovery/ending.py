"""A job about to end, as its own end-of-task hook reports it: did a step run out of memory?

Recovery's race with a workflow manager: a manager (Snakemake's
Slurm executor, Nextflow) polls sacct and takes the first final state it
sees as the task's fate.  A job harp recovers from its outcome is requeued
seconds after Slurm recorded it FAILED or OUT_OF_MEMORY, and a manager that
looked in between has given up.  Slurm runs the TaskEpilog of the batch step
after the batch script exited and before the job ends, while sacct still
shows it RUNNING: ``harp-task-epilog`` asks harpd there (op ``ending``),
and harpd requeues the job before it ever reaches a final state.

harpd acts only on what Slurm vouches for: the hook says only "job N is
ending"; that a step of it was killed for memory is read from accounting
(``harpd.slurm.classify.killed_for_memory``), waiting the few seconds
slurmdbd may take to record the steps that ended.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from harpd.records import JobRecord, Outcome
from harpd.slurm.base import SlurmError
from harpd.slurm.classify import killed_for_memory, to_record
from harpd.slurm.sacct_records import SacctJob

__all__ = ["ran_out_of_memory", "EVIDENCE_WAIT_S"]

#: how long to wait for accounting to record the steps that ended before the batch script
EVIDENCE_WAIT_S = 20.0
#: steps that run as long as the job: still running when the batch script's hook runs
_WHOLE_JOB_STEPS = ("batch", "extern")


def _last_run(runs: list[SacctJob], job_id: str) -> SacctJob | None:
    mine = [r for r in runs if r.job_id == job_id]
    return max(mine, key=lambda r: r.run) if mine else None


def _requeued_under_hook(runs: list[SacctJob], job_id: str, now: float) -> bool:
    """The run whose hook asks was requeued just now (submitit's checkpoint: ``scontrol requeue``).

    Accounting then shows that run REQUEUED, ended within the last two
    minutes, and a next run pending with no step yet: where a run whose start
    slurmdbd has not recorded shows its steps beside it (``_start_recorded``).
    """
    mine = sorted((r for r in runs if r.job_id == job_id), key=lambda r: r.run)
    if len(mine) < 2:
        return False
    prev, last = mine[-2], mine[-1]
    return (
        prev.state == "REQUEUED"
        and prev.end_time is not None
        and now - prev.end_time < 120
        and last.state == "PENDING"
        and not last.steps
    )


def _start_recorded(job: SacctJob) -> bool:
    """Accounting shows the run running, with its memory request: what a step's kill is measured against.

    The hook runs while the job runs, so a run accounting shows in another
    state, or without its request, is one slurmdbd has not recorded the start
    of yet (seen on 22.05: the job PENDING with ReqMem ``16?`` beside its step
    already CANCELLED by the memory kill).  Judged then, the kill had no limit
    to be measured against and the job was left to end FAILED.
    """
    return job.state == "RUNNING" and job.req_mem_mb is not None


def _settled(job: SacctJob, expect_step: bool = False) -> bool:
    """Every step but the batch and extern ones has a final state in accounting.

    ``expect_step``: the job is known to run a step of its own (Snakemake's
    job step), so accounting that shows none has not recorded it yet (slurmdbd
    lags behind slurmctld on a busy host): not settled, whatever else it shows.
    """
    own = [s for s in job.steps if s.step_id not in _WHOLE_JOB_STEPS]
    if expect_step and not own:
        return False
    return all(s.state not in (None, "RUNNING", "PENDING") for s in own)


def ran_out_of_memory(
    backend: object,
    job_id: str,
    *,
    wait_s: float = EVIDENCE_WAIT_S,
    expect_step: bool = False,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> JobRecord | None:
    """The job's current run as an OUT_OF_MEMORY record when Slurm shows a step killed for memory, else None.

    A run whose steps all ended without that evidence is answered at once;
    a run with a step accounting still shows running is looked at again
    for up to ``wait_s`` (slurmdbd records a step's end a moment after it),
    as is one with no step recorded yet when ``expect_step`` (``_settled``)
    and one whose start accounting has not recorded yet (``_start_recorded``).
    """
    deadline = clock() + wait_s
    while True:
        try:
            runs = backend.sacct_raw([job_id], None, None, True)  # type: ignore[attr-defined]
        except SlurmError:
            runs = []
        job = _last_run(runs, job_id)
        if _requeued_under_hook(runs, job_id, time.time()):
            return None  # nothing to recover; answered at once, the hook ends before slurmstepd kills it
        if job is not None and job.state not in (None, "RUNNING", "PENDING") and not killed_for_memory(job):
            # requeued (submitit's checkpoint: ``scontrol requeue``) or cancelled while the hook runs: nothing
            # to recover, and an answer at once lets the hook end before slurmstepd kills it (#51: status=9)
            return None
        if job is not None and _start_recorded(job):
            if killed_for_memory(job):
                rec = to_record(job)
                rec.outcome = Outcome.OOM
                rec.censored_mem = True
                return rec
            if _settled(job, expect_step):
                return None
        if clock() >= deadline:
            return None
        sleep(1.0)
