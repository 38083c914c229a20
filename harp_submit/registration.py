"""Tell harpd about a submitted job, from a detached child, so the user never waits for it.

harpd learns every job harp consulted it about: its id, the token of the
decision harpd recorded for it, and how sbatch ran it (what recovery
resubmits from).  harpd trusts none of the message's resource figures: it
checks the job with slurmctld and stores its own record of the decision.
Both entry points (harp-submit and harp-filter, the cli_filter helper) build
the same message here and send it the same way: from a detached child that
retries for up to ``BUDGET_S`` (a busy login node may take seconds to answer),
backing off, while the user's shell has long moved on.

The message can still be lost (the node reboots, the child is killed), so a
job whose request harp changed also carries the token in its Slurm comment
(``comment_argv``): harpd finds such jobs in the queue and registers them
itself after the same checks (harpd.daemon.adopt).
"""

from __future__ import annotations

import os
import time

from . import client, route

TYPE_CHECKING = False  # typing costs milliseconds to import; checkers still see these
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .wire import DecisionDict, JobRequestDict, RegisterMessage, ResourcesDict

TIMEOUT_S = 0.5  # a registration made in line (no fork) must never keep the user waiting long
BUDGET_S = 60.0  # the detached child's whole budget: tries until harpd answers or this runs out
FIRST_PAUSE_S = 0.5  # pause after the first failed try, doubled after each one (at most MAX_PAUSE_S)
MAX_PAUSE_S = 10.0
#: one try of the detached child at least: no one waits for it, and a try given up while harpd still checks
#: the job with slurmctld would hold a second of harpd's client slots once tried again (a burst of
#: submissions on a loaded host then fills them, and the next submission's prediction is answered "busy")
TRY_S = 20.0
#: how long the child waits for its parent (harp-submit, harp-filter) to exit before registering
PARENT_WAIT_S = 1.0
#: how the decision's token sits in the job's comment (harpd.daemon.registration.token_in_comment reads it)
TOKEN_WORD = "harp decision"
#: test-only: the child sends nothing, as when its message is lost (harpd must find the job by its token)
SKIP_ENV = "HARP_TEST_SKIP_REGISTER"
# harpd's refusals worth another try: the job not yet visible, Slurm not answering
_RETRY_REFUSALS = ("does not know job", "try again", "store unavailable", "harpd busy")


def message(
    job: JobRequestDict,
    argv: list[str] | None,
    environ: Mapping[str, str],
    original: ResourcesDict,
    submitted: ResourcesDict,
    decision: DecisionDict | None,
    token: str | None = None,
) -> RegisterMessage:
    """The ``register`` message, less the job id (known only once sbatch has answered).

    ``argv`` and the ``SBATCH_*`` variables are sbatch's as it runs the job:
    recovery resubmits from them.  Without ``argv`` (a command other than
    sbatch) neither is sent.
    """
    if argv is not None:
        job = {**job, "argv": list(argv), "sbatch_env": {k: v for k, v in environ.items() if k.startswith("SBATCH_")}}
    msg: RegisterMessage = {
        "op": "register",
        "job": job,
        "original": original,
        "submitted": submitted,
        "decision": decision,
    }
    if token is not None:
        msg["token"] = token
    return msg


def token_of(answer: Mapping[str, object]) -> str | None:
    """The decision token of harpd's ``predict`` answer (None: an older harpd, or none given)."""
    token = answer.get("token")
    if not isinstance(token, str) or not 16 <= len(token) <= 64:
        return None
    return token if all(c.isalnum() or c in "_-" for c in token) else None


def with_token(comment: str | None, token: str) -> str:
    """The job's comment with the decision's token appended as one more ``; ``-separated part.

    The user's own comment (and Snakemake's, which names the rule) stays in
    front, untouched; recovery's and the extender's notes are further parts.
    """
    return f"{comment}; {TOKEN_WORD} {token}" if comment else f"{TOKEN_WORD} {token}"


def comment_argv(argv: list[str], options_end: int, dashdash: int | None, comment: str | None, token: str) -> list[str]:
    """``argv`` with ``--comment`` set to ``comment`` plus the token, after the user's own options.

    sbatch uses an option's last occurrence, and the command line over
    ``#SBATCH`` lines, so the one added last carries the user's comment
    (``comment``, the effective one) and the token.
    """
    at = dashdash if dashdash is not None else options_end
    return [*argv[:at], f"--comment={with_token(comment, token)}", *argv[at:]]


def timeout_s(environ: Mapping[str, str]) -> float:
    """How long one try of the detached child may take: HARP_TIMEOUT (default 2 s), at least ``TRY_S``."""
    return max(client.timeout_s(environ)[0], TRY_S)


def _worth_retrying(exc: client.HarpdUnavailable) -> bool:
    return not exc.final or any(s in exc.reason for s in _RETRY_REFUSALS)


def send(
    where: route.Route,
    message: RegisterMessage,
    timeout: float,
    budget: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Send ``message`` until harpd accepts it, within ``budget`` seconds; True when it did.

    Backs off (``FIRST_PAUSE_S`` doubling up to ``MAX_PAUSE_S``) between tries
    and stops at a refusal that will not change (not the caller's job).
    """
    deadline = clock() + budget
    pause = FIRST_PAUSE_S
    while True:
        left = deadline - clock()
        if left <= 0:
            return False
        try:
            client.ask(where, message, min(timeout, left))
            return True
        except client.HarpdUnavailable as exc:
            if not _worth_retrying(exc):
                return False
        if deadline - clock() <= pause:
            return False
        sleep(pause)
        pause = min(MAX_PAUSE_S, pause * 2)


def register_in_background(
    where: route.Route, message: RegisterMessage, timeout: float, environ: Mapping[str, str] = os.environ
) -> None:
    """Tell harpd about the new job from a detached child, so the user never waits for it.

    The child lets go of the terminal and of sbatch's pipes at once (a shell
    or ``$(...)`` waiting for end-of-file must not wait for it), waits for its
    parent to exit (at most ``PARENT_WAIT_S``: ``sbatch --wait`` keeps the
    parent for the job's whole run), tries for up to ``BUDGET_S`` (``send``),
    and exits; a failure is harpd's to log, never the user's problem.
    Waiting first keeps the child's work (a connection, on TCP four MUNGE
    round trips) off the user's time: on a busy node it would otherwise
    compete with sbatch and harp-submit for the CPU until both have ended.
    Without fork, registration is tried once in line, within ``TIMEOUT_S``.
    """
    if environ.get(SKIP_ENV) == "1":
        return
    try:
        parent_alive = os.pipe()  # the write end closes when the parent exits (never inherited by sbatch)
    except OSError:
        parent_alive = None
    try:
        pid = os.fork()
    except OSError:
        pid = 0
        inline = True
        for fd in parent_alive or ():
            os.close(fd)
        parent_alive = None
    else:
        inline = False
        if pid:
            if parent_alive is not None:
                os.close(parent_alive[0])  # the write end stays open until this process ends
            return
    if parent_alive is not None:
        os.close(parent_alive[1])
    try:
        if not inline:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            keep = parent_alive[0] if parent_alive is not None else 256
            os.closerange(3, keep)
            os.closerange(keep + 1, 256)
            if parent_alive is not None:
                _wait_for_parent(parent_alive[0], PARENT_WAIT_S)
            # not niced: on a busy node a niced child may not run before its budget ends
        if inline:
            client.ask(where, message, min(TIMEOUT_S, timeout))
        else:
            send(where, message, timeout, BUDGET_S)
    except BaseException:
        pass
    finally:
        if not inline:
            os._exit(0)


def _wait_for_parent(fd: int, limit: float) -> None:
    """Return once the other end of the pipe ``fd`` is closed (its holder ended), or after ``limit`` seconds."""
    import select  # in the child only

    try:
        select.select([fd], [], [], limit)
    finally:
        os.close(fd)
