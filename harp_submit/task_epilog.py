"""``harp-task-epilog``: Slurm's TaskEpilog, so that harpd recovers a job before it ever ends.

A site sets ``TaskEpilog=/path/to/harp-task-epilog`` in slurm.conf.  slurmd
runs it as the job's owner after each task; for the batch step's task it
runs after the batch script exited and before Slurm ends the job, while
sacct still shows the job RUNNING.  It asks harpd (op ``ending``) whether
the job is to run again; harpd looks in Slurm's accounting for a step
killed for memory and, if the job is one it recovers, requeues it there
and then (``harpd.recovery.ending``).  A workflow manager polling sacct
(Snakemake's Slurm executor) sees the job RUNNING, then PENDING, then its
next run: never the failure it would have given up on.

Every other task, and every problem (no harpd, a timeout), ends here at
once with exit status 0: the hook never changes what a job does without
harp.  Standard library only, like harp-submit.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from . import client, route

__all__ = ["main", "is_batch_task"]

#: seconds to wait for harpd's decision (it reads accounting for up to 20 s, then requeues)
TIMEOUT_S = 60.0
#: Slurm's id of the batch step (SLURM_BATCH_SCRIPT) as some versions put it in SLURM_STEP_ID
_BATCH_STEP_IDS = ("batch", "4294967294")


def is_batch_task(environ: Mapping[str, str]) -> bool:
    """The batch script's task of a job (not a task of an srun step inside it)."""
    if not environ.get("SLURM_JOB_ID"):
        return False
    step = environ.get("SLURM_STEP_ID", "batch")
    return step in _BATCH_STEP_IDS


def job_name(environ: Mapping[str, str]) -> str:
    """The job as accounting names it: ``ARRAY_TASK`` for an array's task, else ``SLURM_JOB_ID``.

    An array task's own SLURM_JOB_ID can be its array's id (the last task
    keeps it), which accounting answers with every task of the array: asked
    by that id, harpd found none named so and waited out its 20 s (#51).
    """
    array, task = environ.get("SLURM_ARRAY_JOB_ID"), environ.get("SLURM_ARRAY_TASK_ID")
    if array and task and array.isdigit() and task.isdigit():
        return f"{array}_{task}"
    return environ["SLURM_JOB_ID"]


def _quiet_exit(signum: int, frame: object) -> None:
    """Killed while waiting for harpd (the job is being requeued or cancelled): end with status 0 and no
    message, never ``slurmstepd: error: --task-epilog failed`` in the user's .err file (#51)."""
    os._exit(0)


def main(argv: list[str] | None = None, environ: Mapping[str, str] = os.environ) -> int:
    if not is_batch_task(environ) or environ.get("HARP_TASK_EPILOG", "1") == "0":
        return 0
    import signal

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, _quiet_exit)
    job_id = job_name(environ)
    try:
        where, _ = route.choose(environ)
        answer = client.ask(where, {"op": "ending", "job_id": job_id}, TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - a hook must never fail the job
        # silent in the job's output (every job runs this hook, with or without harp) unless asked
        if environ.get("HARP_DEBUG"):
            print(f"harp-task-epilog: job {job_id}: harpd not asked ({exc})", file=sys.stderr)
        return 0
    if answer.get("action") == "requeued":
        print(f"harp-task-epilog: job {job_id} requeued by harpd: {answer.get('why', '')}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
