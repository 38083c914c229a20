"""What a Slurm command's failure means: no such job, no answer, or a refusal.

The command-line tools say it only in words, on stderr, and not always with a
non-zero exit: ``scontrol write batch_script`` of a stopped slurmctld exits 0
with "job script retrieval failed: Socket timed out on send/recv operation".
The phrases below are Slurm's own error strings (``slurm_strerror``, and the
persistent-connection messages sacct prints when slurmdbd does not answer),
the same from 22.05 to 26.05; they name the connection, never the job's own
text, so matching them cannot be fooled by a job name.

Measured on the test cluster (22.05) with slurmctld or slurmdbd SIGSTOPped::

    scontrol show job 1   slurm_load_jobs error: Socket timed out on send/recv operation
    sbatch                sbatch: error: Batch job submission failed: Socket timed out on send/recv operation
    scontrol requeuehold  Unexpected message received for job 1
    sacct                 sacct: error: slurm_persist_conn_open: No response to persist_init
                          (then "Problem talking to the database: Resource temporarily unavailable")
    squeue --json         exit 0; {"errors": [{"description": "Failed while looking for jobs",
                          "error": "Unspecified error", "source": "slurm_load_jobs"}], "jobs": []}
"""

from __future__ import annotations

from harpd.slurm.base import JobUnknown, SlurmError, SlurmUnavailable

__all__ = ["failure", "unavailable", "unknown_job"]

#: Slurm could not be asked: the answer says nothing about the job
_UNAVAILABLE = (
    "socket timed out",
    "unable to contact slurm controller",
    "connection refused",
    "connection timed out",
    "connection reset",
    "no response to persist_init",
    "persist_conn",
    "persistinit",
    "problem talking to the database",
    "resource temporarily unavailable",
    "unexpected message received",
    "zero bytes were transmitted or received",
    "transport endpoint is not connected",
    "slurmctld is busy",
    "slurm backup controller in standby mode",
    "communication connection failure",
    "slurmdbd is not responding",
    "failed while looking for jobs",  # squeue --json of a stopped slurmctld (exit 0, the reason lost)
)
#: Slurm answered: it has no such job (or purged it)
_UNKNOWN_JOB = ("invalid job id", "job does not exist", "no such job")


def unavailable(text: str) -> bool:
    """Does Slurm's message say it could not be reached or did not answer?"""
    t = text.lower()
    return any(p in t for p in _UNAVAILABLE)


def unknown_job(text: str) -> bool:
    """Does Slurm's message say it has no such job?"""
    t = text.lower()
    return any(p in t for p in _UNKNOWN_JOB)


def failure(message: str, stderr: str) -> SlurmError:
    """The error for a command that failed with ``stderr``: its kind from Slurm's words, ``message`` its line."""
    if unknown_job(stderr):  # first: "no such job" is an answer, whatever else the text says
        return JobUnknown(message)
    if unavailable(stderr):
        return SlurmUnavailable(message)
    return SlurmError(message)
