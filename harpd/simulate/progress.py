"""A plain progress bar on stderr for long simulations (``simulate``'s ``progress`` callback).

Simulating a 77k-job trace under four policies takes minutes; a silent
terminal for that long looks like a hang.  Only drawn on a terminal, so logs
and pipes stay clean.  Drawn by ``harpd.progress`` (tqdm): the same bar as
``harp import``'s.
"""

from __future__ import annotations

from typing import TextIO

from harpd.progress import Bar


class TextBar(Bar):
    """``bar(done, total)``: redraws ``label  42%|####    | 42/100`` in place; a newline when done."""

    def __init__(self, label: str, stream: TextIO | None = None, enabled: bool = True) -> None:
        super().__init__(f"{label:<13}", stream=stream, enabled=None if enabled else False)
