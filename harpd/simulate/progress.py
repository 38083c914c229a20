"""A plain progress bar on stderr for long simulations (``simulate``'s ``progress`` callback).

Simulating a 77k-job trace under four policies takes minutes; a silent
terminal for that long looks like a hang.  Only drawn on a terminal, so logs
and pipes stay clean.
"""

from __future__ import annotations

import sys
from typing import TextIO


class TextBar:
    """``bar(done, total)``: redraws ``label [#####.....]  42%`` in place; a newline when done."""

    def __init__(self, label: str, stream: TextIO | None = None, enabled: bool = True, width: int = 30) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.label, self.width = label, width
        self.enabled = enabled and bool(getattr(self.stream, "isatty", lambda: False)())

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        frac = min(1.0, done / total) if total else 1.0
        fill = int(self.width * frac)
        self.stream.write(f"\r{self.label:<13} [{'#' * fill}{'.' * (self.width - fill)}] {frac:4.0%}")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()
