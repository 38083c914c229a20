"""Tell harpd about a submitted job, from a detached child, so the user never waits for it.

harpd learns every job harp consulted it about: its id, the user's request,
what was submitted and the decision behind it.  That is what outcomes are
matched against and what recovery resubmits from.  Both entry points
(harp-submit and harp-filter, the cli_filter helper) build the same message
here and send it the same way: once, within ``TIMEOUT_S``, and a failure is
harpd's to log, never the user's problem.
"""

from __future__ import annotations

import os

from . import client, route

TYPE_CHECKING = False  # typing costs milliseconds to import; checkers still see these
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

TIMEOUT_S = 0.5  # registration must never keep the user waiting


def message(
    job: dict[str, Any],
    argv: list[str] | None,
    environ: Mapping[str, str],
    original: dict[str, Any],
    submitted: dict[str, Any],
    decision: dict[str, Any] | None,
) -> dict[str, Any]:
    """The ``register`` message, less the job id (known only once sbatch has answered).

    ``argv`` and the ``SBATCH_*`` variables are sbatch's as it runs the job:
    recovery resubmits from them.  Without ``argv`` (a command other than
    sbatch) neither is sent.
    """
    if argv is not None:
        job = {**job, "argv": list(argv), "sbatch_env": {k: v for k, v in environ.items() if k.startswith("SBATCH_")}}
    return {"op": "register", "job": job, "original": original, "submitted": submitted, "decision": decision}


def timeout_s(environ: Mapping[str, str]) -> float:
    """How long registration may take: ``TIMEOUT_S``, or less when HARP_TIMEOUT says so."""
    return min(TIMEOUT_S, client.timeout_s(environ)[0])


def register_in_background(where: route.Route, message: dict, timeout: float) -> None:
    """Tell harpd about the new job from a detached child, so the user never waits for it.

    The child lets go of the terminal and of sbatch's pipes at once (a shell
    or ``$(...)`` waiting for end-of-file must not wait for it), tries once
    within ``timeout``, and exits; a failure is harpd's to log, never the
    user's problem.  Without fork, registration happens in line.
    """
    try:
        pid = os.fork()
    except OSError:
        pid = 0
        inline = True
    else:
        inline = False
        if pid:
            return
    try:
        if not inline:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.closerange(3, 256)
            # not niced: it has TIMEOUT_S of wall time, and a niced child on a busy
            # node missed it, so harpd never learnt the job (CI lost registrations)
        client.ask(where, message, timeout)
    except BaseException:
        pass
    finally:
        if not inline:
            os._exit(0)
