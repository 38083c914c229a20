"""The only place harp talks to Slurm: pick a backend with ``get_backend``.

Importing this package is cheap (the CLI backend loads on first use), so
modules that only need ``SlurmError`` or the typed records (``JobInfo``,
``PartitionInfo``) pay nothing.
"""

from __future__ import annotations

from harpd.config import HarpSettings, SlurmSettings
from harpd.slurm.base import JobChanges, JobInfo, PartitionInfo, SlurmBackend, SlurmError

__all__ = ["get_backend", "SlurmBackend", "SlurmError", "PartitionInfo", "JobInfo", "JobChanges"]


def get_backend(settings: HarpSettings | SlurmSettings) -> SlurmBackend:
    """The backend named by ``slurm.backend``: ``cli`` (default) or ``pyslurm``.

    ``pyslurm`` is only recognised so that choosing it fails with a clear
    reason instead of a traceback: PyPI's pyslurm tracks one Slurm release
    (25.11) and cannot be built against the 22.05 this project supports.
    """
    s = settings.slurm if isinstance(settings, HarpSettings) else settings
    name = str(s.backend).strip().lower()
    if name == "cli":
        from harpd.slurm.cli_backend import CliBackend

        return CliBackend(s)
    if name == "pyslurm":
        try:
            import pyslurm  # noqa: F401
        except ImportError:
            raise SlurmError(
                "slurm.backend = 'pyslurm' but pyslurm is not importable; install the pyslurm "
                "matching your Slurm or set slurm.backend = 'cli'"
            ) from None
        raise SlurmError("the pyslurm backend is not implemented in this harp; set slurm.backend = 'cli'")
    raise SlurmError(f"unknown slurm.backend {s.backend!r}; use 'cli' (or 'pyslurm')")
