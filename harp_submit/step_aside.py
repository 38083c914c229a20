"""When harp leaves a job exactly as the user wrote it, and the one line that says why.

harp-submit (in front of sbatch) and harp-filter (the cli_filter helper,
inside sbatch) must step aside for the same reasons, in the same words:
harp turned off (``HARP_DISABLE``, ``#HARP off``), a het job, a script too
large for slurmctld, and harpd absent, slow or talking nonsense.  The rules
live here once; each entry point decides only how its one line reaches the
user (harp-submit's stderr, the plugin's ``say`` line).
"""

from __future__ import annotations

import os

from . import client, directives, harp_lines, route
from .off import disabled  # noqa: F401  (step_aside.disabled: the one rule, shared with harp-filter)

TYPE_CHECKING = False  # typing costs milliseconds to import; checkers still see these
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    from .wire import JobRequestDict

UNCHANGED = "submitting your job unchanged"
MAX_SCRIPT = 4 << 20  # bytes; slurmctld's default max_script_size is 4 MB


class StepAside(Exception):
    """harp leaves this job alone; ``reason`` is one line for the user, or None to stay silent.

    ``detail`` says why when harp stays silent (sbatch reports the problem
    itself, or the user opted out): a dry run shows it, since nothing else will.
    """

    def __init__(self, reason: str | None = None, detail: str | None = None):
        super().__init__(reason or detail or "")
        self.reason = reason
        self.detail = detail


def resolve_script(name: str, chdir: str | None, path_env: str | None) -> str | None:
    """The file sbatch will read for script argument ``name`` (its ``search_path``).

    As verified with sbatch 22.05: a name starting with ``/`` or ``.`` is
    opened as given (``./x`` relative to the current directory, even with
    ``--chdir``); any other name (``x``, ``sub/x``) is looked for in the
    ``--chdir`` directory (else the current one), then along PATH.  None when
    sbatch will not find a file either.
    """
    here = os.getcwd()

    def exists(p: str) -> bool:
        return os.path.exists(p) and not os.path.isdir(p)

    if name.startswith(("/", ".")):
        return name if exists(name) else None
    base = os.path.join(here, chdir) if chdir else here
    for d in [base, *(path_env.split(":") if path_env else [])]:
        if not d:
            continue
        cand = os.path.join(os.path.join(base, d) if d.startswith(".") else d, name)
        if exists(cand):
            return cand
    return None


def script_directives(text: str) -> tuple[directives.Script, list[str]]:
    """The script's directives and ``#HARP`` lines; StepAside (silently) when it opts out.

    A het job (harp sizes single jobs only) or a ``#HARP off`` line: the
    user has said nothing wrong, so there is nothing to tell them.
    """
    script = directives.parse(text)
    if script.hetjob:
        raise StepAside(detail="a het job (harp sizes single jobs only)")
    lines = harp_lines.find(text)
    if harp_lines.is_off(lines):
        raise StepAside(detail="the script has a '#HARP off' line")
    return script, lines


def ask_harpd(
    job: JobRequestDict,
    environ: Mapping[str, str],
    say: Callable[[str], None],
    dry_run: bool = False,
    chosen: tuple[route.Route, list[str]] | None = None,
) -> dict[str, Any]:
    """harpd's answer to ``predict`` for ``job``, within HARP_TIMEOUT (``dry_run``: harpd counts no submission).

    A bad HARP_TIMEOUT is said and the default used.  When harpd gives no
    usable answer, its reason is said with ``UNCHANGED`` and
    ``client.HarpdUnavailable`` raised again for the caller to step aside.
    ``chosen``: ``route.choose(environ)``'s answer when the caller needs the
    route again (registration), so the config file is read once.
    """
    timeout, problem = client.timeout_s(environ)
    if problem:
        say(problem)
    where, problems = chosen if chosen is not None else route.choose(environ)
    for problem in problems:
        say(problem)
    try:
        return client.ask(where, {"op": "predict", "job": job, **({"dry_run": True} if dry_run else {})}, timeout)
    except client.HarpdUnavailable as exc:
        say(f"{exc.reason}; {UNCHANGED}")
        raise
