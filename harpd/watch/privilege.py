"""May harpd change other users' jobs?  Decided at start, said in the log and in ``health``.

Raising a running job's TimeLimit needs root, Slurm's SlurmUser or a Slurm
operator/administrator (a plain user may only shorten).  Recovery's
``resolve_mode`` already answers exactly that question (requeue needs the
same rights), so this module asks it rather than a second copy of the rule.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from harpd.config import HarpSettings
from harpd.protocol import LimitsHealth
from harpd.recovery.mode import REQUEUE, resolve_mode

log = logging.getLogger("harpd.watch")

__all__ = ["Privilege", "detect"]


@dataclass(frozen=True, slots=True)
class Privilege:
    """Whether harpd may raise other users' limits, why, and the limits mode that follows."""

    privileged: bool
    why: str
    soft_limits: bool  # privileged and watch.soft_limits: harp's limit is a plan, not the kill time

    @property
    def mode(self) -> str:
        return "soft" if self.soft_limits else "hard"

    def as_health(self) -> LimitsHealth:
        """What ``health`` (and so ``harp status``) shows."""
        return LimitsHealth(mode=self.mode, privileged=self.privileged, why=self.why)


def detect(settings: HarpSettings, backend: Any) -> Privilege:
    """The answer for this harpd (no backend: unprivileged, hard limits)."""
    if backend is None:
        priv = Privilege(False, "no Slurm backend", False)
    else:
        mode, why, _certain = resolve_mode("auto", backend)
        privileged = mode == REQUEUE
        soft = privileged and settings.watch.enabled and settings.watch.soft_limits
        if privileged and not soft:
            why += "; soft limits off (watch.soft_limits/watch.enabled = false)"
        priv = Privilege(privileged, why, soft)
    log.info("limits: %s (%s)", priv.mode, priv.why)
    return priv
