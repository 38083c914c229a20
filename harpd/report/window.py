"""The report's time window: ``--since``/``--until`` as people type them.

Admins think in "the last week" as often as in dates, so both spellings are
accepted: ISO dates or datetimes (local time unless an offset is given) and
relative spans counted back from now (``7d``, ``12h``, ``2w``).  Parsing lives
apart from the CLI so the same rules apply wherever a window is read.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime

_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)
_OPEN = {"all", "ever", "beginning"}


@dataclass(frozen=True, slots=True)
class Window:
    """Jobs that ended in ``[since, until)``; ``None`` leaves that side open."""

    since: float | None
    until: float | None

    def describe(self) -> str:
        """'between A and B', 'since A', 'before B' or 'at any time' (local time)."""

        def fmt(t: float) -> str:
            return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M")

        if self.since is not None and self.until is not None:
            return f"between {fmt(self.since)} and {fmt(self.until)}"
        if self.since is not None:
            return f"since {fmt(self.since)}"
        if self.until is not None:
            return f"before {fmt(self.until)}"
        return "at any time"


def parse_when(text: str, now: float | None = None, *, option: str = "--since") -> float | None:
    """Epoch seconds for ``text``; ``None`` for an open end (``all``).

    Raises ValueError with the one line the user should read.
    """
    now = time.time() if now is None else now
    t = text.strip()
    if not t:
        raise ValueError(f"{option}: empty value; give a date like 2024-05-01 or a span like 7d")
    low = t.lower()
    if low in _OPEN:
        return None
    if low == "now":
        return now
    m = _RELATIVE.match(t)
    if m:
        return now - float(m.group(1)) * _UNIT_S[m.group(2).lower()]
    try:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00") if t.endswith(("Z", "z")) else t)
    except ValueError:
        raise ValueError(
            f"{option}: cannot read {text!r}; give an ISO date (2024-05-01, "
            "2024-05-01T08:00) or a span back from now (30m, 12h, 7d, 2w), or 'all'"
        ) from None
    return dt.timestamp()


def parse_window(
    since: str | None, until: str | None, default_days: int, now: float | None = None
) -> Window:
    """The window from the two options; default: the last ``default_days`` days."""
    now = time.time() if now is None else now
    s = parse_when(since, now, option="--since") if since is not None else now - default_days * 86400.0
    u = parse_when(until, now, option="--until") if until is not None else None
    if s is not None and u is not None and s >= u:
        raise ValueError(
            f"--since ({datetime.fromtimestamp(s):%Y-%m-%d %H:%M}) is not before --until "
            f"({datetime.fromtimestamp(u):%Y-%m-%d %H:%M}); swap them or widen the window"
        )
    return Window(s, u)
