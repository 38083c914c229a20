"""What the site's Slurm accounting lets recovery do, said once at start, in ``health`` and ``harp status``.

A job that ran out is requeued while slurmctld still holds it (``MinJobAge``)
and harpd has the rights; otherwise it is resubmitted, and a resubmission
needs the job's script and environment from accounting
(``AccountingStoreFlags=job_script,job_env``).  A site without them loses
every job harpd could not requeue in time (harpd down past MinJobAge, a
per-user harpd), so harp says so where an admin and the job's owner look,
rather than discovering it at the failure.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from harpd.protocol import AccountingHealth
from harpd.slurm.base import Accounting, SlurmError

log = logging.getLogger("harpd.recovery")

__all__ = ["SiteAccounting", "read_site_accounting"]


@dataclass(frozen=True, slots=True)
class SiteAccounting:
    """The answer: what accounting keeps, and in words what that means for recovery."""

    script: bool | None  # None: unknown (Slurm did not answer)
    env: bool | None
    flags: str
    says: str

    @property
    def resubmits(self) -> bool:
        """A job that left slurmctld can be resubmitted (script and environment kept)."""
        return bool(self.script and self.env)

    def as_health(self) -> AccountingHealth:
        return AccountingHealth(job_script=self.script, job_env=self.env, flags=self.flags, recovery=self.says)


def _words(acc: Accounting) -> str:
    if not acc.lacks:
        return (
            "every registered job can be recovered for as long as slurmdbd keeps it: its script and "
            "environment are in accounting (AccountingStoreFlags has job_script and job_env)"
        )
    return (
        f"AccountingStoreFlags lacks {', '.join(acc.lacks)}: a job that ran out can only be requeued, by a "
        "harpd with the rights and while slurmctld still holds it (MinJobAge); it is not resubmitted, "
        "since it would run without its own script or environment"
    )


def read_site_accounting(backend: Any) -> SiteAccounting:
    """Ask Slurm once (``scontrol show config``); an unknown answer is said as such, never guessed."""
    try:
        acc = backend.accounting()
    except (SlurmError, AttributeError) as exc:
        return SiteAccounting(None, None, "", f"unknown: cannot read AccountingStoreFlags ({exc})")
    out = SiteAccounting(acc.script, acc.env, acc.flags, _words(acc))
    (log.info if out.resubmits else log.warning)("recovery: %s", out.says)
    return out
