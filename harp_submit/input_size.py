"""The size of a job's input at submission: stat calls only, bounded.

Memory and time of many programs grow with what they read, and harpd's
workflow model already sizes tasks by their input (Nextflow's ``rchar``).
At submission the input is not read yet, so harp-submit sums the sizes of
the regular files the job names:

* the words of the script's command lines (``harp_submit.request``'s first
  lines, the ``--wrap`` command) that name an existing regular file,
  relative to the job's working directory; ``--opt=FILE`` counts its value;
  the first word of a line is the program, not an input, and is skipped, and
  so is a word naming an interpreter or launcher after it (``srun … /opt/bin/python3
  -m pkg``: a 7 MB interpreter is no input of the job, #51);
* for a Nextflow task (``sbatch .command.run`` in the task's work
  directory), only the files staged in that directory (the wrapper's lines
  are Nextflow's own): one listing of it, never a walk below it, the task's
  own ``.command.*``/``.exitcode`` files left out.

Bounded so the submission stays within harp-submit's overhead: at most
``MAX_STATS`` ``stat`` calls and ``BUDGET_S`` seconds (a slow shared file
system); past either, or on any error, the size is unknown (None), never
a partial sum that would read as a small input.  No file is opened.
"""

from __future__ import annotations

import os
import stat
import time

MAX_STATS = 256
BUDGET_S = 0.005
NEXTFLOW_WRAPPER = ".command.run"
#: programs a command line runs after a launcher: the program, never the job's input
#: (``re`` is not imported: harp-submit's cli_filter path loads only fast modules)
_PROGRAMS = frozenset(
    "perl Rscript R julia ruby node java bash sh srun mpirun mpiexec env apptainer singularity torchrun numactl"
    " taskset stdbuf time timeout nohup".split()
)


def _is_program(name: str) -> bool:
    """``python``, ``python3.11``, ``pypy3`` or another interpreter or launcher."""
    if name in _PROGRAMS:
        return True
    for prefix in ("python", "pypy"):
        if name.startswith(prefix) and not name[len(prefix) :].strip("0123456789."):
            return True
    return False


class _Over(Exception):
    """The bound was reached: the size is unknown."""


def _candidates(commands: list[str]) -> list[str]:
    """Words of the command lines that could name a file, in order, each once."""
    seen: set[str] = set()
    out: list[str] = []
    for line in commands:
        for word in line.split()[1:]:
            word = word.strip("'\"();|&<>`")
            if word.startswith("-"):
                word = word.partition("=")[2]
            if not word or "$" in word or "*" in word or word in seen or "=" in word.split("/", 1)[0]:
                continue
            if _is_program(word.rsplit("/", 1)[-1]):
                continue
            seen.add(word)
            out.append(word)
    return out


def input_bytes(commands: list[str], cwd: str, script_name: str | None) -> int | None:
    """Total bytes of the regular files the job names (and a Nextflow task has staged); None when unknown."""
    deadline = time.monotonic() + BUDGET_S
    stats = 0
    seen: set[tuple[int, int]] = set()
    total = 0

    def size(path: str) -> None:
        nonlocal stats, total
        stats += 1
        if stats > MAX_STATS or time.monotonic() > deadline:
            raise _Over
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            return
        if stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size

    try:
        if script_name != NEXTFLOW_WRAPPER:
            for word in _candidates(commands):
                size(os.path.join(cwd, os.path.expanduser(word)))
        else:
            with os.scandir(cwd) as entries:
                for entry in entries:
                    if not entry.name.startswith(".command.") and entry.name != ".exitcode":
                        size(entry.path)
    except (_Over, OSError):
        return None
    return total
