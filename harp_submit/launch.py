"""``harp-submit``'s entry point: plain sbatch at once when harp is off, else the full flow.

Every submission pays this program's start-up, so the path taken decides
what is imported: with ``HARP_DISABLE`` set (and nothing in argv for harp to
read, ``off.plain``) only the module that runs sbatch is loaded; otherwise
``cli``, with everything harp's decision needs.  The process is never
replaced by sbatch (``sbatch_run.mark_process``).
"""

from __future__ import annotations

import os
import sys

from .off import disabled, plain


def main() -> int:
    """Run harp-submit with this process's argv and environment; ends the process with sbatch's code."""
    args = sys.argv[1:]
    if disabled(os.environ) and plain(args):
        code = untouched(args)
        os._exit(code & 0xFF)  # nothing buffered: sbatch_run writes unbuffered
    from .cli import main as full

    return full()


def untouched(args: list[str]) -> int:
    """sbatch with ``args`` as given: what ``cli.Submit.untouched`` does, without harp's reading of argv."""
    from .sbatch_run import SpawnError, find_sbatch, mark_process, spawn, write

    sbatch = find_sbatch(os.environ)
    if sbatch is None:
        write(2, "harp: cannot find sbatch in PATH (set HARP_SBATCH to its path)\n")
        return 127
    mark_process()
    try:
        return spawn(sbatch, args, os.environ, None, None)[0]
    except SpawnError as exc:
        write(2, f"harp: cannot run {sbatch}: {exc}\n")
        return 127


if __name__ == "__main__":
    sys.exit(main())
