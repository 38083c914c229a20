"""Progress bars on stderr: one helper for every long command (``harp import``, ``harp replay``).

tqdm draws them (rate, time left, the terminal's width, redraws at most a
few times a second); harp only decides *whether*: by default only when the
stream is a terminal, so logs, pipes and cron mail stay free of ``\\r`` lines.
"""

from __future__ import annotations

import sys
from typing import TextIO

from tqdm import tqdm


def is_terminal(stream: TextIO) -> bool:
    return bool(getattr(stream, "isatty", lambda: False)())


class Bar:
    """A bar that is moved to absolute positions: ``to(done)`` or ``bar(done, total)``.

    ``enabled``: None draws only on a terminal, True always, False never.
    Positions that go backwards are ignored, so the bar only moves forward.
    """

    def __init__(
        self,
        label: str,
        *,
        total: float | None = None,
        stream: TextIO | None = None,
        enabled: bool | None = None,
        unit: str = "it",
        unit_scale: bool = False,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = is_terminal(self.stream) if enabled is None else enabled
        self._bar = tqdm(
            total=total,
            desc=label,
            file=self.stream,
            unit=unit,
            unit_scale=unit_scale,
            disable=not self.enabled,
            mininterval=0.2,
            leave=True,
            dynamic_ncols=True,
        )

    def to(self, done: float, total: float | None = None) -> None:
        if not self.enabled:
            return
        step = done - self._bar.n
        if total is not None and total != self._bar.total:  # news: draw now, whatever the interval
            self._bar.total = total
            self._bar.n += max(step, 0)
            self._bar.refresh()
        elif step > 0:
            self._bar.update(step)

    def __call__(self, done: float, total: float) -> None:
        """The ``progress(done, total)`` callback form; closes the bar when done reaches total."""
        self.to(done, total)
        if done >= total:
            self.close()

    def note(self, text: str) -> None:
        """A short text after the figures (e.g. ``12,345 records``)."""
        if self.enabled:
            self._bar.set_postfix_str(text, refresh=False)

    def close(self) -> None:
        self._bar.close()
