"""The one error type of harpd.dnn."""

from __future__ import annotations


class DnnError(ValueError):
    """A bad DNN description or config, phrased as the one line the user should read."""
