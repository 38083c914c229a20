"""The environment sbatch gets for a resubmission (the job inherits it: ``--export=ALL``).

The submit-time environment is not recorded (only its ``SBATCH_*``
variables are, since they are options): a per-user harpd passes its own
environment, a root harpd submitting for a user a login-like one, so the
job never inherits root's or harpd's variables.
"""

from __future__ import annotations

import os
import pwd
from typing import Any

from harpd.recovery.crash import CRASH_ENV

__all__ = ["submit_env", "user_name"]

_LOGIN_PATH = "/usr/local/bin:/usr/bin:/bin"
_MEM_ENV = frozenset({"SBATCH_MEM_PER_CPU", "SBATCH_MEM_PER_GPU", "SBATCH_MEM_PER_NODE"})


def user_name(uid: int) -> str:
    """The login name of ``uid``, or the number when it has none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def submit_env(as_uid: int | None, sbatch_env: Any, *, sets_mem: bool) -> dict[str, str]:
    """sbatch's environment: harpd's own (``as_uid`` None) or a login-like one for ``as_uid``.

    The registered ``SBATCH_*`` variables are added back, except the memory
    ones when the resubmission sets memory itself (sbatch refuses two).
    """
    if as_uid is None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SBATCH_", "SLURM_")) and k != CRASH_ENV}
    else:
        try:
            pw = pwd.getpwuid(as_uid)
            env = {"HOME": pw.pw_dir, "USER": pw.pw_name, "LOGNAME": pw.pw_name, "SHELL": pw.pw_shell or "/bin/sh"}
        except KeyError:
            env = {}
        env["PATH"] = _LOGIN_PATH
        for k in ("LANG", "LC_ALL", "TZ"):
            if k in os.environ:
                env[k] = os.environ[k]
    if "SLURM_CONF" in os.environ:
        env["SLURM_CONF"] = os.environ["SLURM_CONF"]
    if isinstance(sbatch_env, dict):
        for k, v in sbatch_env.items():
            if isinstance(k, str) and k.startswith("SBATCH_") and isinstance(v, str) and not (sets_mem and k in _MEM_ENV):
                env[k] = v
    return env
