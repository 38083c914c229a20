"""harp-submit: a drop-in ``sbatch`` that right-sizes resource requests.

Only the standard library may be imported from this package: it sits on every
user's submission path and must start in a few milliseconds.
"""

__version__ = "0.1.0"
