"""Whether harp is switched off for a submission, decided before anything else is imported.

``HARP_DISABLE=1`` is how a user (or a workflow manager, on every task) says
"plain sbatch, please": that path must cost next to nothing, so it is
decided here, from the environment and a glance at argv, by a module that
imports nothing.  Anything the glance cannot settle (a ``--harp-...`` word,
``--help``/``--version``, whose output harp extends) goes the full way.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs milliseconds to import; checkers still see these
if TYPE_CHECKING:
    from collections.abc import Mapping

_DISABLE_VALUES = ("1", "yes", "true", "on")
#: long options whose handling harp-submit changes even when off (getopt accepts unique prefixes)
_HARP_HANDLES = ("help", "usage", "version")


def disabled(environ: Mapping[str, str]) -> bool:
    """Whether ``HARP_DISABLE`` turns harp off for this submission."""
    return environ.get("HARP_DISABLE", "").strip().lower() in _DISABLE_VALUES


def plain(args: list[str]) -> bool:
    """Whether sbatch gets ``args`` exactly as given when harp is off (harp's full reading not needed).

    Cautious: any word that could be a harp option (``--h...``: ``--harp-x``,
    ``--ha``), ask for help, usage or the version (``-h``, ``-V``, ``--vers``,
    short options bundled with them) needs the full reading, even after the
    script name, where it is the script's own argument; that only costs time.
    """
    for a in args:
        if a.startswith("--"):
            name = a[2:].split("=", 1)[0]
            if name.startswith("h") or (name and any(w.startswith(name) for w in _HARP_HANDLES)):
                return False
        elif a.startswith("-") and ("h" in a or "V" in a or "?" in a):
            return False
    return True
