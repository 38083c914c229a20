"""Requeue in place or submit anew: chosen by what harpd may do in Slurm.

``requeue`` keeps the job id and the user (``scontrol requeuehold``, update
the limits, ``release``), so accounting, dependencies and the user's view of
"my job" stay intact; it needs harpd to be root, Slurm's ``SlurmUser`` or a
Slurm operator/administrator.  A per-user harpd has none of these and submits
a new job as itself instead (``resubmit``).  ``recovery.mode = "auto"``
decides once, on first need, and logs why.
"""

from __future__ import annotations

import logging
import os
import pwd
from typing import Any

log = logging.getLogger("harpd.recovery")

__all__ = ["resolve_mode", "REQUEUE", "RESUBMIT"]

REQUEUE = "requeue"
RESUBMIT = "resubmit"
_PRIVILEGED_LEVELS = frozenset({"operator", "administrator"})


def _me() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def resolve_mode(setting: str, backend: Any) -> tuple[str, str, bool]:
    """(mode, why, certain) for ``recovery.mode`` = ``setting``.

    A Slurm query that fails counts as "not privileged" (resubmitting works
    for everyone; a requeue without the rights would leave the job held) and
    makes the answer uncertain, so the caller asks again next time.
    """
    if setting in (REQUEUE, RESUBMIT):
        return setting, f"recovery.mode = {setting!r}", True
    if os.geteuid() == 0:
        return REQUEUE, "harpd runs as root", True
    me = _me()
    certain = True
    slurm_user = getattr(backend, "slurm_user", None)
    if slurm_user is not None:
        try:
            if slurm_user() == me:
                return REQUEUE, f"harpd runs as SlurmUser {me}", True
        except Exception as exc:  # noqa: BLE001 - Slurm down: decide without it
            certain = False
            log.warning("cannot read SlurmUser (%s); assuming harpd is not SlurmUser", exc)
    admin_level = getattr(backend, "admin_level", None)
    if admin_level is not None:
        try:
            level = admin_level(me)
            if level and level.strip().lower() in _PRIVILEGED_LEVELS:
                return REQUEUE, f"harpd's user {me} is a Slurm {level.strip().lower()}", True
        except Exception as exc:  # noqa: BLE001
            certain = False
            log.warning("cannot read %s's Slurm AdminLevel (%s); assuming no operator rights", me, exc)
    return RESUBMIT, f"harpd runs as {me}: not root, SlurmUser or a Slurm operator", certain
