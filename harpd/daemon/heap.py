"""Keep the loaded models and history out of Python's garbage collector's full scans.

A full (generation 2) collection walks every object the process holds: with a
site's models and the live history loaded that is hundreds of thousands of
objects, and the walk took 280-670 ms here, during which no request is
answered (it holds the GIL).  Those objects live until the next reload, so
harpd collects once after loading them and freezes what is left
(``gc.freeze``): later collections walk only what requests create.

A reload first unfreezes, so the models it replaces can be collected, then
settles again: one full collection per reload, off the request path when the
reload runs in the background, instead of one every few thousand requests.
"""

from __future__ import annotations

import gc
import logging
from typing import Any

__all__ = ["Settling", "settle"]

log = logging.getLogger("harpd")


def settle() -> int:
    """Collect everything collectable now, then freeze the rest; returns how many objects were frozen."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.debug("heap settled: %d objects left out of later collections", frozen)
    return frozen


class Settling:
    """The live predictor's ``reload``, followed by ``settle()`` (what the trainer and SIGHUP call)."""

    def __init__(self, predictor: Any) -> None:
        self._predictor = predictor

    def reload(self) -> Any:
        try:
            return self._predictor.reload()
        finally:
            settle()
