"""Where the benches find the real traces, and the one line they print when a trace is not there.

The full traces are evaluation data: they live beside the development
checkout (``../shared/traces``) and are never committed, so a fresh clone has
none.  A bench takes its folder from its option (``--traces DIR``, or
``--trace FILE`` for one file), else ``HARP_TRACES``, else ``../shared/traces``
when that exists; a trace it cannot find ends it with one line that names the
file and where to download it, exit 2 (never a traceback, never a run on
something else that would print different figures).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path

ENV = "HARP_TRACES"
REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "traces"  # the development machines' copy

PWA = "https://www.cs.huji.ac.il/labs/parallel/workload/"
PWA_NAME = "the Parallel Workloads Archive"
CEDAR = "cedar-2021.sacct.psv.gz"
SIZEY = (
    "the Sizey paper's repository, https://github.com/dos-group/sizey (data/trace_*.csv, gzipped as "
    "workflows/nf-core-*.trace.csv.gz)"
)
MILA = (
    "the Mila slurm-queue-time-pred data set, https://github.com/mila-iqia/slurm-queue-time-pred, as a sacct -P export"
)
PAGES = {  # each SWF log's page in the archive
    "KTH-SP2-1996-2.1-cln.swf.gz": "l_kth_sp2/index.html",
    "CTC-SP2-1996-3.1-cln.swf.gz": "l_ctc_sp2/index.html",
    "HPC2N-2002-2.2-cln.swf.gz": "l_hpc2n/index.html",
    "METACENTRUM-2009-2.swf.gz": "l_metacentrum/index.html",
}


def where(names: list[str]) -> str:
    """Which files, and where to download them: one log's page, or the archive for several."""
    swf = [n for n in names if n != CEDAR and not n.startswith("workflows/")]
    parts = []
    flows = [n for n in names if n.startswith("workflows/")]
    if flows:
        parts.append(f"{', '.join(flows)} (from {SIZEY})")
    if len(swf) == 1:
        parts.append(f"{swf[0]} (from {PWA_NAME}, {PWA}{PAGES.get(swf[0], '')})")
    elif swf:
        parts.append(f"{', '.join(swf)} (from {PWA_NAME}, {PWA})")
    if CEDAR in names:
        parts.append(f"{CEDAR} (from {MILA})")
    return " and ".join(parts) or "its traces"


def traces_dir(given: str | os.PathLike[str] | None = None) -> Path | None:
    """The traces folder: ``given`` (the option), else ``$HARP_TRACES``, else ../shared/traces if it exists."""
    if given:
        return Path(given)
    env = os.environ.get(ENV)
    if env:
        return Path(env)
    return SHARED if SHARED.is_dir() else None


def missing(bench: str, names: Iterable[str], folder: Path | None) -> SystemExit:
    """The one line (on stderr) and exit 2 for traces not found; ``raise`` what this returns."""
    names = list(names)
    it = "it" if len(names) == 1 else "them"
    if folder is None:
        print(
            f"{bench}: needs {where(names)}; no traces folder: download {it} into a folder "
            f"and pass --traces DIR or set {ENV}=DIR",
            file=sys.stderr,
        )
    else:
        print(
            f"{bench}: {folder} holds {'no' if len(names) == 1 else 'none of'} {where(names)}; download {it} there "
            f"or point --traces / {ENV} at the folder that does",
            file=sys.stderr,
        )
    return SystemExit(2)


def trace_file(
    bench: str,
    name: str,
    given_file: str | os.PathLike[str] | None = None,
    given_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """The one trace a bench replays: ``--trace FILE`` if given, else ``name`` in the traces folder.

    Exits 2 with one line when the file is not there.
    """
    if given_file:
        path = Path(given_file)
        if not path.is_file():
            print(f"{bench}: trace {path} not found; pass --trace FILE, e.g. {where([name])}", file=sys.stderr)
            raise SystemExit(2)
        return path
    folder = traces_dir(given_dir)
    if folder is None or not (folder / name).is_file():
        raise missing(bench, [name], folder)
    return folder / name


def traces_folder(bench: str, names: Iterable[str], given_dir: str | os.PathLike[str] | None = None) -> Path:
    """The folder of a bench that replays several traces: it must hold at least one of ``names``.

    Which of them are missing is the bench's own business (it prints a failed
    figure for each); a folder with none of them exits 2 with one line.
    """
    names = list(names)
    folder = traces_dir(given_dir)
    if folder is None or not any((folder / n).is_file() for n in names):
        raise missing(bench, names, folder)
    return folder
