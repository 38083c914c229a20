"""The environment sbatch gets for a resubmission: the original job's own, as Slurm kept it.

A resubmitted job must run the user's work, and a job's work depends on its
environment (exported variables, PATH, modules' and conda's variables), which
sbatch hands to the job (``--export=ALL``).  harpd has no copy of its own (a
harpd-side copy of every user's environment would be a store of secrets);
Slurm's accounting keeps one when the site sets
``AccountingStoreFlags=job_env`` (``sacct --env-vars``, the same on 22.05 to
26.05).  Without it harp does not resubmit: a job run with harpd's or a
login-like environment is different work under the same name.

The stored environment is sbatch's own (after sbatch added its ``SLURM_*``
outputs, which sbatch sets again on the resubmission); only the memory
variables are left out when the resubmission sets memory itself (sbatch
refuses two).
"""

from __future__ import annotations

import pwd
from collections.abc import Mapping

__all__ = ["submit_env", "user_name"]

_MEM_ENV = frozenset({"SBATCH_MEM_PER_CPU", "SBATCH_MEM_PER_GPU", "SBATCH_MEM_PER_NODE"})


def user_name(uid: int) -> str:
    """The login name of ``uid``, or the number when it has none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def submit_env(original: Mapping[str, str], *, sets_mem: bool) -> dict[str, str]:
    """sbatch's environment for the resubmission of a job submitted with ``original``.

    The original exactly, less the ``SBATCH_MEM_*`` variables when the
    resubmission sets memory on the command line.
    """
    return {k: v for k, v in original.items() if not (sets_mem and k in _MEM_ENV)}
