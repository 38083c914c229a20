"""The one interface between harp and Slurm.

Everything harp asks of Slurm goes through ``SlurmBackend`` so that the rest of
the daemon never builds a command line, never parses scheduler text and can be
tested against a fake.  The implementation over the stable commands lives in
``cli_backend``; ``harpd.slurm.get_backend`` picks one from the config.

Units follow ``harpd.records``: seconds, MiB, counts; ``None`` means unknown or
unlimited.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from harpd.records import JobRecord

__all__ = ["SlurmBackend", "SlurmError", "PartitionInfo"]


class SlurmError(Exception):
    """A Slurm command failed; the message is one line an admin can act on."""


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """What a job can get in one partition: the limits decisions must respect.

    ``max_mem_mb_per_node`` is the smaller of the partition's MaxMemPerNode
    and the largest node's RealMemory; ``max_cpus_per_node`` likewise with
    MaxCPUsPerNode and CPUTot.  ``gres`` is the generic resources of its
    nodes as Slurm prints them (``gpu:a100:4``), ``gpus_per_node`` the GPU
    count in it.
    """

    name: str
    max_time_s: int | None
    max_mem_mb_per_node: int | None
    max_cpus_per_node: int | None
    nodes: int
    gres: str | None = None
    gpus_per_node: int = 0
    default: bool = False
    max_nodes: int | None = None
    node_names: tuple[str, ...] = field(default_factory=tuple)


@runtime_checkable
class SlurmBackend(Protocol):
    """Slurm as harp uses it.  Every method raises ``SlurmError`` on failure."""

    def submit(
        self,
        argv: list[str],
        script: bytes | None,
        cwd: str | os.PathLike[str] | None,
        env: Mapping[str, str] | None,
        as_uid: int | None = None,
    ) -> str:
        """Run ``sbatch --parsable ARGV`` (script on stdin) and return the job id.

        ``argv`` are sbatch options (and, when ``script`` is None, the script
        path and its arguments).  ``env`` is the environment of sbatch, which
        the job inherits; ``as_uid`` submits as that user (harpd runs as root).
        """
        ...

    def sacct_jobs(
        self,
        job_ids: list[str] | None,
        since: float | None,
        until: float | None,
        all_users: bool,
    ) -> list[JobRecord]:
        """Accounting records of the given jobs (or of every job in the window).

        Finished and running jobs alike (``outcome`` RUNNING for the latter),
        classified by ``harpd.slurm.classify``.  A job requeued in place appears once
        per run, ``attempt`` numbering the runs from 1.
        """
        ...

    def show_job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job -o JOB`` as key/value pairs (the controller's view)."""
        ...

    def partitions(self) -> dict[str, PartitionInfo]:
        """Every partition with its limits, from ``scontrol show partition/node``."""
        ...

    def requeue_hold(self, job_id: str) -> None:
        """``scontrol requeuehold JOB``: back to pending, held, same job id."""
        ...

    def update_job(self, job_id: str, **fields: Any) -> None:
        """``scontrol update JobId=JOB Key=Value...`` with scontrol's own keys.

        E.g. ``TimeLimit=90`` (minutes, or ``D-HH:MM:SS``) and
        ``MinMemoryNode=600`` (a plain number of MB: ``600M`` is refused).
        """
        ...

    def release(self, job_id: str) -> None:
        """``scontrol release JOB``."""
        ...

    def cancel(self, job_id: str) -> None:
        """``scancel JOB``."""
        ...
