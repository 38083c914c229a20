"""Keep every run's output of a job harp may run again: ``--open-mode=append``.

A job requeued in place runs again under its id and writes to the same
``--output``/``--error`` files, which Slurm opens truncated by default
(``JobFileAppend=0``): the messages of the run that ran out, the ones that say
why, are gone when the next run starts.  So when harp may recover the job
(harp changed its request, or the script says ``#HARP retry``), the user set
no open mode, and every output path is the job's own (``%j``/``%J`` in it, or
Slurm's default ``slurm-%j.out``), harp-submit adds ``--open-mode=append``:
those files are only ever reused by the job's own later runs, so appending
changes nothing else.  A fixed path (no ``%j``) is left alone: appending
there would mix in whatever an earlier job left.
"""

from __future__ import annotations

from .harp_lines import retry_choice

TYPE_CHECKING = False  # typing costs milliseconds to import; checkers still see these
if TYPE_CHECKING:
    from .request import Request

OPTION = "--open-mode=append"

# per job: the job id in the name (arrays are never recovered, so %A/%a do not count)
_PER_JOB = ("%j", "%J")


def _own_file(path: str | None) -> bool:
    if path is None:
        return True  # slurm-%j.out
    if path in ("/dev/null", "none"):
        return True
    return any(p in path for p in _PER_JOB)


def keeps_output(request: Request, changed: bool) -> bool:
    """Whether the submission gets ``--open-mode=append`` (see the module doc).

    ``request``: the merged ``Request`` (command line, ``#SBATCH``, ``SBATCH_*``);
    ``changed``: harp changed its request (recovery then covers it unasked).
    """
    choice = retry_choice(request.harp_lines)
    if choice is False or not (changed or choice):
        return False
    if request.has("open-mode") or request.has("array"):
        return False
    return _own_file(request.value("output")) and _own_file(request.value("error"))


def with_append(argv: list[str]) -> list[str]:
    """``argv`` with ``--open-mode=append`` first (an option before any script path)."""
    return [OPTION, *argv]
