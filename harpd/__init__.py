"""harpd: the harp daemon, its store, models, Slurm access and admin CLI."""

from harp_submit import __version__

__all__ = ["__version__"]
