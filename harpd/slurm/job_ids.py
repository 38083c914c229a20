"""Slurm's job-id grammar: ``12``, ``12_3`` (array task), ``12+1`` (het component), ``12_3.batch`` (step).

One place reads these ids apart, so the sacct parsers and the poller agree on
which job a step belongs to and which sbatch submission a job came from.
"""

from __future__ import annotations

__all__ = ["job_of_step", "submitted_id"]


def job_of_step(step_id: str) -> str:
    """``12_3.batch`` -> ``12_3``: the job a step row of sacct belongs to."""
    return step_id.split(".", 1)[0]


def submitted_id(job_id: str) -> str:
    """``12_3`` / ``12+1`` -> ``12``: the id sbatch printed for the whole array or het job."""
    return job_id.split("_", 1)[0].split("+", 1)[0]
